/*
 * test_mpi_report.c -- under mpirun at 1 to 4 ranks: reports (result.json, progress.csv,
 * per-rank spread), checkpoints (replicated, sharded, metadata, files), retention on
 * disk, resume and refusal of a finished run, retries, corrupt checkpoints, preemption,
 * bad input on one rank, and mt_result / mt_result_load.
 */
#include "harness.h"

#include "../runtime/runtime.h"
#include "../io/h5.h"

#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

static int R(void) { return mt_test_rank(); }
static int P(void) { return mt_test_size(); }

typedef int (*body)(mt_context *c, void *arg);

/* result.json rows (rank 0 reads; every rank gets the count back). */
static json_t *rows_of(const char *name)
{
    json_t *rows = json_array();
    FILE *f = fopen(mt_test_run_file(name, "result.json"), "r");
    char *line = NULL;
    size_t cap = 0;
    while (f && getline(&line, &cap, f) > 0)
        json_array_append_new(rows, json_loads(line, 0, NULL));
    free(line);
    if (f)
        fclose(f);
    return rows;
}

/* ------------------------------------------------------------ reports */

static int three_reports(mt_context *c, void *arg)
{
    int rc = MT_OK;
    for (int i = 0; i < 3 && !rc; i++) {
        mt_metrics *m = mt_metrics_new();
        mt_metrics_set_f64(m, "loss", 1.0 / (i + 1) + mt_world_rank(c));
        mt_metrics_set_i64(m, "step", i);
        mt_metrics_set_str(m, "phase", "train, \"warm\"");
        if (i >= 1)
            mt_metrics_set_f64(m, "val/acc", 0.5 + 0.1 * i); /* appears mid-run */
        rc = mt_report(c, m, NULL);
        mt_metrics_free(&m);
    }
    return rc;
}

static void test_report_files(void)
{
    mt_result *res = NULL;
    MT_ASSERT_INT_EQ(mt_test_fit(mt_test_config("reports"), three_reports, NULL, &res), MT_OK);
    /* the result is the same on every rank */
    int64_t it = 0;
    double loss = 0;
    MT_ASSERT_INT_EQ(mt_metrics_get_i64(mt_result_metrics(res), "training_iteration", &it), MT_OK);
    MT_ASSERT_INT_EQ(it, 3);
    MT_ASSERT_INT_EQ(mt_metrics_get_f64(mt_result_metrics(res), "loss", &loss), MT_OK);
    CU_ASSERT_DOUBLE_EQUAL(loss, 1.0 / 3, 1e-12); /* rank 0's */
    MT_ASSERT_STR_EQ(mt_metrics_get_str(mt_result_metrics(res), "phase"), "train, \"warm\"");
    CU_ASSERT_PTR_NULL(mt_result_checkpoint(res));
    mt_result_free(&res);
    if (R() == 0) {
        json_t *rows = rows_of("reports");
        MT_ASSERT_INT_EQ(json_array_size(rows), 3);
        json_t *last = json_array_get(rows, 2);
        MT_ASSERT_INT_EQ(json_integer_value(json_object_get(last, "training_iteration")), 3);
        CU_ASSERT(json_is_real(json_object_get(last, "time_total_s")));
        CU_ASSERT(json_is_real(json_object_get(last, "time_this_iter_s")));
        CU_ASSERT(json_is_real(json_object_get(last, "timestamp")));
        if (P() > 1) {
            json_t *s = json_object_get(json_object_get(last, "per_rank"), "loss");
            CU_ASSERT_DOUBLE_EQUAL(json_real_value(json_object_get(s, "min")), 1.0 / 3, 1e-9);
            CU_ASSERT_DOUBLE_EQUAL(json_real_value(json_object_get(s, "max")), 1.0 / 3 + P() - 1, 1e-9);
            CU_ASSERT_DOUBLE_EQUAL(json_real_value(json_object_get(s, "mean")),
                                   1.0 / 3 + (P() - 1) / 2.0, 1e-9);
        }
        json_decref(rows);
        /* progress.csv: a header that includes the late key, and three rows */
        FILE *f = fopen(mt_test_run_file("reports", "progress.csv"), "r");
        char line[4096];
        int n = 0;
        char header[4096] = "", first[4096] = "";
        while (f && fgets(line, sizeof line, f)) {
            if (n == 0)
                snprintf(header, sizeof header, "%s", line);
            if (n == 1)
                snprintf(first, sizeof first, "%s", line);
            n++;
        }
        if (f)
            fclose(f);
        MT_ASSERT_INT_EQ(n, 4);
        MT_ASSERT_STR_CONTAINS(header, "loss,step,phase,training_iteration");
        MT_ASSERT_STR_CONTAINS(header, "val/acc");
        MT_ASSERT_STR_CONTAINS(first, "\"train, \"\"warm\"\"\"");
        struct stat st;
        CU_ASSERT(stat(mt_test_run_file("reports", "params.json"), &st) == 0);
        /* a crash cut a fourth row short: mt_result_load reads the last whole one */
        f = fopen(mt_test_run_file("reports", "result.json"), "a");
        if (f) {
            fputs("{\"loss\":0.1,\"training_iteration\":4", f);
            fclose(f);
        }
        char dir[1024];
        snprintf(dir, sizeof dir, "%s/reports", mt_test_storage());
        mt_result *loaded = NULL;
        MT_ASSERT_INT_EQ(mt_result_load(dir, &loaded), MT_OK);
        it = 0;
        MT_ASSERT_INT_EQ(mt_metrics_get_i64(mt_result_metrics(loaded), "training_iteration", &it),
                         MT_OK);
        MT_ASSERT_INT_EQ(it, 3);
        mt_result_free(&loaded);
    }
}

/* ------------------------------------------------------------ per-rank statistics */

/* The metrics rank r reports at report i (0-based): the keys change between reports, on
 * rank 0 (the layout) and on rank 1 alone, values go nonfinite, keys become strings, and
 * the number of keys crosses the size that travels in the opening agreement. */
#define SPREAD_REPORTS 18
static void spread_metrics(int i, int r, mt_metrics *m)
{
    char key[32];
    switch (i) {
    case 0: case 1: /* the same keys twice: the second report uses the cached layout */
        mt_metrics_set_f64(m, "loss", 10.0 * i + r);
        mt_metrics_set_i64(m, "step", i);
        break;
    case 2: /* rank 0 adds a key: a new layout */
        mt_metrics_set_f64(m, "loss", 1.0 + r);
        mt_metrics_set_i64(m, "step", i);
        mt_metrics_set_f64(m, "acc", 0.5 + 0.1 * r);
        break;
    case 3: /* only rank 1 changes: it drops loss and adds a key rank 0 does not have */
        if (r != 1)
            mt_metrics_set_f64(m, "loss", 2.0 + r);
        mt_metrics_set_i64(m, "step", i);
        mt_metrics_set_f64(m, "acc", 0.25 * r);
        if (r == 1)
            mt_metrics_set_f64(m, "only_rank_1", 7);
        break;
    case 4: /* rank 1's loss is a string; rank 1's keys in another order */
        if (r == 1) {
            mt_metrics_set_f64(m, "acc", 1);
            mt_metrics_set_str(m, "loss", "n/a");
            mt_metrics_set_i64(m, "step", i);
        } else {
            mt_metrics_set_f64(m, "loss", 3.0 + r);
            mt_metrics_set_i64(m, "step", i);
            mt_metrics_set_f64(m, "acc", 1);
        }
        break;
    case 5: /* nonfinite values: rank 0's own NaN, rank 1 +inf, rank 2 -inf */
        mt_metrics_set_f64(m, "loss", r == 0 ? NAN : r == 1 ? INFINITY : r == 2 ? -INFINITY
                                                                               : 4.0 + r);
        mt_metrics_set_f64(m, "acc", r == 1 ? NAN : 0.5);
        mt_metrics_set_i64(m, "step", i);
        break;
    case 6: case 7: /* more keys than the agreement's message carries, twice */
        for (int k = 0; k < 10; k++) {
            snprintf(key, sizeof key, "k%d", k);
            mt_metrics_set_f64(m, key, 100.0 * k + r + i);
        }
        break;
    case 8: /* rank 0 has no numeric key at all */
        if (r == 0)
            mt_metrics_set_str(m, "phase", "eval");
        else
            mt_metrics_set_f64(m, "loss", r);
        break;
    case 9: /* a value no rank has finite */
        mt_metrics_set_f64(m, "loss", NAN);
        mt_metrics_set_f64(m, "acc", r);
        break;
    case 10: case 11: /* back to a small layout; rank 1's keys change at the last one */
        mt_metrics_set_f64(m, "acc", r + i);
        if (i == 11 && r == 1)
            mt_metrics_set_f64(m, "late", 1);
        break;
    case 12: case 13: case 14: case 15: /* the most keys the agreement's message carries
        (8), every rank with all of them, then rank 1 without k3 and rank 2 with a NaN k5
        (report 14: the counts are no longer the world's size), then all again */
        for (int k = 0; k < 8; k++) {
            snprintf(key, sizeof key, "k%d", k);
            if (i == 14 && r == 1 && k == 3)
                continue;
            mt_metrics_set_f64(m, key, i == 14 && r == 2 && k == 5 ? NAN : 0.5 * k - r + i);
        }
        break;
    case 16: case 17: /* one key past it, twice (the second with the layout cached) */
        for (int k = 0; k < 9; k++) {
            snprintf(key, sizeof key, "k%d", k);
            mt_metrics_set_f64(m, key, 3.0 * k + r + i);
        }
        break;
    }
}

/* arg non-NULL: one metrics object for every report, cleared before each (its keys_id
 * changes with its keys while its address stays), else a new one each report. */
static int spread_body(mt_context *c, void *arg)
{
    int rc = MT_OK;
    mt_metrics *kept = arg ? mt_metrics_new() : NULL;
    for (int i = 0; i < SPREAD_REPORTS && !rc; i++) {
        mt_metrics *m = kept ? kept : mt_metrics_new();
        if (kept)
            mt__metrics_clear(m);
        spread_metrics(i, mt_world_rank(c), m);
        rc = mt_report(c, m, NULL);
        if (!kept)
            mt_metrics_free(&m);
    }
    mt_metrics_free(&kept);
    return rc;
}

/* The spread a gather of every rank's metrics gives: over rank 0's numeric keys, the
 * ranks that have the key as a number with a finite value. */
static void check_spread(json_t *row, int i)
{
    json_t *spread = json_object_get(row, "per_rank");
    int P0 = P();
    mt_metrics **per = calloc((size_t)P0, sizeof *per);
    for (int r = 0; r < P0; r++) {
        per[r] = mt_metrics_new();
        spread_metrics(i, r, per[r]);
    }
    size_t expected = 0;
    for (size_t k = 0; k < mt_metrics_count(per[0]); k++) {
        const char *key = mt_metrics_key(per[0], k);
        if (mt_metrics_type(per[0], key) == MT_METRIC_STR)
            continue;
        double mn = INFINITY, mx = -INFINITY, sum = 0;
        int n = 0;
        for (int r = 0; r < P0; r++) {
            double v;
            if (mt_metrics_get_f64(per[r], key, &v) == MT_OK && isfinite(v))
                mn = fmin(mn, v), mx = fmax(mx, v), sum += v, n++;
        }
        json_t *s = json_object_get(spread, key);
        if (n == 0 || P() == 1) {
            CU_ASSERT_PTR_NULL(s);
            continue;
        }
        expected++;
        CU_ASSERT_PTR_NOT_NULL(s);
        if (!s) {
            fprintf(stderr, "report %d: no per_rank entry for %s\n", i, key);
            continue;
        }
        CU_ASSERT_DOUBLE_EQUAL(json_real_value(json_object_get(s, "min")), mn, 1e-9);
        CU_ASSERT_DOUBLE_EQUAL(json_real_value(json_object_get(s, "max")), mx, 1e-9);
        CU_ASSERT_DOUBLE_EQUAL(json_real_value(json_object_get(s, "mean")), sum / n, 1e-9);
        MT_ASSERT_INT_EQ(json_integer_value(json_object_get(s, "ranks")), n);
    }
    MT_ASSERT_INT_EQ(json_object_size(spread), expected); /* nothing rank 0 did not report */
    if (!expected)
        CU_ASSERT_PTR_NULL(spread);
    for (int r = 0; r < P0; r++)
        mt_metrics_free(&per[r]);
    free(per);
}

static void test_per_rank_statistics(void)
{
    for (int reuse = 0; reuse < 2; reuse++) {
        const char *name = reuse ? "spread_reused" : "spread";
        MT_ASSERT_INT_EQ(mt_test_fit(mt_test_config(name), spread_body, reuse ? &reuse : NULL,
                                     NULL), MT_OK);
        if (R() != 0)
            continue;
        json_t *rows = rows_of(name);
        MT_ASSERT_INT_EQ(json_array_size(rows), SPREAD_REPORTS);
        for (int i = 0; i < SPREAD_REPORTS && i < (int)json_array_size(rows); i++)
            check_spread(json_array_get(rows, (size_t)i), i);
        /* rank 0's own row keeps its strings and its NaN as today */
        json_t *r5 = json_array_get(rows, 5), *r8 = json_array_get(rows, 8);
        MT_ASSERT_STR_EQ(json_string_value(json_object_get(r5, "loss")), "NaN");
        MT_ASSERT_STR_EQ(json_string_value(json_object_get(r8, "phase")), "eval");
        json_decref(rows);
    }
}

/* One metrics object changed in place between reports: a key added on every rank
 * (report 2), rank 1's loss turned into a string (3) and back into a number (4), an
 * integer turned into a float (5), rank 1's keys cleared (6). Each change is a new key
 * set, seen at the report it happens in, on the rank that made it; the rows' values
 * follow. */
static int in_place_body(mt_context *c, void *arg)
{
    int r = mt_world_rank(c), rc = MT_OK;
    mt_metrics *m = mt_metrics_new();
    for (int i = 1; i <= 6 && !rc; i++) {
        if (i == 6) { /* the others report what they did at 5 */
            if (r == 1)
                mt__metrics_clear(m);
            rc = mt_report(c, m, NULL);
            break;
        }
        mt_metrics_set_f64(m, "loss", 1.0 + r + i);
        if (i >= 2)
            mt_metrics_set_f64(m, "acc", 0.5 * r);
        if (i == 3 && r == 1)
            mt_metrics_set_str(m, "loss", "n/a");
        if (i == 5)
            mt_metrics_set_f64(m, "acc", 0.25 + r);
        else if (i >= 2)
            mt_metrics_set_i64(m, "acc", r);
        rc = mt_report(c, m, NULL);
    }
    mt_metrics_free(&m);
    return rc;
}

static void test_per_rank_statistics_in_place(void)
{
    MT_ASSERT_INT_EQ(mt_test_fit(mt_test_config("spread_in_place"), in_place_body, NULL, NULL),
                     MT_OK);
    if (R() != 0)
        return;
    json_t *rows = rows_of("spread_in_place");
    MT_ASSERT_INT_EQ(json_array_size(rows), 6);
    int n = P();
    if (n > 1 && json_array_size(rows) == 6) { /* rank 1 cleared: counted for no key */
        json_t *spread = json_object_get(json_array_get(rows, 5), "per_rank");
        MT_ASSERT_INT_EQ(json_integer_value(json_object_get(json_object_get(spread, "loss"),
                                                            "ranks")), n - 1);
        MT_ASSERT_INT_EQ(json_integer_value(json_object_get(json_object_get(spread, "acc"),
                                                            "ranks")), n - 1);
    }
    for (int i = 1; i <= 5 && i <= (int)json_array_size(rows); i++) {
        json_t *spread = json_object_get(json_array_get(rows, (size_t)i - 1), "per_rank");
        if (n == 1) {
            CU_ASSERT_PTR_NULL(spread);
            continue;
        }
        json_t *loss = json_object_get(spread, "loss"), *acc = json_object_get(spread, "acc");
        int loss_ranks = i == 3 ? n - 1 : n;
        double sum = 0;
        for (int r = 0; r < n; r++)
            sum += i == 3 && r == 1 ? 0 : 1.0 + r + i;
        MT_ASSERT_INT_EQ(json_integer_value(json_object_get(loss, "ranks")), loss_ranks);
        CU_ASSERT_DOUBLE_EQUAL(json_real_value(json_object_get(loss, "mean")),
                               sum / loss_ranks, 1e-9);
        CU_ASSERT_DOUBLE_EQUAL(json_real_value(json_object_get(loss, "max")),
                               i == 3 && n == 2 ? 1.0 + i : n + i, 1e-9);
        if (i == 1) {
            CU_ASSERT_PTR_NULL(acc);
            continue;
        }
        MT_ASSERT_INT_EQ(json_integer_value(json_object_get(acc, "ranks")), n);
        CU_ASSERT_DOUBLE_EQUAL(json_real_value(json_object_get(acc, "max")),
                               i == 5 ? 0.25 + (n - 1) : n - 1, 1e-9);
    }
    json_decref(rows);
}

/* ------------------------------------------------------------ checkpoints */

#define ROWS_PER_RANK(r) (3 + (r))

static int with_checkpoints(mt_context *c, void *arg)
{
    int r = mt_world_rank(c), rc = MT_OK;
    float w[6] = {1, 2, 3, 4, 5, 6};
    int64_t sh[ROWS_PER_RANK(8) * 2];
    for (int i = 0; i < ROWS_PER_RANK(r) * 2; i++)
        sh[i] = r * 1000 + i;
    char note[256];
    snprintf(note, sizeof note, "%s/note-%d.txt", mt_test_storage(), r);
    FILE *f = fopen(note, "w");
    fprintf(f, "hello from rank %d\n", r);
    fclose(f);
    for (int i = 0; i < 4 && !rc; i++) {
        mt_metrics *m = mt_metrics_new();
        mt_metrics_set_f64(m, "score", (double)((i * 7) % 4)); /* 0, 3, 2, 1 */
        mt_checkpoint *ck = mt_checkpoint_new();
        w[0] = (float)i;
        mt_checkpoint_put(ck, "w", MT_F32, 2, (size_t[]){2, 3}, w, MT_REPLICATED);
        mt_checkpoint_put(ck, "shard", MT_I64, 2, (size_t[]){(size_t)ROWS_PER_RANK(r), 2}, sh,
                          MT_SHARDED);
        mt_checkpoint_set_meta(ck, "epoch", i == 3 ? "3" : "x");
        mt_checkpoint_add_file(ck, "note.txt", note);
        rc = mt_report(c, m, ck);
        mt_checkpoint_free(&ck);
        mt_metrics_free(&m);
    }
    return rc;
}

/* The same checkpoints whether they are committed inside mt_report or by the commit
 * thread (run.checkpoint.async_commit): retention, scoring, contents, files. */
static void contents_and_retention(const char *name, bool async)
{
    mt_trainer_config cfg = mt_test_config(name);
    cfg.run.checkpoint.async_commit = async;
    cfg.run.checkpoint.num_to_keep = 2;
    cfg.run.checkpoint.score_attribute = "score";
    mt_result *res = NULL;
    MT_ASSERT_INT_EQ(mt_test_fit(cfg, with_checkpoints, NULL, &res), MT_OK);
    /* scores 0,3,2,1 over checkpoints 0..3: keep the best two (1: 3, 2: 2) plus the latest (3) */
    MT_ASSERT_INT_EQ(mt_result_num_best(res), 3);
    const mt_metrics *m = NULL;
    const mt_checkpoint *best = mt_result_best(res, 0, &m);
    MT_ASSERT_STR_CONTAINS(mt_checkpoint_path(best), "checkpoint_000001");
    double s = 0;
    MT_ASSERT_INT_EQ(mt_metrics_get_f64(m, "score", &s), MT_OK);
    CU_ASSERT_DOUBLE_EQUAL(s, 3, 0);
    const mt_checkpoint *latest = mt_result_checkpoint(res);
    MT_ASSERT_STR_CONTAINS(mt_checkpoint_path(latest), "checkpoint_000003");
    if (R() == 0) {
        struct stat st;
        CU_ASSERT(stat(mt_test_run_file(name, "checkpoint_000000"), &st) != 0); /* dropped */
        CU_ASSERT(stat(mt_test_run_file(name, "checkpoint_000002/checkpoint.h5"), &st) == 0);
        /* outside fit: the whole arrays, from rank 0's storage */
        float w[6];
        MT_ASSERT_INT_EQ(mt_checkpoint_get(latest, "w", MT_F32, w, 6), MT_OK);
        CU_ASSERT_DOUBLE_EQUAL(w[0], 3, 0);
        CU_ASSERT_DOUBLE_EQUAL(w[5], 6, 0);
        int nd;
        size_t dims[8];
        MT_ASSERT_INT_EQ(mt_checkpoint_dims(latest, "shard", &nd, dims), MT_OK);
        size_t total = 0;
        for (int r = 0; r < P(); r++)
            total += ROWS_PER_RANK(r);
        MT_ASSERT_INT_EQ(dims[0], total);
        int64_t *all = malloc(total * 2 * sizeof *all);
        double *as_f64 = malloc(total * 2 * sizeof *as_f64);
        MT_ASSERT_INT_EQ(mt_checkpoint_get(latest, "shard", MT_I64, all, total * 2), MT_OK);
        MT_ASSERT_INT_EQ(mt_checkpoint_get(latest, "shard", MT_F64, as_f64, total * 2), MT_OK);
        size_t k = 0;
        int bad = 0;
        for (int r = 0; r < P(); r++)
            for (int i = 0; i < ROWS_PER_RANK(r) * 2; i++, k++)
                bad += all[k] != r * 1000 + i || as_f64[k] != (double)(r * 1000 + i);
        MT_ASSERT_INT_EQ(bad, 0);
        free(all);
        free(as_f64);
        MT_ASSERT_STR_EQ(mt_checkpoint_get_meta(latest, "epoch"), "3");
        MT_ASSERT_INT_EQ(mt_checkpoint_get(latest, "w", MT_F32, NULL, 5), MT_EINVAL);
        MT_ASSERT_INT_EQ(mt_checkpoint_get(latest, "nope", MT_F32, NULL, 0), MT_ENOTFOUND);
        /* files: rank 0's at the top, the others under rank<r>/ */
        char buf[64] = "";
        FILE *f = fopen(mt_test_run_file(name, "checkpoint_000003/note.txt"), "r");
        if (f) {
            CU_ASSERT_PTR_NOT_NULL(fgets(buf, sizeof buf, f));
            fclose(f);
        }
        MT_ASSERT_STR_EQ(buf, "hello from rank 0\n");
        if (P() > 1) {
            char p[64];
            snprintf(p, sizeof p, "checkpoint_000003/rank%d/note.txt", P() - 1);
            f = fopen(mt_test_run_file(name, p), "r");
            buf[0] = '\0';
            if (f) {
                CU_ASSERT_PTR_NOT_NULL(fgets(buf, sizeof buf, f));
                fclose(f);
            }
            char want[64];
            snprintf(want, sizeof want, "hello from rank %d\n", P() - 1);
            MT_ASSERT_STR_EQ(buf, want);
        }
        /* mt_result_load gives the same picture */
        mt_result *loaded = NULL;
        char dir[1024];
        snprintf(dir, sizeof dir, "%s/%s", mt_test_storage(), name);
        MT_ASSERT_INT_EQ(mt_result_load(dir, &loaded), MT_OK);
        MT_ASSERT_INT_EQ(mt_result_num_best(loaded), 3);
        MT_ASSERT_STR_EQ(mt_checkpoint_path(mt_result_checkpoint(loaded)),
                         mt_checkpoint_path(latest));
        int64_t it = 0;
        mt_metrics_get_i64(mt_result_metrics(loaded), "training_iteration", &it);
        MT_ASSERT_INT_EQ(it, 4);
        CU_ASSERT_PTR_NULL(mt_result_error(loaded));
        mt_result_free(&loaded);
        MT_ASSERT_INT_EQ(mt_result_load(mt_test_storage(), &loaded), MT_ENOTFOUND);
        MT_ASSERT_STR_CONTAINS(mt_last_error(), "is not a run directory");
    }
    mt_result_free(&res);
}

static void test_checkpoint_contents_and_retention(void)
{
    contents_and_retention("ckpt", false);
}

static void test_async_contents_and_retention(void)
{
    contents_and_retention("ckpt_async", true);
}

/* ------------------------------------------------------------ resume */

typedef struct {
    int fail_at;            /* return an error after this many reports (0 = never) */
    int reports;
    int attempt_seen;
    int64_t restored_epoch; /* -1 when no checkpoint */
    int64_t first_iteration;
} resume_arg;

static int resumable(mt_context *c, void *varg)
{
    resume_arg *a = varg;
    a->attempt_seen = mt_attempt(c);
    const mt_checkpoint *ck = mt_get_checkpoint(c);
    int64_t epoch = -1;
    int rc = MT_OK;
    if (ck) {
        int nd;
        size_t dims[8];
        rc = mt_checkpoint_dims(ck, "state", &nd, dims);
        int64_t *part = malloc((dims[0] ? dims[0] : 1) * sizeof *part);
        if (!rc)
            rc = mt_checkpoint_get(ck, "state", MT_I64, part, dims[0]);
        int64_t e[1];
        if (!rc)
            rc = mt_checkpoint_get(ck, "epoch", MT_I64, e, 1);
        if (!rc) {
            epoch = e[0];
            for (size_t i = 0; i < dims[0]; i++)
                MT_ASSERT_INT_EQ(part[i], epoch * 100 + mt_world_rank(c));
        }
        free(part);
    }
    a->restored_epoch = epoch;
    a->first_iteration = -1;
    for (int64_t i = epoch + 1; i < a->reports && !rc; i++) {
        mt_metrics *m = mt_metrics_new();
        mt_metrics_set_i64(m, "epoch", i);
        mt_checkpoint *ck2 = NULL;
        int64_t state[2] = {i * 100 + mt_world_rank(c), i * 100 + mt_world_rank(c)};
        if (i % 2 == 1) {
            ck2 = mt_checkpoint_new();
            mt_checkpoint_put(ck2, "epoch", MT_I64, 1, (size_t[]){1}, &i, MT_REPLICATED);
            mt_checkpoint_put(ck2, "state", MT_I64, 1, (size_t[]){2}, state, MT_SHARDED);
        }
        rc = mt_report(c, m, ck2);
        if (a->first_iteration < 0)
            a->first_iteration = c->iteration;
        mt_checkpoint_free(&ck2);
        mt_metrics_free(&m);
        if (!rc && a->fail_at && i + 1 == a->fail_at && mt_attempt(c) == 0 &&
            mt_world_rank(c) == (P() > 1 ? 1 : 0))
            rc = mt__error(MT_EIO, "injected failure after epoch %lld", (long long)i);
    }
    return rc;
}

static void test_resume_after_failure(void)
{
    mt_trainer_config cfg = mt_test_config("resume");
    resume_arg a = {.fail_at = 3, .reports = 6};
    char err[1024];
    mt_result *res = NULL;
    MT_ASSERT_INT_EQ(mt_test_fit(cfg, resumable, &a, &res), MT_EIO);
    snprintf(err, sizeof err, "rank %d failed: injected failure after epoch 2", P() > 1 ? 1 : 0);
    MT_ASSERT_STR_CONTAINS(mt_result_error(res), err);
    mt_result_free(&res);
    if (R() == 0) {
        FILE *f = fopen(mt_test_run_file("resume", "error.txt"), "r");
        char text[512] = "";
        if (f) {
            CU_ASSERT_PTR_NOT_NULL(fgets(text, sizeof text, f));
            fclose(f);
        }
        MT_ASSERT_STR_CONTAINS(text, "injected failure after epoch 2");
    }
    /* the same name again resumes from checkpoint epoch 1 (iteration 2) */
    MT_ASSERT_INT_EQ(mt_test_fit(cfg, resumable, &a, &res), MT_OK);
    MT_ASSERT_INT_EQ(a.attempt_seen, 1);
    MT_ASSERT_INT_EQ(a.restored_epoch, 1);
    MT_ASSERT_INT_EQ(a.first_iteration, 3);
    MT_ASSERT_INT_EQ(mt_result_attempts(res), 2);
    mt_result_free(&res);
    if (R() == 0) {
        json_t *rows = rows_of("resume");
        MT_ASSERT_INT_EQ(json_array_size(rows), 6);
        int bad = 0;
        for (size_t i = 0; i < json_array_size(rows); i++)
            bad += json_integer_value(json_object_get(json_array_get(rows, i),
                                                      "training_iteration")) != (json_int_t)i + 1;
        MT_ASSERT_INT_EQ(bad, 0);
        json_decref(rows);
        struct stat st;
        CU_ASSERT(stat(mt_test_run_file("resume", "result.superseded.json"), &st) == 0);
    }
    /* finished: refused without overwrite, replaced with it */
    res = NULL;
    MT_ASSERT_INT_EQ(mt_test_fit(cfg, resumable, &a, &res), MT_EINVAL);
    const char *msg = "resume: run 'resume' finished already; to start a new run give another "
                      "--name (run.name), or to replace this one --overwrite (run.overwrite)";
    MT_ASSERT_STR_CONTAINS(mt_last_error(), msg);
    MT_ASSERT_STR_CONTAINS(mt_result_error(res), msg);
    /* a refusal, on every rank: no rank failed */
    CU_ASSERT(strstr(mt_result_error(res) ? mt_result_error(res) : "", "failed") == NULL);
    mt_result_free(&res);
    cfg.run.overwrite = true;
    a.fail_at = 0;
    MT_ASSERT_INT_EQ(mt_test_fit(cfg, resumable, &a, NULL), MT_OK);
    MT_ASSERT_INT_EQ(a.attempt_seen, 0);
    MT_ASSERT_INT_EQ(a.restored_epoch, -1);
}

static void test_retries(void)
{
    mt_trainer_config cfg = mt_test_config("retry");
    cfg.run.failure.max_failures = 2;
    resume_arg a = {.fail_at = 4, .reports = 6};
    mt_result *res = NULL;
    MT_ASSERT_INT_EQ(mt_test_fit(cfg, resumable, &a, &res), MT_OK);
    MT_ASSERT_INT_EQ(a.attempt_seen, 1);
    MT_ASSERT_INT_EQ(a.restored_epoch, 3);
    CU_ASSERT_PTR_NULL(mt_result_error(res));
    mt_result_free(&res);
    if (R() == 0) {
        json_t *run = json_load_file(mt_test_run_file("retry", "run.json"), 0, NULL);
        MT_ASSERT_INT_EQ(json_integer_value(json_object_get(run, "failures")), 1);
        MT_ASSERT_STR_EQ(json_string_value(json_object_get(run, "status")), "finished");
        json_decref(run);
        json_t *rows = rows_of("retry");
        MT_ASSERT_INT_EQ(json_array_size(rows), 6);
        json_decref(rows);
    }
}

/* A retry whose preparation fails on rank 0 (fault site attempt-prepare, armed by the
 * first attempt): every rank leaves fit with rank 0's error, agreed, and the retry's
 * training function never runs; run.json records the failed run. */
static int fail_and_arm(mt_context *c, void *arg)
{
    (*(int *)arg)++;
    setenv("MT_TEST_FAIL_AT", "attempt-prepare:0", 1);
    return mt__error(MT_EIO, "the first attempt fails");
}

static void test_retry_preparation_fails(void)
{
    mt_trainer_config cfg = mt_test_config("retry-prepare");
    cfg.run.failure.max_failures = 1;
    int calls = 0;
    mt_result *res = NULL;
    int rc = mt_test_fit(cfg, fail_and_arm, &calls, &res);
    unsetenv("MT_TEST_FAIL_AT");
    MT_ASSERT_INT_EQ(rc, MT_EIO);
    MT_ASSERT_INT_EQ(calls, 1);
    MT_ASSERT_STR_CONTAINS(mt_result_error(res), "rank 0 failed: ");
    MT_ASSERT_STR_CONTAINS(mt_result_error(res), "cannot ready attempt 1 (test failure)");
    mt_result_free(&res);
    if (R() == 0) {
        json_t *run = json_load_file(mt_test_run_file("retry-prepare", "run.json"), 0, NULL);
        MT_ASSERT_STR_EQ(json_string_value(json_object_get(run, "status")), "failed");
        MT_ASSERT_INT_EQ(json_integer_value(json_object_get(run, "failures")), 1);
        json_decref(run);
    }
}

/* ------------------------------------------------------------ corrupt checkpoints */

static void test_corrupt_latest_is_skipped(void)
{
    mt_trainer_config cfg = mt_test_config("corrupt");
    resume_arg a = {.fail_at = 5, .reports = 6};
    MT_ASSERT_INT_EQ(mt_test_fit(cfg, resumable, &a, NULL), MT_EIO); /* checkpoints at epochs 1, 3 */
    MPI_Barrier(MPI_COMM_WORLD);
    if (R() == 0) { /* truncate the latest: checkpoint_000001 holds epoch 3 */
        FILE *f = fopen(mt_test_run_file("corrupt", "checkpoint_000001/checkpoint.h5"), "r+");
        CU_ASSERT_PTR_NOT_NULL(f);
        if (f) {
            CU_ASSERT(ftruncate(fileno(f), 600) == 0);
            fclose(f);
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MT_ASSERT_INT_EQ(mt_test_fit(cfg, resumable, &a, NULL), MT_OK);
    MT_ASSERT_INT_EQ(a.restored_epoch, 1); /* the previous good one */
    /* a checksum failure: change data without its CRC */
    cfg.run.name = "checksum";
    MT_ASSERT_INT_EQ(mt_test_fit(cfg, resumable, &(resume_arg){.fail_at = 5, .reports = 6}, NULL), MT_EIO);
    MPI_Barrier(MPI_COMM_WORLD);
    if (R() == 0) {
        hid_t f = H5Fopen(mt_test_run_file("checksum", "checkpoint_000001/checkpoint.h5"), H5F_ACC_RDWR,
                          H5P_DEFAULT);
        CU_ASSERT(f >= 0);
        hid_t d = H5Dopen2(f, "epoch", H5P_DEFAULT);
        CU_ASSERT(d >= 0);
        int64_t v = 42;
        CU_ASSERT(H5Dwrite(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, &v) >= 0);
        H5Dclose(d);
        H5Fclose(f);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MT_ASSERT_INT_EQ(mt_test_fit(cfg, resumable, &a, NULL), MT_OK);
    MT_ASSERT_INT_EQ(a.restored_epoch, 1);
}

/* ------------------------------------------------------------ bad input */

static int bad_key_on_one_rank(mt_context *c, void *arg)
{
    mt_metrics *m = mt_metrics_new();
    mt_metrics_set_f64(m, "ok", 1);
    int rc = mt_report(c, m, NULL);
    if (rc)
        return rc;
    mt_checkpoint *ck = mt_checkpoint_new();
    float x[4] = {0};
    /* the last rank stores a different shape */
    size_t cols = mt_world_rank(c) == mt_world_size(c) - 1 && mt_world_size(c) > 1 ? 2 : 4;
    mt_checkpoint_put(ck, "x", MT_F32, 1, &cols, x, MT_REPLICATED);
    rc = mt_report(c, m, ck);
    mt_checkpoint_free(&ck);
    mt_metrics_free(&m);
    return rc;
}

static void test_bad_inputs(void)
{
    mt_metrics *m = mt_metrics_new();
    char longkey[300];
    memset(longkey, 'k', 299);
    longkey[299] = '\0';
    MT_ASSERT_INT_EQ(mt_metrics_set_f64(m, "", 1), MT_EINVAL);
    MT_ASSERT_INT_EQ(mt_metrics_set_f64(m, longkey, 1), MT_EINVAL);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "is 299 bytes; at most 255");
    MT_ASSERT_INT_EQ(mt_metrics_set_f64(m, "a\tb", 1), MT_EINVAL);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "control character at byte 1");
    mt_metrics_free(&m);
    if (P() > 1) {
        char err[1024];
        mt_result *res = NULL;
        int rc = mt_test_fit(mt_test_config("mismatch"), bad_key_on_one_rank, NULL, &res);
        MT_ASSERT_INT_EQ(rc, MT_EMISMATCH);
        snprintf(err, sizeof err, "%s", mt_result_error(res) ? mt_result_error(res) : "");
        MT_ASSERT_STR_CONTAINS(err, "ranks called different collectives");
        mt_result_free(&res);
    }
    /* storage that cannot be written: every rank, before training */
    mt_trainer_config cfg = mt_test_config("nowhere");
    cfg.run.storage_path = "/proc/mpitrain-cannot-write-here";
    mt_result *res = NULL;
    MT_ASSERT_INT_EQ(mt_test_fit(cfg, three_reports, NULL, &res), MT_EIO);
    MT_ASSERT_STR_CONTAINS(mt_result_error(res), "rank 0 failed: run.storage_path: cannot create /proc/mpitrain-cannot-write-here");
    mt_result_free(&res);
}

/* ------------------------------------------------------------ frequency and preemption */

typedef struct {
    int raise_at; /* -1: never */
    int wanted[8];
    int stop_rc;
    int iterations;
} preempt_arg;

static int preemptible(mt_context *c, void *varg)
{
    preempt_arg *a = varg;
    int rc = MT_OK;
    for (int i = 0; i < 8 && !rc; i++) {
        a->wanted[i] = mt_should_checkpoint(c);
        if (i == a->raise_at && mt_world_rank(c) == (P() > 1 ? 1 : 0))
            raise(SIGUSR1); /* the scheduler's warning, on one rank */
        mt_metrics *m = mt_metrics_new();
        mt_metrics_set_i64(m, "i", i);
        mt_checkpoint *ck = NULL;
        if (a->wanted[i]) {
            ck = mt_checkpoint_new();
            mt_checkpoint_put(ck, "i", MT_I32, 1, (size_t[]){1}, &i, MT_REPLICATED);
        }
        rc = mt_report(c, m, ck);
        mt_checkpoint_free(&ck);
        mt_metrics_free(&m);
        a->iterations = i + 1;
    }
    a->stop_rc = rc;
    return rc;
}

/* A stop request while commits are asynchronous: the checkpoint that ends the run is
 * committed before mt_report returns MT_ESTOP (and the one in flight before it). */
static void frequency_and_preemption(const char *name, bool async)
{
    mt_trainer_config cfg = mt_test_config(name);
    cfg.run.checkpoint.async_commit = async;
    cfg.run.checkpoint.frequency = 3;
    preempt_arg a = {.raise_at = 4};
    mt_result *res = NULL;
    MT_ASSERT_INT_EQ(mt_test_fit(cfg, preemptible, &a, &res), MT_ESTOP);
    /* every 3rd iteration (3 = index 2), then every report after the stop request (i = 4) */
    int want[6] = {0, 0, 1, 0, 0, 1};
    for (int i = 0; i < 6; i++)
        MT_ASSERT_INT_EQ(a.wanted[i], want[i]);
    MT_ASSERT_INT_EQ(a.stop_rc, MT_ESTOP);
    MT_ASSERT_INT_EQ(a.iterations, 6);
    MT_ASSERT_STR_CONTAINS(mt_result_error(res), "preempted: a stop request");
    mt_result_free(&res);
    if (R() == 0) {
        json_t *run = json_load_file(mt_test_run_file(name, "run.json"), 0, NULL);
        MT_ASSERT_STR_EQ(json_string_value(json_object_get(run, "status")), "preempted");
        MT_ASSERT_STR_EQ(json_string_value(json_object_get(run, "latest")), "checkpoint_000001");
        json_decref(run);
    }
    /* a rerun resumes after the committed checkpoint and completes */
    preempt_arg b = {.raise_at = -1};
    MT_ASSERT_INT_EQ(mt_test_fit(cfg, preemptible, &b, NULL), MT_OK);
}

/* The last rank's function returns MT_ESTOP with no stop request behind it (what the
 * Python layer does for a SystemExit on one rank): the run failed, not preempted; no
 * retry; that rank's code MT_EINVAL, the others' MT_EPEER, the error naming it. */
static int stops_alone(mt_context *c, void *varg)
{
    int *calls = varg;
    ++*calls;
    mt_metrics *m = mt_metrics_new();
    mt_metrics_set_i64(m, "i", 1);
    int rc = mt_report(c, m, NULL);
    mt_metrics_free(&m);
    if (!rc && mt_world_rank(c) == P() - 1) {
        mt_set_error(MT_ESTOP, "the user left");
        return MT_ESTOP;
    }
    return rc;
}

static void test_estop_without_a_stop_fails(void)
{
    mt_trainer_config cfg = mt_test_config("estop-alone");
    cfg.run.failure.max_failures = 2;
    int calls = 0;
    mt_result *res = NULL;
    MT_ASSERT_INT_EQ(mt_test_fit(cfg, stops_alone, &calls, &res),
                     R() == P() - 1 ? MT_EINVAL : MT_EPEER);
    MT_ASSERT_INT_EQ(calls, 1);
    char want[64];
    snprintf(want, sizeof want, "rank %d failed: the user left", P() - 1);
    MT_ASSERT_STR_CONTAINS(mt_result_error(res), want);
    mt_result_free(&res);
    if (R() == 0) {
        json_t *run = json_load_file(mt_test_run_file("estop-alone", "run.json"), 0, NULL);
        MT_ASSERT_STR_EQ(json_string_value(json_object_get(run, "status")), "failed");
        json_decref(run);
    }
}

static void test_frequency_and_preemption(void)
{
    frequency_and_preemption("preempt", false);
}

static void test_async_preemption(void)
{
    frequency_and_preemption("preempt_async", true);
}

/* ------------------------------------------------------------ metrics: getters, reserved keys */

static void test_metrics_getters_reject_null(void)
{
    mt_metrics *m = mt_metrics_new();
    mt_metrics_set_f64(m, "x", 1.5);
    mt_metrics_set_str(m, "s", "v");
    double f = 0;
    int64_t i = 0;
    MT_ASSERT_INT_EQ(mt_metrics_get_f64(NULL, "x", &f), MT_EINVAL);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "mt_metrics_get_f64: metrics is NULL");
    MT_ASSERT_INT_EQ(mt_metrics_get_f64(m, "x", NULL), MT_EINVAL);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "mt_metrics_get_f64: out is NULL");
    MT_ASSERT_INT_EQ(mt_metrics_get_f64(m, NULL, &f), MT_EINVAL);
    MT_ASSERT_INT_EQ(mt_metrics_get_i64(NULL, "x", &i), MT_EINVAL);
    MT_ASSERT_INT_EQ(mt_metrics_get_i64(m, "x", NULL), MT_EINVAL);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "mt_metrics_get_i64: out is NULL");
    MT_ASSERT_INT_EQ(mt_metrics_get_i64(m, NULL, &i), MT_EINVAL);
    CU_ASSERT_PTR_NULL(mt_metrics_get_str(NULL, "s"));
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "mt_metrics_get_str: metrics is NULL");
    CU_ASSERT_PTR_NULL(mt_metrics_get_str(m, NULL));
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "mt_metrics_get_str: key is NULL");
    /* the normal paths still work */
    MT_ASSERT_INT_EQ(mt_metrics_get_f64(m, "x", &f), MT_OK);
    CU_ASSERT_DOUBLE_EQUAL(f, 1.5, 0);
    MT_ASSERT_INT_EQ(mt_metrics_get_i64(m, "s", &i), MT_ENOTFOUND);
    MT_ASSERT_STR_EQ(mt_metrics_get_str(m, "s"), "v");
    mt_metrics_free(&m);
}

static void test_reserved_keys_refused(void)
{
    const char *keys[] = {"training_iteration", "iterations_since_restore", "timestamp",
                          "time_this_iter_s", "time_total_s", "checkpoint_dir_name", "per_rank"};
    mt_metrics *m = mt_metrics_new();
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
        char want[128];
        snprintf(want, sizeof want, "metric key \"%s\" is reserved", keys[k]);
        MT_ASSERT_INT_EQ(mt_metrics_set_f64(m, keys[k], 1), MT_EINVAL);
        MT_ASSERT_STR_CONTAINS(mt_last_error(), want);
        MT_ASSERT_INT_EQ(mt_metrics_set_i64(m, keys[k], 1), MT_EINVAL);
        MT_ASSERT_INT_EQ(mt_metrics_set_str(m, keys[k], "x"), MT_EINVAL);
    }
    MT_ASSERT_INT_EQ(mt_metrics_count(m), 0);
    mt_metrics_free(&m);
}

/* Metrics that carry a reserved key anyway (a result's metrics passed back, here built
 * with the library's own setter) on the last rank only: an agreed error, not a row. */
static int reserved_on_last_rank(mt_context *c, void *arg)
{
    mt_metrics *m = mt_metrics_new();
    mt_metrics_set_f64(m, "loss", 1);
    if (mt_world_rank(c) == mt_world_size(c) - 1)
        mt__metrics_put(m, "timestamp", MT__METRIC_F64, 7, 0, NULL, false);
    int rc = mt_report(c, m, NULL);
    mt_metrics_free(&m);
    return rc;
}

static void test_reserved_key_in_report(void)
{
    mt_result *res = NULL;
    MT_ASSERT_INT_EQ(mt_test_fit(mt_test_config("reserved"), reserved_on_last_rank, NULL, &res), MT_EINVAL);
    char want[128];
    snprintf(want, sizeof want, "rank %d failed: metric key \"timestamp\" is reserved", P() - 1);
    MT_ASSERT_STR_CONTAINS(mt_result_error(res), want);
    mt_result_free(&res);
    if (R() == 0) {
        json_t *rows = rows_of("reserved");
        MT_ASSERT_INT_EQ(json_array_size(rows), 0);
        json_decref(rows);
    }
}

/* ------------------------------------------------------------ progress.csv quoting */

/* Split a CSV file into records of fields per RFC 4180; returns the record count. */
static int csv_parse(const char *path, char fields[][8][128], int max_records, int *nfields)
{
    FILE *f = fopen(path, "r");
    int rec = 0, fld = 0, ch;
    size_t len = 0;
    bool quoted = false, any = false;
    while (f && rec < max_records && (ch = fgetc(f)) != EOF) {
        any = true;
        if (quoted) {
            if (ch == '"') {
                int next = fgetc(f);
                if (next != '"') {
                    quoted = false;
                    if (next == EOF)
                        break;
                    ungetc(next, f);
                    continue;
                }
            }
        } else if (ch == '"') {
            quoted = true;
            continue;
        } else if (ch == ',' || ch == '\n') {
            if (fld < 8)
                fields[rec][fld][len < 127 ? len : 127] = '\0';
            fld++;
            len = 0;
            if (ch == '\n') {
                nfields[rec++] = fld;
                fld = 0;
                any = false;
            }
            continue;
        }
        if (fld < 8 && len < 127)
            fields[rec][fld][len] = (char)ch;
        len++;
    }
    if (any && rec < max_records) /* no final newline */
        nfields[rec++] = fld + 1;
    if (f)
        fclose(f);
    return rec;
}

static int awkward_keys(mt_context *c, void *arg)
{
    int rc = MT_OK;
    for (int i = 0; i < 2 && !rc; i++) {
        mt_metrics *m = mt_metrics_new();
        mt_metrics_set_f64(m, "a,b", 1 + i);
        mt_metrics_set_str(m, "say \"hi\"", i ? "cr\r\nlf" : "x,y");
        mt_metrics_set_i64(m, "n", 10 + i);
        rc = mt_report(c, m, NULL);
        mt_metrics_free(&m);
    }
    return rc;
}

static void test_csv_quoting(void)
{
    MT_ASSERT_INT_EQ(mt_test_fit(mt_test_config("csvq"), awkward_keys, NULL, NULL), MT_OK);
    if (R() != 0)
        return;
    static char f[4][8][128];
    int nf[4] = {0};
    memset(f, 0, sizeof f);
    int n = csv_parse(mt_test_run_file("csvq", "progress.csv"), f, 4, nf);
    MT_ASSERT_INT_EQ(n, 3);
    /* a,b | say "hi" | n | training_iteration | iterations_since_restore | timestamp |
     * time_this_iter_s | time_total_s */
    MT_ASSERT_INT_EQ(nf[0], 8);
    MT_ASSERT_INT_EQ(nf[1], 8);
    MT_ASSERT_INT_EQ(nf[2], 8);
    MT_ASSERT_STR_EQ(f[0][4], "iterations_since_restore");
    MT_ASSERT_STR_EQ(f[1][4], "1");
    MT_ASSERT_STR_EQ(f[2][4], "2");
    MT_ASSERT_STR_EQ(f[0][0], "a,b");
    MT_ASSERT_STR_EQ(f[0][1], "say \"hi\"");
    MT_ASSERT_STR_EQ(f[0][2], "n");
    MT_ASSERT_STR_EQ(f[0][3], "training_iteration");
    MT_ASSERT_STR_EQ(f[1][0], "1.0");
    MT_ASSERT_STR_EQ(f[1][1], "x,y");
    MT_ASSERT_STR_EQ(f[1][2], "10");
    MT_ASSERT_STR_EQ(f[1][3], "1");
    MT_ASSERT_STR_EQ(f[2][1], "cr\r\nlf");
    MT_ASSERT_STR_EQ(f[2][2], "11");
    MT_ASSERT_STR_EQ(f[2][3], "2");
}

/* ------------------------------------------------------------ checkpoint building refusals */

static void test_checkpoint_builder_refusals(void)
{
    char file[1024], dir[1024];
    snprintf(file, sizeof file, "%s/add-%d.txt", mt_test_storage(), R());
    snprintf(dir, sizeof dir, "%s/adddir-%d", mt_test_storage(), R());
    FILE *f = fopen(file, "w");
    fputs("data\n", f);
    fclose(f);
    mkdir(dir, 0755);
    mt_checkpoint *ck = mt_checkpoint_new();
    MT_ASSERT_INT_EQ(mt_checkpoint_add_file(ck, "a.txt", file), MT_OK);
    /* the same name twice: the second would replace the first */
    MT_ASSERT_INT_EQ(mt_checkpoint_add_file(ck, "a.txt", file), MT_EINVAL);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "a file named a.txt was added already");
    /* a directory: would be stored as a 0-byte file */
    MT_ASSERT_INT_EQ(mt_checkpoint_add_file(ck, "d", dir), MT_EINVAL);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "is a directory, not a regular file");
    MT_ASSERT_STR_CONTAINS(mt_last_error(), dir);
    char gone[1100];
    snprintf(gone, sizeof gone, "%s/no-such-file", dir);
    MT_ASSERT_INT_EQ(mt_checkpoint_add_file(ck, "g", gone), MT_EINVAL);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "No such file or directory");
    MT_ASSERT_INT_EQ(mt_checkpoint_add_file(ck, "dev", "/dev/null"), MT_EINVAL);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "not a regular file");
    /* names that would leave the checkpoint folder or collide with its own entries */
    const char *names[] = {"", "..", ".", "../x", "a/b", "/etc", ".hidden", "checkpoint.h5",
                           "rank1", "rank12", "new\nline", "tab\there"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        MT_ASSERT_INT_EQ(mt_checkpoint_add_file(ck, names[i], file), MT_EINVAL);
        MT_ASSERT_STR_CONTAINS(mt_last_error(), "bad file name");
    }
    MT_ASSERT_INT_EQ(mt_checkpoint_add_file(ck, NULL, file), MT_EINVAL);
    MT_ASSERT_INT_EQ(mt_checkpoint_add_file(ck, "p", NULL), MT_EINVAL);
    MT_ASSERT_INT_EQ(mt_checkpoint_add_file(ck, "p", ""), MT_EINVAL);
    MT_ASSERT_INT_EQ(mt_checkpoint_add_file(ck, "rankx", file), MT_OK); /* not rank<N> */
    /* arrays: the same name twice, names that HDF5 would resolve as paths */
    float x[2] = {1, 2};
    MT_ASSERT_INT_EQ(mt_checkpoint_put(ck, "x", MT_F32, 1, (size_t[]){2}, x, MT_REPLICATED), MT_OK);
    MT_ASSERT_INT_EQ(mt_checkpoint_put(ck, "x", MT_F32, 1, (size_t[]){2}, x, MT_REPLICATED), MT_EINVAL);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "array x was put already");
    MT_ASSERT_INT_EQ(mt_checkpoint_put(ck, "a/b", MT_F32, 1, (size_t[]){2}, x, MT_REPLICATED), MT_EINVAL);
    MT_ASSERT_INT_EQ(mt_checkpoint_put(ck, "..", MT_F32, 1, (size_t[]){2}, x, MT_REPLICATED), MT_EINVAL);
    MT_ASSERT_INT_EQ(mt_checkpoint_put(ck, "", MT_F32, 1, (size_t[]){2}, x, MT_REPLICATED), MT_EINVAL);
    MT_ASSERT_INT_EQ(mt_checkpoint_put(ck, "a\nb", MT_F32, 1, (size_t[]){2}, x, MT_REPLICATED), MT_EINVAL);
    /* metadata: a key set again takes the new value (one entry), bad keys name themselves */
    MT_ASSERT_INT_EQ(mt_checkpoint_set_meta(ck, "epoch", "1"), MT_OK);
    MT_ASSERT_INT_EQ(mt_checkpoint_set_meta(ck, "epoch", "2"), MT_OK);
    MT_ASSERT_STR_EQ(mt_checkpoint_get_meta(ck, "epoch"), "2");
    MT_ASSERT_INT_EQ(mt_checkpoint_set_meta(ck, "", "1"), MT_EINVAL);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "mt_checkpoint_set_meta: key must not be empty");
    MT_ASSERT_INT_EQ(mt_checkpoint_set_meta(ck, "k", NULL), MT_EINVAL);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "mt_checkpoint_set_meta k: value is NULL");
    mt_checkpoint_free(&ck);
    rmdir(dir);
    unlink(file);
}

/* ------------------------------------------------------------ run directory ownership */

/* Another job holds run.lock (here: another open file description of this process on
 * rank 0, as flock sees it): fit is refused on every rank with the holder's name, and
 * nothing in the folder is touched; once released, the run starts. */
static void test_run_lock_refuses_second_owner(void)
{
    char dir[1024], lock[1100];
    snprintf(dir, sizeof dir, "%s/locked", mt_test_storage());
    snprintf(lock, sizeof lock, "%s/run.lock", dir);
    int fd = -1;
    if (R() == 0) {
        mkdir(dir, 0755);
        fd = open(lock, O_RDWR | O_CREAT, 0644);
        CU_ASSERT(fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0);
        const char *who = "pid 99999 on host elsewhere, Slurm job 77, started 2026-01-01 00:00:00 UTC\n";
        CU_ASSERT(write(fd, who, strlen(who)) == (ssize_t)strlen(who));
    }
    MPI_Barrier(MPI_COMM_WORLD);
    mt_result *res = NULL;
    MT_ASSERT_INT_EQ(mt_test_fit(mt_test_config("locked"), three_reports, NULL, &res), MT_EINVAL);
    char want[1200];
    snprintf(want, sizeof want, "%s is in use by another job (pid 99999 on host elsewhere, Slurm "
             "job 77, started 2026-01-01 00:00:00 UTC)", dir);
    MT_ASSERT_STR_CONTAINS(mt_result_error(res), want);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), want);
    CU_ASSERT(strstr(mt_result_error(res) ? mt_result_error(res) : "", "rank 0 failed") == NULL);
    mt_result_free(&res);
    if (R() == 0) {
        struct stat st;
        CU_ASSERT(stat(mt_test_run_file("locked", "run.json"), &st) != 0);
        CU_ASSERT(stat(mt_test_run_file("locked", "params.json"), &st) != 0);
        close(fd); /* the other job ends */
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MT_ASSERT_INT_EQ(mt_test_fit(mt_test_config("locked"), three_reports, NULL, NULL), MT_OK);
    if (R() == 0) {
        json_t *rows = rows_of("locked");
        MT_ASSERT_INT_EQ(json_array_size(rows), 3);
        json_decref(rows);
        /* the finished run's lock file names this job, and the lock is free again */
        char text[512] = "";
        FILE *f = fopen(lock, "r");
        if (f) {
            CU_ASSERT_PTR_NOT_NULL(fgets(text, sizeof text, f));
            fclose(f);
        }
        char pid[64];
        snprintf(pid, sizeof pid, "pid %d on host ", (int)getpid());
        MT_ASSERT_STR_CONTAINS(text, pid);
        fd = open(lock, O_RDWR);
        CU_ASSERT(fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0);
        close(fd);
    }
}

/* A file added on the last rank becomes a directory before the report: every rank's
 * error names it; nothing is committed. */
static int file_replaced_before_commit(mt_context *c, void *arg)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/swap-%d", mt_test_storage(), mt_world_rank(c));
    FILE *f = fopen(path, "w");
    fputs("x\n", f);
    fclose(f);
    mt_checkpoint *ck = mt_checkpoint_new();
    int rc = mt_checkpoint_add_file(ck, "swap.txt", path);
    if (!rc && mt_world_rank(c) == mt_world_size(c) - 1) {
        unlink(path);
        mkdir(path, 0755);
    }
    mt_metrics *m = mt_metrics_new();
    if (!rc)
        rc = mt_report(c, m, ck);
    mt_metrics_free(&m);
    mt_checkpoint_free(&ck);
    rmdir(path);
    unlink(path);
    return rc;
}

static void test_checkpoint_file_checked_at_commit(void)
{
    mt_result *res = NULL;
    MT_ASSERT_INT_EQ(mt_test_fit(mt_test_config("swapped"), file_replaced_before_commit, NULL, &res), MT_EIO);
    char want[1200];
    snprintf(want, sizeof want, "checkpoint file swap.txt: %s/swap-%d is a directory, not a "
             "regular file", mt_test_storage(), P() - 1);
    MT_ASSERT_STR_CONTAINS(mt_result_error(res), want);
    mt_result_free(&res);
    if (R() == 0) {
        struct stat st;
        CU_ASSERT(stat(mt_test_run_file("swapped", "checkpoint_000000"), &st) != 0);
    }
}

/* A commit that fails part-way through its rows, on one rank (MT_CHECKPOINT_BUFFER of
 * 4 KiB: eight pieces per rank): rank 0 failing to write its second piece while it
 * receives (commit-write), the last rank failing after its first piece while rank 0
 * waits for the rest (commit-send), or every rank refusing a row larger than the buffer.
 * Every rank returns from that report, the failing one with its own error, the others
 * MT_EPEER naming it; nothing is published and no .tmp is left; the next report commits
 * checkpoint_000000, whose rows restore whole. */
typedef struct {
    const char *fail_at; /* MT_TEST_FAIL_AT for the first report, or NULL */
    size_t row_doubles;  /* doubles per row of the first report's array */
    int first, second;
    char msg[MT__MSG_LEN];
} failing_commit;

static int commit_fails_then_works(mt_context *c, void *arg)
{
    failing_commit *t = arg;
    size_t rows = 256, width = t->row_doubles > 2 ? t->row_doubles : 2;
    double *part = calloc(rows * width, sizeof *part);
    for (size_t i = 0; part && i < rows * 2; i++) /* the rows the second report keeps */
        part[i] = (double)((size_t)mt_world_rank(c) * rows * 2 + i);
    for (int k = 0; k < 2; k++) {
        if (t->fail_at && k == 0)
            setenv("MT_TEST_FAIL_AT", t->fail_at, 1);
        mt_checkpoint *ck = mt_checkpoint_new();
        mt_checkpoint_put(ck, "rows", MT_F64, 2, (size_t[]){rows, k ? 2 : t->row_doubles}, part,
                          MT_SHARDED);
        mt_metrics *m = mt_metrics_new();
        int rc = mt_report(c, m, ck);
        unsetenv("MT_TEST_FAIL_AT");
        if (k == 0) {
            t->first = rc;
            snprintf(t->msg, sizeof t->msg, "%s", mt_last_error());
        } else
            t->second = rc;
        mt_metrics_free(&m);
        mt_checkpoint_free(&ck);
    }
    free(part);
    return MT_OK;
}

static int rows_come_back(mt_context *c, void *arg)
{
    const mt_checkpoint *ck = mt_get_checkpoint(c);
    size_t rows = 256 * (size_t)mt_world_size(c), mine = rows / (size_t)mt_world_size(c);
    double *got = calloc(mine * 2, sizeof *got);
    int rc = ck && got ? mt_checkpoint_get(ck, "rows", MT_F64, got, mine * 2) : MT_ENOTFOUND;
    int bad = 0;
    for (size_t i = 0; !rc && i < mine * 2; i++)
        bad += got[i] != (double)((size_t)mt_world_rank(c) * mine * 2 + i);
    free(got);
    return rc ? rc : bad ? MT_EFORMAT : MT_OK;
}

static void test_commit_fails_part_way(void)
{
    char send[32];
    snprintf(send, sizeof send, "commit-send:%d", P() - 1);
    struct {
        const char *fail_at, *says;
        size_t row_doubles;
        int who, code; /* the failing rank (-1: every rank) and its code */
    } cases[] = {
        {"commit-write:0", "writing rows", 2, 0, MT_EIO},
        {send, "sending rows from", 2, P() - 1, MT_EIO},
        {NULL, "one row is 8192 bytes, more than MT_CHECKPOINT_BUFFER (4096 bytes)", 1024, -1,
         MT_EINVAL},
    };
    setenv("MT_CHECKPOINT_BUFFER", "4096", 1);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        if (cases[i].who == P() - 1 && P() == 1)
            continue; /* no sender at one rank */
        char name[64];
        snprintf(name, sizeof name, "commit_fails_%zu", i);
        failing_commit t = {.fail_at = cases[i].fail_at, .row_doubles = cases[i].row_doubles};
        MT_ASSERT_INT_EQ(mt_test_fit(mt_test_config(name), commit_fails_then_works, &t, NULL),
                         MT_OK);
        int who = cases[i].who < 0 ? 0 : cases[i].who; /* all refuse: rank 0's error leads */
        MT_ASSERT_INT_EQ(t.first, R() == who ? cases[i].code : MT_EPEER);
        MT_ASSERT_STR_CONTAINS(t.msg, cases[i].says);
        MT_ASSERT_INT_EQ(t.second, MT_OK);
        if (R() == 0) {
            struct stat st;
            CU_ASSERT(stat(mt_test_run_file(name, "checkpoint_000000"), &st) == 0);
            CU_ASSERT(stat(mt_test_run_file(name, "checkpoint_000001"), &st) != 0);
            CU_ASSERT(stat(mt_test_run_file(name, ".checkpoint_000000.tmp"), &st) != 0);
        }
        char from[64], dir[1024];
        snprintf(from, sizeof from, "%s_restored", name);
        snprintf(dir, sizeof dir, "%s", mt_test_run_file(name, "checkpoint_000000"));
        mt_trainer_config cfg = mt_test_config(from);
        cfg.run.resume_from_checkpoint = dir;
        MT_ASSERT_INT_EQ(mt_test_fit(cfg, rows_come_back, NULL, NULL), MT_OK);
    }
    unsetenv("MT_CHECKPOINT_BUFFER");
}

/* ------------------------------------------------------------ asynchronous commits */

/* Reports with a sharded checkpoint of 256 rows per rank (row i of rank r holds
 * r * 512 + i, as rows_come_back expects); what each report returned, and whether rank 0
 * saw checkpoint_000000 published when the first report returned. */
typedef struct {
    int reports;      /* reports, each with a checkpoint unless plain_after says */
    int plain_after;  /* reports after this many carry no checkpoint (0: all do) */
    const char *go;   /* created by rank 0 after the first report (a resume file) */
    int rc[4];
    char msg[4][MT__MSG_LEN];
    bool first_published;
} async_arg;

static int async_reports(mt_context *c, void *varg)
{
    async_arg *a = varg;
    size_t rows = 256;
    double *part = calloc(rows * 2, sizeof *part);
    for (size_t i = 0; part && i < rows * 2; i++)
        part[i] = (double)((size_t)mt_world_rank(c) * rows * 2 + i);
    for (int k = 0; k < a->reports; k++) {
        bool with = !a->plain_after || k < a->plain_after;
        mt_checkpoint *ck = with ? mt_checkpoint_new() : NULL;
        if (ck)
            mt_checkpoint_put(ck, "rows", MT_F64, 2, (size_t[]){rows, 2}, part, MT_SHARDED);
        mt_metrics *m = mt_metrics_new();
        mt_metrics_set_i64(m, "k", k);
        a->rc[k] = mt_report(c, m, ck);
        snprintf(a->msg[k], sizeof a->msg[k], "%s", a->rc[k] ? mt_last_error() : "");
        /* the arrays are staged: what the report borrowed may change at once */
        for (size_t i = 0; part && i < rows * 2; i++)
            part[i] = -1;
        for (size_t i = 0; part && i < rows * 2; i++)
            part[i] = (double)((size_t)mt_world_rank(c) * rows * 2 + i);
        if (k == 0 && mt_world_rank(c) == 0) {
            struct stat st;
            char dir[1024];
            snprintf(dir, sizeof dir, "%s/checkpoint_000000", mt_run_dir(c));
            a->first_published = stat(dir, &st) == 0;
            if (a->go) {
                FILE *f = fopen(a->go, "w");
                if (f)
                    fclose(f);
            }
        }
        mt_metrics_free(&m);
        mt_checkpoint_free(&ck);
    }
    free(part);
    return MT_OK;
}

static bool published(const char *name, const char *ck)
{
    struct stat st;
    return stat(mt_test_run_file(name, ck), &st) == 0;
}

/* The checkpoint in name's folder ck restores every rank's rows (another run resuming
 * from it). */
static void restores(const char *name, const char *ck)
{
    char from[64], dir[1024];
    snprintf(from, sizeof from, "%s_restored", name);
    snprintf(dir, sizeof dir, "%s", mt_test_run_file(name, ck));
    mt_trainer_config cfg = mt_test_config(from);
    cfg.run.resume_from_checkpoint = dir;
    MT_ASSERT_INT_EQ(mt_test_fit(cfg, rows_come_back, NULL, NULL), MT_OK);
}

/* mt_report returns while rank 0's commit thread is held inside the commit (the test
 * hook, until the first report has returned everywhere and rank 0 made the resume
 * file): the commit overlaps what follows; the next report with a checkpoint waits for
 * it; the fit's end waits for the last one; retention (num_to_keep 1) and the result
 * see only committed checkpoints. */
static void test_async_report_returns_while_held(void)
{
    char go[1024];
    snprintf(go, sizeof go, "%s", mt_test_run_file("async_held", "go"));
    setenv("MT_TEST_COMMIT_PAUSE", "120", 1);
    setenv("MT_TEST_COMMIT_PAUSE_AT", "0", 1);
    setenv("MT_TEST_COMMIT_RESUME_FILE", go, 1);
    mt_trainer_config cfg = mt_test_config("async_held");
    cfg.run.checkpoint.async_commit = true;
    cfg.run.checkpoint.num_to_keep = 1;
    async_arg a = {.reports = 3, .go = go};
    mt_result *res = NULL;
    MT_ASSERT_INT_EQ(mt_test_fit(cfg, async_reports, &a, &res), MT_OK);
    unsetenv("MT_TEST_COMMIT_PAUSE");
    unsetenv("MT_TEST_COMMIT_PAUSE_AT");
    unsetenv("MT_TEST_COMMIT_RESUME_FILE");
    for (int k = 0; k < 3; k++)
        MT_ASSERT_INT_EQ(a.rc[k], MT_OK);
    if (R() == 0)
        CU_ASSERT(!a.first_published); /* returned while the commit was held */
    MT_ASSERT_STR_CONTAINS(mt_checkpoint_path(mt_result_checkpoint(res)), "checkpoint_000002");
    MT_ASSERT_INT_EQ(mt_result_num_best(res), 1);
    mt_result_free(&res);
    if (R() == 0) {
        CU_ASSERT(!published("async_held", "checkpoint_000000")); /* retention's */
        CU_ASSERT(!published("async_held", "checkpoint_000001"));
        CU_ASSERT(published("async_held", "checkpoint_000002/checkpoint.h5"));
        json_t *run = json_load_file(mt_test_run_file("async_held", "run.json"), 0, NULL);
        MT_ASSERT_STR_EQ(json_string_value(json_object_get(run, "latest")), "checkpoint_000002");
        json_decref(run);
    }
    restores("async_held", "checkpoint_000002");
}

/* The training function returns right after its only report, while the commit is held
 * for a second: fit waits for it, and it is the result's checkpoint. */
static void test_async_fit_end_waits(void)
{
    setenv("MT_TEST_COMMIT_PAUSE", "1", 1);
    setenv("MT_TEST_COMMIT_PAUSE_AT", "0", 1);
    mt_trainer_config cfg = mt_test_config("async_end");
    cfg.run.checkpoint.async_commit = true;
    async_arg a = {.reports = 1};
    mt_result *res = NULL;
    MT_ASSERT_INT_EQ(mt_test_fit(cfg, async_reports, &a, &res), MT_OK);
    unsetenv("MT_TEST_COMMIT_PAUSE");
    unsetenv("MT_TEST_COMMIT_PAUSE_AT");
    MT_ASSERT_INT_EQ(a.rc[0], MT_OK);
    MT_ASSERT_STR_CONTAINS(mt_checkpoint_path(mt_result_checkpoint(res)), "checkpoint_000000");
    mt_result_free(&res);
    restores("async_end", "checkpoint_000000");
}

/* A commit that fails in its thread, on one rank (MT_CHECKPOINT_BUFFER of 4 KiB: several
 * pieces a rank): rank 0's write of its second piece (commit-write), or the last rank's
 * send after its first piece (commit-send: only that rank fails). The report that staged
 * it returned MT_OK; the next report is the failure on every rank (the failing rank its
 * own error, the others MT_EPEER naming it), and only once; nothing is published. */
static void test_async_failure_at_next_report(void)
{
    char send[32];
    snprintf(send, sizeof send, "commit-send:%d", P() - 1);
    struct {
        const char *fail_at, *says;
        int who;
    } cases[] = {{"commit-write:0", "writing rows", 0}, {send, "sending rows from", P() - 1}};
    setenv("MT_CHECKPOINT_BUFFER", "4096", 1);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        if (cases[i].who == P() - 1 && P() == 1)
            continue; /* no sender at one rank */
        char name[64];
        snprintf(name, sizeof name, "async_fails_%zu", i);
        setenv("MT_TEST_FAIL_AT", cases[i].fail_at, 1);
        mt_trainer_config cfg = mt_test_config(name);
        cfg.run.checkpoint.async_commit = true;
        async_arg a = {.reports = 3, .plain_after = 2};
        MT_ASSERT_INT_EQ(mt_test_fit(cfg, async_reports, &a, NULL), MT_OK);
        unsetenv("MT_TEST_FAIL_AT");
        MT_ASSERT_INT_EQ(a.rc[0], MT_OK);
        MT_ASSERT_INT_EQ(a.rc[1], R() == cases[i].who ? MT_EIO : MT_EPEER);
        MT_ASSERT_STR_CONTAINS(a.msg[1], "asynchronous commit");
        MT_ASSERT_STR_CONTAINS(a.msg[1], cases[i].says);
        if (R() != cases[i].who) {
            char who[32];
            snprintf(who, sizeof who, "rank %d failed", cases[i].who);
            MT_ASSERT_STR_CONTAINS(a.msg[1], who);
        }
        MT_ASSERT_INT_EQ(a.rc[2], MT_OK); /* told once */
        if (R() == 0) {
            CU_ASSERT(!published(name, "checkpoint_000000"));
            CU_ASSERT(!published(name, ".checkpoint_000000.tmp"));
        }
    }
    unsetenv("MT_CHECKPOINT_BUFFER");
}

/* No thread on the last rank (commit-thread: it could not be started): that rank runs the
 * same protocol inside mt_report, the others in their threads; both checkpoints commit. */
static void test_async_without_thread(void)
{
    char at[32];
    snprintf(at, sizeof at, "commit-thread:%d", P() - 1);
    setenv("MT_TEST_FAIL_AT", at, 1);
    mt_trainer_config cfg = mt_test_config("async_nothread");
    cfg.run.checkpoint.async_commit = true;
    async_arg a = {.reports = 2};
    MT_ASSERT_INT_EQ(mt_test_fit(cfg, async_reports, &a, NULL), MT_OK);
    unsetenv("MT_TEST_FAIL_AT");
    MT_ASSERT_INT_EQ(a.rc[0], MT_OK);
    MT_ASSERT_INT_EQ(a.rc[1], MT_OK);
    restores("async_nothread", "checkpoint_000001");
}

/* Asynchronous commits on the last rank only: every rank's report with a checkpoint is
 * MT_EINVAL saying so, and nothing is committed. */
static void test_async_on_some_ranks_only(void)
{
    if (P() == 1)
        return;
    mt_trainer_config cfg = mt_test_config("async_some");
    cfg.run.checkpoint.async_commit = R() == P() - 1;
    async_arg a = {.reports = 1};
    mt_result *res = NULL;
    /* found as the fit starts, with the other options: the function never runs */
    MT_ASSERT_INT_EQ(mt_test_fit(cfg, async_reports, &a, &res), MT_EINVAL);
    char want[128];
    snprintf(want, sizeof want, "--checkpoint-async is off on rank 0 and on on rank %d", P() - 1);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), want);
    MT_ASSERT_STR_CONTAINS(mt_result_error(res), want);
    mt_result_free(&res);
    MT_ASSERT_INT_EQ(a.rc[0], MT_OK);
    if (R() == 0)
        CU_ASSERT(!published("async_some", "checkpoint_000000"));
}

/* Options or the environment that differ on the last rank only: MT_EINVAL on
 * every rank as the fit starts, naming the field and both values; nothing runs. (With
 * max_failures differing, a failure was retried on some ranks only: a hang.) */
static int never_runs(mt_context *c, void *varg)
{
    ++*(int *)varg;
    return MT_OK;
}

static void test_config_differs_on_one_rank(void)
{
    if (P() == 1)
        return;
    char want[160];
    for (int k = 0; k < 4; k++) {
        mt_trainer_config cfg = mt_test_config("cfg_differs");
        mt_trainer *t = NULL;
        int calls = 0;
        bool last = R() == P() - 1;
        if (k == 0 && last)
            cfg.run.failure.max_failures = 1;
        if (k == 1 && last)
            setenv("MT_IO_COLLECTIVE", "1", 1);
        char other[4200];
        snprintf(other, sizeof other, "%s/elsewhere", cfg.run.storage_path);
        if (k == 2 && last)
            cfg.run.storage_path = other;
        if (k == 3) { /* differing only past their first 300 bytes */
            char tail[320];
            memset(tail, 'a', 300);
            snprintf(tail + 300, sizeof tail - 300, "%s", last ? "x" : "y");
            snprintf(other, sizeof other, "%s/%s", cfg.run.storage_path, tail);
            cfg.run.storage_path = other;
        }
        MT_ASSERT_INT_EQ(mt_trainer_create(&t, never_runs, &calls, &cfg), MT_OK);
        MT_ASSERT_INT_EQ(mt_trainer_fit(t, NULL), MT_EINVAL);
        unsetenv("MT_IO_COLLECTIVE");
        MT_ASSERT_INT_EQ(calls, 0);
        if (k == 0)
            snprintf(want, sizeof want, "--max-failures is (the default) on rank 0 and 1 on rank %d",
                     P() - 1);
        else if (k == 1)
            snprintf(want, sizeof want, "MT_IO_COLLECTIVE is unset on rank 0 and 1 on rank %d",
                     P() - 1);
        else if (k == 2)
            snprintf(want, sizeof want, "/elsewhere on rank %d", P() - 1);
        else
            snprintf(want, sizeof want, "--storage-path is ");
        MT_ASSERT_STR_CONTAINS(mt_last_error(), want);
        mt_trainer_destroy(&t);
    }
}

/* ------------------------------------------------------------ the row writer */

/* training_iteration of each row of result.json, as "1 3 4 " (rank 0). */
static void row_iterations(const char *name, char *out, size_t len)
{
    json_t *rows = rows_of(name);
    size_t n = 0, i;
    json_t *row;
    out[0] = '\0';
    json_array_foreach(rows, i, row)
        n += (size_t)snprintf(out + n, n < len ? len - n : 0, "%lld ",
                              (long long)json_integer_value(json_object_get(row, "training_iteration")));
    json_decref(rows);
}

typedef struct {
    const char *fail_at; /* MT_TEST_FAIL_AT for the report fail_report (1-based) */
    int fail_report, reports, ckpt_report;
    bool no_thread;      /* row-thread:0 from the first report: rows written in mt_report */
    int rc[8];
    char msg[8][MT__MSG_LEN];
} row_arg;

static int reports_with_row_failure(mt_context *c, void *arg)
{
    row_arg *t = arg;
    if (t->no_thread)
        setenv("MT_TEST_FAIL_AT", "row-thread:0", 1);
    for (int k = 1; k <= t->reports; k++) {
        if (k == t->fail_report)
            setenv("MT_TEST_FAIL_AT", t->fail_at, 1);
        mt_metrics *m = mt_metrics_new();
        mt_metrics_set_f64(m, "loss", 1.0 / k + mt_world_rank(c));
        mt_checkpoint *ck = k == t->ckpt_report ? mt_checkpoint_new() : NULL;
        int64_t v = k;
        if (ck)
            mt_checkpoint_put(ck, "k", MT_I64, 1, (size_t[]){1}, &v, MT_REPLICATED);
        t->rc[k] = mt_report(c, m, ck);
        snprintf(t->msg[k], sizeof t->msg[k], "%s", t->rc[k] ? mt_last_error() : "");
        if (k == t->fail_report)
            setenv("MT_TEST_FAIL_AT", t->no_thread ? "row-thread:0" : "", 1);
        mt_checkpoint_free(&ck);
        mt_metrics_free(&m);
    }
    unsetenv("MT_TEST_FAIL_AT");
    return MT_OK;
}

/* A report's row that rank 0's writer cannot write (row-write): that report returns
 * MT_OK, and the failure is every rank's error at a later one, the checkpointing report
 * after it at the latest (it waits for the rows queued), once; the rows after the missing
 * one wait until it is reported, so result.json stays the first rows in order, and the
 * next rows are written again. No memory for the row's record (row-queue) is found
 * before the report's agreement: that report's error on every rank, no iteration
 * counted, every row written. */
static void test_row_failure_at_later_report(void)
{
    row_arg t = {.fail_at = "row-write:0", .fail_report = 2, .reports = 6, .ckpt_report = 4};
    MT_ASSERT_INT_EQ(mt_test_fit(mt_test_config("row_fails"), reports_with_row_failure, &t, NULL),
                     MT_OK);
    MT_ASSERT_INT_EQ(t.rc[1], MT_OK);
    MT_ASSERT_INT_EQ(t.rc[2], MT_OK); /* its row was queued: the failure comes later */
    int f = t.rc[3] ? 3 : 4;          /* the first report after it, or the checkpoint's */
    MT_ASSERT_INT_EQ(t.rc[f], R() == 0 ? MT_EIO : MT_EPEER);
    MT_ASSERT_STR_CONTAINS(t.msg[f], "result.json: write failed: injected by MT_TEST_FAIL_AT");
    MT_ASSERT_STR_CONTAINS(t.msg[f], f == 3 ? "(the row of iteration 2 not written)"
                                            : "(2 rows of iterations 2 to 3 not written)");
    if (R() != 0)
        MT_ASSERT_STR_CONTAINS(t.msg[f], "rank 0 failed");
    for (int k = 3; k <= 6; k++)
        if (k != f)
            MT_ASSERT_INT_EQ(t.rc[k], MT_OK);
    if (R() == 0) {
        char got[64];
        row_iterations("row_fails", got, sizeof got);
        /* a failed report counts no iteration; at 3: 1, then 3 (the checkpoint's) to 5;
         * at 4: row 3 waited behind 2, the checkpoint failed, then 4 and 5 */
        MT_ASSERT_STR_EQ(got, f == 3 ? "1 3 4 5 " : "1 4 5 ");
        CU_ASSERT(published("row_fails", "checkpoint_000000") == (f == 3));
    }

    row_arg q = {.fail_at = "row-queue:0", .fail_report = 2, .reports = 6, .ckpt_report = 4};
    MT_ASSERT_INT_EQ(mt_test_fit(mt_test_config("row_queue"), reports_with_row_failure, &q, NULL),
                     MT_OK);
    MT_ASSERT_INT_EQ(q.rc[2], R() == 0 ? MT_ENOMEM : MT_EPEER);
    MT_ASSERT_STR_CONTAINS(q.msg[2], "out of memory queueing a report's row");
    for (int k = 1; k <= 6; k++)
        if (k != 2)
            MT_ASSERT_INT_EQ(q.rc[k], MT_OK);
    if (R() == 0) {
        char got[64];
        row_iterations("row_queue", got, sizeof got);
        MT_ASSERT_STR_EQ(got, "1 2 3 4 5 ");
        CU_ASSERT(published("row_queue", "checkpoint_000000"));
    }
}

/* Rank 0: waits until the writer shows hold point `at` (at most 20 s). */
static bool writer_at(int at)
{
    for (int i = 0; i < 20000 && mt__rows_test_held() != at; i++)
        usleep(1000);
    return mt__rows_test_held() == at;
}

/* A row fails while the next one is already queued behind it: report 3 queues its row
 * while the writer is still busy with report 2's failing one, and report 4 comes once the
 * writer has recorded that failure and is no longer busy, with row 3 still in the queue.
 * Report 4 must not take the failure then (the writer would write row 3 after the missing
 * row 2, a gap in result.json): rows 3 and 4 join it, and the fit's end returns it with
 * rows 2 to 4 missing and only row 1 written. */
static int reports_with_row_behind_failure(mt_context *c, void *arg)
{
    int *rc = arg, r0 = mt_world_rank(c) == 0;
    for (int k = 1; k <= 4; k++) {
        if (k == 2 && r0) {
            mt__rows_settle(c, true); /* row 1 written: the next batch is row 2's */
            mt__rows_test_hold(1);
            setenv("MT_TEST_FAIL_AT", "row-write:0", 1);
        }
        if (k == 3 && r0 && !writer_at(2)) /* row 2 failed, not yet recorded: busy */
            CU_FAIL("the row writer never reached its first hold point");
        if (k == 4 && r0) {
            mt__rows_test_hold(3);
            if (!writer_at(4)) /* recorded, not busy; row 3 waits in the queue */
                CU_FAIL("the row writer never reached its second hold point");
        }
        mt_metrics *m = mt_metrics_new();
        mt_metrics_set_f64(m, "loss", 1.0 / k);
        rc[k] = mt_report(c, m, NULL);
        mt_metrics_free(&m);
        if (k == 2)
            unsetenv("MT_TEST_FAIL_AT");
    }
    if (r0)
        mt__rows_test_hold(0);
    return MT_OK;
}

static void test_row_failure_with_rows_behind(void)
{
    int rc[5] = {0};
    mt_result *res = NULL;
    MT_ASSERT_INT_EQ(mt_test_fit(mt_test_config("row_behind"), reports_with_row_behind_failure,
                                 rc, &res), MT_EIO);
    MT_ASSERT_INT_EQ(rc[1] | rc[2] | rc[3], MT_OK);
    MT_ASSERT_INT_EQ(rc[4], MT_OK); /* taking it here would let row 3 be written */
    MT_ASSERT_STR_CONTAINS(mt_result_error(res), "(3 rows of iterations 2 to 4 not written)");
    mt_result_free(&res);
    if (R() == 0) {
        char got[64];
        row_iterations("row_behind", got, sizeof got);
        MT_ASSERT_STR_EQ(got, "1 ");
    }
}

/* The last report's row fails: the fit ends with that failure on every rank (rank 0's
 * code everywhere, as an attempt's failure is), the row missing and the others whole;
 * and with no writer thread (row-thread) every row is written by mt_report itself, a
 * failure kept for a later report just the same. */
static void test_row_failure_at_fit_end(void)
{
    for (int i = 0; i < 2; i++) {
        char name[64];
        snprintf(name, sizeof name, "row_end_%d", i);
        row_arg t = {.fail_at = i ? "row-thread:0,row-write:0" : "row-write:0",
                     .fail_report = 3, .reports = 3, .no_thread = i == 1};
        mt_result *res = NULL;
        MT_ASSERT_INT_EQ(mt_test_fit(mt_test_config(name), reports_with_row_failure, &t, &res),
                         MT_EIO);
        MT_ASSERT_INT_EQ(t.rc[1] | t.rc[2] | t.rc[3], MT_OK);
        MT_ASSERT_STR_CONTAINS(mt_result_error(res), "result.json: write failed: injected");
        MT_ASSERT_STR_CONTAINS(mt_result_error(res), "(the row of iteration 3 not written)");
        mt_result_free(&res);
        if (R() == 0) {
            char got[64];
            row_iterations(name, got, sizeof got);
            MT_ASSERT_STR_EQ(got, "1 2 ");
        }
    }
}

/* Reports far apart reach result.json while the run goes on (the writer wakes for
 * them), and a loop of reports faster than the writer (more than its queue holds) keeps
 * every row, in order. */
static int rows_arrive(mt_context *c, void *arg)
{
    int *seen = arg, rc = MT_OK;
    for (int k = 1; k <= 3 && !rc; k++) {
        mt_metrics *m = mt_metrics_new();
        mt_metrics_set_i64(m, "k", k);
        rc = mt_report(c, m, NULL);
        mt_metrics_free(&m);
        if (mt_world_rank(c) == 0) { /* the row appears while the run goes on (60 s: a
                                        bound for a hang only, not a timing) */
            char got[64] = "";
            for (int w = 0; w < 6000 && strlen(got) != (size_t)(2 * k); w++) {
                row_iterations("rows_arrive", got, sizeof got);
                if (strlen(got) != (size_t)(2 * k))
                    usleep(10000);
            }
            seen[k] = strlen(got) == (size_t)(2 * k);
        }
    }
    for (int k = 4; k <= 3000 && !rc; k++) {
        mt_metrics *m = mt_metrics_new();
        mt_metrics_set_i64(m, "k", k);
        rc = mt_report(c, m, NULL);
        mt_metrics_free(&m);
    }
    return rc;
}

static void test_rows_arrive_in_order(void)
{
    int seen[4] = {0};
    MT_ASSERT_INT_EQ(mt_test_fit(mt_test_config("rows_arrive"), rows_arrive, seen, NULL), MT_OK);
    if (R() != 0)
        return;
    CU_ASSERT(seen[1] && seen[2] && seen[3]);
    json_t *rows = rows_of("rows_arrive");
    MT_ASSERT_INT_EQ(json_array_size(rows), 3000);
    size_t i;
    json_t *row;
    int bad = 0;
    json_array_foreach(rows, i, row)
        bad += json_integer_value(json_object_get(row, "k")) != (json_int_t)i + 1 ||
               json_integer_value(json_object_get(row, "training_iteration")) != (json_int_t)i + 1;
    MT_ASSERT_INT_EQ(bad, 0);
    json_decref(rows);
}

static const mt_test tests[] = {
    {"report_files", test_report_files},
    {"per_rank_statistics", test_per_rank_statistics},
    {"checkpoint_contents_and_retention", test_checkpoint_contents_and_retention},
    {"async_contents_and_retention", test_async_contents_and_retention},
    {"resume_after_failure", test_resume_after_failure},
    {"retries", test_retries},
    {"retry_preparation_fails", test_retry_preparation_fails},
    {"corrupt_latest_is_skipped", test_corrupt_latest_is_skipped},
    {"bad_inputs", test_bad_inputs},
    {"frequency_and_preemption", test_frequency_and_preemption},
    {"estop_without_a_stop_fails", test_estop_without_a_stop_fails},
    {"config_differs_on_one_rank", test_config_differs_on_one_rank},
    {"async_preemption", test_async_preemption},
    {"metrics_getters_reject_null", test_metrics_getters_reject_null},
    {"per_rank_statistics_in_place", test_per_rank_statistics_in_place},
    {"reserved_keys_refused", test_reserved_keys_refused},
    {"reserved_key_in_report", test_reserved_key_in_report},
    {"csv_quoting", test_csv_quoting},
    {"checkpoint_builder_refusals", test_checkpoint_builder_refusals},
    {"run_lock_refuses_second_owner", test_run_lock_refuses_second_owner},
    {"checkpoint_file_checked_at_commit", test_checkpoint_file_checked_at_commit},
    {"commit_fails_part_way", test_commit_fails_part_way},
    {"async_report_returns_while_held", test_async_report_returns_while_held},
    {"async_fit_end_waits", test_async_fit_end_waits},
    {"async_failure_at_next_report", test_async_failure_at_next_report},
    {"async_without_thread", test_async_without_thread},
    {"async_on_some_ranks_only", test_async_on_some_ranks_only},
    {"row_failure_at_later_report", test_row_failure_at_later_report},
    {"row_failure_with_rows_behind", test_row_failure_with_rows_behind},
    {"row_failure_at_fit_end", test_row_failure_at_fit_end},
    {"rows_arrive_in_order", test_rows_arrive_in_order},
    {NULL, NULL},
};

int main(int argc, char **argv)
{
    return mt_test_main(argc, argv, "mpi_report", tests, true);
}
