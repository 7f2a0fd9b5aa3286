/*
 * core_ckpt.c -- stored checkpoints and results for Python: mpitrain._core.StoredCheckpoint
 * over a read-only mt_checkpoint (the one a fit resumes from, a result's, or one opened by
 * path) and mpitrain._core.Result over mt_result.
 *
 * Lifetimes: a result's checkpoints are borrowed from it, so their objects hold the Result
 * object; the one mt_get_checkpoint gives belongs to the fit's context, which the library
 * checks on every call (used after the fit, it is an error, not freed memory); one opened
 * by path is owned and freed with its object. Arrays are read into a buffer the caller
 * allocates (numpy), with the GIL released: for the context's checkpoint that read is
 * collective.
 */
#include "core.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    PyObject_HEAD
    const mt_checkpoint *ck;
    PyObject *owner; /* a Result, or NULL */
    int owned;
} stored_obj;

typedef struct {
    PyObject_HEAD
    mt_result *r;
} result_obj;

/* ---------------------------------------------------------------- stored checkpoints */

static mt_py_state *type_state(PyObject *self)
{
    return mt_py_state_from_type(Py_TYPE(self));
}

PyObject *mt_py_stored_new(mt_py_state *st, const mt_checkpoint *ck, PyObject *owner, int owned)
{
    stored_obj *o = PyObject_GC_New(stored_obj, st->stored_type);
    if (!o) {
        if (owned) {
            mt_checkpoint *own = (mt_checkpoint *)ck;
            mt_checkpoint_free(&own);
        }
        return NULL;
    }
    o->ck = ck;
    o->owner = Py_XNewRef(owner);
    o->owned = owned;
    PyObject_GC_Track((PyObject *)o);
    return (PyObject *)o;
}

static void stored_dealloc(PyObject *self)
{
    stored_obj *o = (stored_obj *)self;
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    if (o->owned) {
        mt_checkpoint *own = (mt_checkpoint *)o->ck;
        mt_checkpoint_free(&own);
    }
    Py_CLEAR(o->owner);
    tp->tp_free(self);
    Py_DECREF(tp);
}

static int stored_traverse(PyObject *self, visitproc visit, void *arg)
{
    Py_VISIT(((stored_obj *)self)->owner);
    Py_VISIT(Py_TYPE(self));
    return 0;
}

static PyObject *str_or_none(const char *s)
{
    return s ? PyUnicode_FromString(s) : Py_NewRef(Py_None);
}

static PyObject *stored_path(PyObject *self, void *unused)
{
    return str_or_none(mt_checkpoint_path(((stored_obj *)self)->ck));
}

typedef const char *(*name_at)(const mt_checkpoint *, size_t);

static PyObject *name_list(const mt_checkpoint *ck, size_t n, name_at at)
{
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; list && i < n; i++) {
        PyObject *s = str_or_none(at(ck, i));
        if (!s) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, s);
    }
    return list;
}

static PyObject *stored_arrays(PyObject *self, PyObject *unused)
{
    const mt_checkpoint *ck = ((stored_obj *)self)->ck;
    return name_list(ck, mt_checkpoint_num_arrays(ck), mt_checkpoint_array_name);
}

static PyObject *stored_meta_keys(PyObject *self, PyObject *unused)
{
    const mt_checkpoint *ck = ((stored_obj *)self)->ck;
    return name_list(ck, mt_checkpoint_num_meta(ck), mt_checkpoint_meta_key);
}

static PyObject *stored_files(PyObject *self, PyObject *unused)
{
    const mt_checkpoint *ck = ((stored_obj *)self)->ck;
    return name_list(ck, mt_checkpoint_num_files(ck), mt_checkpoint_file_name);
}

/* get_meta(key) -> str, int or float (KeyError when absent) */
static PyObject *stored_get_meta(PyObject *self, PyObject *arg)
{
    const mt_checkpoint *ck = ((stored_obj *)self)->ck;
    const char *key = PyUnicode_AsUTF8(arg);
    if (!key)
        return NULL;
    const char *s = mt_checkpoint_get_meta(ck, key);
    if (s)
        return PyUnicode_FromString(s);
    int64_t i;
    double d;
    if (mt_checkpoint_get_meta_i64(ck, key, &i) == MT_OK)
        return PyLong_FromLongLong((long long)i);
    if (mt_checkpoint_get_meta_f64(ck, key, &d) == MT_OK)
        return PyFloat_FromDouble(d);
    PyErr_SetObject(PyExc_KeyError, arg);
    return NULL;
}

/* array_info(name) -> (dtype code, sharded, shape: this rank's part of a sharded one) */
static PyObject *stored_array_info(PyObject *self, PyObject *arg)
{
    const mt_checkpoint *ck = ((stored_obj *)self)->ck;
    const char *name = PyUnicode_AsUTF8(arg);
    if (!name)
        return NULL;
    mt_dtype t = 0;
    mt_layout l = MT_REPLICATED;
    int nd = 0;
    size_t dims[8];
    int rc = mt_checkpoint_array_type(ck, name, &t, &l);
    if (!rc)
        rc = mt_checkpoint_dims(ck, name, &nd, dims);
    if (rc)
        return mt_py_raise(type_state(self), rc);
    PyObject *shape = PyTuple_New(nd);
    for (int d = 0; shape && d < nd; d++)
        PyTuple_SET_ITEM(shape, d, PyLong_FromSize_t(dims[d]));
    return shape ? Py_BuildValue("(iON)", (int)t, l == MT_SHARDED ? Py_True : Py_False, shape)
                 : NULL;
}

/* get_array(name, out): read into the writable buffer out (collective for the checkpoint a
 * fit resumes from). */
static PyObject *stored_get_array(PyObject *self, PyObject *args)
{
    const mt_checkpoint *ck = ((stored_obj *)self)->ck;
    const char *name;
    PyObject *obj;
    if (!PyArg_ParseTuple(args, "sO:get_array", &name, &obj))
        return NULL;
    Py_buffer v;
    if (PyObject_GetBuffer(obj, &v, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE) < 0)
        return NULL;
    mt_dtype t = mt_py_dtype_of(&v, "get_array");
    PyObject *out = NULL;
    if (t) {
        int rc;
        Py_BEGIN_ALLOW_THREADS
        rc = mt_checkpoint_get(ck, name, t, v.buf, (size_t)(v.len / v.itemsize));
        Py_END_ALLOW_THREADS
        out = rc ? mt_py_raise(type_state(self), rc) : Py_NewRef(obj);
    }
    PyBuffer_Release(&v);
    return out;
}

static PyGetSetDef stored_getset[] = {
    {"path", stored_path, NULL, "The checkpoint's folder.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef stored_methods[] = {
    {"arrays", stored_arrays, METH_NOARGS, NULL},
    {"meta_keys", stored_meta_keys, METH_NOARGS, NULL},
    {"files", stored_files, METH_NOARGS, NULL},
    {"get_meta", stored_get_meta, METH_O, NULL},
    {"array_info", stored_array_info, METH_O, NULL},
    {"get_array", stored_get_array, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot stored_slots[] = {
    {Py_tp_dealloc, stored_dealloc},
    {Py_tp_traverse, stored_traverse},
    {Py_tp_getset, stored_getset},
    {Py_tp_methods, stored_methods},
    {Py_tp_doc, "A stored (read-only) checkpoint of the library."},
    {0, NULL},
};

PyType_Spec mt_py_stored_spec = {
    .name = "mpitrain._core.StoredCheckpoint",
    .basicsize = sizeof(stored_obj),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = stored_slots,
};

/* ---------------------------------------------------------------- results */

PyObject *mt_py_result_new(mt_py_state *st, mt_result *r)
{
    result_obj *o = PyObject_GC_New(result_obj, st->result_type);
    if (!o) {
        mt_result_free(&r);
        return NULL;
    }
    o->r = r;
    PyObject_GC_Track((PyObject *)o);
    return (PyObject *)o;
}

static void result_dealloc(PyObject *self)
{
    result_obj *o = (result_obj *)self;
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    mt_result_free(&o->r);
    tp->tp_free(self);
    Py_DECREF(tp);
}

static int result_traverse(PyObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    return 0;
}

static PyObject *result_error(PyObject *self, void *unused)
{
    return str_or_none(mt_result_error(((result_obj *)self)->r));
}

static PyObject *result_path(PyObject *self, void *unused)
{
    return str_or_none(mt_result_path(((result_obj *)self)->r));
}

static PyObject *result_attempts(PyObject *self, void *unused)
{
    return PyLong_FromLong(mt_result_attempts(((result_obj *)self)->r));
}

static PyObject *metrics_or_none(const mt_metrics *m)
{
    return m ? mt_py_metrics_dict(m) : Py_NewRef(Py_None);
}

static PyObject *result_metrics(PyObject *self, PyObject *unused)
{
    return metrics_or_none(mt_result_metrics(((result_obj *)self)->r));
}

static PyObject *result_checkpoint(PyObject *self, PyObject *unused)
{
    const mt_checkpoint *ck = mt_result_checkpoint(((result_obj *)self)->r);
    return ck ? mt_py_stored_new(type_state(self), ck, self, 0) : Py_NewRef(Py_None);
}

/* best() -> [(StoredCheckpoint, metrics)], best first */
static PyObject *result_best(PyObject *self, PyObject *unused)
{
    mt_result *r = ((result_obj *)self)->r;
    size_t n = mt_result_num_best(r);
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; list && i < n; i++) {
        const mt_metrics *m = NULL;
        const mt_checkpoint *ck = mt_result_best(r, i, &m);
        PyObject *item = ck ? Py_BuildValue("(NN)", mt_py_stored_new(type_state(self), ck, self, 0),
                                            metrics_or_none(m))
                            : NULL;
        if (!item) {
            Py_DECREF(list);
            return ck ? NULL : mt_py_raise(type_state(self), MT_EINVAL);
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, item);
    }
    return list;
}

/* best_checkpoint(metric, mode) -> (StoredCheckpoint, metrics) */
static PyObject *result_best_checkpoint(PyObject *self, PyObject *args)
{
    const char *metric, *mode;
    if (!PyArg_ParseTuple(args, "ss:get_best_checkpoint", &metric, &mode))
        return NULL;
    mt_order order;
    if (!strcmp(mode, "max"))
        order = MT_ORDER_MAX;
    else if (!strcmp(mode, "min"))
        order = MT_ORDER_MIN;
    else
        return PyErr_Format(PyExc_ValueError, "get_best_checkpoint: mode must be \"max\" or "
                            "\"min\" (got \"%s\")", mode);
    const mt_checkpoint *ck = NULL;
    const mt_metrics *m = NULL;
    int rc = mt_result_best_checkpoint(((result_obj *)self)->r, metric, order, &ck, &m);
    if (rc)
        return mt_py_raise(type_state(self), rc);
    return Py_BuildValue("(NN)", mt_py_stored_new(type_state(self), ck, self, 0),
                         metrics_or_none(m));
}

/* rows() -> [metrics of each row of result.json]; columns() -> [names] */
static PyObject *result_rows(PyObject *self, PyObject *unused)
{
    mt_result *r = ((result_obj *)self)->r;
    size_t n = mt_result_num_rows(r);
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; list && i < n; i++) {
        PyObject *d = metrics_or_none(mt_result_row(r, i));
        if (!d) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, d);
    }
    return list;
}

static PyObject *result_columns(PyObject *self, PyObject *unused)
{
    mt_result *r = ((result_obj *)self)->r;
    size_t n = mt_result_num_columns(r);
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; list && i < n; i++) {
        PyObject *s = str_or_none(mt_result_column(r, i));
        if (!s) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, s);
    }
    return list;
}

static PyGetSetDef result_getset[] = {
    {"error", result_error, NULL, "None, or why the run failed or stopped.", NULL},
    {"path", result_path, NULL, "The run directory.", NULL},
    {"attempts", result_attempts, NULL, "Attempts fit made.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef result_methods[] = {
    {"metrics", result_metrics, METH_NOARGS, NULL},
    {"checkpoint", result_checkpoint, METH_NOARGS, NULL},
    {"best", result_best, METH_NOARGS, NULL},
    {"best_checkpoint", result_best_checkpoint, METH_VARARGS, NULL},
    {"rows", result_rows, METH_NOARGS, NULL},
    {"columns", result_columns, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot result_slots[] = {
    {Py_tp_dealloc, result_dealloc},
    {Py_tp_traverse, result_traverse},
    {Py_tp_getset, result_getset},
    {Py_tp_methods, result_methods},
    {Py_tp_doc, "A fit's result (mt_result)."},
    {0, NULL},
};

PyType_Spec mt_py_result_spec = {
    .name = "mpitrain._core.Result",
    .basicsize = sizeof(result_obj),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = result_slots,
};

/* ---------------------------------------------------------------- module functions */

static PyObject *py_open_checkpoint(PyObject *module, PyObject *arg)
{
    const char *path = PyUnicode_AsUTF8(arg);
    if (!path)
        return NULL;
    mt_checkpoint *ck = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = mt_checkpoint_open(path, &ck);
    Py_END_ALLOW_THREADS
    if (rc)
        return mt_py_raise(mt_py_state_of(module), rc);
    return mt_py_stored_new(mt_py_state_of(module), ck, NULL, 1);
}

static PyObject *py_get_checkpoint(PyObject *module, PyObject *unused)
{
    mt_py_state *st = mt_py_state_of(module);
    mt_context *c = mt_py_context(st, "get_checkpoint");
    if (!c)
        return NULL;
    const mt_checkpoint *ck = mt_get_checkpoint(c);
    return ck ? mt_py_stored_new(st, ck, NULL, 0) : Py_NewRef(Py_None);
}

static PyObject *py_load_result(PyObject *module, PyObject *arg)
{
    const char *path = PyUnicode_AsUTF8(arg);
    if (!path)
        return NULL;
    mt_result *r = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = mt_result_load(path, &r);
    Py_END_ALLOW_THREADS
    if (rc) {
        mt_result_free(&r);
        return mt_py_raise(mt_py_state_of(module), rc);
    }
    return mt_py_result_new(mt_py_state_of(module), r);
}

PyMethodDef mt_py_ckpt_methods[] = {
    {"open_checkpoint", py_open_checkpoint, METH_O, "open_checkpoint(path) -> StoredCheckpoint."},
    {"get_checkpoint", py_get_checkpoint, METH_NOARGS,
     "get_checkpoint() -> StoredCheckpoint or None (the one this fit resumes from)."},
    {"load_result", py_load_result, METH_O, "load_result(run_dir) -> Result."},
    {NULL, NULL, 0, NULL},
};
