/*
 * test_mpi_trainable.c -- under mpirun at 1 to 4 ranks: trainables (setup, step, save,
 * load, cleanup run by the trainer) and the environment fit sets for the training
 * function.
 *
 * Trainables: the loop and its checkpoints, a step error on one rank retried from the
 * latest checkpoint through load, a save error on one rank, MT_STEP_DONE on one rank
 * ending the run on every rank, a load failing on one rank as one agreed error before
 * anyone steps, preemption and the rerun that continues without losing or repeating an
 * iteration, and bad callbacks.
 * Environment: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK, GROUP_RANK and
 * the thread-count variables inside the training function (checked against the
 * launcher's own OMPI_COMM_WORLD_* where it set them), and a user's OMP_NUM_THREADS kept.
 */
#include "harness.h"

#include "../runtime/runtime.h"

#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int R(void) { return mt_test_rank(); }
static int P(void) { return mt_test_size(); }
/* the rank that fails in "only one rank fails" cases: not rank 0 when there are others */
static int victim(void) { return P() > 1 ? P() - 1 : 0; }

/* result.json's training_iteration column and the model's own "state" column, rank 0;
 * returns the number of rows that break "row i has iteration i + 1 and state i + 1". */
static int bad_rows(const char *name, int *nrows)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s/result.json", mt_test_storage(), name);
    FILE *f = fopen(p, "r");
    char *line = NULL;
    size_t cap = 0;
    int n = 0, bad = 0;
    while (f && getline(&line, &cap, f) > 0) {
        json_t *row = json_loads(line, 0, NULL);
        n++;
        bad += json_integer_value(json_object_get(row, "training_iteration")) != n ||
               json_integer_value(json_object_get(row, "state")) != n;
        json_decref(row);
    }
    free(line);
    if (f)
        fclose(f);
    *nrows = n;
    return bad;
}

/* Rank 0: result.json of run NAME has rows 1..n, the model's state following each. */
static void expect_rows(const char *name, int n)
{
    if (R() != 0)
        return;
    int got = 0;
    MT_ASSERT_INT_EQ(bad_rows(name, &got), 0);
    MT_ASSERT_INT_EQ(got, n);
}

/* ------------------------------------------------------------ a test trainable */

typedef struct {
    /* behaviour */
    int fail_at, fail_code;   /* step fails in this iteration on victim(), attempt 0 */
    int done_at;              /* victim()'s step returns MT_STEP_DONE in this iteration */
    int raise_at;             /* victim() raises SIGUSR1 in this iteration */
    bool load_fails;          /* victim()'s load fails */
    int save_fails_at;        /* victim()'s save fails in this iteration, attempt 0 */
    int setup_returns;        /* setup's return value (0 normally) */
    /* what the trainer did */
    int setups, steps, saves, loads, cleanups;
    int64_t state;            /* iterations trained: saved, loaded, reported */
    int64_t loaded;           /* the state load restored; -1 none */
    int out_of_order;         /* steps whose state did not follow the run's iteration */
    char env_rank[32];        /* RANK as setup saw it */
} tt;

static int tt_setup(mt_context *ctx, void *user)
{
    tt *t = user;
    t->setups++;
    t->state = 0;
    const char *r = getenv("RANK");
    snprintf(t->env_rank, sizeof t->env_rank, "%s", r ? r : "(unset)");
    (void)ctx;
    return t->setup_returns;
}

static int tt_step(mt_context *ctx, void *user, mt_metrics *out)
{
    tt *t = user;
    t->steps++;
    t->out_of_order += mt_training_iteration(ctx) != t->state;
    t->state++;
    int64_t sum = t->state; /* a collective, as real steps have */
    int rc = mt_allreduce(ctx, &sum, 1, MT_I64, MT_SUM);
    if (rc)
        return rc;
    if (sum != t->state * P())
        return mt__error(MT_EINVAL, "ranks disagree on the state (%lld)", (long long)sum);
    bool me = R() == victim();
    if (me && t->state == t->fail_at && mt_attempt(ctx) == 0)
        return t->fail_code < 0 ? mt__error(t->fail_code, "injected failure") : t->fail_code;
    if (me && t->state == t->raise_at)
        raise(SIGUSR1); /* the scheduler's warning, on one rank */
    mt_metrics_set_i64(out, "state", t->state);
    return me && t->state == t->done_at ? MT_STEP_DONE : MT_OK;
}

static int tt_save(mt_context *ctx, void *user, mt_checkpoint *ck)
{
    tt *t = user;
    t->saves++;
    if (R() == victim() && t->state == t->save_fails_at && mt_attempt(ctx) == 0)
        return mt__error(MT_EIO, "cannot write the state");
    mt_checkpoint_set_meta(ck, "mt.training_iteration", "garbage"); /* the trainer's key */
    return mt_checkpoint_put(ck, "state", MT_I64, 1, (size_t[]){1}, &t->state, MT_REPLICATED);
}

static int tt_load(mt_context *ctx, void *user, const mt_checkpoint *ck)
{
    (void)ctx;
    tt *t = user;
    t->loads++;
    int rc = mt_checkpoint_get(ck, "state", MT_I64, &t->state, 1);
    t->loaded = rc ? -1 : t->state;
    if (!rc && t->load_fails && R() == victim()) /* after the collective read: a check */
        return MT_EFORMAT;
    return rc;
}

static void tt_cleanup(mt_context *ctx, void *user)
{
    (void)ctx;
    ((tt *)user)->cleanups++;
}

static int fit_tt(mt_trainer_config cfg, int64_t max, tt *t, mt_result **out)
{
    mt_trainable tr = {.setup = tt_setup, .step = tt_step, .save = tt_save, .load = tt_load,
                       .cleanup = tt_cleanup, .max_iterations = max};
    t->loaded = -1;
    mt_trainer *trainer = NULL;
    CU_ASSERT_EQUAL_FATAL(mt_trainer_create_trainable(&trainer, &tr, t, &cfg), MT_OK);
    return mt_test_fit_trainer(&trainer, out);
}

/* What a fit did: loaded the checkpoint of iteration `loaded` last, stepped `steps` times in
 * all, cleaned up `cleanups` times (once an attempt), and every step came in order. */
static void expect_fit(const tt *t, int loaded, int steps, int cleanups)
{
    MT_ASSERT_INT_EQ(t->loaded, loaded);
    MT_ASSERT_INT_EQ(t->steps, steps);
    MT_ASSERT_INT_EQ(t->cleanups, cleanups);
    MT_ASSERT_INT_EQ(t->out_of_order, 0);
}

/* A rerun of cfg's stopped run: it completes in one attempt, resuming at iteration `loaded`
 * and stepping `steps` more times. */
static void expect_resumed(mt_trainer_config cfg, int64_t max, int loaded, int steps)
{
    tt t = {0};
    MT_ASSERT_INT_EQ(fit_tt(cfg, max, &t, NULL), MT_OK);
    expect_fit(&t, loaded, steps, 1);
}

/* ------------------------------------------------------------ the loop */

static void test_loop_and_checkpoints(void)
{
    mt_trainer_config cfg = mt_test_config("loop");
    cfg.run.checkpoint.frequency = 2;
    cfg.run.checkpoint.at_end = true;
    tt t = {0};
    mt_result *res = NULL;
    MT_ASSERT_INT_EQ(fit_tt(cfg, 5, &t, &res), MT_OK);
    MT_ASSERT_INT_EQ(t.setups, 1);
    MT_ASSERT_INT_EQ(t.steps, 5);
    MT_ASSERT_INT_EQ(t.saves, 3); /* iterations 2 and 4 (frequency), 5 (at_end) */
    MT_ASSERT_INT_EQ(t.loads, 0);
    MT_ASSERT_INT_EQ(t.cleanups, 1);
    MT_ASSERT_INT_EQ(t.out_of_order, 0);
    const mt_checkpoint *ck = mt_result_checkpoint(res);
    MT_ASSERT_STR_CONTAINS(mt_checkpoint_path(ck), "checkpoint_000002");
    if (R() == 0) { /* the result opens checkpoint files on rank 0 only */
        /* the trainer's metadata, whatever save put under its key */
        MT_ASSERT_STR_EQ(mt_checkpoint_get_meta(ck, "mt.training_iteration"), "5");
        MT_ASSERT_STR_EQ(mt_checkpoint_get_meta(ck, "mt.done"), "1");
        const mt_checkpoint *first = mt_result_best(res, 2, NULL); /* newest first */
        MT_ASSERT_STR_EQ(mt_checkpoint_get_meta(first, "mt.training_iteration"), "2");
        MT_ASSERT_STR_EQ(mt_checkpoint_get_meta(first, "mt.done"), "0");
    }
    mt_result_free(&res);
    expect_rows("loop", 5);
    /* setup and cleanup are optional */
    mt_trainable bare = {.step = tt_step, .save = tt_save, .load = tt_load, .max_iterations = 2};
    tt u = {0};
    mt_trainer *trainer = NULL;
    cfg = mt_test_config("bare");
    MT_ASSERT_INT_EQ(mt_trainer_create_trainable(&trainer, &bare, &u, &cfg), MT_OK);
    MT_ASSERT_INT_EQ(mt_trainer_fit(trainer, NULL), MT_OK);
    mt_trainer_destroy(&trainer);
    MT_ASSERT_INT_EQ(u.steps, 2);
    MT_ASSERT_INT_EQ(u.saves, 0); /* frequency 0 and no at_end: none */
}

/* ------------------------------------------------------------ failures */

static void test_step_error_retries_with_load(void)
{
    mt_trainer_config cfg = mt_test_config("retry");
    cfg.run.checkpoint.frequency = 1;
    cfg.run.failure.max_failures = 1;
    tt t = {.fail_at = 4, .fail_code = MT_EIO};
    mt_result *res = NULL;
    MT_ASSERT_INT_EQ(fit_tt(cfg, 6, &t, &res), MT_OK);
    CU_ASSERT_PTR_NULL(mt_result_error(res));
    MT_ASSERT_INT_EQ(mt_result_attempts(res), 2);
    mt_result_free(&res);
    MT_ASSERT_INT_EQ(t.setups, 2);
    MT_ASSERT_INT_EQ(t.loads, 1);
    expect_fit(&t, 3, 4 + 3, 2); /* retried from the checkpoint of iteration 3 */
    MT_ASSERT_INT_EQ(t.state, 6);
    expect_rows("retry", 6);
    /* no retries left: the step's error, naming the callback and iteration, on every rank */
    cfg = mt_test_config("no-retry");
    cfg.run.checkpoint.frequency = 1;
    tt u = {.fail_at = 2, .fail_code = MT_EIO};
    MT_ASSERT_INT_EQ(fit_tt(cfg, 6, &u, &res), MT_EIO);
    char want[128];
    snprintf(want, sizeof want, "rank %d failed: trainable: step at iteration 2: injected "
             "failure", victim());
    MT_ASSERT_STR_CONTAINS(mt_result_error(res), want);
    MT_ASSERT_INT_EQ(u.cleanups, 1);
    mt_result_free(&res);
}

static void test_save_error_on_one_rank(void)
{
    mt_trainer_config cfg = mt_test_config("badsave");
    cfg.run.checkpoint.frequency = 2;
    cfg.run.failure.max_failures = 1;
    tt t = {.save_fails_at = 4};
    mt_result *res = NULL;
    MT_ASSERT_INT_EQ(fit_tt(cfg, 6, &t, &res), MT_OK); /* retried from iteration 2 */
    MT_ASSERT_INT_EQ(mt_result_attempts(res), 2);
    mt_result_free(&res);
    expect_fit(&t, 2, 4 + 4, 2);
    expect_rows("badsave", 6);
    /* without a retry: the error names the callback, the iteration and the rank */
    cfg = mt_test_config("badsave-once");
    cfg.run.checkpoint.frequency = 2;
    tt u = {.save_fails_at = 2};
    MT_ASSERT_INT_EQ(fit_tt(cfg, 6, &u, &res), MT_EIO);
    char want[128];
    snprintf(want, sizeof want, "rank %d failed: trainable: save at iteration 2: cannot write "
             "the state", victim());
    MT_ASSERT_STR_CONTAINS(mt_result_error(res), want);
    mt_result_free(&res);
}

static void test_done_early_on_one_rank(void)
{
    mt_trainer_config cfg = mt_test_config("done");
    cfg.run.checkpoint.at_end = true;
    tt t = {.done_at = 3};
    MT_ASSERT_INT_EQ(fit_tt(cfg, 0, &t, NULL), MT_OK); /* no iteration limit */
    MT_ASSERT_INT_EQ(t.steps, 3); /* on every rank, not only the one that said so */
    MT_ASSERT_INT_EQ(t.saves, 1); /* at_end: the last iteration is the done one */
    MT_ASSERT_INT_EQ(t.cleanups, 1);
    expect_rows("done", 3);
}

static void test_load_failure_is_agreed(void)
{
    mt_trainer_config cfg = mt_test_config("badload");
    cfg.run.checkpoint.frequency = 1;
    tt t = {.fail_at = 3, .fail_code = MT_EIO};
    MT_ASSERT_INT_EQ(fit_tt(cfg, 5, &t, NULL), MT_EIO); /* leaves checkpoints 1 and 2 */
    /* the rerun resumes; load fails on one rank, in both attempts */
    cfg.run.failure.max_failures = 1;
    tt u = {.load_fails = true};
    mt_result *res = NULL;
    MT_ASSERT_INT_EQ(fit_tt(cfg, 5, &u, &res), MT_EFORMAT); /* the same code everywhere */
    char want[160];
    snprintf(want, sizeof want, "rank %d failed: trainable: load returned MT_EFORMAT (bad "
             "file format) at iteration 2", victim());
    MT_ASSERT_STR_CONTAINS(mt_result_error(res), want);
    mt_result_free(&res);
    MT_ASSERT_INT_EQ(u.steps, 0); /* no rank stepped on */
    MT_ASSERT_INT_EQ(u.setups, 2);
    MT_ASSERT_INT_EQ(u.loads, 2);
    MT_ASSERT_INT_EQ(u.cleanups, 2);
    /* and once load works, the run goes on from iteration 2 */
    expect_resumed(cfg, 5, 2, 3);
    expect_rows("badload", 5);
}

static void test_preemption_loses_no_iteration(void)
{
    mt_trainer_config cfg = mt_test_config("preempt");
    tt t = {.raise_at = 3};
    /* frequency 0: the only checkpoint is the one the stop request asks for */
    MT_ASSERT_INT_EQ(fit_tt(cfg, 8, &t, NULL), MT_ESTOP);
    MT_ASSERT_INT_EQ(t.steps, 4); /* seen at report 3, checkpointed at report 4 */
    MT_ASSERT_INT_EQ(t.saves, 1);
    MT_ASSERT_INT_EQ(t.cleanups, 1);
    expect_resumed(cfg, 8, 4, 4);
    expect_rows("preempt", 8);
    /* preempted in its last iteration: the rerun finds nothing left and finishes */
    cfg = mt_test_config("preempt-last");
    tt v = {.raise_at = 3};
    MT_ASSERT_INT_EQ(fit_tt(cfg, 4, &v, NULL), MT_ESTOP);
    expect_resumed(cfg, 4, 4, 0);
    /* ... and so does one that stopped early with MT_STEP_DONE (the checkpoint says so) */
    cfg = mt_test_config("preempt-done");
    tt x = {.raise_at = 2, .done_at = 3};
    MT_ASSERT_INT_EQ(fit_tt(cfg, 0, &x, NULL), MT_ESTOP);
    MT_ASSERT_INT_EQ(x.steps, 3);
    expect_resumed(cfg, 0, 3, 0);
    expect_rows("preempt-done", 3);
}

/* ------------------------------------------------------------ bad callbacks */

static int report_inside_step(mt_context *ctx, void *user, mt_metrics *out)
{
    (void)user;
    return mt_report(ctx, out, NULL);
}

static void test_bad_callbacks(void)
{
    mt_trainer *t = (mt_trainer *)&t; /* must come back NULL */
    mt_trainable ok = {.step = tt_step, .save = tt_save, .load = tt_load};
    MT_ASSERT_INT_EQ(mt_trainer_create_trainable(NULL, &ok, NULL, NULL), MT_EINVAL);
    MT_ASSERT_INT_EQ(mt_trainer_create_trainable(&t, NULL, NULL, NULL), MT_EINVAL);
    CU_ASSERT_PTR_NULL(t);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "trainable is NULL");
    mt_trainable none = {.max_iterations = -3};
    MT_ASSERT_INT_EQ(mt_trainer_create_trainable(&t, &none, NULL, NULL), MT_EINVAL);
    CU_ASSERT_PTR_NULL(t);
    /* every problem at once, each by its field */
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "trainable.step is NULL");
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "trainable.save is NULL");
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "trainable.load is NULL");
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "trainable.max_iterations must be >= 0 (got -3)");
    mt_trainable no_load = {.step = tt_step, .save = tt_save};
    MT_ASSERT_INT_EQ(mt_trainer_create_trainable(&t, &no_load, NULL, NULL), MT_EINVAL);
    MT_ASSERT_STR_EQ(mt_last_error(), "trainable.load is NULL (required: a trainable must be "
                                      "resumable)");
    /* a setup returning a positive value: a usage error, cleanup still runs */
    tt u = {.setup_returns = 3};
    mt_result *res = NULL;
    MT_ASSERT_INT_EQ(fit_tt(mt_test_config("positive"), 2, &u, &res), MT_EINVAL);
    MT_ASSERT_STR_CONTAINS(mt_result_error(res), "trainable: setup returned 3 at iteration 0");
    MT_ASSERT_INT_EQ(u.steps, 0);
    MT_ASSERT_INT_EQ(u.cleanups, 1);
    mt_result_free(&res);
    /* a setup failing on one rank only: agreed before anyone steps */
    tt v = {.setup_returns = R() == victim() ? MT_ENOMEM : 0};
    MT_ASSERT_INT_EQ(fit_tt(mt_test_config("setup-fails"), 2, &v, &res), MT_ENOMEM);
    MT_ASSERT_INT_EQ(v.steps, 0);
    MT_ASSERT_INT_EQ(v.cleanups, 1);
    mt_result_free(&res);
    /* a step that reports by itself would count iterations twice */
    mt_trainable twice = {.step = report_inside_step, .save = tt_save, .load = tt_load,
                          .max_iterations = 3};
    mt_trainer_config cfg = mt_test_config("twice");
    MT_ASSERT_INT_EQ(mt_trainer_create_trainable(&t, &twice, &u, &cfg), MT_OK);
    MT_ASSERT_INT_EQ(mt_trainer_fit(t, &res), MT_EINVAL);
    MT_ASSERT_STR_CONTAINS(mt_result_error(res), "trainable: step called mt_report at iteration 1");
    mt_result_free(&res);
    mt_trainer_destroy(&t);
}

/* ------------------------------------------------------------ environment */

static char launch_omp[64]; /* OMP_NUM_THREADS as the launcher gave it, "" when unset */

typedef struct {
    char rank[16], world[16], local[16], local_world[16], node[16], group[16];
    char omp[16], openblas[16], mkl[16];
} env_seen;

static void copy_env(char *dst, const char *name)
{
    const char *v = getenv(name);
    snprintf(dst, 16, "%s", v ? v : "(unset)");
}

static int read_env(mt_context *ctx, void *arg)
{
    (void)ctx;
    env_seen *e = arg;
    copy_env(e->rank, "RANK");
    copy_env(e->world, "WORLD_SIZE");
    copy_env(e->local, "LOCAL_RANK");
    copy_env(e->local_world, "LOCAL_WORLD_SIZE");
    copy_env(e->node, "NODE_RANK");
    copy_env(e->group, "GROUP_RANK");
    copy_env(e->omp, "OMP_NUM_THREADS");
    copy_env(e->openblas, "OPENBLAS_NUM_THREADS");
    copy_env(e->mkl, "MKL_NUM_THREADS");
    return MT_OK;
}

static int context_numbers(mt_context *ctx, void *arg)
{
    int *v = arg;
    v[0] = mt_world_rank(ctx), v[1] = mt_world_size(ctx), v[2] = mt_local_rank(ctx);
    v[3] = mt_local_world_size(ctx), v[4] = mt_node_rank(ctx), v[5] = mt_num_cpus(ctx);
    return MT_OK;
}

static void expect_num(const char *got, int want)
{
    char w[16];
    snprintf(w, sizeof w, "%d", want);
    MT_ASSERT_STR_EQ(got, w);
}

static void test_environment(void)
{
    int v[6] = {0};
    mt_trainer *t = NULL;
    mt_trainer_config cfg = mt_test_config("env");
    cfg.run.overwrite = true;
    MT_ASSERT_INT_EQ(mt_trainer_create(&t, context_numbers, v, &cfg), MT_OK);
    MT_ASSERT_INT_EQ(mt_trainer_fit(t, NULL), MT_OK);
    mt_trainer_destroy(&t);
    MT_ASSERT_INT_EQ(v[0], R());
    MT_ASSERT_INT_EQ(v[1], P());
    /* what the launcher itself says, where it says it (Open MPI) */
    const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK"), *ls = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    if (lr && ls) {
        MT_ASSERT_INT_EQ(v[2], atoi(lr));
        MT_ASSERT_INT_EQ(v[3], atoi(ls));
    }
    /* a stale RANK is replaced; the thread counts follow mt_num_cpus when unset */
    setenv("RANK", "99", 1);
    setenv("WORLD_SIZE", "99", 1);
    unsetenv("OPENBLAS_NUM_THREADS");
    unsetenv("MKL_NUM_THREADS");
    if (launch_omp[0]) { /* the launcher's OMP_NUM_THREADS is the user's: kept */
        env_seen e;
        MT_ASSERT_INT_EQ(mt_trainer_create(&t, read_env, &e, &cfg), MT_OK);
        MT_ASSERT_INT_EQ(mt_trainer_fit(t, NULL), MT_OK);
        mt_trainer_destroy(&t);
        MT_ASSERT_STR_EQ(e.omp, launch_omp);
        expect_num(e.rank, R());
        expect_num(e.openblas, v[5]);
    }
    unsetenv("OMP_NUM_THREADS");
    env_seen e;
    MT_ASSERT_INT_EQ(mt_trainer_create(&t, read_env, &e, &cfg), MT_OK);
    MT_ASSERT_INT_EQ(mt_trainer_fit(t, NULL), MT_OK);
    mt_trainer_destroy(&t);
    expect_num(e.rank, R());
    expect_num(e.world, P());
    expect_num(e.local, v[2]);
    expect_num(e.local_world, v[3]);
    expect_num(e.node, v[4]);
    expect_num(e.group, v[4]);
    expect_num(e.omp, v[5]);
    expect_num(e.openblas, v[5]);
    expect_num(e.mkl, v[5]);
    /* a value the user set is left alone, also after fit had set it (and an empty one) */
    setenv("OMP_NUM_THREADS", "7", 1);
    setenv("MKL_NUM_THREADS", "", 1);
    MT_ASSERT_INT_EQ(mt_trainer_create(&t, read_env, &e, &cfg), MT_OK);
    MT_ASSERT_INT_EQ(mt_trainer_fit(t, NULL), MT_OK);
    mt_trainer_destroy(&t);
    MT_ASSERT_STR_EQ(e.omp, "7");
    MT_ASSERT_STR_EQ(e.mkl, "");
    expect_num(e.openblas, v[5]);
    /* set before a trainable's setup runs too */
    setenv("RANK", "99", 1);
    tt u = {0};
    MT_ASSERT_INT_EQ(fit_tt(mt_test_config("env-trainable"), 1, &u, NULL), MT_OK);
    expect_num(u.env_rank, R());
}

static const mt_test tests[] = {
    {"loop_and_checkpoints", test_loop_and_checkpoints},
    {"step_error_retries_with_load", test_step_error_retries_with_load},
    {"save_error_on_one_rank", test_save_error_on_one_rank},
    {"done_early_on_one_rank", test_done_early_on_one_rank},
    {"load_failure_is_agreed", test_load_failure_is_agreed},
    {"preemption_loses_no_iteration", test_preemption_loses_no_iteration},
    {"bad_callbacks", test_bad_callbacks},
    {"environment", test_environment},
    {NULL, NULL},
};

int main(int argc, char **argv)
{
    const char *omp = getenv("OMP_NUM_THREADS"); /* before any fit sets it */
    snprintf(launch_omp, sizeof launch_omp, "%s", omp ? omp : "");
    return mt_test_main(argc, argv, "mpi_trainable", tests, true);
}
