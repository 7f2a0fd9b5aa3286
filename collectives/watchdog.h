/*
 * watchdog.h -- stall detection (rule 2 of DESIGN.md).
 *
 * mt__watch_enter/leave bracket the wait inside every agreement; they only store to this
 * rank's state. While a watchdog runs (during fit), a helper thread on every rank sends
 * that state to rank 0 a few times a second on a private communicator; rank 0's thread
 * prints which ranks have not arrived when some rank has waited longer than warn_s, and
 * any rank that has waited longer than timeout_s aborts the job with MT_EXIT_STALLED.
 */
#ifndef MT_WATCHDOG_H
#define MT_WATCHDOG_H

#include "collectives.h"

void mt__watch_enter(const mt__call *call, uint64_t seq);
void mt__watch_leave(void);

typedef struct mt__watchdog mt__watchdog;
/* Collective over c. Needs MPI_THREAD_MULTIPLE; otherwise *out is NULL and a warning is
 * printed by rank 0 (verbose >= 1): stalls are then not detected. */
int mt__watchdog_start(mt__watchdog **out, mt__comm *c, double warn_s, double timeout_s,
                       int verbose);
/* Collective over the same ranks. NULL-safe. */
void mt__watchdog_stop(mt__watchdog **w);

#endif
