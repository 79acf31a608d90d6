/* `p4ctl._engine`: the Python face of the compiled data path.
 *
 * Buffers in, buffers out: the Python side (`p4ctl.engine`) owns configuration, errors and
 * logging, allocates every array and passes it here. Functions:
 *
 *   enable_gro(fd) -> bool
 *   recv_burst(fd, scratch, rows, stride, sizes, addrs, wait) -> (count, lost)
 *   send_burst(fd, rows, stride, sizes, addrs, count, order=None, gso=True) -> (failed, gso)
 *   SwitchEngine(registers, counters, aggregators, lanes, max_jobs)
 *       .set_tables(jobs, src_keys, src_ports, ep_ports, ep_addrs, grp_ids, grp_starts,
 *                   grp_ports, widest_group)
 *       .process(rows, stride, sizes, addrs, start, count, lost, out_rows, out_sizes,
 *                out_addrs) -> (next, emitted)
 *   quantize_rows(frags, m, k, exponents, shift, rows, stride, offset, raw)
 *   dequantize_rows(sums, m, k, exponents, raw, shift, out, peak)
 */
#include <errno.h>
#include <string.h>

#include "engine.h"

/* A buffer of at least `count` items of `itemsize` bytes, C-contiguous, writable if asked. */
static int
view_of(PyObject *obj, Py_buffer *view, Py_ssize_t itemsize, Py_ssize_t count, int writable,
        const char *name)
{
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0)
        return -1;
    if (view->itemsize != itemsize || view->len < count * itemsize) {
        PyErr_Format(PyExc_ValueError, "%s: expected %zd items of %zd bytes, got %zd bytes of "
                     "items of %zd", name, count, itemsize, view->len, view->itemsize);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------- burst I/O */

static PyObject *
enable_gro(PyObject *self, PyObject *args)
{
    int fd;
    if (!PyArg_ParseTuple(args, "i", &fd))
        return NULL;
    return PyBool_FromLong(engine_enable_gro(fd));
}

static PyObject *
recv_burst(PyObject *self, PyObject *args)
{
    int fd, wait;
    Py_ssize_t stride;
    PyObject *scratch_obj, *rows_obj, *sizes_obj, *addrs_obj;
    if (!PyArg_ParseTuple(args, "iOOnOOp", &fd, &scratch_obj, &rows_obj, &stride, &sizes_obj,
                          &addrs_obj, &wait))
        return NULL;
    Py_buffer scratch, rows, sizes, addrs;
    if (stride < 1) {
        PyErr_SetString(PyExc_ValueError, "stride must be positive");
        return NULL;
    }
    if (view_of(scratch_obj, &scratch, 1, 65536, 1, "scratch") < 0)
        return NULL;
    if (view_of(rows_obj, &rows, 1, stride, 1, "rows") < 0)
        goto fail_scratch;
    Py_ssize_t slots = rows.len / stride;
    if (view_of(sizes_obj, &sizes, 8, slots, 1, "sizes") < 0)
        goto fail_rows;
    if (view_of(addrs_obj, &addrs, 8, slots, 1, "addrs") < 0)
        goto fail_sizes;
    Py_ssize_t lost = 0;
    Py_ssize_t got = engine_recv_burst(fd, scratch.buf, scratch.len, rows.buf, stride, slots,
                                       sizes.buf, addrs.buf, wait, &lost);
    int error = errno;
    PyBuffer_Release(&addrs);
    PyBuffer_Release(&sizes);
    PyBuffer_Release(&rows);
    PyBuffer_Release(&scratch);
    if (got < 0) {
        if (error == EAGAIN || error == EWOULDBLOCK || error == EINTR)
            return Py_BuildValue("nn", (Py_ssize_t)0, (Py_ssize_t)0);
        errno = error;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return Py_BuildValue("nn", got, lost);
fail_sizes:
    PyBuffer_Release(&sizes);
fail_rows:
    PyBuffer_Release(&rows);
fail_scratch:
    PyBuffer_Release(&scratch);
    return NULL;
}

static PyObject *
send_burst(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"fd", "rows", "stride", "sizes", "addrs", "count", "order", "gso",
                               NULL};
    int fd, gso = 1;
    Py_ssize_t stride, count;
    PyObject *rows_obj, *sizes_obj, *addrs_obj, *order_obj = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "iOnOOn|Op", keywords, &fd, &rows_obj,
                                     &stride, &sizes_obj, &addrs_obj, &count, &order_obj, &gso))
        return NULL;
    if (count <= 0)
        return Py_BuildValue("nO", (Py_ssize_t)0, gso ? Py_True : Py_False);
    Py_buffer rows, sizes, addrs, order = {0};
    if (view_of(rows_obj, &rows, 1, 0, 0, "rows") < 0)
        return NULL;
    Py_ssize_t slots = stride > 0 ? rows.len / stride : 0;
    if (view_of(sizes_obj, &sizes, 8, slots, 0, "sizes") < 0)
        goto fail_rows;
    if (view_of(addrs_obj, &addrs, 8, slots, 0, "addrs") < 0)
        goto fail_sizes;
    if (order_obj != Py_None && view_of(order_obj, &order, 8, count, 0, "order") < 0)
        goto fail_addrs;
    const int64_t *rank = order_obj != Py_None ? order.buf : NULL;
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t r = rank != NULL ? rank[i] : i;
        int64_t size = ((int64_t *)sizes.buf)[r < slots && r >= 0 ? r : 0];
        if (r < 0 || r >= slots || size < 0 || size > stride) {
            PyErr_Format(PyExc_ValueError, "row %zd of %zd (size %lld) is outside the rows",
                         r, slots, (long long)size);
            goto fail_order;
        }
    }
    Py_ssize_t failed = engine_send_burst(fd, rows.buf, stride, sizes.buf, addrs.buf, rank,
                                          count, &gso);
    if (order_obj != Py_None)
        PyBuffer_Release(&order);
    PyBuffer_Release(&addrs);
    PyBuffer_Release(&sizes);
    PyBuffer_Release(&rows);
    return Py_BuildValue("nO", failed, gso ? Py_True : Py_False);
fail_order:
    if (order_obj != Py_None)
        PyBuffer_Release(&order);
fail_addrs:
    PyBuffer_Release(&addrs);
fail_sizes:
    PyBuffer_Release(&sizes);
fail_rows:
    PyBuffer_Release(&rows);
    return NULL;
}

/* ---------------------------------------------------------------------- SwitchEngine */

enum { R_JOB, R_SEQ, R_STATE, R_BITMAP, R_COUNT, R_EXPONENT, R_PRIORITY, R_LANES, C_JOB_PACKETS, C_JOB_BYTES, C_DROP_PACKETS, C_DROP_BYTES, STATE_VIEWS };
enum { T_JOBS, T_SRC_KEYS, T_SRC_PORTS, T_EP_PORTS, T_EP_ADDRS, T_GRP_IDS, T_GRP_STARTS,
       T_GRP_PORTS, TABLE_VIEWS };
#define JOB_COUNTER_ROWS 6
#define DROP_REASONS 12

typedef struct {
    PyObject_HEAD
    SwitchState state;
    Py_buffer views[STATE_VIEWS];
    Py_buffer tables[TABLE_VIEWS];
    int has_tables;
} SwitchEngine;

static void
release_tables(SwitchEngine *self)
{
    if (!self->has_tables)
        return;
    for (int t = 0; t < TABLE_VIEWS; t++)
        PyBuffer_Release(&self->tables[t]);
    self->has_tables = 0;
    self->state.jobs = NULL;
    self->state.sources = self->state.endpoints = self->state.groups = 0;
}

static void
engine_dealloc(SwitchEngine *self)
{
    release_tables(self);
    for (int v = 0; v < STATE_VIEWS; v++)
        if (self->views[v].obj != NULL)
            PyBuffer_Release(&self->views[v]);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
engine_init(SwitchEngine *self, PyObject *args, PyObject *kwargs)
{
    PyObject *registers, *counters;
    Py_ssize_t aggregators, k, max_jobs;
    if (!PyArg_ParseTuple(args, "O!O!nnn", &PyTuple_Type, &registers, &PyTuple_Type, &counters,
                          &aggregators, &k, &max_jobs))
        return -1;
    if (PyTuple_GET_SIZE(registers) != R_LANES + 1 || PyTuple_GET_SIZE(counters) != 4) {
        PyErr_SetString(PyExc_ValueError, "registers: 8 arrays; counters: 4 arrays");
        return -1;
    }
    if (aggregators < 1 || k < 1 || max_jobs < 1 || self->views[0].obj != NULL) {
        PyErr_SetString(PyExc_ValueError, "positive sizes, and one initialisation");
        return -1;
    }
    static const char *names[STATE_VIEWS] = {
        "agg_job", "agg_seq", "agg_state", "agg_bitmap", "agg_count", "agg_exponent",
        "agg_priority", "agg_lanes", "job_packets", "job_bytes", "drop_packets",
        "drop_bytes"};
    for (int v = 0; v < STATE_VIEWS; v++) {
        PyObject *obj = v <= R_LANES ? PyTuple_GET_ITEM(registers, v)
                                     : PyTuple_GET_ITEM(counters, v - C_JOB_PACKETS);
        Py_ssize_t count = v == R_LANES ? aggregators * k
                         : v == C_JOB_PACKETS || v == C_JOB_BYTES ? JOB_COUNTER_ROWS * max_jobs
                         : v >= C_DROP_PACKETS ? DROP_REASONS
                                               : aggregators;
        if (view_of(obj, &self->views[v], v == R_LANES ? 4 : 8, count, 1, names[v]) < 0) {
            for (int u = 0; u < v; u++)
                PyBuffer_Release(&self->views[u]);
            memset(self->views, 0, sizeof(self->views));
            return -1;
        }
    }
    SwitchState *s = &self->state;
    s->aggregators = aggregators;
    s->k = k;
    s->max_jobs = max_jobs;
    int64_t **regs[] = {&s->agg_job, &s->agg_seq, &s->agg_state, &s->agg_bitmap, &s->agg_count,
                        &s->agg_exponent, &s->agg_priority};
    for (int v = 0; v < R_LANES; v++)
        *regs[v] = self->views[v].buf;
    s->agg_lanes = self->views[R_LANES].buf;
    s->job_packets = self->views[C_JOB_PACKETS].buf;
    s->job_bytes = self->views[C_JOB_BYTES].buf;
    s->drop_packets = self->views[C_DROP_PACKETS].buf;
    s->drop_bytes = self->views[C_DROP_BYTES].buf;
    return 0;
}

static PyObject *
engine_set_tables(SwitchEngine *self, PyObject *args)
{
    PyObject *objs[TABLE_VIEWS];
    Py_ssize_t widest;
    if (!PyArg_ParseTuple(args, "OOOOOOOOn", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4],
                          &objs[5], &objs[6], &objs[7], &widest))
        return NULL;
    Py_buffer fresh[TABLE_VIEWS];
    static const char *names[TABLE_VIEWS] = {"jobs", "src_keys", "src_ports", "ep_ports",
                                             "ep_addrs", "grp_ids", "grp_starts", "grp_ports"};
    for (int t = 0; t < TABLE_VIEWS; t++) {
        Py_ssize_t count = t == T_JOBS ? self->state.max_jobs * JOB_COLUMNS : 0;
        if (view_of(objs[t], &fresh[t], 8, count, 0, names[t]) < 0) {
            for (int u = 0; u < t; u++)
                PyBuffer_Release(&fresh[u]);
            return NULL;
        }
    }
    Py_ssize_t sources = fresh[T_SRC_PORTS].len / 8, endpoints = fresh[T_EP_PORTS].len / 8;
    Py_ssize_t groups = fresh[T_GRP_IDS].len / 8, members = fresh[T_GRP_PORTS].len / 8;
    int ok = fresh[T_SRC_KEYS].len / 8 == 2 * sources && fresh[T_EP_ADDRS].len / 8 == endpoints
             && fresh[T_GRP_STARTS].len / 8 == groups + 1 && widest >= 0;
    const int64_t *starts = fresh[T_GRP_STARTS].buf;
    for (Py_ssize_t g = 0; ok && g <= groups; g++)
        ok = starts[g] >= 0 && starts[g] <= members && (g == 0 || starts[g] >= starts[g - 1])
             && (g == 0 || starts[g] - starts[g - 1] <= widest);
    if (!ok) {
        for (int t = 0; t < TABLE_VIEWS; t++)
            PyBuffer_Release(&fresh[t]);
        PyErr_SetString(PyExc_ValueError, "inconsistent table arrays");
        return NULL;
    }
    release_tables(self);
    memcpy(self->tables, fresh, sizeof(fresh));
    self->has_tables = 1;
    SwitchState *s = &self->state;
    s->jobs = self->tables[T_JOBS].buf;
    s->src_keys = self->tables[T_SRC_KEYS].buf;
    s->src_ports = self->tables[T_SRC_PORTS].buf;
    s->sources = sources;
    s->ep_ports = self->tables[T_EP_PORTS].buf;
    s->ep_addrs = self->tables[T_EP_ADDRS].buf;
    s->endpoints = endpoints;
    s->grp_ids = self->tables[T_GRP_IDS].buf;
    s->grp_starts = self->tables[T_GRP_STARTS].buf;
    s->grp_ports = self->tables[T_GRP_PORTS].buf;
    s->groups = groups;
    s->widest_group = widest;
    Py_RETURN_NONE;
}

static PyObject *
engine_process(SwitchEngine *self, PyObject *args)
{
    PyObject *rows_obj, *sizes_obj, *addrs_obj, *lost_obj, *out_obj, *osizes_obj, *oaddrs_obj;
    Py_ssize_t stride, start, count;
    if (!PyArg_ParseTuple(args, "OnOOnnOOOO", &rows_obj, &stride, &sizes_obj, &addrs_obj, &start,
                          &count, &lost_obj, &out_obj, &osizes_obj, &oaddrs_obj))
        return NULL;
    SwitchState *s = &self->state;
    Py_ssize_t datagram = 24 + 4 * s->k;
    if (!self->has_tables) {
        PyErr_SetString(PyExc_RuntimeError, "set_tables first");
        return NULL;
    }
    if (stride < datagram || start < 0 || count < start) {
        PyErr_SetString(PyExc_ValueError, "rows of at least one datagram, 0 <= start <= count");
        return NULL;
    }
    Py_buffer rows, sizes, addrs, lost = {0}, out, osizes, oaddrs;
    PyObject *result = NULL;
    if (view_of(rows_obj, &rows, 1, count * stride, 0, "rows") < 0)
        return NULL;
    if (view_of(sizes_obj, &sizes, 8, count, 0, "sizes") < 0)
        goto r0;
    if (view_of(addrs_obj, &addrs, 8, count, 0, "addrs") < 0)
        goto r1;
    if (lost_obj != Py_None && view_of(lost_obj, &lost, 1, count, 0, "lost") < 0)
        goto r2;
    if (view_of(out_obj, &out, 1, datagram, 1, "out_rows") < 0)
        goto r3;
    Py_ssize_t capacity = out.len / datagram;
    if (view_of(osizes_obj, &osizes, 8, capacity, 1, "out_sizes") < 0)
        goto r4;
    if (view_of(oaddrs_obj, &oaddrs, 8, capacity, 1, "out_addrs") < 0)
        goto r5;
    Emitted emitted = {.rows = out.buf, .stride = datagram, .capacity = capacity, .count = 0,
                       .sizes = osizes.buf, .addrs = oaddrs.buf};
    /* The most one packet emits: a multicast, plus an evicted sum and a PS copy. */
    Py_ssize_t most = s->widest_group + 2;
    const int64_t *in_sizes = sizes.buf, *in_addrs = addrs.buf;
    const uint8_t *dropped = lost_obj != Py_None ? lost.buf : NULL;
    Py_ssize_t i = start;
    for (; i < count && emitted.capacity - emitted.count >= most; i++) {
        int64_t size = in_sizes[i];
        if (size < 0)
            size = 0;
        /* A datagram longer than its row was cut when received; the pass reads past the
         * header only of a datagram of exactly header + k lanes, which fits a row. */
        engine_handle(s, (const uint8_t *)rows.buf + i * stride, size, in_addrs[i],
                      dropped != NULL && dropped[i], &emitted);
    }
    result = Py_BuildValue("nn", i, emitted.count);
    PyBuffer_Release(&oaddrs);
r5:
    PyBuffer_Release(&osizes);
r4:
    PyBuffer_Release(&out);
r3:
    if (lost_obj != Py_None)
        PyBuffer_Release(&lost);
r2:
    PyBuffer_Release(&addrs);
r1:
    PyBuffer_Release(&sizes);
r0:
    PyBuffer_Release(&rows);
    return result;
}

static PyMethodDef engine_methods[] = {
    {"set_tables", (PyCFunction)engine_set_tables, METH_VARARGS,
     "Point the pass at new table arrays (the control plane wrote a table)."},
    {"process", (PyCFunction)engine_process, METH_VARARGS,
     "Run the packet pass over rows start..count; returns (next row, datagrams emitted)."},
    {NULL}};

static PyTypeObject SwitchEngineType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "p4ctl._engine.SwitchEngine",
    .tp_basicsize = sizeof(SwitchEngine),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The soft switch's packet pass over numpy registers, tables and counters.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)engine_init,
    .tp_dealloc = (destructor)engine_dealloc,
    .tp_methods = engine_methods,
};

/* ------------------------------------------------------------------ fragment codec */

static PyObject *
quantize_rows(PyObject *self, PyObject *args)
{
    PyObject *frags_obj, *exps_obj, *rows_obj, *raw_obj;
    Py_ssize_t m, k, stride, offset;
    int shift;
    if (!PyArg_ParseTuple(args, "OnnOiOnnO", &frags_obj, &m, &k, &exps_obj, &shift, &rows_obj,
                          &stride, &offset, &raw_obj))
        return NULL;
    if (m < 0 || k < 1 || offset < 0 || stride < offset + 4 * k) {
        PyErr_SetString(PyExc_ValueError, "quantize_rows: bad shape");
        return NULL;
    }
    Py_buffer frags, exps, rows, raw;
    PyObject *result = NULL;
    if (view_of(frags_obj, &frags, 4, m * k, 0, "frags") < 0)
        return NULL;
    if (view_of(exps_obj, &exps, 1, m, 0, "exponents") < 0)
        goto r0;
    if (view_of(rows_obj, &rows, 1, m ? (m - 1) * stride + offset + 4 * k : 0, 1, "rows") < 0)
        goto r1;
    if (view_of(raw_obj, &raw, 1, m, 1, "raw") < 0)
        goto r2;
    Py_BEGIN_ALLOW_THREADS
    engine_quantize(frags.buf, m, k, exps.buf, shift, (uint8_t *)rows.buf + offset, stride,
                    raw.buf);
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
    PyBuffer_Release(&raw);
r2:
    PyBuffer_Release(&rows);
r1:
    PyBuffer_Release(&exps);
r0:
    PyBuffer_Release(&frags);
    return result;
}

static PyObject *
dequantize_rows(PyObject *self, PyObject *args)
{
    PyObject *sums_obj, *exps_obj, *raw_obj, *out_obj, *peak_obj;
    Py_ssize_t m, k;
    int shift;
    if (!PyArg_ParseTuple(args, "OnnOOiOO", &sums_obj, &m, &k, &exps_obj, &raw_obj, &shift,
                          &out_obj, &peak_obj))
        return NULL;
    if (m < 0 || k < 1) {
        PyErr_SetString(PyExc_ValueError, "dequantize_rows: bad shape");
        return NULL;
    }
    Py_buffer sums, exps, raw, out, peak;
    PyObject *result = NULL;
    if (view_of(sums_obj, &sums, 4, m * k, 0, "sums") < 0)
        return NULL;
    if (view_of(exps_obj, &exps, 8, m, 0, "exponents") < 0)
        goto r0;
    if (view_of(raw_obj, &raw, 1, m, 0, "raw") < 0)
        goto r1;
    if (view_of(out_obj, &out, 4, m * k, 1, "out") < 0)
        goto r2;
    if (view_of(peak_obj, &peak, 4, m, 1, "peak") < 0)
        goto r3;
    Py_BEGIN_ALLOW_THREADS
    engine_dequantize(sums.buf, m, k, exps.buf, raw.buf, shift, out.buf, peak.buf);
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
    PyBuffer_Release(&peak);
r3:
    PyBuffer_Release(&out);
r2:
    PyBuffer_Release(&raw);
r1:
    PyBuffer_Release(&exps);
r0:
    PyBuffer_Release(&sums);
    return result;
}

static PyMethodDef module_methods[] = {
    {"enable_gro", enable_gro, METH_VARARGS, "Turn on UDP_GRO on a socket; False if unsupported."},
    {"recv_burst", recv_burst, METH_VARARGS, "Receive a burst of datagrams into fixed rows."},
    {"send_burst", (PyCFunction)(void (*)(void))send_burst, METH_VARARGS | METH_KEYWORDS,
     "Send rows as a burst, segmenting runs to one destination with GSO."},
    {"quantize_rows", quantize_rows, METH_VARARGS,
     "Fragments to big-endian fixed-point lanes in datagram rows (workers.transfer)."},
    {"dequantize_rows", dequantize_rows, METH_VARARGS,
     "Big-endian sums to float32 values and each row's peak |value| (workers.transfer)."},
    {NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "p4ctl._engine",
                                    "The compiled data path (see p4ctl.engine).", -1,
                                    module_methods};

PyMODINIT_FUNC
PyInit__engine(void)
{
    if (PyType_Ready(&SwitchEngineType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&SwitchEngineType);
    if (PyModule_AddObject(m, "SwitchEngine", (PyObject *)&SwitchEngineType) < 0) {
        Py_DECREF(&SwitchEngineType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
