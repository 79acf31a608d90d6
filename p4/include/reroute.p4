// A recirculated pass (instance type RECIRC): no check and no aggregator is
// touched; job_table, looked up with the job in the header, gives the PS port
// or multicast group the packet was recirculated to find.
#ifndef INASCHED_REROUTE_P4
#define INASCHED_REROUTE_P4

control Reroute(inout headers_t hdr, inout metadata_t meta) {
    apply {
        bit<8> route = meta.route;
        // Both arrive set from the previous pass; this pass decides its own.
        meta.route = ROUTE_NONE;
        meta.clone_route = ROUTE_NONE;
        if (meta.drop) {
            // The job left the table meanwhile (rule.process sends an evicted
            // sum of an unknown holder nowhere either).
            meta.dest = DEST_NONE;
        } else if (route == ROUTE_EVICTED_TO_PS) {
            hdr.agg.fan_in = meta.cfg.fan_in;
            meta.dest = DEST_PS;
        } else if (route == ROUTE_BYPASS_TO_PS) {
            meta.dest = DEST_PS;
            meta.emit = EMIT_BYPASS;
            meta.emit_flags = FLAG_BYPASSED;
        } else if (route == ROUTE_RESULT_TO_GROUP) {
            hdr.agg.kind = KIND_RESULT;
            meta.dest = DEST_GROUP;
        } else if (route == ROUTE_ESA_COMPLETE) {
            out_sum(meta, OUTCOME_COMPLETED, DEST_PS, KIND_TO_PS, FLAG_COMPLETE,
                    hdr.agg.bitmap, (bit<8>)hdr.agg.exponent);
            meta.e2e_result = true;
        }
    }
}

#endif
