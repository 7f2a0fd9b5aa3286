/*
 * config.c -- defaults, validation and command-line parsing for mt_trainer_config.
 *
 * Zero means "default" in every field, so a config written with designated initialisers
 * names only what it changes. Validation reports every bad field at once, each by its full
 * path and rule, because a user fixing a job script wants the whole list in one run.
 */
#include "runtime.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_STALL_WARN_S 60.0
#define DEFAULT_STALL_TIMEOUT_S 600.0
#define DEFAULT_MEMORY_LIMIT ((size_t)1 << 30)
#define DEFAULT_STAGING_BYTES ((size_t)1 << 30)
#define MAX_STAGING_BYTES ((size_t)1 << 40)

const char *mt__default_storage_path(void)
{
    static _Thread_local char path[4096];
    const char *home = getenv("HOME");
    snprintf(path, sizeof path, "%s/mpitrain_results", home && *home ? home : ".");
    return path;
}

void mt_config_defaults(mt_trainer_config *cfg)
{
    if (!cfg->run.storage_path)
        cfg->run.storage_path = mt__default_storage_path();
    if (cfg->run.verbose == 0)
        cfg->run.verbose = 1;
    if (cfg->run.failure.stall_warn_s == 0)
        cfg->run.failure.stall_warn_s = DEFAULT_STALL_WARN_S;
    if (cfg->run.failure.stall_timeout_s == 0)
        cfg->run.failure.stall_timeout_s = DEFAULT_STALL_TIMEOUT_S;
    if (cfg->data.memory_limit == 0)
        cfg->data.memory_limit = DEFAULT_MEMORY_LIMIT;
    /* the environment decides what the program left at zero (fit refuses a bad value) */
    mt_checkpoint_config *ck = &cfg->run.checkpoint;
    if (!ck->async_commit)
        ck->async_commit = mt__env_knob_bool("MT_CHECKPOINT_ASYNC", false);
    if (ck->staging_bytes == 0)
        ck->staging_bytes = (size_t)mt__env_knob_u64("MT_CHECKPOINT_STAGING",
                                                     DEFAULT_STAGING_BYTES);
}

/* The problems found so far, one per line; checks that record their own message
 * (mt__check_name, mt__parse_*) are moved into it, and it becomes mt_last_error at the
 * end. */
typedef struct {
    char text[MT__MSG_LEN];
    int n;
} problems;

static void problem(problems *p, const char *fmt, ...) MT__PRINTF(2, 3);
static void problem(problems *p, const char *fmt, ...)
{
    size_t used = strlen(p->text);
    if (p->n++ > 0 && used + 1 < sizeof p->text)
        p->text[used++] = '\n';
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->text + used, sizeof p->text - used, fmt, ap);
    va_end(ap);
}

/* rc != 0: the check's message (in mt_last_error) joins the list. */
static void listed(problems *p, int rc)
{
    if (rc)
        problem(p, "%s", mt_last_error());
}

static int finish(const problems *p)
{
    if (!p->n)
        return MT_OK;
    mt__error_set_text(p->text);
    return MT_EINVAL;
}

/* Every environment knob (the table in common/parse.c): a bad value is one clear error at
 * the start of fit, on every rank through fit's first agreement, instead of being ignored
 * or misread where it is used. */
int mt__env_validate(void)
{
    problems n = {.n = 0};
    for (const mt__env_knob *k = mt__env_knobs; k->name; k++) {
        uint64_t u;
        double d;
        bool b;
        int w;
        if (k->kind == MT__KNOB_WORD)
            listed(&n, mt__env_word(k->name, k->words, &w));
        else if (k->kind == MT__KNOB_BOOL)
            listed(&n, mt__env_bool(k->name, &b));
        else if (k->kind == MT__KNOB_SECONDS)
            listed(&n, mt__env_f64(k->name, (double)k->min, (double)k->max, &d));
        else
            listed(&n, mt__env_u64(k->name, k->min, k->max, &u));
    }
    return finish(&n);
}

static void check_seconds(problems *n, const char *field, double v)
{
    if (!isfinite(v) || v < 0)
        problem(n, "%s must be a finite number of seconds >= 0 (got %g)", field, v);
    else if (v > 1e9) /* past this, conversions to clock ticks overflow */
        problem(n, "%s must be at most 1e9 seconds (got %g)", field, v);
}

int mt_config_validate(const mt_trainer_config *in)
{
    problems n = {.n = 0};
    if (!in)
        return mt__error(MT_EINVAL, "config is NULL");
    mt_trainer_config cfg = *in;
    mt_config_defaults(&cfg);
    if (cfg.scaling.num_workers < 0)
        problem(&n, "scaling.num_workers must be >= 0 (got %d)", cfg.scaling.num_workers);
    if (cfg.scaling.cpus_per_worker < 0)
        problem(&n, "scaling.cpus_per_worker must be >= 0 (got %d)",
                cfg.scaling.cpus_per_worker);
    if (cfg.run.name)
        listed(&n, mt__check_name("run.name", cfg.run.name, MT__NAME_MAX));
    /* room under PATH_MAX for <name>/.checkpoint_NNNNNN.tmp/rankN/<file name> */
    listed(&n, mt__check_text("run.storage_path", cfg.run.storage_path, MT__DIR_MAX));
    if (cfg.run.verbose < MT_VERBOSE_SILENT || cfg.run.verbose > 2)
        problem(&n, "run.verbose must be -1 (silent), 0 (default), 1 or 2 (got %d)",
                cfg.run.verbose);
    const mt_checkpoint_config *ck = &cfg.run.checkpoint;
    if (ck->num_to_keep < 0)
        problem(&n, "run.checkpoint.num_to_keep must be >= 0 (got %d)", ck->num_to_keep);
    if (ck->score_attribute && !*ck->score_attribute)
        problem(&n, "run.checkpoint.score_attribute must not be empty (use NULL for none)");
    else if (ck->score_attribute)
        listed(&n, mt__check_text("run.checkpoint.score_attribute", ck->score_attribute,
                                  255)); /* a metric key's bound */
    if (ck->score_order != MT_ORDER_MAX && ck->score_order != MT_ORDER_MIN)
        problem(&n, "run.checkpoint.score_order must be MT_ORDER_MAX or MT_ORDER_MIN (got %d)",
                (int)ck->score_order);
    if (ck->frequency < 0)
        problem(&n, "run.checkpoint.frequency must be >= 0 (got %d)", ck->frequency);
    if (ck->staging_bytes > MAX_STAGING_BYTES)
        problem(&n, "run.checkpoint.staging_bytes must be at most 1 TiB (got %zu)",
                ck->staging_bytes);
    if (cfg.run.resume_from_checkpoint && !*cfg.run.resume_from_checkpoint)
        problem(&n, "run.resume_from_checkpoint must not be empty (use NULL for none)");
    else if (cfg.run.resume_from_checkpoint)
        listed(&n, mt__check_text("run.resume_from_checkpoint", cfg.run.resume_from_checkpoint,
                                  MT__DIR_MAX));
    const mt_failure_config *f = &cfg.run.failure;
    if (f->max_failures < -1)
        problem(&n, "run.failure.max_failures must be >= -1 (got %d)", f->max_failures);
    check_seconds(&n, "run.failure.stall_warn_s", f->stall_warn_s);
    check_seconds(&n, "run.failure.stall_timeout_s", f->stall_timeout_s);
    if (isfinite(f->stall_warn_s) && isfinite(f->stall_timeout_s) &&
        f->stall_timeout_s < f->stall_warn_s)
        problem(&n, "run.failure.stall_timeout_s must be >= run.failure.stall_warn_s "
                    "(got %g < %g)", f->stall_timeout_s, f->stall_warn_s);
    if (cfg.data.datasets_to_split)
        for (size_t i = 0; cfg.data.datasets_to_split[i]; i++)
            if (!*cfg.data.datasets_to_split[i])
                problem(&n, "data.datasets_to_split[%zu] must not be empty", i);
    return finish(&n);
}

/* ------------------------------------------------------------ command line */

typedef enum {
    OPT_STR, OPT_INT, OPT_BYTES, OPT_SECONDS, OPT_ORDER, OPT_FLAG, OPT_VERBOSE, OPT_HELP
} opt_kind;

typedef struct {
    const char *name;
    opt_kind kind;
    size_t offset;
    const char *help;
    const char *dflt; /* the library's default, shown when the program sets none; NULL: none */
} opt_def;

#define OFF(field) offsetof(mt_trainer_config, field)
static const opt_def opts[] = {
    {"name", OPT_STR, OFF(run.name), "experiment name (env MT_NAME)", "mt_<date>_<time>"},
    {"storage-path", OPT_STR, OFF(run.storage_path),
     "folder of run directories (env MT_STORAGE_PATH)", "~/mpitrain_results"},
    {"num-workers", OPT_INT, OFF(scaling.num_workers),
     "workers; without mpirun, N spawns N-1 more ranks", "the job's ranks"},
    {"cpus-per-worker", OPT_INT, OFF(scaling.cpus_per_worker),
     "CPUs each rank's affinity mask must hold", "no check"},
    {"max-failures", OPT_INT, OFF(run.failure.max_failures),
     "retries after a failure, -1 = unlimited", "0"},
    {"num-to-keep", OPT_INT, OFF(run.checkpoint.num_to_keep), "checkpoints to keep, 0 = all",
     "0"},
    {"checkpoint-score-attribute", OPT_STR, OFF(run.checkpoint.score_attribute),
     "metric that ranks checkpoints, e.g. val/acc", "none: newest wins"},
    {"checkpoint-score-order", OPT_ORDER, OFF(run.checkpoint.score_order), "max or min", "max"},
    {"checkpoint-frequency", OPT_INT, OFF(run.checkpoint.frequency),
     "checkpoint every N reports, 0 = when the function asks", "0"},
    {"checkpoint-at-end", OPT_FLAG, OFF(run.checkpoint.at_end),
     "take a final checkpoint when training ends", "off"},
    {"checkpoint-async", OPT_FLAG, OFF(run.checkpoint.async_commit),
     "commit checkpoints in a thread while training goes on (env MT_CHECKPOINT_ASYNC=1)", "off"},
    {"checkpoint-staging", OPT_BYTES, OFF(run.checkpoint.staging_bytes),
     "bytes a rank stages for an asynchronous commit (env MT_CHECKPOINT_STAGING)",
     "1073741824"},
    {"overwrite", OPT_FLAG, OFF(run.overwrite),
     "replace a finished run of the same name instead of refusing to start", "off"},
    {"resume-from-checkpoint", OPT_STR, OFF(run.resume_from_checkpoint),
     "start a new run from this checkpoint folder", "none"},
    {"stall-warn", OPT_SECONDS, OFF(run.failure.stall_warn_s),
     "seconds in a collective before a stall warning", "60"},
    {"stall-timeout", OPT_SECONDS, OFF(run.failure.stall_timeout_s),
     "seconds in a collective before the job aborts", "600"},
    {"trace", OPT_FLAG, OFF(run.trace), "write a timeline per rank to <run>/trace/ (env MT_TRACE=1)",
     "off"},
    {"verbose", OPT_VERBOSE, OFF(run.verbose), "0 silent, 1 a line per report, 2 per-rank detail",
     "1"},
    {"help", OPT_HELP, 0, "print this help", NULL},
};
#undef OFF

/* The value a program put in the option's field, as text; false when the field is zero
 * (the library's default applies). */
static bool set_value(const opt_def *o, const mt_trainer_config *cfg, char *buf, size_t len)
{
    const char *field = (const char *)cfg + o->offset;
    switch (o->kind) {
    case OPT_STR: {
        const char *v = *(const char *const *)field;
        return v && snprintf(buf, len, "%s", v) >= 0;
    }
    case OPT_INT:
        return *(const int *)field && snprintf(buf, len, "%d", *(const int *)field) >= 0;
    case OPT_BYTES:
        return *(const size_t *)field && snprintf(buf, len, "%zu", *(const size_t *)field) >= 0;
    case OPT_SECONDS:
        return *(const double *)field && snprintf(buf, len, "%g", *(const double *)field) >= 0;
    case OPT_ORDER:
        return *(const mt_order *)field == MT_ORDER_MIN && snprintf(buf, len, "min") >= 0;
    case OPT_FLAG:
        return *(const bool *)field && snprintf(buf, len, "on") >= 0;
    case OPT_VERBOSE: {
        int v = *(const int *)field;
        return v && snprintf(buf, len, "%d", v == MT_VERBOSE_SILENT ? 0 : v) >= 0;
    }
    case OPT_HELP:
        break;
    }
    return false;
}

size_t mt__config_nfields(void)
{
    return sizeof opts / sizeof *opts;
}

const char *mt__config_field(const mt_trainer_config *cfg, size_t i, char *buf, size_t len)
{
    const opt_def *o = &opts[i];
    if (o->kind == OPT_HELP || !strcmp(o->name, "verbose") || !strcmp(o->name, "trace") ||
        !strcmp(o->name, "name"))
        return NULL; /* each rank's own (trace: merged over the ranks that wrote one; the
                        name: rank 0's is the run's) */
    if (!set_value(o, cfg, buf, len))
        snprintf(buf, len, "%s", o->kind == OPT_FLAG ? "off" : "(the default)");
    return o->name;
}

/* names: NULL = every option; else a NULL-terminated list of names without "--". */
static bool wanted(const char *const *names, const char *name)
{
    if (!names)
        return true;
    for (; *names; names++)
        if (!strcmp(*names, name))
            return true;
    return false;
}

void mt_config_help_only(FILE *out, const mt_trainer_config *defaults, const char *const *names)
{
    fprintf(out, "mpitrain options (also --opt=VALUE):\n");
    for (size_t i = 0; i < sizeof opts / sizeof *opts; i++) {
        const opt_def *o = &opts[i];
        if (!wanted(names, o->name) || (names && o->kind == OPT_HELP))
            continue;
        const char *arg = o->kind == OPT_FLAG || o->kind == OPT_HELP ? ""
                          : o->kind == OPT_STR                       ? " TEXT"
                          : o->kind == OPT_ORDER                     ? " max|min"
                          : o->kind == OPT_SECONDS                   ? " SECONDS"
                          : o->kind == OPT_BYTES                     ? " BYTES"
                                                                     : " N";
        char left[64], value[256];
        snprintf(left, sizeof left, "--%s%s", o->name, arg);
        const char *d = defaults && set_value(o, defaults, value, sizeof value) ? value : o->dflt;
        if (d)
            fprintf(out, "  %-36s %s (default: %s)\n", left, o->help, d);
        else
            fprintf(out, "  %-36s %s\n", left, o->help);
    }
}

void mt_config_help(FILE *out, const mt_trainer_config *defaults)
{
    mt_config_help_only(out, defaults, NULL);
}

void mt_config_usage(FILE *out) { mt_config_help_only(out, NULL, NULL); }

/* Apply one option; problems go to the list. */
static void apply(mt_trainer_config *cfg, const opt_def *o, const char *val, problems *n)
{
    char *field = (char *)cfg + o->offset, what[64];
    snprintf(what, sizeof what, "option --%s", o->name);
    switch (o->kind) {
    case OPT_STR:
        *(const char **)field = val;
        break;
    case OPT_INT:
        listed(n, mt__parse_int(what, val, INT_MIN, INT_MAX, (int *)field));
        break;
    case OPT_BYTES:
        listed(n, mt__parse_size(what, val, 1, MAX_STAGING_BYTES, (size_t *)field));
        break;
    case OPT_SECONDS:
        if (mt__parse_f64(what, val, 0, 1e9, (double *)field))
            problem(n, "option --%s: '%s' is not a number of seconds (0 to 1e9)", o->name,
                    val);
        break;
    case OPT_ORDER:
        if (!strcmp(val, "max"))
            *(mt_order *)field = MT_ORDER_MAX;
        else if (!strcmp(val, "min"))
            *(mt_order *)field = MT_ORDER_MIN;
        else
            problem(n, "option --%s: '%s' is not max or min", o->name, val);
        break;
    case OPT_VERBOSE: {
        int v;
        if (mt__parse_int(what, val, 0, 2, &v))
            problem(n, "option --%s: '%s' is not 0, 1 or 2", o->name, val);
        else
            *(int *)field = v == 0 ? MT_VERBOSE_SILENT : v;
        break;
    }
    case OPT_FLAG:
        *(bool *)field = true;
        break;
    case OPT_HELP:
        break;
    }
}

/* ------------------------------------------------------------ reading argv */

/* Whether arg is the option --NAME (name without "--", len bytes of it), alone or as
 * --NAME=VALUE; *inline_val is then VALUE, or NULL when alone. */
static bool option_is(const char *arg, const char *name, size_t len, const char **inline_val)
{
    if (strncmp(arg, "--", 2) != 0 || strncmp(arg + 2, name, len) != 0 ||
        (arg[2 + len] != '\0' && arg[2 + len] != '='))
        return false;
    *inline_val = arg[2 + len] == '=' ? arg + 3 + len : NULL;
    return true;
}

/* The value of the option at argv[*i]: its inline value, else the next argument before
 * end (then *i moves onto it); NULL when there is none. */
static const char *option_value(char *const *argv, int *i, int end, const char *inline_val)
{
    if (inline_val)
        return inline_val;
    return *i + 1 < end ? argv[++*i] : NULL;
}

/* The arguments before a "--" (after it, everything belongs to the program). */
static int args_end(int argc, char *const *argv)
{
    for (int i = 1; i < argc; i++)
        if (argv[i] && !strcmp(argv[i], "--"))
            return i;
    return argc;
}

/* After a loop over argv[1..end) that kept *out of them: "--" and what follows it kept
 * too, the rest NULL, *argc the number kept. */
static void args_close(int *argc, char **argv, int end, int out)
{
    for (int i = end; i < *argc; i++)
        argv[out++] = argv[i];
    for (int i = out; i < *argc; i++)
        argv[i] = NULL;
    *argc = out;
}

static const opt_def *find_opt(const char *arg, const char **inline_val,
                                const char *const *names)
{
    for (size_t i = 0; i < sizeof opts / sizeof *opts; i++)
        if (wanted(names, opts[i].name) &&
            option_is(arg, opts[i].name, strlen(opts[i].name), inline_val))
            return &opts[i];
    return NULL;
}

int mt_config_from_args(mt_trainer_config *cfg, int *argc, char ***argv)
{
    return mt_config_from_args_only(cfg, argc, argv, NULL);
}

int mt_config_from_args_only(mt_trainer_config *cfg, int *argc, char ***argv,
                             const char *const *names)
{
    if (!cfg || !argc || !argv || (*argc > 0 && !*argv))
        return mt__error(MT_EINVAL, "mt_config_from_args: NULL argument");
    const char *env;
    if ((env = getenv("MT_NAME")) && *env && wanted(names, "name"))
        cfg->run.name = env;
    if ((env = getenv("MT_STORAGE_PATH")) && *env && wanted(names, "storage-path"))
        cfg->run.storage_path = env;
    problems n = {.n = 0};
    char **av = *argv;
    int end = args_end(*argc, av), out = 1;
    for (int i = 1; i < end; i++) {
        const char *val = NULL;
        const opt_def *o = find_opt(av[i], &val, names);
        if (!o || o->kind == OPT_HELP) { /* --help: the program prints its usage */
            av[out++] = av[i];
            continue;
        }
        if (o->kind == OPT_FLAG) {
            if (val)
                problem(&n, "option --%s takes no value (got '%s')", o->name, val);
            else
                apply(cfg, o, "", &n);
            continue;
        }
        if (!(val = option_value(av, &i, end, val)))
            problem(&n, "option --%s needs a value", o->name);
        else
            apply(cfg, o, val, &n);
    }
    args_close(argc, av, end, out);
    return finish(&n);
}

/* ------------------------------------------------------------ what the library left */

bool mt_args_help(int argc, char *const *argv)
{
    if (!argv)
        return false;
    int end = args_end(argc, argv);
    for (int i = 1; i < end; i++)
        if (argv[i] && (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")))
            return true;
    return false;
}

int mt_args_take(int *argc, char **argv, const char *name, const char **value)
{
    if (!argc || !argv || !name || strncmp(name, "--", 2) != 0 || !value)
        return mt__error(MT_EINVAL, "mt_args_take: NULL argument or a name without '--'");
    *value = NULL;
    int end = args_end(*argc, argv), out = 1, rc = MT_OK;
    for (int i = 1; i < end; i++) {
        const char *v;
        if (!option_is(argv[i], name + 2, strlen(name + 2), &v))
            argv[out++] = argv[i];
        else if ((v = option_value(argv, &i, end, v)))
            *value = v; /* the last one given wins */
        else
            rc = mt__error(MT_EINVAL, "option %s needs a value", name);
    }
    args_close(argc, argv, end, out);
    return rc;
}

int mt_args_rest(int argc, char *const *argv)
{
    if (argc <= 1)
        return MT_OK;
    if (!argv)
        return mt__error(MT_EINVAL, "mt_args_rest: argv is NULL");
    problems n = {.n = 0};
    int end = args_end(argc, argv);
    for (int i = 1; i < end; i++)
        if (argv[i][0] == '-')
            problem(&n, "unknown option '%s' (see --help)", argv[i]);
        else
            problem(&n, "unexpected argument '%s' (see --help)", argv[i]);
    if (end + 1 < argc) /* a lone trailing "--" is harmless */
        problem(&n, "unexpected argument '%s' after '--' (see --help)", argv[end + 1]);
    return finish(&n);
}
