/*
 * watchdog.c -- where this rank is, and the stall watchdog thread.
 *
 * The rank's own thread writes its position (waiting in which agreement, since when, what
 * it last called) with atomics and a seqlock-free copy: the watchdog reads a snapshot
 * under a mutex held only for the copy. Heartbeats go to rank 0 with plain sends on a
 * private duplicate communicator, so they never match application or library traffic.
 * Stop protocol: every rank's thread sends a final "bye"; rank 0's thread keeps receiving
 * until it has one from every other rank, so no message is left unmatched.
 */
#include "watchdog.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    int32_t waiting;     /* 1 while inside an agreement */
    int32_t bye;         /* last message of this rank's watchdog */
    uint64_t seq;        /* agreement number (waiting) or last one passed */
    double waited_s;     /* seconds in the current agreement */
    double since_last_s; /* seconds since it left the last agreement */
    char desc[MT__DESC_LEN];
} beat;

static struct {
    pthread_mutex_t lock;
    int waiting;
    uint64_t seq;
    double entered, left;
    mt__call call;
} here = {.lock = PTHREAD_MUTEX_INITIALIZER};

void mt__watch_enter(const mt__call *call, uint64_t seq)
{
    pthread_mutex_lock(&here.lock);
    here.call = *call;
    here.seq = seq;
    here.entered = mt__now();
    here.waiting = 1;
    pthread_mutex_unlock(&here.lock);
}

void mt__watch_leave(void)
{
    pthread_mutex_lock(&here.lock);
    here.waiting = 0;
    here.left = mt__now();
    pthread_mutex_unlock(&here.lock);
}

static void snapshot(beat *b)
{
    double now = mt__now();
    memset(b, 0, sizeof *b);
    pthread_mutex_lock(&here.lock);
    b->waiting = here.waiting;
    b->seq = here.seq;
    b->waited_s = here.waiting ? now - here.entered : 0;
    b->since_last_s = here.left > 0 ? now - here.left : 0;
    mt__call call = here.call;
    pthread_mutex_unlock(&here.lock);
    if (call.kind == MT__CALL_NONE)
        snprintf(b->desc, sizeof b->desc, "(no collective yet)");
    else
        mt__call_describe(&call, b->desc, sizeof b->desc);
}

struct mt__watchdog {
    MPI_Comm comm;
    int rank, size, verbose;
    double warn_s, timeout_s, tick_s;
    atomic_int stop;
    pthread_t thread;
    beat *beats;         /* rank 0: latest beat of every rank */
    uint64_t warned_seq; /* rank 0: last stall warned about (+1) */
};

enum { TAG_BEAT = 1 };

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - floor(s)) * 1e9)};
    nanosleep(&ts, NULL);
}

/* Rank 0: print who has not arrived at the stall some rank has waited in too long. */
static void report_stall(mt__watchdog *w)
{
    uint64_t seq = 0;
    double longest = 0;
    int waiter = -1;
    for (int r = 0; r < w->size; r++)
        if (w->beats[r].waiting && w->beats[r].waited_s > w->warn_s &&
            (waiter < 0 || w->beats[r].seq > seq)) {
            waiter = r;
            seq = w->beats[r].seq;
        }
    if (waiter < 0 || w->warned_seq == seq + 1)
        return;
    w->warned_seq = seq + 1;
    char line[4096];
    size_t n = 0;
    int waiting = 0;
    for (int r = 0; r < w->size; r++)
        if (w->beats[r].waiting && w->beats[r].seq == seq) {
            waiting++;
            if (w->beats[r].waited_s > longest)
                longest = w->beats[r].waited_s;
        }
    n += (size_t)snprintf(line + n, sizeof line - n,
                          "mpitrain: stall: %d of %d ranks have waited up to %.1f s in %s "
                          "(call #%llu); not arrived:",
                          waiting, w->size, longest, w->beats[waiter].desc,
                          (unsigned long long)seq);
    for (int r = 0; r < w->size && n < sizeof line - 256; r++) {
        const beat *b = &w->beats[r];
        if (b->waiting && b->seq == seq)
            continue;
        if (b->waiting)
            n += (size_t)snprintf(line + n, sizeof line - n,
                                  " rank %d (waiting %.1f s in %s, call #%llu);", r,
                                  b->waited_s, b->desc, (unsigned long long)b->seq);
        else
            n += (size_t)snprintf(line + n, sizeof line - n,
                                  " rank %d (last call: %s #%llu, left it %.1f s ago);", r,
                                  b->desc, (unsigned long long)b->seq, b->since_last_s);
    }
    fprintf(stderr, "%s the job aborts after %.0f s (failure.stall_timeout_s)\n", line,
            w->timeout_s);
    fflush(stderr);
}

static void check_own_timeout(mt__watchdog *w, const beat *b)
{
    if (!b->waiting || b->waited_s <= w->timeout_s)
        return;
    if (w->rank == 0)
        report_stall(w);
    fprintf(stderr,
            "mpitrain: rank %d: stalled %.0f s in %s (call #%llu), past "
            "failure.stall_timeout_s = %g s; aborting the job with status %d\n",
            w->rank, b->waited_s, b->desc, (unsigned long long)b->seq, w->timeout_s,
            MT_EXIT_STALLED);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, MT_EXIT_STALLED);
}

/* Rank 0: take every beat that has arrived; returns the number of byes seen. */
static int drain(mt__watchdog *w)
{
    int byes = 0;
    for (;;) {
        int flag = 0;
        MPI_Status st;
        if (MPI_Iprobe(MPI_ANY_SOURCE, TAG_BEAT, w->comm, &flag, &st) != MPI_SUCCESS || !flag)
            return byes;
        beat b;
        MPI_Recv(&b, sizeof b, MPI_BYTE, st.MPI_SOURCE, TAG_BEAT, w->comm, MPI_STATUS_IGNORE);
        if (b.bye)
            byes++;
        else
            w->beats[st.MPI_SOURCE] = b;
    }
}

static void *watch(void *arg)
{
    mt__watchdog *w = arg;
    int byes = 0;
    for (;;) {
        bool stopping = atomic_load(&w->stop);
        beat b;
        snapshot(&b);
        check_own_timeout(w, &b);
        if (w->rank == 0) {
            w->beats[0] = b;
            byes += drain(w);
            if (!stopping)
                report_stall(w);
            else if (byes >= w->size - 1)
                break;
        } else {
            b.bye = stopping;
            MPI_Send(&b, sizeof b, MPI_BYTE, 0, TAG_BEAT, w->comm);
            if (stopping)
                break;
        }
        sleep_s(stopping ? 0.001 : w->tick_s);
    }
    return NULL;
}

int mt__watchdog_start(mt__watchdog **out, mt__comm *c, double warn_s, double timeout_s,
                       int verbose)
{
    int rc = MT_OK, level = 0;
    *out = NULL;
    MPI_Query_thread(&level);
    if (level < MPI_THREAD_MULTIPLE) {
        if (c->rank == 0 && verbose >= 1)
            fprintf(stderr, "mpitrain: MPI was initialised without MPI_THREAD_MULTIPLE; "
                            "stalls will not be detected (call mt_init before MPI_Init, or "
                            "MPI_Init_thread with MPI_THREAD_MULTIPLE)\n");
        return MT_OK;
    }
    mt__watchdog *w = calloc(1, sizeof *w);
    MT__CHECK(w, MT_ENOMEM, fail, "out of memory starting the stall watchdog");
    w->comm = MPI_COMM_NULL;
    MT__MPI(MPI_Comm_dup(c->comm, &w->comm), fail);
    w->rank = c->rank;
    w->size = c->size;
    w->verbose = verbose;
    w->warn_s = warn_s;
    w->timeout_s = timeout_s;
    w->tick_s = fmin(0.5, fmax(0.02, warn_s / 4));
    if (w->rank == 0) {
        w->beats = calloc((size_t)w->size, sizeof *w->beats);
        MT__CHECK(w->beats, MT_ENOMEM, fail, "out of memory starting the stall watchdog");
    }
    MT__CHECK(pthread_create(&w->thread, NULL, watch, w) == 0, MT_ENOMEM, fail,
              "cannot start the stall watchdog thread");
    *out = w;
    return MT_OK;
fail:
    if (w) {
        if (w->comm != MPI_COMM_NULL)
            MPI_Comm_free(&w->comm);
        free(w->beats);
        free(w);
    }
    return rc;
}

void mt__watchdog_stop(mt__watchdog **wp)
{
    if (!wp || !*wp)
        return;
    mt__watchdog *w = *wp;
    atomic_store(&w->stop, 1);
    pthread_join(w->thread, NULL);
    MPI_Comm_free(&w->comm);
    free(w->beats);
    free(w);
    *wp = NULL;
}
