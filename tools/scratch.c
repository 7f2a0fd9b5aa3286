/*
 * scratch.c -- a private temporary folder for a diagnostic program's run directory and
 * files, removed when the program ends (see scratch.h).
 */
#include "scratch.h"

#include <mpitrain.h>

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

int scratch_make(const char *base, const char *prog, bool share, char *path, size_t len)
{
    int rc = 0;
    path[0] = '\0';
    if (mt_job_rank() == 0) {
        int n = snprintf(path, len, "%s/%s.XXXXXX", base && *base ? base : "/tmp", prog);
        if (n < 0 || (size_t)n >= len) {
            fprintf(stderr, "%s: the temporary folder's name is too long (%s)\n", prog, base);
            rc = -1;
        } else if (!mkdtemp(path)) {
            fprintf(stderr, "%s: cannot make a temporary folder in %s: %s\n", prog, base,
                    strerror(errno));
            rc = -1;
        }
        if (rc)
            path[0] = '\0';
    }
    if (share) {
        MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
        MPI_Bcast(path, (int)len, MPI_CHAR, 0, MPI_COMM_WORLD);
    }
    return rc;
}

void scratch_agree(bool *keep, bool *new_name)
{
    int v[2] = {*keep, *new_name};
    MPI_Bcast(v, 2, MPI_INT, 0, MPI_COMM_WORLD);
    *keep = v[0] != 0;
    *new_name = v[1] != 0;
}

void scratch_run_name(const char *prog, const char *storage_path, char *name, size_t len)
{
    if (mt_job_rank() == 0) {
        char stamp[32];
        time_t now = time(NULL);
        struct tm tm;
        localtime_r(&now, &tm);
        strftime(stamp, sizeof stamp, "%Y-%m-%d_%H-%M-%S", &tm);
        snprintf(name, len, "%s_%s", prog, stamp);
        for (int k = 2; k < 1000; k++) {
            char dir[4096];
            struct stat st;
            snprintf(dir, sizeof dir, "%s/%s", storage_path ? storage_path : ".", name);
            if (lstat(dir, &st) != 0)
                break;
            snprintf(name, len, "%s_%s-%d", prog, stamp, k);
        }
    }
    MPI_Bcast(name, (int)len, MPI_CHAR, 0, MPI_COMM_WORLD);
    name[len - 1] = '\0';
}

static int remove_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st; (void)flag; (void)f;
    if (remove(p) != 0)
        fprintf(stderr, "cannot remove %s: %s\n", p, strerror(errno));
    return 0;
}

void scratch_remove(const char *path)
{
    if (path && *path && mt_job_rank() == 0)
        nftw(path, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}
