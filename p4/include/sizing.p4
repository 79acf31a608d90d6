// Compile-time sizes of the inasched pipeline. Each one has a Python twin that
// tests/p4/test_p4_consistency.py holds it equal to (p4ctl.protocol, p4ctl.p4info);
// change both, then `make p4info` and `make p4`.
#ifndef INASCHED_SIZING_P4
#define INASCHED_SIZING_P4

// Lanes per packet (k): a Tofino register ALU pass gives 64 lanes of 32 bits, and
// every target of the project must run the same k (p4info.DEFAULT_LANES).
#define LANES 64

// Aggregators in the shared pool: ATP's Tofino prototype fits about 20,000 of 62
// lanes, rounded to 20,480 of 64 (p4info.DEFAULT_AGGREGATORS). Overridable
// (p4c -DAGGREGATORS=n) so that test vectors written for a small pool run as
// written; the P4Info is then that sizing's, not the committed one.
#ifndef AGGREGATORS
#define AGGREGATORS 20480
#endif

// Job table entries and per-job register cells: 1 KiB per 8-bit per-job register
// fits any target we know of (protocol.MAX_JOBS).
#define MAX_JOBS 1024

// Workers of one job: the contributor bitmap is one 32-bit register cell
// (protocol.MAX_WORKERS).
#define MAX_WORKERS 32

// Cells of the drop_reason counter: one per protocol.DropReason.
#define DROP_REASONS 12

// Worker table entries: every (job, worker) plus each job's PS, registered as
// worker 255 (p4info.WORKER_TABLE_SIZE = MAX_JOBS * (MAX_WORKERS + 1)).
#define WORKER_TABLE_SIZE 33792

// Port table entries: v1model ports are 9 bits and 511 is BMv2's drop port
// (p4info.MAX_PORTS).
#define PORT_TABLE_SIZE 511

// UDP port the switch receives the aggregation protocol on: the soft switch's
// default `--data` port, so workers need no per-target setting.
#define AGG_UDP_PORT 9555

// The one clone session: every clone is recirculated and routed by the job
// table on its next pass, so the session's own port is never used and one
// session serves every job (p4ctl.p4info.CLONE_SESSION; SwitchClient installs
// it with its first job).
#define CLONE_SESSION 1

// Index of the @field_list that survives a clone or a recirculation: the
// route of the next pass and the address the switch was reached at.
#define FIELD_LIST_ROUTE 1

#endif
