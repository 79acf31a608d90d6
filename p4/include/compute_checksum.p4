// Egress rewrites the IPv4 addresses, so the header checksum is recomputed on
// every packet that leaves; the UDP checksum is zeroed instead (optional in
// IPv4), since recomputing it would need all LANES lanes in the hash.
#ifndef INASCHED_COMPUTE_CHECKSUM_P4
#define INASCHED_COMPUTE_CHECKSUM_P4

control InaComputeChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply {
        update_checksum(
            hdr.ipv4.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.diffserv, hdr.ipv4.total_len,
              hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.frag_offset, hdr.ipv4.ttl,
              hdr.ipv4.protocol, hdr.ipv4.src_addr, hdr.ipv4.dst_addr },
            hdr.ipv4.hdr_checksum,
            HashAlgorithm.csum16);
    }
}

#endif
