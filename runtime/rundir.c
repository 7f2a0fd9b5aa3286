/*
 * rundir.c -- the run directory's owner: run.lock, clearing the folder for --overwrite,
 * and removing what a crash left behind. The folder is written by rank 0 only:
 *   run.json      state (runstate.c)
 *   params.json   the effective configuration (trainer.c)
 *   result.json   one JSON line per report (rows.c)
 *   progress.csv  the same rows as CSV (progress.c)
 *   error.txt     on failure (removed when a later attempt ends without one)
 *   run.lock      the owner: one job at a time (below)
 *
 * Ownership: rank 0 takes an exclusive flock(2) on run.lock before it reads or writes
 * anything else in the folder and holds it until fit ends; the lock file names the holder
 * (host, pid, Slurm job, start time) so a second job with the same storage_path and name
 * is refused with that name instead of sharing the folder. The kernel drops the lock
 * when the holder dies however it dies (SIGKILL included), so a crashed job never blocks
 * its rerun. Across nodes this works only where the file system gives flock(2) cluster-
 * wide meaning: local disks, NFSv4 (and NFSv3 with a lock manager), Lustre mounted with
 * -o flock (not -o localflock, which locks per node only), GPFS. Where locks are not
 * supported at all (ENOLCK, EOPNOTSUPP) the run goes on with a warning, unprotected.
 */
#include "runtime.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

/* The holder's line: pid, host, Slurm job when there is one, start time. */
static void holder_line(char *b, size_t n)
{
    char host[256] = "?", when[64] = "?", job[96] = "";
    gethostname(host, sizeof host - 1);
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm))
        strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm);
    const char *sj = getenv("SLURM_JOB_ID"), *st = getenv("SLURM_STEP_ID");
    if (sj && *sj)
        snprintf(job, sizeof job, ", Slurm job %s%s%s", sj, st && *st ? " step " : "",
                 st && *st ? st : "");
    snprintf(b, n, "pid %d on host %s%s, started %s\n", (int)getpid(), host, job, when);
}

int mt__run_lock(const char *dir, int *fd_out)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/run.lock", dir);
    *fd_out = -1;
    /* the lock file is the library's own (an earlier job's) or created new here: never a
     * link followed, never another file's second name truncated */
    int fd = mt__run_open(path, O_RDWR, 0);
    if (fd == MT_ENOTFOUND && (fd = mt__run_open(path, O_RDWR | O_CREAT, 0644)) < 0 &&
        mt__run_check(path) == MT_OK) /* another job created it between the two */
        fd = mt__run_open(path, O_RDWR, 0);
    if (fd < 0)
        return fd;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        if (e == ENOLCK || e == EOPNOTSUPP || e == ENOSYS) {
            fprintf(stderr, "mpitrain: warning: cannot lock %s: %s; this file system does not "
                    "support flock, so a second job with the same name would not be refused\n",
                    path, strerror(e));
            close(fd);
            return MT_OK;
        }
        char holder[512] = "";
        ssize_t n = e == EWOULDBLOCK ? pread(fd, holder, sizeof holder - 1, 0) : -1;
        close(fd);
        if (e != EWOULDBLOCK)
            return mt__error(MT_EIO, "cannot lock %s: %s", path, strerror(e));
        holder[n > 0 ? n : 0] = '\0';
        holder[strcspn(holder, "\n")] = '\0';
        return mt__error(MT_EINVAL, "%s is in use by another job (%s): a run directory has one "
                         "owner at a time; wait for that job to end, or choose another --name",
                         dir, holder[0] ? holder : "it has not written its name yet");
    }
    char line[512];
    holder_line(line, sizeof line);
    size_t len = strlen(line);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, line, len, 0) != (ssize_t)len) {
        int e = errno;
        close(fd);
        return mt__error(MT_EIO, "cannot write %s: %s", path, strerror(e));
    }
    *fd_out = fd;
    return MT_OK;
}

void mt__run_unlock(int *fd)
{
    if (*fd >= 0)
        close(*fd); /* the kernel drops the flock with the last descriptor */
    *fd = -1;
}

/* Everything in dir but run.lock (overwrite: the folder stays locked while it empties). */
int mt__run_clear(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return mt__error(MT_EIO, "cannot read %s: %s", dir, strerror(errno));
    struct dirent *e;
    int rc = MT_OK;
    while ((e = readdir(d)) && !rc) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || !strcmp(e->d_name, "run.lock"))
            continue;
        char sub[4096];
        snprintf(sub, sizeof sub, "%s/%s", dir, e->d_name);
        rc = mt__rmtree(sub);
    }
    closedir(d);
    return rc;
}

/* Remove what a crash left behind: .checkpoint_*.tmp folders, .drop folders half removed,
 * checkpoint folders numbered at or past next_checkpoint_index (published, but run.json
 * never recorded them), and the temporary files of run.json, params.json, error.txt, result.json and
 * progress.csv (.NAME.tmp). Only the owner calls this (under run.lock). */
void mt__run_remove_leftovers(const mt__rundir *r)
{
    DIR *d = opendir(r->dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        size_t n = strlen(e->d_name);
        bool tmp = n > 4 && !strcmp(e->d_name + n - 4, ".tmp");
        bool drop = n > 5 && !strcmp(e->d_name + n - 5, ".drop");
        bool ck = !strncmp(e->d_name, ".checkpoint_", 12);
        long long index = -1;
        char rest = 0;
        /* a folder renamed into place whose run.json update then failed: never recorded,
         * and in the way of the next commit of that number */
        if (sscanf(e->d_name, "checkpoint_%6lld%c", &index, &rest) == 1 && index >= r->next_index) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", r->dir, e->d_name);
            printf("mpitrain: removing %s, a checkpoint run.json never recorded (its commit "
                   "did not finish)\n", path);
            if (mt__rmtree(path))
                fprintf(stderr, "mpitrain: warning: %s\n", mt_last_error());
            continue;
        }
        if (e->d_name[0] != '.' || !(tmp || (ck && drop)))
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", r->dir, e->d_name);
        printf("mpitrain: removing %s, %s\n", path,
               !ck ? "a temporary file a crash left behind"
               : tmp ? "a checkpoint a crash left unfinished" : "a checkpoint retention dropped");
        if (mt__rmtree(path))
            fprintf(stderr, "mpitrain: warning: %s\n", mt_last_error());
    }
    if (d)
        closedir(d);
}
