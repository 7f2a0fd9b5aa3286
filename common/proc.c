/*
 * proc.c -- which process a pid is, from /proc: its state and its start time (field 22 of
 * /proc/PID/stat, clock ticks after boot).
 *
 * A pid alone names another process once the first has exited (pids are reused); a pid
 * and a start time together name one process for the life of the machine. The stall
 * watchdog and spawn mode's lifeline watch their peers with this; shm.c judges the
 * creators of leftover shared memory with it.
 */
#include "common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int mt__process_stat(int pid, char *state, uint64_t *start)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* the command name may hold spaces and parentheses */
    if (!p || sscanf(p + 1, " %c", state) != 1) {
        errno = EINVAL;
        return -1;
    }
    /* field 22 (starttime) is the 20th after the name: state is the first */
    p += 2;
    for (int field = 3; field < 22 && p; field++) {
        p = strchr(p, ' ');
        if (p)
            p++;
    }
    *start = p ? strtoull(p, NULL, 10) : 0;
    return 0;
}

void mt__process_name(int pid, char *name, size_t len)
{
    char path[64], comm[32] = "";
    snprintf(path, sizeof path, "/proc/%d/comm", pid);
    FILE *f = fopen(path, "r");
    if (f) {
        if (!fgets(comm, sizeof comm, f))
            comm[0] = '\0';
        fclose(f);
    }
    comm[strcspn(comm, "\n")] = '\0';
    snprintf(name, len, "%s", comm);
}

uint64_t mt__process_start(int pid)
{
    char state;
    uint64_t start;
    return mt__process_stat(pid, &state, &start) == 0 ? start : 0;
}

bool mt__process_gone(int pid, uint64_t start)
{
    char state;
    uint64_t now;
    if (mt__process_stat(pid, &state, &now) != 0)
        return errno == ENOENT || errno == ESRCH;
    return state == 'Z' || state == 'X' || now != start;
}

bool mt__process_stopped(int pid, uint64_t start)
{
    char state;
    uint64_t now;
    return mt__process_stat(pid, &state, &now) == 0 && now == start &&
           (state == 'T' || state == 't');
}

uint64_t mt__pid_space(void)
{
    struct stat st;
    return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}
