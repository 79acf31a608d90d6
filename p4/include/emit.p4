// Rewrites the header of the packet that leaves this pass, as the rule decided
// (p4ctl.rule._to_ps and _held): a sum leaves as worker 0, shadow 0, with the
// aggregator's contributors and exponent; its lanes were set by Lanes.
#ifndef INASCHED_EMIT_P4
#define INASCHED_EMIT_P4

control Emit(inout headers_t hdr, inout metadata_t meta) {
    apply {
        if (meta.emit == EMIT_BYPASS) {
            hdr.agg.kind = KIND_TO_PS;
            hdr.agg.flags = hdr.agg.flags | meta.emit_flags;
        } else if (meta.emit == EMIT_SUM || meta.emit == EMIT_EVICTED) {
            hdr.agg.kind = meta.emit_kind;
            hdr.agg.flags = meta.emit_flags;
            hdr.agg.worker = 0;
            hdr.agg.shadow = 0;
            // The evicted holder's fan-in is set on the next pass, from its entry.
            hdr.agg.fan_in = meta.cfg.fan_in;
            hdr.agg.exponent = (int<8>)meta.sum_exponent;
            hdr.agg.bitmap = meta.sum_bitmap;
            if (meta.emit == EMIT_EVICTED) {
                hdr.agg.job = meta.held.job;
                hdr.agg.seq = meta.held.seq;
            }
        }
    }
}

#endif
