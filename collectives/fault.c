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
 * are set-up and error paths, never per element. Not for production use: a job with the
 * variable set fails on purpose.
 */
#include "collectives.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

bool mt__test_fail(const char *site, int rank)
{
    return mt__test_fail_in(getenv("MT_TEST_FAIL_AT"), site, rank);
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
