// Decode checks of p4/PROTOCOL.md section 4, in p4ctl.protocol.decode's order:
// BAD_LENGTH (shorter than the header), BAD_VERSION, BAD_LANES, BAD_LENGTH
// (not header + LANES x 4 bytes), BAD_KIND.
#ifndef INASCHED_VALIDATE_P4
#define INASCHED_VALIDATE_P4

control Validate(inout headers_t hdr, inout metadata_t meta,
                 in standard_metadata_t standard_metadata) {
    // Called directly, never from a table: @hidden keeps it out of the P4Info.
    @hidden
    action reject(bit<8> reason) {
        meta.drop = true;
        meta.drop_reason = reason;
    }

    apply {
        if (!hdr.udp.isValid() || hdr.udp.dst_port != AGG_UDP_PORT) {
            reject(UNCOUNTED_DROP);
        } else if (!hdr.agg.isValid()) {
            reject(DROP_BAD_LENGTH);
        } else if (hdr.agg.version != VERSION) {
            reject(DROP_BAD_VERSION);
        } else if (hdr.agg.lanes != LANES) {
            reject(DROP_BAD_LANES);
        } else if (standard_metadata.parser_error != error.NoError
                   || hdr.udp.length != AGG_UDP_LENGTH) {
            reject(DROP_BAD_LENGTH);
        } else if (hdr.agg.kind > KIND_PS_RESULT) {
            reject(DROP_BAD_KIND);
        }
        meta.job = hdr.agg.job;
        // Whatever the switch sends leaves from the address it was reached at.
        meta.switch_addr = hdr.ipv4.dst_addr;
    }
}

#endif
