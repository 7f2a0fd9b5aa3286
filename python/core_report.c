/*
 * core_report.c -- report and the collectives for Python.
 *
 * report(metrics, checkpoint): the metrics dict becomes an mt_metrics (nested dicts
 * flattened with '/', as the library nests keys), the checkpoint spec an mt_checkpoint
 * built on this rank (its files, its arrays borrowed through the buffer protocol until
 * the report returns, its metadata). Ray lets every rank pass a checkpoint or only some
 * (rank 0) and the others None; mt_report wants one on every rank or on none. So one
 * small agreement goes first: the most any rank has ("a checkpoint", "this rank failed to
 * prepare its report", its number of arrays), and a rank without one passes an empty one.
 * Arrays: mt_report wants the same arrays from every rank; when only rank 0's checkpoint
 * holds arrays, their layout is broadcast and the others put the same arrays over zeroed
 * memory (rank 0's copy is what is stored); any other disagreement on the number of arrays
 * is an error on every rank saying so. A rank that failed to convert its metrics or build
 * its checkpoint says so in the same agreement and its message is broadcast: every rank
 * raises (that rank its own error, the others PeerError naming it and quoting the error)
 * and none is left waiting in mt_report.
 *
 * Collectives take any C-contiguous buffer (numpy arrays; torch CPU tensors through
 * .numpy()) in place, with the GIL released while they wait. They go through the _nd
 * calls, so an array's shape is agreed in the call's one agreement with its count and
 * type: (2, 3) against (3, 2) is a MismatchError on every rank naming both shapes, not a
 * silent reshaping, and costs no extra collective.
 */
#include "core.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <limits.h>
#include <string.h>
#include <time.h>

static mt_py_state *state(PyObject *module)
{
    return mt_py_state_of(module);
}

/* ---------------------------------------------------------------- metrics */

static int put_metric(mt_metrics *m, const char *key, PyObject *v, mt_py_state *st)
{
    int rc;
    if (PyBool_Check(v) || PyLong_Check(v)) {
        int overflow = 0;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow)
            rc = mt_metrics_set_f64(m, key, PyLong_AsDouble(v));
        else
            rc = mt_metrics_set_i64(m, key, (int64_t)x);
    } else if (PyFloat_Check(v)) {
        rc = mt_metrics_set_f64(m, key, PyFloat_AS_DOUBLE(v));
    } else if (PyUnicode_Check(v)) {
        const char *s = PyUnicode_AsUTF8(v);
        if (!s)
            return -1;
        rc = mt_metrics_set_str(m, key, s);
    } else if (PyIndex_Check(v) || (Py_TYPE(v)->tp_as_number &&
                                    Py_TYPE(v)->tp_as_number->nb_float)) {
        /* numpy integers and floats, 0-d arrays, one-element tensors: an integer when it
         * is one (__index__), else a float (an ndarray or a tensor of floats has
         * __index__ too, which refuses it) */
        bool has_float = Py_TYPE(v)->tp_as_number && Py_TYPE(v)->tp_as_number->nb_float;
        const char *tn = Py_TYPE(v)->tp_name;
        if (!strcmp(tn, "numpy.bool_") || !strcmp(tn, "numpy.bool")) { /* 0 or 1, as bool
                                                    (its __index__ is deprecated) */
            int t = PyObject_IsTrue(v);
            if (t < 0)
                return -1;
            rc = mt_metrics_set_i64(m, key, t);
            if (rc) {
                mt_py_raise(st, rc);
                return -1;
            }
            return 0;
        }
        PyObject *i = PyIndex_Check(v) ? PyNumber_Index(v) : NULL;
        if (i) {
            rc = put_metric(m, key, i, st);
            Py_DECREF(i);
            return rc;
        }
        if (PyErr_Occurred() && (!has_float || !PyErr_ExceptionMatches(PyExc_TypeError)))
            return -1;
        PyErr_Clear();
        double x = PyFloat_AsDouble(v);
        if (x == -1.0 && PyErr_Occurred()) {
            /* an array or tensor of more than one number: named, with why */
            PyObject *type, *value, *tb;
            PyErr_Fetch(&type, &value, &tb);
            PyErr_NormalizeException(&type, &value, &tb);
            PyErr_Format(PyExc_TypeError, "report: metric \"%s\" is a %s that is not one "
                         "number (%S); metrics are numbers, str or dicts of them", key,
                         Py_TYPE(v)->tp_name, value ? value : Py_None);
            Py_XDECREF(type);
            Py_XDECREF(value);
            Py_XDECREF(tb);
            return -1;
        }
        rc = mt_metrics_set_f64(m, key, x);
    } else {
        PyErr_Format(PyExc_TypeError, "report: metric \"%s\" is a %s; metrics are numbers, "
                     "str or dicts of them", key, Py_TYPE(v)->tp_name);
        return -1;
    }
    if (rc) {
        mt_py_raise(st, rc);
        return -1;
    }
    return 0;
}

/* Dicts nested deeper than this (a dict that holds itself) are refused, not followed
 * until the stack runs out. */
enum { NEST_MAX = 32 };

static int put_dict(mt_metrics *m, PyObject *d, const char *prefix, int depth,
                    mt_py_state *st)
{
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    if (depth > NEST_MAX) {
        PyErr_Format(PyExc_ValueError, "report: metrics nested more than %d dicts deep, at "
                     "\"%.200s...\" (a dict that holds itself?)", NEST_MAX, prefix);
        return -1;
    }
    while (PyDict_Next(d, &pos, &k, &v)) {
        const char *key = PyUnicode_Check(k) ? PyUnicode_AsUTF8(k) : NULL;
        if (!key) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_TypeError, "report: metric keys are str (got %R)", k);
            return -1;
        }
        char full[512];
        if (prefix)
            snprintf(full, sizeof full, "%s/%s", prefix, key);
        else
            snprintf(full, sizeof full, "%s", key);
        if (PyDict_Check(v) ? put_dict(m, v, full, depth + 1, st) : put_metric(m, full, v, st))
            return -1;
    }
    return 0;
}

PyObject *mt_py_metrics_dict(const mt_metrics *m)
{
    PyObject *d = PyDict_New();
    size_t n = mt_metrics_count(m);
    for (size_t i = 0; d && i < n; i++) {
        const char *key = mt_metrics_key(m, i);
        PyObject *v = NULL;
        switch (mt_metrics_type(m, key)) {
        case MT_METRIC_I64: {
            int64_t x = 0;
            mt_metrics_get_i64(m, key, &x);
            v = PyLong_FromLongLong((long long)x);
            break;
        }
        case MT_METRIC_F64: {
            double x = 0;
            mt_metrics_get_f64(m, key, &x);
            v = PyFloat_FromDouble(x);
            break;
        }
        case MT_METRIC_STR:
            v = PyUnicode_FromString(mt_metrics_get_str(m, key));
            break;
        default:
            v = Py_NewRef(Py_None);
        }
        if (!v || PyDict_SetItemString(d, key, v) < 0) {
            Py_XDECREF(v);
            Py_DECREF(d);
            return NULL;
        }
        Py_DECREF(v);
    }
    return d;
}

/* ---------------------------------------------------------------- checkpoint spec */

#define MAX_ARRAYS 4096

typedef struct {
    Py_buffer views[MAX_ARRAYS];
    const char *names[MAX_ARRAYS]; /* the spec's own strings (alive while report runs) */
    char sharded[MAX_ARRAYS];
    int nviews;
    void *fill[MAX_ARRAYS];        /* zeroed stand-ins for rank 0's arrays (see below) */
    int nfill;
} held;

static void held_release(held *h)
{
    for (int i = 0; i < h->nviews; i++)
        PyBuffer_Release(&h->views[i]);
    h->nviews = 0;
    for (int i = 0; i < h->nfill; i++)
        free(h->fill[i]);
    h->nfill = 0;
}

/* ---------------------------------------------------------------- arrays from rank 0 alone
 *
 * Ray's other idiom, only rank 0 passing a checkpoint: its arrays are described (name,
 * dtype, layout, shape) and broadcast, and every rank that has no arrays puts the same
 * ones over zeroed memory (calloc: pages never touched), so mt_report sees the same arrays
 * everywhere and stores rank 0's: a replicated array's copy is rank 0's, and a sharded one
 * gets no rows from the others. */

/* Rank 0's description: per array u16 name length, the name, u8 dtype, u8 sharded, u8
 * ndim, ndim x u64 dims. malloc'd, *len bytes; NULL when out of memory. */
static unsigned char *describe_arrays(const held *h, size_t *len)
{
    size_t n = 0;
    for (int i = 0; i < h->nviews; i++)
        n += 2 + strlen(h->names[i]) + 3 + 8 * (size_t)(h->views[i].ndim ? h->views[i].ndim : 1);
    unsigned char *d = malloc(n ? n : 1), *p = d;
    if (!d)
        return NULL;
    for (int i = 0; i < h->nviews; i++) {
        const Py_buffer *v = &h->views[i];
        uint16_t nl = (uint16_t)strlen(h->names[i]);
        memcpy(p, &nl, 2);
        memcpy(p + 2, h->names[i], nl);
        p += 2 + nl;
        *p++ = (unsigned char)mt_py_dtype_of(v, "checkpoint");
        *p++ = (unsigned char)h->sharded[i];
        int nd = v->ndim ? v->ndim : 1;
        *p++ = (unsigned char)nd;
        for (int k = 0; k < nd; k++) {
            uint64_t x = v->ndim ? (uint64_t)v->shape[k] : 1;
            memcpy(p, &x, 8);
            p += 8;
        }
    }
    *len = n;
    return d;
}

/* Put rank 0's described arrays into ck over zeroed memory (no GIL needed). */
static int fill_arrays(mt_checkpoint *ck, const unsigned char *d, size_t len, held *h)
{
    const unsigned char *p = d, *end = d + len;
    while (p < end) {
        uint16_t nl;
        char name[256];
        if (end - p < 2)
            goto bad;
        memcpy(&nl, p, 2);
        if (nl >= sizeof name || end - p < 2 + nl + 3)
            goto bad;
        memcpy(name, p + 2, nl);
        name[nl] = '\0';
        p += 2 + nl;
        mt_dtype t = (mt_dtype)*p++;
        int sharded = *p++, nd = *p++;
        size_t dims[8], n = mt_dtype_size(t);
        if (nd < 1 || nd > 8 || end - p < 8 * nd || h->nfill == MAX_ARRAYS)
            goto bad;
        for (int k = 0; k < nd; k++) {
            uint64_t x;
            memcpy(&x, p, 8);
            p += 8;
            dims[k] = (size_t)x;
        }
        if (sharded)
            dims[0] = 0; /* no rows from this rank */
        for (int k = 0; k < nd; k++)
            n *= dims[k];
        void *buf = calloc(1, n ? n : 1);
        if (!buf)
            return mt_set_error(MT_ENOMEM, "report: out of memory for rank 0's array layout");
        h->fill[h->nfill++] = buf;
        int rc = mt_checkpoint_put(ck, name, t, nd, dims, buf, sharded ? MT_SHARDED
                                                                        : MT_REPLICATED);
        if (rc)
            return rc;
    }
    return MT_OK;
bad:
    return mt_set_error(MT_EFORMAT, "report: rank 0's array description is damaged");
}

static int ck_fail(mt_py_state *st, int rc)
{
    mt_py_raise(st, rc);
    return -1;
}

/* spec: (files [(name, path)], arrays [(name, buffer, sharded)], meta [(key, value)]) */
static int build_checkpoint(mt_checkpoint *ck, PyObject *spec, held *h, mt_py_state *st)
{
    PyObject *files, *arrays, *meta;
    if (!PyArg_ParseTuple(spec, "OOO;a checkpoint spec is (files, arrays, metadata)", &files,
                          &arrays, &meta))
        return -1;
    PyObject *it;
    for (Py_ssize_t i = 0; i < PyList_Size(files); i++) {
        const char *name, *path;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(files, i), "ss", &name, &path))
            return -1;
        int rc = mt_checkpoint_add_file(ck, name, path);
        if (rc)
            return ck_fail(st, rc);
    }
    for (Py_ssize_t i = 0; i < PyList_Size(arrays); i++) {
        const char *name;
        PyObject *obj;
        int sharded;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(arrays, i), "sOp", &name, &obj, &sharded))
            return -1;
        if (h->nviews == MAX_ARRAYS) {
            PyErr_Format(PyExc_ValueError, "checkpoint: more than %d arrays", MAX_ARRAYS);
            return -1;
        }
        Py_buffer *v = &h->views[h->nviews];
        if (PyObject_GetBuffer(obj, v, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
            return -1;
        h->names[h->nviews] = name;
        h->sharded[h->nviews] = (char)sharded;
        h->nviews++;
        char what[300];
        snprintf(what, sizeof what, "checkpoint array \"%s\"", name);
        mt_dtype t = mt_py_dtype_of(v, what);
        if (!t)
            return -1;
        if (v->ndim > 8 || (sharded && v->ndim < 1)) {
            PyErr_Format(PyExc_ValueError, "%s: %d dimensions (%s)", what, v->ndim,
                         sharded ? "a sharded array needs 1 to 8" : "at most 8");
            return -1;
        }
        size_t dims[8] = {1};
        int nd = v->ndim ? v->ndim : 1; /* a 0-d array: one element */
        for (int d = 0; d < v->ndim; d++)
            dims[d] = (size_t)v->shape[d];
        int rc = mt_checkpoint_put(ck, name, t, nd, dims, v->buf,
                                   sharded ? MT_SHARDED : MT_REPLICATED);
        if (rc)
            return ck_fail(st, rc);
    }
    it = PyObject_GetIter(meta);
    if (!it)
        return -1;
    PyObject *item;
    while ((item = PyIter_Next(it))) {
        const char *key;
        PyObject *val;
        int rc = 0;
        if (!PyArg_ParseTuple(item, "sO", &key, &val)) {
            Py_DECREF(item);
            Py_DECREF(it);
            return -1;
        }
        if (PyUnicode_Check(val)) {
            const char *s = PyUnicode_AsUTF8(val);
            rc = s ? mt_checkpoint_set_meta(ck, key, s) : MT_EINVAL;
        } else if (PyLong_Check(val) && !PyBool_Check(val)) {
            long long x = PyLong_AsLongLong(val);
            rc = PyErr_Occurred() ? MT_EINVAL : mt_checkpoint_set_meta_i64(ck, key, x);
        } else if (PyFloat_Check(val)) {
            rc = mt_checkpoint_set_meta_f64(ck, key, PyFloat_AS_DOUBLE(val));
        } else {
            PyErr_Format(PyExc_TypeError, "checkpoint metadata \"%s\": %s is not str, int or "
                         "float", key, Py_TYPE(val)->tp_name);
        }
        Py_DECREF(item);
        if (PyErr_Occurred() || rc) {
            Py_DECREF(it);
            return PyErr_Occurred() ? -1 : ck_fail(st, rc);
        }
    }
    Py_DECREF(it);
    return PyErr_Occurred() ? -1 : 0;
}

/* report(metrics, spec, an exception instance or None): Collective. Raises StopTraining once a stop request
 * ended the run after this report's checkpoint. */
static PyObject *py_report(PyObject *module, PyObject *args)
{
    mt_py_state *st = state(module);
    PyObject *metrics, *spec;
    if (!PyArg_ParseTuple(args, "OO:report", &metrics, &spec))
        return NULL;
    mt_context *c = mt_py_context(st, "report");
    if (!c)
        return NULL;
    static held h; /* one report at a time: fit runs in one thread */
    /* an exception instance for spec: preparing the checkpoint failed in Python already */
    int failed = PyExceptionInstance_Check(spec);
    mt_metrics *m = mt_metrics_new();
    mt_checkpoint *ck = spec != Py_None && !failed ? mt_checkpoint_new() : NULL;
    int local = 0;
    if (failed) {
        PyErr_SetObject((PyObject *)Py_TYPE(spec), spec);
        local = -1;
    } else if (!m || (spec != Py_None && !ck)) {
        PyErr_NoMemory();
        local = -1;
    } else if (!PyDict_Check(metrics)) {
        PyErr_Format(PyExc_TypeError, "report: metrics must be a dict (got %s)",
                     Py_TYPE(metrics)->tp_name);
        local = -1;
    } else if (put_dict(m, metrics, NULL, 0, st) || (ck && build_checkpoint(ck, spec, &h, st)))
        local = -1;
    /* this rank's exception, if any, waits until every rank knows */
    PyObject *type = NULL, *value = NULL, *tb = NULL;
    char note[1024] = ""; /* its text, for the other ranks */
    if (local) {
        PyErr_Fetch(&type, &value, &tb);
        PyErr_NormalizeException(&type, &value, &tb);
        PyObject *txt = value ? PyObject_Str(value) : NULL;
        const char *u = txt ? PyUnicode_AsUTF8(txt) : NULL;
        snprintf(note, sizeof note, "%s: %s", type ? ((PyTypeObject *)type)->tp_name : "error",
                 u ? u : "?");
        Py_XDECREF(txt);
        PyErr_Clear();
    }
    int world = mt_world_size(c), me = mt_world_rank(c);
    int32_t narr = ck ? h.nviews : 0;
    size_t dlen = 0;
    unsigned char *desc = NULL;
    int nomem = me == 0 && !local && narr > 0 && !(desc = describe_arrays(&h, &dlen));
    if (nomem)
        snprintf(note, sizeof note, "report: out of memory describing the checkpoint's arrays");
    /* the most of: a checkpoint, the lowest failing rank (world - rank), its arrays (and
     * the fewest, negated), rank 0's arrays and the bytes of their description */
    int32_t agree[6] = {ck != NULL, local || nomem ? world - me : 0, narr, -narr,
                        me == 0 ? narr : 0, me == 0 ? (int32_t)dlen : 0};
    int rc, failed_rank = -1, fill = 0;
    Py_BEGIN_ALLOW_THREADS
    rc = mt_allreduce(c, agree, 6, MT_I32, MT_MAX);
    if (!rc && agree[1]) { /* the failing rank's message, to every rank */
        failed_rank = world - agree[1];
        rc = mt_broadcast(c, note, sizeof note, MT_U8, failed_rank);
        note[sizeof note - 1] = '\0';
    } else if (!rc && agree[2] != -agree[3]) {
        int32_t n0 = agree[4];
        char msg[640];
        if (n0 > 0 && n0 == agree[2]) {
            fill = 1; /* rank 0 has the most arrays: the ranks without any take its layout */
        } else if (n0 == 0) {
            snprintf(msg, sizeof msg, "report: some ranks' checkpoints hold arrays (up to %d; "
                     "this rank %d) but rank 0's holds none: arrays come from rank 0 alone "
                     "(the others passing None or no arrays) or from every rank (the same "
                     "arrays; replicated ones store rank 0's copy)", (int)agree[2], (int)narr);
            rc = mt_set_error(MT_EINVAL, msg);
        } else {
            snprintf(msg, sizeof msg, "report: the ranks' checkpoints hold different numbers "
                     "of arrays (from %d to %d; rank 0 %d, this rank %d): arrays come from "
                     "rank 0 alone (the others passing None or no arrays) or from every rank "
                     "with the same arrays (replicated ones: rank 0's copy is stored)",
                     (int)-agree[3], (int)agree[2], (int)n0, (int)narr);
            rc = mt_set_error(MT_EMISMATCH, msg);
        }
    }
    if (fill) { /* every rank: rank 0's description, then the ranks without arrays fill */
        size_t n = (size_t)agree[5];
        unsigned char *d = me == 0 ? desc : malloc(n ? n : 1);
        rc = mt_broadcast(c, d, d ? n : 0, MT_U8, 0); /* a lost malloc: a mismatch, no hang */
        if (!rc && narr == 0 && !ck && !(ck = mt_checkpoint_new()))
            rc = mt_set_error(MT_ENOMEM, "report: out of memory for a checkpoint");
        if (!rc && narr == 0)
            rc = fill_arrays(ck, d, n, &h);
        if (d != desc)
            free(d);
    }
    if (!rc && !agree[1] && agree[0] && !ck && !(ck = mt_checkpoint_new()))
        rc = mt_set_error(MT_ENOMEM, "report: out of memory for an empty checkpoint");
    Py_END_ALLOW_THREADS
    free(desc);
    PyObject *out = NULL;
    if (local && !rc) {
        PyErr_Restore(type, value, tb); /* this rank's own error */
        type = value = tb = NULL;
    } else if (rc) { /* the agreement failed itself */
        mt_py_raise(st, rc);
    } else if (failed_rank >= 0) {
        mt_set_error(MT_EPEER, "");
        PyErr_Format(st->errors[-MT_EPEER - 1], "report: rank %d failed to prepare its report "
                     "(its metrics or checkpoint): %s", failed_rank, note);
    } else {
        Py_BEGIN_ALLOW_THREADS
        rc = mt_report(c, m, ck);
        Py_END_ALLOW_THREADS
        if (rc == MT_ESTOP)
            PyErr_SetString(st->stop_training, mt_last_error());
        else if (rc)
            mt_py_raise(st, rc);
        else
            out = Py_NewRef(Py_None);
    }
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    held_release(&h);
    mt_metrics_free(&m);
    mt_checkpoint_free(&ck);
    return out;
}

/* ---------------------------------------------------------------- collectives */

/* The buffer's shape for the _nd collectives (at most 8 dimensions: the trailing ones of a
 * deeper array are folded into the eighth, their product); returns ndim. */
static int shape_of(const Py_buffer *v, size_t dims[8])
{
    int nd = v->ndim < 8 ? v->ndim : 8;
    for (int d = 0; d < nd; d++)
        dims[d] = (size_t)v->shape[d];
    for (int d = 8; d < v->ndim; d++)
        dims[7] *= (size_t)v->shape[d];
    return nd;
}

static int get_buffer(PyObject *obj, Py_buffer *v, int writable, const char *what)
{
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, v, flags) == 0)
        return 0;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_Format(PyExc_TypeError, "%s: needs a %sC-contiguous array (numpy array or torch CPU "
                 "tensor), got %s", what, writable ? "writable " : "", Py_TYPE(obj)->tp_name);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    return -1;
}

/* This rank's Python error (set) carried into a collective's agreement, so that every
 * rank raises (this one its own exception, the others PeerError quoting it) and no rank
 * returns alone while the others wait for it. Returns NULL. */
static PyObject *fail_everywhere(mt_context *c)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    PyObject *txt = value ? PyObject_Str(value) : NULL;
    const char *u = txt ? PyUnicode_AsUTF8(txt) : NULL;
    if (!u)
        PyErr_Clear();
    char msg[1024];
    snprintf(msg, sizeof msg, "%s: %s", type ? ((PyTypeObject *)type)->tp_name : "error",
             u ? u : "?");
    Py_XDECREF(txt);
    mt_set_error(MT_EINVAL, msg);
    Py_BEGIN_ALLOW_THREADS
    mt_allreduce_nd(c, NULL, MT_ND_FAIL, NULL, MT_F32, MT_SUM);
    Py_END_ALLOW_THREADS
    PyErr_Restore(type, value, tb);
    return NULL;
}

/* fail_collective(exception): Collective. The Python layer's own argument check failed on
 * this rank: fail the collective the others are in with its text (nothing outside a
 * fit). */
static PyObject *py_fail_collective(PyObject *module, PyObject *exc)
{
    mt_py_state *st = state(module);
    mt_context *c = mt_py_context(st, "fail_collective");
    if (!c) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    fail_everywhere(c);
    PyErr_Clear();
    Py_RETURN_NONE;
}

/* The in-place collectives: fn(c, buf, ndim, dims, dtype, arg) on obj's buffer, its shape
 * agreed in the call's one agreement; a rank whose array cannot be used fails the call on
 * every rank (fail_everywhere). arg: the op (allreduce) or the root (broadcast). */
typedef int (*inplace_fn)(mt_context *c, void *buf, int ndim, const size_t *dims, mt_dtype t,
                          int arg);

static int allreduce_nd(mt_context *c, void *buf, int ndim, const size_t *dims, mt_dtype t,
                        int op)
{
    return mt_allreduce_nd(c, buf, ndim, dims, t, (mt_op)op);
}

static PyObject *inplace(mt_py_state *st, mt_context *c, PyObject *obj, const char *name,
                         inplace_fn fn, int arg)
{
    Py_buffer v;
    if (get_buffer(obj, &v, 1, name))
        return fail_everywhere(c);
    mt_dtype t = mt_py_dtype_of(&v, name);
    PyObject *out = NULL;
    if (!t)
        fail_everywhere(c);
    else {
        int rc;
        size_t dims[8];
        int nd = shape_of(&v, dims);
        Py_BEGIN_ALLOW_THREADS
        rc = fn(c, v.buf, nd, dims, t, arg);
        Py_END_ALLOW_THREADS
        out = rc ? mt_py_raise(st, rc) : Py_NewRef(obj);
    }
    PyBuffer_Release(&v);
    return out;
}

/* o as a C int (an exception set and -1 when it is none: not an integer, out of range),
 * converted once the context is known, so that a bad one on one rank fails the collective
 * on every rank (fail_everywhere) instead of returning before it. */
static int int_arg(PyObject *o, const char *fn, const char *what, int *out)
{
    PyObject *i = PyNumber_Index(o);
    if (!i) {
        PyErr_Format(PyExc_TypeError, "%s: %s must be an integer (got %.100s)", fn, what,
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(i, &overflow);
    Py_DECREF(i);
    if (overflow || v < INT_MIN || v > INT_MAX) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%s: %s %R is out of range", fn, what, o);
        return -1;
    }
    *out = (int)v;
    return 0;
}

/* allreduce(buffer, op): Collective, in place. */
static PyObject *py_allreduce(PyObject *module, PyObject *args)
{
    mt_py_state *st = state(module);
    PyObject *obj, *opo;
    int op = 0;
    if (!PyArg_ParseTuple(args, "OO:allreduce", &obj, &opo))
        return NULL;
    mt_context *c = mt_py_context(st, "allreduce");
    if (!c)
        return NULL;
    if (int_arg(opo, "allreduce", "op", &op))
        return fail_everywhere(c);
    if (op < MT_SUM || op > MT_MAX) {
        PyErr_Format(PyExc_ValueError, "allreduce: unknown op %d", op);
        return fail_everywhere(c);
    }
    return inplace(st, c, obj, "allreduce", allreduce_nd, op);
}

/* broadcast(buffer, root): Collective, in place. */
static PyObject *py_broadcast(PyObject *module, PyObject *args)
{
    mt_py_state *st = state(module);
    PyObject *obj, *rooto;
    int root = 0;
    if (!PyArg_ParseTuple(args, "OO:broadcast", &obj, &rooto))
        return NULL;
    mt_context *c = mt_py_context(st, "broadcast");
    if (!c)
        return NULL;
    if (int_arg(rooto, "broadcast", "root", &root))
        return fail_everywhere(c);
    return inplace(st, c, obj, "broadcast", mt_broadcast_nd, root);
}

/* allgather(send, recv): Collective; recv holds world_size times send, in rank order. */
static PyObject *py_allgather(PyObject *module, PyObject *args)
{
    mt_py_state *st = state(module);
    PyObject *send, *recv;
    if (!PyArg_ParseTuple(args, "OO:allgather", &send, &recv))
        return NULL;
    mt_context *c = mt_py_context(st, "allgather");
    Py_buffer s, r;
    if (!c)
        return NULL;
    if (get_buffer(send, &s, 0, "allgather"))
        return fail_everywhere(c);
    if (get_buffer(recv, &r, 1, "allgather (out)")) {
        PyBuffer_Release(&s);
        return fail_everywhere(c);
    }
    PyObject *out = NULL;
    mt_dtype t = mt_py_dtype_of(&s, "allgather"), tr = t ? mt_py_dtype_of(&r, "allgather") : 0;
    if (t && tr && tr != t)
        PyErr_SetString(PyExc_TypeError, "allgather: out has another element type than the input");
    else if (t && tr && (size_t)r.len != (size_t)s.len * (size_t)mt_world_size(c))
        PyErr_Format(PyExc_ValueError, "allgather: out holds %zd bytes, needs world_size (%d) x "
                     "%zd", r.len, mt_world_size(c), s.len);
    else if (t && tr) {
        int rc;
        size_t dims[8];
        int nd = shape_of(&s, dims);
        Py_BEGIN_ALLOW_THREADS
        rc = mt_allgather_nd(c, s.buf, r.buf, nd, dims, t);
        Py_END_ALLOW_THREADS
        out = rc ? mt_py_raise(st, rc) : Py_NewRef(recv);
    }
    if (!out && !(t && tr && tr == t && (size_t)r.len == (size_t)s.len * (size_t)mt_world_size(c)))
        fail_everywhere(c); /* this rank's own argument error, not the collective's */
    PyBuffer_Release(&s);
    PyBuffer_Release(&r);
    return out;
}

static PyObject *py_barrier(PyObject *module, PyObject *unused)
{
    mt_py_state *st = state(module);
    mt_context *c = mt_py_context(st, "barrier");
    if (!c)
        return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = mt_barrier(c);
    Py_END_ALLOW_THREADS
    if (rc)
        return mt_py_raise(st, rc);
    Py_RETURN_NONE;
}

/* ---------------------------------------------------------------- the C baseline */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* _c_bench(kind, iters, buf=None, out=None): Collective. The C library's own path for
 * benchmarks/python_bench.py, timed in this process between the Python layer's own runs:
 * "allreduce" (sum), "broadcast" (root 0), "allgather" (buf into out): iters calls of
 * the plain C call on buf's memory after one mt_barrier, the seconds of all of them;
 * "report": iters mt_report calls of 8 numeric metrics (as mpitrain-bench's), each after
 * an mt_barrier, the list of each call's seconds. The GIL is released throughout. */
static PyObject *py_c_bench(PyObject *module, PyObject *args)
{
    mt_py_state *st = state(module);
    const char *kind;
    int iters;
    PyObject *obj = Py_None, *outobj = Py_None;
    if (!PyArg_ParseTuple(args, "si|OO:_c_bench", &kind, &iters, &obj, &outobj))
        return NULL;
    mt_context *c = mt_py_context(st, "_c_bench");
    if (!c)
        return NULL;
    if (iters < 1)
        return PyErr_Format(PyExc_ValueError, "_c_bench: iters must be >= 1");
    int rc = 0;
    if (!strcmp(kind, "report")) {
        double *t = calloc((size_t)iters, sizeof *t);
        mt_metrics *m = mt_metrics_new();
        static const char *keys[8] = {"loss", "acc", "lr", "grad_norm", "samples_per_s",
                                      "data_s", "compute_s", "comm_s"};
        if (!t || !m) {
            free(t);
            mt_metrics_free(&m);
            return PyErr_NoMemory();
        }
        Py_BEGIN_ALLOW_THREADS
        for (int i = 0; i < iters && !rc; i++) {
            for (int k = 0; k < 8; k++)
                mt_metrics_set_f64(m, keys[k], i * 0.001 + k);
            rc = mt_barrier(c);
            double t0 = now_s();
            if (!rc)
                rc = mt_report(c, m, NULL);
            t[i] = now_s() - t0;
        }
        Py_END_ALLOW_THREADS
        mt_metrics_free(&m);
        PyObject *list = rc ? NULL : PyList_New(iters);
        for (int i = 0; list && i < iters; i++)
            PyList_SET_ITEM(list, i, PyFloat_FromDouble(t[i]));
        free(t);
        return rc ? mt_py_raise(st, rc) : list;
    }
    int gather = !strcmp(kind, "allgather");
    if (!gather && strcmp(kind, "allreduce") && strcmp(kind, "broadcast"))
        return PyErr_Format(PyExc_ValueError, "_c_bench: unknown kind \"%s\"", kind);
    Py_buffer v, r = {0};
    if (get_buffer(obj, &v, !gather, "_c_bench"))
        return NULL;
    if (gather && get_buffer(outobj, &r, 1, "_c_bench (out)")) {
        PyBuffer_Release(&v);
        return NULL;
    }
    mt_dtype t = mt_py_dtype_of(&v, "_c_bench");
    if (t && gather && (size_t)r.len != (size_t)v.len * (size_t)mt_world_size(c)) {
        PyErr_SetString(PyExc_ValueError, "_c_bench: out must hold world_size x buf");
        t = 0;
    }
    size_t n = (size_t)(v.len / (v.itemsize ? v.itemsize : 1));
    double secs = 0;
    if (t) {
        Py_BEGIN_ALLOW_THREADS
        rc = mt_barrier(c);
        double t0 = now_s();
        for (int i = 0; i < iters && !rc; i++)
            rc = gather ? mt_allgather(c, v.buf, r.buf, n, t)
                 : kind[0] == 'a' ? mt_allreduce(c, v.buf, n, t, MT_SUM)
                                  : mt_broadcast(c, v.buf, n, t, 0);
        secs = now_s() - t0;
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&v);
    if (gather)
        PyBuffer_Release(&r);
    if (!t)
        return NULL;
    return rc ? mt_py_raise(st, rc) : PyFloat_FromDouble(secs);
}

PyMethodDef mt_py_report_methods[] = {
    {"report", py_report, METH_VARARGS, "report(metrics, spec) (collective)."},
    {"allreduce", py_allreduce, METH_VARARGS, "allreduce(buffer, op) in place (collective)."},
    {"broadcast", py_broadcast, METH_VARARGS, "broadcast(buffer, root) in place (collective)."},
    {"allgather", py_allgather, METH_VARARGS, "allgather(send, recv) (collective)."},
    {"barrier", py_barrier, METH_NOARGS, "barrier() (collective)."},
    {"fail_collective", py_fail_collective, METH_O, "fail_collective(exception): this rank's "
                                                    "argument error, to every rank (collective)."},
    {"_c_bench", py_c_bench, METH_VARARGS, "_c_bench(kind, iters, buf, out): the C path, "
                                           "timed (benchmarks; collective)."},
    {NULL, NULL, 0, NULL},
};
