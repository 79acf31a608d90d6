// The worker table: a packet must come from the address registered for its
// (job, worker); the PS is worker PS_WORKER_ID of its job. The hit also gives
// the sender's switch port, where a static retransmission gets its result, and
// binds the sender to it, as SwitchML's port table does: a packet that enters
// on any other port (a copy flooded by an L2 segment in front of the switch) is
// dropped as WRONG_PORT, so each packet is processed once (rule.source_check).
#ifndef INASCHED_SOURCE_CHECK_P4
#define INASCHED_SOURCE_CHECK_P4

control SourceCheck(inout headers_t hdr, inout metadata_t meta, in bit<9> ingress_port) {
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
        if (worker_table.apply().hit && !meta.drop && ingress_port != meta.sender_port) {
            meta.drop = true;
            meta.drop_reason = DROP_WRONG_PORT;
        }
    }
}

#endif
