/*
 * watchdog.h -- where each rank is, for stall reports. mt__watch_enter/leave bracket the
 * wait inside every agreement; they only store to this rank's state (no MPI).
 */
#ifndef MT_WATCHDOG_H
#define MT_WATCHDOG_H

#include "collectives.h"

void mt__watch_enter(const mt__call *call, uint64_t seq);
void mt__watch_leave(void);

#endif
