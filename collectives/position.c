/*
 * position.c -- where this rank is: waiting in which agreement or in the data movement
 * after it, since when, what it last called. The rank's training thread writes it (agree.c
 * around the wait of every agreement; typed.c, stream.c and fusion.c around the data
 * movement after one) under a sequence lock; the watchdog thread
 * (watchdog.c) reads it to publish. It depends on nothing but the call's description
 * (call.c), so the agreement and the watchdog that calls the agreement do not depend on
 * each other. A thread marked quiet (the checkpoint commit's, on its own communicator
 * while training goes on) records nothing: its waits are not where the rank is.
 */
#include "position.h"

#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

/* A sequence lock: the rank's training thread, the only one that records (the commit
 * thread is quiet), makes ver odd, stores, and makes it even again; the watchdog copies
 * between two equal even readings of ver. Every field is an atomic stored and loaded
 * relaxed, so a copy never races, only retries. A mutex's lock and unlock, 11 ns timed
 * alone, were paid twice an agreement. */
static struct {
    atomic_uint_fast64_t ver;
    atomic_int waiting, kind, ndim;
    atomic_uint_fast64_t seq, n, sig, dims[MT__CALL_MAX_DIMS];
    atomic_int_fast64_t x, y;
    _Atomic double entered, left;
} here;

#define SET(field, v) atomic_store_explicit(&here.field, (v), memory_order_relaxed)
#define GET(field) atomic_load_explicit(&here.field, memory_order_relaxed)

static void write_begin(void)
{
    SET(ver, GET(ver) + 1);
    atomic_thread_fence(memory_order_release);
}

static void write_end(void)
{
    atomic_store_explicit(&here.ver, GET(ver) + 1, memory_order_release);
}

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
    write_begin();
    /* the call without the dims it does not use (a plain call has none) */
    SET(kind, call->kind);
    SET(ndim, call->ndim);
    SET(n, call->n);
    SET(x, call->x);
    SET(y, call->y);
    SET(sig, call->sig);
    for (int d = 0; d < call->ndim && d < MT__CALL_MAX_DIMS; d++)
        SET(dims[d], call->dims[d]);
    SET(seq, seq);
    SET(entered, now);
    SET(waiting, MT__W_AGREE);
    write_end();
}

void mt__watch_data(void)
{
    if (quiet)
        return;
    double now = coarse_now();
    write_begin();
    SET(entered, now);
    SET(waiting, MT__W_DATA);
    write_end();
}

void mt__watch_leave(void)
{
    if (quiet)
        return;
    double now = coarse_now();
    write_begin();
    SET(waiting, MT__W_NONE);
    SET(left, now);
    write_end();
}

void mt__position_get(mt__position *p)
{
    double now = mt__now(), entered, left;
    /* a writer is in its few stores: retry; bounded, so that a misuse recording from two
     * threads at once could give a mixed copy, never a watchdog that spins */
    for (int tries = 0;; tries++) {
        uint64_t v = atomic_load_explicit(&here.ver, memory_order_acquire);
        memset(&p->call, 0, sizeof p->call);
        p->waiting = GET(waiting);
        p->seq = GET(seq);
        p->call.kind = GET(kind);
        p->call.ndim = GET(ndim);
        p->call.n = GET(n);
        p->call.x = GET(x);
        p->call.y = GET(y);
        p->call.sig = GET(sig);
        for (int d = 0; d < p->call.ndim && d < MT__CALL_MAX_DIMS; d++)
            p->call.dims[d] = GET(dims[d]);
        entered = GET(entered);
        left = GET(left);
        atomic_thread_fence(memory_order_acquire);
        if ((!(v & 1) && GET(ver) == v) || tries >= 1000)
            break;
        sched_yield();
    }
    p->waited_s = p->waiting ? now - entered : 0;
    p->since_last_s = left > 0 ? now - left : 0;
}
