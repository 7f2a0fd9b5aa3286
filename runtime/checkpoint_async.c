/*
 * checkpoint_async.c -- the asynchronous commit (run.checkpoint.async_commit): mt_report
 * returns once this rank's part of the checkpoint is copied into staging memory, and the
 * commit (checkpoint_commit.c's protocol, unchanged: the gather to rank 0, the write,
 * the fsync, the publication) runs in a library thread while training goes on.
 *
 * How it is built, and why:
 *  - The agreement, the shapes and the file lists are settled inside mt_report, on the
 *    report's communicator, as for a synchronous commit; only the bulk moves later. The
 *    thread moves it on a communicator of its own (a duplicate made at the first
 *    asynchronous commit), so its messages never meet the training's collectives; that
 *    needs MPI_THREAD_MULTIPLE (without it, every commit stays synchronous).
 *  - Staging is one block of at most run.checkpoint.staging_bytes (but at least one piece:
 *    MT_CHECKPOINT_BUFFER), kept across commits so its pages are touched once. The
 *    training thread copies the pieces the commit will take (this rank's rows of each
 *    array, then its files, in the commit's order) into it as a ring; the thread takes
 *    them in order and gives each back once written or sent. A part larger than the block
 *    makes mt_report wait until the rest fits: the block is the bound, not a guess.
 *  - At most one commit is in flight: the next report with a checkpoint waits for it
 *    (mt__checkpoint_settle), so at most one block and one thread exist. Everything the
 *    thread reads is its own (a copy of the checkpoint's description and metrics) or
 *    left alone by the training thread until it waits: rank 0's run state, whose
 *    training_iteration the training thread updates, is written to run.json from a copy.
 *  - HDF5: io/ holds one process-wide lock around every HDF5 call (HDF5 with MPI is not
 *    thread-safe), so the commit's writes and the training thread's shard reads take
 *    turns, one piece (at most half of MT_CHECKPOINT_BUFFER) at a time.
 *  - The thread's MPI waits are not this rank's position for the stall watchdog
 *    (mt__watch_quiet); the training thread's wait for the thread is (mt__watch_data), so
 *    a peer that stops during an asynchronous commit is still found and named.
 *  - The thread blocks the stop signals (SIGTERM, SIGUSR1, SIGINT), so they reach the
 *    training thread as before, and the commit's system calls are never interrupted.
 *  - Outcome: each rank's own status, kept until a report takes it; the report's opening
 *    agreement makes it every rank's error. Nothing is published unless every byte is
 *    durable (the same protocol), so a crash mid-commit leaves the previous checkpoint
 *    the latest.
 */
#include "checkpoint.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The ring of staged pieces. Piece i of the plan sits at off[i], len[i] bytes; pieces
 * [released, staged) occupy the block, in order. One producer (the training thread), one
 * consumer (the commit thread). */
struct mt__ck_stage {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char *base;
    size_t cap;
    size_t *off, *len;
    int n, staged, taken, released;
    bool whole;               /* every piece fits at once: nothing is taken until all are in */
    bool closed;              /* the commit ended: nothing more is taken */
    int status;               /* the first failure of the staging itself */
    char why[MT__MSG_LEN];
};

typedef struct mt__ck_async {
    mt__comm *comm;           /* the commit thread's communicator */
    char *block;              /* staging memory, kept across commits */
    size_t block_cap;
    /* the commit prepared or in flight */
    bool prepared, running, threaded;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    mt__ck_job job;
    mt__ck_building ck;       /* the description the thread works from (no array memory) */
    mt__ck_stage stage;
    mt_metrics *metrics;      /* rank 0 */
    int status;               /* the thread's outcome */
    char msg[MT__MSG_LEN];
    /* a failed commit not yet reported */
    int failed;
    char failed_msg[MT__MSG_LEN];
} mt__ck_async;

/* ------------------------------------------------------------ the ring */

const char *mt__ck_stage_take(mt__ck_stage *s, size_t n)
{
    pthread_mutex_lock(&s->mu);
    /* when the whole part fits in the block, the thread waits for all of it: its sends
     * and writes would otherwise take memory bandwidth and (on a core per rank) CPU from
     * the copy the training is waiting for (measured, 2 ranks on 2 cores, 256 MiB: the
     * stall 1.85x-2.15x a lone memcpy of the same bytes with the thread taking each piece
     * at once); in a ring it takes each piece as it comes, or the copy could not go on */
    while ((s->taken == s->staged || (s->whole && s->staged < s->n)) && s->taken < s->n &&
           !s->closed)
        pthread_cond_wait(&s->cv, &s->mu);
    const char *p = NULL;
    if (s->taken < s->staged && s->len[s->taken] == n) {
        p = s->base + s->off[s->taken];
        s->taken++;
    }
    pthread_mutex_unlock(&s->mu);
    return p;
}

void mt__ck_stage_release(mt__ck_stage *s)
{
    pthread_mutex_lock(&s->mu);
    if (s->released < s->taken)
        s->released++;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

int mt__ck_stage_status(mt__ck_stage *s)
{
    pthread_mutex_lock(&s->mu);
    int rc = s->status;
    if (rc)
        mt__error_set_text(s->why);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

/* With s->mu held: where the next piece of n bytes fits now, or SIZE_MAX. */
static size_t fits(const mt__ck_stage *s, size_t n)
{
    if (s->released == s->staged)
        return n <= s->cap ? 0 : SIZE_MAX; /* empty: from the start */
    size_t head = s->off[s->released], last = s->off[s->staged - 1];
    size_t tail = last + s->len[s->staged - 1];
    if (last >= head) /* [head, tail) in use */
        return s->cap - tail >= n ? tail : head >= n ? 0 : SIZE_MAX;
    return head - tail >= n ? tail : SIZE_MAX; /* wrapped: [head, cap) and [0, tail) */
}

/* Training thread: room for the next piece (NULL once the commit ended). */
static char *reserve(mt__ck_stage *s, size_t n)
{
    pthread_mutex_lock(&s->mu);
    size_t at;
    while ((at = fits(s, n)) == SIZE_MAX && !s->closed)
        pthread_cond_wait(&s->cv, &s->mu);
    char *p = NULL;
    if (!s->closed && s->staged < s->n) {
        s->off[s->staged] = at;
        s->len[s->staged] = n;
        p = s->base + at;
    }
    pthread_mutex_unlock(&s->mu);
    return p;
}

/* Training thread: the piece reserve gave is filled; failed: it could not be (why in
 * this thread's last error), the first such failure is the stage's status. */
static void staged(mt__ck_stage *s, int failed)
{
    pthread_mutex_lock(&s->mu);
    if (failed && !s->status) {
        s->status = failed;
        snprintf(s->why, sizeof s->why, "%s", mt_last_error());
    }
    s->staged++;
    /* a thread waiting for the whole part is woken once, when it is in (a wake at every
     * piece is a context switch taken from the copy the training waits for) */
    if (!s->whole || s->staged == s->n || failed)
        pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static void stage_close(mt__ck_stage *s)
{
    pthread_mutex_lock(&s->mu);
    s->closed = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* ------------------------------------------------------------ the plan */

static size_t row_bytes_of(const mt__ck_array *a)
{
    size_t n = mt_dtype_size(a->dtype);
    for (int i = 1; i < a->ndim; i++)
        n *= a->dims[i];
    return n;
}

/* The pieces this rank's commit takes, in its order (checkpoint_commit.c: rank 0 writes
 * every array's own rows, then copies its files; another rank sends its rows of each
 * sharded array, then its files), with the same piece sizes. Without s: counts them in
 * *pieces and sizes them (*total, *largest). With s: stages each, from ck's arrays and
 * files (ck is the caller's, with the arrays' memory), until done or the commit ended. */
static void walk(const mt__ck_building *ck, const char *fdesc, int rank, mt__ck_stage *s,
                 int *pieces, size_t *total, size_t *largest)
{
    *pieces = 0, *total = 0, *largest = 0;
    for (int i = 0; i < ck->narrays; i++) {
        const mt__ck_array *a = &ck->arrays[i];
        if (rank != 0 && a->layout != MT_SHARDED)
            continue;
        size_t rb = row_bytes_of(a), bytes = a->dims[0] * rb;
        MT__CHUNKS(off, n, bytes, mt__ck_stream_chunk(rb)) {
            ++*pieces, *total += n, *largest = n > *largest ? n : *largest;
            char *d = s ? reserve(s, n) : NULL;
            if (s && !d)
                return;
            if (d) {
                MT__TRACE("checkpoint", "stage");
                memcpy(d, (const char *)a->data + off, n);
                staged(s, MT_OK);
            }
        }
    }
    size_t pos = 0, chunk = mt__ck_buffer_bytes();
    for (int i = 0; i < ck->nfiles; i++) {
        pos += strlen(fdesc + pos) + 1;
        uint64_t size;
        memcpy(&size, fdesc + pos, 8);
        pos += 8;
        FILE *in = s ? fopen(ck->files[i].path, "rb") : NULL;
        int err = errno;
        MT__CHUNKS(off, n, (size_t)size, chunk) {
            ++*pieces, *total += n, *largest = n > *largest ? n : *largest;
            char *d = s ? reserve(s, n) : NULL;
            if (s && !d)
                break;
            if (!d)
                continue;
            size_t got = in ? fread(d, 1, n, in) : 0;
            int bad = MT_OK;
            if (!in && off == 0)
                bad = mt__error(MT_EIO, "cannot read checkpoint file %s (%s): %s",
                                ck->files[i].name, ck->files[i].path, strerror(err));
            else if (got < n) {
                memset(d + got, 0, n - got);
                bad = mt__error(MT_EIO, "checkpoint file %s (%s): %zu bytes were announced, "
                                "fewer could be read", ck->files[i].name, ck->files[i].path,
                                (size_t)size);
            }
            staged(s, bad);
        }
        if (in)
            fclose(in);
    }
}

/* ------------------------------------------------------------ before the agreement */

bool mt__ck_async_wanted(mt_context *c)
{
    if (!c->cfg->run.checkpoint.async_commit || c->stop) /* a stop: this one ends the run */
        return false;
    int level = 0;
    MPI_Query_thread(&level);
    return level >= MPI_THREAD_MULTIPLE;
}

/* A copy of ck's description without the arrays' memory: what the thread reads. */
static int copy_building(const mt__ck_building *src, mt__ck_building *dst)
{
    memset(dst, 0, sizeof *dst);
    dst->arrays = calloc((size_t)(src->narrays ? src->narrays : 1), sizeof *dst->arrays);
    dst->meta_keys = calloc((size_t)(src->nmeta ? src->nmeta : 1), sizeof *dst->meta_keys);
    dst->meta_values = calloc((size_t)(src->nmeta ? src->nmeta : 1), sizeof *dst->meta_values);
    dst->meta_types = calloc((size_t)(src->nmeta ? src->nmeta : 1), sizeof *dst->meta_types);
    bool ok = dst->arrays && dst->meta_keys && dst->meta_values && dst->meta_types;
    for (int i = 0; ok && i < src->narrays; i++) {
        dst->arrays[i] = src->arrays[i];
        dst->arrays[i].data = NULL;
        ok = (dst->arrays[i].name = mt__strdup(src->arrays[i].name)) != NULL;
        dst->narrays += ok;
    }
    for (int i = 0; ok && i < src->nmeta; i++) {
        dst->meta_keys[i] = mt__strdup(src->meta_keys[i]);
        dst->meta_values[i] = mt__strdup(src->meta_values[i]);
        dst->meta_types[i] = src->meta_types[i];
        ok = dst->meta_keys[i] && dst->meta_values[i];
        dst->nmeta++;
    }
    for (int i = 0; ok && i < src->nfiles; i++)
        ok = mt__ck_files_add(&dst->files, &dst->nfiles, &dst->files_cap, src->files[i].name,
                              src->files[i].path, "staging a checkpoint") == MT_OK;
    return ok ? MT_OK : mt__error(MT_ENOMEM, "out of memory staging a checkpoint");
}

int mt__ck_async_prepare(mt_context *c, const mt__ck_building *ck, const char *fdesc,
                         const mt_metrics *metrics)
{
    mt__ck_async *a = c->ck_async;
    if (a && a->prepared) /* settled by every report with a checkpoint: a bug */
        return mt__error(MT_EINVAL, "checkpoint: a commit is still in flight");
    if (!a) {
        if (!(a = calloc(1, sizeof *a)))
            return mt__error(MT_ENOMEM, "out of memory staging a checkpoint");
        pthread_mutex_init(&a->mu, NULL);
        pthread_cond_init(&a->cv, NULL);
        c->ck_async = a;
    }
    int pieces;
    size_t total, largest;
    walk(ck, fdesc, c->world_rank, NULL, &pieces, &total, &largest);
    size_t bound = c->cfg->run.checkpoint.staging_bytes, buf = mt__ck_buffer_bytes();
    size_t cap = bound > buf ? bound : buf; /* at least one piece */
    cap = total < cap ? total : cap;
    cap = largest > cap ? largest : cap;
    if (cap > a->block_cap) {
        free(a->block);
        a->block_cap = 0;
        if (!(a->block = malloc(cap)))
            return mt__error(MT_ENOMEM, "out of memory staging a checkpoint (%zu bytes of "
                             "run.checkpoint.staging_bytes)", cap);
        a->block_cap = cap;
    }
    mt__ck_stage *s = &a->stage;
    memset(s, 0, sizeof *s);
    s->base = a->block;
    s->cap = a->block_cap;
    s->n = pieces;
    s->whole = total <= s->cap;
    s->off = calloc((size_t)(pieces ? pieces : 1), sizeof *s->off);
    s->len = calloc((size_t)(pieces ? pieces : 1), sizeof *s->len);
    a->prepared = true; /* from here mt__ck_async_drop frees what follows */
    int rc = s->off && s->len ? copy_building(ck, &a->ck)
                              : mt__error(MT_ENOMEM, "out of memory staging a checkpoint");
    if (!rc && c->world_rank == 0 && metrics &&
        (!(a->metrics = mt_metrics_new()) || mt__metrics_copy(a->metrics, metrics)))
        rc = mt__error(MT_ENOMEM, "out of memory staging a checkpoint");
    return rc;
}

void mt__ck_async_drop(mt_context *c)
{
    mt__ck_async *a = c->ck_async;
    if (!a || !a->prepared)
        return;
    free(a->stage.off), free(a->stage.len);
    memset(&a->stage, 0, sizeof a->stage);
    mt__ck_building_free(&a->ck);
    memset(&a->ck, 0, sizeof a->ck);
    mt_metrics_free(&a->metrics);
    a->prepared = false;
}

int mt__ck_async_comm(mt_context *c)
{
    mt__ck_async *a = c->ck_async;
    if (a->comm) /* made at an earlier commit on every rank (or on none: below) */
        return MT_OK;
    int rc = mt__comm_create(&a->comm, c->comm->comm);
    mt__call call;
    mt__call_init(&call, MT__CALL_INTERNAL, 30, 0, 0);
    rc = mt__agree(c->comm, &call, rc, NULL);
    if (rc) /* none keeps one, so the next commit makes it on every rank again */
        mt__comm_destroy(&a->comm);
    return rc;
}

/* ------------------------------------------------------------ the thread */

static void *commit_thread(void *arg)
{
    mt__ck_async *a = arg;
    mt__trace_thread("checkpoint commit");
    mt__watch_quiet();
    int rc;
    {
        MT__TRACE("checkpoint", "async commit");
        rc = mt__ck_commit_body(&a->job);
    }
    stage_close(&a->stage); /* the training thread stops staging what will not be taken */
    pthread_mutex_lock(&a->mu);
    a->status = rc;
    snprintf(a->msg, sizeof a->msg, "%s", rc ? mt_last_error() : "");
    a->done = true;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

int mt__ck_async_start(mt_context *c, mt__ck_job *job, const mt__ck_building *ck)
{
    mt__ck_async *a = c->ck_async;
    pthread_mutex_init(&a->stage.mu, NULL);
    pthread_cond_init(&a->stage.cv, NULL);
    a->job = *job;
    a->job.comm = a->comm;
    a->job.ck = &a->ck;
    a->job.stage = &a->stage;
    a->job.metrics = a->metrics;
    a->job.snapshot = true;
    a->done = false;
    a->status = MT_OK;
    int pieces;
    size_t total, largest;
    /* a part that fits whole is staged before the thread starts: the thread's first steps
     * (rank 0 creates the file) would otherwise take CPU from the copy the training waits
     * for, on the same core when the rank is bound to one (mpirun's default at 2 ranks;
     * the thread inherits the binding) */
    bool first = a->stage.whole;
    if (first) {
        MT__TRACE("checkpoint", "staging");
        walk(ck, job->fdesc, c->world_rank, &a->stage, &pieces, &total, &largest);
    }
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGUSR1);
    sigaddset(&block, SIGINT);
    pthread_sigmask(SIG_BLOCK, &block, &old); /* the thread starts with them blocked */
    a->threaded = !mt__test_fail("commit-thread", c->world_rank) &&
                  pthread_create(&a->thread, NULL, commit_thread, a) == 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    a->running = true;
    if (!a->threaded) {
        /* no thread: the same protocol here, on the thread's communicator, from the
         * caller's memory and files (the block, unused then, is the files' buffer) */
        a->job.ck = ck;
        a->job.stage = NULL;
        if (c->world_rank != 0)
            a->job.buf = a->block;
        a->status = mt__ck_commit_body(&a->job);
        snprintf(a->msg, sizeof a->msg, "%s", a->status ? mt_last_error() : "");
        a->done = true; /* settled like a thread that ended */
        return MT_OK;
    }
    if (!first) { /* a ring: the thread takes the pieces as they come */
        MT__TRACE("checkpoint", "staging");
        walk(ck, job->fdesc, c->world_rank, &a->stage, &pieces, &total, &largest);
    }
    return MT_OK;
}

/* The commit ended (the thread joined): its outcome becomes the failure to report. */
static void collect(mt__ck_async *a)
{
    if (a->status && !a->failed) {
        a->failed = a->status;
        snprintf(a->failed_msg, sizeof a->failed_msg, "the asynchronous commit of the "
                 "checkpoint of training_iteration %lld failed: %s",
                 (long long)a->job.iteration, a->msg);
    }
    mt__ck_job_free(&a->job);
    pthread_mutex_destroy(&a->stage.mu);
    pthread_cond_destroy(&a->stage.cv);
    a->running = false;
}

int mt__checkpoint_settle(mt_context *c, bool wait)
{
    mt__ck_async *a = c ? c->ck_async : NULL;
    if (!a)
        return MT_OK;
    if (a->running) {
        pthread_mutex_lock(&a->mu);
        if (!a->done && wait) {
            MT__TRACE("checkpoint", "async wait");
            mt__watch_data(); /* a peer that stops in the commit is found and named */
            while (!a->done)
                pthread_cond_wait(&a->cv, &a->mu);
            mt__watch_leave();
        }
        bool done = a->done;
        pthread_mutex_unlock(&a->mu);
        if (done) {
            if (a->threaded)
                pthread_join(a->thread, NULL);
            collect(a);
            mt__ck_async_drop(c);
        }
    }
    int rc = a->failed;
    if (rc) {
        mt__error(rc, "%s", a->failed_msg);
        a->failed = MT_OK;
    }
    return rc;
}

void mt__ck_async_free(mt_context *c)
{
    mt__ck_async *a = c->ck_async;
    if (!a)
        return;
    mt__checkpoint_settle(c, true); /* its failure went to the attempt's end already */
    mt__ck_async_drop(c);
    mt__comm_destroy(&a->comm);
    free(a->block);
    pthread_cond_destroy(&a->cv);
    pthread_mutex_destroy(&a->mu);
    free(a);
    c->ck_async = NULL;
}

int mt_checkpoint_wait(mt_context *c)
{
    if (!mt__ctx_ok(c, "mt_checkpoint_wait"))
        return MT_EINVAL;
    mt__call call;
    mt__call_init(&call, MT__CALL_CKPT_WAIT, 0, 0, 0);
    return mt__agree(c->comm, &call, mt__checkpoint_settle(c, true), NULL);
}
