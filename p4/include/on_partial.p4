// A contribution to a PARTIAL aggregator that holds its own (job, seq): the
// first table of p4/PROTOCOL.md section 5, shared by every policy
// (p4ctl.rule._on_partial). On the n-th contribution it only marks the
// aggregator COMPLETE and the outcome COMPLETED: what completion sends is the
// calling policy's business.
#ifndef INASCHED_ON_PARTIAL_P4
#define INASCHED_ON_PARTIAL_P4

control OnPartial(inout headers_t hdr, inout metadata_t meta, in bit<8> flushed_state) {
    // The sender is in the sum (or cannot be added) and still has no result:
    // someone is missing, so the PS finishes this sequence with the held sum.
    action flush() {
        meta.lane_op = LANE_OP_READ;
        out_sum(meta, OUTCOME_FLUSHED, DEST_PS, KIND_TO_PS, FLAG_FLUSHED,
                meta.held.bitmap, meta.held.exponent);
    }

    apply {
        bool resend = (hdr.agg.flags & FLAG_RESEND) != 0;
        // A side contribution cannot be added: raw floats, or fixed point at
        // another exponent than the sum's.
        bool side = (hdr.agg.flags & FLAG_RAW_FLOAT) != 0
                    || (bit<8>)hdr.agg.exponent != meta.held.exponent;
        if ((meta.held.bitmap & hdr.agg.bitmap) != 0) {
            if (!resend) {
                out_nothing(meta, OUTCOME_DUPLICATE);
            } else {
                flush();
            }
        } else if (side) {
            if (!resend) {
                out_bypass(meta, OUTCOME_RAW_BYPASS, FLAG_BYPASSED);
            } else {
                // Two packets leave: the held sum here, and the packet itself,
                // BYPASSED, through a clone of it as received.
                flush();
                meta.clone_i2e = true;
                meta.clone_route = ROUTE_BYPASS_TO_PS;
            }
        } else {
            // The exponent is the sum's already (else the contribution is a side
            // one), so rule._add's max() leaves it as it is.
            meta.next.bitmap = meta.held.bitmap | hdr.agg.bitmap;
            meta.next.count = meta.held.count + 1;
            meta.lane_op = LANE_OP_ADD;
            if (meta.next.count < meta.cfg.fan_in) {
                out_nothing(meta, OUTCOME_AGGREGATED);
            } else {
                meta.next.state = STATE_COMPLETE;
                meta.outcome = OUTCOME_COMPLETED;
            }
        }
        if (meta.outcome == OUTCOME_FLUSHED) {
            if (flushed_state == STATE_FREE) {
                free_aggregator(meta);
            } else {
                meta.next.state = flushed_state;
            }
        }
    }
}

#endif
