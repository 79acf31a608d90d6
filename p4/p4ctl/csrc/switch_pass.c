/* The per-packet pass of the soft switch, compiled.
 *
 * A mirror of `p4ctl.pipeline.Pipeline.handle`, `p4ctl.rule.check` and `p4ctl.rule.process`:
 * each function below names the Python function it mirrors, and the cases are in the same
 * order. The Python rule is the statement of the protocol (p4/PROTOCOL.md); this file is a
 * second target held to it by tests/p4ctl/test_engine_differential.py and the vectors.
 * Nothing here allocates, raises or logs; every register index is checked against the
 * sizes given at construction.
 */
#include <string.h>

#include "engine.h"

#define HEADER_SIZE 24
#define VERSION 1
#define PS_WORKER_ID 255

enum { GRADIENT, RESULT, TO_PS, PS_RESULT, UP };             /* protocol.Kind */
enum { STATIC, ATP, ESA };                                   /* protocol.Policy */
enum { FREE, PARTIAL, COMPLETE, FLUSHED_STATE };             /* protocol.AggState */
enum { RESEND = 0x01, BYPASSED = 0x02, EVICTED = 0x04, COMPLETE_FLAG = 0x08,
       RAW_FLOAT = 0x10, COLLISION = 0x20, FLUSHED_FLAG = 0x40 }; /* protocol.Flag */
enum { BAD_LENGTH, BAD_VERSION, BAD_KIND, BAD_LANES, UNKNOWN_JOB, BAD_WORKER, BAD_BITMAP,
       UNREGISTERED_SOURCE, BAD_AGG_INDEX, STALE, INJECTED_LOSS, WRONG_PORT, NO_DROP = -1 };
/* rule.JOB_COUNTERS, in order. */
enum { AGGREGATED_C, BYPASSED_C, PREEMPTED_C, EVICTED_C, RESENT_C, DROPPED_C };
/* rule.Outcome, with the counters rule.COUNTERS gives each. */
enum { CLAIMED, AGGREGATED, COMPLETED, DUPLICATE, COLLIDED, RAW_BYPASS, PREEMPTED,
       RESULT_RESENT, RESEND_TO_PS, FLUSHED, PS_RESULT_OUT, STALE_OUT, PARENT_RESULT,
       RESEND_UP };
static const int COUNTERS[][3] = {
    [CLAIMED] = {AGGREGATED_C, -1},          [AGGREGATED] = {AGGREGATED_C, -1},
    [COMPLETED] = {AGGREGATED_C, -1},        [DUPLICATE] = {RESENT_C, -1},
    [COLLIDED] = {BYPASSED_C, -1},           [RAW_BYPASS] = {BYPASSED_C, -1},
    [PREEMPTED] = {AGGREGATED_C, PREEMPTED_C, -1},
    [RESULT_RESENT] = {RESENT_C, -1},        [RESEND_TO_PS] = {RESENT_C, -1},
    [FLUSHED] = {RESENT_C, -1},              [PS_RESULT_OUT] = {-1},
    [STALE_OUT] = {DROPPED_C, -1},           [PARENT_RESULT] = {-1},
    [RESEND_UP] = {RESENT_C, -1},
};

/* A decoded header (protocol.Packet without its lanes, which stay in the datagram). */
typedef struct {
    int version, kind, flags, job, worker, fan_in, shadow, exponent, lanes;
    uint32_t agg_index, seq, bitmap;
    const uint8_t *data;
    Py_ssize_t size;
} Packet;

typedef struct {
    int64_t valid, policy, fan_in, part_base, part_size, mcast_group, ps_port, priority, up_port,
        local_mask;
} JobConfig;

/* One pass: the state, the packet, its aggregator (rule.own_index), where its outputs go. */
typedef struct {
    SwitchState *s;
    const Packet *pkt;
    JobConfig cfg;
    int64_t sender_port;
    Py_ssize_t i;
    Emitted *out;
} Pass;

static uint32_t get32(const uint8_t *p) { return (uint32_t)p[0] << 24 | p[1] << 16 | p[2] << 8 | p[3]; }
static void put16(uint8_t *p, uint32_t v) { p[0] = v >> 8; p[1] = v; }
static void put32(uint8_t *p, uint32_t v) { p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = v; }

static void
parse(const uint8_t *d, Py_ssize_t size, Packet *p)
{
    p->version = d[0];
    p->kind = d[1];
    p->flags = d[2] << 8 | d[3];
    p->job = d[4] << 8 | d[5];
    p->worker = d[6];
    p->fan_in = d[7];
    p->agg_index = get32(d + 8);
    p->seq = get32(d + 12);
    p->shadow = d[16];
    p->exponent = (int8_t)d[17];
    p->lanes = d[18] << 8 | d[19];
    p->bitmap = get32(d + 20);
    p->data = d;
    p->size = size;
}

static int
lookup_job(SwitchState *s, int job, JobConfig *cfg)
{
    if (job >= s->max_jobs || s->jobs == NULL)
        return 0;
    const int64_t *row = s->jobs + (Py_ssize_t)job * JOB_COLUMNS;
    cfg->valid = row[JOB_VALID];
    cfg->policy = row[JOB_POLICY];
    cfg->fan_in = row[JOB_FAN_IN];
    cfg->part_base = row[JOB_PART_BASE];
    cfg->part_size = row[JOB_PART_SIZE];
    cfg->mcast_group = row[JOB_MCAST];
    cfg->ps_port = row[JOB_PS_PORT];
    cfg->priority = row[JOB_PRIORITY];
    cfg->up_port = row[JOB_UP_PORT];
    cfg->local_mask = row[JOB_LOCAL_MASK];
    return cfg->valid != 0;
}

/* JobConfig.complete_mask: the bitmap of a sum complete at this switch. */
static uint32_t
complete_mask(const JobConfig *cfg)
{
    if (cfg->local_mask)
        return (uint32_t)cfg->local_mask;
    return cfg->fan_in >= 32 ? 0xFFFFFFFFu : ((uint32_t)1 << cfg->fan_in) - 1;
}

static int
has_parent(const JobConfig *cfg)
{
    return cfg->up_port >= 0;
}

/* Binary search of a sorted key column; returns the index or -1. */
static Py_ssize_t
find(const int64_t *keys, Py_ssize_t n, int64_t key)
{
    Py_ssize_t lo = 0, hi = n;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (keys[mid] < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && keys[lo] == key ? lo : -1;
}

/* worker_table: (job, worker, source address) -> the sender's switch port, or -1. */
static int64_t
lookup_source(SwitchState *s, int job, int worker, int64_t source)
{
    int64_t who = (int64_t)job << 8 | worker;
    Py_ssize_t lo = 0, hi = s->sources;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        const int64_t *k = s->src_keys + 2 * mid;
        if (k[0] < who || (k[0] == who && k[1] < source))
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < s->sources && s->src_keys[2 * lo] == who && s->src_keys[2 * lo + 1] == source)
        return s->src_ports[lo];
    return -1;
}

/* Pipeline._drop */
static void
drop(SwitchState *s, int reason, Py_ssize_t size, int job)
{
    s->drop_packets[reason] += 1;
    s->drop_bytes[reason] += size;
    if (job >= 0) {
        s->job_packets[DROPPED_C * s->max_jobs + job] += 1;
        s->job_bytes[DROPPED_C * s->max_jobs + job] += size;
    }
}

/* Pipeline._emit: one datagram out of switch port `port` (nothing if the port has no
 * endpoint, as on a switch whose port is down). */
static void
emit(Pass *p, const uint8_t *wire, Py_ssize_t size, int64_t port)
{
    SwitchState *s = p->s;
    Py_ssize_t e = find(s->ep_ports, s->endpoints, port);
    Emitted *out = p->out;
    if (e < 0 || out->count == out->capacity)
        return;
    memcpy(out->rows + out->count * out->stride, wire, size);
    out->sizes[out->count] = size;
    out->addrs[out->count] = s->ep_addrs[e];
    out->count++;
}

/* ToGroup: one replica per port of the multicast group. */
static void
emit_group(Pass *p, const uint8_t *wire, Py_ssize_t size, int64_t group)
{
    SwitchState *s = p->s;
    Py_ssize_t g = find(s->grp_ids, s->groups, group);
    if (g < 0)
        return;
    for (int64_t i = s->grp_starts[g]; i < s->grp_starts[g + 1]; i++)
        emit(p, wire, size, s->grp_ports[i]);
}

/* rule._to_ps: the received packet, kind TO_PS, with `flags` added, out of the job's PS port. */
static void
to_ps(Pass *p, int flags)
{
    uint8_t wire[HEADER_SIZE];
    memcpy(wire, p->pkt->data, HEADER_SIZE);
    wire[1] = TO_PS;
    put16(wire + 2, (uint32_t)(p->pkt->flags | flags));
    Emitted *out = p->out;
    Py_ssize_t before = out->count;
    emit(p, p->pkt->data, p->pkt->size, p->cfg.ps_port);
    if (out->count > before)
        memcpy(out->rows + before * out->stride, wire, HEADER_SIZE);
}

/* rule._up: the received packet as kind UP, worker 255, with `flags` added, out of the job's
 * up_port. */
static void
up(Pass *p, int flags)
{
    uint8_t wire[HEADER_SIZE];
    memcpy(wire, p->pkt->data, HEADER_SIZE);
    wire[1] = UP;
    put16(wire + 2, (uint32_t)(p->pkt->flags | flags));
    wire[6] = PS_WORKER_ID;
    Emitted *out = p->out;
    Py_ssize_t before = out->count;
    emit(p, p->pkt->data, p->pkt->size, p->cfg.up_port);
    if (out->count > before)
        memcpy(out->rows + before * out->stride, wire, HEADER_SIZE);
}

/* rule._bypass: a first send this switch cannot aggregate, up to the parent or to the PS. */
static void
bypass(Pass *p, int flags)
{
    if (has_parent(&p->cfg))
        up(p, flags);
    else
        to_ps(p, flags);
}

/* rule._held: the datagram of aggregator i's sum (partial or complete), into `wire`. */
static Py_ssize_t
held(SwitchState *s, Py_ssize_t i, int job, uint32_t seq, int flags, int fan_in, int kind,
     uint8_t *wire)
{
    wire[0] = VERSION;
    wire[1] = (uint8_t)kind;
    put16(wire + 2, (uint32_t)flags);
    put16(wire + 4, (uint32_t)job);
    wire[6] = kind == UP ? PS_WORKER_ID : 0;
    wire[7] = (uint8_t)fan_in;
    put32(wire + 8, (uint32_t)i);
    put32(wire + 12, seq);
    wire[16] = 0;
    wire[17] = (uint8_t)(int8_t)s->agg_exponent[i];
    put16(wire + 18, (uint32_t)s->k);
    put32(wire + 20, (uint32_t)s->agg_bitmap[i]);
    const int32_t *lanes = s->agg_lanes + i * s->k;
    for (Py_ssize_t l = 0; l < s->k; l++)
        put32(wire + HEADER_SIZE + 4 * l, (uint32_t)lanes[l]);
    return HEADER_SIZE + 4 * s->k;
}

/* The scratch datagram of one pass: header and k lanes. */
#define WIRE(s) uint8_t wire[HEADER_SIZE + 4 * (s)->k]

static void
held_to_ps(Pass *p, Py_ssize_t i, int flags)
{
    WIRE(p->s);
    Py_ssize_t n = held(p->s, i, p->pkt->job, p->pkt->seq, flags, (int)p->cfg.fan_in, TO_PS, wire);
    emit(p, wire, n, p->cfg.ps_port);
}

/* Registers.free */
static void
free_aggregator(SwitchState *s, Py_ssize_t i)
{
    s->agg_state[i] = FREE;
    s->agg_bitmap[i] = 0;
    s->agg_count[i] = 0;
}

/* rule._claim */
static void
claim(SwitchState *s, Py_ssize_t i, const Packet *pkt, int64_t priority)
{
    s->agg_job[i] = pkt->job;
    s->agg_seq[i] = pkt->seq;
    s->agg_state[i] = PARTIAL;
    s->agg_bitmap[i] = pkt->bitmap;
    s->agg_count[i] = 1;
    s->agg_exponent[i] = pkt->exponent;
    s->agg_priority[i] = priority;
    int32_t *lanes = s->agg_lanes + i * s->k;
    for (Py_ssize_t l = 0; l < s->k; l++)
        lanes[l] = (int32_t)get32(pkt->data + HEADER_SIZE + 4 * l);
}

/* rule._add: returns the new count; lanes wrap as int32 (numpy's int32 `+=`). */
static int64_t
add(SwitchState *s, Py_ssize_t i, const Packet *pkt)
{
    s->agg_bitmap[i] |= pkt->bitmap;
    int64_t count = s->agg_count[i] + 1;
    s->agg_count[i] = count;
    if (pkt->exponent > s->agg_exponent[i])
        s->agg_exponent[i] = pkt->exponent;
    int32_t *lanes = s->agg_lanes + i * s->k;
    for (Py_ssize_t l = 0; l < s->k; l++)
        lanes[l] = (int32_t)((uint32_t)lanes[l] + get32(pkt->data + HEADER_SIZE + 4 * l));
    return count;
}

/* rule._is_side */
static int
is_side(SwitchState *s, Py_ssize_t i, const Packet *pkt)
{
    return (pkt->flags & RAW_FLOAT) || pkt->exponent != s->agg_exponent[i];
}

/* rule._set_flushed */
static void
set_flushed(SwitchState *s, Py_ssize_t i, int state)
{
    if (state == FREE)
        free_aggregator(s, i);
    else
        s->agg_state[i] = state;
}

/* rule._on_partial: returns the outcome; COMPLETED means the caller emits the completion. */
static int
on_partial(Pass *p, int flushed_state)
{
    SwitchState *s = p->s;
    const Packet *pkt = p->pkt;
    Py_ssize_t i = p->i;
    int resend = pkt->flags & RESEND;
    if (s->agg_bitmap[i] & pkt->bitmap) {
        if (!resend)
            return DUPLICATE;
        held_to_ps(p, i, FLUSHED_FLAG);
        set_flushed(s, i, flushed_state);
        return FLUSHED;
    }
    if (is_side(s, i, pkt) || (resend && flushed_state == FREE)) {
        if (!resend) {
            bypass(p, BYPASSED);
            return RAW_BYPASS;
        }
        to_ps(p, BYPASSED);
        held_to_ps(p, i, FLUSHED_FLAG);
        set_flushed(s, i, flushed_state);
        return FLUSHED;
    }
    add(s, i, pkt);
    if ((uint32_t)s->agg_bitmap[i] != complete_mask(&p->cfg))
        return AGGREGATED;
    s->agg_state[i] = COMPLETE;
    return COMPLETED;
}

/* rule._result, multicast to the job's group. */
static void
result_to_group(Pass *p, Py_ssize_t i)
{
    WIRE(p->s);
    Py_ssize_t n = held(p->s, i, p->pkt->job, p->pkt->seq, COMPLETE_FLAG, (int)p->cfg.fan_in,
                        RESULT, wire);
    emit_group(p, wire, n, p->cfg.mcast_group);
}

/* rule._static_complete: the result to the workers, or the local sum up. */
static void
static_complete(Pass *p, Py_ssize_t i)
{
    if (!has_parent(&p->cfg)) {
        result_to_group(p, i);
        return;
    }
    WIRE(p->s);
    Py_ssize_t n = held(p->s, i, p->pkt->job, p->pkt->seq, COMPLETE_FLAG, (int)p->cfg.fan_in, UP,
                        wire);
    emit(p, wire, n, p->cfg.up_port);
}

/* rule._static */
static int
static_rule(Pass *p)
{
    SwitchState *s = p->s;
    const Packet *pkt = p->pkt;
    Py_ssize_t i = p->i;
    int64_t state = s->agg_state[i];
    int64_t held_seq = s->agg_seq[i];
    if (state != FREE && pkt->seq < held_seq)
        return STALE_OUT;
    if (state == FREE || pkt->seq > held_seq) {
        if (pkt->flags & RAW_FLOAT) {
            bypass(p, BYPASSED);
            return RAW_BYPASS;
        }
        claim(s, i, pkt, 0);
        if (pkt->bitmap != complete_mask(&p->cfg))
            return CLAIMED;
        s->agg_state[i] = COMPLETE;
        static_complete(p, i);
        return COMPLETED;
    }
    if (state == PARTIAL) {
        int outcome = on_partial(p, FLUSHED_STATE);
        if (outcome == COMPLETED)
            static_complete(p, i);
        return outcome;
    }
    if (state == COMPLETE) {
        uint32_t full = p->cfg.fan_in >= 32 ? 0xFFFFFFFFu : ((uint32_t)1 << p->cfg.fan_in) - 1;
        if (has_parent(&p->cfg) && (uint32_t)s->agg_bitmap[i] != full) {
            up(p, 0);
            return RESEND_UP;
        }
        WIRE(s);
        Py_ssize_t n = held(s, i, pkt->job, pkt->seq, COMPLETE_FLAG, (int)p->cfg.fan_in, RESULT,
                            wire);
        emit(p, wire, n, p->sender_port);
        return RESULT_RESENT;
    }
    to_ps(p, BYPASSED);
    return RESEND_TO_PS;
}

/* rule._complete_shared: atp sends the complete sum to the PS; esa also multicasts it; with a
 * parent the sum goes up instead. */
static void
complete_shared(Pass *p, int esa)
{
    WIRE(p->s);
    Py_ssize_t i = p->i;
    Py_ssize_t n;
    if (has_parent(&p->cfg)) {
        n = held(p->s, i, p->pkt->job, p->pkt->seq, COMPLETE_FLAG, (int)p->cfg.fan_in, UP, wire);
        emit(p, wire, n, p->cfg.up_port);
        return;
    }
    n = held(p->s, i, p->pkt->job, p->pkt->seq, COMPLETE_FLAG, (int)p->cfg.fan_in,
                        TO_PS, wire);
    if (esa) {
        wire[1] = RESULT;
        emit_group(p, wire, n, p->cfg.mcast_group);
        wire[1] = TO_PS;
    }
    emit(p, wire, n, p->cfg.ps_port);
}

/* rule._shared (atp and esa); *evicted_job is set to the holder a preemption evicted. */
static int
shared_rule(Pass *p, int *evicted_job)
{
    SwitchState *s = p->s;
    const Packet *pkt = p->pkt;
    Py_ssize_t i = p->i;
    int64_t state = s->agg_state[i];
    int mine = state != FREE && s->agg_job[i] == pkt->job && s->agg_seq[i] == pkt->seq;
    int esa = p->cfg.policy == ESA;
    if (mine && state == PARTIAL) {
        int outcome = on_partial(p, FREE);
        if (outcome == COMPLETED)
            complete_shared(p, esa);
        return outcome;
    }
    if (mine || (pkt->flags & RESEND)) {
        to_ps(p, BYPASSED);
        return RESEND_TO_PS;
    }
    if (pkt->flags & RAW_FLOAT) {
        bypass(p, BYPASSED);
        return RAW_BYPASS;
    }
    int64_t priority = p->cfg.priority;
    if (state == FREE || (esa && state == COMPLETE)) {
        claim(s, i, pkt, priority);
        if (pkt->bitmap == complete_mask(&p->cfg)) {
            s->agg_state[i] = COMPLETE;
            complete_shared(p, esa);
            return COMPLETED;
        }
        return CLAIMED;
    }
    if (esa && state == PARTIAL && priority > s->agg_priority[i]) {
        JobConfig holder;
        int holder_job = (int)s->agg_job[i];
        int known = lookup_job(s, holder_job, &holder);
        if (known) {
            /* Where the holder's unaggregatable first sends go: its parent, else its PS. */
            int upward = has_parent(&holder);
            WIRE(s);
            Py_ssize_t n = held(s, i, holder_job, (uint32_t)s->agg_seq[i], EVICTED,
                                (int)holder.fan_in, upward ? UP : TO_PS, wire);
            emit(p, wire, n, upward ? holder.up_port : holder.ps_port);
        }
        *evicted_job = holder_job;
        claim(s, i, pkt, priority);
        if (pkt->bitmap == complete_mask(&p->cfg)) {
            s->agg_state[i] = COMPLETE;
            complete_shared(p, esa);
        }
        return PREEMPTED;
    }
    bypass(p, BYPASSED | COLLISION);
    return COLLIDED;
}

/* rule._ps_result */
static int
ps_result(Pass *p)
{
    SwitchState *s = p->s;
    const Packet *pkt = p->pkt;
    Py_ssize_t i = pkt->agg_index;
    if (p->cfg.policy != STATIC && s->agg_state[i] != FREE && s->agg_job[i] == pkt->job
        && s->agg_seq[i] == pkt->seq)
        free_aggregator(s, i);
    emit_group(p, pkt->data, pkt->size, p->cfg.mcast_group);
    return PS_RESULT_OUT;
}

/* rule._parent_result: atp/esa free the aggregator of (job, seq); a static slot of (job, seq)
 * keeps the result; then down to the workers. */
static int
parent_result(Pass *p)
{
    SwitchState *s = p->s;
    const Packet *pkt = p->pkt;
    Py_ssize_t i = p->i;
    if (s->agg_state[i] != FREE && s->agg_job[i] == pkt->job && s->agg_seq[i] == pkt->seq) {
        if (p->cfg.policy != STATIC) {
            free_aggregator(s, i);
        } else {
            s->agg_state[i] = COMPLETE;
            s->agg_bitmap[i] = pkt->bitmap;
            s->agg_exponent[i] = pkt->exponent;
            int32_t *lanes = s->agg_lanes + i * s->k;
            for (Py_ssize_t l = 0; l < s->k; l++)
                lanes[l] = (int32_t)get32(pkt->data + HEADER_SIZE + 4 * l);
        }
    }
    emit_group(p, pkt->data, pkt->size, p->cfg.mcast_group);
    return PARENT_RESULT;
}

/* rule.own_index: a static slot of the sequence for a packet from another switch, else the
 * packet's index; -1 when a static partition has no valid slot. */
static int64_t
own_index(const Packet *pkt, const JobConfig *cfg)
{
    if (cfg->policy != STATIC || pkt->kind == GRADIENT)
        return pkt->agg_index;
    int64_t size = cfg->part_size;
    if (size <= 0 || (size & (size - 1)) != 0)
        return -1;
    int64_t shadow = (pkt->seq & size) ? 1 : 0;
    return cfg->part_base + shadow * size + (pkt->seq & (size - 1));
}

/* rule._own_index_check */
static int
own_index_check(SwitchState *s, const Packet *pkt, const JobConfig *cfg)
{
    int64_t i = own_index(pkt, cfg);
    return i >= 0 && i < s->aggregators ? NO_DROP : BAD_AGG_INDEX;
}

/* rule.check: the drop reason of a packet with a job table entry, or NO_DROP. */
static int
check(SwitchState *s, const Packet *pkt, const JobConfig *cfg)
{
    if (pkt->kind == PS_RESULT) {
        if (pkt->worker != PS_WORKER_ID)
            return BAD_WORKER;
        return pkt->agg_index < (uint64_t)s->aggregators ? NO_DROP : BAD_AGG_INDEX;
    }
    if (pkt->kind == UP) {
        if (pkt->worker != PS_WORKER_ID || pkt->fan_in != cfg->fan_in)
            return BAD_WORKER;
        if (pkt->bitmap == 0 || (pkt->bitmap & ~complete_mask(cfg)) != 0)
            return BAD_BITMAP;
        return own_index_check(s, pkt, cfg);
    }
    if (pkt->kind == RESULT && has_parent(cfg))
        return own_index_check(s, pkt, cfg);
    if (pkt->kind != GRADIENT)
        return BAD_KIND;
    if (pkt->worker >= cfg->fan_in || pkt->fan_in != cfg->fan_in)
        return BAD_WORKER;
    if (pkt->worker >= 32 || pkt->bitmap != (uint32_t)1 << pkt->worker)
        return BAD_BITMAP;
    if (cfg->policy == STATIC) {
        int64_t size = cfg->part_size;
        if (size <= 0 || (size & (size - 1)) != 0)
            return BAD_AGG_INDEX;
        int64_t shadow = (pkt->seq & size) ? 1 : 0;
        int64_t index = cfg->part_base + shadow * size + (pkt->seq & (size - 1));
        if (pkt->agg_index != index || pkt->shadow != shadow)
            return BAD_AGG_INDEX;
    }
    return pkt->agg_index < (uint64_t)s->aggregators ? NO_DROP : BAD_AGG_INDEX;
}

/* Pipeline.handle: one packet pass. */
void
engine_handle(SwitchState *s, const uint8_t *data, int64_t size, int64_t source, int lost,
              Emitted *out)
{
    if (lost) {
        drop(s, INJECTED_LOSS, size, -1);
        return;
    }
    Packet pkt;
    if (size < HEADER_SIZE) {
        drop(s, BAD_LENGTH, size, -1);
        return;
    }
    parse(data, size, &pkt);
    if (pkt.version != VERSION) {
        drop(s, BAD_VERSION, size, -1);
        return;
    }
    if (pkt.lanes != s->k) {
        drop(s, BAD_LANES, size, -1);
        return;
    }
    if (size != HEADER_SIZE + 4 * pkt.lanes) {
        drop(s, BAD_LENGTH, size, -1);
        return;
    }
    if (pkt.kind > UP) {
        drop(s, BAD_KIND, size, -1);
        return;
    }
    Pass p = {.s = s, .pkt = &pkt, .out = out};
    if (!lookup_job(s, pkt.job, &p.cfg)) {
        drop(s, UNKNOWN_JOB, size, -1);
        return;
    }
    /* rule.source_check, with Pipeline._ingress_port: a datagram enters on the port whose
     * endpoint is its source, so it entered on its entry's port exactly when that port's
     * endpoint is the source. */
    /* pipeline._source_worker: a RESULT from the parent is registered as worker 255. */
    int who = pkt.kind == RESULT && has_parent(&p.cfg) ? PS_WORKER_ID : pkt.worker;
    p.sender_port = lookup_source(s, pkt.job, who, source);
    if (p.sender_port < 0) {
        drop(s, UNREGISTERED_SOURCE, size, pkt.job);
        return;
    }
    Py_ssize_t e = find(s->ep_ports, s->endpoints, p.sender_port);
    if (e < 0 || s->ep_addrs[e] != source) {
        drop(s, WRONG_PORT, size, pkt.job);
        return;
    }
    int reason = check(s, &pkt, &p.cfg);
    if (reason != NO_DROP) {
        drop(s, reason, size, pkt.job);
        return;
    }
    int evicted_job = -1, outcome;
    p.i = (Py_ssize_t)own_index(&pkt, &p.cfg);
    if (pkt.kind == PS_RESULT)
        outcome = ps_result(&p);
    else if (pkt.kind == RESULT)
        outcome = parent_result(&p);
    else if (p.cfg.policy == STATIC)
        outcome = static_rule(&p);
    else
        outcome = shared_rule(&p, &evicted_job);
    if (outcome == STALE_OUT) {
        s->drop_packets[STALE] += 1;
        s->drop_bytes[STALE] += size;
    }
    for (const int *c = COUNTERS[outcome]; *c >= 0; c++) {
        s->job_packets[*c * s->max_jobs + pkt.job] += 1;
        s->job_bytes[*c * s->max_jobs + pkt.job] += size;
    }
    if (evicted_job >= 0 && evicted_job < s->max_jobs) {
        s->job_packets[EVICTED_C * s->max_jobs + evicted_job] += 1;
        s->job_bytes[EVICTED_C * s->max_jobs + evicted_job] += size;
    }
}
