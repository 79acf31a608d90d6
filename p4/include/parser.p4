// Ethernet / IPv4 / UDP, then the aggregation header and its LANES lanes when
// the datagram is addressed to AGG_UDP_PORT. A datagram with another version or
// lane count stops after agg_h, and one cut short stops with a parser error:
// Validate turns both into the drop reasons of p4/PROTOCOL.md section 4
// (v1model on BMv2 does not drop on a parser error, it reports it).
#ifndef INASCHED_PARSER_P4
#define INASCHED_PARSER_P4

parser InaParser(packet_in packet, out headers_t hdr, inout metadata_t meta,
                 inout standard_metadata_t standard_metadata) {
    // Lanes extracted so far: the loop's exit test. Not hdr.lanes.lastIndex, which p4c
    // passes to BMv2 as an expression key, and BMv2 selects only on fields, stack fields
    // and lookaheads (it refuses such a JSON when the pipeline is loaded). 16 bits, like
    // agg_h.lanes, so that LANES = 256 counts too.
    bit<16> lanes_parsed = 0;

    state start {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.ether_type) {
            ETHERTYPE_IPV4: parse_ipv4;
            default: accept;
        }
    }

    state parse_ipv4 {
        packet.extract(hdr.ipv4);
        transition select(hdr.ipv4.ihl, hdr.ipv4.protocol) {
            (5, IPPROTO_UDP): parse_udp;
            default: accept;
        }
    }

    state parse_udp {
        packet.extract(hdr.udp);
        transition select(hdr.udp.dst_port) {
            AGG_UDP_PORT: parse_agg;
            default: accept;
        }
    }

    state parse_agg {
        packet.extract(hdr.agg);
        transition select(hdr.agg.version, hdr.agg.lanes) {
            (VERSION, LANES): parse_lane;
            default: accept;
        }
    }

    state parse_lane {
        packet.extract(hdr.lanes.next);
        lanes_parsed = lanes_parsed + 1;
        transition select(lanes_parsed) {
            LANES: accept;
            default: parse_lane;
        }
    }
}

#endif
