// The static policy (SwitchML): the slot is the job's own, fixed by the
// sequence number (p4ctl.rule._static). Each branch below names the case of
// rule._static it mirrors, in the rule's order.
#ifndef INASCHED_STATIC_RULE_P4
#define INASCHED_STATIC_RULE_P4

control StaticRule(inout headers_t hdr, inout metadata_t meta) {
    OnPartial() on_partial;

    apply {
        bool occupied = meta.held.state != STATE_FREE;
        if (occupied && hdr.agg.seq < meta.held.seq) {
            // mirrors rule._static case "older seq": STALE, dropped.
            meta.outcome = OUTCOME_STALE;
            meta.drop = true;
            meta.drop_reason = DROP_STALE;
        } else if (!occupied || hdr.agg.seq > meta.held.seq) {
            if ((hdr.agg.flags & FLAG_RAW_FLOAT) != 0) {
                // mirrors rule._static case "new seq, raw floats": RAW_BYPASS.
                out_bypass(meta, OUTCOME_RAW_BYPASS, FLAG_BYPASSED);
            } else {
                // mirrors rule._static case "new seq": claim at priority 0, then
                // CLAIMED, or COMPLETED with the result multicast at fan-in 1.
                // Overwrite: every worker already holds the result of the older
                // sequence (its window is at most part_size).
                claim(meta, hdr.agg.job, hdr.agg.seq, hdr.agg.bitmap,
                      (bit<8>)hdr.agg.exponent, 0);
                if (meta.cfg.fan_in > 1) {
                    out_nothing(meta, OUTCOME_CLAIMED);
                } else {
                    meta.next.state = STATE_COMPLETE;
                    out_sum(meta, OUTCOME_COMPLETED, DEST_GROUP, KIND_RESULT, FLAG_COMPLETE,
                            meta.next.bitmap, meta.next.exponent);
                }
            }
        } else if (meta.held.state == STATE_PARTIAL) {
            // mirrors rule._static case "PARTIAL": rule._on_partial with
            // flushed_state FLUSHED; completion multicasts the result.
            on_partial.apply(hdr, meta, STATE_FLUSHED);
            if (meta.outcome == OUTCOME_COMPLETED) {
                out_sum(meta, OUTCOME_COMPLETED, DEST_GROUP, KIND_RESULT, FLAG_COMPLETE,
                        meta.next.bitmap, meta.next.exponent);
            }
        } else if (meta.held.state == STATE_COMPLETE) {
            // mirrors rule._static case "COMPLETE": RESULT_RESENT. A retransmission
            // after completion: the stored result, to the sender.
            meta.lane_op = LANE_OP_READ;
            out_sum(meta, OUTCOME_RESULT_RESENT, DEST_SENDER, KIND_RESULT, FLAG_COMPLETE,
                    meta.held.bitmap, meta.held.exponent);
        } else {
            // mirrors rule._static case "FLUSHED": RESEND_TO_PS. The PS is
            // finishing this sequence and answers retransmissions.
            out_bypass(meta, OUTCOME_RESEND_TO_PS, FLAG_BYPASSED);
        }
    }
}

#endif
