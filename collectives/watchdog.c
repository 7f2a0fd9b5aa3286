/*
 * watchdog.c -- this rank's position for stall reports: which agreement it waits in and
 * since when. Written by the rank's own thread only; read by the stall watchdog.
 */
#include "watchdog.h"

#include <stdatomic.h>
#include <string.h>

static struct {
    atomic_int waiting;
    atomic_ullong seq;
    double since;
    char desc[MT__DESC_LEN];
} here;

void mt__watch_enter(const mt__call *call, uint64_t seq)
{
    memcpy(here.desc, call->desc, sizeof here.desc);
    here.since = mt__now();
    atomic_store(&here.seq, seq);
    atomic_store(&here.waiting, 1);
}

void mt__watch_leave(void)
{
    atomic_store(&here.waiting, 0);
}
