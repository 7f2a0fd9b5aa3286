/*
 * test_mpi_input.c -- under mpirun at 1 to 4 ranks: hostile input and API misuse.
 * Datasets whose files lie (2^50 rows in a few KiB, 32 dimensions, rows too wide to
 * address, very long column names), batch sizes up to SIZE_MAX, a run.json whose
 * checkpoint names point outside the run, and a program that keeps a context, shard,
 * batch or restored checkpoint past fit, calls fit from its training function, or
 * finalises inside it. Every case is a clear error (the same on every rank where the call
 * is collective), never a crash, a hang, a huge allocation or a file touched outside the
 * run.
 */
#include "harness.h"

#include "../runtime/runtime.h"
#include "../io/h5.h"

#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A group /g with one uint8 column per name, of the given shape; chunked and never
 * written when the shape is larger than `write_max` elements (so a tiny file claims it). */
static void write_columns(const char *file, const char *const *names, int n, int nd,
                          const hsize_t *dims)
{
    hid_t f = H5Fcreate(file, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hid_t g = H5Gcreate2(f, "/g", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t elems = 1, chunk[32];
    for (int d = 0; d < nd; d++) {
        if (dims[d] && elems > ((hsize_t)1 << 40) / dims[d])
            elems = (hsize_t)1 << 41;
        else
            elems *= dims[d];
        chunk[d] = 1;
    }
    chunk[0] = dims[0] < 4096 ? dims[0] : 4096;
    for (int i = 0; i < n; i++) {
        hid_t sp = H5Screate_simple(nd, dims, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
        bool small = elems <= 1 << 20;
        if (!small)
            H5Pset_chunk(dcpl, nd, chunk);
        hid_t ds = H5Dcreate2(g, names[i], H5T_NATIVE_UINT8, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
        if (small) {
            unsigned char *v = calloc(elems ? elems : 1, 1);
            for (hsize_t k = 0; k < elems; k++)
                v[k] = (unsigned char)k;
            H5Dwrite(ds, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
            free(v);
        }
        H5Dclose(ds);
        H5Pclose(dcpl);
        H5Sclose(sp);
    }
    H5Gclose(g);
    H5Fclose(f);
}

static char long255[256], long256[257], long1000[1001], long3000[3001];

static void make_files(void)
{
    memset(long255, 'a', 255);
    memset(long256, 'b', 256);
    memset(long1000, 'c', 1000);
    memset(long3000, 'd', 3000);
    if (mt_test_rank() == 0) {
        const char *one[] = {"x"};
        hsize_t rows[1] = {64};
        write_columns(mt_test_path("small.h5"), one, 1, 1, rows);
        hsize_t huge[2] = {(hsize_t)1 << 50, 1};
        write_columns(mt_test_path("huge.h5"), one, 1, 2, huge);
        hsize_t deep[32];
        for (int d = 0; d < 32; d++)
            deep[d] = 1;
        deep[0] = 8;
        write_columns(mt_test_path("deep.h5"), one, 1, 32, deep);
        hsize_t wide[3] = {4, (hsize_t)1 << 30, (hsize_t)1 << 20};
        write_columns(mt_test_path("wide.h5"), one, 1, 3, wide);
        hsize_t fat[2] = {64, (hsize_t)1 << 30}; /* 64 rows of 1 GiB, in a few KiB */
        write_columns(mt_test_path("fat.h5"), one, 1, 2, fat);
        hsize_t tenten[2] = {10000000000ULL, 1};
        write_columns(mt_test_path("tenten.h5"), one, 1, 2, tenten);
        const char *longs[] = {long255, long256, long1000, long3000, "y"};
        write_columns(mt_test_path("long.h5"), longs, 5, 1, rows);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

/* One fit of run `name` with dataset "d" from the fixture `file` (NULL: none). */
static int fit_one(const char *name, mt_train_fn fn, void *arg, const char *file,
                   mt_data_config data, int max_failures, int verbose, char *err, size_t len)
{
    mt_trainer_config cfg = mt_test_config(name);
    cfg.run.overwrite = true;
    cfg.run.verbose = verbose;
    cfg.run.failure.max_failures = max_failures;
    cfg.data = data;
    mt_test_dataset d = {"d", file ? mt_test_path(file) : NULL, "/g"};
    return mt_test_fit_datasets(cfg, fn, arg, &d, file ? 1 : 0, err, len);
}

/* ------------------------------------------------------------ batch sizes */

typedef struct { size_t bs; bool drop_last; int64_t batches, rows; } batch_arg;

static int count_batches(mt_context *c, void *varg)
{
    batch_arg *a = varg;
    mt_shard *s;
    int rc = mt_get_dataset_shard(c, "d", &s);
    if (!rc)
        rc = mt_shard_begin_epoch(s, 0, &(mt_iter_options){.batch_size = a->bs, .shuffle = true,
                                                           .drop_last = a->drop_last});
    const mt_batch *b;
    a->batches = a->rows = 0;
    int more = rc ? rc : 1;
    while (more == 1 && (more = mt_shard_next(s, &b)) == 1) {
        a->batches++;
        a->rows += (int64_t)mt_batch_rows(b);
        if (!mt_batch_column(b, "x", MT_F64))
            return MT_EIO;
    }
    return more;
}

/* batch_size from 2^32 (a division by zero on every rank) to SIZE_MAX (an allocation by
 * batch size): a batch holds at most the shard's rows. */
static void test_huge_batch_sizes(void)
{
    size_t sizes[] = {(size_t)1 << 32, ((size_t)1 << 32) + 1, 1000000000, SIZE_MAX,
                      SIZE_MAX / 2 + 1, 65};
    int64_t per_rank = 64 / mt_test_size();
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        batch_arg a = {.bs = sizes[i]};
        char err[1024];
        MT_ASSERT_INT_EQ(fit_one("batch", count_batches, &a, "small.h5", (mt_data_config){0},
                                 0, MT_VERBOSE_SILENT, err, sizeof err), MT_OK);
        MT_ASSERT_INT_EQ(a.batches, 1); MT_ASSERT_STR_EQ(err, "");
        MT_ASSERT_INT_EQ(a.rows, per_rank);
        a.drop_last = true; /* the one batch is incomplete: dropped */
        err[0] = 0;
        MT_ASSERT_INT_EQ(fit_one("batch", count_batches, &a, "small.h5", (mt_data_config){0},
                                 0, MT_VERBOSE_SILENT, err, sizeof err), MT_OK);
        MT_ASSERT_INT_EQ(a.batches, 0);
        MT_ASSERT_STR_EQ(err, "");
    }
}

/* ------------------------------------------------------------ files that lie */

typedef struct {
    long grown_kib;
    int64_t rows;
} huge_arg;

static int read_one_batch(mt_context *c, void *varg)
{
    huge_arg *a = varg;
    long base = mt_test_status_kib("VmRSS");
    mt_shard *s;
    int rc = mt_get_dataset_shard(c, "d", &s);
    if (!rc)
        rc = mt_shard_begin_epoch(s, 0, &(mt_iter_options){.batch_size = 16, .shuffle = true});
    const mt_batch *b;
    if (!rc)
        rc = mt_shard_next(s, &b) == 1 ? MT_OK : MT_EIO;
    a->rows = mt_shard_rows(s);
    a->grown_kib = mt_test_status_kib("VmRSS") - base;
    return rc;
}

/* A dataset claiming 2^50 rows in a small file: planning the epoch must not allocate by
 * rows (it took 5-8 GiB per rank). The stated bound is 40 MiB per shard; windows are
 * bounded by data.memory_limit (1 MiB here). */
static void test_plan_memory_is_bounded(void)
{
    huge_arg a = {0};
    char err[1024];
    MT_ASSERT_INT_EQ(fit_one("huge", read_one_batch, &a, "huge.h5",
                             (mt_data_config){.memory_limit = 1 << 20}, 0, MT_VERBOSE_SILENT, err,
                             sizeof err), MT_OK);
    CU_ASSERT(a.rows == ((int64_t)1 << 50) / mt_test_size());
    if (a.grown_kib > 64 * 1024)
        fprintf(stderr, "rank %d: resident memory grew %ld KiB planning 2^50 rows\n",
                mt_test_rank(), a.grown_kib);
    CU_ASSERT(a.grown_kib < 64 * 1024);
}

/* 10^10 rows plan like any other (the plan is a few words, plan.c), and rows claimed so
 * wide that one batch is more than data.memory_limit are refused at the start of the
 * epoch on every rank, naming the dataset and the sizes, before any window is allocated. */
static void test_claimed_sizes(void)
{
    huge_arg a = {0};
    char err[1024];
    MT_ASSERT_INT_EQ(fit_one("tenten", read_one_batch, &a, "tenten.h5",
                             (mt_data_config){.memory_limit = 1 << 20}, 0, MT_VERBOSE_SILENT, err,
                             sizeof err), MT_OK);
    CU_ASSERT(a.rows == 10000000000LL / mt_test_size());
    CU_ASSERT(a.grown_kib < 64 * 1024);
    a = (huge_arg){0};
    MT_ASSERT_INT_EQ(fit_one("fat", read_one_batch, &a, "fat.h5", (mt_data_config){0}, 0,
                             MT_VERBOSE_SILENT, err, sizeof err), MT_EINVAL);
    MT_ASSERT_STR_CONTAINS(err, "fat.h5:/g): a batch of 16 rows of 1073741824 bytes is more "
                                "than data.memory_limit (1073741824 bytes)");
    if (a.grown_kib > 64 * 1024)
        fprintf(stderr, "rank %d: resident memory grew %ld KiB refusing a batch of 16 GiB\n",
                mt_test_rank(), a.grown_kib);
    CU_ASSERT(a.grown_kib < 64 * 1024);
}

static int open_only(mt_context *c, void *varg)
{
    mt_shard *s;
    int rc = mt_get_dataset_shard(c, "d", &s);
    if (!rc && varg) {
        const char **want = varg;
        for (int i = 0; want[i]; i++) { /* every name whole, never cut to a buffer */
            bool found = false;
            for (int k = 0; k < mt_shard_num_columns(s); k++)
                found |= !strcmp(mt_shard_column_name(s, k), want[i]);
            if (!found)
                return mt__error(MT_EINVAL, "column %zu bytes long is missing", strlen(want[i]));
        }
    }
    return rc;
}

/* More dimensions than the fixed arrays hold, rows wider than memory: MT_EFORMAT naming
 * the file and column on every rank. */
static void test_columns_beyond_limits(void)
{
    char err[1024];
    MT_ASSERT_INT_EQ(fit_one("deep", open_only, NULL, "deep.h5", (mt_data_config){0}, 0,
                             MT_VERBOSE_SILENT, err, sizeof err), MT_EFORMAT);
    MT_ASSERT_STR_CONTAINS(err, "deep.h5:/g/x: has 32 dimensions (need 1 to 8");
    MT_ASSERT_INT_EQ(fit_one("wide", open_only, NULL, "wide.h5", (mt_data_config){0}, 0,
                             MT_VERBOSE_SILENT, err, sizeof err), MT_EFORMAT);
    MT_ASSERT_STR_CONTAINS(err, "wide.h5:/g/x: a row of shape");
}

/* Column names at and past 255 bytes (HDF5 allows long names): opened whole, and the
 * description rank 0 prints holds each in full (it overflowed a stack buffer). */
static void test_long_column_names(void)
{
    const char *want[] = {long255, long256, long1000, long3000, "y", NULL};
    char err[1024], out[600];
    snprintf(out, sizeof out, "%s", mt_test_path("describe.txt"));
    int saved = -1;
    if (mt_test_rank() == 0) { /* rank 0's stdout into a file for the length of the fit */
        fflush(stdout);
        saved = dup(1);
        FILE *f = fopen(out, "w");
        dup2(fileno(f), 1);
        fclose(f);
    }
    int rc = fit_one("long", open_only, want, "long.h5", (mt_data_config){0}, 0, 1, err,
                     sizeof err);
    if (mt_test_rank() == 0) {
        fflush(stdout);
        dup2(saved, 1);
        close(saved);
    }
    MT_ASSERT_INT_EQ(rc, MT_OK);
    MT_ASSERT_STR_EQ(err, "");
    if (mt_test_rank() == 0) {
        FILE *f = fopen(out, "r");
        char *text = calloc(1, 1 << 16);
        size_t n = f ? fread(text, 1, (1 << 16) - 1, f) : 0;
        text[n] = '\0';
        if (f)
            fclose(f);
        for (int i = 0; i < 4; i++) {
            char needle[3100];
            snprintf(needle, sizeof needle, " %s (u8)", want[i]);
            CU_ASSERT(strstr(text, needle) != NULL);
        }
        MT_ASSERT_STR_CONTAINS(text, ", y (u8); split over");
        free(text);
    }
}

/* ------------------------------------------------------------ run.json from outside */

static int report_once(mt_context *c, void *arg)
{
    mt_metrics *m = mt_metrics_new();
    mt_metrics_set_i64(m, "i", 1);
    int rc = mt_report(c, m, NULL);
    mt_metrics_free(&m);
    return rc;
}

static int report_once_counted(mt_context *c, void *arg)
{
    (*(int *)arg)++;
    return report_once(c, NULL);
}

/* A run.json naming "../victim" as a checkpoint (a resume point, or a folder retention
 * would delete): every rank gets MT_EFORMAT naming run.json before training, and the
 * folder outside the run is untouched. */
static void test_run_json_outside_names(void)
{
    char victim[512], keep[600], run[512], file[600];
    snprintf(victim, sizeof victim, "%s/victim", mt_test_storage());
    snprintf(keep, sizeof keep, "%s/keep.txt", victim);
    snprintf(run, sizeof run, "%s/hostile", mt_test_storage());
    const char *latest[] = {"null", "\"../victim\""};
    for (int k = 0; k < 2; k++) {
        if (mt_test_rank() == 0) {
            mkdir(mt_test_storage(), 0755);
            mkdir(victim, 0755);
            FILE *f = fopen(keep, "w");
            fputs("precious\n", f);
            fclose(f);
            mkdir(run, 0755);
            snprintf(file, sizeof file, "%s/run.json", run);
            f = fopen(file, "w");
            fprintf(f, "{\"status\": \"running\", \"attempts\": 1, \"failures\": 0, "
                       "\"next_checkpoint_index\": 2, \"training_iteration\": 1, "
                       "\"time_total_s\": 1.0, \"checkpoints\": [{\"name\": \"%s\", \"index\": 0, "
                       "\"training_iteration\": 1, \"metrics\": {}}], \"latest\": %s}",
                    k ? "checkpoint_000000" : "../victim", latest[k]);
            fclose(f);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        mt_trainer_config cfg = mt_test_config("hostile");
        cfg.run.checkpoint.num_to_keep = 1;
        char err[1024];
        MT_ASSERT_INT_EQ(mt_test_fit_datasets(cfg, report_once, NULL, NULL, 0, err, sizeof err),
                         MT_EFORMAT);
        MT_ASSERT_STR_CONTAINS(err, "hostile/run.json: ");
        MPI_Barrier(MPI_COMM_WORLD);
        if (mt_test_rank() == 0)
            CU_ASSERT(access(keep, R_OK) == 0);
    }
    /* a run_id that is not the 32 hex digits a run is given: corrupt, named */
    if (mt_test_rank() == 0) {
        FILE *f = fopen(file, "w");
        fprintf(f, "{\"run_id\": \"../victim\", \"status\": \"running\", \"attempts\": 1, "
                   "\"failures\": 0, \"next_checkpoint_index\": 0, \"training_iteration\": 0, "
                   "\"time_total_s\": 1.0, \"checkpoints\": []}");
        fclose(f);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    char err[1024];
    MT_ASSERT_INT_EQ(mt_test_fit_datasets(mt_test_config("hostile"), report_once, NULL, NULL, 0,
                                          err, sizeof err), MT_EFORMAT);
    MT_ASSERT_STR_CONTAINS(err, "hostile/run.json: corrupt run state: run_id \"../victim\" is "
                                "not 32 hex digits");
}



/* Resume from a checkpoint.h5 whose array has 32 dimensions (it overflowed dims[8] on
 * rank 0): the checkpoint is skipped with a warning naming the file and array, and the
 * run starts from the beginning on every rank. */
typedef struct { int attempt_seen; bool restored; } resume_arg;

static int fail_after_checkpoint(mt_context *c, void *varg)
{
    resume_arg *a = varg;
    a->attempt_seen = mt_attempt(c);
    a->restored = mt_get_checkpoint(c) != NULL;
    if (mt_attempt(c) > 0) /* the second start completes, restored or not */
        return MT_OK;
    mt_checkpoint *ck = mt_checkpoint_new();
    int v = 1;
    mt_checkpoint_put(ck, "v", MT_I32, 1, (size_t[]){1}, &v, MT_REPLICATED);
    mt_metrics *m = mt_metrics_new();
    mt_metrics_set_i64(m, "i", 0);
    int rc = mt_report(c, m, ck);
    mt_metrics_free(&m);
    mt_checkpoint_free(&ck);
    return rc ? rc : MT_EIO;
}

static void test_resume_from_deep_checkpoint(void)
{
    mt_trainer_config cfg = {.run = {.storage_path = mt_test_storage(), .name = "deepck",
                                     .verbose = MT_VERBOSE_SILENT}};
    resume_arg a = {0};
    mt_trainer *t = NULL;
    CU_ASSERT_EQUAL_FATAL(mt_trainer_create(&t, fail_after_checkpoint, &a, &cfg), MT_OK);
    MT_ASSERT_INT_EQ(mt_trainer_fit(t, NULL), MT_EIO);
    MPI_Barrier(MPI_COMM_WORLD);
    if (mt_test_rank() == 0) { /* the same file, plus a 32-dimensional array */
        char h5[600];
        snprintf(h5, sizeof h5, "%s/deepck/checkpoint_000000/checkpoint.h5", mt_test_storage());
        hid_t f = H5Fopen(h5, H5F_ACC_RDWR, H5P_DEFAULT);
        CU_ASSERT(f >= 0);
        hsize_t dims[32];
        for (int d = 0; d < 32; d++)
            dims[d] = 1;
        hid_t sp = H5Screate_simple(32, dims, NULL);
        hid_t ds = H5Dcreate2(f, "deep", H5T_NATIVE_UINT8, sp, H5P_DEFAULT, H5P_DEFAULT,
                              H5P_DEFAULT);
        unsigned char one = 1;
        H5Dwrite(ds, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, &one);
        H5Dclose(ds);
        H5Sclose(sp);
        H5Fclose(f);
        MT_ASSERT_INT_EQ(mt__ckpt_reseal(h5), MT_OK); /* the 32 dimensions are what refuses it */
    }
    MPI_Barrier(MPI_COMM_WORLD);
    a = (resume_arg){0};
    MT_ASSERT_INT_EQ(mt_trainer_fit(t, NULL), MT_OK);
    MT_ASSERT_INT_EQ(a.attempt_seen, 1);
    CU_ASSERT(!a.restored); /* skipped, not restored */
    mt_trainer_destroy(&t);
    /* mt_result_load lists it without its arrays, and does not crash */
    char run[600];
    snprintf(run, sizeof run, "%s/deepck", mt_test_storage());
    mt_result *r = NULL;
    MT_ASSERT_INT_EQ(mt_result_load(run, &r), MT_OK);
    mt_result_free(&r);
}

/* ------------------------------------------------------------ one rank's bad input */

/* A bad environment knob on the last rank only: every rank leaves fit with the same
 * error before training, naming that rank and the variable. */
static void test_bad_env_on_one_rank(void)
{
    int last = mt_test_size() - 1;
    if (mt_test_rank() == last)
        setenv("MT_IO_READAHEAD", "yes", 1);
    char err[1024];
    int calls = 0;
    int rc = fit_one("envrank", report_once_counted, &calls, NULL, (mt_data_config){0}, 0,
                     MT_VERBOSE_SILENT, err, sizeof err);
    unsetenv("MT_IO_READAHEAD");
    MT_ASSERT_INT_EQ(rc, MT_EINVAL);
    char want[128];
    snprintf(want, sizeof want, "rank %d failed: MT_IO_READAHEAD: 'yes' is not 0 or 1", last);
    MT_ASSERT_STR_CONTAINS(err, want);
    MT_ASSERT_INT_EQ(calls, 0);
}

/* ------------------------------------------------------------ API misuse */

typedef struct {
    mt_trainer *self;
    mt_context *ctx;
    mt_shard *shard;
    const mt_batch *batch;
    const mt_checkpoint *restored;
    mt_fusion *fusion;
    float grad[4];
    int calls;
    int nested_rc, finalize_rc;
    char nested_msg[256];
} keep_arg;

static int keeps_things(mt_context *c, void *varg)
{
    keep_arg *a = varg;
    a->calls++;
    a->ctx = c;
    int rc = mt_get_dataset_shard(c, "d", &a->shard);
    if (!rc)
        rc = mt_shard_begin_epoch(a->shard, 0, &(mt_iter_options){.batch_size = 4});
    if (!rc)
        rc = mt_shard_next(a->shard, &a->batch) == 1 ? MT_OK : MT_EIO;
    if (rc)
        return rc;
    if (mt_attempt(c) == 0) { /* a checkpoint, then a failure: attempt 1 restores it */
        mt_checkpoint *ck = mt_checkpoint_new();
        int v = 7;
        mt_checkpoint_put(ck, "v", MT_I32, 1, (size_t[]){1}, &v, MT_REPLICATED);
        mt_metrics *m = mt_metrics_new();
        mt_metrics_set_i64(m, "i", 0);
        rc = mt_report(c, m, ck);
        mt_metrics_free(&m);
        mt_checkpoint *copy = ck;
        mt_checkpoint_free(&ck);
        /* a copy of a freed checkpoint: refused, not read */
        MT_ASSERT_INT_EQ(mt_checkpoint_put(copy, "w", MT_I32, 1, (size_t[]){1}, &v,
                                           MT_REPLICATED), MT_EINVAL);
        MT_ASSERT_STR_CONTAINS(mt_last_error(), "not a live checkpoint");
        mt_checkpoint_free(&copy); /* a second free: refused */
        CU_ASSERT_PTR_NOT_NULL(copy);
        return rc ? rc : MT_EIO;
    }
    a->restored = mt_get_checkpoint(c);
    if (!a->fusion && mt_fusion_create(c, 0, &a->fusion) == MT_OK) { /* kept past fit */
        mt_fusion_add(a->fusion, a->grad, 4);
        mt_fusion_ready(a->fusion, 0);
        if ((rc = mt_fusion_wait(a->fusion)))
            return rc;
    }
    /* fit from inside the training function: refused, the function is not run again */
    a->nested_rc = mt_trainer_fit(a->self, NULL);
    snprintf(a->nested_msg, sizeof a->nested_msg, "%s", mt_last_error());
    a->finalize_rc = mt_finalize();
    mt_trainer_destroy(&a->self); /* refused while its fit runs */
    return a->self ? MT_OK : MT_EIO;
}

/* A context, shard, batch or restored checkpoint kept past fit; fit from inside the
 * training function; mt_finalize and mt_trainer_destroy inside it: MT_EINVAL (or a
 * refusal) with a message, never a use after free or a second run of the function. */
static void test_misuse_after_and_inside_fit(void)
{
    keep_arg a = {0};
    mt_trainer_config cfg = {.run = {.storage_path = mt_test_storage(), .overwrite = true,
                                     .name = "misuse", .verbose = MT_VERBOSE_SILENT,
                                     .failure.max_failures = 1}};
    CU_ASSERT_EQUAL_FATAL(mt_trainer_create(&a.self, keeps_things, &a, &cfg), MT_OK);
    CU_ASSERT_EQUAL(mt_trainer_add_dataset(a.self, "d", mt_test_path("small.h5"), "/g"), MT_OK);
    mt_result *r = NULL;
    MT_ASSERT_INT_EQ(mt_trainer_fit(a.self, &r), MT_OK);
    mt_result_free(&r);
    MT_ASSERT_INT_EQ(a.calls, 2); /* attempt 0 and the retry, and nothing more */
    MT_ASSERT_INT_EQ(a.nested_rc, MT_EINVAL);
    MT_ASSERT_STR_CONTAINS(a.nested_msg, "a fit is running already");
    MT_ASSERT_INT_EQ(a.finalize_rc, MT_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(a.restored);
    /* everything fit owned is gone: each call says so */
    mt_metrics *m = mt_metrics_new();
    mt_metrics_set_i64(m, "i", 1);
    MT_ASSERT_INT_EQ(mt_report(a.ctx, m, NULL), MT_EINVAL);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "mt_report: not a live context");
    mt_metrics_free(&m);
    MT_ASSERT_INT_EQ(mt_world_size(a.ctx), 0);
    MT_ASSERT_INT_EQ(mt_world_rank(a.ctx), -1);
    CU_ASSERT_PTR_NULL(mt_run_dir(a.ctx));
    CU_ASSERT(!mt_should_checkpoint(a.ctx));
    double x = 1;
    MT_ASSERT_INT_EQ(mt_allreduce(a.ctx, &x, 1, MT_F64, MT_SUM), MT_EINVAL);
    MT_ASSERT_INT_EQ(mt_barrier(a.ctx), MT_EINVAL);
    CU_ASSERT_PTR_NULL(mt_get_checkpoint(a.ctx));
    mt_shard *s = NULL;
    MT_ASSERT_INT_EQ(mt_get_dataset_shard(a.ctx, "d", &s), MT_EINVAL);
    const mt_batch *b = NULL;
    MT_ASSERT_INT_EQ(mt_shard_next(a.shard, &b), MT_EINVAL);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "not a live shard");
    MT_ASSERT_INT_EQ(mt_shard_begin_epoch(a.shard, 1, NULL), MT_EINVAL);
    MT_ASSERT_INT_EQ(mt_shard_rows(a.shard), 0);
    CU_ASSERT_PTR_NULL(mt_shard_column_name(a.shard, 0));
    MT_ASSERT_INT_EQ(mt_batch_rows(a.batch), 0);
    CU_ASSERT_PTR_NULL(mt_batch_column(a.batch, "x", MT_U8));
    int v = 0;
    MT_ASSERT_INT_EQ(mt_checkpoint_get(a.restored, "v", MT_I32, &v, 1), MT_EINVAL);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "not a live checkpoint");
    CU_ASSERT_PTR_NULL(mt_checkpoint_path(a.restored));
    MT_ASSERT_INT_EQ(mt_fusion_ready(a.fusion, 0), MT_EINVAL);
    MT_ASSERT_INT_EQ(mt_fusion_wait(a.fusion), MT_EINVAL);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "the fusion's context ended with its fit");
    MT_ASSERT_INT_EQ(mt_fusion_add(a.fusion, a.grad, 4), MT_EINVAL);
    mt_fusion_destroy(&a.fusion); /* still the program's to free */
    CU_ASSERT_PTR_NULL(a.fusion);
    /* the trainer survived its refused destroy and can run again */
    CU_ASSERT_PTR_NOT_NULL_FATAL(a.self);
    mt_trainer_destroy(&a.self);
    CU_ASSERT_PTR_NULL(a.self);
}

/* ------------------------------------------------------------ checkpoints where they belong */

/* Reports iterations up to 4, a checkpoint each holding v = its iteration; the first fit
 * fails after iteration 3 (checkpoints 0..2 for iterations 1..3). A resumed one records
 * what it was given back. */
typedef struct { int64_t start; int restored_v; bool fail; } swap_arg;

static int counted(mt_context *c, void *varg)
{
    swap_arg *a = varg;
    const mt_checkpoint *ck = mt_get_checkpoint(c);
    a->start = mt_training_iteration(c);
    a->restored_v = -1;
    int v = -1, rc = ck ? mt_checkpoint_get(ck, "v", MT_I32, &v, 1) : MT_OK;
    a->restored_v = v;
    for (int64_t it = a->start + 1; it <= 4 && !rc; it++) {
        mt_checkpoint *out = mt_checkpoint_new();
        int w = (int)it;
        mt_checkpoint_put(out, "v", MT_I32, 1, (size_t[]){1}, &w, MT_REPLICATED);
        mt_metrics *m = mt_metrics_new();
        mt_metrics_set_i64(m, "v", w);
        rc = mt_report(c, m, out);
        mt_metrics_free(&m);
        mt_checkpoint_free(&out);
        if (!rc && a->fail && it == 3)
            rc = mt__error(MT_EIO, "fail after iteration 3");
    }
    return rc;
}

static void ck_file(char *out, size_t n, const char *run, int index)
{
    snprintf(out, n, "%s/%s/checkpoint_%06d/checkpoint.h5", mt_test_storage(), run, index);
}

static void copy_file(const char *from, const char *to)
{
    FILE *in = fopen(from, "rb"), *o = in ? fopen(to, "wb") : NULL;
    char buf[8192];
    size_t n;
    while (o && (n = fread(buf, 1, sizeof buf, in)) > 0)
        CU_ASSERT(fwrite(buf, 1, n, o) == n);
    CU_ASSERT(in && o);
    if (o)
        fclose(o);
    if (in)
        fclose(in);
}

/* A failed run "name" with checkpoints for iterations 1..3; damage() on rank 0; then the
 * rerun: where it started and what it was given back. */
static void rerun_after(const char *name, void (*damage)(const char *name), swap_arg *a)
{
    mt_trainer_config cfg = {.run = {.storage_path = mt_test_storage(), .name = name,
                                     .verbose = MT_VERBOSE_SILENT}};
    *a = (swap_arg){.fail = true};
    MT_ASSERT_INT_EQ(mt_test_fit(cfg, counted, a, NULL), MT_EIO);
    MPI_Barrier(MPI_COMM_WORLD);
    if (mt_test_rank() == 0)
        damage(name);
    MPI_Barrier(MPI_COMM_WORLD);
    *a = (swap_arg){.fail = false};
    mt_result *r = NULL;
    MT_ASSERT_INT_EQ(mt_test_fit(cfg, counted, a, &r), MT_OK);
    /* every iteration once in the history, whichever checkpoint it went on from */
    MT_ASSERT_INT_EQ((int)mt_result_num_rows(r), 4);
    for (size_t i = 0; i < mt_result_num_rows(r); i++) {
        int64_t it = 0;
        MT_ASSERT_INT_EQ(mt_metrics_get_i64(mt_result_row(r, i), "training_iteration", &it),
                         MT_OK);
        MT_ASSERT_INT_EQ((int)it, (int)i + 1);
    }
    mt_result_free(&r);
}

static void swap_latest(const char *name)
{
    char from[600], to[600]; /* the latest folder now holds the first one's file */
    ck_file(from, sizeof from, name, 0);
    ck_file(to, sizeof to, name, 2);
    copy_file(from, to);
}

static void other_runs(const char *name)
{
    char from[600], to[600]; /* another run's checkpoint_000002: same name, same iteration */
    ck_file(from, sizeof from, "belong_other", 2);
    ck_file(to, sizeof to, name, 2);
    copy_file(from, to);
}

static void linked_latest(const char *name)
{
    char dir[600], target[600]; /* the latest folder a link to another run's */
    snprintf(dir, sizeof dir, "%s/%s/checkpoint_000002", mt_test_storage(), name);
    snprintf(target, sizeof target, "%s/belong_other/checkpoint_000002", mt_test_storage());
    CU_ASSERT(mt__rmtree(dir) == MT_OK && symlink(target, dir) == 0);
}

/* Checkpoints as written before the three keys (the commits' test-only site
 * commit-unstamped): nothing in them says where they belong. */
static void legacy_none(const char *name)
{
    char h5[600];
    ck_file(h5, sizeof h5, name, 2);
    mt_checkpoint *ck = NULL;
    char dir[600];
    snprintf(dir, sizeof dir, "%s/%s/checkpoint_000002", mt_test_storage(), name);
    MT_ASSERT_INT_EQ(mt_checkpoint_open(dir, &ck), MT_OK);
    CU_ASSERT_PTR_NULL(mt_checkpoint_get_meta(ck, "mt.run"));
    mt_checkpoint_free(&ck);
    /* and a run.json from before run identities */
    char path[600];
    snprintf(path, sizeof path, "%s/%s/run.json", mt_test_storage(), name);
    json_t *j = json_load_file(path, 0, NULL);
    CU_ASSERT(j && json_object_del(j, "run_id") == 0 && json_dump_file(j, path, 0) == 0);
    json_decref(j);
}

static void test_checkpoints_where_they_belong(void)
{
    swap_arg a;
    /* a file copied over the latest: skipped, the next older one (iteration 2) restored */
    rerun_after("belong_swap", swap_latest, &a);
    MT_ASSERT_INT_EQ((int)a.start, 2);
    MT_ASSERT_INT_EQ(a.restored_v, 2);
    /* another run's checkpoint of the same name and iteration: skipped too */
    mt_trainer_config other = {.run = {.storage_path = mt_test_storage(), .name = "belong_other",
                                       .verbose = MT_VERBOSE_SILENT}};
    swap_arg o = {.fail = false};
    MT_ASSERT_INT_EQ(mt_test_fit(other, counted, &o, NULL), MT_OK);
    rerun_after("belong_foreign", other_runs, &a);
    MT_ASSERT_INT_EQ((int)a.start, 2);
    MT_ASSERT_INT_EQ(a.restored_v, 2);
    /* the latest folder a link to another run's: not followed, the next older one */
    rerun_after("belong_link", linked_latest, &a);
    MT_ASSERT_INT_EQ((int)a.start, 2);
    MT_ASSERT_INT_EQ(a.restored_v, 2);
    /* checkpoints without the keys (older ones): restored by their checksums, the latest */
    setenv("MT_TEST_FAIL_AT", "commit-unstamped:0", 1);
    rerun_after("belong_legacy", legacy_none, &a);
    unsetenv("MT_TEST_FAIL_AT");
    MT_ASSERT_INT_EQ((int)a.start, 3);
    MT_ASSERT_INT_EQ(a.restored_v, 3);
}

/* --overwrite never deletes what the same fit still needs: a dataset file or the
 * checkpoint to start from inside the run it would clear is refused, nothing deleted. */
static void test_overwrite_keeps_inputs(void)
{
    mt_trainer_config cfg = mt_test_config("ovw_inputs");
    swap_arg a = {.fail = false};
    MT_ASSERT_INT_EQ(mt_test_fit(cfg, counted, &a, NULL), MT_OK);
    char data[600], ck[600];
    snprintf(data, sizeof data, "%s/ovw_inputs/data.h5", mt_test_storage());
    snprintf(ck, sizeof ck, "%s/ovw_inputs/checkpoint_000003", mt_test_storage());
    MPI_Barrier(MPI_COMM_WORLD);
    if (mt_test_rank() == 0)
        copy_file(mt_test_path("small.h5"), data);
    MPI_Barrier(MPI_COMM_WORLD);
    cfg.run.overwrite = true;
    mt_test_dataset d = {"d", data, "/g"};
    char err[1024] = "";
    MT_ASSERT_INT_EQ(mt_test_fit_datasets(cfg, counted, &a, &d, 1, err, sizeof err), MT_EINVAL);
    MT_ASSERT_STR_CONTAINS(err, "dataset d's file");
    MT_ASSERT_STR_CONTAINS(err, "would clear");
    cfg.run.resume_from_checkpoint = ck;
    MT_ASSERT_INT_EQ(mt_test_fit(cfg, counted, &a, NULL), MT_EINVAL);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "run.resume_from_checkpoint");
    struct stat st;
    CU_ASSERT(stat(data, &st) == 0 && stat(ck, &st) == 0); /* nothing deleted */
    CU_ASSERT(stat(mt_test_run_file("ovw_inputs", "run.json"), &st) == 0);
}

/* A link where a run file should be (run.lock, run.json, result.json, progress.csv): every
 * rank returns the error naming it (through the agreement), and the file it points at is
 * neither written nor truncated. */
static void test_links_refused_on_every_rank(void)
{
    static const char *const files[] = {"run.lock", "run.json", "result.json", "progress.csv"};
    char victim[600];
    snprintf(victim, sizeof victim, "%s/link_victim.txt", mt_test_storage());
    for (int i = 0; i < 4; i++) {
        char name[64], link[700];
        snprintf(name, sizeof name, "linked_%d", i);
        snprintf(link, sizeof link, "%s/%s/%s", mt_test_storage(), name, files[i]);
        if (mt_test_rank() == 0) {
            FILE *f = fopen(victim, "w");
            fputs("precious\n", f);
            fclose(f);
            char dir[600];
            snprintf(dir, sizeof dir, "%s/%s", mt_test_storage(), name);
            mkdir(dir, 0755);
            CU_ASSERT(symlink(victim, link) == 0);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        char err[1024] = "";
        MT_ASSERT_INT_EQ(mt_test_fit_datasets(mt_test_config(name), report_once, NULL, NULL, 0,
                                              err, sizeof err), MT_EIO);
        MT_ASSERT_STR_CONTAINS(err, files[i]);
        MT_ASSERT_STR_CONTAINS(err, "is a symbolic link");
        MPI_Barrier(MPI_COMM_WORLD);
        if (mt_test_rank() == 0) {
            char text[64] = "";
            FILE *f = fopen(victim, "r");
            CU_ASSERT(f && fgets(text, sizeof text, f));
            if (f)
                fclose(f);
            MT_ASSERT_STR_EQ(text, "precious\n");
        }
    }
}

static const mt_test tests[] = {
    {"huge_batch_sizes", test_huge_batch_sizes},
    {"claimed_sizes", test_claimed_sizes},
    {"plan_memory_is_bounded", test_plan_memory_is_bounded},
    {"columns_beyond_limits", test_columns_beyond_limits},
    {"long_column_names", test_long_column_names},
    {"run_json_outside_names", test_run_json_outside_names},
    {"resume_from_deep_checkpoint", test_resume_from_deep_checkpoint},
    {"checkpoints_where_they_belong", test_checkpoints_where_they_belong},
    {"overwrite_keeps_inputs", test_overwrite_keeps_inputs},
    {"links_refused_on_every_rank", test_links_refused_on_every_rank},
    {"bad_env_on_one_rank", test_bad_env_on_one_rank},
    {"misuse_after_and_inside_fit", test_misuse_after_and_inside_fit},
    {NULL, NULL},
};

int main(int argc, char **argv)
{
    return mt_test_main_with(argc, argv, "mpi_input", tests, true, make_files, NULL);
}
