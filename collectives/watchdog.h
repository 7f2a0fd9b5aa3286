/*
 * watchdog.h -- stall and lost-rank detection (rule 2 of docs/design.md).
 *
 * Every agreement and the data movement after it record where this rank waits
 * (position.h). While a watchdog runs (during fit), a helper thread on every rank publishes that state
 * to every other rank a few times a second (shared memory within a host, MPI to other
 * hosts), never blocking on a peer. Every decision is local, so a stopped, hung or
 * unreachable rank (rank 0 included) cannot keep the others from acting:
 *  - a rank that has waited longer than warn_s prints which ranks have not arrived (with
 *    their hosts), unless a lower rank that is still heard from waits in the same call;
 *  - a rank that has waited longer than timeout_s ends the job with MT_EXIT_STALLED, and
 *    ends itself (_exit) if MPI_Abort does not return within a grace period;
 *  - a rank whose peer on the same host has died ends the job with MT_EXIT_LOST a couple
 *    of seconds later, unless the launcher did (a spawned job has no launcher that would
 *    notice; there the lifeline below watches the ranks outside fit too).
 */
#ifndef MT_WATCHDOG_H
#define MT_WATCHDOG_H

#include "position.h"

typedef struct mt__watchdog mt__watchdog;
/* Collective over c; every rank gets the same answer (a failure on one rank is MT_EPEER on
 * the others, and no rank runs a watchdog then). Needs MPI_THREAD_MULTIPLE; otherwise
 * *out is NULL on every rank (the caller may warn): stalls are then not detected. */
int mt__watchdog_start(mt__watchdog **out, mt__comm *c, double warn_s, double timeout_s);
/* Collective over the same ranks (after an agreement every rank passed). NULL-safe. */
void mt__watchdog_stop(mt__watchdog **w);

/* The job cannot go on: print text (never blocking on a full pipe), abort every rank of
 * comm with code, and _exit(code) if MPI_Abort has not ended this process within
 * grace_s seconds (an unreachable launcher can keep it from returning); before the
 * abort, when this process's parent is Open MPI's launcher or daemon, leave a process
 * behind that sends it SIGTERM (then SIGKILL) if it still runs grace_s + 5 s later
 * (watchdog.c says why); with comm MPI_COMM_NULL, _exit(code) at once. Never returns. */
_Noreturn void mt__end_job(MPI_Comm comm, int code, const char *text, double grace_s);

/* Writes text to stderr as mt__end_job does (never blocking for long on a full pipe). */
void mt__end_job_say(const char *text);

/* Which process a pid is (mt__process_start, mt__process_gone, mt__process_stopped):
 * common/proc.c. */

/*
 * Spawn mode's lifeline (lifeline.c): every rank of a spawned job watches every other
 * rank's process from before the spawn to the end of its mt_finalize, and ends the job
 * with MT_EXIT_LOST when one exits without having finalised (MT_EXIT_STALLED when the
 * spawned ranks do not all start within timeout_s). All local; no MPI call.
 */
/* The parent, before MPI_Comm_spawn: a board for n ranks; env receives "NAME=VALUE" to
 * put in the children's environment. */
int mt__lifeline_create(int n, double timeout_s, char *env, size_t env_len);
/* A spawned child, before MPI_Init: joins the board named in its environment, if any. */
int mt__lifeline_join(void);
/* The parent: its MPI_Comm_spawn returned (every child is through MPI_Init). */
void mt__lifeline_spawned(void);
/* After the merge: this process is rank `rank` of the job (and every child has joined). */
void mt__lifeline_merged(int rank);
/* The stall timeout (failure.stall_timeout_s) of this rank's fit (0, before any fit: the
 * waits above have no bound). */
void mt__lifeline_timeout(double timeout_s);
/* mt_finalize begins: once every rank has, a wait longer than the timeout ends the job. */
void mt__lifeline_finalizing(void);
/* One look now (ends the job if a rank has died); a no-op outside spawn mode. */
void mt__lifeline_check(void);
/* The last step of mt_finalize: this rank leaves normally; stops watching. */
void mt__lifeline_leave(void);
/* The spawn has failed: a spawned rank that died ends the job with MT_EXIT_LOST, as when
 * the watching thread sees it (Open MPI fails MPI_Comm_spawn when a child dies before it
 * joins). Looks at the board for up to s seconds (this process ends there if a rank has
 * died); returns if none has. */
void mt__lifeline_settle(double s);

#endif
