// inasched: in-network aggregation memory shared by many training jobs, with the
// static (SwitchML), atp (ATP) and esa (ESA) policies, for v1model (BMv2).
// p4/PROTOCOL.md is the rule, p4/build/inasched.p4info.txtpb the control-plane
// contract, p4/README.md the passes and how to run it. This file only includes
// and wires the controls of include/, one per file.
#include <core.p4>
#include <v1model.p4>

#include "include/sizing.p4"
#include "include/constants.p4"
#include "include/headers.p4"
#include "include/outputs.p4"
#include "include/parser.p4"
#include "include/verify_checksum.p4"
#include "include/validate.p4"
#include "include/job_config.p4"
#include "include/source_check.p4"
#include "include/fragment_check.p4"
#include "include/on_partial.p4"
#include "include/static_rule.p4"
#include "include/shared_rule.p4"
#include "include/ps_result_rule.p4"
#include "include/aggregator.p4"
#include "include/lane.p4"
#include "include/lanes.p4"
#include "include/emit.p4"
#include "include/reroute.p4"
#include "include/forward.p4"
#include "include/job_counters.p4"
#include "include/egress_rewrite.p4"
#include "include/compute_checksum.p4"
#include "include/deparser.p4"

control InaIngress(inout headers_t hdr, inout metadata_t meta,
                   inout standard_metadata_t standard_metadata) {
    Validate() validate;
    JobConfig() job_config;
    SourceCheck() source_check;
    FragmentCheck() fragment_check;
    Aggregator() aggregator;
    Lanes() lanes;
    Reroute() reroute;
    Emit() emit;
    Forward() forward;
    JobCounters() job_counters;

    apply {
        bool recirculated = standard_metadata.instance_type == INSTANCE_RECIRC;
        if (!recirculated) {
            validate.apply(hdr, meta, standard_metadata);
        }
        if (!meta.drop) {
            job_config.apply(hdr, meta);
        }
        if (recirculated) {
            reroute.apply(hdr, meta);
        } else {
            if (!meta.drop) {
                source_check.apply(hdr, meta, standard_metadata.ingress_port);
            }
            if (!meta.drop) {
                fragment_check.apply(hdr, meta);
            }
            if (!meta.drop) {
                aggregator.apply(hdr, meta);
                lanes.apply(hdr, hdr.agg.agg_index, meta.lane_op);
            }
            job_counters.apply(hdr, meta);
        }
        emit.apply(hdr, meta);
        forward.apply(meta, standard_metadata);
    }
}

control InaEgress(inout headers_t hdr, inout metadata_t meta,
                  inout standard_metadata_t standard_metadata) {
    EgressRewrite() rewrite;

    apply {
        rewrite.apply(hdr, meta, standard_metadata);
    }
}

// p4c writes this into the P4Info's pkg_info, as the committed one has it.
@pkginfo(name="inasched", version="1")
V1Switch(
    InaParser(),
    InaVerifyChecksum(),
    InaIngress(),
    InaEgress(),
    InaComputeChecksum(),
    InaDeparser()
) main;
