// The static policy (SwitchML): the slot is the job's own, fixed by the
// sequence number (p4ctl.rule._static).
#ifndef INASCHED_STATIC_RULE_P4
#define INASCHED_STATIC_RULE_P4

control StaticRule(inout headers_t hdr, inout metadata_t meta) {
    OnPartial() on_partial;

    apply {
        bool occupied = meta.held.state != STATE_FREE;
        if (occupied && hdr.agg.seq < meta.held.seq) {
            meta.outcome = OUTCOME_STALE;
            meta.drop = true;
            meta.drop_reason = DROP_STALE;
        } else if (!occupied || hdr.agg.seq > meta.held.seq) {
            if ((hdr.agg.flags & FLAG_RAW_FLOAT) != 0) {
                out_bypass(meta, OUTCOME_RAW_BYPASS, FLAG_BYPASSED);
            } else {
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
            on_partial.apply(hdr, meta, STATE_FLUSHED);
            if (meta.outcome == OUTCOME_COMPLETED) {
                out_sum(meta, OUTCOME_COMPLETED, DEST_GROUP, KIND_RESULT, FLAG_COMPLETE,
                        meta.next.bitmap, meta.next.exponent);
            }
        } else if (meta.held.state == STATE_COMPLETE) {
            // A retransmission after completion: the stored result, to the sender.
            meta.lane_op = LANE_OP_READ;
            out_sum(meta, OUTCOME_RESULT_RESENT, DEST_SENDER, KIND_RESULT, FLAG_COMPLETE,
                    meta.held.bitmap, meta.held.exponent);
        } else {
            // FLUSHED: the PS is finishing this sequence and answers retransmissions.
            out_bypass(meta, OUTCOME_RESEND_TO_PS, FLAG_BYPASSED);
        }
    }
}

#endif
