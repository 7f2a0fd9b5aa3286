/*
 * _core.c -- the extension module mpitrain._core: errors, set-up, configs and fit.
 *
 * Errors: one base class, mpitrain.MpitrainError, and a subclass per MT_E* code, made
 * from the C error table (MT_ERRNO_MAP): a code added there without a Python name here
 * fails the build. Each exception carries the C message (file, rank, field).
 *
 * fit: the Python training function runs in the caller's thread, through a C trampoline
 * given to mt_trainer_create. The GIL is released around mt_trainer_fit and taken back
 * inside the trampoline, so every wait of the library runs without it and no thread of
 * the library ever calls Python. A Python exception in the function is a C error of the
 * trampoline on that rank, its traceback the error's text (mt_set_error): the agreement at
 * the attempt's end fails the attempt on every rank, retried per max_failures, and the
 * text lands in the run's error record and in the result. StopTraining (a BaseException
 * raised by report when a stop request ended the run) and KeyboardInterrupt/SystemExit
 * end the fit without a retry (MT_ESTOP on that rank: with no stop request behind it, the
 * run fails on every rank, the others' code MT_EPEER, and that rank's exception is raised
 * again after fit).
 *
 * Ctrl-C while a fit runs takes the library's preemption path (mt_request_stop: checkpoint,
 * then the run stops and can be resumed), as SIGTERM does; a second Ctrl-C is Python's
 * KeyboardInterrupt again.
 */
#include "core.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- state, errors */

mt_py_state *mt_py_state_of(PyObject *module)
{
    return (mt_py_state *)PyModule_GetState(module);
}

mt_py_state *mt_py_state_from_type(PyTypeObject *type)
{
    PyObject *m = PyType_GetModuleByDef(type, &mt_py_module);
    return m ? mt_py_state_of(m) : NULL;
}

/* Python class names of the MT_E* codes (their bases: MpitrainError and a builtin). */
static const struct {
    int code;
    const char *name;
    const char *doc;
} err_names[] = {
    {MT_EINVAL, "InvalidArgumentError", "An invalid argument or config field (a ValueError)."},
    {MT_ENOMEM, "OutOfMemoryError", "Out of memory (a MemoryError)."},
    {MT_EIO, "InputOutputError", "A file could not be read or written (an OSError)."},
    {MT_ENOTFOUND, "NotFoundError", "A name, key, file or dataset is absent (a LookupError)."},
    {MT_EFORMAT, "FormatError", "A file is not in the expected format."},
    {MT_EMPI, "MPIError", "An MPI call failed."},
    {MT_EPEER, "PeerError", "Another rank failed; this one did not."},
    {MT_EMISMATCH, "MismatchError",
     "Ranks called different collectives, or the same one with different sizes or types."},
    {MT_ESTOP, "StopRequestedError", "The run must stop (preemption or a stop request)."},
};
_Static_assert(sizeof err_names / sizeof err_names[0] == MT_PY_NERR,
               "every MT_E* code of MT_ERRNO_MAP needs a Python class name in err_names");

static PyObject *builtin_base(int code)
{
    switch (code) {
    case MT_EINVAL:
        return PyExc_ValueError;
    case MT_ENOMEM:
        return PyExc_MemoryError;
    case MT_EIO:
        return PyExc_OSError;
    case MT_ENOTFOUND:
        return PyExc_LookupError;
    }
    return NULL;
}

static int err_index(int code)
{
    for (size_t i = 0; i < MT_PY_NERR; i++)
        if (err_names[i].code == code)
            return (int)i;
    return -1;
}

PyObject *mt_py_raise(mt_py_state *st, int rc)
{
    const char *msg = mt_last_error();
    if (!msg || !msg[0])
        msg = mt_strerror(rc);
    int i = err_index(rc);
    PyObject *cls = i >= 0 ? st->errors[i] : st->error;
    PyObject *exc = PyObject_CallFunction(cls, "s", msg);
    if (!exc)
        return NULL;
    PyObject *code = PyLong_FromLong(rc);
    if (!code || PyObject_SetAttrString(exc, "code", code) < 0 ||
        PyObject_SetAttrString(exc, "message", PyTuple_GET_ITEM(((PyBaseExceptionObject *)exc)->args, 0)) < 0) {
        Py_XDECREF(code);
        Py_DECREF(exc);
        return NULL;
    }
    Py_DECREF(code);
    PyErr_SetObject(cls, exc);
    Py_DECREF(exc);
    return NULL;
}

mt_context *mt_py_context(mt_py_state *st, const char *what)
{
    mt_context *c = mt_get_context();
    if (!c) {
        mt_set_error(MT_EINVAL, "");
        PyErr_Format(st->errors[err_index(MT_EINVAL)],
                     "%s: called outside a training function (it needs the worker's context: "
                     "call it from the function that fit() runs, in its thread)", what);
    }
    return c;
}

mt_dtype mt_py_dtype_of(const Py_buffer *v, const char *what)
{
    const char *f = v->format ? v->format : "B";
    if (*f == '@' || *f == '=' || *f == '<')
        f++; /* native order (x86-64 and every platform Open MPI runs on here: little) */
    if (f[0] && !f[1]) {
        switch (f[0]) {
        case 'B':
            return MT_U8;
        case 'f':
            return MT_F32;
        case 'd':
            return MT_F64;
        case 'i':
        case 'l':
        case 'q':
            if (v->itemsize == 4)
                return MT_I32;
            if (v->itemsize == 8)
                return MT_I64;
            break;
        }
    }
    PyErr_Format(PyExc_TypeError, "%s: unsupported element type '%s' (itemsize %zd): use "
                 "uint8, int32, int64, float32 or float64", what, v->format ? v->format : "B",
                 v->itemsize);
    return 0;
}

const char *mt_py_format_of(mt_dtype t)
{
    switch (t) {
    case MT_U8:
        return "B";
    case MT_I32:
        return "i";
    case MT_I64:
        return "q";
    case MT_F32:
        return "f";
    case MT_F64:
        return "d";
    }
    return "B";
}

/* ---------------------------------------------------------------- set-up */

int mt_py_finalized;

static char **saved_argv; /* mt_init keeps pointers into it until mt_finalize */
static int saved_argc;

static void free_argv(void)
{
    for (int i = 0; saved_argv && i < saved_argc; i++)
        free(saved_argv[i]);
    free(saved_argv);
    saved_argv = NULL;
    saved_argc = 0;
}

/* init(argv): mt_init with the interpreter's command line (what spawn mode starts again). */
static PyObject *py_init(PyObject *module, PyObject *arg)
{
    mt_py_state *st = mt_py_state_of(module);
    PyObject *seq = PySequence_Fast(arg, "init: argv must be a list of str");
    if (!seq)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (saved_argv) {
        Py_DECREF(seq);
        Py_RETURN_NONE; /* once per process */
    }
    saved_argv = calloc((size_t)n + 1, sizeof *saved_argv);
    if (!saved_argv) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *s = PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(seq, i));
        if (!s || !(saved_argv[i] = strdup(s))) {
            saved_argc = (int)n;
            free_argv();
            Py_DECREF(seq);
            return s ? PyErr_NoMemory() : NULL;
        }
    }
    Py_DECREF(seq);
    saved_argc = (int)n;
    int argc = saved_argc;
    char **argv = saved_argv;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = mt_init(&argc, &argv);
    Py_END_ALLOW_THREADS
    if (rc)
        return mt_py_raise(st, rc);
    Py_RETURN_NONE;
}

static PyObject *py_finalize(PyObject *module, PyObject *unused)
{
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = mt_finalize();
    Py_END_ALLOW_THREADS
    mt_py_finalized = 1;
    free_argv();
    if (rc)
        return mt_py_raise(mt_py_state_of(module), rc);
    Py_RETURN_NONE;
}

static PyObject *py_job_rank(PyObject *module, PyObject *unused)
{
    return PyLong_FromLong(mt_job_rank());
}

static PyObject *py_job_size(PyObject *module, PyObject *unused)
{
    return PyLong_FromLong(mt_job_size());
}

/* ---------------------------------------------------------------- configs */

/* What a config dict's strings and lists need to live for (until create copies them). */
typedef struct {
    const char **split; /* datasets_to_split, NULL-terminated */
} cfg_hold;

static int get_int(PyObject *d, const char *key, int *out)
{
    PyObject *v = PyDict_GetItemString(d, key); /* borrowed */
    if (!v || v == Py_None)
        return 0;
    if (!PyLong_Check(v) && !PyBool_Check(v)) {
        PyErr_Format(PyExc_TypeError, "%s must be an integer (got %R)", key, v);
        return -1;
    }
    int overflow = 0;
    long x = PyLong_AsLongAndOverflow(v, &overflow);
    if (overflow || x > 2147483647L || x < -2147483647L - 1) {
        PyErr_Format(PyExc_ValueError, "%s is out of range (got %R)", key, v);
        return -1;
    }
    *out = (int)x;
    return 0;
}

static int get_double(PyObject *d, const char *key, double *out)
{
    PyObject *v = PyDict_GetItemString(d, key);
    if (!v || v == Py_None)
        return 0;
    double x = PyFloat_AsDouble(v);
    if (x == -1.0 && PyErr_Occurred()) {
        PyErr_Format(PyExc_TypeError, "%s must be a number of seconds (got %R)", key, v);
        return -1;
    }
    *out = x;
    return 0;
}

static int get_str(PyObject *d, const char *key, const char **out)
{
    PyObject *v = PyDict_GetItemString(d, key);
    if (!v || v == Py_None)
        return 0;
    if (!PyUnicode_Check(v)) {
        PyErr_Format(PyExc_TypeError, "%s must be a str (got %R)", key, v);
        return -1;
    }
    *out = PyUnicode_AsUTF8(v); /* lives as long as the dict holds v */
    return *out ? 0 : -1;
}

static int get_bool(PyObject *d, const char *key, bool *out)
{
    PyObject *v = PyDict_GetItemString(d, key);
    if (!v || v == Py_None)
        return 0;
    int t = PyObject_IsTrue(v);
    if (t < 0)
        return -1;
    *out = t;
    return 0;
}

/* cfg from a dict of the C fields (keys as below); h must be released with hold_free. */
static int config_from_dict(PyObject *d, mt_trainer_config *cfg, cfg_hold *h)
{
    memset(cfg, 0, sizeof *cfg);
    h->split = NULL;
    if (!PyDict_Check(d)) {
        PyErr_SetString(PyExc_TypeError, "config must be a dict");
        return -1;
    }
    int order = 0;
    size_t mem = 0;
    PyObject *memv = PyDict_GetItemString(d, "memory_limit");
    if (memv && memv != Py_None) {
        mem = PyLong_AsSize_t(memv);
        if (mem == (size_t)-1 && PyErr_Occurred()) {
            PyErr_Format(PyExc_ValueError, "memory_limit must be a number of bytes >= 0 (got %R)",
                         memv);
            return -1;
        }
    }
    cfg->data.memory_limit = mem;
    PyObject *stagev = PyDict_GetItemString(d, "staging_bytes");
    if (stagev && stagev != Py_None &&
        (cfg->run.checkpoint.staging_bytes = PyLong_AsSize_t(stagev)) == (size_t)-1 &&
        PyErr_Occurred()) {
        PyErr_Format(PyExc_ValueError, "staging_bytes must be a number of bytes >= 0 (got %R)",
                     stagev);
        return -1;
    }
    if (get_int(d, "num_workers", &cfg->scaling.num_workers) ||
        get_int(d, "cpus_per_worker", &cfg->scaling.cpus_per_worker) ||
        get_str(d, "name", &cfg->run.name) || get_str(d, "storage_path", &cfg->run.storage_path) ||
        get_int(d, "verbose", &cfg->run.verbose) ||
        get_int(d, "num_to_keep", &cfg->run.checkpoint.num_to_keep) ||
        get_str(d, "score_attribute", &cfg->run.checkpoint.score_attribute) ||
        get_int(d, "score_order", &order) ||
        get_int(d, "frequency", &cfg->run.checkpoint.frequency) ||
        get_bool(d, "at_end", &cfg->run.checkpoint.at_end) ||
        get_bool(d, "async_commit", &cfg->run.checkpoint.async_commit) ||
        get_int(d, "max_failures", &cfg->run.failure.max_failures) ||
        get_double(d, "stall_warn_s", &cfg->run.failure.stall_warn_s) ||
        get_double(d, "stall_timeout_s", &cfg->run.failure.stall_timeout_s) ||
        get_bool(d, "overwrite", &cfg->run.overwrite) || get_bool(d, "trace", &cfg->run.trace) ||
        get_str(d, "resume_from_checkpoint", &cfg->run.resume_from_checkpoint))
        return -1;
    cfg->run.checkpoint.score_order = order ? MT_ORDER_MIN : MT_ORDER_MAX;
    PyObject *split = PyDict_GetItemString(d, "datasets_to_split");
    if (split && split != Py_None) {
        PyObject *seq = PySequence_Fast(split, "datasets_to_split must be a list of str");
        if (!seq)
            return -1;
        Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
        h->split = calloc((size_t)n + 1, sizeof *h->split);
        if (!h->split) {
            Py_DECREF(seq);
            PyErr_NoMemory();
            return -1;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
            /* the list (held by the dict) keeps its str items alive */
            if (!PyUnicode_Check(item) || !(h->split[i] = PyUnicode_AsUTF8(item))) {
                Py_DECREF(seq);
                if (!PyErr_Occurred())
                    PyErr_Format(PyExc_TypeError, "datasets_to_split must be a list of str "
                                 "(got %R)", item);
                return -1;
            }
        }
        Py_DECREF(seq);
        cfg->data.datasets_to_split = h->split;
    }
    return 0;
}

static void hold_free(cfg_hold *h)
{
    free(h->split);
    h->split = NULL;
}

/* validate(config): the C validator's verdict, every problem in one InvalidArgumentError. */
static PyObject *py_validate(PyObject *module, PyObject *d)
{
    mt_trainer_config cfg;
    cfg_hold h;
    if (config_from_dict(d, &cfg, &h)) {
        hold_free(&h);
        return NULL;
    }
    mt_config_defaults(&cfg);
    int rc = mt_config_validate(&cfg);
    hold_free(&h);
    if (rc)
        return mt_py_raise(mt_py_state_of(module), rc);
    Py_RETURN_NONE;
}

/* ---------------------------------------------------------------- fit */

typedef struct {
    mt_py_state *st;
    PyObject *fn;     /* borrowed for the fit */
    PyObject *exit;   /* owned: a KeyboardInterrupt or SystemExit to raise after fit */
    PyObject *errors; /* owned list: this rank's tracebacks, one per failed attempt */
} fit_call;

/* The text of the exception being handled: its traceback, as Python prints it. */
static PyObject *format_exception(PyObject *type, PyObject *value, PyObject *tb)
{
    PyObject *mod = PyImport_ImportModule("traceback");
    PyObject *lines = mod ? PyObject_CallMethod(mod, "format_exception", "OOO", type,
                                                value ? value : Py_None, tb ? tb : Py_None)
                          : NULL;
    Py_XDECREF(mod);
    PyObject *empty = lines ? PyUnicode_FromString("") : NULL;
    PyObject *text = empty ? PyUnicode_Join(empty, lines) : NULL;
    Py_XDECREF(empty);
    Py_XDECREF(lines);
    if (!text) {
        PyErr_Clear();
        text = value ? PyObject_Str(value) : PyUnicode_FromString("exception");
    }
    return text;
}

/* Called with the GIL, a Python exception set: the C code and text for the agreement. */
static int function_failed(fit_call *fc)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb && value)
        PyException_SetTraceback(value, tb);
    int rc = MT_EINVAL;
    if (PyErr_GivenExceptionMatches(type, fc->st->stop_training)) {
        rc = MT_ESTOP;
        mt_set_error(rc, "stopped after a checkpoint for a stop request (preemption); rerun "
                         "to resume");
    } else {
        PyObject *text = format_exception(type, value, tb);
        const char *s = text ? PyUnicode_AsUTF8(text) : NULL;
        if (!s) {
            PyErr_Clear();
            s = "the training function raised an exception (its text could not be formatted)";
        }
        if (PyErr_GivenExceptionMatches(type, PyExc_KeyboardInterrupt) ||
            PyErr_GivenExceptionMatches(type, PyExc_SystemExit)) {
            rc = MT_ESTOP; /* no retry: the user asked to leave */
            Py_XSETREF(fc->exit, Py_NewRef(value));
        } else if (PyErr_GivenExceptionMatches(type, fc->st->error)) {
            PyObject *code = PyObject_GetAttrString(value, "code");
            long c = code ? PyLong_AsLong(code) : MT_EINVAL;
            Py_XDECREF(code);
            PyErr_Clear();
            if (err_index((int)c) >= 0 && c != MT_ESTOP)
                rc = (int)c;
        }
        if (text && fc->errors && PyList_Append(fc->errors, text) < 0)
            PyErr_Clear();
        mt_set_error(rc, s);
        Py_XDECREF(text);
    }
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    return rc;
}

static int trampoline(mt_context *ctx, void *arg)
{
    fit_call *fc = arg;
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *r = PyObject_CallNoArgs(fc->fn);
    int rc = MT_OK;
    if (r)
        Py_DECREF(r);
    else
        rc = function_failed(fc);
    PyGILState_Release(g);
    return rc;
}

/* Ctrl-C during fit: the first a stop request, the second Python's own handler again. */
static struct sigaction old_int;
static volatile sig_atomic_t int_installed, int_count;

static void on_sigint(int sig)
{
    if (int_count++ == 0) {
        mt_request_stop();
        return;
    }
    sigaction(SIGINT, &old_int, NULL);
    int_installed = 0;
    raise(sig);
}

static void sigint_install(void)
{
    struct sigaction now;
    if (sigaction(SIGINT, NULL, &now) != 0 || now.sa_handler == SIG_IGN)
        return; /* ignored (a background job): keep it so */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    int_count = 0;
    if (sigaction(SIGINT, &sa, &old_int) == 0)
        int_installed = 1;
}

static void sigint_restore(void)
{
    if (int_installed)
        sigaction(SIGINT, &old_int, NULL);
    int_installed = 0;
}

/* fit(fn, config, datasets) -> (code, Result or None, [tracebacks of this rank])
 * Collective. datasets: a list of (name, h5_file, h5_group). Raises only for what the
 * caller gave wrong before anything ran (a bad config type, a dataset refused); the
 * fit's own outcome is the code and the result, for the Python layer to judge. */
static PyObject *py_fit(PyObject *module, PyObject *args)
{
    mt_py_state *st = mt_py_state_of(module);
    PyObject *fn, *d, *datasets;
    if (!PyArg_ParseTuple(args, "OOO:fit", &fn, &d, &datasets))
        return NULL;
    if (!PyCallable_Check(fn))
        return PyErr_Format(PyExc_TypeError, "fit: the training function is not callable");
    mt_trainer_config cfg;
    cfg_hold h;
    if (config_from_dict(d, &cfg, &h)) {
        hold_free(&h);
        return NULL;
    }
    fit_call fc = {.st = st, .fn = fn, .errors = PyList_New(0)};
    mt_trainer *t = NULL;
    mt_result *res = NULL;
    PyObject *ds = NULL, *out = NULL;
    int rc = fc.errors ? mt_trainer_create(&t, trampoline, &fc, &cfg) : MT_ENOMEM;
    hold_free(&h);
    if (rc) {
        if (fc.errors)
            mt_py_raise(st, rc);
        goto done;
    }
    ds = PySequence_Fast(datasets, "fit: datasets must be a list of (name, file, group)");
    if (!ds)
        goto done;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(ds); i++) {
        const char *name, *file, *group;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(ds, i), "sss;a dataset is (name, file, "
                              "group)", &name, &file, &group))
            goto done;
        if ((rc = mt_trainer_add_dataset(t, name, file, group))) {
            mt_py_raise(st, rc);
            goto done;
        }
    }
    sigint_install();
    Py_BEGIN_ALLOW_THREADS
    rc = mt_trainer_fit(t, &res);
    Py_END_ALLOW_THREADS
    sigint_restore();
    if (fc.exit) { /* the user's KeyboardInterrupt or SystemExit, raised again here */
        mt_result_free(&res);
        PyErr_SetObject((PyObject *)Py_TYPE(fc.exit), fc.exit);
        goto done;
    }
    PyObject *result = res ? mt_py_result_new(st, res) : Py_NewRef(Py_None);
    if (!result)
        goto done;
    res = NULL; /* the Result owns it */
    out = Py_BuildValue("(iNO)", rc, result, fc.errors);
done:
    mt_result_free(&res);
    mt_trainer_destroy(&t);
    Py_XDECREF(ds);
    Py_XDECREF(fc.exit);
    Py_XDECREF(fc.errors);
    return out;
}

/* ---------------------------------------------------------------- context */

#define CTX_INT(fname, call)                                                  \
    static PyObject *py_##fname(PyObject *module, PyObject *unused)           \
    {                                                                         \
        mt_context *c = mt_py_context(mt_py_state_of(module), #fname);        \
        return c ? PyLong_FromLongLong((long long)call(c)) : NULL;            \
    }
CTX_INT(world_size, mt_world_size)
CTX_INT(world_rank, mt_world_rank)
CTX_INT(local_rank, mt_local_rank)
CTX_INT(local_world_size, mt_local_world_size)
CTX_INT(node_rank, mt_node_rank)
CTX_INT(num_cpus, mt_num_cpus)
CTX_INT(attempt, mt_attempt)
CTX_INT(training_iteration, mt_training_iteration)

static PyObject *py_experiment_name(PyObject *module, PyObject *unused)
{
    mt_context *c = mt_py_context(mt_py_state_of(module), "experiment_name");
    return c ? PyUnicode_FromString(mt_experiment_name(c)) : NULL;
}

static PyObject *py_run_dir(PyObject *module, PyObject *unused)
{
    mt_context *c = mt_py_context(mt_py_state_of(module), "run_dir");
    return c ? PyUnicode_FromString(mt_run_dir(c)) : NULL;
}

static PyObject *py_should_checkpoint(PyObject *module, PyObject *unused)
{
    mt_context *c = mt_py_context(mt_py_state_of(module), "should_checkpoint");
    return c ? PyBool_FromLong(mt_should_checkpoint(c)) : NULL;
}

static PyObject *py_in_fit(PyObject *module, PyObject *unused)
{
    return PyBool_FromLong(mt_get_context() != NULL);
}

static PyObject *py_set_total_iterations(PyObject *module, PyObject *arg)
{
    mt_context *c = mt_py_context(mt_py_state_of(module), "set_total_iterations");
    long long n = c ? PyLong_AsLongLong(arg) : 0;
    if (!c || (n == -1 && PyErr_Occurred()))
        return NULL;
    mt_set_total_iterations(c, n);
    Py_RETURN_NONE;
}

/* getenv(name) -> str or None: the C environment, where fit sets RANK, WORLD_SIZE, ...
 * (os.environ is Python's copy from start-up and does not see them) */
static PyObject *py_getenv(PyObject *module, PyObject *arg)
{
    const char *name = PyUnicode_AsUTF8(arg);
    if (!name)
        return NULL;
    const char *v = getenv(name);
    return v ? PyUnicode_DecodeFSDefault(v) : Py_NewRef(Py_None);
}

static PyMethodDef core_methods[] = {
    {"getenv", py_getenv, METH_O, "getenv(name): the C environment's value, or None."},
    {"init", py_init, METH_O, "init(argv): mt_init with this command line (once)."},
    {"finalize", py_finalize, METH_NOARGS, "finalize(): mt_finalize."},
    {"job_rank", py_job_rank, METH_NOARGS, "This process's rank in the job."},
    {"job_size", py_job_size, METH_NOARGS, "The job's size (1 before spawn mode starts)."},
    {"validate", py_validate, METH_O, "validate(config): the C validator on a config dict."},
    {"fit", py_fit, METH_VARARGS, "fit(fn, config, datasets) -> (code, result, tracebacks)."},
    {"world_size", py_world_size, METH_NOARGS, NULL},
    {"world_rank", py_world_rank, METH_NOARGS, NULL},
    {"local_rank", py_local_rank, METH_NOARGS, NULL},
    {"local_world_size", py_local_world_size, METH_NOARGS, NULL},
    {"node_rank", py_node_rank, METH_NOARGS, NULL},
    {"num_cpus", py_num_cpus, METH_NOARGS, NULL},
    {"attempt", py_attempt, METH_NOARGS, NULL},
    {"training_iteration", py_training_iteration, METH_NOARGS, NULL},
    {"experiment_name", py_experiment_name, METH_NOARGS, NULL},
    {"run_dir", py_run_dir, METH_NOARGS, NULL},
    {"should_checkpoint", py_should_checkpoint, METH_NOARGS, NULL},
    {"set_total_iterations", py_set_total_iterations, METH_O, NULL},
    {"in_fit", py_in_fit, METH_NOARGS, "True inside a training function."},
    {NULL, NULL, 0, NULL},
};

/* ---------------------------------------------------------------- module */

static int add_functions(PyObject *m, PyMethodDef *defs)
{
    return PyModule_AddFunctions(m, defs);
}

static int add_type(PyObject *m, PyType_Spec *spec, PyTypeObject **slot)
{
    *slot = (PyTypeObject *)PyType_FromModuleAndSpec(m, spec, NULL);
    return *slot ? PyModule_AddType(m, *slot) : -1;
}

static int core_exec(PyObject *m)
{
    mt_py_state *st = mt_py_state_of(m);
    st->error = PyErr_NewExceptionWithDoc(
        "mpitrain.MpitrainError",
        "An error of the mpitrain library: .code is the MT_E* code (negative), .message the "
        "C message (naming the file, rank and field).", PyExc_Exception, NULL);
    if (!st->error || PyModule_AddObjectRef(m, "MpitrainError", st->error) < 0)
        return -1;
    for (size_t i = 0; i < MT_PY_NERR; i++) {
        PyObject *b = builtin_base(err_names[i].code);
        PyObject *bases = b ? PyTuple_Pack(2, st->error, b) : PyTuple_Pack(1, st->error);
        char qual[128];
        snprintf(qual, sizeof qual, "mpitrain.%s", err_names[i].name);
        st->errors[i] = bases ? PyErr_NewExceptionWithDoc(qual, err_names[i].doc, bases, NULL)
                              : NULL;
        Py_XDECREF(bases);
        if (!st->errors[i] || PyModule_AddObjectRef(m, err_names[i].name, st->errors[i]) < 0)
            return -1;
        PyObject *code = PyLong_FromLong(err_names[i].code);
        int e = code ? PyObject_SetAttrString(st->errors[i], "code", code) : -1;
        Py_XDECREF(code);
        if (e < 0)
            return -1;
    }
    st->stop_training = PyErr_NewExceptionWithDoc(
        "mpitrain.train.StopTraining",
        "Raised by train.report once a stop request (SIGTERM, SIGUSR1, Ctrl-C) ended the run "
        "after a checkpoint. A BaseException, like KeyboardInterrupt: `except Exception` does "
        "not swallow it; fit() then exits the job with status 75 (resume by running the same "
        "command again).", PyExc_BaseException, NULL);
    if (!st->stop_training || PyModule_AddObjectRef(m, "StopTraining", st->stop_training) < 0)
        return -1;
    if (add_functions(m, mt_py_data_methods) || add_functions(m, mt_py_report_methods) ||
        add_functions(m, mt_py_ckpt_methods))
        return -1;
    if (add_type(m, &mt_py_shard_spec, &st->shard_type) ||
        add_type(m, &mt_py_view_spec, &st->view_type) ||
        add_type(m, &mt_py_stored_spec, &st->stored_type) ||
        add_type(m, &mt_py_result_spec, &st->result_type) ||
        add_type(m, &mt_py_fusion_spec, &st->fusion_type))
        return -1;
    if (PyModule_AddIntConstant(m, "EXIT_PREEMPTED", MT_EXIT_PREEMPTED) ||
        PyModule_AddIntConstant(m, "EXIT_FAILED", MT_EXIT_FAILED) ||
        PyModule_AddIntConstant(m, "ESTOP", MT_ESTOP) ||
        PyModule_AddIntConstant(m, "U8", MT_U8) || PyModule_AddIntConstant(m, "I32", MT_I32) ||
        PyModule_AddIntConstant(m, "I64", MT_I64) || PyModule_AddIntConstant(m, "F32", MT_F32) ||
        PyModule_AddIntConstant(m, "F64", MT_F64) ||
        PyModule_AddIntConstant(m, "REPLICATED", MT_REPLICATED) ||
        PyModule_AddIntConstant(m, "SHARDED", MT_SHARDED))
        return -1;
    return 0;
}

static int core_traverse(PyObject *m, visitproc visit, void *arg)
{
    mt_py_state *st = mt_py_state_of(m);
    Py_VISIT(st->error);
    for (size_t i = 0; i < MT_PY_NERR; i++)
        Py_VISIT(st->errors[i]);
    Py_VISIT(st->stop_training);
    Py_VISIT(st->shard_type);
    Py_VISIT(st->view_type);
    Py_VISIT(st->stored_type);
    Py_VISIT(st->result_type);
    Py_VISIT(st->fusion_type);
    return 0;
}

static int core_clear(PyObject *m)
{
    mt_py_state *st = mt_py_state_of(m);
    Py_CLEAR(st->error);
    for (size_t i = 0; i < MT_PY_NERR; i++)
        Py_CLEAR(st->errors[i]);
    Py_CLEAR(st->stop_training);
    Py_CLEAR(st->shard_type);
    Py_CLEAR(st->view_type);
    Py_CLEAR(st->stored_type);
    Py_CLEAR(st->result_type);
    Py_CLEAR(st->fusion_type);
    return 0;
}

static void core_free(void *m)
{
    core_clear((PyObject *)m);
}

static PyModuleDef_Slot core_slots[] = {
    {Py_mod_exec, core_exec},
    {0, NULL},
};

PyModuleDef mt_py_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "mpitrain._core",
    .m_doc = "The C layer of mpitrain's Python package (over include/mpitrain.h).",
    .m_size = sizeof(mt_py_state),
    .m_methods = core_methods,
    .m_slots = core_slots,
    .m_traverse = core_traverse,
    .m_clear = core_clear,
    .m_free = core_free,
};

PyMODINIT_FUNC PyInit__core(void);
PyMODINIT_FUNC PyInit__core(void)
{
    return PyModuleDef_Init(&mt_py_module);
}
