/*
 * shm.c -- the names of the library's POSIX shared-memory segments, and the removal of
 * those that killed jobs left behind.
 *
 * Spawn mode's lifeline board, each stall watchdog slot and each fusion node segment or
 * block is a segment named /mpitrain-KIND-PID-START-SPACE-N: its creator's pid, that
 * process's start time (clock ticks after boot, proc.c), its pid namespace (the inode of
 * /proc/self/ns/pid) and a count. The creator removes the name as soon as every process
 * that needs it has it open, and a process that ends the job by itself removes the names
 * it still holds (mt__shm_unlink_own); a name is left only when its processes were killed
 * outright (SIGKILL) in that window, and it then holds its memory until the machine
 * restarts. So each process removes, once, in mt_init, the segments that such jobs left:
 * one readdir of /dev/shm, and a read of /proc/PID/stat for each of the library's names.
 *
 * A segment is removed only when it is this user's and its creator is certainly gone: no
 * process has the pid, or a zombie has it, or the process that has it started at another
 * time (the pid was reused). Kept: a segment whose creator runs, and every one that cannot
 * be judged here: another user's, one from another pid namespace (its pids are not this
 * one's), all of them when /proc cannot be read. Names of the library's older form,
 * /mpitrain-KIND-PID-N, carry no start time: removed only when no process (or a zombie)
 * has the pid, kept whenever a live process has it.
 */
#include "common.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define PREFIX "mpitrain-"
static const char *const kinds[] = {"spawn", "watch", "fusion", NULL};

/* ------------------------------------------------------------ this process's names */

enum { OWN_MAX = 32 }; /* more at once are not recorded: the next job's start reaps them */
static pthread_mutex_t own_lock = PTHREAD_MUTEX_INITIALIZER;
static char own[OWN_MAX][MT__SHM_NAME_LEN];

static void remember(const char *name)
{
    pthread_mutex_lock(&own_lock);
    for (int i = 0; i < OWN_MAX; i++)
        if (!own[i][0]) {
            snprintf(own[i], sizeof own[i], "%s", name);
            break;
        }
    pthread_mutex_unlock(&own_lock);
}

int mt__shm_create(const char *kind, char *name, size_t len)
{
    static atomic_uint counter;
    int pid = (int)getpid();
    snprintf(name, len, "/" PREFIX "%s-%d-%llu-%llu-%u", kind, pid,
             (unsigned long long)mt__process_start(pid), (unsigned long long)mt__pid_space(),
             atomic_fetch_add(&counter, 1));
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    int e = errno;
    if (fd >= 0)
        remember(name);
    errno = e;
    return fd;
}

void mt__shm_unlink(const char *name)
{
    if (!name || !name[0])
        return;
    shm_unlink(name);
    pthread_mutex_lock(&own_lock);
    for (int i = 0; i < OWN_MAX; i++)
        if (!strcmp(own[i], name))
            own[i][0] = '\0';
    pthread_mutex_unlock(&own_lock);
}

void mt__shm_unlink_own(void)
{
    pthread_mutex_lock(&own_lock);
    for (int i = 0; i < OWN_MAX; i++)
        if (own[i][0]) {
            shm_unlink(own[i]);
            own[i][0] = '\0';
        }
    pthread_mutex_unlock(&own_lock);
}

/* ------------------------------------------------------------ the leftovers of others */

/* The creator's pid, start time and pid namespace that a name of the library's carries
 * (start and space 0: the older form, without them); false for any other name. */
static bool parse(const char *name, int *pid, uint64_t *start, uint64_t *space)
{
    size_t pl = strlen(PREFIX);
    if (strncmp(name, PREFIX, pl) != 0)
        return false;
    const char *p = name + pl;
    size_t k = strcspn(p, "-");
    bool known = false;
    for (int i = 0; kinds[i]; i++)
        known |= strlen(kinds[i]) == k && !strncmp(p, kinds[i], k);
    if (!known)
        return false;
    p += k;
    uint64_t v[4];
    int n = 0;
    while (*p == '-' && n < 4) {
        p++;
        if (*p < '0' || *p > '9')
            return false;
        char *end;
        errno = 0;
        v[n++] = strtoull(p, &end, 10);
        if (errno)
            return false;
        p = end;
    }
    if (*p || (n != 2 && n != 4) || v[0] == 0 || v[0] > INT_MAX)
        return false;
    *pid = (int)v[0];
    *start = n == 4 ? v[1] : 0;
    *space = n == 4 ? v[2] : 0;
    return true;
}

/* True, with the reason in why, when the creator (pid started at start, in pid namespace
 * space; 0: not known) is certainly gone. */
static bool creator_gone(int pid, uint64_t start, uint64_t space, uint64_t my_space,
                         char *why, size_t len)
{
    char state;
    uint64_t now;
    if (space && space != my_space)
        return false; /* another pid namespace: this one's pids say nothing of it */
    if (mt__process_stat(pid, &state, &now) != 0) {
        if (errno != ENOENT && errno != ESRCH)
            return false;
        snprintf(why, len, "its creator, pid %d, has exited", pid);
        return true;
    }
    if (state == 'Z' || state == 'X') {
        snprintf(why, len, "its creator, pid %d, has exited (a zombie)", pid);
        return true;
    }
    if (!start || !space || now == start)
        return false; /* running, or a process has the pid and the name cannot tell which */
    snprintf(why, len, "its creator, pid %d started at tick %llu, has exited (pid %d is now "
             "a process started at tick %llu)", pid, (unsigned long long)start, pid,
             (unsigned long long)now);
    return true;
}

int mt__shm_reap(const char *dir, bool remove, mt_stale_fn fn, void *arg)
{
    uint64_t my_space = mt__pid_space();
    if (!mt__process_start((int)getpid())) /* no /proc to judge by: keep everything */
        return 0;
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT ? 0 : -1;
    uid_t me = geteuid();
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        int pid;
        uint64_t start, space;
        struct stat st;
        char why[192];
        if (!parse(de->d_name, &pid, &start, &space) ||
            fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
            !S_ISREG(st.st_mode) || st.st_uid != me ||
            !creator_gone(pid, start, space, my_space, why, sizeof why))
            continue;
        if (remove && unlinkat(dirfd(d), de->d_name, 0) != 0)
            continue; /* removed by another job's start meanwhile, or not this user's to */
        n++;
        if (fn) {
            char path[PATH_MAX];
            snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
            fn(path, why, arg);
        }
    }
    closedir(d);
    return n;
}

void mt__shm_reap_once(void)
{
    static atomic_flag done = ATOMIC_FLAG_INIT;
    if (!atomic_flag_test_and_set(&done))
        mt__shm_reap(MT__SHM_DIR, true, NULL, NULL);
}

int mt_stale_shm(bool remove, mt_stale_fn fn, void *arg)
{
    int n = mt__shm_reap(MT__SHM_DIR, remove, fn, arg);
    if (n < 0)
        return mt__error(MT_EIO, "cannot read %s: %s", MT__SHM_DIR, strerror(errno));
    return n;
}
