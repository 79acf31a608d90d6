// Per-job counters and drop_reason (p4/PROTOCOL.md sections 2 and 4, and
// p4ctl.rule.COUNTERS): which outcome bumps which counter of the packet's own
// job; job_evicted is the holder's. Each array counts at most once per pass.
#ifndef INASCHED_JOB_COUNTERS_P4
#define INASCHED_JOB_COUNTERS_P4

control JobCounters(inout headers_t hdr, inout metadata_t meta) {
    @name(".job_aggregated") @id(0x12000001)
    counter(MAX_JOBS, CounterType.packets_and_bytes) job_aggregated;
    @name(".job_bypassed") @id(0x12000002)
    counter(MAX_JOBS, CounterType.packets_and_bytes) job_bypassed;
    @name(".job_preempted") @id(0x12000003)
    counter(MAX_JOBS, CounterType.packets_and_bytes) job_preempted;
    @name(".job_evicted") @id(0x12000004)
    counter(MAX_JOBS, CounterType.packets_and_bytes) job_evicted;
    @name(".job_resent") @id(0x12000005)
    counter(MAX_JOBS, CounterType.packets_and_bytes) job_resent;
    @name(".job_dropped") @id(0x12000006)
    counter(MAX_JOBS, CounterType.packets_and_bytes) job_dropped;
    @name(".drop_reason") @id(0x12000007)
    counter(DROP_REASONS, CounterType.packets_and_bytes) drop_reason;

    apply {
        bit<32> job = (bit<32>)meta.job;
        bit<8> outcome = meta.outcome;
        if (meta.drop) {
            if (meta.drop_reason != UNCOUNTED_DROP) {
                drop_reason.count((bit<32>)meta.drop_reason);
            }
            if (meta.cfg.known) {
                job_dropped.count(job);
            }
        } else {
            if (outcome == OUTCOME_CLAIMED || outcome == OUTCOME_AGGREGATED
                    || outcome == OUTCOME_COMPLETED || outcome == OUTCOME_PREEMPTED) {
                job_aggregated.count(job);
            }
            if (outcome == OUTCOME_COLLISION || outcome == OUTCOME_RAW_BYPASS) {
                job_bypassed.count(job);
            }
            if (outcome == OUTCOME_PREEMPTED) {
                job_preempted.count(job);
                job_evicted.count((bit<32>)meta.held.job);
            }
            if (outcome == OUTCOME_DUPLICATE || outcome == OUTCOME_RESULT_RESENT
                    || outcome == OUTCOME_RESEND_TO_PS || outcome == OUTCOME_FLUSHED) {
                job_resent.count(job);
            }
        }
    }
}

#endif
