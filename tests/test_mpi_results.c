/*
 * test_mpi_results.c -- under mpirun at 1 to 4 ranks: what a finished run gives back (Ray's
 * Result and Checkpoint): the metrics history from fit and from mt_result_load, the best
 * checkpoint by any metric, a checkpoint opened by path without a run, a new run started
 * from a checkpoint (run.resume_from_checkpoint), typed checkpoint metadata, the score
 * attribute checked at the first report, and the counters that must survive restarts
 * (time_total_s, failures, error.txt).
 */
#include "harness.h"

#include "../runtime/runtime.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int R(void) { return mt_test_rank(); }
static int P(void) { return mt_test_size(); }
/* rank 0 changed files the others read next */
static void barrier(void) { MPI_Barrier(MPI_COMM_WORLD); }

static const char *run_dir(const char *name)
{
    static char p[1024];
    snprintf(p, sizeof p, "%s/%s", mt_test_storage(), name);
    return p;
}

static bool has_column(const mt_result *r, const char *key)
{
    for (size_t i = 0; i < mt_result_num_columns(r); i++)
        if (!strcmp(mt_result_column(r, i), key))
            return true;
    return false;
}

/* ------------------------------------------------------------ history */

static int four_reports(mt_context *c, void *arg)
{
    int rc = MT_OK;
    for (int i = 0; i < 4 && !rc; i++) {
        mt_metrics *m = mt_metrics_new();
        mt_metrics_set_f64(m, "loss", 1.0 / (i + 1) + mt_world_rank(c));
        mt_metrics_set_i64(m, "step", 10 * i);
        mt_metrics_set_str(m, "phase", i % 2 ? "odd, \"b\"" : "even");
        if (i >= 2)
            mt_metrics_set_f64(m, "val/acc", 0.25 * i); /* a column that appears mid-run */
        rc = mt_report(c, m, NULL);
        mt_metrics_free(&m);
    }
    return rc;
}

/* The history of four_reports, as fit or mt_result_load gives it. */
static void check_history(const mt_result *r)
{
    MT_ASSERT_INT_EQ(mt_result_num_rows(r), 4);
    for (size_t i = 0; i < mt_result_num_rows(r) && i < 4; i++) {
        const mt_metrics *row = mt_result_row(r, i);
        int64_t it = 0, step = 0;
        double loss = 0, acc = 0;
        MT_ASSERT_INT_EQ(mt_metrics_get_i64(row, "training_iteration", &it), MT_OK);
        MT_ASSERT_INT_EQ(it, (int64_t)i + 1);
        MT_ASSERT_INT_EQ(mt_metrics_get_i64(row, "step", &step), MT_OK);
        MT_ASSERT_INT_EQ(step, 10 * (int64_t)i);
        MT_ASSERT_INT_EQ(mt_metrics_get_f64(row, "loss", &loss), MT_OK);
        CU_ASSERT_DOUBLE_EQUAL(loss, 1.0 / ((double)i + 1), 1e-12); /* rank 0's */
        MT_ASSERT_STR_EQ(mt_metrics_get_str(row, "phase"), i % 2 ? "odd, \"b\"" : "even");
        MT_ASSERT_INT_EQ(mt_metrics_get_f64(row, "val/acc", &acc), i >= 2 ? MT_OK : MT_ENOTFOUND);
        if (i >= 2)
            CU_ASSERT_DOUBLE_EQUAL(acc, 0.25 * (double)i, 1e-12);
        CU_ASSERT(mt_metrics_get_f64(row, "time_total_s", &loss) == MT_OK);
        CU_ASSERT_PTR_NULL(mt__metrics_find(row, "per_rank"));
    }
    const char *cols[] = {"loss", "step", "phase", "training_iteration",
                          "iterations_since_restore", "timestamp", "time_this_iter_s",
                          "time_total_s", "val/acc"};
    for (size_t i = 0; i < sizeof cols / sizeof *cols; i++)
        CU_ASSERT(has_column(r, cols[i]));
    CU_ASSERT(!has_column(r, "per_rank"));
    MT_ASSERT_STR_EQ(mt_result_column(r, 0), "loss"); /* order of first appearance */
    MT_ASSERT_STR_EQ(mt_result_column(r, mt_result_num_columns(r) - 1), "val/acc");
    /* misuse */
    CU_ASSERT_PTR_NULL(mt_result_row(r, 4));
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "mt_result_row: row index out of range");
    CU_ASSERT_PTR_NULL(mt_result_column(r, mt_result_num_columns(r)));
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "column index out of range");
}

static void test_history_from_fit_and_load(void)
{
    mt_result *res = NULL;
    MT_ASSERT_INT_EQ(mt_test_fit(mt_test_config("history"), four_reports, NULL, &res), MT_OK);
    check_history(res); /* every rank */
    mt_result_free(&res);
    MT_ASSERT_INT_EQ(mt_result_load(run_dir("history"), &res), MT_OK); /* local, any rank */
    check_history(res);
    mt_result_free(&res);
    MT_ASSERT_INT_EQ(mt_result_num_rows(NULL), 0);
    MT_ASSERT_INT_EQ(mt_result_num_columns(NULL), 0);
    CU_ASSERT_PTR_NULL(mt_result_row(NULL, 0));
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "mt_result_row: result is NULL");
    CU_ASSERT_PTR_NULL(mt_result_column(NULL, 0));
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "mt_result_column: result is NULL");
    barrier();
    if (R() == 0) { /* the stored log is authoritative: a torn last line is not a row, a
                     * hand-edited key no metric can have is passed over */
        FILE *f = fopen(mt_test_run_file("history", "result.json"), "a");
        if (f) {
            fputs("{\"loss\":7,\"a\\nb\":1,\"training_iteration\":5}\n", f);
            fputs("{\"loss\":9,\"training_iteration\":6", f);
            fclose(f);
        }
        MT_ASSERT_INT_EQ(mt_result_load(run_dir("history"), &res), MT_OK);
        MT_ASSERT_INT_EQ(mt_result_num_rows(res), 5);
        const mt_metrics *row = mt_result_row(res, 4);
        double loss = 0;
        MT_ASSERT_INT_EQ(mt_metrics_get_f64(row, "loss", &loss), MT_OK);
        CU_ASSERT_DOUBLE_EQUAL(loss, 7, 0);
        MT_ASSERT_INT_EQ(mt_metrics_count(row), 2);
        mt_result_free(&res);
    }
}

/* ------------------------------------------------------------ best checkpoint */

static const double ACC[] = {0.1, 0.9, 0.5, 0.9};
static const double LOSS[] = {4, 1, 3, 2};

static int four_checkpoints(mt_context *c, void *arg)
{
    int rc = MT_OK;
    float w[4] = {0};
    for (int i = 0; i < 4 && !rc; i++) {
        mt_metrics *m = mt_metrics_new();
        mt_metrics_set_f64(m, "acc", ACC[i]);
        mt_metrics_set_f64(m, "loss", LOSS[i]);
        mt_metrics_set_str(m, "tag", "text");
        mt_metrics_set_f64(m, "odd", i == 3 ? NAN : (double)i); /* NaN is passed over */
        mt_checkpoint *ck = mt_checkpoint_new();
        w[0] = (float)i;
        mt_checkpoint_put(ck, "w", MT_F32, 1, (size_t[]){4}, w, MT_REPLICATED);
        mt_checkpoint_set_meta_i64(ck, "index", i);
        mt_checkpoint_set_meta(ck, "tag", "t");
        rc = mt_report(c, m, ck);
        mt_checkpoint_free(&ck);
        mt_metrics_free(&m);
    }
    return rc;
}

/* The checkpoint best by metric/mode is number `want` (its folder name). */
static void best_is(const mt_result *r, const char *metric, mt_order mode, int want)
{
    const mt_checkpoint *ck = NULL;
    const mt_metrics *m = NULL;
    char name[64];
    snprintf(name, sizeof name, "checkpoint_%06d", want);
    MT_ASSERT_INT_EQ(mt_result_best_checkpoint(r, metric, mode, &ck, &m), MT_OK);
    MT_ASSERT_STR_CONTAINS(ck ? mt_checkpoint_path(ck) : NULL, name);
    int64_t it = 0;
    MT_ASSERT_INT_EQ(mt_metrics_get_i64(m, "training_iteration", &it), MT_OK);
    MT_ASSERT_INT_EQ(it, want + 1);
    /* every rank knows the checkpoint's metadata and arrays */
    int64_t index = -1;
    MT_ASSERT_INT_EQ(mt_checkpoint_get_meta_i64(ck, "index", &index), MT_OK);
    MT_ASSERT_INT_EQ(index, want);
    MT_ASSERT_STR_EQ(mt_checkpoint_get_meta(ck, "tag"), "t");
    MT_ASSERT_INT_EQ(mt_checkpoint_num_arrays(ck), 1);
}

static void check_best(const mt_result *r, bool all_kept)
{
    if (all_kept) {
        best_is(r, "acc", MT_ORDER_MAX, 3); /* 0.9 twice: the newer */
        best_is(r, "acc", MT_ORDER_MIN, 0);
        best_is(r, "loss", MT_ORDER_MAX, 0);
        best_is(r, "odd", MT_ORDER_MAX, 2); /* NaN at 3 passed over */
    } else { /* kept: 1 (the best loss) and 3 (the latest) */
        best_is(r, "acc", MT_ORDER_MIN, 3);
        best_is(r, "loss", MT_ORDER_MAX, 3); /* 0 (loss 4) was dropped */
        best_is(r, "odd", MT_ORDER_MAX, 1);
    }
    best_is(r, "loss", MT_ORDER_MIN, 1);
    best_is(r, "training_iteration", MT_ORDER_MAX, 3); /* an automatic key */
    const mt_checkpoint *ck = NULL;
    MT_ASSERT_INT_EQ(mt_result_best_checkpoint(r, "tag", MT_ORDER_MAX, &ck, NULL), MT_ENOTFOUND);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "numeric \"tag\"");
    MT_ASSERT_INT_EQ(mt_result_best_checkpoint(r, "nope", MT_ORDER_MAX, &ck, NULL), MT_ENOTFOUND);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "\"nope\" (its reports have: acc, loss, tag, odd");
    CU_ASSERT_PTR_NULL(ck);
    MT_ASSERT_INT_EQ(mt_result_best_checkpoint(r, "acc", (mt_order)7, &ck, NULL), MT_EINVAL);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "mode must be MT_ORDER_MAX or MT_ORDER_MIN (got 7)");
    MT_ASSERT_INT_EQ(mt_result_best_checkpoint(r, NULL, MT_ORDER_MAX, &ck, NULL), MT_EINVAL);
    MT_ASSERT_INT_EQ(mt_result_best_checkpoint(r, "acc", MT_ORDER_MAX, NULL, NULL), MT_EINVAL);
    MT_ASSERT_INT_EQ(mt_result_best_checkpoint(NULL, "acc", MT_ORDER_MAX, &ck, NULL), MT_EINVAL);
}

static void test_best_checkpoint_by_any_metric(void)
{
    mt_trainer_config cfg = mt_test_config("best_all");
    mt_result *res = NULL;
    MT_ASSERT_INT_EQ(mt_test_fit(cfg, four_checkpoints, NULL, &res), MT_OK);
    check_best(res, true);
    /* the latest checkpoint is usable on every rank: metadata, arrays, data */
    const mt_checkpoint *latest = mt_result_checkpoint(res);
    int64_t index = -1;
    MT_ASSERT_INT_EQ(mt_checkpoint_get_meta_i64(latest, "index", &index), MT_OK);
    MT_ASSERT_INT_EQ(index, 3);
    float w[4] = {0};
    MT_ASSERT_INT_EQ(mt_checkpoint_get(latest, "w", MT_F32, w, 4), MT_OK);
    CU_ASSERT_DOUBLE_EQUAL(w[0], 3.0, 0);
    mt_result_free(&res);
    MT_ASSERT_INT_EQ(mt_result_load(run_dir("best_all"), &res), MT_OK);
    check_best(res, true);
    mt_result_free(&res);

    cfg = mt_test_config("best_kept");
    cfg.run.checkpoint.num_to_keep = 1;
    cfg.run.checkpoint.score_attribute = "loss";
    cfg.run.checkpoint.score_order = MT_ORDER_MIN;
    MT_ASSERT_INT_EQ(mt_test_fit(cfg, four_checkpoints, NULL, &res), MT_OK);
    MT_ASSERT_INT_EQ(mt_result_num_best(res), 2);
    check_best(res, false);
    mt_result_free(&res);
    MT_ASSERT_INT_EQ(mt_result_load(run_dir("best_kept"), &res), MT_OK);
    check_best(res, false);
    mt_result_free(&res);

    /* no checkpoint at all */
    MT_ASSERT_INT_EQ(mt_test_fit(mt_test_config("best_none"), four_reports, NULL, &res), MT_OK);
    const mt_checkpoint *ck = NULL;
    MT_ASSERT_INT_EQ(mt_result_best_checkpoint(res, "loss", MT_ORDER_MIN, &ck, NULL), MT_ENOTFOUND);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "keeps no checkpoint");
    mt_result_free(&res);
}

/* ------------------------------------------------------------ typed metadata */

typedef struct {
    int seen;      /* attempts that found a checkpoint */
    int failures;  /* typed reads that did not give what was stored */
} typed_arg;

static void check_typed(const mt_checkpoint *ck, int *bad)
{
    int64_t i = 0;
    double d = 0;
    *bad += mt_checkpoint_get_meta_i64(ck, "epoch", &i) != MT_OK || i != 7;
    *bad += mt_checkpoint_get_meta_i64(ck, "min", &i) != MT_OK || i != INT64_MIN;
    *bad += mt_checkpoint_get_meta_f64(ck, "lr", &d) != MT_OK || d != 0.1;
    *bad += mt_checkpoint_get_meta_f64(ck, "nan", &d) != MT_OK || !isnan(d);
    *bad += mt_checkpoint_get_meta_f64(ck, "retyped", &d) != MT_OK || d != -2.5;
    const char *s = mt_checkpoint_get_meta(ck, "name");
    *bad += !s || strcmp(s, "model");
    /* the wrong type is an error naming the type and the getter to use */
    *bad += mt_checkpoint_get_meta(ck, "epoch") != NULL;
    *bad += !strstr(mt_last_error(), "metadata epoch") ||
            !strstr(mt_last_error(), "is an integer, not a string (read it with "
                                     "mt_checkpoint_get_meta_i64)");
    *bad += mt_checkpoint_get_meta_f64(ck, "epoch", &d) != MT_EINVAL;
    *bad += !strstr(mt_last_error(), "is an integer, not a double");
    *bad += mt_checkpoint_get_meta_i64(ck, "lr", &i) != MT_EINVAL;
    *bad += !strstr(mt_last_error(), "is a double, not an integer");
    *bad += mt_checkpoint_get_meta_i64(ck, "name", &i) != MT_EINVAL;
    *bad += !strstr(mt_last_error(), "is a string, not an integer (read it with "
                                     "mt_checkpoint_get_meta)");
    *bad += mt_checkpoint_get_meta_i64(ck, "missing", &i) != MT_ENOTFOUND;
    *bad += mt_checkpoint_get_meta_i64(ck, NULL, &i) != MT_EINVAL;
    *bad += mt_checkpoint_get_meta_f64(ck, "lr", NULL) != MT_EINVAL;
    *bad += mt_checkpoint_get_meta(ck, "missing") != NULL;
}

static int typed_meta(mt_context *c, void *arg)
{
    typed_arg *a = arg;
    const mt_checkpoint *restored = mt_get_checkpoint(c);
    if (restored) { /* the retry: every rank reads what rank 0 stored */
        a->seen++;
        check_typed(restored, &a->failures);
        return MT_OK;
    }
    mt_checkpoint *ck = mt_checkpoint_new();
    int bad = 0;
    bad += mt_checkpoint_set_meta_i64(ck, "epoch", 7) != MT_OK;
    bad += mt_checkpoint_set_meta_i64(ck, "min", INT64_MIN) != MT_OK;
    bad += mt_checkpoint_set_meta_f64(ck, "lr", 0.1) != MT_OK;
    bad += mt_checkpoint_set_meta_f64(ck, "nan", NAN) != MT_OK;
    bad += mt_checkpoint_set_meta(ck, "retyped", "was a string") != MT_OK;
    bad += mt_checkpoint_set_meta_f64(ck, "retyped", -2.5) != MT_OK; /* type replaced too */
    bad += mt_checkpoint_set_meta(ck, "name", "model") != MT_OK;
    check_typed(ck, &bad); /* the builder reads back what it holds */
    bad += mt_checkpoint_set_meta_i64(NULL, "k", 1) != MT_EINVAL;
    bad += mt_checkpoint_set_meta_f64(ck, "", 1) != MT_EINVAL;
    bad += mt_checkpoint_set_meta_i64(ck, "bad\nkey", 1) != MT_EINVAL;
    a->failures += bad;
    int rc = mt_report(c, NULL, ck);
    mt_checkpoint_free(&ck);
    if (!rc && mt_attempt(c) == 0)
        rc = mt__error(MT_EIO, "fail once to read the checkpoint back");
    return rc;
}

static void test_typed_metadata(void)
{
    mt_trainer_config cfg = mt_test_config("typed");
    cfg.run.failure.max_failures = 1;
    typed_arg a = {0, 0};
    mt_result *res = NULL;
    MT_ASSERT_INT_EQ(mt_test_fit(cfg, typed_meta, &a, &res), MT_OK);
    MT_ASSERT_INT_EQ(a.seen, 1);
    MT_ASSERT_INT_EQ(a.failures, 0);
    int bad = 0;
    check_typed(mt_result_checkpoint(res), &bad); /* described to every rank */
    MT_ASSERT_INT_EQ(bad, 0);
    char path[1200];
    snprintf(path, sizeof path, "%s", mt_checkpoint_path(mt_result_checkpoint(res)));
    mt_result_free(&res);
    mt_checkpoint *ck = NULL;
    MT_ASSERT_INT_EQ(mt_checkpoint_open(path, &ck), MT_OK);
    bad = 0;
    check_typed(ck, &bad);
    MT_ASSERT_INT_EQ(bad, 0);
    /* a stored checkpoint is read-only */
    MT_ASSERT_INT_EQ(mt_checkpoint_set_meta_i64(ck, "epoch", 8), MT_EINVAL);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "a stored checkpoint is read-only");
    mt_checkpoint_free(&ck);
}

/* ------------------------------------------------------------ open by path */

static int with_files(mt_context *c, void *arg)
{
    int r = mt_world_rank(c);
    char note[1024];
    snprintf(note, sizeof note, "%s/note-%d.txt", mt_test_storage(), r);
    FILE *f = fopen(note, "w");
    if (f) {
        fprintf(f, "rank %d\n", r);
        fclose(f);
    }
    int64_t rows[2] = {10 * r, 10 * r + 1};
    double w[3] = {0.5, 1.5, 2.5};
    mt_checkpoint *ck = mt_checkpoint_new();
    mt_checkpoint_put(ck, "rows", MT_I64, 1, (size_t[]){2}, rows, MT_SHARDED);
    mt_checkpoint_put(ck, "w", MT_F64, 1, (size_t[]){3}, w, MT_REPLICATED);
    mt_checkpoint_set_meta(ck, "kind", "demo");
    mt_checkpoint_set_meta_i64(ck, "epoch", 4);
    mt_checkpoint_add_file(ck, "note.txt", note);
    int rc = mt_report(c, NULL, ck);
    mt_checkpoint_free(&ck);
    return rc;
}

static bool listed_file(const mt_checkpoint *ck, const char *name)
{
    for (size_t i = 0; i < mt_checkpoint_num_files(ck); i++)
        if (!strcmp(mt_checkpoint_file_name(ck, i), name))
            return true;
    return false;
}

static void test_open_by_path(void)
{
    mt_result *res = NULL;
    MT_ASSERT_INT_EQ(mt_test_fit(mt_test_config("opened"), with_files, NULL, &res), MT_OK);
    mt_result_free(&res);
    char path[1200];
    snprintf(path, sizeof path, "%s/checkpoint_000000", run_dir("opened"));
    /* local: only the last rank opens it (no collective, nothing waits for the others) */
    if (R() == P() - 1) {
        mt_checkpoint *ck = NULL;
        MT_ASSERT_INT_EQ(mt_checkpoint_open(path, &ck), MT_OK);
        MT_ASSERT_INT_EQ(mt_checkpoint_num_arrays(ck), 2);
        MT_ASSERT_STR_EQ(mt_checkpoint_array_name(ck, 0), "rows");
        MT_ASSERT_STR_EQ(mt_checkpoint_array_name(ck, 1), "w");
        CU_ASSERT_PTR_NULL(mt_checkpoint_array_name(ck, 2));
        int ndim = 0;
        size_t dims[8] = {0};
        MT_ASSERT_INT_EQ(mt_checkpoint_dims(ck, "rows", &ndim, dims), MT_OK);
        MT_ASSERT_INT_EQ(dims[0], 2 * P()); /* the whole array, outside a run */
        int64_t rows[8] = {0};
        MT_ASSERT_INT_EQ(mt_checkpoint_get(ck, "rows", MT_I64, rows, (size_t)(2 * P())), MT_OK);
        for (int r = 0; r < P(); r++) {
            MT_ASSERT_INT_EQ(rows[2 * r], 10 * r);
            MT_ASSERT_INT_EQ(rows[2 * r + 1], 10 * r + 1);
        }
        float w[3] = {0};
        MT_ASSERT_INT_EQ(mt_checkpoint_get(ck, "w", MT_F32, w, 3), MT_OK); /* converted */
        CU_ASSERT_DOUBLE_EQUAL(w[2], 2.5, 0);
        MT_ASSERT_INT_EQ(mt_checkpoint_num_meta(ck), 2);
        MT_ASSERT_STR_EQ(mt_checkpoint_meta_key(ck, 0), "epoch");
        MT_ASSERT_STR_EQ(mt_checkpoint_meta_key(ck, 1), "kind");
        MT_ASSERT_STR_EQ(mt_checkpoint_get_meta(ck, "kind"), "demo");
        int64_t epoch = 0;
        MT_ASSERT_INT_EQ(mt_checkpoint_get_meta_i64(ck, "epoch", &epoch), MT_OK);
        MT_ASSERT_INT_EQ(epoch, 4);
        /* files: rank 0's as NAME, rank r's as rankR/NAME */
        MT_ASSERT_INT_EQ(mt_checkpoint_num_files(ck), P());
        CU_ASSERT(listed_file(ck, "note.txt"));
        for (int r = 1; r < P(); r++) {
            char name[64];
            snprintf(name, sizeof name, "rank%d/note.txt", r);
            CU_ASSERT(listed_file(ck, name));
        }
        CU_ASSERT_PTR_NULL(mt_checkpoint_file_name(ck, (size_t)P()));
        mt_checkpoint_free(&ck);
        /* a symbolic link to the folder is followed for a path the user gives */
        char link[1300];
        snprintf(link, sizeof link, "%s/link-%d", mt_test_storage(), R());
        CU_ASSERT(symlink(path, link) == 0);
        MT_ASSERT_INT_EQ(mt_checkpoint_open(link, &ck), MT_OK);
        MT_ASSERT_INT_EQ(mt_checkpoint_num_arrays(ck), 2);
        mt_checkpoint_free(&ck);
    }
    /* not a checkpoint: named in the error */
    mt_checkpoint *ck = (mt_checkpoint *)1;
    char missing[1200];
    snprintf(missing, sizeof missing, "%s/no-such-checkpoint", mt_test_storage());
    MT_ASSERT_INT_EQ(mt_checkpoint_open(missing, &ck), MT_EFORMAT);
    CU_ASSERT_PTR_NULL(ck);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), missing);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "is not a checkpoint");
    MT_ASSERT_INT_EQ(mt_checkpoint_open(run_dir("opened"), &ck), MT_EFORMAT); /* a run folder */
    MT_ASSERT_STR_CONTAINS(mt_last_error(), run_dir("opened"));
    MT_ASSERT_INT_EQ(mt_checkpoint_open(mt_test_run_file("opened", "run.json"), &ck), MT_EFORMAT);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "run.json is not a checkpoint");
    MT_ASSERT_INT_EQ(mt_checkpoint_open(NULL, &ck), MT_EINVAL);
    MT_ASSERT_INT_EQ(mt_checkpoint_open(path, NULL), MT_EINVAL);
    MT_ASSERT_INT_EQ(mt_checkpoint_open("", &ck), MT_EINVAL);
    MT_ASSERT_INT_EQ(mt_checkpoint_num_arrays(NULL), 0);
    MT_ASSERT_INT_EQ(mt_checkpoint_num_files(NULL), 0);
    MT_ASSERT_INT_EQ(mt_checkpoint_num_meta(NULL), 0);
    CU_ASSERT_PTR_NULL(mt_checkpoint_meta_key(NULL, 0));
    /* a checkpoint being built lists nothing stored */
    mt_checkpoint *b = mt_checkpoint_new();
    MT_ASSERT_INT_EQ(mt_checkpoint_num_files(b), 0);
    CU_ASSERT_PTR_NULL(mt_checkpoint_file_name(b, 0));
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "mt_checkpoint_file_name: index 0 out of range (0 files)");
    /* a freed one is refused, never read (the sanitizer build would see a read) */
    const mt_checkpoint *gone = b;
    mt_checkpoint_free(&b);
    MT_ASSERT_INT_EQ(mt_checkpoint_num_arrays(gone), 0);
    CU_ASSERT_PTR_NULL(mt_checkpoint_array_name(gone, 0));
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "mt_checkpoint_array_name: not a live checkpoint");
    CU_ASSERT_PTR_NULL(mt_checkpoint_meta_key(gone, 0));
    CU_ASSERT_PTR_NULL(mt_checkpoint_file_name(gone, 0));
    int64_t v = 0;
    MT_ASSERT_INT_EQ(mt_checkpoint_get_meta_i64(gone, "k", &v), MT_EINVAL);
    barrier();
    if (R() == 0) { /* a damaged index: still named */
        char bad[1200];
        snprintf(bad, sizeof bad, "%s/damaged", mt_test_storage());
        mkdir(bad, 0755);
        char h5[1300];
        snprintf(h5, sizeof h5, "%s/checkpoint.h5", bad);
        FILE *f = fopen(h5, "w");
        if (f) {
            fputs("not hdf5", f);
            fclose(f);
        }
        MT_ASSERT_INT_EQ(mt_checkpoint_open(bad, &ck), MT_EFORMAT);
        MT_ASSERT_STR_CONTAINS(mt_last_error(), "mt_checkpoint_open: ");
        MT_ASSERT_STR_CONTAINS(mt_last_error(), bad);
    }
}

/* ------------------------------------------------------------ resume_from_checkpoint */

typedef struct {
    int calls, with_checkpoint;
    int64_t iteration_seen;
    double w0;
    char path[1200];
    bool fail_first;
} from_arg;

static int starts_from(mt_context *c, void *arg)
{
    from_arg *a = arg;
    a->calls++;
    const mt_checkpoint *ck = mt_get_checkpoint(c);
    a->iteration_seen = mt_training_iteration(c);
    a->w0 = -1;
    if (ck) {
        a->with_checkpoint++;
        snprintf(a->path, sizeof a->path, "%s", mt_checkpoint_path(ck));
        double w[3] = {0};
        int rc = mt_checkpoint_get(ck, "w", MT_F64, w, 3); /* collective inside fit */
        if (rc)
            return rc;
        a->w0 = w[0];
    }
    int rc = MT_OK;
    for (int i = 0; i < 2 && !rc; i++) {
        mt_metrics *m = mt_metrics_new();
        mt_metrics_set_f64(m, "x", i);
        double w[3] = {100 + i, 0, 0};
        mt_checkpoint *own = mt_checkpoint_new();
        mt_checkpoint_put(own, "w", MT_F64, 1, (size_t[]){3}, w, MT_REPLICATED);
        rc = mt_report(c, m, own);
        mt_checkpoint_free(&own);
        mt_metrics_free(&m);
    }
    if (!rc && a->fail_first && mt_attempt(c) == 0)
        rc = mt__error(MT_EIO, "fail after the run's own checkpoints");
    return rc;
}

static void test_resume_from_checkpoint(void)
{
    MT_ASSERT_INT_EQ(mt_test_fit(mt_test_config("from_src"), with_files, NULL, NULL), MT_OK);
    char src[1200];
    snprintf(src, sizeof src, "%s/checkpoint_000000", run_dir("from_src"));
    /* a new run starts from it: the function sees it on its first attempt */
    mt_trainer_config cfg = mt_test_config("from_dst");
    cfg.run.resume_from_checkpoint = src;
    cfg.run.failure.max_failures = 1;
    from_arg a = {.fail_first = true};
    mt_result *res = NULL;
    MT_ASSERT_INT_EQ(mt_test_fit(cfg, starts_from, &a, &res), MT_OK);
    MT_ASSERT_INT_EQ(a.calls, 2);
    MT_ASSERT_INT_EQ(a.with_checkpoint, 2);
    /* the retry resumes from the run's own latest checkpoint, not the source */
    MT_ASSERT_STR_CONTAINS(a.path, "from_dst/checkpoint_000001");
    CU_ASSERT_DOUBLE_EQUAL(a.w0, 101, 0);
    MT_ASSERT_INT_EQ(a.iteration_seen, 2);
    MT_ASSERT_INT_EQ(mt_result_num_rows(res), 4);
    mt_result_free(&res);
    /* without a failure: the source's data on the first attempt, iterations from 0 */
    cfg.run.name = "from_dst2";
    from_arg b = {0};
    MT_ASSERT_INT_EQ(mt_test_fit(cfg, starts_from, &b, &res), MT_OK);
    MT_ASSERT_INT_EQ(b.with_checkpoint, 1);
    MT_ASSERT_STR_CONTAINS(b.path, "from_src/checkpoint_000000");
    CU_ASSERT_DOUBLE_EQUAL(b.w0, 0.5, 0);
    MT_ASSERT_INT_EQ(b.iteration_seen, 0);
    MT_ASSERT_INT_EQ(mt_result_num_rows(res), 2);
    int64_t it = 0;
    MT_ASSERT_INT_EQ(mt_metrics_get_i64(mt_result_row(res, 0), "training_iteration", &it), MT_OK);
    MT_ASSERT_INT_EQ(it, 1);
    mt_result_free(&res);
    if (R() == 0) { /* params.json records where the run started */
        json_t *p = json_load_file(mt_test_run_file("from_dst2", "params.json"), 0, NULL);
        MT_ASSERT_STR_EQ(json_string_value(json_object_get(json_object_get(p, "run"),
                                                           "resume_from_checkpoint")), src);
        json_decref(p);
    }
    /* a run directory means its latest checkpoint */
    char bad[1200];
    snprintf(bad, sizeof bad, "%s/from_src", mt_test_storage());
    mt_result *src_res = NULL;
    MT_ASSERT_INT_EQ(mt_result_load(bad, &src_res), MT_OK);
    cfg.run.name = "from_run";
    cfg.run.resume_from_checkpoint = bad;
    from_arg d = {0};
    MT_ASSERT_INT_EQ(mt_test_fit(cfg, starts_from, &d, &res), MT_OK);
    MT_ASSERT_INT_EQ(d.with_checkpoint, 1);
    if (src_res && mt_result_checkpoint(src_res))
        MT_ASSERT_STR_CONTAINS(d.path, strrchr(mt_checkpoint_path(mt_result_checkpoint(src_res)), '/'));
    mt_result_free(&src_res);
    mt_result_free(&res);
    /* a folder that is neither a checkpoint nor a run: the same error on every rank,
     * nothing runs, and the new run leaves no folder */
    snprintf(bad, sizeof bad, "%s", mt_test_storage());
    cfg.run.name = "from_bad";
    cfg.run.resume_from_checkpoint = bad;
    from_arg c = {0};
    MT_ASSERT_INT_EQ(mt_test_fit(cfg, starts_from, &c, &res), MT_EFORMAT);
    MT_ASSERT_INT_EQ(c.calls, 0);
    MT_ASSERT_STR_CONTAINS(mt_result_error(res), "run.resume_from_checkpoint: ");
    MT_ASSERT_STR_CONTAINS(mt_result_error(res), bad);
    CU_ASSERT(access(run_dir("from_bad"), F_OK) != 0);
    mt_result_free(&res);
    snprintf(bad, sizeof bad, "%s/nowhere", mt_test_storage());
    cfg.run.name = "from_bad2";
    MT_ASSERT_INT_EQ(mt_test_fit(cfg, starts_from, &c, &res), MT_EFORMAT);
    MT_ASSERT_INT_EQ(c.calls, 0);
    MT_ASSERT_STR_CONTAINS(mt_result_error(res), bad);
    mt_result_free(&res);
    /* an empty path: a configuration error */
    cfg.run.resume_from_checkpoint = "";
    MT_ASSERT_INT_EQ(mt_config_validate(&cfg), MT_EINVAL);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "run.resume_from_checkpoint must not be empty");
    /* the command-line flag */
    mt_trainer_config fromargs = {0};
    char a0[] = "prog", a1[] = "--resume-from-checkpoint", a2[] = "/some/ck", a3[] = "rest";
    char *argv_[] = {a0, a1, a2, a3, NULL}, **argv = argv_;
    int argc = 4;
    MT_ASSERT_INT_EQ(mt_config_from_args(&fromargs, &argc, &argv), MT_OK);
    MT_ASSERT_STR_EQ(fromargs.run.resume_from_checkpoint, "/some/ck");
    MT_ASSERT_INT_EQ(argc, 2);
}

/* A trainable started from another run's checkpoint: load sees it, the new run counts its
 * own iterations from 0 (the checkpoint's mt.training_iteration and mt.done are the other
 * run's). */
typedef struct {
    double w;
    int loads, steps;
    int64_t first;
} counter;

static int tr_step(mt_context *c, void *user, mt_metrics *out)
{
    counter *k = user;
    if (k->steps++ == 0)
        k->first = mt_training_iteration(c) + 1;
    k->w += 1;
    return mt_metrics_set_f64(out, "w", k->w);
}

static int tr_save(mt_context *c, void *user, mt_checkpoint *ck)
{
    counter *k = user;
    return mt_checkpoint_put(ck, "w", MT_F64, 1, (size_t[]){1}, &k->w, MT_REPLICATED);
}

static int tr_load(mt_context *c, void *user, const mt_checkpoint *ck)
{
    counter *k = user;
    k->loads++;
    return mt_checkpoint_get(ck, "w", MT_F64, &k->w, 1);
}

static int tr_fit(mt_trainer_config cfg, int64_t iterations, counter *k)
{
    mt_trainable tr = {.step = tr_step, .save = tr_save, .load = tr_load,
                       .max_iterations = iterations};
    mt_trainer *t = NULL;
    CU_ASSERT_EQUAL_FATAL(mt_trainer_create_trainable(&t, &tr, k, &cfg), MT_OK);
    int rc = mt_trainer_fit(t, NULL);
    mt_trainer_destroy(&t);
    return rc;
}

static void test_trainable_resumes_from_checkpoint(void)
{
    mt_trainer_config cfg = mt_test_config("tr_src");
    cfg.run.checkpoint.at_end = true; /* mt.done "1" at iteration 5 */
    counter src = {0};
    MT_ASSERT_INT_EQ(tr_fit(cfg, 5, &src), MT_OK);
    CU_ASSERT_DOUBLE_EQUAL(src.w, 5, 0);
    char from[1200];
    snprintf(from, sizeof from, "%s/checkpoint_000000", run_dir("tr_src"));
    cfg = mt_test_config("tr_dst");
    cfg.run.resume_from_checkpoint = from;
    counter dst = {0};
    MT_ASSERT_INT_EQ(tr_fit(cfg, 3, &dst), MT_OK);
    MT_ASSERT_INT_EQ(dst.loads, 1);
    MT_ASSERT_INT_EQ(dst.steps, 3);
    MT_ASSERT_INT_EQ(dst.first, 1);
    CU_ASSERT_DOUBLE_EQUAL(dst.w, 8, 0); /* 5 from the source, 3 more steps */
    mt_result *res = NULL;
    MT_ASSERT_INT_EQ(mt_result_load(run_dir("tr_dst"), &res), MT_OK);
    MT_ASSERT_INT_EQ(mt_result_num_rows(res), 3);
    mt_result_free(&res);
}

/* ------------------------------------------------------------ score attribute */

static int reports_loss(mt_context *c, void *arg)
{
    int *ok = arg, rc = MT_OK;
    for (int i = 0; i < 2 && !rc; i++) {
        mt_metrics *m = mt_metrics_new();
        mt_metrics_set_f64(m, "loss", 1);
        mt_metrics_set_f64(m, "val/acc", 0.5);
        rc = mt_report(c, m, NULL);
        mt_metrics_free(&m);
        if (!rc)
            (*ok)++;
    }
    return rc;
}

/* Counts its calls (attempts), then reports_loss. */
static int counted_reports_loss(mt_context *c, void *arg)
{
    int *calls = arg, ok = 0;
    (*calls)++;
    return reports_loss(c, &ok);
}

static void test_score_attribute_must_be_reported(void)
{
    mt_trainer_config cfg = mt_test_config("score_missing");
    cfg.run.checkpoint.score_attribute = "val_acc";
    int ok = 0;
    mt_result *res = NULL;
    int rc = mt_test_fit(cfg, reports_loss, &ok, &res);
    MT_ASSERT_INT_EQ(rc, MT_EINVAL); /* the same code on every rank */
    MT_ASSERT_INT_EQ(ok, 0);
    MT_ASSERT_STR_CONTAINS(mt_result_error(res), "run.checkpoint.score_attribute \"val_acc\" is "
                                                 "not a key of the first report (reported: "
                                                 "loss, val/acc");
    mt_result_free(&res);
    /* with unlimited retries: not retried (a retry would fail the same way, for ever) */
    cfg.run.name = "score_forever";
    cfg.run.failure.max_failures = -1;
    int calls = 0;
    MT_ASSERT_INT_EQ(mt_test_fit(cfg, counted_reports_loss, &calls, NULL), MT_EINVAL);
    MT_ASSERT_INT_EQ(calls, 1);
    cfg.run.failure.max_failures = 0;
    /* a reported key, or an automatic one, is fine */
    cfg.run.name = "score_auto";
    cfg.run.checkpoint.score_attribute = "training_iteration";
    ok = 0;
    MT_ASSERT_INT_EQ(mt_test_fit(cfg, reports_loss, &ok, NULL), MT_OK);
    MT_ASSERT_INT_EQ(ok, 2);
    cfg.run.name = "score_ok";
    cfg.run.checkpoint.score_attribute = "val/acc";
    ok = 0;
    MT_ASSERT_INT_EQ(mt_test_fit(cfg, reports_loss, &ok, NULL), MT_OK);
    MT_ASSERT_INT_EQ(ok, 2);
}

/* Reports a new checkpoint, then the same one opened by path (arg: the rc of that). */
static int reports_stored(mt_context *c, void *arg)
{
    int *second = arg;
    mt_metrics *m = mt_metrics_new();
    mt_metrics_set_f64(m, "x", 1);
    mt_checkpoint *ck = mt_checkpoint_new(), *st = NULL;
    double w = 3;
    mt_checkpoint_put(ck, "w", MT_F64, 1, (size_t[]){1}, &w, MT_REPLICATED);
    int rc = mt_report(c, m, ck);
    char path[1200];
    snprintf(path, sizeof path, "%s/checkpoint_000000", mt_run_dir(c));
    if (!rc)
        rc = mt_checkpoint_open(path, &st);
    if (!rc) {
        rc = *second = mt_report(c, m, st);
        if (rc)
            MT_ASSERT_STR_CONTAINS(mt_last_error(), "the checkpoint is a stored one");
    }
    mt_checkpoint_free(&st);
    mt_checkpoint_free(&ck);
    mt_metrics_free(&m);
    return rc;
}

/* A checkpoint read back holds no arrays of its own: reporting it would commit an empty
 * checkpoint as the latest. Refused on every rank, not retried, nothing committed. */
static void test_stored_checkpoint_not_reported(void)
{
    mt_trainer_config cfg = mt_test_config("stored_report");
    cfg.run.failure.max_failures = 2;
    int second = 0;
    MT_ASSERT_INT_EQ(mt_test_fit(cfg, reports_stored, &second, NULL), MT_EINVAL);
    /* every rank refuses its own: the lowest rank's code wins, the others are told */
    CU_ASSERT(second == MT_EINVAL || (R() != 0 && second == MT_EPEER));
    MPI_Barrier(MPI_COMM_WORLD);
    if (R() == 0) {
        json_t *run = json_load_file(mt_test_run_file("stored_report", "run.json"), 0, NULL);
        MT_ASSERT_STR_EQ(json_string_value(json_object_get(run, "latest")), "checkpoint_000000");
        json_decref(run);
        struct stat st;
        CU_ASSERT(stat(mt_test_run_file("stored_report", "checkpoint_000001"), &st) != 0);
    }
}

/* ------------------------------------------------------------ across restarts */

static int always_fails(mt_context *c, void *arg)
{
    int *fail = arg;
    mt_metrics *m = mt_metrics_new();
    mt_metrics_set_f64(m, "x", 1);
    mt_checkpoint *ck = mt_checkpoint_new();
    double w = 1;
    mt_checkpoint_put(ck, "w", MT_F64, 1, (size_t[]){1}, &w, MT_REPLICATED);
    int rc = mt_report(c, m, ck);
    mt_checkpoint_free(&ck);
    mt_metrics_free(&m);
    if (!rc && *fail && mt_world_rank(c) == P() - 1)
        rc = mt__error(MT_EIO, "injected failure");
    return rc;
}

static json_t *run_json(const char *name)
{
    return json_load_file(mt_test_run_file(name, "run.json"), 0, NULL);
}

static void test_counters_across_restarts(void)
{
    /* every failed attempt is counted, the last one too */
    mt_trainer_config cfg = mt_test_config("counted");
    cfg.run.failure.max_failures = 1;
    int fail = 1;
    mt_result *res = NULL;
    MT_ASSERT_INT_EQ(mt_test_fit(cfg, always_fails, &fail, &res), MT_EIO);
    MT_ASSERT_INT_EQ(mt_result_attempts(res), 2);
    /* the retry resumed after row 1: its row is its attempt's first */
    MT_ASSERT_INT_EQ(mt_result_num_rows(res), 2);
    for (size_t i = 0; i < 2 && mt_result_num_rows(res) == 2; i++) {
        int64_t it = 0, since = 0;
        MT_ASSERT_INT_EQ(mt_metrics_get_i64(mt_result_row(res, i), "training_iteration", &it), MT_OK);
        MT_ASSERT_INT_EQ(mt_metrics_get_i64(mt_result_row(res, i), "iterations_since_restore",
                                            &since), MT_OK);
        MT_ASSERT_INT_EQ(it, (int64_t)i + 1);
        MT_ASSERT_INT_EQ(since, 1);
    }
    mt_result_free(&res);
    barrier();
    struct stat st;
    if (R() == 0) {
        json_t *j = run_json("counted");
        MT_ASSERT_INT_EQ(json_integer_value(json_object_get(j, "failures")), 2);
        MT_ASSERT_INT_EQ(json_integer_value(json_object_get(j, "attempts")), 2);
        json_decref(j);
        CU_ASSERT(stat(mt_test_run_file("counted", "error.txt"), &st) == 0);
    }
    /* the rerun finishes: failures stay counted, error.txt is gone */
    fail = 0;
    MT_ASSERT_INT_EQ(mt_test_fit(cfg, always_fails, &fail, &res), MT_OK);
    CU_ASSERT_PTR_NULL(mt_result_error(res));
    mt_result_free(&res);
    if (R() == 0) {
        json_t *j = run_json("counted");
        MT_ASSERT_INT_EQ(json_integer_value(json_object_get(j, "failures")), 2);
        MT_ASSERT_STR_EQ(json_string_value(json_object_get(j, "status")), "finished");
        json_decref(j);
        CU_ASSERT(stat(mt_test_run_file("counted", "error.txt"), &st) != 0);
    }

    /* a crash: run.json still says "running" with the time of before the attempt (the
     * crashed attempt never saved its own), its rows say how long it ran */
    cfg = mt_test_config("crashed");
    fail = 1;
    MT_ASSERT_INT_EQ(mt_test_fit(cfg, always_fails, &fail, NULL), MT_EIO);
    barrier();
    if (R() == 0) {
        json_t *j = run_json("crashed");
        json_object_set_new(j, "status", json_string("running"));
        json_object_set_new(j, "time_total_s", json_real(0));
        json_dump_file(j, mt_test_run_file("crashed", "run.json"), 0);
        json_decref(j);
        unlink(mt_test_run_file("crashed", "error.txt"));
        FILE *f = fopen(mt_test_run_file("crashed", "result.json"), "r");
        char line[8192] = "";
        if (f) {
            CU_ASSERT_PTR_NOT_NULL(fgets(line, sizeof line, f));
            fclose(f);
        }
        json_t *row = json_loads(line, 0, NULL);
        json_object_set_new(row, "time_total_s", json_real(1000.0));
        char *text = json_dumps(row, JSON_COMPACT);
        f = fopen(mt_test_run_file("crashed", "result.json"), "w");
        if (f && text) {
            fprintf(f, "%s\n", text);
            fclose(f);
        }
        free(text);
        json_decref(row);
    }
    barrier();
    fail = 0;
    MT_ASSERT_INT_EQ(mt_test_fit(cfg, always_fails, &fail, &res), MT_OK);
    MT_ASSERT_INT_EQ(mt_result_num_rows(res), 2);
    double before = 0, after = 0;
    MT_ASSERT_INT_EQ(mt_metrics_get_f64(mt_result_row(res, 0), "time_total_s", &before), MT_OK);
    MT_ASSERT_INT_EQ(mt_metrics_get_f64(mt_result_row(res, 1), "time_total_s", &after), MT_OK);
    CU_ASSERT_DOUBLE_EQUAL(before, 1000.0, 0);
    CU_ASSERT(after >= 1000.0); /* kept counting from the crashed attempt's time */
    mt_result_free(&res);
    if (R() == 0) {
        json_t *j = run_json("crashed");
        /* the failed first fit, then the crash */
        MT_ASSERT_INT_EQ(json_integer_value(json_object_get(j, "failures")), 2);
        CU_ASSERT(json_real_value(json_object_get(j, "time_total_s")) >= 1000.0);
        json_decref(j);
        CU_ASSERT(stat(mt_test_run_file("crashed", "error.txt"), &st) != 0);
    }
}

/* ------------------------------------------------------------ one rank fails */

/* Building the result fails on one rank only (reading result.json on rank 0, or the
 * result itself on any rank): every rank returns, the failing one its error, the others
 * MT_EPEER, none with a result, none waiting. */
static void test_result_fails_on_one_rank(void)
{
    char spec[64];
    for (int victim = 0; victim <= P(); victim++) {
        bool rows = victim == P(); /* the last turn: rank 0's read of result.json */
        if (rows)
            snprintf(spec, sizeof spec, "result-rows:0");
        else
            snprintf(spec, sizeof spec, "result-build:%d", victim);
        setenv("MT_TEST_FAIL_AT", spec, 1);
        char name[64];
        snprintf(name, sizeof name, "one_fails_%d", victim);
        mt_result *res = (mt_result *)1;
        int rc = mt_test_fit(mt_test_config(name), four_reports, NULL, &res);
        unsetenv("MT_TEST_FAIL_AT");
        int who = rows ? 0 : victim;
        MT_ASSERT_INT_EQ(rc, R() == who ? (rows ? MT_EIO : MT_ENOMEM) : MT_EPEER);
        CU_ASSERT_PTR_NULL(res);
        MT_ASSERT_STR_CONTAINS(mt_last_error(), "(test failure)"); /* the others name it too */
    }
}

static const mt_test tests[] = {
    {"history_from_fit_and_load", test_history_from_fit_and_load},
    {"best_checkpoint_by_any_metric", test_best_checkpoint_by_any_metric},
    {"typed_metadata", test_typed_metadata},
    {"open_by_path", test_open_by_path},
    {"resume_from_checkpoint", test_resume_from_checkpoint},
    {"trainable_resumes_from_checkpoint", test_trainable_resumes_from_checkpoint},
    {"score_attribute_must_be_reported", test_score_attribute_must_be_reported},
    {"stored_checkpoint_not_reported", test_stored_checkpoint_not_reported},
    {"counters_across_restarts", test_counters_across_restarts},
    {"result_fails_on_one_rank", test_result_fails_on_one_rank},
    {NULL, NULL},
};

int main(int argc, char **argv)
{
    return mt_test_main(argc, argv, "mpi_results", tests, true);
}
