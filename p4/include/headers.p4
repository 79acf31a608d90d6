// Packet headers and the per-packet metadata shared by the controls.
#ifndef INASCHED_HEADERS_P4
#define INASCHED_HEADERS_P4

header ethernet_h {
    bit<48> dst_addr;
    bit<48> src_addr;
    bit<16> ether_type;
}

header ipv4_h {
    bit<4> version;
    bit<4> ihl;
    bit<8> diffserv;
    bit<16> total_len;
    bit<16> identification;
    bit<3> flags;
    bit<13> frag_offset;
    bit<8> ttl;
    bit<8> protocol;
    bit<16> hdr_checksum;
    bit<32> src_addr;
    bit<32> dst_addr;
}

header udp_h {
    bit<16> src_port;
    bit<16> dst_port;
    bit<16> length;
    bit<16> checksum;
}

// The 24-byte aggregation header: the same fields, order and widths as
// p4ctl.protocol.HEADER_FIELDS (the consistency test compares them; a signed
// struct code there is an int<> here).
header agg_h {
    bit<8> version;
    bit<8> kind;
    bit<16> flags;
    bit<16> job;
    bit<8> worker;
    bit<8> fan_in;
    bit<32> agg_index;
    bit<32> seq;
    bit<8> shadow;
    int<8> exponent;
    bit<16> lanes;
    bit<32> bitmap;
}

// One int32 lane; a header stack of LANES of them follows agg_h.
header lane_h {
    bit<32> value;
}

const bit<16> AGG_UDP_LENGTH = 8 + 24 + 4 * LANES;

struct headers_t {
    ethernet_h ethernet;
    ipv4_h ipv4;
    udp_h udp;
    agg_h agg;
    lane_h[LANES] lanes;
}

// One row of job_table (set_job's parameters).
struct job_config_t {
    bool known;
    bit<8> policy;
    bit<8> fan_in;
    bit<32> part_base;
    bit<32> part_size;
    bit<16> mcast_group;
    bit<9> ps_port;
}

// The scalar registers of one aggregator.
struct aggregator_t {
    bit<16> job;
    bit<32> seq;
    bit<8> state;
    bit<32> bitmap;
    bit<8> count;
    bit<8> exponent;
    bit<8> priority;
}

struct metadata_t {
    bool drop;
    bit<8> drop_reason;
    bit<16> job;                // the packet's own job, before Emit rewrites the header
    job_config_t cfg;
    bit<8> job_priority;
    bit<9> sender_port;
    aggregator_t held;          // the aggregator as this pass found it
    aggregator_t next;          // what this pass writes back
    bit<8> outcome;
    bit<8> lane_op;
    bit<8> dest;
    bit<8> emit;
    bit<8> emit_kind;
    bit<16> emit_flags;
    bit<32> sum_bitmap;
    bit<8> sum_exponent;
    bool clone_i2e;             // clone the packet as received (its own lanes)
    bool e2e_result;            // clone the complete sum after egress, for the workers
    // Survive clones and recirculations: what the next pass does, and where the
    // switch was addressed (everything it sends comes from there).
    @field_list(FIELD_LIST_ROUTE)
    bit<8> route;
    @field_list(FIELD_LIST_ROUTE)
    bit<8> clone_route;
    @field_list(FIELD_LIST_ROUTE)
    bit<32> switch_addr;
}

#endif
