// The shared pool: atp (ATP) and esa (ESA), p4ctl.rule._shared. Each branch
// below names the case of rule._shared it mirrors, in the rule's order.
#ifndef INASCHED_SHARED_RULE_P4
#define INASCHED_SHARED_RULE_P4

control SharedRule(inout headers_t hdr, inout metadata_t meta) {
    OnPartial() on_partial;

    // The complete sum goes to the PS. esa also reuses the aggregator at once,
    // so the workers get it now: an egress clone of the PS copy, recirculated
    // and multicast as RESULT (p4/README.md, passes). Mirrors
    // rule._complete_shared. Called directly, never from a table: @hidden keeps
    // it out of the P4Info.
    @hidden
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
            // mirrors rule._shared case "mine and PARTIAL": rule._on_partial with
            // flushed_state FREE, then rule._complete_shared on completion.
            on_partial.apply(hdr, meta, STATE_FREE);
            if (meta.outcome == OUTCOME_COMPLETED) {
                complete(esa);
            }
        } else if (mine) {
            // mirrors rule._shared case "mine" (COMPLETE): RESEND_TO_PS. Complete
            // and waiting for the PS round trip (atp): the PS re-sends.
            out_bypass(meta, OUTCOME_RESEND_TO_PS, FLAG_BYPASSED);
        } else if ((hdr.agg.flags & FLAG_RESEND) != 0) {
            // mirrors rule._shared case "RESEND": RESEND_TO_PS. A retransmission
            // never claims: its sequence may be at the PS already.
            out_bypass(meta, OUTCOME_RESEND_TO_PS, FLAG_BYPASSED);
        } else if ((hdr.agg.flags & FLAG_RAW_FLOAT) != 0) {
            // mirrors rule._shared case "raw floats": RAW_BYPASS.
            out_bypass(meta, OUTCOME_RAW_BYPASS, FLAG_BYPASSED);
        } else if (meta.held.state == STATE_FREE
                   || (esa && meta.held.state == STATE_COMPLETE)) {
            // mirrors rule._shared case "FREE, or COMPLETE under esa": claim at
            // the job's priority; CLAIMED, or rule._complete_shared at fan-in 1.
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
            // mirrors rule._shared case "esa preempts a lower-priority PARTIAL":
            // PREEMPTED, the evicted sum to the holder's PS (none if the holder
            // left the job table: Reroute drops it), the aggregator claimed.
            // The lanes swap in one pass: the packet leaves with the
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
            // mirrors rule._shared case "another (job, seq) holds it": COLLISION.
            out_bypass(meta, OUTCOME_COLLISION, FLAG_BYPASSED | FLAG_COLLISION);
        }
    }
}

#endif
