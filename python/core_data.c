/*
 * core_data.c -- dataset shards for Python: mpitrain._core.Shard over mt_shard, and the
 * batch columns as read-only buffers (mpitrain._core.ColumnView) over the library's own
 * memory, so that numpy arrays of a batch are views, not copies.
 *
 * Validity: every batch's views share one hold on the batch's memory (mt_batch_hold_new,
 * in a capsule that frees it when the last view goes), so a view kept past the next
 * batch, the next epoch or the end of the fit still reads its own rows: the library reads
 * what comes next into other memory. The usual loop (batch k still referenced while
 * batch k+1 is drawn) costs nothing more; a batch kept longer keeps its buffers (up to a
 * window of the shard) until its arrays go. The shard itself is checked by the library
 * on every call: one used after its fit ended is an error, never a use of freed memory.
 */
#include "core.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    PyObject_HEAD
    mt_shard *s;     /* the context's; the library checks it is still alive */
    int ncols;
    char **names;
    mt_dtype *as;    /* the dtype each column is read as */
    int *ndim;
    size_t (*dims)[8];
} shard_obj;

typedef struct {
    PyObject_HEAD
    PyObject *owner; /* the batch's hold (a capsule over mt_batch_hold) */
    const void *data;
    mt_dtype t;
    int ndim;
    Py_ssize_t shape[8];
    Py_ssize_t strides[8];
} view_obj;

/* ---------------------------------------------------------------- views */

static int view_getbuffer(PyObject *self, Py_buffer *v, int flags)
{
    view_obj *o = (view_obj *)self;
    if (flags & PyBUF_WRITABLE) {
        PyErr_SetString(PyExc_BufferError, "a batch column is read-only (the library's memory: "
                                           "copy it to change it)");
        v->obj = NULL;
        return -1;
    }
    Py_ssize_t es = (Py_ssize_t)mt_dtype_size(o->t), len = es;
    for (int d = 0; d < o->ndim; d++)
        len *= o->shape[d];
    v->buf = (void *)o->data;
    v->obj = Py_NewRef(self);
    v->len = len;
    v->readonly = 1;
    v->itemsize = es;
    v->format = (flags & PyBUF_FORMAT) ? (char *)mt_py_format_of(o->t) : NULL;
    v->ndim = o->ndim;
    v->shape = (flags & PyBUF_ND) ? o->shape : NULL;
    v->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? o->strides : NULL;
    v->suboffsets = NULL;
    v->internal = NULL;
    return 0;
}

static void view_dealloc(PyObject *self)
{
    view_obj *o = (view_obj *)self;
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    Py_CLEAR(o->owner);
    tp->tp_free(self);
    Py_DECREF(tp);
}

static int view_traverse(PyObject *self, visitproc visit, void *arg)
{
    Py_VISIT(((view_obj *)self)->owner);
    Py_VISIT(Py_TYPE(self));
    return 0;
}

static PyType_Slot view_slots[] = {
    {Py_bf_getbuffer, view_getbuffer},
    {Py_tp_dealloc, view_dealloc},
    {Py_tp_traverse, view_traverse},
    {Py_tp_doc, "A batch column: a read-only buffer over the library's memory, which it "
                "keeps allocated and unchanged while it lives."},
    {0, NULL},
};

PyType_Spec mt_py_view_spec = {
    .name = "mpitrain._core.ColumnView",
    .basicsize = sizeof(view_obj),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = view_slots,
};

/* ---------------------------------------------------------------- shards */

static void shard_dealloc(PyObject *self)
{
    shard_obj *o = (shard_obj *)self;
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    for (int i = 0; o->names && i < o->ncols; i++)
        free(o->names[i]);
    free(o->names);
    free(o->as);
    free(o->ndim);
    free(o->dims);
    tp->tp_free(self);
    Py_DECREF(tp);
}

static int shard_traverse(PyObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    return 0;
}

static mt_py_state *shard_state(PyObject *self)
{
    return mt_py_state_from_type(Py_TYPE(self));
}

static int column_index(shard_obj *o, const char *name)
{
    for (int i = 0; i < o->ncols; i++)
        if (!strcmp(o->names[i], name))
            return i;
    return -1;
}

static PyObject *shard_rows(PyObject *self, void *unused)
{
    return PyLong_FromLongLong((long long)mt_shard_rows(((shard_obj *)self)->s));
}

static PyObject *shard_dropped(PyObject *self, void *unused)
{
    return PyLong_FromLongLong((long long)mt_shard_dropped_rows(((shard_obj *)self)->s));
}

/* columns() -> [(name, shape, stored dtype code, read-as dtype code)] */
static PyObject *shard_columns(PyObject *self, PyObject *unused)
{
    shard_obj *o = (shard_obj *)self;
    PyObject *list = PyList_New(o->ncols);
    for (int i = 0; list && i < o->ncols; i++) {
        int nd = 0;
        size_t dims[8];
        mt_dtype stored = 0;
        int rc = mt_shard_column_shape(o->s, o->names[i], &nd, dims, &stored);
        if (rc) {
            Py_DECREF(list);
            return mt_py_raise(shard_state(self), rc);
        }
        PyObject *shape = PyTuple_New(nd);
        for (int d = 0; shape && d < nd; d++)
            PyTuple_SET_ITEM(shape, d, PyLong_FromSize_t(dims[d]));
        PyObject *item = shape ? Py_BuildValue("(sNii)", o->names[i], shape, (int)stored,
                                               (int)o->as[i])
                               : NULL;
        if (!item) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, item);
    }
    return list;
}

/* set_column_dtype(name, code): read the column as that dtype from the next epoch on. */
static PyObject *shard_set_dtype(PyObject *self, PyObject *args)
{
    shard_obj *o = (shard_obj *)self;
    const char *name;
    int t;
    if (!PyArg_ParseTuple(args, "si:set_column_dtype", &name, &t))
        return NULL;
    int rc = mt_shard_set_column_dtype(o->s, name, (mt_dtype)t);
    if (rc)
        return mt_py_raise(shard_state(self), rc);
    int i = column_index(o, name);
    if (i >= 0)
        o->as[i] = (mt_dtype)t;
    Py_RETURN_NONE;
}

/* begin_epoch(epoch, batch_size, shuffle, seed, drop_last): Collective. */
static PyObject *shard_begin(PyObject *self, PyObject *args)
{
    shard_obj *o = (shard_obj *)self;
    int epoch, shuffle, drop_last;
    Py_ssize_t batch;
    unsigned long long seed;
    if (!PyArg_ParseTuple(args, "inpKp:begin_epoch", &epoch, &batch, &shuffle, &seed, &drop_last))
        return NULL;
    if (batch < 1)
        return PyErr_Format(PyExc_ValueError, "batch_size must be >= 1 (got %zd)", batch);
    mt_iter_options opt = {.batch_size = (size_t)batch, .shuffle = shuffle, .seed = seed,
                           .drop_last = drop_last};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = mt_shard_begin_epoch(o->s, epoch, &opt);
    Py_END_ALLOW_THREADS
    if (rc)
        return mt_py_raise(shard_state(self), rc);
    Py_RETURN_NONE;
}

static void hold_free(PyObject *capsule)
{
    mt_batch_hold *h = PyCapsule_GetPointer(capsule, "mpitrain.batch_hold");
    mt_batch_hold_free(&h);
}

/* next() -> None when the epoch is done, else a tuple of ColumnViews in column order. */
static PyObject *shard_next(PyObject *self, PyObject *unused)
{
    shard_obj *o = (shard_obj *)self;
    mt_py_state *st = shard_state(self);
    const mt_batch *b = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = mt_shard_next(o->s, &b);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return mt_py_raise(st, rc);
    if (rc == 0)
        Py_RETURN_NONE;
    size_t rows = mt_batch_rows(b);
    const void *small[16], **data = o->ncols <= 16 ? small : malloc(o->ncols * sizeof *data);
    if (!data)
        return PyErr_NoMemory();
    for (int i = 0; i < o->ncols; i++)
        if (!(data[i] = mt_batch_column(b, o->names[i], o->as[i]))) {
            if (data != small)
                free(data);
            return mt_py_raise(st, MT_EINVAL);
        }
    mt_batch_hold *h = mt_batch_hold_new(b);
    PyObject *hold = h ? PyCapsule_New(h, "mpitrain.batch_hold", hold_free) : NULL;
    if (!hold) {
        if (data != small)
            free(data);
        if (!h)
            return mt_py_raise(st, MT_ENOMEM);
        mt_batch_hold_free(&h);
        return NULL;
    }
    PyObject *out = PyTuple_New(o->ncols);
    for (int i = 0; out && i < o->ncols; i++) {
        view_obj *v = PyObject_GC_New(view_obj, st->view_type);
        if (!v) {
            Py_CLEAR(out);
            break;
        }
        v->owner = Py_NewRef(hold);
        v->data = data[i];
        v->t = o->as[i];
        v->ndim = o->ndim[i];
        v->shape[0] = (Py_ssize_t)rows;
        for (int d = 1; d < v->ndim; d++)
            v->shape[d] = (Py_ssize_t)o->dims[i][d];
        Py_ssize_t stride = (Py_ssize_t)mt_dtype_size(v->t);
        for (int d = v->ndim - 1; d >= 0; d--) {
            v->strides[d] = stride;
            stride *= v->shape[d];
        }
        PyObject_GC_Track((PyObject *)v);
        PyTuple_SET_ITEM(out, i, (PyObject *)v);
    }
    Py_DECREF(hold); /* the views have it */
    if (data != small)
        free(data);
    return out;
}

/* _c_epoch(epoch, batch_size) -> seconds: Collective. One epoch through the shard in C
 * alone (begin, then every batch, touching its first column's first byte), as
 * mpitrain-bench's shard suite reads it: the C baseline of benchmarks/python_bench.py,
 * timed in this process between the Python layer's own epochs. */
static PyObject *shard_c_epoch(PyObject *self, PyObject *args)
{
    shard_obj *o = (shard_obj *)self;
    int epoch;
    Py_ssize_t batch;
    if (!PyArg_ParseTuple(args, "in:_c_epoch", &epoch, &batch))
        return NULL;
    if (batch < 1 || o->ncols < 1)
        return PyErr_Format(PyExc_ValueError, "_c_epoch: batch_size >= 1 and a column needed");
    mt_iter_options opt = {.batch_size = (size_t)batch};
    int rc, got = 0;
    double secs;
    Py_BEGIN_ALLOW_THREADS
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    rc = mt_shard_begin_epoch(o->s, epoch, &opt);
    const mt_batch *bt;
    volatile unsigned sum = 0;
    while (!rc && (got = mt_shard_next(o->s, &bt)) == 1) {
        const unsigned char *x = mt_batch_column(bt, o->names[0], o->as[0]);
        sum += x ? x[0] : 0;
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    secs = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
    Py_END_ALLOW_THREADS
    if (!rc && got < 0)
        rc = got;
    if (rc)
        return mt_py_raise(shard_state(self), rc);
    return PyFloat_FromDouble(secs);
}

static PyGetSetDef shard_getset[] = {
    {"rows", shard_rows, NULL, "Rows this rank sees per epoch.", NULL},
    {"dropped_rows", shard_dropped, NULL, "Rows dropped from the even split.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef shard_methods[] = {
    {"columns", shard_columns, METH_NOARGS, NULL},
    {"set_column_dtype", shard_set_dtype, METH_VARARGS, NULL},
    {"begin_epoch", shard_begin, METH_VARARGS, NULL},
    {"next", shard_next, METH_NOARGS, NULL},
    {"_c_epoch", shard_c_epoch, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot shard_slots[] = {
    {Py_tp_dealloc, shard_dealloc},
    {Py_tp_traverse, shard_traverse},
    {Py_tp_getset, shard_getset},
    {Py_tp_methods, shard_methods},
    {Py_tp_doc, "This rank's shard of a dataset (mt_shard), valid until fit returns."},
    {0, NULL},
};

PyType_Spec mt_py_shard_spec = {
    .name = "mpitrain._core.Shard",
    .basicsize = sizeof(shard_obj),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = shard_slots,
};

/* get_dataset_shard(name) -> Shard: Collective. */
static PyObject *py_get_dataset_shard(PyObject *module, PyObject *arg)
{
    mt_py_state *st = mt_py_state_of(module);
    const char *name = PyUnicode_AsUTF8(arg);
    if (!name)
        return NULL;
    mt_context *c = mt_py_context(st, "get_dataset_shard");
    if (!c)
        return NULL;
    mt_shard *s = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = mt_get_dataset_shard(c, name, &s);
    Py_END_ALLOW_THREADS
    if (rc)
        return mt_py_raise(st, rc);
    shard_obj *o = PyObject_GC_New(shard_obj, st->shard_type);
    if (!o)
        return NULL;
    o->s = s;
    o->ncols = mt_shard_num_columns(s);
    o->names = calloc((size_t)o->ncols + 1, sizeof *o->names);
    o->as = calloc((size_t)o->ncols + 1, sizeof *o->as);
    o->ndim = calloc((size_t)o->ncols + 1, sizeof *o->ndim);
    o->dims = calloc((size_t)o->ncols + 1, sizeof *o->dims);
    PyObject_GC_Track((PyObject *)o);
    if (!o->names || !o->as || !o->ndim || !o->dims) {
        Py_DECREF(o);
        return PyErr_NoMemory();
    }
    for (int i = 0; i < o->ncols; i++) {
        const char *cn = mt_shard_column_name(s, i);
        o->names[i] = strdup(cn ? cn : "");
        if (!o->names[i]) {
            Py_DECREF(o);
            return PyErr_NoMemory();
        }
        rc = mt_shard_column_shape(s, o->names[i], &o->ndim[i], o->dims[i], &o->as[i]);
        if (rc) {
            Py_DECREF(o);
            return mt_py_raise(st, rc);
        }
    }
    return (PyObject *)o;
}

PyMethodDef mt_py_data_methods[] = {
    {"get_dataset_shard", py_get_dataset_shard, METH_O,
     "get_dataset_shard(name) -> Shard (collective)."},
    {NULL, NULL, 0, NULL},
};
