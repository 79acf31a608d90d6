// One lane of one aggregator: the arithmetic on a register cell and the
// packet's lane for each lane op. Lanes (generated from one template by
// p4ctl.build) instantiates it once per lane next to that lane's register.
#ifndef INASCHED_LANE_P4
#define INASCHED_LANE_P4

control LaneOp(inout bit<32> packet_lane, inout bit<32> cell, in bit<8> op) {
    apply {
        bit<32> held = cell;
        if (op == LANE_OP_WRITE) {
            cell = packet_lane;
        } else if (op == LANE_OP_ADD) {
            // Wraps like the int32 sum of the Python rule; the workers' exponent
            // choice keeps n-way sums from overflowing.
            cell = held + packet_lane;
            packet_lane = cell;
        } else if (op == LANE_OP_READ) {
            packet_lane = held;
        } else if (op == LANE_OP_SWAP) {
            cell = packet_lane;
            packet_lane = held;
        }
    }
}

#endif
