// A contribution to a PARTIAL aggregator that holds its own (job, seq): the
// first table of p4/PROTOCOL.md section 5, shared by every policy
// (p4ctl.rule._on_partial). On the n-th contribution it only marks the
// aggregator COMPLETE and the outcome COMPLETED: what completion sends is the
// calling policy's business.
//
// flushed_state is rule._on_partial's argument of the same name: what a
// flushed aggregator becomes, STATE_FLUSHED for a static slot (StaticRule) and
// STATE_FREE for the shared pool of atp and esa (SharedRule). As in the rule,
// it also tells the control which of the two it runs for.
#ifndef INASCHED_ON_PARTIAL_P4
#define INASCHED_ON_PARTIAL_P4

control OnPartial(inout headers_t hdr, inout metadata_t meta, in bit<8> flushed_state) {
    // The held sum goes to the PS, which finishes this sequence (rule._held
    // with Flag.FLUSHED). Called directly, never from a table: @hidden keeps
    // it out of the P4Info.
    @hidden
    action flush() {
        meta.lane_op = LANE_OP_READ;
        out_sum(meta, OUTCOME_FLUSHED, DEST_PS, KIND_TO_PS, FLAG_FLUSHED,
                meta.held.bitmap, meta.held.exponent);
    }

    apply {
        bool resend = (hdr.agg.flags & FLAG_RESEND) != 0;
        bool shared_pool = flushed_state == STATE_FREE;
        // Mirrors rule._on_partial's `_is_side(...) or (resend and flushed_state
        // == _FREE)`. rule._is_side: raw floats, or fixed point at another
        // exponent than the sum's, cannot be added. In atp and esa a RESEND
        // joins no sum either, for the reason it never claims (SharedRule): its
        // first send may already be at the PS inside an evicted or flushed sum.
        bool side = (hdr.agg.flags & FLAG_RAW_FLOAT) != 0
                    || (bit<8>)hdr.agg.exponent != meta.held.exponent
                    || (resend && shared_pool);
        if ((meta.held.bitmap & hdr.agg.bitmap) != 0) {
            if (!resend) {
                // mirrors rule._on_partial case "sender in the sum, not a RESEND":
                // DUPLICATE, nothing leaves.
                out_nothing(meta, OUTCOME_DUPLICATE);
            } else {
                // mirrors rule._on_partial case "sender in the sum, RESEND": it
                // still has no result, so someone is missing; FLUSHED.
                flush();
            }
        } else if (side) {
            if (!resend) {
                // mirrors rule._on_partial case "side, not a RESEND": RAW_BYPASS,
                // the packet to its PS, BYPASSED.
                out_bypass(meta, OUTCOME_RAW_BYPASS, FLAG_BYPASSED);
            } else {
                // mirrors rule._on_partial case "side or shared-pool RESEND":
                // FLUSHED, two packets leave: the held sum here, and the packet
                // itself, BYPASSED, through a clone of it as received.
                flush();
                meta.clone_i2e = true;
                meta.clone_route = ROUTE_BYPASS_TO_PS;
            }
        } else {
            // mirrors rule._on_partial case "added" (rule._add). The exponent is
            // the sum's already (else the contribution is a side one), so
            // rule._add's max() leaves it as it is.
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
            // mirrors rule._set_flushed: FREE (Registers.free) or FLUSHED.
            if (shared_pool) {
                free_aggregator(meta);
            } else {
                meta.next.state = flushed_state;
            }
        }
    }
}

#endif
