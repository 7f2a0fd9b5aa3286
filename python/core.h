/*
 * core.h -- what the files of the extension module mpitrain._core share: the module
 * state (the exception classes and the types), and the helpers that turn a C error into
 * the Python exception of its kind. The extension is a client of include/mpitrain.h only,
 * like tools/: nothing here reaches into the library's internal headers.
 */
#ifndef MT_PY_CORE_H
#define MT_PY_CORE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <mpitrain.h>

/* One exception class per MT_E* code, in MT_ERRNO_MAP's order. */
#define MT_PY_NERR (0 MT_ERRNO_MAP(MT_PY_COUNT))
#define MT_PY_COUNT(name, code, text) +1

typedef struct {
    PyObject *error;              /* mpitrain.MpitrainError */
    PyObject *errors[MT_PY_NERR]; /* its subclasses, by -code - 1 */
    PyObject *stop_training;      /* StopTraining(BaseException): a stop the user cannot catch */
    PyTypeObject *shard_type;
    PyTypeObject *view_type;
    PyTypeObject *stored_type;
    PyTypeObject *result_type;
    PyTypeObject *fusion_type;
} mt_py_state;

extern PyModuleDef mt_py_module;
/* Set once finalize() ran mt_finalize: no MPI call after that (core_fusion.c's dealloc). */
extern int mt_py_finalized;

/* The module's state, from the module, or from an instance of one of its types. */
mt_py_state *mt_py_state_of(PyObject *module);
mt_py_state *mt_py_state_from_type(PyTypeObject *type);

/* Raise the exception of rc's kind with mt_last_error() (or mt_strerror(rc) when empty);
 * returns NULL. */
PyObject *mt_py_raise(mt_py_state *st, int rc);
/* The current context, or NULL with an MpitrainError "... outside a training function". */
mt_context *mt_py_context(mt_py_state *st, const char *what);
/* mt_dtype from a buffer's format and item size; 0 (with TypeError raised) for others. */
mt_dtype mt_py_dtype_of(const Py_buffer *v, const char *what);
/* The buffer format of an mt_dtype ("B", "i", "q", "f", "d"). */
const char *mt_py_format_of(mt_dtype t);

/* core_data.c, core_report.c, core_ckpt.c: their types and module functions */
extern PyType_Spec mt_py_shard_spec, mt_py_view_spec, mt_py_stored_spec, mt_py_result_spec;
/* core_fusion.c: Fusion, the C gradient fusion over one exported block */
extern PyType_Spec mt_py_fusion_spec;
extern PyMethodDef mt_py_data_methods[], mt_py_report_methods[], mt_py_ckpt_methods[];
/* A stored checkpoint object over ck, keeping owner (a Result, or NULL) alive; owned = free
 * ck with the object (mt_checkpoint_open's). */
PyObject *mt_py_stored_new(mt_py_state *st, const mt_checkpoint *ck, PyObject *owner, int owned);
/* A Result object owning r. */
PyObject *mt_py_result_new(mt_py_state *st, mt_result *r);
/* A dict from metrics (int, float, str values by their C type). */
PyObject *mt_py_metrics_dict(const mt_metrics *m);

#endif
