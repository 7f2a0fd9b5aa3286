/*
 * chaos.c -- allocation-failure injection, in the style of jansson's test_chaos: for every
 * N, the N-th allocation of one call fails on one rank, and the call must give a clean,
 * agreed error (the failing rank MT_ENOMEM, every other rank MT_EPEER; MT_ENOMEM alone
 * for a local call), neither hang nor leak, and the next call must work again. N runs
 * from 1 until a call completes without reaching its N-th allocation; at 2 ranks each
 * rank takes its turn as the failing one.
 *
 * The program is linked with -Wl,--wrap=malloc,... (Makefile.am): the linker sends the
 * allocation calls of the objects linked into it (the library's own, through
 * libmtcore.la, and this file's) to the __wrap_ functions below, while libmpi, libhdf5
 * and libc keep the real allocator, so only mpitrain's allocations fail. jansson's go
 * through json_set_alloc_funcs. Only allocations of the thread that armed the injection
 * are counted, so that N means the same allocation from one run to the next.
 *
 * Covered: mt_report with metrics, with a checkpoint (the commit), restore on resume
 * (mt_checkpoint_get, replicated and sharded), shards (mt_get_dataset_shard,
 * mt_shard_begin_epoch, mt_shard_next with conversions), fusion (create and
 * mt_fusion_alloc, add/ready/wait of a step, wait of a later step; the default, tensors in
 * a block, hier with fp16, flat with fp16). MT_CHAOS_VERBOSE=1 prints each injection, 2 also the
 * stack of each failing allocation.
 */
#include "fixtures.h"
#include "harness.h"

#include "../runtime/runtime.h"

#include <errno.h>
#include <execinfo.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ the injector */

static atomic_int armed;
static pthread_t owner;
static long count, fail_at;
static int target;
static bool injected;

static bool fail_now(void)
{
    if (!atomic_load(&armed) || !pthread_equal(pthread_self(), owner))
        return false;
    if (++count != fail_at || mt_test_rank() != target)
        return false;
    injected = true;
    errno = ENOMEM;
    const char *v = getenv("MT_CHAOS_VERBOSE");
    if (v && !strcmp(v, "2")) { /* where the failing allocation is */
        void *frames[12];
        backtrace_symbols_fd(frames, backtrace(frames, 12), 2);
    }
    return true;
}

/* __wrap_NAME: `failed` (NULL, or posix_memalign's ENOMEM) when this allocation is the one
 * to fail, else what __real_NAME gives; with the prototypes -Wmissing-prototypes asks for */
#define WRAP(type, name, params, args, failed)                                              \
    type __real_##name params;                                                            \
    type __wrap_##name params;                                                            \
    type __wrap_##name params { return fail_now() ? failed : __real_##name args; }
WRAP(void *, malloc, (size_t n), (n), NULL)
WRAP(void *, calloc, (size_t n, size_t size), (n, size), NULL)
WRAP(void *, realloc, (void *p, size_t n), (p, n), NULL)
WRAP(char *, strdup, (const char *s), (s), NULL)
WRAP(char *, strndup, (const char *s, size_t n), (s, n), NULL)
WRAP(int, posix_memalign, (void **p, size_t align, size_t n), (p, align, n), ENOMEM)
WRAP(void *, aligned_alloc, (size_t align, size_t n), (align, n), NULL)
/* jansson allocates through these (json_set_alloc_funcs in main; the library chains its
 * own hook to them) */
static void *json_malloc(size_t n) { return __wrap_malloc(n); }

static void arm(long n, int rank)
{
    owner = pthread_self();
    count = 0;
    fail_at = n;
    target = rank;
    injected = false;
    atomic_store(&armed, 1);
}

static void disarm(void) { atomic_store(&armed, 0); }
/* From a training function inside an armed fit: the rest is other cases' */
static void pause_injection(void) { atomic_store(&armed, 0); }

/* ------------------------------------------------------------ the loop */

typedef struct {
    const char *what;
    int (*prepare)(mt_context *c, void *st); /* before each op, not armed (may be NULL) */
    int (*op)(mt_context *c, void *st);    /* the call under test, armed */
    int (*again)(mt_context *c, void *st); /* the next call, not armed: must work */
    int scope;                             /* who returns an error (below) */
    long limit; /* with more than one rank, each rank's turn stops after this many (0: no
                 * limit), to keep the run short: the later allocations are rank 0's reading
                 * of the run directory, which the 1-rank run covers */
} chaos_case;
enum {
    COLLECTIVE, /* the failing rank MT_ENOMEM, every other rank MT_EPEER */
    LOCAL,      /* the failing rank MT_ENOMEM, the others MT_OK */
    EITHER,     /* a collective part then a local part: the others all MT_EPEER or all MT_OK */
    AGREED,     /* fit: the others all MT_EPEER, or all the winning rank's code */
};

static int verbose(void)
{
    const char *v = getenv("MT_CHAOS_VERBOSE");
    return v && *v && strcmp(v, "0");
}

/* Runs k->op with the N-th allocation failing, for N = 1, 2, ... until an op completes
 * before its N-th allocation; at every rank in turn. Returns the number of failures
 * injected (on all ranks together) or -1 after the first wrong outcome (which it has
 * asserted). Every rank calls it together; the decisions are agreed with MPI. */
static long chaos_loop(mt_context *c, const chaos_case *k, void *st)
{
    int size = mt_test_size(), rank = mt_test_rank();
    long total = 0;
    for (int who = 0; who < size; who++)
        for (long n = 1;; n++) {
            if (n > 20000) {
                CU_FAIL("chaos: an op that never ends its allocations");
                return -1;
            }
            if (k->prepare && k->prepare(c, st) != MT_OK) {
                fprintf(stderr, "chaos: rank %d: %s: preparing: %s\n", rank, k->what,
                        mt_last_error());
                CU_FAIL("chaos: preparing a case failed");
                return -1;
            }
            arm(n, who);
            int rc = k->op(c, st);
            disarm();
            int expect = !injected ? MT_OK : MT_ENOMEM;
            int flags[2] = {injected, 0};
            MPI_Allreduce(MPI_IN_PLACE, flags, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
            /* EITHER: the others follow the lowest other rank's outcome */
            int others = rc;
            if (size > 1)
                MPI_Bcast(&others, 1, MPI_INT, who == 0 ? 1 : 0, MPI_COMM_WORLD);
            if (flags[0] && !injected)
                expect = k->scope == COLLECTIVE ? MT_EPEER
                         : k->scope == LOCAL    ? MT_OK
                         : k->scope == AGREED   ? (others == MT_ENOMEM ? MT_ENOMEM : MT_EPEER)
                         : others == MT_OK      ? MT_OK
                                                : MT_EPEER;
            char where[256];
            snprintf(where, sizeof where, "%s: allocation %ld failing on rank %d", k->what, n,
                     who);
            if (verbose() && injected)
                fprintf(stderr, "chaos: %s: rc %d (%s)\n", where, rc, rc ? mt_last_error() : "");
            if (rc != expect) {
                fprintf(stderr, "chaos: rank %d: %s: returned %d (%s), expected %d; %s\n", rank,
                        where, rc, mt_strerror(rc), expect, rc ? mt_last_error() : "");
                flags[1] = 1;
            }
            if (flags[0] && k->again) {
                int again = k->again(c, st);
                if (again != MT_OK) {
                    fprintf(stderr, "chaos: rank %d: %s: the next call returned %d: %s\n",
                            rank, where, again, mt_last_error());
                    flags[1] = 1;
                }
            }
            MPI_Allreduce(MPI_IN_PLACE, flags + 1, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
            if (flags[1]) {
                MT_ASSERT_STR_EQ(where, "(no wrong outcome)");
                return -1;
            }
            if (!flags[0])
                break;
            total++;
            if (size > 1 && k->limit && n >= k->limit)
                break;
        }
    return total;
}

static mt_trainer_config config(const char *name)
{
    mt_trainer_config cfg = {.run = {.storage_path = mt_test_storage(), .name = name,
                                     .verbose = MT_VERBOSE_SILENT}};
    return cfg;
}

static int fit(const mt_trainer_config *cfg, mt_train_fn fn, void *arg,
               const char *const *datasets)
{
    mt_trainer *t = NULL;
    CU_ASSERT_EQUAL_FATAL(mt_trainer_create(&t, fn, arg, cfg), MT_OK);
    for (int i = 0; datasets && datasets[2 * i]; i++)
        CU_ASSERT_EQUAL(mt_trainer_add_dataset(t, datasets[2 * i], datasets[2 * i + 1], "/train"),
                        MT_OK);
    mt_result *r = NULL;
    int rc = mt_trainer_fit(t, &r);
    if (rc)
        fprintf(stderr, "chaos: rank %d: fit: %s\n", mt_test_rank(), mt_last_error());
    mt_result_free(&r);
    mt_trainer_destroy(&t);
    return rc;
}

/* Each case reports how many failures it injected: a case that injects none tests
 * nothing, so the count must be positive. */
static void expect_injected(const char *what, long n)
{
    if (mt_test_rank() == 0)
        printf("\n    %s: %ld failures injected", what, n);
    CU_ASSERT(n > 0);
}

/* ------------------------------------------------------------ report and commit */

typedef struct {
    mt_metrics *m;
    mt_checkpoint *ck;
    float w[12];
    int64_t s[3];
    char file[512];
} report_state;

static int report_op(mt_context *c, void *st)
{
    report_state *r = st;
    return mt_report(c, r->m, r->ck);
}

static void report_setup(mt_context *c, report_state *r, bool with_checkpoint)
{
    int rank = mt_world_rank(c);
    r->m = mt_metrics_new();
    mt_metrics_set_f64(r->m, "loss", 0.5 + rank);
    mt_metrics_set_i64(r->m, "step", 3);
    mt_metrics_set_str(r->m, "phase", "train");
    mt_metrics_set_f64(r->m, "val/acc", 0.25);
    if (!with_checkpoint)
        return;
    for (int i = 0; i < 12; i++)
        r->w[i] = (float)i;
    for (int i = 0; i < 3; i++)
        r->s[i] = 100 * rank + i;
    r->ck = mt_checkpoint_new();
    CU_ASSERT_EQUAL(mt_checkpoint_put(r->ck, "w", MT_F32, 2, (size_t[]){3, 4}, r->w, MT_REPLICATED), MT_OK);
    /* rank r gives r + 1 rows */
    CU_ASSERT_EQUAL(mt_checkpoint_put(r->ck, "s", MT_I64, 1, (size_t[]){(size_t)rank + 1}, r->s,
                                      MT_SHARDED), MT_OK);
    CU_ASSERT_EQUAL(mt_checkpoint_set_meta(r->ck, "epoch", "7"), MT_OK);
    snprintf(r->file, sizeof r->file, "%s/extra-%d.txt", mt_test_storage(), rank);
    FILE *f = fopen(r->file, "w");
    if (f) {
        fprintf(f, "rank %d\n", rank);
        fclose(f);
    }
    if (rank == mt_world_size(c) - 1)
        CU_ASSERT_EQUAL(mt_checkpoint_add_file(r->ck, "extra.txt", r->file), MT_OK);
}

static void report_teardown(report_state *r)
{
    mt_metrics_free(&r->m);
    mt_checkpoint_free(&r->ck);
    if (r->file[0])
        unlink(r->file);
}

static int report_body(mt_context *c, void *arg)
{
    bool with_checkpoint = *(bool *)arg;
    report_state r = {0};
    report_setup(c, &r, with_checkpoint);
    chaos_case k = {with_checkpoint ? "mt_report with a checkpoint" : "mt_report", NULL,
                    report_op, report_op, COLLECTIVE, 0};
    expect_injected(k.what, chaos_loop(c, &k, &r));
    report_teardown(&r);
    /* a failed run, so that test_restore resumes it */
    return with_checkpoint ? mt__error(MT_EIO, "chaos: the run stops here") : MT_OK;
}

static void test_report(void)
{
    bool with_checkpoint = false;
    mt_trainer_config cfg = config("chaos-report");
    MT_ASSERT_INT_EQ(fit(&cfg, report_body, &with_checkpoint, NULL), MT_OK);
}

static void test_report_checkpoint(void)
{
    bool with_checkpoint = true;
    mt_trainer_config cfg = config("chaos-ckpt");
    cfg.run.checkpoint.num_to_keep = 2; /* retention drops one at every commit */
    MT_ASSERT_INT_EQ(fit(&cfg, report_body, &with_checkpoint, NULL), MT_EIO);
}

/* ------------------------------------------------------------ restore */

typedef struct {
    const mt_checkpoint *ck;
    float w[12];
    int64_t s[8];
    size_t srows;
} restore_state;

static int restore_op(mt_context *c, void *st)
{
    restore_state *r = st;
    memset(r->w, 0, sizeof r->w);
    memset(r->s, 0, sizeof r->s);
    int rc = mt_checkpoint_get(r->ck, "w", MT_F32, r->w, 12);
    int rs = mt_checkpoint_get(r->ck, "s", MT_I64, r->s, r->srows);
    return rc ? rc : rs;
}

static int restore_again(mt_context *c, void *st)
{
    restore_state *r = st;
    int rc = restore_op(c, st);
    int wrong = 0;
    for (int i = 0; i < 12; i++)
        wrong += r->w[i] != (float)i;
    return rc ? rc : wrong ? mt__error(MT_EFORMAT, "chaos: restored values differ") : MT_OK;
}

static int restore_body(mt_context *c, void *arg)
{
    restore_state r = {.ck = mt_get_checkpoint(c)};
    CU_ASSERT_PTR_NOT_NULL_FATAL(r.ck);
    MT_ASSERT_STR_EQ(mt_checkpoint_get_meta(r.ck, "epoch"), "7");
    int nd = 0;
    size_t dims[8] = {0};
    MT_ASSERT_INT_EQ(mt_checkpoint_dims(r.ck, "s", &nd, dims), MT_OK);
    r.srows = dims[0];
    CU_ASSERT_FATAL(r.srows <= 8);
    chaos_case k = {"mt_checkpoint_get on resume", NULL, restore_op, restore_again, COLLECTIVE, 0};
    expect_injected(k.what, chaos_loop(c, &k, &r));
    return mt__error(MT_EIO, "chaos: the run stops here"); /* test_resume_fit resumes it */
}

static void test_restore(void)
{
    mt_trainer_config cfg = config("chaos-ckpt");
    cfg.run.checkpoint.num_to_keep = 2;
    MT_ASSERT_INT_EQ(fit(&cfg, restore_body, NULL, NULL), MT_EIO);
}

/* A fit that resumes a failed run (rank 0 loads run.json, checks the checkpoints, every
 * rank learns where to start): allocations are counted up to the training function (the
 * restore path; what follows is the other cases' or the end of fit), which checks that
 * the checkpoint came back and fails the run again, so that the next turn resumes too. */
static int resume_fn(mt_context *c, void *arg)
{
    pause_injection();
    const mt_checkpoint *ck = mt_get_checkpoint(c);
    float w[12] = {0};
    int rc = ck ? mt_checkpoint_get(ck, "w", MT_F32, w, 12)
                : mt__error(MT_EINVAL, "chaos: resumed without the checkpoint");
    for (int i = 0; !rc && i < 12; i++)
        if (w[i] != (float)i)
            rc = mt__error(MT_EINVAL, "chaos: restored w[%d] = %g", i, (double)w[i]);
    return rc ? rc : mt__error(MT_EIO, "chaos: the run stops here");
}

static int fit_op(mt_context *unused, void *st)
{
    mt_result *r = NULL;
    int rc = mt_trainer_fit(st, &r);
    mt_result_free(&r);
    if (rc == MT_EIO && strstr(mt_last_error(), "the run stops here"))
        rc = MT_OK; /* the training function's own failure */
    return rc;
}

/* A small run to resume: two reports, a checkpoint with each, then a failure. */
static int resumable_fn(mt_context *c, void *arg)
{
    report_state r = {0};
    report_setup(c, &r, true);
    int rc = mt_report(c, r.m, r.ck);
    if (!rc)
        rc = mt_report(c, r.m, r.ck);
    report_teardown(&r);
    return rc ? rc : mt__error(MT_EIO, "chaos: the run stops here");
}

static void test_resume_fit(void)
{
    mt_trainer_config cfg = config("chaos-resume");
    cfg.run.checkpoint.num_to_keep = 2;
    MT_ASSERT_INT_EQ(fit(&cfg, resumable_fn, NULL, NULL), MT_EIO);
    mt_trainer *t = NULL;
    CU_ASSERT_EQUAL_FATAL(mt_trainer_create(&t, resume_fn, NULL, &cfg), MT_OK);
    chaos_case k = {"mt_trainer_fit resuming", NULL, fit_op, NULL, AGREED, 100};
    expect_injected(k.what, chaos_loop(NULL, &k, t));
    mt_trainer_destroy(&t);
}

/* Reading a run and a checkpoint back (local): the failing rank's MT_ENOMEM, never a
 * result or checkpoint quietly missing rows, checkpoints or metadata. */
static int load_op(mt_context *unused, void *dir)
{
    mt_result *r = NULL;
    int rc = mt_result_load(dir, &r);
    if (!rc && (mt_result_num_rows(r) == 0 || mt_result_num_best(r) == 0 ||
                !mt_result_checkpoint(r) || mt_checkpoint_num_arrays(mt_result_checkpoint(r)) == 0))
        rc = mt__error(MT_EINVAL, "chaos: %s loaded without its rows or checkpoints", (char *)dir);
    mt_result_free(&r);
    return rc;
}

static int open_ck_op(mt_context *unused, void *path)
{
    mt_checkpoint *ck = NULL;
    int rc = mt_checkpoint_open(path, &ck);
    if (!rc && (mt_checkpoint_num_arrays(ck) != 2 || !mt_checkpoint_get_meta(ck, "epoch") ||
                mt_checkpoint_num_files(ck) != 1))
        rc = mt__error(MT_EINVAL, "chaos: %s opened without its arrays, metadata or files",
                       (char *)path);
    mt_checkpoint_free(&ck);
    return rc;
}

static void test_load_and_open(void)
{
    char dir[1024], path[1100];
    snprintf(dir, sizeof dir, "%s/chaos-resume", mt_test_storage());
    mt_result *r = NULL;
    CU_ASSERT_EQUAL_FATAL(mt_result_load(dir, &r), MT_OK);
    snprintf(path, sizeof path, "%s", mt_checkpoint_path(mt_result_checkpoint(r)));
    mt_result_free(&r);
    chaos_case load = {"mt_result_load", NULL, load_op, load_op, LOCAL, 100};
    expect_injected(load.what, chaos_loop(NULL, &load, dir));
    chaos_case open = {"mt_checkpoint_open", NULL, open_ck_op, open_ck_op, LOCAL, 0};
    expect_injected(open.what, chaos_loop(NULL, &open, path));
}

/* ------------------------------------------------------------ shards */

#define NSETS 400
typedef struct {
    int next_name;
    mt_shard *s;
    int epoch;
} shard_state;

static char set_names[NSETS][16];

static int open_op(mt_context *c, void *st)
{
    shard_state *d = st;
    mt_shard *s = NULL;
    int rc = mt_get_dataset_shard(c, set_names[d->next_name], &s);
    if (!rc) {
        d->next_name++; /* a name opened once is kept by the context: take a fresh one */
        d->s = s;
    } else if (s)
        rc = mt__error(MT_EINVAL, "chaos: a failed mt_get_dataset_shard set *out");
    return rc;
}

static const mt_iter_options opts = {.batch_size = 7, .shuffle = true, .seed = 5};

static int begin_op(mt_context *c, void *st)
{
    shard_state *d = st;
    return mt_shard_begin_epoch(d->s, d->epoch++, &opts);
}

/* One epoch: every batch, every column converted. */
static int epoch_op(mt_context *c, void *st)
{
    shard_state *d = st;
    const mt_batch *b;
    int rc;
    size_t rows = 0;
    while ((rc = mt_shard_next(d->s, &b)) == 1) {
        rows += mt_batch_rows(b);
        if (!mt_batch_column(b, "x", MT_F64) || !mt_batch_column(b, "y", MT_I32) ||
            !mt_batch_column(b, "id", MT_I64))
            return mt_last_error()[0] && strstr(mt_last_error(), "memory") ? MT_ENOMEM
                                                                            : MT_EINVAL;
    }
    if (!rc && rows != (size_t)mt_shard_rows(d->s))
        rc = mt__error(MT_EINVAL, "chaos: an epoch of %zu rows, expected %lld", rows,
                       (long long)mt_shard_rows(d->s));
    return rc;
}

static int epoch_again(mt_context *c, void *st)
{
    int rc = begin_op(c, st);
    return rc ? rc : epoch_op(c, st);
}

static int shard_body(mt_context *c, void *arg)
{
    shard_state d = {0};
    chaos_case open = {"mt_get_dataset_shard", NULL, open_op, open_op, COLLECTIVE, 0};
    expect_injected(open.what, chaos_loop(c, &open, &d));
    CU_ASSERT_PTR_NOT_NULL_FATAL(d.s);
    /* begin_epoch (collective) starts the read-ahead, whose failure is the next call's
     * (local) error when that window is entered */
    chaos_case begin = {"mt_shard_begin_epoch and its epoch", NULL, epoch_again, epoch_again,
                        EITHER, 0};
    expect_injected(begin.what, chaos_loop(c, &begin, &d));
    /* local: the failing rank alone sees the error; every turn begins a new epoch */
    chaos_case epoch = {"mt_shard_next (an epoch)", begin_op, epoch_op, epoch_again, LOCAL, 0};
    long n = chaos_loop(c, &epoch, &d);
    /* with 2 ranks each rank's rows may all be read ahead on the read-ahead thread, whose
     * allocations are not counted (covered by the case above) */
    CU_ASSERT(n >= 0);
    if (mt_world_size(c) == 1)
        expect_injected(epoch.what, n);
    return MT_OK;
}

static void test_shards(void)
{
    char file[512];
    snprintf(file, sizeof file, "%s/chaos.h5", mt_test_storage());
    if (mt_test_rank() == 0)
        CU_ASSERT_EQUAL(fix_write_dataset(file, "/train", 101, FIX_CHUNKED, 0), 0);
    MPI_Barrier(MPI_COMM_WORLD);
    static const char *sets[2 * NSETS + 1];
    for (int i = 0; i < NSETS; i++) {
        snprintf(set_names[i], sizeof set_names[i], "d%d", i);
        sets[2 * i] = set_names[i];
        sets[2 * i + 1] = file;
    }
    mt_trainer_config cfg = config("chaos-shards");
    cfg.data.memory_limit = 2048; /* several windows an epoch */
    MT_ASSERT_INT_EQ(fit(&cfg, shard_body, NULL, sets), MT_OK);
}

/* ------------------------------------------------------------ fusion */

enum { NT = 5 };
static const size_t tsizes[NT] = {3, 0, 40, 1000, 9};

/* A fusion of one kind (options; the tensors in a block of mt_fusion_alloc or not). */
typedef struct {
    mt_fusion_options o;
    bool block;
    const char *name;
} fusion_kind;

typedef struct {
    float *t[NT];
    float *own[NT];       /* the tensors' own memory, when not in a block */
    mt_fusion *f;
    int rank, size;
    const fusion_kind *kind;
} fusion_state;

static void fill(fusion_state *s)
{
    for (int k = 0; k < NT; k++)
        for (size_t i = 0; i < tsizes[k]; i++)
            s->t[k][i] = (float)(s->rank + (int)i);
}

/* Exact with fp16 too: every value and mean (at most 1000.5) is an fp16 float. */
static int check_mean(const fusion_state *s)
{
    float mean = (float)(s->size - 1) / 2.0f;
    for (int k = 0; k < NT; k++)
        for (size_t i = 0; i < tsizes[k]; i++)
            if (s->t[k][i] != mean + (float)i)
                return mt__error(MT_EINVAL, "chaos: tensor %d[%zu] = %g, expected %g", k, i,
                                 (double)s->t[k][i], (double)(mean + (float)i));
    return MT_OK;
}

/* A step: readies (last tensor first, as a backward pass goes), then the wait. The wait
 * is reached whatever ready returned: it is where the step's errors are agreed. */
static int step(fusion_state *s)
{
    fill(s);
    int rc = MT_OK;
    for (int k = NT - 1; k >= 0; k--) {
        int e = mt_fusion_ready(s->f, k);
        rc = rc ? rc : e;
    }
    int e = mt_fusion_wait(s->f);
    rc = rc ? rc : e;
    return rc ? rc : check_mean(s);
}

static int add_all(fusion_state *s)
{
    int rc = MT_OK;
    for (int k = 0; k < NT; k++) {
        int idx = mt_fusion_add(s->f, s->t[k], tsizes[k]);
        if (idx < 0 && !rc)
            rc = idx;
    }
    return rc;
}

/* A new fusion of the state's kind in s->f, with its block for the tensors. */
static int new_fusion(fusion_state *s, mt_context *c)
{
    for (int k = 0; k < NT; k++)
        s->t[k] = s->own[k];
    int rc = mt_fusion_create_opts(c, &s->kind->o, &s->f);
    if (rc && s->f)
        rc = mt__error(MT_EINVAL, "chaos: a failed mt_fusion_create set *out");
    float *blk = NULL;
    size_t total = 0;
    for (int k = 0; k < NT; k++)
        total += tsizes[k];
    if (!rc && s->kind->block && !(rc = mt_fusion_alloc(s->f, total, &blk)))
        for (int k = 0, off = 0; k < NT; off += (int)tsizes[k++])
            s->t[k] = blk + off;
    if (rc && blk)
        rc = mt__error(MT_EINVAL, "chaos: a failed mt_fusion_alloc set *out");
    return rc;
}

static int create_op(mt_context *c, void *st)
{
    fusion_state *s = st;
    int rc = new_fusion(s, c);
    mt_fusion_destroy(&s->f);
    return rc;
}

/* Adds, then the first step. */
static int first_step_op(mt_context *c, void *st)
{
    fusion_state *s = st;
    int rc = add_all(s);
    int e = step(s);
    return rc ? rc : e;
}

static int later_step_op(mt_context *c, void *st) { return step(st); }

static int fresh_fusion(fusion_state *s, mt_context *c)
{
    mt_fusion_destroy(&s->f);
    return new_fusion(s, c);
}

static int fresh_op(mt_context *c, void *st) { return fresh_fusion(st, c); }

/* After a failed step the fusion is done with: destroy it, and a new one must work. */
static int fusion_again(mt_context *c, void *st)
{
    fusion_state *s = st;
    int rc = fresh_fusion(s, c);
    if (!rc)
        rc = add_all(s);
    for (int i = 0; i < 2 && !rc; i++)
        rc = step(s);
    return rc;
}

static int fusion_body(mt_context *c, void *arg)
{
    fusion_state s = {.rank = mt_world_rank(c), .size = mt_world_size(c), .kind = arg};
    for (int k = 0; k < NT; k++)
        s.own[k] = calloc(tsizes[k] + 1, sizeof(float));
    char what[3][160];
    snprintf(what[0], sizeof what[0], "mt_fusion_create (%s)", s.kind->name);
    snprintf(what[1], sizeof what[1], "mt_fusion_add/ready/wait, first step (%s)", s.kind->name);
    snprintf(what[2], sizeof what[2], "mt_fusion_ready/wait, later step (%s)", s.kind->name);
    chaos_case create = {what[0], NULL, create_op, create_op, COLLECTIVE, 0};
    expect_injected(create.what, chaos_loop(c, &create, &s));
    /* adds and the first step (the registration check), on a fresh fusion each turn */
    chaos_case first = {what[1], fresh_op, first_step_op, fusion_again, COLLECTIVE, 0};
    expect_injected(first.what, chaos_loop(c, &first, &s));
    /* a later step of a registered fusion that has done two steps */
    chaos_case later = {what[2], fusion_again, later_step_op, fusion_again, COLLECTIVE, 0};
    /* buffers are made at the registration check: a later step allocates nothing */
    MT_ASSERT_INT_EQ(chaos_loop(c, &later, &s), 0);
    mt_fusion_destroy(&s.f);
    for (int k = 0; k < NT; k++)
        free(s.own[k]);
    return MT_OK;
}

/* The default fusion with tensors of their own; a block from mt_fusion_alloc (shared
 * memory at 2 ranks); the hierarchical backend with fp16 on its leaders' step; flat with
 * fp16 (its 16-bit buffers). */
static void test_fusion(void)
{
    static const fusion_kind kinds[] = {
        {{.bucket_bytes = 64}, false, "default"},
        {{.bucket_bytes = 64}, true, "in a block"},
        {{.bucket_bytes = 64, .algo = MT_FUSION_HIER, .compression = MT_COMPRESS_FP16}, true,
         "hier, fp16, in a block"},
        {{.bucket_bytes = 64, .algo = MT_FUSION_FLAT, .compression = MT_COMPRESS_FP16}, false,
         "flat, fp16"},
    };
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++) {
        char name[32];
        snprintf(name, sizeof name, "chaos-fusion-%zu", i);
        mt_trainer_config cfg = config(name);
        MT_ASSERT_INT_EQ(fit(&cfg, fusion_body, (void *)&kinds[i], NULL), MT_OK);
    }
}

static const mt_test tests[] = {
    {"report", test_report},
    {"report_checkpoint", test_report_checkpoint},
    {"restore", test_restore},
    {"resume_fit", test_resume_fit},
    {"load_and_open", test_load_and_open},
    {"shards", test_shards},
    {"fusion", test_fusion},
    {NULL, NULL},
};

int main(int argc, char **argv)
{
    json_set_alloc_funcs(json_malloc, free);
    return mt_test_main(argc, argv, "chaos", tests, true);
}
