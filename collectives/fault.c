/*
 * fault.c -- test-only fault injection at named sites, for the failures that an allocator
 * wrapper cannot produce on one rank alone (an MPI error, a read error part-way through)
 * or that must happen before a given collective.
 *
 *   MT_TEST_FAIL_AT=site:rank[,site:rank...]     rank "*" = every rank
 *
 * Sites named die-*, stop-* and slow-* kill, stop or delay the rank (a slow-* site sleeps
 * MT_TEST_PAUSE_S seconds, default 5) instead of failing a call; *-mpi sites make an MPI
 * call that succeeded return an error on that rank alone.
 *
 * Compiled always (the tests run the installed code paths), read only at the sites, which
 * are set-up and error paths and rank 0's row of each report, never per element. Not for
 * production use: a job with the variable set fails on purpose.
 *
 * A process whose environment has no MT_TEST_FAIL_AT when a site is first reached never
 * reads it again (mt__test_sites): a getenv in an environment as large as mpirun's cost
 * about 150 ns, measured, where a whole report is now 0.5 us. The test programs, which
 * set it between calls, arm the sites for good at their start (mt__test_arm).
 */
#include "collectives.h"

#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* 0: not known yet; 1: read at every site; -1: never set, never read again */
static atomic_int armed;

void mt__test_arm(void)
{
    atomic_store(&armed, 1);
}

const char *mt__test_sites(void)
{
    int a = atomic_load_explicit(&armed, memory_order_relaxed);
    if (a == 0) {
        const char *v = getenv("MT_TEST_FAIL_AT");
        int none = 0; /* a test's mt__test_arm in between wins */
        atomic_compare_exchange_strong(&armed, &none, v ? 1 : -1);
        return v;
    }
    return a > 0 ? getenv("MT_TEST_FAIL_AT") : NULL;
}

bool mt__test_fail(const char *site, int rank)
{
    return mt__test_fail_in(mt__test_sites(), site, rank);
}

bool mt__test_fail_in(const char *spec, const char *site, int rank)
{
    if (!spec || !*spec)
        return false;
    size_t len = strlen(site);
    for (const char *p = spec; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL) {
        if (strncmp(p, site, len) != 0 || p[len] != ':')
            continue;
        const char *r = p + len + 1;
        if (*r == '*')
            return true;
        char *end = NULL;
        long v = strtol(r, &end, 10);
        if (end != r && (*end == ',' || *end == '\0') && v == rank)
            return true;
    }
    return false;
}

void mt__test_die(const char *site, int rank)
{
    if (mt__test_fail(site, rank))
        raise(SIGKILL);
}

void mt__test_stop(const char *site, int rank)
{
    if (mt__test_fail(site, rank))
        raise(SIGSTOP);
}

void mt__test_pause(const char *site, int rank)
{
    if (!mt__test_fail(site, rank))
        return;
    const char *v = getenv("MT_TEST_PAUSE_S");
    double s = v ? strtod(v, NULL) : 5;
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

int mt__test_mpi(const char *site, int rank, int e)
{
    return e == MPI_SUCCESS && mt__test_fail(site, rank) ? MPI_ERR_OTHER : e;
}
