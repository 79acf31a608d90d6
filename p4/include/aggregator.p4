// The scalar registers of the aggregator pool, and the rule that updates them.
// Every array is touched once per pass, as one read-modify-write of the
// packet's aggregator (what a Tofino RegisterAction is): read here, the rule
// decides on the values read, the new values are written back here. The lanes
// live in Lanes, driven by meta.lane_op.
#ifndef INASCHED_AGGREGATOR_P4
#define INASCHED_AGGREGATOR_P4

control Aggregator(inout headers_t hdr, inout metadata_t meta) {
    @name(".agg_job") @id(0x16000002)
    register<bit<16>>(AGGREGATORS) agg_job;
    @name(".agg_seq") @id(0x16000003)
    register<bit<32>>(AGGREGATORS) agg_seq;
    @name(".agg_state") @id(0x16000004)
    register<bit<8>>(AGGREGATORS) agg_state;
    @name(".agg_bitmap") @id(0x16000005)
    register<bit<32>>(AGGREGATORS) agg_bitmap;
    @name(".agg_count") @id(0x16000006)
    register<bit<8>>(AGGREGATORS) agg_count;
    @name(".agg_exponent") @id(0x16000007)
    register<bit<8>>(AGGREGATORS) agg_exponent;
    @name(".agg_priority") @id(0x16000008)
    register<bit<8>>(AGGREGATORS) agg_priority;

    PsResultRule() ps_result_rule;
    StaticRule() static_rule;
    SharedRule() shared_rule;

    apply {
        bit<32> index = hdr.agg.agg_index;
        agg_job.read(meta.held.job, index);
        agg_seq.read(meta.held.seq, index);
        agg_state.read(meta.held.state, index);
        agg_bitmap.read(meta.held.bitmap, index);
        agg_count.read(meta.held.count, index);
        agg_exponent.read(meta.held.exponent, index);
        agg_priority.read(meta.held.priority, index);
        meta.next = meta.held;

        // mirrors rule.process: PS_RESULT, then static, then the shared pool.
        if (hdr.agg.kind == KIND_PS_RESULT) {
            ps_result_rule.apply(hdr, meta);
        } else if (meta.cfg.policy == POLICY_STATIC) {
            static_rule.apply(hdr, meta);
        } else {
            shared_rule.apply(hdr, meta);
        }

        agg_job.write(index, meta.next.job);
        agg_seq.write(index, meta.next.seq);
        agg_state.write(index, meta.next.state);
        agg_bitmap.write(index, meta.next.bitmap);
        agg_count.write(index, meta.next.count);
        agg_exponent.write(index, meta.next.exponent);
        agg_priority.write(index, meta.next.priority);
    }
}

#endif
