// The checks of p4ctl.rule.check after the source check, in its order: kind,
// worker and fan-in, bitmap, aggregator index. rule.check's first case
// (UNKNOWN_JOB) is JobConfig's default action; each branch below names the
// case of rule.check it mirrors.
#ifndef INASCHED_FRAGMENT_CHECK_P4
#define INASCHED_FRAGMENT_CHECK_P4

control FragmentCheck(inout headers_t hdr, inout metadata_t meta) {
    // Called directly, never from a table: @hidden keeps it out of the P4Info.
    @hidden
    action reject(bit<8> reason) {
        meta.drop = true;
        meta.drop_reason = reason;
    }

    apply {
        // rule.static_index: slot seq mod part_size, shadow (seq div part_size) mod 2,
        // index part_base + shadow * part_size + slot. A switch ALU cannot divide by a
        // table value (p4c rejects a run-time / or %), so part_size is a power of two and
        // both are masks: the slot is seq & (part_size - 1), the shadow bit is the bit of
        // seq that part_size is. Any other part_size (0 included) leaves a static job no
        // valid index, as in the Python rule; the control plane never installs one.
        bit<32> size = meta.cfg.part_size;
        bit<32> mask = size - 1;
        bit<32> static_index = meta.cfg.part_base + (hdr.agg.seq & mask);
        bit<8> static_shadow = 0;
        if ((hdr.agg.seq & size) != 0) {
            static_index = static_index + size;
            static_shadow = 1;
        }

        if (hdr.agg.kind == KIND_PS_RESULT) {
            // mirrors rule.check case "PS_RESULT": BAD_WORKER unless from the PS,
            // BAD_AGG_INDEX past the pool.
            if (hdr.agg.worker != PS_WORKER_ID) {
                reject(DROP_BAD_WORKER);
            } else if (hdr.agg.agg_index >= AGGREGATORS) {
                reject(DROP_BAD_AGG_INDEX);
            }
        } else if (hdr.agg.kind != KIND_GRADIENT) {
            // mirrors rule.check case "not a GRADIENT": BAD_KIND.
            reject(DROP_BAD_KIND);
        } else if (hdr.agg.worker >= meta.cfg.fan_in || hdr.agg.fan_in != meta.cfg.fan_in) {
            // mirrors rule.check case "worker or fan-in": BAD_WORKER.
            reject(DROP_BAD_WORKER);
        } else if (hdr.agg.worker >= MAX_WORKERS
                   || hdr.agg.bitmap != (bit<32>)1 << hdr.agg.worker) {
            // mirrors rule.check case "bitmap": BAD_BITMAP.
            // A shift past the bitmap's width would give 0, so a bitmap of 0 from
            // worker 32 would pass; the first test keeps rule.check's answer.
            reject(DROP_BAD_BITMAP);
        } else if (hdr.agg.agg_index >= AGGREGATORS) {
            // mirrors rule.check case "index past the pool": BAD_AGG_INDEX (the
            // rule tests it after the static slot; both give the same reason).
            reject(DROP_BAD_AGG_INDEX);
        } else if (meta.cfg.policy == POLICY_STATIC) {
            // mirrors rule.check case "static": part_size a power of two and
            // (agg_index, shadow) == rule.static_index, else BAD_AGG_INDEX.
            if (size == 0 || (size & mask) != 0 || hdr.agg.agg_index != static_index
                    || hdr.agg.shadow != static_shadow) {
                reject(DROP_BAD_AGG_INDEX);
            }
        }
    }
}

#endif
