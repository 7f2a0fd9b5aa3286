/*
 * rowlog.c -- rank 0's row writer: the rows of reports without a checkpoint are built and
 * appended to result.json and progress.csv (and printed) by a thread of the run, so that
 * such a report is one agreement on every rank and no file write on rank 0's path.
 *
 * mt_report (rank 0) queues what the row needs, in one allocation: the automatic values
 * taken at the report, the per-rank statistics, and its own metrics encoded
 * (mt__metrics_encode_to). The thread takes the whole queue at once, writes the rows in
 * order, and then waits up to BATCH_NS for more before it looks again; a report finds it
 * awake and does not signal it, so a loop of reports costs no system call on rank 0. A
 * report finding the thread asleep (the queue was empty) wakes it: reports far apart
 * still reach the files at once.
 *
 * The rules, as for an asynchronous checkpoint commit (checkpoint_async.c):
 *  - rows are written in report order, and every row queued is written before a
 *    checkpoint is committed (mt__rows_settle waits at every checkpointing report), before
 *    an attempt ends, and before the logs are closed;
 *  - a row that cannot be written (a full disk, memory) leaves the file as it was (each
 *    append is whole or cut back) and is every rank's error at a later report: the first
 *    after the thread found it, the next checkpointing report, or the end of the attempt,
 *    whichever comes first. The rows after it are not written until then, so result.json
 *    stays the first reports' rows in order; the error names the file, the reason, and
 *    the iterations whose rows are missing.
 *  - at most QUEUE_MAX rows wait: a report finding it full waits for room (memory stays
 *    bounded when the disk is slower than the reports).
 * A crash loses the rows still queued (at most the last BATCH_NS of reports, and never a
 * row before a committed checkpoint); a resumed run supersedes the rows after its
 * checkpoint anyway.
 */
#include "runtime.h"
#include "../common/trace.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { BATCH_NS = 2000000, QUEUE_MAX = 1024, SPARE_MAX = 32 }; /* rows kept: 2 x SPARE_MAX */

/* mt__rows_test_hold's point (0: none). */
static atomic_int test_hold;

void mt__rows_test_hold(int stage)
{
    atomic_store(&test_hold, stage);
}

int mt__rows_test_held(void)
{
    return atomic_load(&test_hold);
}

/* The writer at a test's hold point: when the test set `armed`, show `at` and wait until
 * it is moved on (never in a run that no test holds: one relaxed load). */
static void test_point(int armed, int at)
{
    if (atomic_load_explicit(&test_hold, memory_order_relaxed) != armed)
        return;
    atomic_store(&test_hold, at);
    struct timespec nap = {0, 1000000};
    while (atomic_load(&test_hold) == at)
        nanosleep(&nap, NULL);
}

typedef struct mt__row_rec {
    struct mt__row_rec *next;
    mt__row_auto a;
    bool fail;      /* MT_TEST_FAIL_AT row-write, read at the report (getenv is the
                       training thread's: a test sets the variable between reports) */
    int nkeys;      /* quads that follow (0: no per_rank) */
    size_t enc_len; /* then the metrics' encoding */
    size_t cap;     /* the bytes of data allocated */
    uint64_t keys_id; /* the metrics' keys_id the encoding was made for */
    bool plain;     /* numbers only: a report with the same keys rewrites just the values */
    double data[];
} row;

struct mt__rowlog {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    row *head, *tail;
    int queued;
    bool idle, busy, stop;
    int flushers;      /* callers waiting for the queue to empty */
    int verbose;
    mt__rundir *run;
    mt__row_failure failed; /* the thread's, since the last settle */
    mt_metrics *last;       /* the last row written, with the automatic keys */
    /* rows written, given back for the next reports (with a malloc and a whole encoding
     * each, the record was 0.13-0.19 us of a report, timed around it; about 0.1 us with
     * them reused): spare under mu, mine the training thread's alone, taken from spare.
     * Arrays, not lists: the writer never writes into a row once it is queued */
    row *spare[SPARE_MAX], *mine[SPARE_MAX];
    int nspare, nmine;
    /* failed holds a failure (set under mu): a report that waits for nothing takes mu
     * only then */
    atomic_bool has_failed;
};

/* The first failure kept (its code and text), every row it left out counted: the
 * failed one (rc), and each one after it (rc MT_OK), so that result.json stays the rows of
 * the first reports, in order, until the failure is reported. */
static void note(mt__row_failure *f, int rc, const char *msg, int64_t iteration)
{
    if (!f->code && rc) {
        f->code = rc;
        snprintf(f->msg, sizeof f->msg, "%s", msg);
        f->first = iteration;
    }
    f->last = iteration;
    f->missing++;
}

int mt__row_add_auto(mt_metrics *m, json_t *j, const mt__row_auto *a, const char *ckname)
{
    int bad = mt__metrics_put(m, "training_iteration", MT__METRIC_I64, 0, a->iteration, NULL, false) |
              mt__metrics_put(m, "iterations_since_restore", MT__METRIC_I64, 0, a->since_restore,
                              NULL, false) |
              mt__metrics_put(m, "timestamp", MT__METRIC_F64, a->stamp, 0, NULL, false) |
              mt__metrics_put(m, "time_this_iter_s", MT__METRIC_F64, a->this_iter, 0, NULL, false) |
              mt__metrics_put(m, "time_total_s", MT__METRIC_F64, a->total, 0, NULL, false) |
              json_object_set_new(j, "training_iteration", json_integer(a->iteration)) |
              json_object_set_new(j, "iterations_since_restore", json_integer(a->since_restore)) |
              json_object_set_new(j, "timestamp", json_real(a->stamp)) |
              json_object_set_new(j, "time_this_iter_s", json_real(a->this_iter)) |
              json_object_set_new(j, "time_total_s", json_real(a->total));
    if (ckname && *ckname)
        bad |= mt__metrics_put(m, "checkpoint_dir_name", MT__METRIC_STR, 0, 0, ckname, false) |
               json_object_set_new(j, "checkpoint_dir_name", json_string(ckname));
    return bad ? mt__error(MT_ENOMEM, "out of memory building a report") : MT_OK;
}

void mt__row_print(const mt_metrics *m, int64_t iteration, const char *ckname)
{
    double total = 0;
    mt_metrics_get_f64(m, "time_total_s", &total);
    char line[1024];
    size_t n = (size_t)snprintf(line, sizeof line, "mpitrain: iter %lld  %.1fs ", (long long)iteration,
                                total);
    for (int i = 0; i < m->n && n < sizeof line - 64; i++) {
        const mt__metric *e = &m->e[i];
        if (mt__metrics_reserved(e->key))
            continue;
        if (e->type == MT__METRIC_F64)
            n += (size_t)snprintf(line + n, sizeof line - n, " %s=%.4g", e->key, e->f);
        else if (e->type == MT__METRIC_I64)
            n += (size_t)snprintf(line + n, sizeof line - n, " %s=%lld", e->key, (long long)e->i);
        else
            n += (size_t)snprintf(line + n, sizeof line - n, " %s=%s", e->key, e->s);
    }
    if (ckname && *ckname && n < sizeof line - 40)
        snprintf(line + n, sizeof line - n, "  [%s]", ckname);
    printf("%s\n", line);
    fflush(stdout);
}

/* A row made of m (owned: freed, or kept in *kept once written, the automatic keys
 * added), unless rc already failed: the statistics (nkeys quads over keys), the
 * automatic values, appended to result.json (fail: a write failure injected by a test)
 * and printed. By the writer thread and, without one, by mt_report. */
static int finish_row(mt__rundir *run, mt_metrics *m, int rc, const char *const *keys,
                      const double *quads, int nkeys, const mt__row_auto *a, bool fail,
                      int verbose, mt_metrics **kept)
{
    json_t *j = rc ? NULL : mt__metrics_to_json(m);
    if (!rc && !j)
        rc = mt__error(MT_ENOMEM, "out of memory building a report");
    if (!rc && nkeys > 0)
        rc = mt__spread_put(j, keys, quads, nkeys, verbose);
    if (!rc)
        rc = mt__row_add_auto(m, j, a, NULL);
    if (!rc && fail)
        rc = mt__error(MT_EIO, "%s/result.json: write failed: injected by MT_TEST_FAIL_AT",
                       run->dir);
    if (!rc)
        rc = mt__run_append(run, j);
    if (verbose >= 1 && m)
        mt__row_print(m, a->iteration, NULL);
    json_decref(j);
    if (!rc) {
        mt_metrics_free(kept);
        *kept = m;
    } else
        mt_metrics_free(&m);
    return rc;
}

/* The thread: one queued row built, written and printed; *kept the row's metrics (the
 * automatic keys too) when it was written. */
static int write_row(struct mt__rowlog *q, const row *r, mt_metrics **kept)
{
    MT__TRACE("report", "row write");
    mt_metrics *m = mt_metrics_new();
    int rc = m ? mt__metrics_decode(m, (const char *)(r->data + 4 * r->nkeys), r->enc_len)
               : mt__error(MT_ENOMEM, "out of memory building a report");
    const char **keys = NULL;
    int k = 0;
    if (!rc && r->nkeys > 0) {
        /* the statistics' layout is rank 0's numeric keys in its order (spread.c) */
        keys = malloc((size_t)r->nkeys * sizeof *keys);
        for (int i = 0; keys && i < m->n && k < r->nkeys; i++)
            if (m->e[i].type != MT__METRIC_STR)
                keys[k++] = m->e[i].key;
        if (!keys)
            rc = mt__error(MT_ENOMEM, "out of memory building a report");
    }
    rc = finish_row(q->run, m, rc, keys, r->data, k == r->nkeys ? k : 0, &r->a, r->fail,
                    q->verbose, kept);
    free(keys);
    return rc;
}

static void *writer(void *arg)
{
    struct mt__rowlog *q = arg;
    mt__trace_thread("rows");
    pthread_mutex_lock(&q->mu);
    for (;;) {
        if (!q->head) {
            if (q->stop)
                break;
            q->idle = true;
            pthread_cond_wait(&q->wake, &q->mu);
            q->idle = false;
            continue;
        }
        row *list = q->head;
        q->head = q->tail = NULL;
        q->queued = 0;
        q->busy = true;
        bool skipping = q->failed.code != MT_OK; /* rows after a missing one wait for its report */
        pthread_cond_broadcast(&q->done); /* room for a report waiting on a full queue */
        pthread_mutex_unlock(&q->mu);
        mt_metrics *kept = NULL;
        mt__row_failure failed = {0};
        row *back[SPARE_MAX];
        int nback = 0;
        while (list) {
            row *r = list;
            list = r->next;
            if (skipping || failed.code)
                note(&failed, MT_OK, "", r->a.iteration);
            else {
                int rc = write_row(q, r, &kept);
                if (rc)
                    note(&failed, rc, mt_last_error(), r->a.iteration);
            }
            if (nback < SPARE_MAX)
                back[nback++] = r;
            else
                free(r);
        }
        test_point(1, 2);
        pthread_mutex_lock(&q->mu);
        int kept_back = 0;
        while (kept_back < nback && q->nspare < SPARE_MAX)
            q->spare[q->nspare++] = back[kept_back++];
        if (kept) {
            mt_metrics_free(&q->last);
            q->last = kept;
        }
        if (failed.code && !q->failed.code) {
            q->failed = failed;
            atomic_store_explicit(&q->has_failed, true, memory_order_relaxed);
        } else if (failed.missing) {
            q->failed.last = failed.last;
            q->failed.missing += failed.missing;
        }
        while (kept_back < nback) /* what spare had no room for (rare: it is refilled only
                                     as reports take from it) */
            free(back[kept_back++]);
        q->busy = false;
        pthread_cond_broadcast(&q->done);
        if (atomic_load_explicit(&test_hold, memory_order_relaxed) == 3) {
            pthread_mutex_unlock(&q->mu);
            test_point(3, 4);
            pthread_mutex_lock(&q->mu);
        }
        if (!q->stop && !q->flushers) { /* gather the next rows a while */
            struct timespec until;
            clock_gettime(CLOCK_MONOTONIC, &until);
            until.tv_nsec += BATCH_NS;
            if (until.tv_nsec >= 1000000000L) {
                until.tv_sec++;
                until.tv_nsec -= 1000000000L;
            }
            while (!q->stop && !q->flushers && q->queued < QUEUE_MAX / 2 &&
                   pthread_cond_timedwait(&q->wake, &q->mu, &until) == 0)
                ;
        }
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

/* The writer started; NULL with *unthreaded when only the thread could not start (rows
 * are then written by mt_report), NULL alone when memory ran out. */
static struct mt__rowlog *start(mt__rundir *run, int verbose, bool *unthreaded)
{
    struct mt__rowlog *q = calloc(1, sizeof *q);
    if (!q)
        return NULL;
    if (mt__test_fail("row-thread", 0)) {
        free(q);
        *unthreaded = true;
        return NULL;
    }
    q->run = run;
    q->verbose = verbose;
    pthread_mutex_init(&q->mu, NULL);
    pthread_condattr_t mono;
    pthread_condattr_init(&mono);
    pthread_condattr_setclock(&mono, CLOCK_MONOTONIC); /* a step of the wall clock never
                                                          stretches the batch's wait */
    pthread_cond_init(&q->wake, &mono);
    pthread_condattr_destroy(&mono);
    pthread_cond_init(&q->done, NULL);
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGTERM); /* the stop requests stay the training thread's (as the */
    sigaddset(&block, SIGUSR1); /* commit thread's, checkpoint_async.c); a crash's signals */
    sigaddset(&block, SIGINT);  /* still reach their handlers on this thread */
    pthread_sigmask(SIG_BLOCK, &block, &old);
    bool ok = pthread_create(&q->thread, NULL, writer, q) == 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (!ok) {
        pthread_cond_destroy(&q->done);
        pthread_cond_destroy(&q->wake);
        pthread_mutex_destroy(&q->mu);
        free(q);
        *unthreaded = true;
        return NULL;
    }
    return q;
}

/* Without a thread (it could not start): the row written now, as a checkpointing
 * report's is. */
static int write_now(mt_context *c, const mt_metrics *m, const mt__row_auto *a,
                     const double *quads, int nkeys)
{
    mt_metrics *row_m = mt_metrics_new();
    int rc = row_m && !mt__metrics_copy(row_m, m)
                 ? MT_OK : mt__error(MT_ENOMEM, "out of memory building a report");
    return finish_row(c->run, row_m, rc, c->spread.key, quads, nkeys, a,
                      mt__test_fail("row-write", 0), c->verbose, &c->last_metrics);
}

/* The numeric keys of m: the statistics' layout when rank 0's keys are agreed. */
static int numeric_keys(const mt_metrics *m)
{
    int n = 0;
    for (int i = 0; m && i < m->n; i++)
        n += m->e[i].type != MT__METRIC_STR;
    return n;
}

int mt__rows_reserve(mt_context *c, const mt_metrics *m, mt__row_slot *slot)
{
    mt__rundir *run = c->run;
    *slot = (mt__row_slot){0};
    if (!run->rows && !run->rows_unthreaded) {
        bool unthreaded = false;
        run->rows = start(run, c->verbose, &unthreaded);
        if (!run->rows && !unthreaded)
            return mt__error(MT_ENOMEM, "out of memory starting rank 0's row writer");
        run->rows_unthreaded = unthreaded;
    }
    if (!run->rows)
        return MT_OK; /* written by mt__rows_queue itself */
    const char *sites = mt__test_sites(); /* read once for both */
    struct mt__rowlog *q = run->rows;
    row *r = q->nmine ? q->mine[q->nmine - 1] : NULL;
    if (r && m && r->plain && r->keys_id == m->keys_id &&
        r->nkeys == (c->world_size > 1 ? m->n : 0) && !mt__test_fail_in(sites, "row-queue", 0)) {
        /* a row given back that was made for these metrics with these keys, numbers only:
         * its encoding's layout stands, only the values are written */
        q->nmine--;
        r->next = NULL;
        r->fail = mt__test_fail_in(sites, "row-write", 0);
        mt__metrics_encode_values(m, (char *)(r->data + 4 * r->nkeys));
        slot->r = r;
        return MT_OK;
    }
    int numbers = numeric_keys(m), nkeys = c->world_size > 1 ? numbers : 0;
    size_t enc = mt__metrics_encoded_len(m), quad_bytes = (size_t)nkeys * 4 * sizeof(double);
    if (r) { /* a row given back: used when big enough and not far bigger, else freed */
        q->nmine--;
        size_t need = quad_bytes + enc;
        if (r->cap < need || r->cap > 4 * need + 4096) {
            free(r);
            r = NULL;
        }
    }
    if (mt__test_fail_in(sites, "row-queue", 0)) {
        free(r);
        r = NULL;
    } else if (!r && (r = malloc(sizeof *r + quad_bytes + enc)))
        r->cap = quad_bytes + enc;
    if (!r)
        return mt__error(MT_ENOMEM, "out of memory queueing a report's row (%zu bytes)",
                         sizeof *r + quad_bytes + enc);
    r->next = NULL;
    r->fail = mt__test_fail_in(sites, "row-write", 0);
    r->nkeys = nkeys;
    r->enc_len = enc;
    r->keys_id = m ? m->keys_id : 0;
    r->plain = m && numbers == m->n;
    mt__metrics_encode_to(m, (char *)(r->data + 4 * nkeys));
    slot->r = r;
    return MT_OK;
}

void mt__rows_release(mt__row_slot *slot)
{
    free(slot->r);
    slot->r = NULL;
}

void mt__rows_queue(mt_context *c, mt__row_slot *slot, const mt_metrics *m,
                    const mt__row_auto *a, const double *quads, int nkeys)
{
    if (c->row_failed.code) { /* no row after one that is missing, until it is reported */
        note(&c->row_failed, MT_OK, "", a->iteration);
        mt__rows_release(slot);
        return;
    }
    row *r = slot->r;
    slot->r = NULL;
    if (!r) { /* no thread: written here */
        int rc = write_now(c, m, a, quads, nkeys);
        if (rc)
            note(&c->row_failed, rc, mt_last_error(), a->iteration);
        return;
    }
    struct mt__rowlog *q = c->run->rows;
    r->a = *a;
    if (nkeys == r->nkeys && nkeys > 0)
        memcpy(r->data, quads, (size_t)nkeys * 4 * sizeof(double));
    else if (r->nkeys > 0) /* cannot be (the layout is rank 0's numeric keys): no per_rank */
        memset(r->data, 0, (size_t)r->nkeys * 4 * sizeof(double));
    pthread_mutex_lock(&q->mu);
    while (q->queued >= QUEUE_MAX) { /* the disk is slower than the reports: wait for room */
        pthread_cond_signal(&q->wake);
        pthread_cond_wait(&q->done, &q->mu);
    }
    if (q->tail)
        q->tail->next = r;
    else
        q->head = r;
    q->tail = r;
    q->queued++;
    if (!q->nmine) { /* the rows written since: the next reports' */
        memcpy(q->mine, q->spare, (size_t)q->nspare * sizeof *q->mine);
        q->nmine = q->nspare;
        q->nspare = 0;
    }
    bool asleep = q->idle;
    pthread_mutex_unlock(&q->mu);
    if (asleep)
        pthread_cond_signal(&q->wake);
}

/* f's failure, if any, as this thread's error, and f cleared. */
static int take_failure(mt__row_failure *f)
{
    int rc = f->code;
    if (rc) {
        char rows[96];
        if (f->missing == 1)
            snprintf(rows, sizeof rows, "the row of iteration %lld", (long long)f->first);
        else
            snprintf(rows, sizeof rows, "%lld rows of iterations %lld to %lld",
                     (long long)f->missing, (long long)f->first, (long long)f->last);
        mt__error(rc, "%s (%s not written)", f->msg, rows);
        memset(f, 0, sizeof *f);
    }
    return rc;
}

int mt__rows_settle(mt_context *c, bool wait)
{
    if (!c || c->world_rank != 0 || !c->run)
        return MT_OK;
    int rc = take_failure(&c->row_failed);
    struct mt__rowlog *q = c->run->rows;
    if (!q || (!wait && !atomic_load_explicit(&q->has_failed, memory_order_relaxed)))
        return rc; /* a failure being recorded now is taken at the next report */
    pthread_mutex_lock(&q->mu);
    if (wait && (q->head || q->busy)) {
        MT__TRACE("report", "rows wait");
        q->flushers++;
        pthread_cond_signal(&q->wake);
        while (q->head || q->busy)
            pthread_cond_wait(&q->done, &q->mu);
        q->flushers--;
    }
    if (wait && q->last) { /* the last row written is the context's last report */
        mt_metrics_free(&c->last_metrics);
        c->last_metrics = q->last;
        q->last = NULL;
    }
    /* a batch being written may still add rows to its failure, and so do rows queued
     * behind it: were the failure taken now, the writer would write them after the
     * missing one (a gap in result.json); it is taken once they have joined it */
    if (!q->busy && !q->head) {
        if (!rc)
            rc = take_failure(&q->failed);
        else if (q->failed.code) { /* both: the second's text follows the first's */
            char first[MT__MSG_LEN];
            snprintf(first, sizeof first, "%s", mt_last_error());
            take_failure(&q->failed);
            mt__error_after(first);
        }
        atomic_store_explicit(&q->has_failed, false, memory_order_relaxed);
    }
    pthread_mutex_unlock(&q->mu);
    return rc;
}

void mt__rows_stop(mt__rundir *run)
{
    struct mt__rowlog *q = run->rows;
    if (!q)
        return;
    pthread_mutex_lock(&q->mu);
    q->stop = true;
    pthread_cond_signal(&q->wake);
    pthread_mutex_unlock(&q->mu);
    pthread_join(q->thread, NULL); /* the rows still queued are written first */
    if (q->failed.code) /* cannot be: every attempt settles before its logs close */
        fprintf(stderr, "mpitrain: %s (found as the run's logs closed)\n", q->failed.msg);
    mt_metrics_free(&q->last);
    for (int i = 0; i < q->nspare; i++)
        free(q->spare[i]);
    for (int i = 0; i < q->nmine; i++)
        free(q->mine[i]);
    pthread_cond_destroy(&q->done);
    pthread_cond_destroy(&q->wake);
    pthread_mutex_destroy(&q->mu);
    free(q);
    run->rows = NULL;
}
