/*
 * test_mpi_data.c -- under mpirun at 1 to 4 ranks: dataset shards. Every row is delivered
 * exactly once per epoch across ranks (split) or to every rank (replicated), with shuffle
 * on and off, for contiguous, chunked and gzip files and memory-limited streaming; the
 * columns of a row stay together; dtype conversions, and columns read straight into a
 * chosen dtype; resident memory while streaming stays near two windows; every bad input
 * gives the same error on every rank.
 */
#include "harness.h"
#include "fixtures.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N_ROWS 1003

static void make_fixtures(void)
{
    if (mt_test_rank() == 0) {
        /* one statement each: a path is one of mt_test_path's four buffers */
        int rc = fix_write_dataset(mt_test_path("contiguous.h5"), "/train", N_ROWS,
                                   FIX_CONTIGUOUS, 0);
        rc |= fix_write_dataset(mt_test_path("contiguous.h5"), "/test", 97, FIX_CONTIGUOUS, 1);
        rc |= fix_write_dataset(mt_test_path("chunked.h5"), "/train", N_ROWS, FIX_CHUNKED, 0);
        rc |= fix_write_dataset(mt_test_path("gzip.h5"), "/train", N_ROWS, FIX_GZIP, 0);
        rc |= fix_write_dataset(mt_test_path("one-row.h5"), "/train", 1, FIX_CONTIGUOUS, 0);
        rc |= fix_write_broken(mt_test_path("empty.h5"), "empty-group");
        rc |= fix_write_broken(mt_test_path("ragged.h5"), "ragged");
        rc |= fix_write_broken(mt_test_path("string.h5"), "string-column");
        rc |= fix_write_broken(mt_test_path("zero.h5"), "zero-rows");
        rc |= fix_write_broken(mt_test_path("subgroup.h5"), "subgroup");
        FILE *f = fopen(mt_test_path("notes.txt"), "w");
        fputs("not an HDF5 file\n", f);
        fclose(f);
        if (rc)
            fprintf(stderr, "fixtures: writing test files failed\n");
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

/* ------------------------------------------------------------ running a job */

static int fit_with(mt_train_fn fn, void *arg, const mt_test_dataset *sets, int nsets,
                    mt_data_config data, char *err, size_t len)
{
    mt_trainer_config cfg = mt_test_config("data");
    cfg.run.overwrite = true;
    cfg.data = data;
    return mt_test_fit_datasets(cfg, fn, arg, sets, nsets, err, len);
}

/* ------------------------------------------------------------ exactly once */

typedef struct {
    const char *dataset;
    mt_iter_options opt;
    int epochs;
    bool replicated;
    int64_t expect_rows;      /* per rank per epoch */
    int64_t *first_order;     /* ids of epoch 0 on this rank (for order checks) */
    int64_t *second_order;    /* ids of epoch 1 */
    bool wide;                /* windows hold id as f64, x as f64, y as i64 */
    int bad_rows;
} once_arg;

/* Reads every batch of an epoch, checks the columns agree, returns ids seen. */
static int read_epoch(mt_shard *s, int epoch, const mt_iter_options *o, int64_t *ids,
                      int64_t cap, int64_t *n, int *bad)
{
    int rc = mt_shard_begin_epoch(s, epoch, o);
    if (rc)
        return rc;
    const mt_batch *b;
    *n = 0;
    while ((rc = mt_shard_next(s, &b)) == 1) {
        size_t rows = mt_batch_rows(b);
        const int64_t *id = mt_batch_column(b, "id", MT_I64);
        const float *x = mt_batch_column(b, "x", MT_F32);
        const uint8_t *y = mt_batch_column(b, "y", MT_U8);
        if (!id || !x || !y)
            return MT_EINVAL;
        for (size_t r = 0; r < rows; r++) {
            if (*n < cap)
                ids[(*n)++] = id[r];
            for (int j = 0; j < 6; j++)
                *bad += x[r * 6 + j] != (float)(id[r] * 6 + j);
            *bad += y[r] != (uint8_t)(id[r] % 251);
        }
    }
    return rc;
}

static int check_once(mt_context *c, void *varg)
{
    once_arg *a = varg;
    mt_shard *s = NULL;
    int rc = mt_get_dataset_shard(c, a->dataset, &s);
    if (rc)
        return rc;
    if (a->wide) { /* read_epoch's dtypes then come from converting these */
        MT_ASSERT_INT_EQ(mt_shard_set_column_dtype(s, "id", MT_F64), MT_OK);
        MT_ASSERT_INT_EQ(mt_shard_set_column_dtype(s, "x", MT_F64), MT_OK);
        MT_ASSERT_INT_EQ(mt_shard_set_column_dtype(s, "y", MT_I64), MT_OK);
    }
    int P = mt_world_size(c);
    MT_ASSERT_INT_EQ(mt_shard_rows(s), a->expect_rows);
    MT_ASSERT_INT_EQ(mt_shard_dropped_rows(s), a->replicated ? 0 : N_ROWS % P);
    int64_t *ids = malloc(N_ROWS * sizeof *ids), *all = malloc((size_t)P * N_ROWS * sizeof *all);
    for (int e = 0; e < a->epochs && !rc; e++) {
        int64_t n = 0;
        rc = read_epoch(s, e, &a->opt, ids, N_ROWS, &n, &a->bad_rows);
        if (rc)
            break;
        int64_t bs = (int64_t)(a->opt.batch_size ? a->opt.batch_size : 32);
        int64_t want = a->opt.drop_last ? a->expect_rows / bs * bs : a->expect_rows;
        MT_ASSERT_INT_EQ(n, want);
        if (e == 0 && a->first_order)
            memcpy(a->first_order, ids, (size_t)n * sizeof *ids);
        if (e == 1 && a->second_order)
            memcpy(a->second_order, ids, (size_t)n * sizeof *ids);
        for (int64_t i = n; i < N_ROWS; i++)
            ids[i] = -1;
        rc = mt_allgather(c, ids, all, N_ROWS, MT_I64);
        /* across ranks (split) or on each rank (replicated), no id twice */
        char *seen = calloc((size_t)P * N_ROWS, 1);
        int dup = 0, total = 0, range = 0;
        for (int r = 0; r < P; r++) {
            if (a->replicated)
                memset(seen, 0, (size_t)N_ROWS);
            for (int64_t i = 0; i < N_ROWS; i++) {
                int64_t v = all[(int64_t)r * N_ROWS + i];
                if (v < 0)
                    continue;
                if (v >= N_ROWS) { range++; continue; }
                dup += seen[v]++ > 0;
                total++;
            }
        }
        MT_ASSERT_INT_EQ(dup, 0);
        MT_ASSERT_INT_EQ(range, 0);
        MT_ASSERT_INT_EQ(total, want * P);
        free(seen);
    }
    free(ids);
    free(all);
    return rc;
}

static void run_once_as(const char *file, bool shuffle, size_t memory_limit, size_t bs,
                        bool drop_last, bool wide)
{
    int P = mt_test_size();
    once_arg a = {.dataset = "train", .opt = {.batch_size = bs, .shuffle = shuffle, .seed = 7,
                                              .drop_last = drop_last},
                  .epochs = 2, .expect_rows = N_ROWS / P, .wide = wide};
    mt_test_dataset sets[] = {{"train", mt_test_path(file), "/train"}};
    char err[1024];
    int rc = fit_with(check_once, &a, sets, 1, (mt_data_config){.memory_limit = memory_limit},
                      err, sizeof err);
    MT_ASSERT_INT_EQ(rc, MT_OK);
    if (rc)
        fprintf(stderr, "%s\n", err);
    MT_ASSERT_INT_EQ(a.bad_rows, 0);
}

static void run_once(const char *file, bool shuffle, size_t memory_limit, size_t bs, bool drop_last)
{
    run_once_as(file, shuffle, memory_limit, bs, drop_last, false);
}

static void test_once_contiguous(void) { run_once("contiguous.h5", false, 0, 32, false); run_once("contiguous.h5", true, 0, 32, false); }
static void test_once_chunked(void) { run_once("chunked.h5", false, 0, 10, false); run_once("chunked.h5", true, 0, 10, true); }
static void test_once_gzip(void) { run_once("gzip.h5", false, 0, 64, false); run_once("gzip.h5", true, 0, 7, false); }

static void test_once_streaming(void)
{
    /* 33 bytes a row; a 2 KiB limit gives windows of ~30 rows: dozens of windows, read
     * ahead by a thread and without one */
    setenv("MT_IO_READAHEAD", "1", 1);
    run_once("contiguous.h5", false, 2048, 8, false);
    run_once("gzip.h5", true, 2048, 8, false);
    run_once("chunked.h5", true, 4096, 5, true);
    setenv("MT_IO_READAHEAD", "0", 1);
    run_once("gzip.h5", true, 2048, 8, false);
    unsetenv("MT_IO_READAHEAD");
    /* windows in wider in-memory dtypes: 62 bytes a row, so more, smaller windows */
    run_once_as("chunked.h5", true, 2048, 8, false, true);
    run_once_as("contiguous.h5", false, 0, 32, false, true);
    /* collective MPI-IO transfers (no read-ahead thread) */
    setenv("MT_IO_COLLECTIVE", "1", 1);
    run_once("contiguous.h5", true, 2048, 8, false);
    run_once("contiguous.h5", false, 0, 32, false);
    unsetenv("MT_IO_COLLECTIVE");
}

/* mt_batch_hold_new: held batches keep their rows through later batches, windows,
 * epochs (shuffled, converted, a new layout) and the fit's end. */
typedef struct {
    mt_batch_hold *h[64];
    const int64_t *id[64];   /* as given (read as i64: converted when hold_arg.wide) */
    int64_t copy[64][16];    /* what they held when given */
    size_t rows[64];
    int n;
    bool wide;
} hold_arg;

static int hold_batches(mt_context *c, void *varg)
{
    hold_arg *a = varg;
    mt_shard *s = NULL;
    int rc = mt_get_dataset_shard(c, "train", &s);
    if (!rc && a->wide)
        rc = mt_shard_set_column_dtype(s, "id", MT_F64); /* so the i64 view is a conversion */
    for (int e = 0; e < 3 && !rc; e++) {
        mt_iter_options o = {.batch_size = e == 2 ? 16 : 8, .shuffle = e == 1, .seed = 9};
        rc = mt_shard_begin_epoch(s, e, &o);
        const mt_batch *b;
        int k = 0;
        while (!rc && (rc = mt_shard_next(s, &b)) == 1) {
            const int64_t *id = mt_batch_column(b, "id", MT_I64);
            const float *x = mt_batch_column(b, "x", MT_F32);
            CU_ASSERT_PTR_NOT_NULL_FATAL(id);
            CU_ASSERT_PTR_NOT_NULL_FATAL(x);
            if (k++ % 5 == 0 && a->n < 64) {
                a->h[a->n] = mt_batch_hold_new(b);
                CU_ASSERT_PTR_NOT_NULL(a->h[a->n]);
                a->id[a->n] = id;
                a->rows[a->n] = mt_batch_rows(b);
                memcpy(a->copy[a->n], id, a->rows[a->n] * sizeof *id);
                a->n++;
            }
            rc = 0;
        }
        if (rc > 0)
            rc = 0;
    }
    return rc;
}

static void run_holds(bool wide)
{
    hold_arg a = {.wide = wide};
    mt_test_dataset sets[] = {{"train", mt_test_path("contiguous.h5"), "/train"}};
    setenv("MT_IO_READAHEAD", "1", 1);
    MT_ASSERT_INT_EQ(fit_with(hold_batches, &a, sets, 1, (mt_data_config){.memory_limit = 2048},
                              NULL, 0), MT_OK);
    unsetenv("MT_IO_READAHEAD");
    CU_ASSERT(a.n > 10);
    /* the fit is over, its shard freed: every held batch still has its own ids */
    for (int i = 0; i < a.n; i++) {
        CU_ASSERT(memcmp(a.id[i], a.copy[i], a.rows[i] * sizeof(int64_t)) == 0);
        mt_batch_hold_free(&a.h[i]);
        CU_ASSERT_PTR_NULL(a.h[i]);
    }
    mt_batch_hold_free(NULL);
    CU_ASSERT_PTR_NULL(mt_batch_hold_new(NULL));
}

static void test_batch_holds(void)
{
    run_holds(false);
    run_holds(true);
}

/* Resident memory while streaming a shard four times larger than data.memory_limit:
 * the peak (VmHWM, reset through /proc/self/clear_refs) may grow by two windows (the
 * limit) plus a small constant for HDF5 and MPI-IO, not by the shard. */
#define WIDE_ROWS 32768      /* x 1 KiB floats = 128 MiB of x */
#define WIDE_LIMIT (2u << 20)

typedef struct {
    long grown_kib;
    int64_t rows, bad;
} mem_arg;

static int stream_big(mt_context *c, void *varg)
{
    mem_arg *a = varg;
    mt_shard *s;
    int rc = mt_get_dataset_shard(c, "big", &s);
    if (rc)
        return rc;
    mt_iter_options o = {.batch_size = 64, .shuffle = true, .seed = 2};
    long base = mt_test_status_kib("VmRSS");
    FILE *f = fopen("/proc/self/clear_refs", "w"); /* 5: reset the peak to the current RSS */
    if (f) {
        fputs("5", f);
        fclose(f);
    }
    rc = mt_shard_begin_epoch(s, 0, &o);
    const mt_batch *b;
    while (!rc && (rc = mt_shard_next(s, &b)) == 1) {
        rc = MT_OK;
        const int64_t *id = mt_batch_column(b, "id", MT_I64);
        const float *x = mt_batch_column(b, "x", MT_F32);
        if (!id || !x)
            return MT_EINVAL;
        for (size_t r = 0; r < mt_batch_rows(b); r++)
            a->bad += x[r * 256 + 255] != (float)id[r];
        a->rows += (int64_t)mt_batch_rows(b);
    }
    a->grown_kib = mt_test_status_kib("VmHWM") - base;
    return rc;
}

static void test_streaming_memory(void)
{
    if (mt_test_rank() == 0 &&
        fix_write_wide(mt_test_path("big.h5"), "/train", WIDE_ROWS, 256) != 0) /* 1 KiB a row */
        CU_FAIL("could not write big.h5");
    MPI_Barrier(MPI_COMM_WORLD);
    int P = mt_test_size();
    mem_arg a = {0};
    mt_test_dataset sets[] = {{"big", mt_test_path("big.h5"), "/train"}};
    MT_ASSERT_INT_EQ(fit_with(stream_big, &a, sets, 1,
                              (mt_data_config){.memory_limit = WIDE_LIMIT}, NULL, 0), MT_OK);
    MT_ASSERT_INT_EQ(a.rows, WIDE_ROWS / P);
    MT_ASSERT_INT_EQ(a.bad, 0);
    long shard_kib = (long)((int64_t)WIDE_ROWS / P * 1032 / 1024);
    long bound_kib = (long)(WIDE_LIMIT >> 10) + 3 * 1024; /* two windows + 3 MiB */
    if (mt_test_status_kib("VmHWM") > 0) {
        if (a.grown_kib > bound_kib || getenv("MT_TEST_SHOW_MEMORY"))
            fprintf(stderr, "rank %d: peak RSS grew by %ld KiB streaming a %ld KiB shard "
                    "(limit %u KiB)\n", mt_test_rank(), a.grown_kib, shard_kib,
                    WIDE_LIMIT >> 10);
        CU_ASSERT(a.grown_kib <= bound_kib);
        CU_ASSERT(bound_kib < shard_kib); /* the check can tell streaming from holding */
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (mt_test_rank() == 0)
        unlink(mt_test_path("big.h5"));
}

static void test_replicated(void)
{
    const char *split_none[] = {"something-else", NULL};
    once_arg a = {.dataset = "train", .opt = {.batch_size = 50, .shuffle = true, .seed = 3},
                  .epochs = 1, .replicated = true, .expect_rows = N_ROWS};
    mt_test_dataset sets[] = {{"train", mt_test_path("contiguous.h5"), "/train"}};
    MT_ASSERT_INT_EQ(fit_with(check_once, &a, sets, 1,
                              (mt_data_config){.datasets_to_split = split_none}, NULL, 0), MT_OK);
    MT_ASSERT_INT_EQ(a.bad_rows, 0);
}

static void test_shuffle_orders(void)
{
    int P = mt_test_size();
    int64_t q = N_ROWS / P;
    int64_t *e0 = calloc((size_t)q, 8), *e1 = calloc((size_t)q, 8), *again = calloc((size_t)q, 8);
    once_arg a = {.dataset = "train", .opt = {.batch_size = 16, .shuffle = true, .seed = 11},
                  .epochs = 2, .expect_rows = q, .first_order = e0, .second_order = e1};
    mt_test_dataset sets[] = {{"train", mt_test_path("contiguous.h5"), "/train"}};
    MT_ASSERT_INT_EQ(fit_with(check_once, &a, sets, 1, (mt_data_config){0}, NULL, 0), MT_OK);
    a.first_order = again;
    a.second_order = NULL;
    MT_ASSERT_INT_EQ(fit_with(check_once, &a, sets, 1, (mt_data_config){0}, NULL, 0), MT_OK);
    CU_ASSERT(memcmp(e0, e1, (size_t)q * 8) != 0);      /* epochs differ */
    CU_ASSERT(memcmp(e0, again, (size_t)q * 8) == 0);   /* same seed, same order */
    int in_order = 1;
    for (int64_t i = 1; i < q; i++)
        in_order &= e0[i] > e0[i - 1];
    CU_ASSERT(!in_order);                               /* actually shuffled */
    free(e0);
    free(e1);
    free(again);
}

/* ------------------------------------------------------------ conversions */

static int conversions(mt_context *c, void *arg)
{
    mt_shard *s;
    int rc = mt_get_dataset_shard(c, "test", &s);
    if (rc)
        return rc;
    int nd;
    size_t dims[8];
    mt_dtype stored;
    MT_ASSERT_INT_EQ(mt_shard_column_shape(s, "x", &nd, dims, &stored), MT_OK);
    MT_ASSERT_INT_EQ(nd, 3);
    MT_ASSERT_INT_EQ(dims[0], 97 / mt_world_size(c));
    MT_ASSERT_INT_EQ(dims[1] * dims[2], 6);
    MT_ASSERT_INT_EQ(stored, MT_F32);
    MT_ASSERT_INT_EQ(mt_shard_num_columns(s), 3);
    MT_ASSERT_STR_EQ(mt_shard_column_name(s, 0), "id");
    MT_ASSERT_INT_EQ(mt_shard_column_shape(s, "nope", NULL, NULL, NULL), MT_ENOTFOUND);
    mt_iter_options o = {.batch_size = 9};
    rc = mt_shard_begin_epoch(s, 0, &o);
    const mt_batch *b;
    while (!rc && mt_shard_next(s, &b) == 1) {
        size_t n = mt_batch_rows(b);
        const int64_t *id = mt_batch_column(b, "id", MT_I64);
        const double *xd = mt_batch_column(b, "x", MT_F64);
        for (size_t r = 0; r < n; r++)
            CU_ASSERT_DOUBLE_EQUAL(xd[r * 6 + 5], (double)(id[r] * 6 + 5), 0);
        const int32_t *xi = mt_batch_column(b, "x", MT_I32);
        for (size_t r = 0; r < n; r++)
            MT_ASSERT_INT_EQ(xi[r * 6 + 1], id[r] * 6 + 1);
        const float *yf = mt_batch_column(b, "y", MT_F32);
        const int64_t *yl = mt_batch_column(b, "y", MT_I64);
        const uint8_t *iu = mt_batch_column(b, "id", MT_U8);
        for (size_t r = 0; r < n; r++) {
            CU_ASSERT_DOUBLE_EQUAL(yf[r], (double)(id[r] % 251), 0);
            MT_ASSERT_INT_EQ(yl[r], id[r] % 251);
            MT_ASSERT_INT_EQ(iu[r], (uint8_t)id[r]);
        }
        CU_ASSERT_PTR_NULL(mt_batch_column(b, "nope", MT_F32));
        MT_ASSERT_STR_CONTAINS(mt_last_error(), "dataset test has no column 'nope'");
        CU_ASSERT_PTR_NULL(mt_batch_column(b, "x", (mt_dtype)42));
    }
    return rc;
}

/* Columns read straight into a chosen dtype by HDF5: x (f32 on disk, values up to 581)
 * into u8 saturates at 255, which a per-batch C cast would not do; id into f64; y into
 * i32. Asking for another dtype converts from the in-memory one. */
static int direct_reads(mt_context *c, void *arg)
{
    (void)arg;
    mt_shard *s;
    int rc = mt_get_dataset_shard(c, "test", &s);
    if (rc)
        return rc;
    MT_ASSERT_INT_EQ(mt_shard_set_column_dtype(NULL, "x", MT_U8), MT_EINVAL);
    MT_ASSERT_INT_EQ(mt_shard_set_column_dtype(s, "nope", MT_U8), MT_ENOTFOUND);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "dataset test has no column 'nope'");
    MT_ASSERT_INT_EQ(mt_shard_set_column_dtype(s, "x", (mt_dtype)42), MT_EINVAL);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "test/x: unknown dtype 42");
    for (int pass = 0; pass < 2 && !rc; pass++) {
        mt_dtype xs = pass ? MT_U8 : MT_F32; /* pass 1 reads x straight into u8 */
        MT_ASSERT_INT_EQ(mt_shard_set_column_dtype(s, "x", xs), MT_OK);
        MT_ASSERT_INT_EQ(mt_shard_set_column_dtype(s, "id", pass ? MT_F64 : MT_I64), MT_OK);
        MT_ASSERT_INT_EQ(mt_shard_set_column_dtype(s, "y", pass ? MT_I32 : MT_U8), MT_OK);
        mt_iter_options o = {.batch_size = 9, .shuffle = true, .seed = 5};
        rc = mt_shard_begin_epoch(s, pass, &o);
        const mt_batch *b;
        int64_t seen = 0;
        while (!rc && mt_shard_next(s, &b) == 1) {
            size_t n = mt_batch_rows(b);
            const int64_t *id = mt_batch_column(b, "id", MT_I64);
            const double *idd = mt_batch_column(b, "id", MT_F64);
            /* pass 0 does not ask for u8: a C cast of 581.0f to uint8_t is undefined */
            const uint8_t *xu = pass ? mt_batch_column(b, "x", MT_U8) : (const uint8_t *)"";
            const double *xd = mt_batch_column(b, "x", MT_F64);
            const int32_t *yi = mt_batch_column(b, "y", MT_I32);
            if (!id || !idd || !xu || !xd || !yi) {
                CU_FAIL("a column is missing");
                break;
            }
            for (size_t r = 0; r < n; r++) {
                MT_ASSERT_INT_EQ((int64_t)idd[r], id[r]);
                for (int j = 0; j < 6; j++) {
                    int64_t v = id[r] * 6 + j;
                    if (pass) { /* HDF5's conversion, and the f64 view is taken from it */
                        MT_ASSERT_INT_EQ(xu[r * 6 + j], v > 255 ? 255 : v);
                        CU_ASSERT_DOUBLE_EQUAL(xd[r * 6 + j], (double)(v > 255 ? 255 : v), 0);
                    } else {
                        CU_ASSERT_DOUBLE_EQUAL(xd[r * 6 + j], (double)v, 0);
                    }
                }
                MT_ASSERT_INT_EQ(yi[r], id[r] % 251);
            }
            seen += (int64_t)n;
        }
        MT_ASSERT_INT_EQ(seen, mt_shard_rows(s));
        /* the stored dtype is still reported as stored */
        mt_dtype stored;
        MT_ASSERT_INT_EQ(mt_shard_column_shape(s, "x", NULL, NULL, &stored), MT_OK);
        MT_ASSERT_INT_EQ(stored, MT_F32);
    }
    return rc;
}

static void test_conversions(void)
{
    mt_test_dataset sets[] = {{"test", mt_test_path("contiguous.h5"), "/test"}};
    MT_ASSERT_INT_EQ(fit_with(conversions, NULL, sets, 1, (mt_data_config){0}, NULL, 0), MT_OK);
    MT_ASSERT_INT_EQ(fit_with(direct_reads, NULL, sets, 1, (mt_data_config){0}, NULL, 0), MT_OK);
    /* and streamed: a 512-byte limit makes windows of a few rows */
    MT_ASSERT_INT_EQ(fit_with(direct_reads, NULL, sets, 1, (mt_data_config){.memory_limit = 512},
                              NULL, 0), MT_OK);
}

/* ------------------------------------------------------------ bad input */

static int open_only(mt_context *c, void *arg)
{
    mt_shard *s = NULL;
    int rc = mt_get_dataset_shard(c, arg ? (const char *)arg : "train", &s);
    if (!rc) {
        CU_FAIL("a bad dataset opened");
    } else {
        CU_ASSERT_PTR_NULL(s);
    }
    return rc;
}

static void expect_error(const char *file, const char *group, int code, const char *msg)
{
    mt_test_dataset sets[] = {{"train", file, group}};
    char err[2048];
    int rc = fit_with(open_only, NULL, sets, 1, (mt_data_config){0}, err, sizeof err);
    MT_ASSERT_INT_EQ(rc, code);
    MT_ASSERT_STR_CONTAINS(err, msg);
}

static void test_bad_inputs(void)
{
    char want[700];
    snprintf(want, sizeof want, "%s: no such file", mt_test_path("missing.h5"));
    expect_error(mt_test_path("missing.h5"), "/train", MT_ENOTFOUND, want);
    snprintf(want, sizeof want, "%s: not an HDF5 file", mt_test_path("notes.txt"));
    expect_error(mt_test_path("notes.txt"), "/train", MT_EFORMAT, want);
    snprintf(want, sizeof want, "%s: no group /validation", mt_test_path("contiguous.h5"));
    expect_error(mt_test_path("contiguous.h5"), "/validation", MT_ENOTFOUND, want);
    expect_error(mt_test_path("empty.h5"), "/train", MT_EFORMAT, ":/train: the group is empty");
    expect_error(mt_test_path("ragged.h5"), "/train", MT_EFORMAT,
                 ":/train: columns have different row counts: a has 10 rows, b has 9");
    expect_error(mt_test_path("string.h5"), "/train", MT_EFORMAT,
                 ":/train/name: column type is string, not numeric");
    expect_error(mt_test_path("zero.h5"), "/train", MT_EFORMAT,
                 ":/train: the dataset has zero rows");
    expect_error(mt_test_path("subgroup.h5"), "/train", MT_EFORMAT,
                 ":/train/nested: is not a dataset");
    expect_error(mt_test_path("contiguous.h5"), "/train/id", MT_EFORMAT, "is not a group");
    if (mt_test_size() > 1)
        expect_error(mt_test_path("one-row.h5"), "/train", MT_EINVAL,
                     "1 rows cannot be split over");
    /* unknown dataset name */
    mt_test_dataset sets[] = {{"train", mt_test_path("contiguous.h5"), "/train"}};
    char err[1024];
    MT_ASSERT_INT_EQ(fit_with(open_only, "validation", sets, 1, (mt_data_config){0}, err,
                              sizeof err), MT_ENOTFOUND);
    MT_ASSERT_STR_CONTAINS(err, "no dataset named 'validation' (registered: train)");
}

static void test_missing_on_one_rank(void)
{
    int victim = mt_test_size() > 1 ? 1 : 0;
    const char *file = mt_test_path(mt_test_rank() == victim ? "missing.h5" : "contiguous.h5");
    mt_test_dataset sets[] = {{"train", file, "/train"}};
    char err[1024], want[700];
    int rc = fit_with(open_only, NULL, sets, 1, (mt_data_config){0}, err, sizeof err);
    MT_ASSERT_INT_EQ(rc, MT_ENOTFOUND);
    snprintf(want, sizeof want, "rank %d failed: %s: no such file", victim,
             mt_test_path("missing.h5"));
    MT_ASSERT_STR_CONTAINS(err, want);
}

static int iterate_without_epoch(mt_context *c, void *arg)
{
    mt_shard *s;
    int rc = mt_get_dataset_shard(c, "train", &s);
    const mt_batch *b;
    if (!rc) {
        MT_ASSERT_INT_EQ(mt_shard_next(s, &b), MT_EINVAL);
        MT_ASSERT_STR_CONTAINS(mt_last_error(), "call mt_shard_begin_epoch first");
        MT_ASSERT_INT_EQ(mt_shard_begin_epoch(s, -1, NULL), mt_world_rank(c) ? MT_EPEER : MT_EINVAL);
        MT_ASSERT_STR_CONTAINS(mt_last_error(), "epoch must be >= 0 (got -1)");
        /* the same shard again is the cached one */
        mt_shard *again;
        MT_ASSERT_INT_EQ(mt_get_dataset_shard(c, "train", &again), MT_OK);
        CU_ASSERT_PTR_EQUAL(again, s);
        /* ranks asking for different batch sizes disagree, not hang */
        if (mt_world_size(c) > 1) {
            mt_iter_options o = {.batch_size = mt_world_rank(c) == 0 ? 10 : 20};
            MT_ASSERT_INT_EQ(mt_shard_begin_epoch(s, 0, &o), MT_EMISMATCH);
            MT_ASSERT_STR_CONTAINS(mt_last_error(), "begin-epoch(epoch=0, batch_size=10");
        }
    }
    return rc;
}

static void test_misuse(void)
{
    mt_test_dataset sets[] = {{"train", mt_test_path("contiguous.h5"), "/train"}};
    MT_ASSERT_INT_EQ(fit_with(iterate_without_epoch, NULL, sets, 1, (mt_data_config){0}, NULL, 0), MT_OK);
    mt_trainer *t = NULL;
    MT_ASSERT_INT_EQ(mt_trainer_create(&t, iterate_without_epoch, NULL, NULL), MT_OK);
    MT_ASSERT_INT_EQ(mt_trainer_add_dataset(t, "a", "f.h5", "/g"), MT_OK);
    MT_ASSERT_INT_EQ(mt_trainer_add_dataset(t, "a", "f.h5", "/g"), MT_EINVAL);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "dataset 'a' is already registered");
    MT_ASSERT_INT_EQ(mt_trainer_add_dataset(t, "b", "", "/g"), MT_EINVAL);
    mt_trainer_destroy(&t);
}

static const mt_test tests[] = {
    {"once_contiguous", test_once_contiguous},
    {"once_chunked", test_once_chunked},
    {"once_gzip", test_once_gzip},
    {"once_streaming", test_once_streaming},
    {"streaming_memory", test_streaming_memory},
    {"replicated", test_replicated},
    {"shuffle_orders", test_shuffle_orders},
    {"conversions", test_conversions},
    {"bad_inputs", test_bad_inputs},
    {"missing_on_one_rank", test_missing_on_one_rank},
    {"misuse", test_misuse},
    {"batch_holds", test_batch_holds},
    {NULL, NULL},
};

int main(int argc, char **argv)
{
    return mt_test_main_with(argc, argv, "mpi_data", tests, true, make_fixtures, NULL);
}
