/*
 * trainer.c -- mt_trainer_fit: check the config on every rank, build each worker's
 * context, run the training function, and give every rank the same result.
 *
 * Every step that can fail on one rank ends in an agreement, so all ranks leave fit
 * together: a bad config or a missing CPU on rank 2 is an error on every rank, and a
 * training function that returns early on one rank is answered by the exit agreement
 * while the others are still in their collectives.
 */
#include "runtime.h"
#include "../collectives/watchdog.h"

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct mt_trainer {
    mt_train_fn fn;
    void *arg;
    void (*free_arg)(void *); /* an arg the trainer owns (mt_trainer_create_trainable) */
    mt_trainer_config cfg; /* strings below are owned copies */
    char *name, *storage_path, *score_attribute, *resume_from;
    char **split;
    mt__dataset_spec *specs;
    int nspecs;
    size_t specs_cap;
    bool fitting;          /* inside mt_trainer_fit: the trainer must not change or go */
};

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

/* ------------------------------------------------------------ the run directory */

/* Rank 0: the run directory's state for an attempt, the first or the next after a
 * failure: counted, started from the latest good checkpoint (mt__resume_point), saved, and
 * its logs opened again (result.json may have been rewritten). */
static int begin_attempt(const mt_trainer *t, mt__rundir *run, json_t **info)
{
    snprintf(run->status, sizeof run->status, "running");
    run->attempts++;
    if (mt__test_fail("attempt-prepare", 0))
        return mt__error(MT_EIO, "%s: cannot ready attempt %d (test failure)", run->dir,
                         run->attempts - 1);
    int rc = mt__resume_point(run, &t->cfg.run, info);
    if (!rc)
        rc = mt__run_save(run);
    mt__run_close_logs(run);
    if (!rc)
        rc = mt__run_open_logs(run);
    return rc;
}

/* Rank 0: create or resume <storage_path>/<name>, and begin its first attempt. */
static int prepare_run(const mt_trainer *t, mt_context *ctx, mt__rundir *run, json_t **info)
{
    int rc = mt__mkdirs(ctx->run_dir);
    if (rc)
        return mt__error(MT_EIO, "run.storage_path: %s", mt_last_error());
    char path[4096];
    snprintf(path, sizeof path, "%s/run.json", ctx->run_dir);
    bool exists = access(path, F_OK) == 0;
    if (exists) {
        rc = mt__run_load(run, ctx->run_dir);
        if (rc)
            return rc;
        if (!strcmp(run->status, "finished")) { /* lock_run refused it without overwrite */
            mt__run_free(run);
            if ((rc = mt__run_clear(ctx->run_dir))) /* run.lock stays: this job holds it */
                return rc;
            exists = false;
        }
    }
    const char *from = t->cfg.run.resume_from_checkpoint;
    if (!exists && from) { /* refused before the new run leaves anything behind */
        char dir[4096];
        mt_checkpoint *stored = NULL;
        rc = mt__resume_open(from, dir, sizeof dir, &stored);
        mt_checkpoint_free(&stored);
        if (rc) {
            snprintf(path, sizeof path, "%s/run.lock", ctx->run_dir);
            unlink(path); /* this job holds it; the folder goes if nothing else is in it */
            rmdir(ctx->run_dir);
            return rc;
        }
    }
    if (!exists) {
        memset(run, 0, sizeof *run);
        run->latest = -1;
        if (!(run->dir = mt__strdup(ctx->run_dir)))
            return MT_ENOMEM;
        mt__run_new_id(run);
    } else if (!strcmp(run->status, "running")) /* the last attempt died without a word */
        run->failures++;
    if (!run->run_id[0]) /* a run from before identities: its next checkpoints get one */
        mt__run_new_id(run);
    mt__run_remove_leftovers(run); /* this job owns the folder now (run.lock) */
    json_t *params = mt__params_json(&t->cfg, ctx->world_size);
    if (json_object_set_new(json_object_get(params, "run"), "name", json_string(ctx->name))) {
        json_decref(params); /* no params.json without its name: MT_ENOMEM below */
        params = NULL;
    }
    char *text = mt__json_dumps(params, JSON_INDENT(2));
    json_decref(params);
    rc = text ? mt__write_atomic(ctx->run_dir, "params.json", text) : MT_ENOMEM;
    free(text);
    if (!rc)
        rc = begin_attempt(t, run, info);
    if (!rc && exists && t->cfg.run.verbose >= 1)
        printf("mpitrain: resuming %s (attempt %d) from %s\n", ctx->run_dir, run->attempts - 1,
               run->latest >= 0 ? run->kept[run->latest].name : "the start (no checkpoint)");
    return rc;
}

/* Rank 0: run.json in dir says the run finished (1) or not (0: read errors are
 * prepare_run's); MT_ENOMEM (recorded) when reading it ran out of memory, MT_EIO
 * (recorded) when something else than a file is in its place (a link). */
static int finished(const char *dir)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/run.json", dir);
    int there = mt__run_check(path); /* a link in its place: named on every rank */
    if (there != MT_OK)
        return there == MT_ENOTFOUND ? 0 : there;
    json_error_t err;
    mt__json_watch();
    json_t *run = json_load_file(path, 0, &err);
    const char *status = json_string_value(json_object_get(run, "status"));
    int done = status && !strcmp(status, "finished");
    if (mt__json_oom(run ? NULL : &err)) /* even a parse that succeeded may lack a key */
        done = mt__error(MT_ENOMEM, "out of memory reading %s", path);
    json_decref(run);
    return done;
}

/* Rank 0: the first entry of dir that is not run.lock (a run, or anything else), in
 * name (size n); false when there is none or dir does not exist. */
static bool holds_something(const char *dir, char *name, size_t n)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    bool found = false;
    while (d && !found && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strcmp(e->d_name, "run.lock")) {
            snprintf(name, n, "%s", e->d_name);
            found = true;
        }
    if (d)
        closedir(d);
    return found;
}

/* Rank 0: run.refuse_existing's refusal (MT_EINVAL recorded) when dir holds something. */
static int refuse_existing(const mt_context *ctx)
{
    char what[256];
    if (!ctx->cfg->run.refuse_existing || !holds_something(ctx->run_dir, what, sizeof what))
        return MT_OK;
    return mt__error(MT_EINVAL, "run '%s' exists already (%s holds %s): this program never "
                     "changes an existing run, which stays as it was; give another --name "
                     "(or MT_NAME)", ctx->name, ctx->run_dir, what);
}

/* Whether path (resolved, links followed) is dir or inside it. */
static bool inside_dir(const char *path, const char *dir)
{
    char *p = path ? realpath(path, NULL) : NULL, *d = realpath(dir, NULL);
    size_t n = d ? strlen(d) : 0;
    bool in = p && d && !strncmp(p, d, n) && (p[n] == '/' || !p[n]);
    free(p), free(d);
    return in;
}

/* Rank 0: run.overwrite never deletes what the same job still needs: a
 * run.resume_from_checkpoint or a dataset file inside the run directory it would clear is
 * MT_EINVAL (recorded), before anything is deleted. */
static int overwrite_keeps_inputs(const mt_context *ctx)
{
    const mt_run_config *run = &ctx->cfg->run;
    if (!run->overwrite)
        return MT_OK;
    if (inside_dir(run->resume_from_checkpoint, ctx->run_dir))
        return mt__error(MT_EINVAL, "run.resume_from_checkpoint %s is inside %s, the run that "
                         "run.overwrite (--overwrite) would clear: the checkpoint would be "
                         "deleted before the run starts from it; copy it out of the run "
                         "first, or give another --name", run->resume_from_checkpoint,
                         ctx->run_dir);
    for (int i = 0; i < ctx->nspecs; i++)
        if (inside_dir(ctx->specs[i].file, ctx->run_dir))
            return mt__error(MT_EINVAL, "dataset %s's file %s is inside %s, the run that "
                             "run.overwrite (--overwrite) would clear: it would be deleted "
                             "before the run reads it; move it out of the run first, or give "
                             "another --name", ctx->specs[i].name, ctx->specs[i].file,
                             ctx->run_dir);
    return MT_OK;
}

/* Rank 0 takes the run directory's lock (creating the folder first), and refuses a
 * finished run unless run.overwrite, any run that exists with run.refuse_existing, and
 * run.overwrite with a checkpoint to start from or a dataset inside the run; a refusal is every
 * rank's own error with rank 0's text: the job is refused, no rank failed. Nothing is
 * created in a refused folder that was not there. When the folder cannot be created,
 * prepare_run says so. Collective. */
static int lock_run(mt_context *ctx, int *lock_fd)
{
    struct {
        int32_t code;
        char msg[MT__MSG_LEN];
    } r = {0, ""};
    int done = 0;
    if (ctx->world_rank == 0 && ((r.code = refuse_existing(ctx)) != MT_OK ||
                                 (r.code = overwrite_keeps_inputs(ctx)) != MT_OK))
        snprintf(r.msg, sizeof r.msg, "%s", mt_last_error());
    else if (ctx->world_rank == 0 && mt__mkdirs(ctx->run_dir) == MT_OK &&
             ((r.code = mt__run_lock(ctx->run_dir, lock_fd)) != MT_OK ||
              (r.code = refuse_existing(ctx)) != MT_OK)) { /* again, now that it is ours */
        snprintf(r.msg, sizeof r.msg, "%s", mt_last_error());
        mt__run_unlock(lock_fd);
    } else if (ctx->world_rank == 0 && !ctx->cfg->run.overwrite &&
             (done = finished(ctx->run_dir)) != 0) {
        if (done < 0) { /* out of memory, a link: rank 0's error, on every rank */
            r.code = done;
            snprintf(r.msg, sizeof r.msg, "%s", mt_last_error());
        } else { /* not a failure of rank 0: every rank says what to do instead */
            r.code = MT_EINVAL;
            snprintf(r.msg, sizeof r.msg, "%s: run '%s' finished already; to start a new run "
                     "give another --name (run.name), or to replace this one --overwrite "
                     "(run.overwrite)", ctx->run_dir, ctx->name);
        }
        mt__run_unlock(lock_fd);
    }
    mt__error_clear();
    int rc = mt__broadcast(ctx->comm, &r, sizeof r, MT_U8, 0);
    if (rc)
        return rc;
    r.msg[sizeof r.msg - 1] = '\0';
    return r.code ? mt__error(r.code, "%s", r.msg) : MT_OK;
}

/* Collective: every rank's local status, agreed (a local failure between two collective
 * steps must not leave a rank to return alone). */
static int agreed(mt_context *ctx, int status)
{
    mt__call call;
    mt__call_init(&call, MT__CALL_INTERNAL, 3, 0, 0);
    return mt__agree(ctx->comm, &call, status, NULL);
}

/* Rank 0's JSON to every rank (collective; every rank returns the same code). */
static int share_json(mt_context *ctx, json_t **j)
{
    char *text = NULL;
    int rc = MT_OK;
    if (ctx->world_rank == 0 && !(text = mt__json_dumps(*j, JSON_COMPACT)))
        rc = mt__error(MT_ENOMEM, "out of memory sharing the run state");
    int64_t len = text ? (int64_t)strlen(text) + 1 : 0;
    mt__call call;
    mt__call_init(&call, MT__CALL_INTERNAL, 2, 0, 0);
    rc = mt__agree_max(ctx->comm, &call, rc, NULL, &len, 1);
    if (rc) {
        free(text);
        return rc;
    }
    if (ctx->world_rank != 0 && (mt__test_fail("share-json-alloc", ctx->world_rank) ||
                                 !(text = calloc((size_t)len + 1, 1))))
        rc = mt__error(MT_ENOMEM, "out of memory receiving the run state");
    rc = agreed(ctx, rc);
    if (!rc)
        rc = mt__bcast_bytes(ctx->comm, text, (size_t)len, 0);
    if (!rc && ctx->world_rank != 0) {
        mt__json_watch();
        *j = json_loads(text, 0, NULL);
        if (!*j || mt__json_oom(NULL)) {
            json_decref(*j);
            *j = NULL;
            rc = mt__error(MT_ENOMEM, "out of memory reading the run state");
        }
    }
    free(text);
    return agreed(ctx, rc);
}

/* Every rank: start the attempt from rank 0's resume point. */
static int apply_resume(mt_context *ctx, json_t *info)
{
    json_int_t iteration = 0;
    int attempt = 0, foreign = 0;
    double total = 0;
    json_t *ck = NULL;
    mt__json_watch();
    if (!info || json_unpack(info, "{s:i, s:I, s:F, s:o, s:b}", "attempt", &attempt, "iteration",
                             &iteration, "time_total", &total, "checkpoint", &ck, "foreign",
                             &foreign) ||
        mt__json_oom(NULL))
        return mt__json_oom(NULL) ? mt__error(MT_ENOMEM, "out of memory reading the resume point")
                                  : mt__error(MT_EFORMAT, "corrupt resume information");
    ctx->attempt = attempt;
    ctx->iteration = iteration;
    ctx->reports = 0; /* iterations_since_restore counts from the attempt's first report */
    ctx->time_before = total;
    ctx->restored_foreign = foreign;
    mt_checkpoint_free(&ctx->restored);
    if (json_is_string(ck)) {
        int rc = mt__checkpoint_from_description(json_string_value(ck), &ctx->restored);
        if (rc)
            return rc;
        mt__checkpoint_restoring(ctx->restored, ctx);
    }
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
    rc = agreed(ctx, rc); /* result.json unreadable on rank 0: every rank's error */
    if (!rc)
        rc = share_json(ctx, &all);
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
        rc = agreed(ctx, rc);
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
        local = first ? prepare_run(t, ctx, &f->run, &info) : begin_attempt(t, &f->run, &info);
    mt__winner who;
    mt__call prep;
    mt__call_init(&prep, MT__CALL_INTERNAL, 1, 0, 0);
    int rc = mt__agree(ctx->comm, &prep, local, &who);
    if (rc && who.rank >= 0) {
        f->who = who;
        rc = who.code; /* the same code on every rank: the failing rank's */
    }
    if (!rc)
        rc = share_json(ctx, &info);
    if (!rc)
        rc = agreed(ctx, apply_resume(ctx, info));
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
        rc = agreed(ctx, agree_name(t, ctx)); /* its allocations may fail on one rank */
    if (!rc)
        rc = lock_run(ctx, &f->lock_fd);
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
        rc = agreed(ctx, mt__trace_start(t->cfg.run.trace, ctx->run_dir, ctx->world_rank));
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
        if (rc == MT_ESTOP || (!rc && ctx->stopped_after_ckpt)) {
            final = "preempted";
            rc = MT_ESTOP;
            break;
        }
        /* a failure a retry would only repeat (bad input found in mt_report on some rank:
         * a reserved key, a score attribute never reported) ends the fit on every rank */
        int64_t repeat = ctx->no_retry;
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
