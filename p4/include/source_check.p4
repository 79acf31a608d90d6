// The worker table: a packet must come from the address registered for its
// (job, worker); the PS is worker PS_WORKER_ID of its job. The hit also gives
// the sender's switch port, where a static retransmission gets its result.
#ifndef INASCHED_SOURCE_CHECK_P4
#define INASCHED_SOURCE_CHECK_P4

control SourceCheck(inout headers_t hdr, inout metadata_t meta) {
    @name(".allow_source") @id(0x01000004)
    action allow_source(bit<9> port) {
        meta.sender_port = port;
    }

    @name(".reject_source") @id(0x01000005)
    action reject_source() {
        meta.drop = true;
        meta.drop_reason = DROP_UNREGISTERED_SOURCE;
    }

    @name(".worker_table") @id(0x02000002)
    table worker_table {
        key = {
            hdr.agg.job : exact @name("job");
            hdr.agg.worker : exact @name("worker");
            hdr.ipv4.src_addr : exact @name("src_addr");
            hdr.udp.src_port : exact @name("src_port");
        }
        actions = {
            allow_source;
            reject_source;
        }
        default_action = reject_source();
        size = WORKER_TABLE_SIZE;
    }

    apply {
        worker_table.apply();
    }
}

#endif
