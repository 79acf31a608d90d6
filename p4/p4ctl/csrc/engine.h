/* The compiled data path of inasched (`p4ctl._engine`): shared declarations. */
#ifndef INASCHED_ENGINE_H
#define INASCHED_ENGINE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* burst.c */
int engine_enable_gro(int fd);
Py_ssize_t engine_recv_burst(int fd, uint8_t *scratch, Py_ssize_t scratch_len, uint8_t *out,
                             Py_ssize_t stride, Py_ssize_t slots, int64_t *sizes,
                             int64_t *addrs, int wait, Py_ssize_t *lost);
Py_ssize_t engine_send_burst(int fd, const uint8_t *buf, Py_ssize_t stride,
                             const int64_t *sizes, const int64_t *addrs, const int64_t *order,
                             Py_ssize_t n, int *gso);

/* Columns of one job table row (`p4ctl.switch_engine.JOB_COLUMNS`); the job's priority is a
 * column, as it is a parameter of the P4 program's job_table entry. JOB_UP_PORT is -1 for a
 * job without a parent (p4/PROTOCOL.md section 7). */
enum { JOB_VALID, JOB_POLICY, JOB_FAN_IN, JOB_PART_BASE, JOB_PART_SIZE, JOB_MCAST, JOB_PS_PORT,
       JOB_PRIORITY, JOB_UP_PORT, JOB_LOCAL_MASK, JOB_COLUMNS };

/* The switch's registers, tables and counters: views of numpy arrays owned by
 * `p4ctl.pipeline.Pipeline`, so the P4Runtime server reads and writes the same cells. */
typedef struct {
    Py_ssize_t aggregators, k, max_jobs;
    int64_t *agg_job, *agg_seq, *agg_state, *agg_bitmap, *agg_count, *agg_exponent,
        *agg_priority;
    int32_t *agg_lanes; /* aggregators x k, native byte order */
    int64_t *job_packets, *job_bytes; /* JOB_COUNTERS x max_jobs */
    int64_t *drop_packets, *drop_bytes;
    /* Tables, rebuilt by the control plane on every write. */
    int64_t *jobs;                  /* max_jobs x JOB_COLUMNS */
    int64_t *src_keys, *src_ports;  /* sorted (job << 8 | worker, address) pairs -> port */
    Py_ssize_t sources;
    int64_t *ep_ports, *ep_addrs;   /* sorted switch ports -> packed UDP address */
    Py_ssize_t endpoints;
    int64_t *grp_ids, *grp_starts, *grp_ports; /* sorted group ids; ports of group g are
                                                  grp_ports[grp_starts[g] .. grp_starts[g+1]) */
    Py_ssize_t groups, widest_group;
} SwitchState;

/* Where the datagrams that leave go: fixed-stride rows, their sizes and packed addresses. */
typedef struct {
    uint8_t *rows;
    Py_ssize_t stride, capacity, count;
    int64_t *sizes, *addrs;
} Emitted;

/* codec.c: the worker's fragment codec (`workers.transfer`). */
void engine_quantize(const float *frags, Py_ssize_t m, Py_ssize_t k, const int8_t *exponents,
                     int shift, uint8_t *rows, Py_ssize_t stride, uint8_t *raw);
void engine_dequantize(const uint8_t *sums, Py_ssize_t m, Py_ssize_t k, const int64_t *exponents,
                       const uint8_t *raw, int shift, float *out, float *peak);

/* switch_pass.c: one packet pass (`Pipeline.handle`) per datagram. */
void engine_handle(SwitchState *s, const uint8_t *data, int64_t size, int64_t source,
                   int lost, Emitted *out);

#endif
