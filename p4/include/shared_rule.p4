// The shared pool: atp (ATP) and esa (ESA), p4ctl.rule._shared.
#ifndef INASCHED_SHARED_RULE_P4
#define INASCHED_SHARED_RULE_P4

control SharedRule(inout headers_t hdr, inout metadata_t meta) {
    OnPartial() on_partial;

    // The complete sum goes to the PS. esa also reuses the aggregator at once,
    // so the workers get it now: an egress clone of the PS copy, recirculated
    // and multicast as RESULT (p4/README.md, passes).
    action complete(bool esa) {
        out_sum(meta, OUTCOME_COMPLETED, DEST_PS, KIND_TO_PS, FLAG_COMPLETE,
                meta.next.bitmap, meta.next.exponent);
        meta.e2e_result = esa;
    }

    apply {
        bool esa = meta.cfg.policy == POLICY_ESA;
        bool mine = meta.held.state != STATE_FREE && meta.held.job == hdr.agg.job
                    && meta.held.seq == hdr.agg.seq;
        if (mine && meta.held.state == STATE_PARTIAL) {
            on_partial.apply(hdr, meta, STATE_FREE);
            if (meta.outcome == OUTCOME_COMPLETED) {
                complete(esa);
            }
        } else if (mine) {
            // Complete and waiting for the PS round trip (atp): the PS re-sends.
            out_bypass(meta, OUTCOME_RESEND_TO_PS, FLAG_BYPASSED);
        } else if ((hdr.agg.flags & FLAG_RESEND) != 0) {
            // A retransmission never claims: its sequence may be at the PS already.
            out_bypass(meta, OUTCOME_RESEND_TO_PS, FLAG_BYPASSED);
        } else if ((hdr.agg.flags & FLAG_RAW_FLOAT) != 0) {
            out_bypass(meta, OUTCOME_RAW_BYPASS, FLAG_BYPASSED);
        } else if (meta.held.state == STATE_FREE
                   || (esa && meta.held.state == STATE_COMPLETE)) {
            claim(meta, hdr.agg.job, hdr.agg.seq, hdr.agg.bitmap, (bit<8>)hdr.agg.exponent,
                  meta.job_priority);
            if (meta.cfg.fan_in == 1) {
                meta.next.state = STATE_COMPLETE;
                complete(esa);
            } else {
                out_nothing(meta, OUTCOME_CLAIMED);
            }
        } else if (esa && meta.held.state == STATE_PARTIAL
                   && meta.job_priority > meta.held.priority) {
            // Preempt. The lanes swap in one pass: the packet leaves with the
            // evicted sum and the aggregator keeps the packet's contribution. The
            // holder's PS port is in the holder's job_table entry, which this pass
            // has already used for the packet's job: the evicted sum recirculates.
            claim(meta, hdr.agg.job, hdr.agg.seq, hdr.agg.bitmap, (bit<8>)hdr.agg.exponent,
                  meta.job_priority);
            meta.lane_op = LANE_OP_SWAP;
            meta.outcome = OUTCOME_PREEMPTED;
            meta.dest = DEST_RECIRC;
            meta.route = ROUTE_EVICTED_TO_PS;
            meta.emit = EMIT_EVICTED;
            meta.emit_kind = KIND_TO_PS;
            meta.emit_flags = FLAG_EVICTED;
            meta.sum_bitmap = meta.held.bitmap;
            meta.sum_exponent = meta.held.exponent;
            if (meta.cfg.fan_in == 1) {
                // The packet alone is the complete sum; a clone of it as
                // received carries it on to the PS and the workers.
                meta.next.state = STATE_COMPLETE;
                meta.clone_i2e = true;
                meta.clone_route = ROUTE_ESA_COMPLETE;
            }
        } else {
            out_bypass(meta, OUTCOME_COLLISION, FLAG_BYPASSED | FLAG_COLLISION);
        }
    }
}

#endif
