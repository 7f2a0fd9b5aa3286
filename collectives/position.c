/*
 * position.c -- where this rank is: waiting in which agreement or in the data movement
 * after it, since when, what it last called. The rank's own threads write it (agree.c
 * around the wait of every agreement; typed.c, stream.c and fusion.c around the data
 * movement after one) under a mutex held only for the copy; the watchdog thread
 * (watchdog.c) reads it to publish. It depends on nothing but the call's description
 * (call.c), so the agreement and the watchdog that calls the agreement do not depend on
 * each other. A thread marked quiet (the checkpoint commit's, on its own communicator
 * while training goes on) records nothing: its waits are not where the rank is.
 */
#include "position.h"

#include <pthread.h>
#include <time.h>

static struct {
    pthread_mutex_t lock;
    int waiting;
    uint64_t seq;
    double entered, left;
    mt__call call;
} here = {.lock = PTHREAD_MUTEX_INITIALIZER};

static _Thread_local bool quiet; /* this thread's waits are not this rank's position */

/* The times of a position: the coarse monotonic clock (its resolution is the kernel's
 * tick, a few ms, far below any stall timeout or warning), read in a few ns where
 * CLOCK_MONOTONIC takes tens of ns. Every agreement reads it twice, so a small
 * mt_allreduce is the one place where that shows (0.04 us of 0.27 at 2 ranks). Never
 * later than mt__now(): a wait is never shown shorter than it was. */
static double coarse_now(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC_COARSE, &ts) != 0)
        return mt__now();
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void mt__watch_quiet(void)
{
    quiet = true;
}

void mt__watch_enter(const mt__call *call, uint64_t seq)
{
    if (quiet)
        return;
    double now = coarse_now();
    pthread_mutex_lock(&here.lock);
    /* the call without the dims it does not use (a plain call has none) */
    here.call.kind = call->kind;
    here.call.ndim = call->ndim;
    here.call.n = call->n;
    here.call.x = call->x;
    here.call.y = call->y;
    here.call.sig = call->sig;
    for (int d = 0; d < call->ndim && d < MT__CALL_MAX_DIMS; d++)
        here.call.dims[d] = call->dims[d];
    here.seq = seq;
    here.entered = now;
    here.waiting = MT__W_AGREE;
    pthread_mutex_unlock(&here.lock);
}

void mt__watch_data(void)
{
    if (quiet)
        return;
    double now = coarse_now();
    pthread_mutex_lock(&here.lock);
    here.entered = now;
    here.waiting = MT__W_DATA;
    pthread_mutex_unlock(&here.lock);
}

void mt__watch_leave(void)
{
    if (quiet)
        return;
    double now = coarse_now();
    pthread_mutex_lock(&here.lock);
    here.waiting = MT__W_NONE;
    here.left = now;
    pthread_mutex_unlock(&here.lock);
}

void mt__position_get(mt__position *p)
{
    double now = mt__now();
    pthread_mutex_lock(&here.lock);
    p->waiting = here.waiting;
    p->seq = here.seq;
    p->waited_s = here.waiting ? now - here.entered : 0;
    p->since_last_s = here.left > 0 ? now - here.left : 0;
    p->call = here.call;
    pthread_mutex_unlock(&here.lock);
}
