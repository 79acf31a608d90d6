// Protocol values mirrored from p4ctl.protocol (Kind, Flag, AggState, Policy,
// DropReason, PS_WORKER_ID, VERSION) and p4ctl.rule.Outcome; the consistency
// test compares every prefix group with its Python enum in both directions.
// The rest are the pipeline's own vocabulary between its controls.
#ifndef INASCHED_CONSTANTS_P4
#define INASCHED_CONSTANTS_P4

const bit<8> VERSION = 1;
const bit<8> PS_WORKER_ID = 255;

const bit<8> KIND_GRADIENT = 0;
const bit<8> KIND_RESULT = 1;
const bit<8> KIND_TO_PS = 2;
const bit<8> KIND_PS_RESULT = 3;

const bit<16> FLAG_RESEND = 0x01;
const bit<16> FLAG_BYPASSED = 0x02;
const bit<16> FLAG_EVICTED = 0x04;
const bit<16> FLAG_COMPLETE = 0x08;
const bit<16> FLAG_RAW_FLOAT = 0x10;
const bit<16> FLAG_COLLISION = 0x20;
const bit<16> FLAG_FLUSHED = 0x40;

const bit<8> STATE_FREE = 0;
const bit<8> STATE_PARTIAL = 1;
const bit<8> STATE_COMPLETE = 2;
const bit<8> STATE_FLUSHED = 3;

const bit<8> POLICY_STATIC = 0;
const bit<8> POLICY_ATP = 1;
const bit<8> POLICY_ESA = 2;

const bit<8> DROP_BAD_LENGTH = 0;
const bit<8> DROP_BAD_VERSION = 1;
const bit<8> DROP_BAD_KIND = 2;
const bit<8> DROP_BAD_LANES = 3;
const bit<8> DROP_UNKNOWN_JOB = 4;
const bit<8> DROP_BAD_WORKER = 5;
const bit<8> DROP_BAD_BITMAP = 6;
const bit<8> DROP_UNREGISTERED_SOURCE = 7;
const bit<8> DROP_BAD_AGG_INDEX = 8;
const bit<8> DROP_STALE = 9;
const bit<8> DROP_INJECTED_LOSS = 10;
const bit<8> DROP_WRONG_PORT = 11;
// Traffic that is not the aggregation protocol: dropped, but no protocol
// counter describes it (the soft switch never sees it either).
const bit<8> UNCOUNTED_DROP = 0xff;

// Which case of the rule a packet hit (values are the pipeline's own; 0 is none).
const bit<8> OUTCOME_CLAIMED = 1;
const bit<8> OUTCOME_AGGREGATED = 2;
const bit<8> OUTCOME_COMPLETED = 3;
const bit<8> OUTCOME_DUPLICATE = 4;
const bit<8> OUTCOME_COLLISION = 5;
const bit<8> OUTCOME_RAW_BYPASS = 6;
const bit<8> OUTCOME_PREEMPTED = 7;
const bit<8> OUTCOME_RESULT_RESENT = 8;
const bit<8> OUTCOME_RESEND_TO_PS = 9;
const bit<8> OUTCOME_FLUSHED = 10;
const bit<8> OUTCOME_PS_RESULT = 11;
const bit<8> OUTCOME_STALE = 12;

// What the lane controls do with the register cell and the packet's lane.
const bit<8> LANE_OP_NONE = 0;
const bit<8> LANE_OP_WRITE = 1;  // claim: cell := packet
const bit<8> LANE_OP_ADD = 2;    // aggregate: cell += packet; packet := cell
const bit<8> LANE_OP_READ = 3;   // send the held sum: packet := cell
const bit<8> LANE_OP_SWAP = 4;   // preempt: packet := cell (the evicted sum); cell := packet

// Where the packet that finishes the pass goes (0: nowhere, it is dropped).
const bit<8> DEST_NONE = 0;
const bit<8> DEST_PS = 1;        // the job's ps_port
const bit<8> DEST_GROUP = 2;     // the job's multicast group
const bit<8> DEST_SENDER = 3;    // the sender's port (static result re-sent)
const bit<8> DEST_RECIRC = 4;    // another pass, routed by meta.route

// How Emit rewrites the header of the packet that leaves.
const bit<8> EMIT_NONE = 0;      // unchanged (PS_RESULT multicast)
const bit<8> EMIT_BYPASS = 1;    // the packet itself, kind TO_PS, flags |= emit_flags
const bit<8> EMIT_SUM = 2;       // the aggregator's sum for the packet's (job, seq)
const bit<8> EMIT_EVICTED = 3;   // the sum of the holder's (job, seq)

// What a recirculated pass does (section 6 of p4/PROTOCOL.md).
const bit<8> ROUTE_NONE = 0;
const bit<8> ROUTE_EVICTED_TO_PS = 1;    // the evicted sum, to the holder's PS
const bit<8> ROUTE_BYPASS_TO_PS = 2;     // the packet itself, BYPASSED, to its PS
const bit<8> ROUTE_RESULT_TO_GROUP = 3;  // a copy of a complete sum, as RESULT, to the workers
const bit<8> ROUTE_ESA_COMPLETE = 4;     // a one-worker esa sum: to the PS, then to the workers

// v1model instance types as BMv2 numbers them (standard_metadata.instance_type).
const bit<32> INSTANCE_NORMAL = 0;
const bit<32> INSTANCE_INGRESS_CLONE = 1;
const bit<32> INSTANCE_EGRESS_CLONE = 2;
const bit<32> INSTANCE_RECIRC = 4;
const bit<32> INSTANCE_REPLICATION = 5;

const bit<16> ETHERTYPE_IPV4 = 0x0800;
const bit<8> IPPROTO_UDP = 17;
// Replicas leave with a broadcast destination MAC: set_endpoint carries no MAC
// (see p4/README.md, known gaps), and a host takes a broadcast frame whose IP
// destination is its own.
const bit<48> BROADCAST_MAC = 0xffffffffffff;

#endif
