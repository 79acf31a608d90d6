// A PS_RESULT (the sum finished at the PS) passing back to the workers
// (p4ctl.rule._ps_result): in atp/esa it frees the aggregator if the aggregator
// still holds that (job, seq), complete or a stale partial of late first sends.
// One case, mirrored whole: the free (Registers.free) under the rule's
// condition, then PS_RESULT with the packet multicast unchanged.
#ifndef INASCHED_PS_RESULT_RULE_P4
#define INASCHED_PS_RESULT_RULE_P4

control PsResultRule(inout headers_t hdr, inout metadata_t meta) {
    apply {
        if (meta.cfg.policy != POLICY_STATIC && meta.held.state != STATE_FREE
                && meta.held.job == hdr.agg.job && meta.held.seq == hdr.agg.seq) {
            free_aggregator(meta);
        }
        meta.outcome = OUTCOME_PS_RESULT;
        meta.dest = DEST_GROUP;
        meta.emit = EMIT_NONE;
    }
}

#endif
