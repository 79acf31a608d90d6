// Sends the packet where the rule (or Reroute) decided, and asks for the
// ingress clone when a second packet with the received lanes must leave.
#ifndef INASCHED_FORWARD_P4
#define INASCHED_FORWARD_P4

control Forward(inout metadata_t meta, inout standard_metadata_t standard_metadata) {
    apply {
        if (meta.dest == DEST_PS) {
            standard_metadata.egress_spec = meta.cfg.ps_port;
        } else if (meta.dest == DEST_GROUP) {
            standard_metadata.mcast_grp = meta.cfg.mcast_group;
        } else if (meta.dest == DEST_SENDER) {
            standard_metadata.egress_spec = meta.sender_port;
        } else if (meta.dest == DEST_RECIRC) {
            // Any port carries it to egress, which recirculates it before it
            // is sent; the ingress port is one that exists.
            standard_metadata.egress_spec = standard_metadata.ingress_port;
        } else {
            mark_to_drop(standard_metadata);
        }
        if (meta.clone_i2e) {
            clone_preserving_field_list(CloneType.I2E, CLONE_SESSION, FIELD_LIST_ROUTE);
        }
    }
}

#endif
