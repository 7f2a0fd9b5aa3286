/*
 * lifeline.c -- spawn mode: every rank watches every other rank's process for the whole
 * life of the job, from before the spawn until its own mt_finalize has ended.
 *
 * A job started by a launcher is ended by the launcher when one of its ranks dies. A job
 * made by MPI_Comm_spawn from a singleton has none that would: a rank that dies while the
 * others wait for it in a collective (the spawn and the merge, a fit's set-up or its end,
 * MPI_Comm_disconnect in mt_finalize) leaves them waiting forever, and the stall watchdog
 * runs only during fit. So the parent makes a small shared-memory board with one entry per
 * rank before the spawn and passes its name to the children in their environment; each
 * child claims an entry with its pid and start time before MPI_Init, and adds its rank
 * once merged. A thread on every rank (no MPI call at all) looks at the entries through
 * /proc a few times a second: a rank whose process has exited without marking its entry
 * "left" (the last thing mt_finalize does) ends the job with MT_EXIT_LOST; on the parent,
 * children that have not all joined within the stall timeout, and on any rank, a wait in
 * mt_finalize longer than that once every rank is in mt_finalize, end it with
 * MT_EXIT_STALLED. (A rank stopped before it reaches mt_finalize cannot be told from one
 * still at work, so that wait has no bound.) The job ends with _exit, not MPI_Abort: the
 * death may come in the middle of MPI_Finalize, every survivor ends itself the same way
 * (a stopped one is killed by the rank that ends the job), and the daemon Open MPI
 * started for the parent goes with the parent.
 *
 * The board's name is removed once the merge is done (every child has it open by then),
 * or by the rank that ends the job before that; a job killed outright before the merge
 * leaves it, and the next job's start removes it (common/shm.c).
 */
#include "watchdog.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum { FREE = 0, CLAIMED, ALIVE, FINALIZING, LEFT };

typedef struct {
    atomic_int state;    /* FREE, CLAIMED (being filled in), ALIVE, FINALIZING, LEFT */
    atomic_int rank;     /* job rank once merged, -1 before */
    int32_t pid;
    int32_t pad;
    uint64_t start;      /* start time in clock ticks after boot */
} entry;

static struct {
    entry *board;
    size_t bytes;
    int n, me;
    char name[MT__SHM_NAME_LEN]; /* written before the thread starts */
    atomic_int named;    /* name not removed yet */
    char host[64];
    struct sigaction old_pipe; /* SIGPIPE's disposition before take() */
    bool pipe_ignored;
    _Atomic double timeout_s;
    double began;
    _Atomic double finalizing; /* when this rank entered mt_finalize (0: not yet) */
    _Atomic double all_in;     /* when every rank was first seen in mt_finalize (0: not yet) */
    atomic_int spawned;  /* the parent's MPI_Comm_spawn has returned */
    atomic_int merged;   /* every entry is claimed for good (the merge is done) */
    atomic_int stop;
    pthread_t thread;
    bool threaded;
} life;

#define TICK_S 0.1

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - floor(s)) * 1e9)};
    nanosleep(&ts, NULL);
}

/* Ends the job from this rank: a rank that is stopped cannot end itself, so it is killed
 * (the others, running, end themselves as this one does; killing them could take the
 * status of the job from the parent). */
/* Kills pid if it is Open MPI's daemon (orted) and, with parent > 0, a child of parent. */
static void kill_daemon(int pid, int parent)
{
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *close_paren = strrchr(buf, ')');
    int ppid = 0;
    if (close_paren && sscanf(close_paren + 1, " %*c %d", &ppid) == 1 &&
        (parent <= 0 || ppid == parent) && strstr(buf, "(orted)"))
        kill(pid, SIGKILL);
}

/* The daemon Open MPI started for the parent (the parent's child, the spawned ranks'
 * parent) goes with the parent. It should leave by itself, but Open MPI 4.1's sometimes
 * hangs in PMIx_server_finalize once a rank was killed; the spawned ranks see the parent
 * gone and end themselves. */
static void end_daemon(void)
{
    if (life.me != 0) {
        kill_daemon((int)getppid(), 0);
        return;
    }
    DIR *d = opendir("/proc");
    struct dirent *de;
    while (d && (de = readdir(d)))
        if (atoi(de->d_name) > 0)
            kill_daemon(atoi(de->d_name), (int)getpid());
    if (d)
        closedir(d);
}

/* Ends the job from this rank: a rank that is stopped cannot end itself, so it is killed
 * (the others, running, end themselves as this one does; killing them could take the
 * status of the job from the parent). parent_gone: rank 0 has died. */
_Noreturn static void end(int code, const char *line, bool parent_gone)
{
    static atomic_int ending;
    if (atomic_exchange(&ending, 1)) /* the other thread is ending the job already */
        for (;;)
            pause();
    mt__end_job_say(line);
    for (int i = 0; i < life.n; i++) {
        const entry *e = &life.board[i];
        int st = atomic_load_explicit(&e->state, memory_order_acquire);
        if (i != life.me && (st == ALIVE || st == FINALIZING) &&
            mt__process_stopped(e->pid, e->start)) {
            kill(e->pid, SIGKILL);
            parent_gone |= i == 0;
        }
    }
    if (life.me == 0 || parent_gone) {
        sleep_s(0.3); /* the daemon forwards the spawned ranks' output: this line first */
        end_daemon();
    }
    mt__end_job(MPI_COMM_NULL, code, NULL, 1.0);
}

/* Removes the board's name (once the merge is done, or when the job ends before it). */
static void forget_name(void)
{
    if (atomic_exchange(&life.named, 0))
        mt__shm_unlink(life.name);
}

_Noreturn static void lost(const entry *e, int peer_rank)
{
    char line[512], who[96];
    if (peer_rank >= 0)
        snprintf(who, sizeof who, "rank %d", peer_rank);
    else
        snprintf(who, sizeof who, "a spawned rank");
    int me = atomic_load(&life.board[life.me].rank);
    snprintf(line, sizeof line,
             "mpitrain: %s %d (host %s): %s (host %s, pid %d) has died; the job cannot go "
             "on without it: ending it with status %d (rerun it to resume from the latest "
             "checkpoint)\n", me >= 0 ? "rank" : "spawned process", me >= 0 ? me : (int)getpid(),
             life.host, who, life.host, (int)e->pid, MT_EXIT_LOST);
    forget_name();
    end(MT_EXIT_LOST, line, e == &life.board[0]);
}

/* One look at the board: ends the job when a rank died, (on the parent) when the spawned
 * ranks have not all joined the job within the timeout, or when this rank has waited in
 * mt_finalize longer than that with every rank there. */
static void check(void)
{
    int absent = 0, started = 0, finalizing = 0;
    for (int i = 0; i < life.n; i++) {
        const entry *e = &life.board[i];
        int st = atomic_load_explicit(&e->state, memory_order_acquire);
        absent += i != life.me && (st == FREE || atomic_load(&e->rank) < 0);
        started += i != life.me && st != FREE;
        finalizing += st == FINALIZING || st == LEFT;
        if (i == life.me || (st != ALIVE && st != FINALIZING) ||
            !mt__process_gone(e->pid, e->start))
            continue;
        /* a rank marks its entry before it exits: read it again after the process */
        if (atomic_load_explicit(&e->state, memory_order_acquire) != LEFT)
            lost(e, atomic_load(&e->rank));
    }
    double now = mt__now(), timeout = atomic_load(&life.timeout_s);
    if (absent && life.me == 0 && !atomic_load(&life.merged) && timeout > 0 &&
        now - life.began > timeout) {
        /* how far the spawn got: the children in mt_init (each claims its entry there,
         * before MPI_Init), MPI_Comm_spawn returned (every child is through MPI_Init), or
         * only the merge is left */
        char line[384];
        snprintf(line, sizeof line,
                 "mpitrain: rank 0 (host %s): %d of the %d spawned ranks did not join the job "
                 "within %g s (failure.stall_timeout_s; %d of them had reached mt_init, and "
                 "MPI_Comm_spawn %s); ending it with status %d\n",
                 life.host, absent, life.n - 1, timeout, started,
                 atomic_load(&life.spawned) ? "had returned: the merge had not ended"
                                            : "had not returned",
                 MT_EXIT_STALLED);
        forget_name();
        end(MT_EXIT_STALLED, line, false);
    }
    /* every rank is in mt_finalize (none is still at work): a wait there past the stall
     * timeout, counted from when the last rank arrived (not from this rank's own arrival:
     * rank 0 may work alone long after fit while the others wait), is a stall. Rank 0
     * acts first, so that the job's status is its 76; the others a little later, in case
     * rank 0 is the one that stopped */
    double since = 0, none = 0, after = timeout + (life.me == 0 ? 0 : 2.0);
    if (finalizing == life.n && atomic_load(&life.finalizing) > 0) {
        atomic_compare_exchange_strong(&life.all_in, &none, now);
        since = atomic_load(&life.all_in);
    }
    if (since > 0 && timeout > 0 && now - since > after) {
        char line[256];
        snprintf(line, sizeof line,
                 "mpitrain: rank %d (host %s): mt_finalize has waited %g s for the other "
                 "ranks, which are all in it too (failure.stall_timeout_s); ending the job "
                 "with status %d\n", atomic_load(&life.board[life.me].rank), life.host,
                 timeout, MT_EXIT_STALLED);
        end(MT_EXIT_STALLED, line, false);
    }
}

void mt__lifeline_settle(double s)
{
    if (!life.board)
        return;
    for (double t0 = mt__now(); mt__now() - t0 < s;) {
        check();
        sleep_s(TICK_S);
    }
}

static void *watch(void *arg)
{
    (void)arg;
    while (!atomic_load(&life.stop)) {
        check();
        sleep_s(TICK_S);
    }
    return NULL;
}

static int map_board(int fd, size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        return -1;
    life.board = p;
    life.bytes = bytes;
    life.n = (int)(bytes / sizeof(entry));
    return 0;
}

/* Fills entry i with this process and starts the thread (the state of an earlier
 * spawned job of this process forgotten). */
static int take(int i, int rank)
{
    entry *e = &life.board[i];
    atomic_store(&life.stop, 0);
    atomic_store(&life.spawned, 0);
    atomic_store(&life.merged, 0);
    atomic_store(&life.finalizing, 0);
    atomic_store(&life.all_in, 0);
    e->pid = (int32_t)getpid();
    e->start = mt__process_start(e->pid);
    atomic_store(&e->rank, rank);
    atomic_store_explicit(&e->state, ALIVE, memory_order_release);
    life.me = i;
    if (gethostname(life.host, sizeof life.host - 1) != 0)
        snprintf(life.host, sizeof life.host, "?");
    life.began = mt__now();
    /* Open MPI writes to a dead rank's TCP socket with SIGPIPE's default action still in
     * place, which ends this rank (status 141) before the thread can name the death and
     * end the job with MT_EXIT_LOST (tests/spawn.sh saw it once): ignored while the board
     * watches, unless the program set its own disposition */
    struct sigaction ign = {.sa_handler = SIG_IGN};
    sigemptyset(&ign.sa_mask);
    if (sigaction(SIGPIPE, NULL, &life.old_pipe) == 0 && life.old_pipe.sa_handler == SIG_DFL &&
        !(life.old_pipe.sa_flags & SA_SIGINFO))
        life.pipe_ignored = sigaction(SIGPIPE, &ign, NULL) == 0;
    if (pthread_create(&life.thread, NULL, watch, NULL) != 0)
        return mt__error(MT_ENOMEM, "spawn mode: cannot start the thread that watches the "
                                    "job's ranks");
    life.threaded = true;
    return MT_OK;
}

static void release(void)
{
    if (life.pipe_ignored)
        sigaction(SIGPIPE, &life.old_pipe, NULL);
    life.pipe_ignored = false;
    forget_name();
    if (life.board)
        munmap(life.board, life.bytes);
    life.board = NULL;
}

int mt__lifeline_create(int n, double timeout_s, char *env, size_t env_len)
{
    if (life.board)
        return mt__error(MT_EINVAL, "spawn mode: a spawned job exists already");
    size_t bytes = (size_t)n * sizeof(entry);
    int fd = mt__shm_create("spawn", life.name, sizeof life.name);
    int e = errno;
    atomic_store(&life.named, fd >= 0);
    if (fd >= 0 && (ftruncate(fd, (off_t)bytes) != 0 || map_board(fd, bytes) != 0))
        e = errno;
    if (fd >= 0)
        close(fd);
    if (!life.board) {
        forget_name();
        return mt__error(MT_EIO, "spawn mode: cannot create the shared memory %s that "
                         "watches the spawned ranks: %s", life.name, strerror(e));
    }
    atomic_store(&life.timeout_s, timeout_s);
    snprintf(env, env_len, "MT_SPAWN_BOARD=%s", life.name);
    int rc = take(0, 0);
    if (rc)
        release();
    return rc;
}

int mt__lifeline_join(void)
{
    const char *name = getenv("MT_SPAWN_BOARD");
    if (!name || !*name || life.board)
        return MT_OK;
    int fd = shm_open(name, O_RDWR, 0);
    struct stat st;
    int e = errno;
    if (fd >= 0 && (fstat(fd, &st) != 0 || map_board(fd, (size_t)st.st_size) != 0))
        e = errno;
    if (fd >= 0)
        close(fd);
    if (!life.board)
        return mt__error(MT_EIO, "spawn mode: cannot open the shared memory %s that watches "
                         "the job's ranks: %s", name, strerror(e));
    snprintf(life.name, sizeof life.name, "%s", name);
    atomic_store(&life.named, 1);
    unsetenv("MT_SPAWN_BOARD"); /* not for the programs this one starts */
    for (int i = 1; i < life.n; i++) {
        int want = FREE;
        if (atomic_compare_exchange_strong(&life.board[i].state, &want, CLAIMED))
            return take(i, -1);
    }
    release();
    return mt__error(MT_EINVAL, "spawn mode: more spawned ranks than the job has room for");
}

void mt__lifeline_spawned(void)
{
    atomic_store(&life.spawned, 1);
}

void mt__lifeline_merged(int rank)
{
    if (!life.board)
        return;
    atomic_store(&life.board[life.me].rank, rank);
    atomic_store(&life.merged, 1);
    forget_name(); /* every child is in the merge: every one has the board open */
}

void mt__lifeline_timeout(double timeout_s)
{
    atomic_store(&life.timeout_s, timeout_s);
}

void mt__lifeline_finalizing(void)
{
    if (!life.board)
        return;
    atomic_store(&life.finalizing, mt__now());
    atomic_store_explicit(&life.board[life.me].state, FINALIZING, memory_order_release);
}

void mt__lifeline_check(void)
{
    if (life.board)
        check();
}

void mt__lifeline_leave(void)
{
    if (!life.board)
        return;
    atomic_store_explicit(&life.board[life.me].state, LEFT, memory_order_release);
    if (life.threaded) {
        atomic_store(&life.stop, 1);
        pthread_join(life.thread, NULL);
        life.threaded = false;
    }
    release();
}
