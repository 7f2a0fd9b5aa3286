/*
 * position.h -- where this rank is (position.c), for the stall watchdog (watchdog.c).
 *
 * mt__watch_enter/leave bracket the wait inside every agreement, and mt__watch_data/leave
 * the data movement that follows one (a rank stopped after the agreement leaves its peers
 * waiting there); they only store to this rank's state (a sequence lock: position.c).
 */
#ifndef MT_POSITION_H
#define MT_POSITION_H

#include "collectives.h"

enum { MT__W_NONE = 0, MT__W_AGREE = 1, MT__W_DATA = 2 };

/* This rank waits for its peers in agreement number seq, of this call. */
void mt__watch_enter(const mt__call *call, uint64_t seq);
/* mt__watch_data, mt__watch_leave and mt__watch_quiet: collectives.h. */

typedef struct {
    int waiting;          /* MT__W_NONE, MT__W_AGREE or MT__W_DATA */
    uint64_t seq;         /* agreement number (waiting in it, or the last one passed) */
    double waited_s;      /* seconds in the current wait (0: none) */
    double since_last_s;  /* seconds since the last wait ended (0: none yet) */
    mt__call call;        /* the call last entered (kind MT__CALL_NONE: none yet) */
} mt__position;
/* A consistent copy of this rank's position, now. */
void mt__position_get(mt__position *p);

#endif
