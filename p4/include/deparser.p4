// Headers back in wire order; invalid ones (and lanes never parsed) are skipped.
#ifndef INASCHED_DEPARSER_P4
#define INASCHED_DEPARSER_P4

control InaDeparser(packet_out packet, in headers_t hdr) {
    apply {
        packet.emit(hdr.ethernet);
        packet.emit(hdr.ipv4);
        packet.emit(hdr.udp);
        packet.emit(hdr.agg);
        packet.emit(hdr.lanes);
    }
}

#endif
