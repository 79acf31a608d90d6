// The job table (policy, fan-in, static partition, multicast group, PS port, priority).
// Applied on every pass: a recirculated packet is routed by the entry of the job
// named in its header (the evicted holder's).
#ifndef INASCHED_JOB_CONFIG_P4
#define INASCHED_JOB_CONFIG_P4

control JobConfig(inout headers_t hdr, inout metadata_t meta) {
    @name(".set_job") @id(0x01000002)
    action set_job(bit<8> policy, bit<8> fan_in, bit<32> part_base, bit<32> part_size,
                   bit<16> mcast_group, bit<9> ps_port, bit<8> priority) {
        meta.cfg.known = true;
        meta.cfg.policy = policy;
        meta.cfg.fan_in = fan_in;
        meta.cfg.part_base = part_base;
        meta.cfg.part_size = part_size;
        meta.cfg.mcast_group = mcast_group;
        meta.cfg.ps_port = ps_port;
        // The job's priority level, written by the scheduler only (a MODIFY of this
        // entry; higher wins). A table parameter, not a register: PI (BMv2's P4Runtime
        // server) refuses register writes, and every target writes table entries. esa
        // compares it against agg_priority, the level the holder had when it claimed,
        // so no second job's level is ever looked up (rule.py _shared: cfg.priority).
        meta.job_priority = priority;
    }

    @name(".unknown_job") @id(0x01000003)
    action unknown_job() {
        meta.drop = true;
        meta.drop_reason = DROP_UNKNOWN_JOB;
    }

    @name(".job_table") @id(0x02000001)
    table job_table {
        key = {
            hdr.agg.job : exact @name("job");
        }
        actions = {
            set_job;
            unknown_job;
        }
        default_action = unknown_job();
        size = MAX_JOBS;
    }

    apply {
        job_table.apply();
    }
}

#endif
