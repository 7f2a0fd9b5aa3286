/*
 * core_fusion.c -- mpitrain._core.Fusion: the C gradient fusion (mt_fusion) for Python,
 * the engine of mpitrain.train.torch.prepare_model.
 *
 * A Fusion is made inside a training function (collective: mt_fusion_create_opts on the
 * worker's context), allocates one block of float32 gradients (collective:
 * mt_fusion_alloc) and exports it through the buffer protocol, so that
 * torch.frombuffer(fusion, dtype=torch.float32) is a tensor over the block itself and
 * each parameter's .grad a view of it (no copy: buckets in the block are averaged in
 * place, straight from every rank's block when the ranks share a node). Tensors are
 * registered as (offset, count) ranges of the block, last layer first. ready and wait
 * release the GIL: the first ready is collective (the registration check), wait always.
 *
 * Lifetime: the block belongs to the C fusion and is freed by mt_fusion_destroy, which
 * is collective while the fit runs (it is how a rank that failed mid-step meets the
 * others' wait, so nothing hangs). close() is that destroy, called by every rank at the
 * same point (the end of each attempt); from then on the object refuses new exports and
 * every method but close. Every tensor over the block must have been moved off it before
 * close (prepare_model copies the .grads out and re-points them, and moves any other
 * tensor left over the block): a torch tensor made by torch.frombuffer holds a reference
 * to the exporter (its reference count tells whether views are alive), and `exports`
 * counts the buffers (memoryviews, numpy arrays) open right now: close refuses while any
 * is, since their memory would go with the block. A Fusion dropped without close is
 * destroyed in its dealloc (then local: after its fit, the fusion is an orphan), never
 * after mt_finalize (MPI is gone; the process is ending).
 */
#include "core.h"

#include <limits.h>
#include <string.h>

typedef struct {
    PyObject_HEAD
    mt_fusion *f;
    float *block;
    Py_ssize_t count;    /* the block's floats (0: no block yet) */
    Py_ssize_t exports;  /* open buffers */
    Py_ssize_t shape[1], strides[1];
    int ntensors;
} fusion_obj;

static mt_py_state *fstate(PyObject *self)
{
    return mt_py_state_from_type(Py_TYPE(self));
}

static int need_open(fusion_obj *o, const char *what)
{
    if (o->f)
        return 0;
    PyErr_Format(PyExc_ValueError, "Fusion.%s: the fusion is closed", what);
    return -1;
}

/* Fusion(bucket_bytes=0, compression=0, algo=0): Collective (mt_fusion_create_opts). */
static PyObject *fusion_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char *names[] = {"bucket_bytes", "compression", "algo", NULL};
    Py_ssize_t bucket = 0;
    int compression = 0, algo = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|nii:Fusion", names, &bucket, &compression,
                                     &algo))
        return NULL;
    mt_py_state *st = mt_py_state_from_type(type);
    if (!st)
        return NULL;
    if (bucket < 0) {
        PyErr_Format(PyExc_ValueError, "Fusion: bucket_bytes must be >= 0 (got %zd)", bucket);
        return NULL;
    }
    if (!mt_compression_word((mt_compression)compression)) {
        PyErr_Format(PyExc_ValueError, "Fusion: compression %d is not one of none, fp16, bf16",
                     compression);
        return NULL;
    }
    if (!mt_fusion_algo_word((mt_fusion_algo)algo)) {
        PyErr_Format(PyExc_ValueError, "Fusion: algo %d is not one of auto, flat, shm, hier", algo);
        return NULL;
    }
    mt_context *c = mt_py_context(st, "Fusion");
    if (!c)
        return NULL;
    fusion_obj *o = (fusion_obj *)type->tp_alloc(type, 0);
    if (!o)
        return NULL;
    mt_fusion_options opt = {.bucket_bytes = (size_t)bucket,
                             .compression = (mt_compression)compression,
                             .algo = (mt_fusion_algo)algo};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = mt_fusion_create_opts(c, &opt, &o->f);
    Py_END_ALLOW_THREADS
    if (rc) {
        Py_DECREF(o);
        return mt_py_raise(st, rc);
    }
    return (PyObject *)o;
}

/* alloc(count): Collective (mt_fusion_alloc); one block per fusion. */
static PyObject *fusion_alloc(PyObject *self, PyObject *arg)
{
    fusion_obj *o = (fusion_obj *)self;
    if (need_open(o, "alloc"))
        return NULL;
    Py_ssize_t n = PyLong_AsSsize_t(arg);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    /* the same on every rank (refusing alone here would leave the others in the alloc) */
    size_t count = n > 0 && !o->block ? (size_t)n : 0;
    float *p = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = mt_fusion_alloc(o->f, count, &p);
    Py_END_ALLOW_THREADS
    if (rc) {
        if (o->block)
            PyErr_SetString(PyExc_ValueError, "Fusion.alloc: the fusion has its block already");
        else
            mt_py_raise(fstate(self), rc);
        return NULL;
    }
    o->block = p;
    o->count = n;
    o->shape[0] = n;
    o->strides[0] = sizeof(float);
    Py_RETURN_NONE;
}

/* add(offset, count) -> index: Local; the block's floats [offset, offset + count). */
static PyObject *fusion_add(PyObject *self, PyObject *args)
{
    fusion_obj *o = (fusion_obj *)self;
    Py_ssize_t off, n;
    if (!PyArg_ParseTuple(args, "nn:add", &off, &n) || need_open(o, "add"))
        return NULL;
    if (!o->block) {
        PyErr_SetString(PyExc_ValueError, "Fusion.add: alloc the block first");
        return NULL;
    }
    if (off < 0 || n < 0 || off > o->count || n > o->count - off) {
        PyErr_Format(PyExc_ValueError, "Fusion.add: [%zd, %zd + %zd) is not inside the block of "
                     "%zd floats", off, off, n, o->count);
        return NULL;
    }
    int i = mt_fusion_add(o->f, o->block + off, (size_t)n);
    if (i < 0)
        return mt_py_raise(fstate(self), i);
    o->ntensors = i + 1;
    return PyLong_FromLong(i);
}

/* ready(index): Local (the first of all collective); the GIL released. */
static PyObject *fusion_ready(PyObject *self, PyObject *arg)
{
    fusion_obj *o = (fusion_obj *)self;
    long i = PyLong_AsLong(arg);
    if ((i == -1 && PyErr_Occurred()) || need_open(o, "ready"))
        return NULL;
    if (i < INT_MIN || i > INT_MAX)
        i = -1; /* refused by the library, which remembers it for the step's wait */
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = mt_fusion_ready(o->f, (int)i);
    Py_END_ALLOW_THREADS
    if (rc)
        return mt_py_raise(fstate(self), rc);
    Py_RETURN_NONE;
}

/* wait(): Collective; the GIL released. */
static PyObject *fusion_wait(PyObject *self, PyObject *unused)
{
    fusion_obj *o = (fusion_obj *)self;
    if (need_open(o, "wait"))
        return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = mt_fusion_wait(o->f);
    Py_END_ALLOW_THREADS
    if (rc)
        return mt_py_raise(fstate(self), rc);
    Py_RETURN_NONE;
}

static void destroy(fusion_obj *o)
{
    mt_fusion *f = o->f;
    o->f = NULL;
    o->block = NULL;
    o->count = 0;
    Py_BEGIN_ALLOW_THREADS
    mt_fusion_destroy(&f);
    Py_END_ALLOW_THREADS
}

/* close(): Collective while the fit runs (mt_fusion_destroy); idempotent. Refused while a
 * buffer of the block is open (a memoryview or numpy array over it would outlive it). */
static PyObject *fusion_close(PyObject *self, PyObject *unused)
{
    fusion_obj *o = (fusion_obj *)self;
    if (o->f && o->exports > 0) {
        PyErr_Format(PyExc_BufferError, "Fusion.close: %zd buffer(s) of the block are still "
                     "open (release the memoryviews / arrays over it first)", o->exports);
        return NULL;
    }
    if (o->f)
        destroy(o);
    Py_RETURN_NONE;
}

static int fusion_getbuffer(PyObject *self, Py_buffer *v, int flags)
{
    fusion_obj *o = (fusion_obj *)self;
    if (!o->f || !o->block) {
        PyErr_SetString(PyExc_BufferError, o->f ? "Fusion: no block yet (alloc it first)"
                                                : "Fusion: the fusion is closed");
        v->obj = NULL;
        return -1;
    }
    v->buf = o->block;
    v->obj = Py_NewRef(self);
    v->len = o->count * (Py_ssize_t)sizeof(float);
    v->readonly = 0;
    v->itemsize = sizeof(float);
    v->format = (flags & PyBUF_FORMAT) ? "f" : NULL;
    v->ndim = 1;
    v->shape = (flags & PyBUF_ND) ? o->shape : NULL;
    v->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? o->strides : NULL;
    v->suboffsets = NULL;
    v->internal = NULL;
    o->exports++;
    return 0;
}

static void fusion_releasebuffer(PyObject *self, Py_buffer *v)
{
    ((fusion_obj *)self)->exports--;
}

static void fusion_dealloc(PyObject *self)
{
    fusion_obj *o = (fusion_obj *)self;
    PyTypeObject *tp = Py_TYPE(self);
    if (o->f && !mt_py_finalized)
        destroy(o); /* after its fit: local (orphan); after mt_finalize: left to the exit */
    tp->tp_free(self);
    Py_DECREF(tp);
}

static PyObject *get_algo(PyObject *self, void *unused)
{
    fusion_obj *o = (fusion_obj *)self;
    return o->f ? PyUnicode_FromString(mt_fusion_algo_name(o->f)) : Py_NewRef(Py_None);
}

static PyObject *get_compression(PyObject *self, void *unused)
{
    fusion_obj *o = (fusion_obj *)self;
    return o->f ? PyUnicode_FromString(mt_fusion_compression_name(o->f)) : Py_NewRef(Py_None);
}

static PyObject *get_count(PyObject *self, void *unused)
{
    return PyLong_FromSsize_t(((fusion_obj *)self)->count);
}

static PyObject *get_exports(PyObject *self, void *unused)
{
    return PyLong_FromSsize_t(((fusion_obj *)self)->exports);
}

static PyObject *get_closed(PyObject *self, void *unused)
{
    return PyBool_FromLong(((fusion_obj *)self)->f == NULL);
}

static PyObject *get_tensors(PyObject *self, void *unused)
{
    return PyLong_FromLong(((fusion_obj *)self)->ntensors);
}

static PyGetSetDef fusion_getset[] = {
    {"algo", get_algo, NULL, "The algorithm (mt_fusion_algo_name); None once closed.", NULL},
    {"compression", get_compression, NULL, "The network step's format; None once closed.", NULL},
    {"count", get_count, NULL, "The block's floats (0 before alloc and after close).", NULL},
    {"exports", get_exports, NULL, "Buffers of the block open now.", NULL},
    {"closed", get_closed, NULL, "True after close().", NULL},
    {"tensors", get_tensors, NULL, "Tensors added.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef fusion_methods[] = {
    {"alloc", fusion_alloc, METH_O, "alloc(count): Collective. The block of count float32 "
                                    "zeros (once)."},
    {"add", fusion_add, METH_VARARGS, "add(offset, count) -> index: Local. A tensor of the "
                                      "block (every rank the same, last layer first)."},
    {"ready", fusion_ready, METH_O, "ready(index): the tensor is final for this step."},
    {"wait", fusion_wait, METH_NOARGS, "wait(): Collective. Every tensor averaged."},
    {"close", fusion_close, METH_NOARGS, "close(): Collective in a fit. Destroys the fusion "
                                         "and frees the block."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot fusion_slots[] = {
    {Py_tp_new, fusion_new},
    {Py_tp_dealloc, fusion_dealloc},
    {Py_tp_getset, fusion_getset},
    {Py_tp_methods, fusion_methods},
    {Py_bf_getbuffer, fusion_getbuffer},
    {Py_bf_releasebuffer, fusion_releasebuffer},
    {Py_tp_doc, "Fusion(bucket_bytes=0, compression=0, algo=0): the C gradient fusion over "
                "one float32 block, exported as a writable buffer (torch.frombuffer)."},
    {0, NULL},
};

PyType_Spec mt_py_fusion_spec = {
    .name = "mpitrain._core.Fusion",
    .basicsize = sizeof(fusion_obj),
    .flags = Py_TPFLAGS_DEFAULT,
    .slots = fusion_slots,
};
