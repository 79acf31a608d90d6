// The checks of p4ctl.rule.check after the source check, in its order: kind,
// worker and fan-in, bitmap, aggregator index.
#ifndef INASCHED_FRAGMENT_CHECK_P4
#define INASCHED_FRAGMENT_CHECK_P4

control FragmentCheck(inout headers_t hdr, inout metadata_t meta) {
    action reject(bit<8> reason) {
        meta.drop = true;
        meta.drop_reason = reason;
    }

    apply {
        bit<32> size = meta.cfg.part_size;
        // The static copy a packet names: shadow 0 is the partition's first
        // part_size aggregators, shadow 1 the next part_size.
        bit<32> copy_base = meta.cfg.part_base;
        if (hdr.agg.shadow == 1) {
            copy_base = meta.cfg.part_base + size;
        }
        bit<32> slot = hdr.agg.agg_index - copy_base;

        if (hdr.agg.kind == KIND_PS_RESULT) {
            if (hdr.agg.worker != PS_WORKER_ID) {
                reject(DROP_BAD_WORKER);
            } else if (hdr.agg.agg_index >= AGGREGATORS) {
                reject(DROP_BAD_AGG_INDEX);
            }
        } else if (hdr.agg.kind != KIND_GRADIENT) {
            reject(DROP_BAD_KIND);
        } else if (hdr.agg.worker >= meta.cfg.fan_in || hdr.agg.fan_in != meta.cfg.fan_in) {
            reject(DROP_BAD_WORKER);
        } else if (hdr.agg.worker >= MAX_WORKERS
                   || hdr.agg.bitmap != (bit<32>)1 << hdr.agg.worker) {
            // A shift past the bitmap's width would give 0, so a bitmap of 0 from
            // worker 32 would pass; the first test keeps rule.check's answer.
            reject(DROP_BAD_BITMAP);
        } else if (hdr.agg.agg_index >= AGGREGATORS) {
            reject(DROP_BAD_AGG_INDEX);
        } else if (meta.cfg.policy == POLICY_STATIC) {
            // rule.static_index is seq mod part_size and (seq div part_size) mod 2.
            // Switch ALUs cannot divide by a table value (p4c rejects a run-time
            // / or %), so this is exact only for a power-of-two part_size, where
            // both are masks; otherwise it checks that the index lies in the copy
            // the shadow bit names (p4/README.md, known gaps).
            if (size == 0 || hdr.agg.shadow > 1 || hdr.agg.agg_index < copy_base
                    || slot >= size) {
                reject(DROP_BAD_AGG_INDEX);
            } else if ((size & (size - 1)) == 0) {
                if ((hdr.agg.seq & (size - 1)) != slot
                        || ((hdr.agg.seq & size) != 0) != (hdr.agg.shadow == 1)) {
                    reject(DROP_BAD_AGG_INDEX);
                }
            }
        }
    }
}

#endif
