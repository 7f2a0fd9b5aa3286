/*
 * trainer.c -- mt_trainer_fit: check the config on every rank, build each worker's
 * context, run the training function, and give every rank the same result (its run
 * directory's steps are in trainer_run.c).
 *
 * Every step that can fail on one rank ends in an agreement, so all ranks leave fit
 * together: a bad config or a missing CPU on rank 2 is an error on every rank, and a
 * training function that returns early on one rank is answered by the exit agreement
 * while the others are still in their collectives.
 */
#include "trainer.h"
#include "../collectives/watchdog.h"

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static char **copy_names(const char *const *names)
{
    size_t n = 0;
    while (names[n])
        n++;
    char **out = calloc(n + 1, sizeof *out);
    if (!out)
        return NULL;
    for (size_t i = 0; i < n; i++)
        if (!(out[i] = mt__strdup(names[i]))) {
            for (size_t j = 0; j < i; j++)
                free(out[j]);
            free(out);
            return NULL;
        }
    return out;
}

int mt_trainer_create(mt_trainer **out, mt_train_fn fn, void *arg, const mt_trainer_config *cfg)
{
    int rc = MT_OK;
    if (!out)
        return mt__error(MT_EINVAL, "mt_trainer_create: out is NULL");
    *out = NULL;
    if (!fn)
        return mt__error(MT_EINVAL, "mt_trainer_create: training function is NULL");
    mt_trainer *t = calloc(1, sizeof *t);
    MT__CHECK(t, MT_ENOMEM, fail, "out of memory allocating a trainer");
    t->fn = fn;
    t->arg = arg;
    if (cfg)
        t->cfg = *cfg;
    mt_config_defaults(&t->cfg);
    const mt_trainer_config *c = &t->cfg;
    MT__CHECK(!c->run.name || (t->name = mt__strdup(c->run.name)), MT_ENOMEM, fail, "%s",
              mt_last_error());
    MT__CHECK((t->storage_path = mt__strdup(c->run.storage_path)), MT_ENOMEM, fail, "%s",
              mt_last_error());
    MT__CHECK(!c->run.checkpoint.score_attribute ||
                  (t->score_attribute = mt__strdup(c->run.checkpoint.score_attribute)),
              MT_ENOMEM, fail, "%s", mt_last_error());
    MT__CHECK(!c->run.resume_from_checkpoint ||
                  (t->resume_from = mt__strdup(c->run.resume_from_checkpoint)),
              MT_ENOMEM, fail, "%s", mt_last_error());
    MT__CHECK(!c->data.datasets_to_split || (t->split = copy_names(c->data.datasets_to_split)),
              MT_ENOMEM, fail, "out of memory copying data.datasets_to_split");
    t->cfg.run.name = t->name;
    t->cfg.run.storage_path = t->storage_path;
    t->cfg.run.checkpoint.score_attribute = t->score_attribute;
    t->cfg.run.resume_from_checkpoint = t->resume_from;
    t->cfg.data.datasets_to_split = (const char *const *)t->split;
    *out = t;
    return MT_OK;
fail:
    mt_trainer_destroy(&t);
    return rc;
}

void mt_trainer_destroy(mt_trainer **tp)
{
    if (!tp || !*tp)
        return;
    mt_trainer *t = *tp;
    if (t->fitting) { /* the running fit still uses it: refusing beats a use after free */
        mt__error(MT_EINVAL, "mt_trainer_destroy: the trainer's fit is running (called from "
                             "the training function?); destroy it after fit returns");
        fprintf(stderr, "mpitrain: %s\n", mt_last_error());
        return;
    }
    if (t->free_arg)
        t->free_arg(t->arg);
    free(t->name);
    free(t->storage_path);
    free(t->score_attribute);
    free(t->resume_from);
    if (t->split)
        for (size_t i = 0; t->split[i]; i++)
            free(t->split[i]);
    free(t->split);
    for (int i = 0; i < t->nspecs; i++) {
        free(t->specs[i].name);
        free(t->specs[i].file);
        free(t->specs[i].group);
    }
    free(t->specs);
    free(t);
    *tp = NULL;
}

int mt_trainer_add_dataset(mt_trainer *t, const char *name, const char *h5_file,
                           const char *h5_group)
{
    if (!t || !name || !*name || !h5_file || !*h5_file || !h5_group || !*h5_group)
        return mt__error(MT_EINVAL, "mt_trainer_add_dataset: trainer, name, file and group "
                                    "must be given");
    if (t->fitting)
        return mt__error(MT_EINVAL, "mt_trainer_add_dataset: the trainer's fit is running; "
                                    "add datasets before mt_trainer_fit");
    for (int i = 0; i < t->nspecs; i++)
        if (!strcmp(t->specs[i].name, name))
            return mt__error(MT_EINVAL, "mt_trainer_add_dataset: dataset '%s' is already "
                                        "registered (%s:%s)", name, t->specs[i].file,
                             t->specs[i].group);
    if (MT__GROW(t->specs, t->specs_cap, (size_t)t->nspecs + 1))
        return mt__error(MT_ENOMEM, "out of memory registering dataset %s", name);
    mt__dataset_spec *d = &t->specs[t->nspecs];
    d->name = mt__strdup(name);
    d->file = mt__strdup(h5_file);
    d->group = mt__strdup(h5_group);
    if (!d->name || !d->file || !d->group) {
        free(d->name);
        free(d->file);
        free(d->group);
        return mt__error(MT_ENOMEM, "out of memory registering dataset %s", name);
    }
    t->nspecs++;
    return MT_OK;
}

/* How this build's MPI family's launcher gives each rank N CPUs (%d: N). */
#ifdef OPEN_MPI
#define LAUNCH_CPUS "Open MPI as `mpirun --map-by slot:PE=%d --bind-to core ...`"
#else
#define LAUNCH_CPUS "MPICH as `mpiexec -bind-to core:%d ...`"
#endif

/* Local checks before training: config, worker count, CPUs. */
static int check_setup(const mt_trainer *t, const mt_context *ctx)
{
    int rc = mt_config_validate(&t->cfg);
    if (!rc)
        rc = mt__env_validate();
    if (rc)
        return rc;
    int want = t->cfg.scaling.num_workers;
    if (want != 0 && want != ctx->world_size)
        return mt__error(MT_EINVAL,
                         "scaling.num_workers is %d but this job has %d ranks: start it with "
                         "mpirun -np %d (or leave num_workers at 0 to use the job's ranks)",
                         want, ctx->world_size, want);
    int need = t->cfg.scaling.cpus_per_worker;
    if (need > 0) {
        char list[256];
        int have = mt__affinity_cpus(list, sizeof list);
        if (have < need)
            return mt__error(MT_EINVAL,
                             "scaling.cpus_per_worker is %d but rank %d may use %d CPU%s "
                             "(affinity mask: %s); launch with " LAUNCH_CPUS " (Slurm: "
                             "srun --cpus-per-task=%d)",
                             need, ctx->world_rank, have, have == 1 ? "" : "s", list, need, need);
    }
    return MT_OK;
}

/* What every rank must run with alike: the command line's options (but verbose, trace and
 * the name, rank 0's), the data config and the environment knobs no later step agrees on
 * (not the datasets' files: ranks may read copies at paths of their own, node-local ones).
 * Field i's name and this rank's whole value as text (NULL: not agreed), and its
 * signature in *hash. FIELD_TEXT holds the longest value, a storage path. */
enum { FIELD_TEXT = MT__DIR_MAX + 64, FIELDS_EXTRA = 3 };

/* s mixed into h by the signatures' own mixer, 8 bytes at a time, then its length (so
 * that "ab","c" differs from "a","bc"). */
static uint64_t text_sig(uint64_t h, const char *s)
{
    size_t n = s ? strlen(s) : 0;
    for (size_t i = 0; i < n; i += 8) {
        uint64_t w = 0;
        memcpy(&w, s + i, n - i < 8 ? n - i : 8);
        h = mt__sig_mix(h, w);
    }
    return mt__sig_mix(h, n);
}

static const char *config_field(const mt_trainer *t, size_t i, char *buf, size_t len,
                                uint64_t *hash)
{
    size_t k = mt__config_nfields();
    const char *name = NULL;
    uint64_t h = 0;
    buf[0] = '\0';
    if (i < k) {
        name = mt__config_field(&t->cfg, i, buf, len);
        h = text_sig(h, buf);
    } else if (i == k) {
        name = "data.memory_limit";
        snprintf(buf, len, "%zu", t->cfg.data.memory_limit);
        h = text_sig(h, buf);
    } else if (i == k + 1) {
        name = "data.datasets_to_split";
        const char *const *d = t->cfg.data.datasets_to_split;
        size_t n = 0;
        for (size_t j = 0; d && d[j]; j++) {
            h = text_sig(h, d[j]);
            if (n < len)
                n += (size_t)snprintf(buf + n, len - n, "%s%s", j ? ", " : "", d[j]);
        }
        if (!d)
            snprintf(buf, len, "all");
        h = text_sig(h, d ? "" : "all");
    } else if (i == k + 2) {
        name = "the environment's MT_IO_COLLECTIVE";
        const char *v = getenv("MT_IO_COLLECTIVE");
        snprintf(buf, len, "%s", v ? v : "unset");
        h = text_sig(h, buf);
    }
    *hash = name ? h : 0;
    return name;
}

/* Every rank: its configuration is rank 0's, else MT_EINVAL on every rank naming the first
 * field that differs on the lowest rank where one does, with both values (a difference
 * found later, mid-run, would be a mismatch of calls that no longer says why, or a hang). */
static int agree_config(const mt_trainer *t, mt_context *ctx)
{
    size_t n = mt__config_nfields() + FIELDS_EXTRA;
    uint64_t *mine = calloc(2 * n, sizeof *mine), *root = mine ? mine + n : NULL;
    char text[FIELD_TEXT];
    for (size_t i = 0; mine && i < n; i++)
        config_field(t, i, text, sizeof text, &mine[i]);
    int rc = mt__trainer_agreed(ctx, mine ? MT_OK : mt__error(MT_ENOMEM, "out of memory "
                                                                         "agreeing the configuration"));
    if (!rc) {
        memcpy(root, mine, n * sizeof *root);
        rc = mt__broadcast(ctx->comm, root, n, MT_I64, 0);
    }
    int64_t first = INT64_MAX; /* rank * n + field of this rank's first difference */
    for (size_t i = 0; !rc && i < n && first == INT64_MAX; i++)
        if (mine[i] != root[i])
            first = (int64_t)ctx->world_rank * (int64_t)n + (int64_t)i;
    free(mine);
    if (!rc)
        rc = mt__allreduce(ctx->comm, &first, 1, MT_I64, MT_MIN);
    if (rc || first == INT64_MAX)
        return rc;
    int who = (int)(first / (int64_t)n);
    size_t f = (size_t)(first % (int64_t)n);
    char at0[FIELD_TEXT], atw[FIELD_TEXT];
    uint64_t h;
    const char *name = config_field(t, f, at0, sizeof at0, &h);
    memcpy(atw, at0, sizeof atw);
    if ((rc = mt__broadcast(ctx->comm, at0, sizeof at0, MT_U8, 0)) ||
        (rc = mt__broadcast(ctx->comm, atw, sizeof atw, MT_U8, who)))
        return rc;
    at0[sizeof at0 - 1] = atw[sizeof atw - 1] = '\0';
    bool option = f < mt__config_nfields();
    return mt__error(MT_EINVAL, "the ranks' configurations differ: %s%s is %.300s on rank 0 "
                     "and %.300s on rank %d (every rank must run with the same options and "
                     "environment)", option ? "--" : "", name ? name : "?", at0, atw, who);
}

/* Rank 0's name (given or timestamped) for every rank. */
static int agree_name(const mt_trainer *t, mt_context *ctx)
{
    char name[MT__NAME_MAX + 1] = {0};
    if (ctx->world_rank == 0) {
        if (t->name)
            snprintf(name, sizeof name, "%s", t->name);
        else {
            time_t now = time(NULL);
            struct tm tm;
            localtime_r(&now, &tm);
            strftime(name, sizeof name, "mt_%Y-%m-%d_%H-%M-%S", &tm);
            /* a run of the same second in the same storage (fits in a loop): the first
             * free of name_2, name_3, ... (Ray makes its names unique too) */
            char stamp[sizeof name], dir[4096];
            memcpy(stamp, name, sizeof stamp);
            struct stat sb;
            for (int i = 2; i < 10000; i++) {
                snprintf(dir, sizeof dir, "%s/%s", t->storage_path, name);
                if (lstat(dir, &sb) != 0 && errno == ENOENT)
                    break;
                snprintf(name, sizeof name, "%s_%d", stamp, i);
            }
        }
    }
    int rc = mt__broadcast(ctx->comm, name, sizeof name, MT_U8, 0);
    if (rc)
        return rc;
    name[MT__NAME_MAX] = '\0';
    size_t len = strlen(t->storage_path) + strlen(name) + 2;
    ctx->name = mt__strdup(name);
    ctx->run_dir = malloc(len);
    if (!ctx->name || !ctx->run_dir) { /* neither half set: the result uses run_dir */
        free(ctx->name), free(ctx->run_dir);
        ctx->name = ctx->run_dir = NULL;
        return mt__error(MT_ENOMEM, "out of memory naming the run");
    }
    snprintf(ctx->run_dir, len, "%s/%s", t->storage_path, name);
    return MT_OK;
}

const mt_checkpoint *mt_get_checkpoint(mt_context *c)
{
    return mt__ctx_ok(c, "mt_get_checkpoint") ? c->restored : NULL;
}

/* Rank 0: the run's final state; error.txt on failure. */
static void finish_run(mt_context *ctx, const char *status, const char *error)
{
    mt__rundir *run = ctx->run;
    snprintf(run->status, sizeof run->status, "%s", status);
    run->time_total = ctx->time_before + mt__now() - ctx->start;
    /* error.txt describes this attempt's end, or is gone: an earlier attempt's error in a
     * finished run would say it failed */
    char path[4096];
    snprintf(path, sizeof path, "%s/error.txt", run->dir);
    int e = MT_OK;
    if (error)
        e = mt__write_atomic(run->dir, "error.txt", error);
    else if (unlink(path) != 0 && errno != ENOENT)
        e = mt__error(MT_EIO, "cannot remove %s: %s", path, strerror(errno));
    if (e)
        fprintf(stderr, "mpitrain: %s\n", mt_last_error());
    if (mt__run_save(run) != MT_OK)
        fprintf(stderr, "mpitrain: %s\n", mt_last_error());
}

/* Rank 0: descriptions of the kept checkpoints (name -> text) in *out, so that every
 * rank's result knows their arrays and metadata; one that cannot be opened is left out
 * (known by path, as without its files). MT_ENOMEM when memory ran out. */
static int describe_kept(const mt__rundir *run, json_t **out)
{
    char saved[MT__MSG_LEN]; /* the fit's error stays this thread's last one */
    snprintf(saved, sizeof saved, "%s", mt_last_error());
    json_t *d = json_object();
    int rc = d ? MT_OK : MT_ENOMEM;
    for (int i = 0; !rc && i < run->nkept; i++) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/%s", run->dir, run->kept[i].name);
        mt_checkpoint *ck = NULL;
        rc = mt__checkpoint_open_stored(dir, &ck);
        if (rc) {
            rc = rc == MT_ENOMEM ? rc : MT_OK;
            continue;
        }
        char *text = mt__checkpoint_describe(ck);
        mt_checkpoint_free(&ck);
        if (!text || json_object_set_new(d, run->kept[i].name, json_string(text)))
            rc = MT_ENOMEM;
        free(text);
    }
    if (rc) {
        json_decref(d);
        return mt__error(MT_ENOMEM, "out of memory describing the checkpoints of %s", run->dir);
    }
    mt__error_set_text(saved);
    *out = d;
    return MT_OK;
}

static int build_result(mt_context *ctx, const mt_trainer *t, const char *error, mt_result **out)
{
    json_t *all = NULL;
    int rc = MT_OK;
    if (ctx->world_rank == 0) {
        json_t *last = ctx->last_metrics ? mt__metrics_to_json(ctx->last_metrics) : json_null();
        json_t *rows = mt__run_read_rows(ctx->run_dir, &rc), *described = NULL;
        if (!rc && mt__test_fail("result-rows", 0))
            rc = mt__error(MT_EIO, "%s/result.json: cannot read (test failure)", ctx->run_dir);
        if (!rc)
            rc = describe_kept(ctx->run, &described);
        all = json_pack("{s:o, s:o, s:o*, s:o*, s:o}", "run", mt__run_to_json(ctx->run), "last",
                        last, "rows", rows, "described", described, "params",
                        mt__params_json(&t->cfg, ctx->world_size));
    }
    rc = mt__trainer_agreed(ctx, rc); /* result.json unreadable on rank 0: every rank's error */
    if (!rc)
        rc = mt__trainer_share_json(ctx, &all);
    if (!rc) {
        json_t *last = json_object_get(all, "last");
        rc = mt__test_fail("result-build", ctx->world_rank)
                 ? mt__error(MT_ENOMEM, "out of memory building a result (test failure)")
                 : mt__result_build(ctx->run_dir, json_object_get(all, "run"),
                                    json_is_object(last) ? last : NULL,
                                    json_object_get(all, "rows"),
                                    json_object_get(all, "described"),
                                    json_object_get(all, "params"), error,
                                    ctx->world_rank == 0, out);
        rc = mt__trainer_agreed(ctx, rc);
        if (rc)
            mt_result_free(out);
    }
    json_decref(all);
    return rc;
}

static bool may_retry(const mt_trainer *t, int failures)
{
    int max = t->cfg.run.failure.max_failures;
    return max == -1 || failures < max;
}

static int fit(mt_trainer *t, mt_result **out);

int mt_trainer_fit(mt_trainer *t, mt_result **out)
{
    int rc, init = 0;
    if (out)
        *out = NULL;
    if (!t)
        return mt__error(MT_EINVAL, "mt_trainer_fit: trainer is NULL");
    if (mt__fit_running())
        return mt__error(MT_EINVAL, "mt_trainer_fit: a fit is running already (called from "
                                    "inside the training function?); fits run one at a time");
    MPI_Initialized(&init);
    if (!init)
        return mt__error(MT_EINVAL, "mt_trainer_fit: MPI is not initialised; call mt_init first");
    int fin = 0;
    MPI_Finalized(&fin);
    if (fin)
        return mt__error(MT_EINVAL, "mt_trainer_fit: MPI was finalised (mt_finalize); fit "
                                    "must come before it");
    mt__fit_enter();
    t->fitting = true;
    rc = fit(t, out);
    t->fitting = false;
    mt__fit_leave();
    return rc;
}

/* One fit's state on this rank, from set-up to finish. */
typedef struct {
    mt_context *ctx;
    mt__rundir run;     /* rank 0: the run directory */
    int lock_fd;        /* rank 0: run.lock, held until fit returns */
    mt__watchdog *dog;
    mt__winner who;     /* the failing rank of the last failed agreement */
    bool started;       /* set-up succeeded: the attempts ran */
} fit_state;

/* Collective: rank 0 readies the run directory for an attempt (the first: prepare_run;
 * the next after a failure: begin_attempt, the same steps but the folder's creation),
 * then every rank learns where the attempt starts. When rank 0's preparation fails,
 * f->who names it and every rank returns its code; otherwise f->who stays as it was. */
static int start_attempt(const mt_trainer *t, fit_state *f, bool first)
{
    mt_context *ctx = f->ctx;
    json_t *info = NULL;
    int local = MT_OK;
    if (ctx->world_rank == 0)
        local = first ? mt__trainer_prepare_run(t, ctx, &f->run, &info) : mt__trainer_begin_attempt(t, &f->run, &info);
    mt__winner who;
    mt__call prep;
    mt__call_init(&prep, MT__CALL_INTERNAL, 1, 0, 0);
    int rc = mt__agree(ctx->comm, &prep, local, &who);
    if (rc && who.rank >= 0) {
        f->who = who;
        rc = who.code; /* the same code on every rank: the failing rank's */
    }
    if (!rc)
        rc = mt__trainer_share_json(ctx, &info);
    if (!rc)
        rc = mt__trainer_agreed(ctx, mt__trainer_apply_resume(ctx, info));
    json_decref(info);
    return rc;
}

/* Set-up, every rank: the workers and their context, the config and the run's name agreed,
 * the run directory locked and prepared, the watchdog, the timeline and the signal
 * handlers started. f->ctx is NULL when there is no context to agree on (return at once). */
static int fit_setup(const mt_trainer *t, fit_state *f)
{
    int rc = mt__spawn(t->cfg.scaling.num_workers, t->cfg.run.failure.stall_timeout_s);
    if (rc)
        return rc; /* the spawn failed: this process is alone */
    mt__test_die("die-fit-begin", mt_job_rank());
    rc = mt__context_create(&f->ctx, mt__world());
    if (rc)
        return rc; /* an MPI failure in MPI_Comm_dup: nothing to agree on */
    mt_context *ctx = f->ctx;
    ctx->verbose = t->cfg.run.verbose;
    ctx->data = t->cfg.data;
    ctx->specs = t->specs;
    ctx->nspecs = t->nspecs;
    ctx->cfg = &t->cfg;
    mt__call begin;
    mt__call_init(&begin, MT__CALL_FIT_BEGIN, 0, 0, 0);
    rc = mt__agree(ctx->comm, &begin, check_setup(t, ctx), &f->who);
    if (!rc)
        rc = agree_config(t, ctx);
    if (!rc)
        rc = mt__trainer_agreed(ctx, agree_name(t, ctx)); /* its allocations may fail on one rank */
    if (!rc)
        rc = mt__trainer_lock_run(ctx, &f->lock_fd);
    if (!rc) {
        ctx->run = ctx->world_rank == 0 ? &f->run : NULL;
        rc = start_attempt(t, f, true);
    }
    if (!rc) {
        const mt_failure_config *fc = &t->cfg.run.failure;
        rc = mt__watchdog_start(&f->dog, ctx->comm, fc->stall_warn_s, fc->stall_timeout_s);
        if (!rc && !f->dog && ctx->world_rank == 0 && t->cfg.run.verbose >= 1)
            fprintf(stderr, "mpitrain: MPI was initialised without MPI_THREAD_MULTIPLE; "
                            "stalls will not be detected (call mt_init before MPI_Init, or "
                            "MPI_Init_thread with MPI_THREAD_MULTIPLE)\n");
    }
    f->started = !rc;
    if (f->started) {
        /* a link where this rank's trace goes fails the run on every rank (recorded as
         * failed: the attempt was begun) */
        rc = mt__trainer_agreed(ctx, mt__trace_start(t->cfg.run.trace, ctx->run_dir, ctx->world_rank));
        mt__signals_install();
    }
    return rc;
}

/* One attempt, every rank: the training function, its end agreed; the same code on every
 * rank (the failing rank's, named in f->who). */
static int run_attempt(const mt_trainer *t, fit_state *f)
{
    mt_context *ctx = f->ctx;
    ctx->start = ctx->last_report = mt__now();
    ctx->stop = ctx->stopped_after_ckpt = false;
    mt__context_set_current(ctx);
    mt__export_env(ctx); /* RANK, OMP_NUM_THREADS, ... for code that reads them */
    mt__error_clear();
    int fn_rc = t->fn(ctx, t->arg);
    mt__context_set_current(NULL);
    if (fn_rc > 0)
        fn_rc = mt__error(MT_EINVAL, "the training function returned %d (expected 0 or a "
                                     "negative MT_E* code)", fn_rc);
    else if (fn_rc < 0 && !mt_last_error()[0])
        mt__error(fn_rc, "the training function returned %s (%s)", mt_err_name(fn_rc),
                  mt_strerror(fn_rc));
    /* an asynchronous checkpoint commit in flight ends with the attempt; its failure is
     * the attempt's when the function succeeded */
    int commit_rc = mt__checkpoint_settle(ctx, true);
    if (!fn_rc)
        fn_rc = commit_rc;
    /* so does the row writer's queue (rank 0): a row not written is the attempt's error */
    char kept[MT__MSG_LEN];
    snprintf(kept, sizeof kept, "%s", mt_last_error());
    int rows_rc = mt__rows_settle(ctx, true);
    if (!fn_rc)
        fn_rc = rows_rc;
    else if (rows_rc) /* the function's error leads, the rows' follows */
        mt__error_after(kept);
    int rc = mt__agree_exit(ctx->comm, MT__CALL_FIT_END, fn_rc, &f->who);
    if (rc && f->who.rank >= 0)
        rc = f->who.code; /* the same code on every rank: the winning rank's */
    return rc;
}

/* Finish, every rank: stop what set-up started, record the run's end (rank 0), build the
 * result, and free the fit's state; returns the fit's code. */
static int fit_finish(const mt_trainer *t, fit_state *f, int rc, const char *final,
                      mt_result **out)
{
    mt_context *ctx = f->ctx;
    mt__signals_restore();
    mt__watchdog_stop(&f->dog);
    mt__test_die("die-fit-end", ctx->world_rank);
    int32_t traced = mt__trace_path() != NULL; /* this rank wrote a timeline */
    mt__trace_stop();
    if (f->started) { /* the job's timeline in one file, once every rank closed its own */
        char kept[MT__MSG_LEN];
        snprintf(kept, sizeof kept, "%s", mt_last_error()); /* the fit's, not this step's */
        if (mt__allreduce(ctx->comm, &traced, 1, MT_I32, MT_MAX) == MT_OK && traced &&
            ctx->world_rank == 0 && ctx->run_dir)
            mt__trace_merge(ctx->run_dir, ctx->world_size);
        mt__error_set_text(kept);
    }
    char error[MT__MSG_LEN + 64] = "";
    if (rc && rc != MT_ESTOP) {
        if (f->who.rank >= 0)
            snprintf(error, sizeof error, "rank %d failed: %s", f->who.rank, f->who.msg);
        else
            snprintf(error, sizeof error, "%s", f->who.msg[0] ? f->who.msg : mt_last_error());
    }
    if (f->started && ctx->world_rank == 0) {
        finish_run(ctx, final, error[0] ? error : NULL);
        if (t->cfg.run.verbose >= 1)
            printf("mpitrain: %s %s after %lld iterations (%d attempt%s)\n", ctx->run_dir, final,
                   (long long)ctx->iteration, f->run.attempts, f->run.attempts == 1 ? "" : "s");
    }
    if (out) {
        /* after a set-up failure: a result with the error and nothing else */
        int e = f->started ? build_result(ctx, t, error[0] ? error : NULL, out)
                           : mt__result_build(ctx->run_dir ? ctx->run_dir : "", NULL, NULL,
                                              NULL, NULL, NULL, error, false, out);
        if (e && !rc)
            rc = e;
    }
    if (rc && !f->started && f->who.rank >= 0)
        rc = f->who.code; /* the same code on every rank: the winning rank's */
    mt__run_free(&f->run);
    mt__run_unlock(&f->lock_fd);
    mt_metrics_free(&ctx->last_metrics);
    mt_checkpoint_free(&ctx->restored);
    mt__shards_close(ctx); /* what data and checkpoints hung on the context */
    mt__checkpoint_release(ctx);
    mt__context_destroy(&f->ctx);
    return rc;
}

static int fit(mt_trainer *t, mt_result **out)
{
    fit_state f = {.run = {.latest = -1}, .lock_fd = -1, .who = {.rank = -1}};
    int rc = fit_setup(t, &f);
    if (!f.ctx)
        return rc;
    mt_context *ctx = f.ctx;
    const char *final = "failed";
    bool set_up = f.started && !rc; /* started, but its trace refused: no attempt runs */
    for (int failures = 0; set_up;) {
        rc = run_attempt(t, &f);
        if (!rc && !ctx->stopped_after_ckpt) {
            final = "finished";
            break;
        }
        if (rc == MT_ESTOP && !ctx->stopped_after_ckpt) {
            /* a function returned MT_ESTOP with no agreed stop behind it (the Python
             * layer's SystemExit or KeyboardInterrupt on some rank): the user ended the
             * run there, so no retry, and no preemption, which every rank would answer
             * with "requeue me" (75): the others' peer's failure, that rank's its own */
            rc = f.who.rank == ctx->world_rank ? MT_EINVAL : MT_EPEER;
            if (ctx->world_rank == 0)
                f.run.failures++;
            break;
        }
        if (rc == MT_ESTOP || (!rc && ctx->stopped_after_ckpt)) {
            final = "preempted";
            rc = MT_ESTOP;
            break;
        }
        /* a failure a retry would only repeat (bad input found in mt_report on some rank:
         * a reserved key, a score attribute never reported) ends the fit on every rank */
        int64_t repeat = ctx->no_retry || !may_retry(t, failures); /* agreed: no rank
                                                retries alone */
        mt__call once;
        mt__call_init(&once, MT__CALL_INTERNAL, 4, 0, 0);
        int e = mt__agree_max(ctx->comm, &once, MT_OK, NULL, &repeat, 1);
        if (ctx->world_rank == 0)
            f.run.failures++; /* run.json counts every failed attempt, the last too */
        if (e || repeat || !may_retry(t, failures)) {
            if (e && !rc)
                rc = e;
            if (repeat && ctx->world_rank == 0 && t->cfg.run.verbose >= 1 && may_retry(t, failures))
                fprintf(stderr, "mpitrain: attempt %d failed on bad input that a retry would "
                                "repeat: not retried\n", ctx->attempt);
            break;
        }
        failures++;
        if (ctx->world_rank == 0) {
            if (t->cfg.run.verbose >= 1)
                fprintf(stderr, "mpitrain: attempt %d failed: rank %d: %s; retrying from the "
                        "latest checkpoint (failure %d of %d allowed)\n", ctx->attempt,
                        f.who.rank, f.who.msg, failures, t->cfg.run.failure.max_failures);
            f.run.time_total = ctx->time_before + mt__now() - ctx->start;
        }
        e = start_attempt(t, &f, false);
        if (e) {
            rc = e;
            break;
        }
    }
    return fit_finish(t, &f, rc, final, out);
}

void mt__trainer_own_arg(mt_trainer *t, void (*free_arg)(void *))
{
    t->free_arg = free_arg;
}
