// Incoming IPv4 checksums are not verified: a corrupted header fails the worker
// table's source check or the protocol checks, and hosts verify what leaves.
#ifndef INASCHED_VERIFY_CHECKSUM_P4
#define INASCHED_VERIFY_CHECKSUM_P4

control InaVerifyChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply { }
}

#endif
