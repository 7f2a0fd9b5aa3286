/*
 * live.c -- the handles the library gave out and has not taken back: contexts and shards
 * (owned by fit, gone when it returns), their batches, and checkpoints.
 *
 * A program that keeps a context or a shard past fit, or calls a checkpoint function on
 * one it freed, would otherwise read freed memory. Public entry points look the pointer
 * up here first (by value: the memory behind it is never touched) and answer MT_EINVAL
 * with a message saying what went wrong. A set of pointers in an open-addressing table,
 * under one lock: a lookup is a hash and a probe or two, cheap next to any collective.
 * Each thread also keeps the last handle it found, with its kind's generation (bumped
 * whenever a handle of that kind is taken back or changes kind): the same context checked
 * again at every report or collective is found without the lock and the lookup, and a
 * shard's batches coming and going never make a context's check take them.
 */
#include "common.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

enum { KINDS = 8 };
static atomic_uint_fast64_t gen[KINDS]; /* per kind: bumped under lock when one is taken back */
static _Thread_local struct {
    const void *p;
    int kind;
    uint64_t gen;
} last;

static void bump(int kind)
{
    if (kind > 0 && kind < KINDS)
        atomic_fetch_add_explicit(&gen[kind], 1, memory_order_release);
}

typedef struct {
    const void *p;
    int kind;
} slot;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static slot *table;
static size_t cap, used; /* cap: a power of two, or 0 */
/* Room promised to mt__live_add_reserved: a collective creator reserves before its
 * agreement (where running out of memory is still every rank's error) and records the
 * handle after its collectives, where a failure would be one rank's alone. */
static size_t reserved;

static size_t home(const void *p)
{
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)x & (cap - 1);
}

static size_t find(const void *p)
{
    size_t i = home(p);
    while (table[i].p && table[i].p != p)
        i = (i + 1) & (cap - 1);
    return i;
}

static int grow(void)
{
    size_t old = cap, n = cap ? cap * 2 : 64;
    slot *was = table, *t = calloc(n, sizeof *t);
    if (!t)
        return -1;
    table = t;
    cap = n;
    for (size_t i = 0; i < old; i++)
        if (was[i].p)
            table[find(was[i].p)] = was[i];
    free(was);
    return 0;
}

int mt__live_reserve(void)
{
    int rc = MT_OK;
    pthread_mutex_lock(&lock);
    if ((used + reserved + 1) * 2 > cap && grow())
        rc = mt__error(MT_ENOMEM, "out of memory recording a handle");
    else
        reserved++;
    pthread_mutex_unlock(&lock);
    return rc;
}

void mt__live_unreserve(void)
{
    pthread_mutex_lock(&lock);
    if (reserved)
        reserved--;
    if (used == 0 && reserved == 0) {
        free(table);
        table = NULL;
        cap = 0;
    }
    pthread_mutex_unlock(&lock);
}

void mt__live_add_reserved(const void *p, int kind)
{
    pthread_mutex_lock(&lock);
    if (reserved)
        reserved--;
    size_t i = find(p); /* the reservation keeps a free slot */
    if (!table[i].p)
        used++;
    else if (table[i].kind != kind)
        bump(table[i].kind);
    table[i] = (slot){p, kind};
    pthread_mutex_unlock(&lock);
}

int mt__live_add(const void *p, int kind)
{
    int rc = MT_OK;
    pthread_mutex_lock(&lock);
    if ((used + reserved + 1) * 2 > cap && grow())
        rc = mt__error(MT_ENOMEM, "out of memory recording a handle");
    else {
        size_t i = find(p);
        if (!table[i].p)
            used++;
        else if (table[i].kind != kind)
            bump(table[i].kind);
        table[i] = (slot){p, kind};
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

void mt__live_remove(const void *p)
{
    pthread_mutex_lock(&lock);
    if (cap && p) {
        size_t i = find(p);
        if (table[i].p) {
            bump(table[i].kind);
            /* backward-shift deletion: later entries of the probe run move up */
            table[i].p = NULL;
            used--;
            for (size_t j = (i + 1) & (cap - 1); table[j].p; j = (j + 1) & (cap - 1)) {
                slot s = table[j];
                table[j].p = NULL;
                table[find(s.p)] = s;
            }
        }
    }
    if (used == 0 && reserved == 0) { /* nothing left: give the memory back (no leak) */
        free(table);
        table = NULL;
        cap = 0;
    }
    pthread_mutex_unlock(&lock);
}

bool mt__live(const void *p, int kind)
{
    if (!p)
        return false;
    bool cached = kind > 0 && kind < KINDS;
    if (cached && p == last.p && kind == last.kind &&
        atomic_load_explicit(&gen[kind], memory_order_acquire) == last.gen)
        return true;
    pthread_mutex_lock(&lock);
    bool ok = false;
    if (cap) {
        size_t i = find(p);
        ok = table[i].p == p && table[i].kind == kind;
    }
    if (ok && cached) {
        last.p = p;
        last.kind = kind;
        last.gen = atomic_load_explicit(&gen[kind], memory_order_relaxed);
    }
    pthread_mutex_unlock(&lock);
    return ok;
}
