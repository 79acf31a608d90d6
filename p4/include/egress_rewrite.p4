// Egress: a packet that leaves gets the UDP endpoint of its egress port from
// port_table (one entry per worker or PS port, so every multicast replica gets
// its own destination) and the switch's address as its source. A clone or a
// packet routed for another pass is recirculated instead, addressed to the
// switch again so that the parser takes it for the protocol.
#ifndef INASCHED_EGRESS_REWRITE_P4
#define INASCHED_EGRESS_REWRITE_P4

control EgressRewrite(inout headers_t hdr, inout metadata_t meta,
                      inout standard_metadata_t standard_metadata) {
    @name(".set_endpoint") @id(0x01000006)
    action set_endpoint(bit<32> addr, bit<16> udp_port) {
        hdr.ipv4.dst_addr = addr;
        hdr.udp.dst_port = udp_port;
    }

    // Named as the P4Info's NoAction so that its id can be pinned: core.p4's
    // NoAction carries no @id.
    @name(".NoAction") @id(0x01000001)
    action no_endpoint() { }

    @name(".port_table") @id(0x02000003)
    table port_table {
        key = {
            standard_metadata.egress_port : exact @name("egress_port");
        }
        actions = {
            set_endpoint;
            no_endpoint;
        }
        default_action = no_endpoint();
        size = PORT_TABLE_SIZE;
    }

    apply {
        if (standard_metadata.instance_type == INSTANCE_INGRESS_CLONE
                || standard_metadata.instance_type == INSTANCE_EGRESS_CLONE) {
            meta.route = meta.clone_route;
        }
        if (meta.route != ROUTE_NONE) {
            hdr.ipv4.dst_addr = meta.switch_addr;
            hdr.udp.dst_port = AGG_UDP_PORT;
            recirculate_preserving_field_list(FIELD_LIST_ROUTE);
        } else {
            port_table.apply();
            hdr.ipv4.src_addr = meta.switch_addr;
            hdr.udp.src_port = AGG_UDP_PORT;
            hdr.udp.checksum = 0;
            hdr.ethernet.dst_addr = BROADCAST_MAC;
            if (meta.e2e_result) {
                meta.clone_route = ROUTE_RESULT_TO_GROUP;
                clone_preserving_field_list(CloneType.E2E, CLONE_SESSION, FIELD_LIST_ROUTE);
            }
        }
    }
}

#endif
