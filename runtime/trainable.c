/*
 * trainable.c -- a training job given as callbacks (setup, step, save, load, cleanup)
 * run by a training function that owns the loop, so that resume, retries and preemption
 * come from fit's own machinery instead of code each user must get right.
 *
 * It is built only from what any training function may call: mt_get_checkpoint at the
 * start of an attempt, mt_should_checkpoint and mt_report once per iteration, and the
 * attempt logic of mt_trainer_fit (retry with the latest checkpoint, resume of a run of
 * the same name, MT_ESTOP after the checkpoint a stop request asked for). Nothing of that
 * is duplicated here.
 *
 * Invariants:
 * - Every rank makes the same collective calls in the same order: one barrier after
 *   setup and load (so a failing load is every rank's error before anyone steps), and per
 *   iteration the step's own collectives, one allreduce that agrees on MT_STEP_DONE, the
 *   save (when mt_should_checkpoint says so, the same answer everywhere) and mt_report.
 *   A rank whose callback fails leaves at once; the others meet its exit agreement at
 *   their next collective and get MT_EPEER naming it.
 * - The iteration counter is the run's training_iteration: it starts at the resumed
 *   checkpoint's "mt.training_iteration" (the same number fit restored from run.json;
 *   a disagreement is a corrupt checkpoint) and moves by one per report.
 */
#include "runtime.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define META_ITERATION "mt.training_iteration"
#define META_DONE "mt.done"

typedef struct {
    mt_trainable tr;
    void *user;
} job;

int64_t mt_training_iteration(const mt_context *c)
{
    return c ? c->iteration : 0;
}

/* Local. A callback's return code as fit expects it: a positive value other than the one
 * allowed (MT_STEP_DONE from step) is a usage error; a failure without a message of its
 * own gets one naming the callback and the iteration; a failure with one keeps it behind
 * that name (an echo of another rank's failure is passed on as it is). */
static int callback_rc(int rc, const char *what, int64_t iteration, int allowed)
{
    if (rc == MT_OK || (allowed && rc == allowed))
        return rc;
    if (rc > 0)
        return mt__error(MT_EINVAL, "trainable: %s returned %d at iteration %" PRId64
                                    " (expected 0%s or a negative MT_E* code)",
                         what, rc, iteration, allowed ? ", MT_STEP_DONE" : "");
    if (rc == MT_EPEER || rc == MT_EMISMATCH || rc == MT_ESTOP)
        return rc;
    char own[MT__MSG_LEN];
    snprintf(own, sizeof own, "%s", mt_last_error());
    if (!own[0])
        return mt__error(rc, "trainable: %s returned %s (%s) at iteration %" PRId64, what,
                         mt_err_name(rc), mt_strerror(rc), iteration);
    return mt__error(rc, "trainable: %s at iteration %" PRId64 ": %s", what, iteration, own);
}

/* Collective (load is). Restore the state, and where the loop goes on from. */
static int resume(mt_context *ctx, const job *j, int64_t *iteration, bool *done)
{
    const mt_checkpoint *ck = mt_get_checkpoint(ctx);
    *iteration = mt_training_iteration(ctx);
    *done = false;
    if (!ck)
        return MT_OK;
    const char *it = mt_checkpoint_get_meta(ck, META_ITERATION);
    const char *where = mt_checkpoint_path(ck) ? mt_checkpoint_path(ck) : "the checkpoint";
    /* run.resume_from_checkpoint's checkpoint starts a new run: its count is another run's */
    bool foreign = ctx->restored_foreign;
    if (it && !foreign) { /* absent in a checkpoint a training function wrote: run.json's count holds */
        char *end = NULL;
        long long n = strtoll(it, &end, 10);
        if (!*it || *end || n != *iteration)
            return mt__error(MT_EFORMAT, "trainable: %s: metadata %s is '%s' but the run "
                                         "resumed at training_iteration %" PRId64,
                             where, META_ITERATION, it, *iteration);
    }
    const char *d = mt_checkpoint_get_meta(ck, META_DONE);
    *done = !foreign && d && !strcmp(d, "1");
    mt__error_clear();
    return callback_rc(j->tr.load(ctx, j->user, ck), "load", *iteration, 0);
}

/* Collective. A checkpoint of the state after iteration `next`, or NULL with *rc set. */
static mt_checkpoint *save(mt_context *ctx, const job *j, int64_t next, bool last, int *rc)
{
    mt_checkpoint *ck = mt_checkpoint_new();
    if (!ck) {
        *rc = mt__error(MT_ENOMEM, "trainable: out of memory for a checkpoint at iteration %"
                                   PRId64, next);
        return NULL;
    }
    mt__error_clear();
    *rc = callback_rc(j->tr.save(ctx, j->user, ck), "save", next, 0);
    char text[32];
    snprintf(text, sizeof text, "%" PRId64, next);
    if (!*rc) /* after save: these two are the trainer's, whatever save put there */
        *rc = mt_checkpoint_set_meta(ck, META_ITERATION, text);
    if (!*rc)
        *rc = mt_checkpoint_set_meta(ck, META_DONE, last ? "1" : "0");
    if (*rc)
        mt_checkpoint_free(&ck);
    return ck;
}

/* Collective. The iterations of one attempt, from `iteration` on. */
static int loop(mt_context *ctx, const job *j, int64_t iteration, bool done)
{
    const int64_t max = j->tr.max_iterations;
    const bool at_end = ctx->cfg->run.checkpoint.at_end;
    mt_metrics *m = mt_metrics_new();
    if (!m)
        return mt__error(MT_ENOMEM, "trainable: out of memory for metrics");
    int rc = MT_OK;
    while (!done && (max == 0 || iteration < max)) {
        int64_t next = iteration + 1;
        mt__metrics_clear(m);
        mt__error_clear();
        int s = callback_rc(j->tr.step(ctx, j->user, m), "step", next, MT_STEP_DONE);
        if (s < 0) {
            rc = s;
            break;
        }
        if (mt_training_iteration(ctx) != iteration) {
            rc = mt__error(MT_EINVAL, "trainable: step called mt_report at iteration %" PRId64
                                      " (the trainer reports what step puts in its metrics)",
                           next);
            break;
        }
        int32_t stop = s == MT_STEP_DONE; /* any rank's MT_STEP_DONE is every rank's */
        rc = mt_allreduce(ctx, &stop, 1, MT_I32, MT_MAX);
        if (rc)
            break;
        done = stop || (max > 0 && next >= max);
        mt_checkpoint *ck = NULL;
        if (mt_should_checkpoint(ctx) || (at_end && done)) {
            ck = save(ctx, j, next, done, &rc);
            if (rc)
                break;
        }
        rc = mt_report(ctx, m, ck);
        mt_checkpoint_free(&ck);
        if (rc)
            break; /* MT_ESTOP too: the checkpoint a stop request asked for is committed */
        iteration = next;
    }
    mt_metrics_free(&m);
    return rc;
}

/* The training function fit runs: one attempt. */
static int run_trainable(mt_context *ctx, void *arg)
{
    const job *j = arg;
    if (j->tr.max_iterations > 0)
        mt_set_total_iterations(ctx, j->tr.max_iterations);
    int64_t iteration = mt_training_iteration(ctx);
    bool done = false;
    int rc = MT_OK;
    if (j->tr.setup) {
        mt__error_clear();
        rc = callback_rc(j->tr.setup(ctx, j->user), "setup", iteration, 0);
    }
    if (!rc)
        rc = resume(ctx, j, &iteration, &done);
    /* every rank set up and loaded, or every rank learns who did not */
    if (!rc)
        rc = mt_barrier(ctx);
    if (!rc)
        rc = loop(ctx, j, iteration, done);
    if (j->tr.cleanup) {
        char keep[MT__MSG_LEN]; /* cleanup may overwrite this thread's message */
        snprintf(keep, sizeof keep, "%s", mt_last_error());
        j->tr.cleanup(ctx, j->user);
        mt__error_set_text(keep);
    }
    return rc;
}

static void free_job(void *arg)
{
    free(arg);
}

int mt_trainer_create_trainable(mt_trainer **out, const mt_trainable *tr, void *user,
                                const mt_trainer_config *cfg)
{
    if (!out)
        return mt__error(MT_EINVAL, "mt_trainer_create_trainable: out is NULL");
    *out = NULL;
    if (!tr)
        return mt__error(MT_EINVAL, "mt_trainer_create_trainable: trainable is NULL");
    int bad = 0;
    mt__error_clear();
#define NEED(cond, ...)                                                       \
    if (!(cond)) {                                                            \
        if (bad++)                                                            \
            mt__error_append(__VA_ARGS__);                                    \
        else                                                                  \
            mt__error(MT_EINVAL, __VA_ARGS__);                                \
    }
    NEED(tr->step, "trainable.step is NULL (required: one iteration)");
    NEED(tr->save, "trainable.save is NULL (required: a trainable must be resumable)");
    NEED(tr->load, "trainable.load is NULL (required: a trainable must be resumable)");
    NEED(tr->max_iterations >= 0, "trainable.max_iterations must be >= 0 (got %" PRId64 ")",
         tr->max_iterations);
#undef NEED
    if (bad)
        return MT_EINVAL;
    job *j = malloc(sizeof *j);
    if (!j)
        return mt__error(MT_ENOMEM, "out of memory allocating a trainable");
    j->tr = *tr;
    j->user = user;
    int rc = mt_trainer_create(out, run_trainable, j, cfg);
    if (rc) {
        free(j);
        return rc;
    }
    mt__trainer_own_arg(*out, free_job);
    return MT_OK;
}
