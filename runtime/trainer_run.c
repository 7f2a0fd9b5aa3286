/*
 * trainer_run.c -- the run directory of a fit (see trainer.h): made or taken over with
 * --overwrite or a resume, refused when it holds another run or a finished one, locked on
 * rank 0, and the attempt's starting point shared; every step ends in an agreement.
 */
#include "trainer.h"
#include "../collectives/watchdog.h"

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------ the run directory */

/* Rank 0: the run directory's state for an attempt, the first or the next after a
 * failure: counted, started from the latest good checkpoint (mt__resume_point), saved, and
 * its logs opened again (result.json may have been rewritten). */
int mt__trainer_begin_attempt(const mt_trainer *t, mt__rundir *run, json_t **info)
{
    mt__rows_stop(run); /* the last attempt's rows are written before anything reads them */
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
int mt__trainer_prepare_run(const mt_trainer *t, mt_context *ctx, mt__rundir *run, json_t **info)
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
        rc = mt__trainer_begin_attempt(t, run, info);
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
int mt__trainer_lock_run(mt_context *ctx, int *lock_fd)
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
int mt__trainer_agreed(mt_context *ctx, int status)
{
    mt__call call;
    mt__call_init(&call, MT__CALL_INTERNAL, 3, 0, 0);
    return mt__agree(ctx->comm, &call, status, NULL);
}

/* Rank 0's JSON to every rank (collective; every rank returns the same code). */
int mt__trainer_share_json(mt_context *ctx, json_t **j)
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
    rc = mt__trainer_agreed(ctx, rc);
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
    return mt__trainer_agreed(ctx, rc);
}

/* Every rank: start the attempt from rank 0's resume point. */
int mt__trainer_apply_resume(mt_context *ctx, json_t *info)
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
