/*
 * test_mpi_core.c -- under mpirun at 1 to 4 ranks: contexts, the agreement step, fit's
 * set-up checks, failures and early returns inside training functions, and the typed
 * collectives.
 */
#include "harness.h"

#include "../runtime/runtime.h"
#include "../collectives/watchdog.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

/* The rank that fails in "only one rank fails" tests: 1, or 0 when alone. */
static int victim(void) { return mt_test_size() > 1 ? 1 : 0; }

static mt_trainer_config base_config(void)
{
    mt_trainer_config cfg = {.run = {.storage_path = mt_test_storage(), .overwrite = true,
                                     .verbose = MT_VERBOSE_SILENT}};
    return cfg;
}

/* Run fn under fit; returns fit's code and the result's error (copied) in err. */
static int fit_with(mt_train_fn fn, void *arg, mt_trainer_config cfg, char *err, size_t len)
{
    mt_trainer *t = NULL;
    mt_result *r = NULL;
    int rc = mt_trainer_create(&t, fn, arg, &cfg);
    CU_ASSERT_EQUAL_FATAL(rc, MT_OK);
    rc = mt_trainer_fit(t, &r);
    if (err)
        snprintf(err, len, "%s", mt_result_error(r) ? mt_result_error(r) : "");
    CU_ASSERT_PTR_NOT_NULL(r);
    if (r && rc == MT_OK)
        CU_ASSERT_PTR_NULL(mt_result_error(r));
    mt_result_free(&r);
    mt_trainer_destroy(&t);
    return rc;
}

/* Every rank holds the same string. */
static void assert_same_everywhere(const char *s)
{
    char mine[512] = {0}, root[512] = {0};
    snprintf(mine, sizeof mine, "%s", s ? s : "");
    memcpy(root, mine, sizeof root);
    MPI_Bcast(root, sizeof root, MPI_CHAR, 0, MPI_COMM_WORLD);
    MT_ASSERT_STR_EQ(mine, root);
}

/* ------------------------------------------------------------ context */

typedef struct {
    mt_context *seen;
    bool current_ok;
    char name[256];
} ctx_probe;

static int probe_context(mt_context *c, void *arg)
{
    ctx_probe *p = arg;
    p->seen = c;
    p->current_ok = mt_get_context() == c;
    snprintf(p->name, sizeof p->name, "%s", mt_experiment_name(c));
    int r, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    MT_ASSERT_INT_EQ(mt_world_rank(c), r);
    MT_ASSERT_INT_EQ(mt_world_size(c), n);
    /* the real host layout: one machine, or the nodes of tests/cluster.sh */
    mt_test_layout l = mt_test_host_layout();
    MT_ASSERT_INT_EQ(mt_local_rank(c), l.local_rank);
    MT_ASSERT_INT_EQ(mt_local_world_size(c), l.local_size);
    MT_ASSERT_INT_EQ(mt_node_rank(c), l.node_rank);
    CU_ASSERT(mt_num_cpus(c) >= 1);
    MT_ASSERT_INT_EQ(mt_attempt(c), 0);
    int cmp;
    MPI_Comm_compare(mt_comm(c), MPI_COMM_WORLD, &cmp);
    MT_ASSERT_INT_EQ(cmp, MPI_CONGRUENT);
    MPI_Errhandler eh;
    MPI_Comm_get_errhandler(mt_comm(c), &eh);
    CU_ASSERT(eh == MPI_ERRORS_RETURN);
    MPI_Errhandler_free(&eh);
    MT_ASSERT_STR_CONTAINS(mt_run_dir(c), mt_test_storage());
    MT_ASSERT_STR_CONTAINS(mt_run_dir(c), mt_experiment_name(c));
    return MT_OK;
}

static void test_context_in_fit(void)
{
    ctx_probe p = {0};
    CU_ASSERT_PTR_NULL(mt_get_context());
    MT_ASSERT_INT_EQ(fit_with(probe_context, &p, base_config(), NULL, 0), MT_OK);
    CU_ASSERT_PTR_NOT_NULL(p.seen);
    CU_ASSERT_TRUE(p.current_ok);
    CU_ASSERT_PTR_NULL(mt_get_context());
    /* the default name is timestamped and the same on every rank */
    MT_ASSERT_STR_CONTAINS(p.name, "mt_");
    assert_same_everywhere(p.name);
}

static void test_name_is_rank0s(void)
{
    ctx_probe p = {0};
    mt_trainer_config cfg = base_config();
    char name[32];
    snprintf(name, sizeof name, "name-of-rank-%d", mt_test_rank());
    cfg.run.name = name;
    mt_trainer *t = NULL;
    mt_result *r = NULL;
    MT_ASSERT_INT_EQ(mt_trainer_create(&t, probe_context, &p, &cfg), MT_OK);
    strcpy(name, "changed"); /* the trainer holds its own copy */
    MT_ASSERT_INT_EQ(mt_trainer_fit(t, &r), MT_OK);
    MT_ASSERT_STR_EQ(p.name, "name-of-rank-0");
    MT_ASSERT_STR_CONTAINS(mt_result_path(r), "/name-of-rank-0");
    MT_ASSERT_INT_EQ(mt_result_attempts(r), 1);
    mt_result_free(&r);
    mt_trainer_destroy(&t);
}

/* ------------------------------------------------------------ fit set-up */

static int must_not_run(mt_context *c, void *arg)
{
    CU_FAIL("the training function ran despite a set-up error");
    return MT_OK;
}

static void test_bad_config_on_one_rank(void)
{
    mt_trainer_config cfg = base_config();
    if (mt_test_rank() == victim())
        cfg.run.checkpoint.num_to_keep = -2;
    char err[2048];
    int rc = fit_with(must_not_run, NULL, cfg, err, sizeof err);
    MT_ASSERT_INT_EQ(rc, MT_EINVAL);
    char want[128];
    snprintf(want, sizeof want, "rank %d failed: run.checkpoint.num_to_keep must be >= 0 (got -2)",
             victim());
    MT_ASSERT_STR_CONTAINS(err, want);
    assert_same_everywhere(err);
}

static void test_num_workers_mismatch(void)
{
    mt_trainer_config cfg = base_config();
    cfg.scaling.num_workers = mt_test_size() + 1;
    char err[2048], want[160];
    MT_ASSERT_INT_EQ(fit_with(must_not_run, NULL, cfg, err, sizeof err), MT_EINVAL);
    snprintf(want, sizeof want, "scaling.num_workers is %d but this job has %d ranks",
             mt_test_size() + 1, mt_test_size());
    MT_ASSERT_STR_CONTAINS(err, want);
    cfg.scaling.num_workers = mt_test_size(); /* the right number is fine */
    MT_ASSERT_INT_EQ(fit_with(probe_context, &(ctx_probe){0}, cfg, NULL, 0), MT_OK);
}

static void test_cpus_per_worker(void)
{
    mt_trainer_config cfg = base_config();
    cfg.scaling.cpus_per_worker = 100000;
    char err[2048];
    MT_ASSERT_INT_EQ(fit_with(must_not_run, NULL, cfg, err, sizeof err), MT_EINVAL);
    MT_ASSERT_STR_CONTAINS(err, "scaling.cpus_per_worker is 100000 but rank 0 may use");
#ifdef OPEN_MPI
    MT_ASSERT_STR_CONTAINS(err, "--map-by slot:PE=100000 --bind-to core");
#else
    MT_ASSERT_STR_CONTAINS(err, "mpiexec -bind-to core:100000");
#endif
    cfg.scaling.cpus_per_worker = 1;
    MT_ASSERT_INT_EQ(fit_with(probe_context, &(ctx_probe){0}, cfg, NULL, 0), MT_OK);
}

/* ------------------------------------------------------------ agreement */

static mt__comm *test_comm(void)
{
    mt__comm *c = NULL;
    CU_ASSERT_EQUAL_FATAL(mt__comm_create(&c, MPI_COMM_WORLD), MT_OK);
    return c;
}

static void test_agree_all_ok(void)
{
    mt__comm *c = test_comm();
    mt__call call;
    mt__call_init(&call, MT__CALL_TEST, 7, 0, 0);
    mt__winner who;
    MT_ASSERT_INT_EQ(mt__agree(c, &call, MT_OK, &who), MT_OK);
    MT_ASSERT_INT_EQ(who.rank, -1);
    MT_ASSERT_INT_EQ(c->seq, 1);
    mt__comm_destroy(&c);
}

static void test_agree_only_rank1_fails(void)
{
    mt__comm *c = test_comm();
    mt__call call;
    mt__call_init(&call, MT__CALL_TEST, 0, 0, 0);
    int status = MT_OK;
    if (c->rank == victim())
        status = mt__error(MT_EIO, "cannot read /data/x.h5 on rank %d", c->rank);
    mt__winner who;
    int rc = mt__agree(c, &call, status, &who);
    MT_ASSERT_INT_EQ(who.rank, victim());
    MT_ASSERT_INT_EQ(who.code, MT_EIO);
    char want[128];
    if (c->rank == victim()) {
        MT_ASSERT_INT_EQ(rc, MT_EIO);
        snprintf(want, sizeof want, "cannot read /data/x.h5 on rank %d", victim());
    } else {
        MT_ASSERT_INT_EQ(rc, MT_EPEER);
        snprintf(want, sizeof want, "rank %d failed: cannot read /data/x.h5 on rank %d",
                 victim(), victim());
    }
    MT_ASSERT_STR_EQ(mt_last_error(), want);
    /* the next agreement is clean */
    MT_ASSERT_INT_EQ(mt__agree(c, &call, MT_OK, NULL), MT_OK);
    mt__comm_destroy(&c);
}

static void test_agree_all_fail_lowest_wins(void)
{
    mt__comm *c = test_comm();
    mt__call call;
    mt__call_init(&call, MT__CALL_TEST, 0, 0, 0);
    int codes[] = {MT_EFORMAT, MT_EIO, MT_ENOTFOUND, MT_ENOMEM};
    int status = mt__error(codes[c->rank % 4], "problem %d", c->rank);
    mt__winner who;
    int rc = mt__agree(c, &call, status, &who);
    MT_ASSERT_INT_EQ(who.rank, 0);
    MT_ASSERT_INT_EQ(who.code, MT_EFORMAT);
    if (c->rank == 0) {
        MT_ASSERT_INT_EQ(rc, MT_EFORMAT);
        MT_ASSERT_STR_EQ(mt_last_error(), "problem 0");
    } else {
        char own[64];
        snprintf(own, sizeof own, "this rank failed too: problem %d", c->rank);
        MT_ASSERT_INT_EQ(rc, MT_EPEER);
        MT_ASSERT_STR_CONTAINS(mt_last_error(), "rank 0 failed: problem 0");
        MT_ASSERT_STR_CONTAINS(mt_last_error(), own);
    }
    mt__comm_destroy(&c);
}

static void test_agree_different_collectives(void)
{
    if (mt_test_size() < 2)
        return; /* needs two ranks to disagree */
    mt__comm *c = test_comm();
    double buf[4] = {1, 2, 3, 4};
    int rc = c->rank == 1 ? mt__allreduce(c, buf, 4, MT_F64, MT_SUM)
                          : mt__broadcast(c, buf, 4, MT_F64, 0);
    MT_ASSERT_INT_EQ(rc, MT_EMISMATCH);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "rank 0 called broadcast(count=4, f64, root=0)");
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "rank 1 called allreduce(count=4, f64, sum)");
    assert_same_everywhere(mt_last_error());
    /* the data was not touched */
    CU_ASSERT_DOUBLE_EQUAL(buf[3], 4.0, 0);
    /* same call, different count on the last rank */
    size_t count = c->rank == c->size - 1 ? 3 : 4;
    MT_ASSERT_INT_EQ(mt__allreduce(c, buf, count, MT_F64, MT_SUM), MT_EMISMATCH);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "allreduce(count=3, f64, sum)");
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "allreduce(count=4, f64, sum)");
    /* different op, different root */
    MT_ASSERT_INT_EQ(mt__allreduce(c, buf, 4, MT_F64, c->rank ? MT_MAX : MT_MIN), MT_EMISMATCH);
    MT_ASSERT_INT_EQ(mt__broadcast(c, buf, 4, MT_F64, c->rank ? 1 : 0), MT_EMISMATCH);
    MT_ASSERT_INT_EQ(mt__allreduce(c, buf, 4, c->rank ? MT_F32 : MT_F64, MT_SUM), MT_EMISMATCH);
    /* and afterwards collectives work again */
    MT_ASSERT_INT_EQ(mt__allreduce(c, buf, 4, MT_F64, MT_SUM), MT_OK);
    mt__comm_destroy(&c);
}

/* The _nd calls: the shape is agreed in the call's one agreement. */
static void test_nd_shapes(void)
{
    mt__comm *c = test_comm();
    double buf[6] = {1, 2, 3, 4, 5, 6};
    size_t a[2] = {2, 3}, b[2] = {3, 2}, six = 6;
    /* same shape, and a 1-d array agreeing with the plain call of its count */
    MT_ASSERT_INT_EQ(mt__allreduce_nd(c, buf, 2, a, MT_F64, MT_SUM), MT_OK);
    CU_ASSERT_DOUBLE_EQUAL(buf[5], 6.0 * c->size, 0);
    int rc = c->rank == 1 ? mt__allreduce_nd(c, buf, 1, &six, MT_F64, MT_MAX)
                          : mt__allreduce(c, buf, 6, MT_F64, MT_MAX);
    MT_ASSERT_INT_EQ(rc, MT_OK);
    MT_ASSERT_INT_EQ(mt__allreduce_nd(c, buf, 0, NULL, MT_F64, MT_MAX), MT_OK); /* one element */
    if (mt_test_size() >= 2) {
        /* (3, 2) on rank 1 only: every rank names both shapes */
        rc = mt__allreduce_nd(c, buf, 2, c->rank == 1 ? b : a, MT_F64, MT_SUM);
        MT_ASSERT_INT_EQ(rc, MT_EMISMATCH);
        MT_ASSERT_STR_CONTAINS(mt_last_error(), "rank 0 called allreduce(count=6, f64, sum, "
                                                "shape=(2, 3))");
        MT_ASSERT_STR_CONTAINS(mt_last_error(), "rank 1 called allreduce(count=6, f64, sum, "
                                                "shape=(3, 2))");
        assert_same_everywhere(mt_last_error());
        rc = mt__broadcast_nd(c, buf, c->rank == 1 ? 1 : 2, c->rank == 1 ? &six : a, MT_F64, 0);
        MT_ASSERT_INT_EQ(rc, MT_EMISMATCH);
        MT_ASSERT_STR_CONTAINS(mt_last_error(), "broadcast(count=6, f64, root=0, shape=(2, 3))");
        double out[6 * 16];
        if (c->size <= 16) {
            rc = mt__allgather_nd(c, buf, out, 2, c->rank == 1 ? b : a, MT_F64);
            MT_ASSERT_INT_EQ(rc, MT_EMISMATCH);
            MT_ASSERT_STR_CONTAINS(mt_last_error(), "allgather(count=6, f64, shape=(3, 2))");
        }
    }
    /* a bad shape on one rank: that rank's MT_EINVAL, the others' MT_EPEER */
    size_t huge[3] = {SIZE_MAX, 4, 1}, fine[3] = {2, 3, 1};
    rc = mt__allreduce_nd(c, buf, c->rank == victim() ? 9 : 2, a, MT_F64, MT_SUM);
    MT_ASSERT_INT_EQ(rc, c->rank == victim() ? MT_EINVAL : MT_EPEER);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "mt_allreduce_nd: 9 dimensions (0 to 8)");
    double got[6 * 16];
    if (c->size <= 16) {
        rc = mt__allgather_nd(c, buf, got, 3, c->rank == victim() ? huge : fine, MT_F64);
        MT_ASSERT_INT_EQ(rc, c->rank == victim() ? MT_EINVAL : MT_EPEER);
        MT_ASSERT_STR_CONTAINS(mt_last_error(), "mt_allgather_nd: the shape's element count "
                                                "overflows");
    }
    /* MT_ND_FAIL: the victim's own message reaches every rank, whatever the others call */
    if (c->rank == victim()) {
        mt_set_error(MT_EINVAL, "allreduce: needs a writable array (binding)");
        rc = mt__allreduce_nd(c, NULL, MT_ND_FAIL, NULL, MT_F32, MT_SUM);
    } else {
        rc = mt__broadcast_nd(c, buf, 2, a, MT_F64, 0);
    }
    MT_ASSERT_INT_EQ(rc, c->rank == victim() ? MT_EINVAL : MT_EPEER);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "needs a writable array (binding)");
    /* and afterwards collectives work again */
    MT_ASSERT_INT_EQ(mt__allreduce_nd(c, buf, 2, a, MT_F64, MT_SUM), MT_OK);
    mt__comm_destroy(&c);
}

/* An allreduce of at most MT__AGREE_PAYLOAD bytes travels in its agreement's message: the
 * sums at every size up to that and past it, NaN answered alike everywhere, and every
 * mismatch still found before any data reaches a buffer, on every rank, naming both. */
static void test_small_allreduce_in_the_agreement(void)
{
    mt__comm *c = test_comm();
    for (int fold = 0; fold < 2; fold++) {
        mt__set_fold_bytes(fold ? MT__AGREE_PAYLOAD : 0);
        for (size_t n = 0; n <= MT__AGREE_PAYLOAD / 8 + 1; n++) {
            int64_t v[MT__AGREE_PAYLOAD / 8 + 1];
            for (size_t i = 0; i < n; i++)
                v[i] = (int64_t)(c->rank * 100 + i);
            MT_ASSERT_INT_EQ(mt__allreduce(c, v, n, MT_I64, MT_SUM), MT_OK);
            for (size_t i = 0; i < n; i++)
                MT_ASSERT_INT_EQ(v[i], (int64_t)(100 * c->size * (c->size - 1) / 2 +
                                                 c->size * (int)i));
        }
        double x = c->rank == c->size - 1 ? NAN : 1.0, y = x;
        MT_ASSERT_INT_EQ(mt__allreduce(c, &x, 1, MT_F64, MT_MIN), MT_OK);
        MT_ASSERT_INT_EQ(mt__allreduce(c, &y, 1, MT_F64, MT_MAX), MT_OK);
        if (fold) /* MPI's own MIN and MAX keep whichever side the NaN is not on */
            CU_ASSERT(isnan(x) && isnan(y)); /* the same answer on every rank */
        for (int who = 0; fold && c->size > 1 && who < 2; who++) {
            /* -0 and +0, whichever ranks hold which: the same bits everywhere */
            double lo = c->rank % 2 == who ? -0.0 : 0.0, hi = lo;
            MT_ASSERT_INT_EQ(mt__allreduce(c, &lo, 1, MT_F64, MT_MIN), MT_OK);
            MT_ASSERT_INT_EQ(mt__allreduce(c, &hi, 1, MT_F64, MT_MAX), MT_OK);
            CU_ASSERT(lo == 0 && signbit(lo));
            CU_ASSERT(hi == 0 && !signbit(hi));
        }
        if (fold) { /* NaNs of both signs summed: one NaN, the same bits on every rank */
            double s = copysign(NAN, c->rank % 2 ? 1.0 : -1.0);
            MT_ASSERT_INT_EQ(mt__allreduce(c, &s, 1, MT_F64, MT_SUM), MT_OK);
            uint64_t u;
            memcpy(&u, &s, sizeof u);
            char bits[32];
            snprintf(bits, sizeof bits, "%016llx", (unsigned long long)u);
            CU_ASSERT(isnan(s));
            assert_same_everywhere(bits);
        }
        int32_t m = 7 - c->rank;
        MT_ASSERT_INT_EQ(mt__allreduce(c, &m, 1, MT_I32, MT_MEAN), MT_OK);
        MT_ASSERT_INT_EQ(m, (int32_t)((7 * c->size - c->size * (c->size - 1) / 2) / c->size));
    }
    mt__set_fold_bytes(MT__AGREE_PAYLOAD);
    if (c->size < 2) {
        mt__comm_destroy(&c);
        return;
    }
    /* only rank 1 differs: one float more */
    float f[2] = {1, 2};
    MT_ASSERT_INT_EQ(mt__allreduce(c, f, c->rank == 1 ? 2 : 1, MT_F32, MT_SUM), MT_EMISMATCH);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "rank 0 called allreduce(count=1, f32, sum)");
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "rank 1 called allreduce(count=2, f32, sum)");
    assert_same_everywhere(mt_last_error());
    CU_ASSERT(f[0] == 1 && f[1] == 2); /* nothing reached the buffer */
    /* rank 1's call is past the threshold (two steps), the others' inside it */
    static double big[1000];
    big[0] = 5;
    MT_ASSERT_INT_EQ(mt__allreduce(c, big, c->rank == 1 ? 1000 : 1, MT_F64, MT_SUM),
                     MT_EMISMATCH);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "rank 1 called allreduce(count=1000, f64, sum)");
    CU_ASSERT_DOUBLE_EQUAL(big[0], 5, 0);
    /* the same bytes, another dtype; a 4-byte allreduce against a barrier */
    int32_t w = 3;
    MT_ASSERT_INT_EQ(mt__allreduce(c, &w, 1, c->rank == 1 ? MT_F32 : MT_I32, MT_SUM),
                     MT_EMISMATCH);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "rank 1 called allreduce(count=1, f32, sum)");
    MT_ASSERT_INT_EQ(w, 3);
    int rc = c->rank == 1 ? mt__barrier(c) : mt__allreduce(c, &w, 1, MT_I32, MT_SUM);
    MT_ASSERT_INT_EQ(rc, MT_EMISMATCH);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "rank 1 called barrier");
    MT_ASSERT_INT_EQ(w, 3);
    /* only rank 1's arguments are bad: its error, every other rank's MT_EPEER */
    rc = mt__allreduce(c, c->rank == 1 ? NULL : &w, 1, MT_I32, MT_SUM);
    MT_ASSERT_INT_EQ(rc, c->rank == 1 ? MT_EINVAL : MT_EPEER);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "NULL buffer with count 1");
    MT_ASSERT_INT_EQ(w, 3);
    /* and the next small call works */
    MT_ASSERT_INT_EQ(mt__allreduce(c, &w, 1, MT_I32, MT_SUM), MT_OK);
    MT_ASSERT_INT_EQ(w, 3 * c->size);
    mt__comm_destroy(&c);
}

/* ------------------------------------------------------------ failures inside fit */

static int fail_on_victim(mt_context *c, void *arg)
{
    if (mt_world_rank(c) == victim())
        return mt__error(MT_EIO, "batch 7 unreadable");
    double x = 1;
    int rc = MT_OK;
    for (int i = 0; i < 3 && rc == MT_OK; i++)
        rc = mt_allreduce(c, &x, 1, MT_F64, MT_SUM);
    MT_ASSERT_INT_EQ(rc, MT_EPEER);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "rank 1 failed: batch 7 unreadable");
    return rc;
}

static void test_fit_one_rank_returns_error(void)
{
    char err[2048];
    MT_ASSERT_INT_EQ(fit_with(fail_on_victim, NULL, base_config(), err, sizeof err), MT_EIO);
    char want[80];
    snprintf(want, sizeof want, "rank %d failed: batch 7 unreadable", victim());
    MT_ASSERT_STR_CONTAINS(err, want);
    assert_same_everywhere(err);
}

static int leave_early_on_victim(mt_context *c, void *arg)
{
    if (mt_world_rank(c) == victim())
        return MT_OK;
    double x = 1;
    int rc = mt_allreduce(c, &x, 1, MT_F64, MT_SUM);
    MT_ASSERT_INT_EQ(rc, MT_EMISMATCH);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "called fit-end");
    return rc;
}

static void test_fit_one_rank_leaves_early(void)
{
    if (mt_test_size() < 2)
        return;
    char err[2048];
    MT_ASSERT_INT_EQ(fit_with(leave_early_on_victim, NULL, base_config(), err, sizeof err),
                     MT_EMISMATCH);
    MT_ASSERT_STR_CONTAINS(err, "called fit-end");
    assert_same_everywhere(err);
}

static int positive_return(mt_context *c, void *arg) { return 3; }

static void test_fit_positive_return(void)
{
    char err[2048];
    MT_ASSERT_INT_EQ(fit_with(positive_return, NULL, base_config(), err, sizeof err), MT_EINVAL);
    MT_ASSERT_STR_CONTAINS(err, "rank 0 failed: the training function returned 3");
}

/* ------------------------------------------------------------ typed collectives */

static double value(int rank, size_t i) { return (double)((rank + 1) * 3 + (int)(i % 7)); }

static void fill(void *buf, mt_dtype t, size_t n, int rank)
{
    for (size_t i = 0; i < n; i++) {
        double v = value(rank, i);
        switch (t) {
        case MT_U8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
        case MT_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
        case MT_I64: ((int64_t *)buf)[i] = (int64_t)v; break;
        case MT_F32: ((float *)buf)[i] = (float)v; break;
        case MT_F64: ((double *)buf)[i] = v; break;
        }
    }
}

static double get(const void *buf, mt_dtype t, size_t i)
{
    switch (t) {
    case MT_U8: return ((const uint8_t *)buf)[i];
    case MT_I32: return ((const int32_t *)buf)[i];
    case MT_I64: return (double)((const int64_t *)buf)[i];
    case MT_F32: return ((const float *)buf)[i];
    case MT_F64: return ((const double *)buf)[i];
    }
    return NAN;
}

static double reference(mt_op op, mt_dtype t, int size, size_t i)
{
    double acc = value(0, i);
    for (int r = 1; r < size; r++) {
        double v = value(r, i);
        acc = op == MT_MIN ? fmin(acc, v) : op == MT_MAX ? fmax(acc, v) : acc + v;
    }
    if (op == MT_MEAN)
        acc = (t == MT_F32 || t == MT_F64) ? acc / size : floor(acc / size);
    return acc;
}

static void check_allreduce(mt__comm *c, size_t n)
{
    mt_dtype types[] = {MT_U8, MT_I32, MT_I64, MT_F32, MT_F64};
    mt_op ops[] = {MT_SUM, MT_MEAN, MT_MIN, MT_MAX};
    double *buf = malloc(n * 8 + 8);
    for (size_t ti = 0; ti < 5; ti++)
        for (size_t oi = 0; oi < 4; oi++) {
            /* a sum of bytes past 255 (from 12 ranks on) has no one answer: Open MPI 4.1.4
             * saturates it for long vectors (255) and wraps it for short ones */
            if (types[ti] == MT_U8 && (ops[oi] == MT_SUM || ops[oi] == MT_MEAN) &&
                reference(MT_SUM, MT_U8, c->size, 6) > 255)
                continue;
            fill(buf, types[ti], n, c->rank);
            MT_ASSERT_INT_EQ(mt__allreduce(c, buf, n, types[ti], ops[oi]), MT_OK);
            int bad = 0;
            for (size_t i = 0; i < n; i++)
                bad += fabs(get(buf, types[ti], i) - reference(ops[oi], types[ti], c->size, i)) > 1e-4;
            if (bad)
                fprintf(stderr, "allreduce dtype %d op %d n %zu: %d wrong\n", types[ti], ops[oi], n, bad);
            MT_ASSERT_INT_EQ(bad, 0);
        }
    free(buf);
}

static void test_allreduce_every_dtype_and_op(void)
{
    mt__comm *c = test_comm();
    check_allreduce(c, 0);
    check_allreduce(c, 1);
    check_allreduce(c, 1000);
    mt__set_chunk_elems(3); /* exercise the INT_MAX chunking with small chunks */
    mt__set_fold_bytes(0);  /* (a small allreduce has no data step to chunk otherwise) */
    check_allreduce(c, 10);
    mt__set_fold_bytes(MT__AGREE_PAYLOAD);
    mt__set_chunk_elems(0);
    mt__comm_destroy(&c);
}

static void test_broadcast_and_allgather(void)
{
    mt__comm *c = test_comm();
    mt_dtype types[] = {MT_U8, MT_I32, MT_I64, MT_F32, MT_F64};
    size_t chunks[] = {0, 2};
    for (size_t k = 0; k < 2; k++) {
        mt__set_chunk_elems(chunks[k]);
        for (size_t ti = 0; ti < 5; ti++) {
            for (int root = 0; root < c->size; root++) {
                int64_t buf[9];
                fill(buf, types[ti], 9, c->rank);
                MT_ASSERT_INT_EQ(mt__broadcast(c, buf, 9, types[ti], root), MT_OK);
                for (size_t i = 0; i < 9; i++)
                    CU_ASSERT_DOUBLE_EQUAL(get(buf, types[ti], i), value(root, i), 1e-6);
            }
            int64_t send[5], *recv = calloc((size_t)c->size * 5, 8);
            fill(send, types[ti], 5, c->rank);
            MT_ASSERT_INT_EQ(mt__allgather(c, send, recv, 5, types[ti]), MT_OK);
            for (int r = 0; r < c->size; r++)
                for (size_t i = 0; i < 5; i++)
                    CU_ASSERT_DOUBLE_EQUAL(get(recv, types[ti], (size_t)r * 5 + i), value(r, i), 1e-6);
            free(recv);
        }
    }
    mt__set_chunk_elems(0);
    MT_ASSERT_INT_EQ(mt__allgather(c, NULL, NULL, 0, MT_F64), MT_OK);
    MT_ASSERT_INT_EQ(mt__broadcast(c, NULL, 0, MT_F64, 0), MT_OK);
    MT_ASSERT_INT_EQ(mt__barrier(c), MT_OK);
    mt__comm_destroy(&c);
}

static void test_bad_arguments_on_one_rank(void)
{
    mt__comm *c = test_comm();
    double x[2] = {0, 0};
    void *buf = c->rank == victim() ? NULL : x;
    int rc = mt__allreduce(c, buf, 2, MT_F64, MT_SUM);
    if (c->rank == victim()) {
        MT_ASSERT_INT_EQ(rc, MT_EINVAL);
        MT_ASSERT_STR_CONTAINS(mt_last_error(), "mt_allreduce: NULL buffer with count 2");
    } else {
        MT_ASSERT_INT_EQ(rc, MT_EPEER);
        MT_ASSERT_STR_CONTAINS(mt_last_error(), "rank 1 failed: mt_allreduce: NULL buffer");
    }
    rc = mt__broadcast(c, x, 2, MT_F64, c->size); /* a root that does not exist */
    MT_ASSERT_INT_EQ(rc, c->rank == 0 ? MT_EINVAL : MT_EPEER);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "is not a rank of this");
    rc = mt__allreduce(c, x, 2, (mt_dtype)99, MT_SUM);
    MT_ASSERT_INT_EQ(rc, c->rank == 0 ? MT_EINVAL : MT_EPEER);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "unknown dtype 99");
    rc = mt__allreduce(c, x, 2, MT_F64, (mt_op)42);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "unknown op 42");
    rc = mt__allgather(c, x, NULL, 1, MT_F64);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "NULL receive buffer");
    mt__comm_destroy(&c);
}

/* ------------------------------------------------ one rank fails in a set-up step */

/* MT_TEST_FAIL_AT=site:victim on every rank for the length of a test */
static void fail_at(const char *site)
{
    char spec[128];
    snprintf(spec, sizeof spec, "%s:%d", site, victim());
    setenv("MT_TEST_FAIL_AT", spec, 1);
}

static void fail_none(void)
{
    unsetenv("MT_TEST_FAIL_AT");
}

/* rc is the victim's own code there and MT_EPEER naming the victim elsewhere */
static void assert_victim_failed(int rc, int code)
{
    if (mt_test_rank() == victim())
        MT_ASSERT_INT_EQ(rc, code);
    else {
        char want[64];
        snprintf(want, sizeof want, "rank %d failed: ", victim());
        MT_ASSERT_INT_EQ(rc, MT_EPEER);
        MT_ASSERT_STR_CONTAINS(mt_last_error(), want);
    }
}

static void test_comm_create_alloc_fails_on_one_rank(void)
{
    fail_at("comm-alloc");
    mt__comm *c = (mt__comm *)1;
    int rc = mt__comm_create(&c, MPI_COMM_WORLD);
    fail_none();
    assert_victim_failed(rc, MT_ENOMEM);
    CU_ASSERT_PTR_NULL(c);
    /* and nothing is left half made: the next one works */
    MT_ASSERT_INT_EQ(mt__comm_create(&c, MPI_COMM_WORLD), MT_OK);
    mt__comm_destroy(&c);
}

static void test_topology_alloc_fails_on_one_rank(void)
{
    mt__comm *c = test_comm();
    mt__topology topo;
    fail_at("topology-alloc");
    int rc = mt__topology_get(c, &topo);
    fail_none();
    assert_victim_failed(rc, MT_ENOMEM);
    MT_ASSERT_INT_EQ(mt__topology_get(c, &topo), MT_OK);
    MT_ASSERT_INT_EQ(topo.local_size, mt_test_host_layout().local_size);
    mt__comm_destroy(&c);
}

static void test_watchdog_start_fails_on_one_rank(void)
{
    const char *sites[] = {"watchdog-alloc", "watchdog-slot", "watchdog-thread"};
    int codes[] = {MT_ENOMEM, MT_EIO, MT_ENOMEM};
    mt__comm *c = test_comm();
    for (int i = 0; i < 3; i++) {
        mt__watchdog *w = NULL;
        fail_at(sites[i]);
        int rc = mt__watchdog_start(&w, c, 1, 10);
        fail_none();
        assert_victim_failed(rc, codes[i]);
        CU_ASSERT_PTR_NULL(w);
    }
    /* a watchdog that starts on every rank stops on every rank */
    mt__watchdog *w = NULL;
    MT_ASSERT_INT_EQ(mt__watchdog_start(&w, c, 1, 10), MT_OK);
    MT_ASSERT_INT_EQ(mt__barrier(c), MT_OK);
    mt__watchdog_stop(&w);
    CU_ASSERT_PTR_NULL(w);
    mt__comm_destroy(&c);
}

static void test_fusion_create_fails_on_one_rank(void)
{
    const char *sites[] = {"fusion-alloc", "fusion-thread"};
    mt__comm *c = test_comm();
    for (int i = 0; i < 2; i++) {
        mt_fusion *f = NULL;
        fail_at(sites[i]);
        int rc = mt__fusion_create(c, 1024, &f);
        fail_none();
        assert_victim_failed(rc, MT_ENOMEM);
        CU_ASSERT_PTR_NULL(f);
    }
    /* MT_FUSION_BYTES is read on each rank: a bad value on one rank fails every rank */
    mt_fusion *f = NULL;
    if (c->rank == victim())
        setenv("MT_FUSION_BYTES", "lots", 1);
    int rc = mt__fusion_create(c, 0, &f);
    unsetenv("MT_FUSION_BYTES");
    assert_victim_failed(rc, MT_EINVAL);
    CU_ASSERT_PTR_NULL(f);
    /* one rank that cannot map the shared segment: every rank falls back to MPI */
    fail_at("fusion-shm");
    rc = mt__fusion_create(c, 1024, &f);
    fail_none();
    MT_ASSERT_INT_EQ(rc, MT_OK);
    CU_ASSERT_FALSE(mt__fusion_shared(f));
    float x[4] = {1, 2, 3, (float)c->rank};
    MT_ASSERT_INT_EQ(mt_fusion_add(f, x, 4), 0);
    MT_ASSERT_INT_EQ(mt_fusion_wait(f), MT_OK);
    CU_ASSERT_DOUBLE_EQUAL(x[3], (c->size - 1) / 2.0, 1e-6);
    mt_fusion_destroy(&f);
    MT_ASSERT_INT_EQ(mt__fusion_create(c, 1024, &f), MT_OK);
    mt_fusion_destroy(&f);
    mt__comm_destroy(&c);
}

static void test_agree_exit_mpi_error_returns(void)
{
    mt__comm *c = test_comm();
    fail_at("agree-exit-mpi");
    mt__winner who;
    int rc = mt__agree_exit(c, MT__CALL_FIT_END, MT_OK, &who);
    fail_none();
    if (c->rank == victim()) { /* before: this rank repeated the agreement forever */
        MT_ASSERT_INT_EQ(rc, MT_EMPI);
        MT_ASSERT_INT_EQ(who.rank, victim());
        MT_ASSERT_STR_CONTAINS(mt_last_error(), "injected");
    } else
        MT_ASSERT_INT_EQ(rc, MT_OK);
    mt__comm_destroy(&c);
}

/* Restore where one step fails on one rank: attempt 0 commits a sharded array of many
 * rows (in chunks of one row), then fails; attempt 1 restores it with the fault set. */
typedef struct {
    const char *site;
    int get_rc;
    char msg[MT__MSG_LEN];
} restore_arg;

static int restore_fn(mt_context *c, void *varg)
{
    restore_arg *a = varg;
    int64_t rows[64];
    for (int i = 0; i < 64; i++)
        rows[i] = c->world_rank * 1000 + i;
    if (mt_attempt(c) == 0) {
        mt_checkpoint *ck = mt_checkpoint_new();
        mt_checkpoint_put(ck, "rows", MT_I64, 1, (size_t[]){64}, rows, MT_SHARDED);
        mt_checkpoint_put(ck, "whole", MT_I64, 1, (size_t[]){64}, rows, MT_REPLICATED);
        mt_metrics *m = mt_metrics_new();
        int rc = mt_report(c, m, ck);
        mt_metrics_free(&m);
        mt_checkpoint_free(&ck);
        return rc ? rc : mt__error(MT_EIO, "failing on purpose after the checkpoint");
    }
    const mt_checkpoint *ck = mt_get_checkpoint(c);
    if (!ck)
        return mt__error(MT_ENOTFOUND, "no checkpoint to restore");
    fail_at(a->site);
    a->get_rc = mt_checkpoint_get(ck, "rows", MT_I64, rows, 64);
    snprintf(a->msg, sizeof a->msg, "%s", mt_last_error());
    fail_none();
    /* the streams are whole again: the next restore works on every rank */
    int rc = mt_checkpoint_get(ck, "whole", MT_I64, rows, 64);
    MT_ASSERT_INT_EQ(rc, MT_OK);
    MT_ASSERT_INT_EQ(rows[63], 63);
    rc = mt_checkpoint_get(ck, "rows", MT_I64, rows, 64);
    MT_ASSERT_INT_EQ(rc, MT_OK);
    MT_ASSERT_INT_EQ(rows[5], c->world_rank * 1000 + 5);
    return MT_OK;
}

static void test_restore_fails_on_one_rank(void)
{
    const char *sites[] = {"restore-read", "restore-alloc"};
    int codes[] = {MT_EIO, MT_ENOMEM};
    setenv("MT_CHECKPOINT_BUFFER", "8", 1); /* one row a chunk: reads part-way are real */
    for (int i = 0; i < 2; i++) {
        restore_arg a = {sites[i], -1, ""};
        mt_trainer_config cfg = base_config();
        cfg.run.name = "restore-fault";
        cfg.run.failure.max_failures = 1;
        MT_ASSERT_INT_EQ(fit_with(restore_fn, &a, cfg, NULL, 0), MT_OK);
        /* a read error: rank 0 reads for everyone, so its error is everyone's */
        int failer = i == 0 ? 0 : victim();
        char want[64];
        snprintf(want, sizeof want, "rank %d failed: ", failer);
        MT_ASSERT_INT_EQ(a.get_rc, mt_test_rank() == failer ? codes[i] : MT_EPEER);
        if (mt_test_rank() != failer)
            MT_ASSERT_STR_CONTAINS(a.msg, want);
        MT_ASSERT_STR_CONTAINS(a.msg, i == 0 ? "injected" : "out of memory");
    }
    unsetenv("MT_CHECKPOINT_BUFFER");
}

static int quick_fn(mt_context *c, void *arg)
{
    (void)c;
    (void)arg;
    return MT_OK;
}

/* fit shares rank 0's run information: a rank that cannot hold it fails every rank's fit */
static void test_fit_share_alloc_fails_on_one_rank(void)
{
    if (mt_test_size() == 1)
        return; /* rank 0 sends, it allocates nothing */
    mt_trainer_config cfg = base_config();
    cfg.run.name = "share-fault";
    char err[MT__MSG_LEN];
    fail_at("share-json-alloc");
    int rc = fit_with(quick_fn, NULL, cfg, err, sizeof err);
    fail_none();
    MT_ASSERT_INT_EQ(rc, mt_test_rank() == victim() ? MT_ENOMEM : MT_EPEER);
    MT_ASSERT_STR_CONTAINS(err, "out of memory receiving the run state");
}

static const mt_test tests[] = {
    {"context_in_fit", test_context_in_fit},
    {"name_is_rank0s", test_name_is_rank0s},
    {"bad_config_on_one_rank", test_bad_config_on_one_rank},
    {"num_workers_mismatch", test_num_workers_mismatch},
    {"cpus_per_worker", test_cpus_per_worker},
    {"agree_all_ok", test_agree_all_ok},
    {"agree_only_rank1_fails", test_agree_only_rank1_fails},
    {"agree_all_fail_lowest_wins", test_agree_all_fail_lowest_wins},
    {"agree_different_collectives", test_agree_different_collectives},
    {"nd_shapes", test_nd_shapes},
    {"small_allreduce_in_the_agreement", test_small_allreduce_in_the_agreement},
    {"fit_one_rank_returns_error", test_fit_one_rank_returns_error},
    {"fit_one_rank_leaves_early", test_fit_one_rank_leaves_early},
    {"fit_positive_return", test_fit_positive_return},
    {"allreduce_every_dtype_and_op", test_allreduce_every_dtype_and_op},
    {"broadcast_and_allgather", test_broadcast_and_allgather},
    {"bad_arguments_on_one_rank", test_bad_arguments_on_one_rank},
    {"comm_create_alloc_fails_on_one_rank", test_comm_create_alloc_fails_on_one_rank},
    {"topology_alloc_fails_on_one_rank", test_topology_alloc_fails_on_one_rank},
    {"watchdog_start_fails_on_one_rank", test_watchdog_start_fails_on_one_rank},
    {"fusion_create_fails_on_one_rank", test_fusion_create_fails_on_one_rank},
    {"agree_exit_mpi_error_returns", test_agree_exit_mpi_error_returns},
    {"restore_fails_on_one_rank", test_restore_fails_on_one_rank},
    {"fit_share_alloc_fails_on_one_rank", test_fit_share_alloc_fails_on_one_rank},
    {NULL, NULL},
};

int main(int argc, char **argv)
{
    return mt_test_main(argc, argv, "mpi_core", tests, true);
}
