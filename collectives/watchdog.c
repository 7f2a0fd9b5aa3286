/*
 * watchdog.c -- the stall watchdog thread.
 *
 * The rank's own thread writes its position (position.c: waiting in which agreement or in
 * the data movement after it, since when, what it last called). The watchdog thread of
 * every rank publishes a snapshot of it ("beat") a few times a
 * second: to the ranks of its own host through a small shared-memory slot of its own that
 * they map (no MPI call at all, so nothing of the watchdog competes with the fusion
 * thread's and the caller's MPI calls within a host), and to the ranks of
 * other hosts with nonblocking sends on a private duplicate communicator, sending to a
 * peer again only once its previous beat has gone, so a stopped or unreachable peer never
 * blocks the thread. From the beats it knows, locally, who waits where and who has fallen
 * silent; nothing it decides needs a message from the rank that is missing, so any
 * waiting rank can warn and every waiting rank ends the job by itself (see watchdog.h).
 *
 * Same-host peers are also watched through /proc: a peer process that has exited (its
 * pid gone, a zombie, or reused by a process that started at another time) ends the job
 * a couple of seconds later, unless the launcher has ended it by then. Identities (host, pid namespace, boot id, pid, start time) are exchanged
 * when the watchdog starts, so only processes this rank can really see are checked.
 *
 * Stop protocol: every rank's thread marks its slot "bye" and sends a final "bye" to every
 * peer on another host, and keeps receiving until it has one from each of those, then
 * waits for its own sends, so no message is left unmatched when the communicator is freed.
 * Each slot's name is removed once every rank has mapped its peers' slots (the start's
 * second agreement), or when this rank ends the job; only a rank killed outright during
 * the start leaves it in /dev/shm, and the next job's start removes it (common/shm.c).
 */
#include "watchdog.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    int32_t waiting;     /* MT__W_NONE, MT__W_AGREE or MT__W_DATA */
    int32_t bye;         /* last message of this rank's watchdog */
    uint64_t seq;        /* agreement number (waiting in it, or the last one passed) */
    double waited_s;     /* seconds in the current wait */
    double since_last_s; /* seconds since the last wait ended */
    double at;           /* when it was taken, on the publisher's CLOCK_MONOTONIC */
    char desc[MT__DESC_LEN];
} beat;

/* Who a rank is, for the reports and for the same-host liveness check. */
typedef struct {
    char host[64];
    char space[160];     /* pid and mount namespaces, boot id: pids and /dev/shm compare
                            only within one */
    char slot[MT__SHM_NAME_LEN]; /* name of its shared-memory slot */
    int32_t pid;
    int32_t pad;
    uint64_t start;      /* start time in clock ticks after boot (/proc/PID/stat) */
} ident;

/* A rank's shared-memory slot: its latest beat under a sequence lock (odd while the
 * owner writes), and a tick count that stops when the rank does. */
typedef struct {
    atomic_uint_fast64_t version;
    atomic_uint_fast64_t ticks;
    atomic_int bye;
    beat b;
} slot;

typedef struct {
    beat last;           /* latest beat received */
    double heard;        /* when its latest beat was taken, on this rank's clock: a beat
                            published or delivered late (a scheduling gap between the
                            snapshot and its delivery) is as old as its snapshot */
    double offset;       /* other hosts: the least (arrival - at) seen, this rank's clock
                            minus the peer's plus the fastest delivery */
    double offset_set;   /* when offset was last set (0: no beat yet) */
    bool bye;
    bool local;          /* same host and namespaces: beats through its slot */
    bool visible;        /* its /proc entry could be read at the start: liveness checked */
    const slot *board;   /* its slot, mapped (local peers) */
    uint64_t ticks;      /* its tick count when last read */
    double dead_since;   /* when its process was first seen gone (0: alive) */
    MPI_Request req;     /* this rank's beat on its way to the peer */
    MPI_Request bye_req;
    beat out;            /* the buffer of req */
} peer;

static void snapshot(beat *b)
{
    memset(b, 0, sizeof *b);
    mt__position p;
    mt__position_get(&p);
    b->waiting = p.waiting;
    b->seq = p.seq;
    b->waited_s = p.waited_s;
    b->since_last_s = p.since_last_s;
    b->at = mt__now();
    mt__call call = p.call;
    if (call.kind == MT__CALL_NONE)
        snprintf(b->desc, sizeof b->desc, "(no collective yet)");
    else
        mt__call_describe(&call, b->desc, sizeof b->desc);
}

/* ------------------------------------------------------------ ending the job */

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - floor(s)) * 1e9)};
    nanosleep(&ts, NULL);
}

/* Writes text to stderr in pieces the pipe can take at once, waiting at most about a
 * second in all: a launcher that no longer reads (stopped, unreachable) must not keep
 * this thread from ending the job. */
static void say(const char *text)
{
    size_t len = strlen(text), off = 0;
    double give_up = mt__now() + 1.0;
    fflush(stderr);
    while (off < len && mt__now() < give_up) {
        struct pollfd p = {.fd = 2, .events = POLLOUT};
        if (poll(&p, 1, 100) <= 0)
            continue;
        size_t n = len - off < 512 ? len - off : 512; /* <= PIPE_BUF: never a partial block */
        ssize_t k = write(2, text + off, n);
        if (k < 0 && errno != EINTR && errno != EAGAIN)
            return;
        if (k > 0)
            off += (size_t)k;
    }
}

void mt__end_job_say(const char *text)
{
    if (text)
        say(text);
}

static struct {
    atomic_int ending;
    int code;
    double grace_s;
} end;

static void *end_after_grace(void *arg)
{
    (void)arg;
    sleep_s(end.grace_s);
    char line[160];
    snprintf(line, sizeof line, "mpitrain: MPI_Abort did not end this process within %.0f s; "
                                "exiting with status %d\n", end.grace_s, end.code);
    say(line);
    _exit(end.code);
}

/* The name of the process pid when it is Open MPI's launcher or daemon (mpirun, mpiexec,
 * orterun, orted, prterun, prted), or "" (a batch system's step daemon, a shell...). */
static void launcher_name(pid_t pid, char *name, size_t len)
{
    static const char *const ours[] = {"mpirun", "mpiexec", "orterun", "orted", "prterun",
                                       "prted"};
    char comm[32];
    mt__process_name((int)pid, comm, sizeof comm);
    name[0] = '\0';
    for (size_t i = 0; pid > 1 && i < sizeof ours / sizeof *ours; i++)
        if (!strcmp(comm, ours[i]))
            snprintf(name, len, "%s", comm);
}

/*
 * The launcher's own wait, bounded. A job whose node is cut off: MPI_Abort reaches mpirun,
 * which kills this node's ranks and then waits for the lost node's daemon until TCP gives
 * up (300 s + 9 x 20 s with Open MPI's defaults), so the job would outlive every rank by
 * minutes. Before its MPI_Abort, a rank whose parent is Open MPI's launcher or daemon
 * leaves a small process behind (posix_spawn: no fork handlers, no copy of this process)
 * in a session of its own (a launcher kills its ranks' process groups), with no file open
 * (mpirun waits for its ranks' output pipes to close) and none of the job's environment:
 * a shell that sleeps and, if that parent (the same process: its pid and start time)
 * still runs after the grace and 5 s more, sends it SIGTERM, which to a launcher whose
 * abort is in progress means "end now" (Open MPI's second Ctrl-C), and to a daemon "shut
 * down"; SIGKILL 3 s later if it still runs. (Open MPI 4.1.4's mpirun ends on that SIGTERM
 * within 0.1 s, by a segmentation fault of its own in PMIx_Finalize, exit 139, with a node
 * out of reach; so it does when a user presses Ctrl-C twice there.) A launcher that ends
 * by itself, as on a healthy network within a second or two, leaves it nothing to do. A
 * parent that is no launcher (Slurm's step daemon under srun, which handles lost nodes
 * itself) is left alone. Returns the line to print ("" when none was left).
 */
static void leave_a_reaper(double grace_s, char *line, size_t len)
{
    line[0] = '\0';
    pid_t parent = getppid();
    char name[16];
    launcher_name(parent, name, sizeof name);
    uint64_t start = name[0] ? mt__process_start((int)parent) : 0;
    if (!start)
        return;
    char secs[32], pid[32], since[32];
    snprintf(secs, sizeof secs, "%.0f", grace_s + 5);
    snprintf(pid, sizeof pid, "%ld", (long)parent);
    snprintf(since, sizeof since, "%llu", (unsigned long long)start);
    /* field 22 of /proc/PID/stat is the start time (a launcher's name has no space) */
    static const char script[] =
        "pid=$2 start=$3; sleep \"$1\" || exit 0; "
        "alive() { read -r l < \"/proc/$pid/stat\" || return 1; set -- $l; "
        "[ \"${22}\" = \"$start\" ]; }; "
        "alive && kill -TERM \"$pid\" && sleep 3 && alive && kill -KILL \"$pid\"";
    char *argv[] = {"sh", "-c", (char *)script, "mpitrain-end-launcher", secs, pid, since, NULL};
    char *envp[] = {"PATH=/usr/bin:/bin", NULL};
    posix_spawnattr_t at;
    posix_spawn_file_actions_t fa;
    if (posix_spawnattr_init(&at))
        return;
    bool ok = posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSID) == 0 &&
              posix_spawn_file_actions_init(&fa) == 0;
    if (ok) {
        ok = posix_spawn_file_actions_addclosefrom_np(&fa, 0) == 0;
        pid_t child;
        ok = ok && posix_spawn(&child, "/bin/sh", &fa, &at, argv, envp) == 0;
        posix_spawn_file_actions_destroy(&fa);
    }
    posix_spawnattr_destroy(&at);
    if (ok)
        snprintf(line, len, "mpitrain: if %s (pid %s) has not ended %s s from now, it is sent "
                 "SIGTERM (a node out of reach keeps Open MPI waiting for minutes)\n", name,
                 pid, secs);
}

_Noreturn void mt__end_job(MPI_Comm comm, int code, const char *text, double grace_s)
{
    if (atomic_exchange(&end.ending, 1)) /* another thread is ending the job already */
        for (;;)
            pause();
    mt__shm_unlink_own(); /* this process leaves no shared memory behind */
    if (comm == MPI_COMM_NULL) {
        if (text)
            say(text);
        _exit(code);
    }
    end.code = code;
    end.grace_s = grace_s;
    char reaper[256];
    leave_a_reaper(grace_s, reaper, sizeof reaper);
    pthread_t t;
    bool armed = pthread_create(&t, NULL, end_after_grace, NULL) == 0;
    if (text)
        say(text);
    if (reaper[0])
        say(reaper);
    if (!armed)
        _exit(code);
    MPI_Abort(comm, code);
    _exit(code);
}

/* ------------------------------------------------------------ identities */

static void read_line(const char *path, char *out, size_t len)
{
    out[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    if (fgets(out, (int)len, f))
        out[strcspn(out, "\n")] = '\0';
    fclose(f);
}

static void own_ident(ident *me)
{
    memset(me, 0, sizeof *me);
    char name[MPI_MAX_PROCESSOR_NAME] = "";
    int len = 0;
    if (gethostname(me->host, sizeof me->host - 1) != 0) {
        MPI_Get_processor_name(name, &len);
        snprintf(me->host, sizeof me->host, "%s", name);
    }
    char ns[48] = "", mnt[48] = "", boot[48] = "";
    ssize_t n = readlink("/proc/self/ns/pid", ns, sizeof ns - 1);
    ns[n > 0 ? n : 0] = '\0';
    n = readlink("/proc/self/ns/mnt", mnt, sizeof mnt - 1);
    mnt[n > 0 ? n : 0] = '\0';
    read_line("/proc/sys/kernel/random/boot_id", boot, sizeof boot);
    /* MT_NODE_KEY (test only, see topology.c) makes ranks of one machine other nodes */
    const char *key = getenv("MT_NODE_KEY");
    if (ns[0] && mnt[0] && boot[0])
        snprintf(me->space, sizeof me->space, "%s %s@%s#%.40s", ns, mnt, boot,
                 key ? key : "");
    me->pid = (int32_t)getpid();
    me->start = mt__process_start(me->pid);
}

/* The peer's process has exited (a zombie counts), or its pid belongs to another. */
static bool process_gone(const ident *p)
{
    return mt__process_gone(p->pid, p->start);
}

/* ------------------------------------------------------------ the watchdog */

struct mt__watchdog {
    MPI_Comm comm;
    slot *own;           /* this rank's slot, mapped */
    char own_name[MT__SHM_NAME_LEN]; /* its name until removed */
    int rank, size;
    double warn_s, timeout_s, tick_s, stale_s, grace_s;
    double report_s;     /* the first report of a wait: after warn_s, and not before a peer
                            that stopped when the wait began is past the stale limit */
    atomic_int state;    /* 0 wait for the start's agreement, 1 run, 2 quit unstarted */
    atomic_int stop;
    pthread_mutex_t lock; /* with wake: the thread's sleep between ticks ends at a stop */
    pthread_cond_t wake;
    pthread_t thread;
    bool threaded;
    int remote;          /* peers on other hosts (beats over MPI) */
    ident *ids;          /* every rank's identity */
    peer *peers;         /* every rank's latest state (this rank's own too) */
    uint64_t warned;     /* the last wait warned about, as wait_key + 1 */
};

enum { TAG_BEAT = 1 };

static uint64_t wait_key(const beat *b)
{
    return 2 * b->seq + (b->waiting == MT__W_DATA);
}

static bool fresh(const mt__watchdog *w, int r, double now)
{
    return r == w->rank || now - w->peers[r].heard <= w->stale_s;
}

static const char *wait_kind(const beat *b)
{
    return b->waiting == MT__W_DATA ? "the data movement of " : "";
}

/* Rank r, still heard from, waits in the same call as b (in its agreement, or already in
 * the data movement after it: an agreement completes on some ranks before others). */
static bool with_me(const mt__watchdog *w, int r, const beat *b, double now)
{
    const beat *o = &w->peers[r].last;
    return fresh(w, r, now) && !w->peers[r].bye && o->waiting && o->seq == b->seq;
}

/* Somebody below this rank waits in the same call and is still heard from: it reports. */
static bool lower_reports(const mt__watchdog *w, const beat *b, double now)
{
    for (int r = 0; r < w->rank; r++)
        if (with_me(w, r, b, now))
            return true;
    return false;
}

/* What this rank knows of the stall it waits in: who has not arrived, and where they are
 * (or since when they are silent). */
static void describe_stall(const mt__watchdog *w, const beat *b, double now, char *line,
                           size_t cap)
{
    size_t n = 0;
    int here_too = 0, missing = 0;
    for (int r = 0; r < w->size; r++)
        here_too += with_me(w, r, b, now);
#define ADD(...)                                                                  \
    do {                                                                          \
        if (n < cap)                                                              \
            n += (size_t)snprintf(line + n, cap - n, __VA_ARGS__);                \
    } while (0)
    ADD("mpitrain: stall: rank %d (host %s) has waited %.1f s in %s%s (call #%llu); %d of %d "
        "ranks are in that call; not arrived:", w->rank, w->ids[w->rank].host, b->waited_s,
        wait_kind(b), b->desc, (unsigned long long)b->seq, here_too, w->size);
    for (int r = 0; r < w->size && n + 300 < cap; r++) {
        const peer *p = &w->peers[r];
        const beat *o = &p->last;
        const ident *id = &w->ids[r];
        if (with_me(w, r, b, now))
            continue;
        missing++;
        ADD(" rank %d (host %s, pid %d)", r, id->host, (int)id->pid);
        if (!fresh(w, r, now))
            ADD(" silent for %.1f s (stopped, hung or unreachable); last heard:",
                now - p->heard);
        if (o->waiting)
            ADD(" waiting %.1f s in %s%s, call #%llu;", o->waited_s, wait_kind(o), o->desc,
                (unsigned long long)o->seq);
        else
            ADD(" last call: %s #%llu, left it %.1f s ago;", o->desc,
                (unsigned long long)o->seq, o->since_last_s);
    }
    if (!missing)
        ADD(" none that this rank knows of;");
    if (n + 200 >= cap)
        ADD(" ...;");
    ADD(" the job ends after %.0f s (failure.stall_timeout_s)\n", w->timeout_s);
#undef ADD
}

static void check_stall(mt__watchdog *w, const beat *b)
{
    if (!b->waiting || b->waited_s <= w->report_s)
        return;
    double now = mt__now();
    char line[8192];
    bool reporter = !lower_reports(w, b, now);
    bool timed_out = b->waited_s > w->timeout_s;
    if (!timed_out && (!reporter || w->warned == wait_key(b) + 1))
        return;
    line[0] = '\0';
    if (reporter) {
        describe_stall(w, b, now, line, sizeof line);
        w->warned = wait_key(b) + 1;
    }
    if (!timed_out) {
        say(line);
        return;
    }
    size_t n = strlen(line);
    snprintf(line + n, sizeof line - n,
             "mpitrain: rank %d (host %s): stalled %.0f s in %s%s (call #%llu), past "
             "failure.stall_timeout_s = %g s; aborting the job with status %d\n",
             w->rank, w->ids[w->rank].host, b->waited_s, wait_kind(b), b->desc,
             (unsigned long long)b->seq, w->timeout_s, MT_EXIT_STALLED);
    mt__end_job(w->comm, MT_EXIT_STALLED, line, w->grace_s);
}

/* A dead peer ends the job LOST_WAIT_S after it was first seen dead: a launcher that is
 * ending the job (it saw the death, or a rank aborted) kills this rank first, so the job's
 * status stays the launcher's; only where no launcher acts (spawn mode) does this one. */
#define LOST_WAIT_S 2.0

static void check_lost(mt__watchdog *w)
{
    for (int r = 0; r < w->size; r++) {
        peer *p = &w->peers[r];
        if (r == w->rank || !p->visible || p->bye)
            continue;
        if (!p->dead_since) {
            if (process_gone(&w->ids[r]))
                p->dead_since = mt__now();
            continue;
        }
        if (mt__now() - p->dead_since < LOST_WAIT_S)
            continue;
        char line[512];
        snprintf(line, sizeof line,
                 "mpitrain: rank %d (host %s): rank %d (host %s, pid %d) has died; the job "
                 "cannot go on without it: ending it with status %d (rerun it to resume "
                 "from the latest checkpoint)\n",
                 w->rank, w->ids[w->rank].host, r, w->ids[r].host, (int)w->ids[r].pid,
                 MT_EXIT_LOST);
        mt__end_job(w->comm, MT_EXIT_LOST, line, w->grace_s);
    }
}

static void publish(mt__watchdog *w, const beat *b, bool bye)
{
    slot *sl = w->own;
    uint_fast64_t v = atomic_load_explicit(&sl->version, memory_order_relaxed);
    atomic_store_explicit(&sl->version, v + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    sl->b = *b;
    atomic_store_explicit(&sl->version, v + 2, memory_order_release);
    atomic_fetch_add_explicit(&sl->ticks, 1, memory_order_release);
    if (bye)
        atomic_store_explicit(&sl->bye, 1, memory_order_release);
}

/* The beats of the ranks on this host, from their slots: a peer is heard from when its
 * tick count moved, as of when its beat was taken (one host: one CLOCK_MONOTONIC). */
static void read_slots(mt__watchdog *w)
{
    double now = mt__now();
    for (int r = 0; r < w->size; r++) {
        peer *p = &w->peers[r];
        if (!p->board)
            continue;
        const slot *sl = p->board;
        if (atomic_load_explicit(&sl->bye, memory_order_acquire))
            p->bye = true;
        uint64_t t = atomic_load_explicit(&sl->ticks, memory_order_acquire);
        if (t == p->ticks)
            continue;
        for (int tries = 0; tries < 100; tries++) {
            uint_fast64_t v1 = atomic_load_explicit(&sl->version, memory_order_acquire);
            if (v1 & 1)
                continue;
            beat b = sl->b;
            atomic_thread_fence(memory_order_acquire);
            if (atomic_load_explicit(&sl->version, memory_order_relaxed) == v1) {
                p->last = b;
                p->ticks = t;
                p->heard = fmin(b.at, now);
                break;
            }
        }
    }
}

/* When a beat of another host that arrived at `now` was taken, on this rank's clock: its
 * time plus the least offset seen (the clocks' difference plus the fastest delivery), so
 * a beat that waited in a scheduling gap or a queue counts as old as it is. The least
 * offset may creep up by 100 ppm of the time since it was set (more than any two clocks
 * drift apart), so a peer's clock running slow never makes its beats look stale. */
static double heard_at(peer *p, double at, double now)
{
    double off = now - at;
    double least = p->offset_set == 0 ? off : p->offset + 1e-4 * (now - p->offset_set);
    if (off <= least) {
        p->offset = off;
        p->offset_set = now;
        return now;
    }
    return fmin(at + least, now);
}

/* Takes every beat that has arrived from other hosts. */
static void receive(mt__watchdog *w)
{
    while (w->remote > 0) {
        int flag = 0;
        MPI_Status st;
        if (MPI_Iprobe(MPI_ANY_SOURCE, TAG_BEAT, w->comm, &flag, &st) != MPI_SUCCESS || !flag)
            return;
        beat b;
        if (MPI_Recv(&b, sizeof b, MPI_BYTE, st.MPI_SOURCE, TAG_BEAT, w->comm,
                     MPI_STATUS_IGNORE) != MPI_SUCCESS)
            return;
        peer *p = &w->peers[st.MPI_SOURCE];
        double now = mt__now();
        if (b.bye) {
            p->heard = now;
            p->bye = true;
            continue;
        }
        p->last = b;
        p->heard = heard_at(p, b.at, now);
    }
}

/* True when req is free for another send (an MPI error frees it too: that peer is lost
 * to this thread, and the checks above decide what follows). */
static bool sent(MPI_Request *req)
{
    int done = 1;
    if (*req != MPI_REQUEST_NULL && MPI_Test(req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
        *req = MPI_REQUEST_NULL;
        done = 1;
    }
    return done;
}

static void send_beats(mt__watchdog *w, const beat *b)
{
    for (int r = 0; r < w->size; r++) {
        peer *p = &w->peers[r];
        if (r == w->rank || p->local || !sent(&p->req)) /* no MPI call for local peers */
            continue;
        p->out = *b;
        MPI_Isend(&p->out, sizeof p->out, MPI_BYTE, r, TAG_BEAT, w->comm, &p->req);
    }
}

/* Stopping: one bye to every peer; true once every peer's bye came and every send went. */
static bool say_bye(mt__watchdog *w, beat *bye, bool *sent_byes)
{
    if (!*sent_byes) {
        bye->bye = 1;
        publish(w, bye, true);
        for (int r = 0; r < w->size; r++)
            if (r != w->rank && !w->peers[r].local)
                MPI_Isend(bye, sizeof *bye, MPI_BYTE, r, TAG_BEAT, w->comm,
                          &w->peers[r].bye_req);
        *sent_byes = true;
    }
    for (int r = 0; r < w->size; r++)
        if (r != w->rank && !w->peers[r].local &&
            (!w->peers[r].bye || !sent(&w->peers[r].req) || !sent(&w->peers[r].bye_req)))
            return false;
    return true;
}

/* Sleeps s seconds, or less once mt__watchdog_stop has been called: a fit's end does not
 * wait out a tick (up to 0.5 s) on every rank. */
static void doze(mt__watchdog *w, double s)
{
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    long ns = until.tv_nsec + (long)((s - floor(s)) * 1e9);
    until.tv_sec += (time_t)s + ns / 1000000000L;
    until.tv_nsec = ns % 1000000000L;
    int e = 0; /* 0: woken (a stop, or spuriously: wait on); else timed out or failed */
    pthread_mutex_lock(&w->lock);
    while (!atomic_load(&w->stop) && e == 0)
        e = pthread_cond_timedwait(&w->wake, &w->lock, &until);
    pthread_mutex_unlock(&w->lock);
}

static void *watch(void *arg)
{
    mt__watchdog *w = arg;
    while (atomic_load(&w->state) == 0)
        sleep_s(0.001);
    if (atomic_load(&w->state) != 1)
        return NULL;
    for (int r = 0; r < w->size; r++)
        w->peers[r].heard = mt__now();
    beat bye;
    bool sent_byes = false;
    double stop_began = 0;
    for (;;) {
        bool stopping = atomic_load(&w->stop);
        /* No peer is taken as heard from because this thread was late (a scheduling gap,
         * this rank stopped): every beat is judged by when it was taken, those of this
         * host by their time, those of other hosts by their time plus the least offset;
         * the beats that waited in MPI during the gap are all read below before any
         * check, so a peer still alive is fresh by its latest beat, and one that stopped
         * is as silent as it is. */
        beat b;
        snapshot(&b);
        w->peers[w->rank].last = b;
        w->peers[w->rank].heard = mt__now();
        if (!stopping)
            publish(w, &b, false);
        read_slots(w);
        receive(w);
        if (!stopping) {
            check_lost(w);
            check_stall(w, &b);
            send_beats(w, &b);
        } else {
            if (!sent_byes) {
                stop_began = mt__now();
                bye = b;
            }
            if (say_bye(w, &bye, &sent_byes))
                break;
            if (mt__now() - stop_began > w->timeout_s) {
                char line[256];
                snprintf(line, sizeof line,
                         "mpitrain: rank %d (host %s): peers did not stop their stall "
                         "watchdogs within %g s; aborting the job with status %d\n",
                         w->rank, w->ids[w->rank].host, w->timeout_s, MT_EXIT_STALLED);
                mt__end_job(w->comm, MT_EXIT_STALLED, line, w->grace_s);
            }
        }
        if (!stopping) /* test only: a scheduling gap before every next beat (stall.sh) */
            mt__test_pause("slow-watch-tick", w->rank);
        if (stopping)
            sleep_s(0.001);
        else
            doze(w, w->tick_s);
    }
    return NULL;
}

/* This rank's slot, named in me->slot. */
static int create_slot(mt__watchdog *w, ident *me, int rank)
{
    bool fail = mt__test_fail("watchdog-slot", rank);
    int fd = fail ? -1 : mt__shm_create("watch", me->slot, sizeof me->slot);
    if (fd < 0)
        return mt__error(MT_EIO, "rank %d: cannot create the stall watchdog's shared memory "
                         "%s: %s", rank, fail ? "(test hook)" : me->slot,
                         strerror(fail ? EIO : errno));
    snprintf(w->own_name, sizeof w->own_name, "%s", me->slot);
    void *p = ftruncate(fd, sizeof(slot)) == 0
                  ? mmap(NULL, sizeof(slot), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                  : MAP_FAILED;
    int e = errno;
    close(fd);
    if (p == MAP_FAILED)
        return mt__error(MT_EIO, "rank %d: cannot map the stall watchdog's shared memory %s: "
                         "%s", rank, me->slot, strerror(e));
    w->own = p;
    mt__test_die("die-watch-slot", rank); /* killed holding its slot's name (tests/shm.sh) */
    return MT_OK;
}

/* The slots of the ranks on this host (same host name and namespaces). */
static int map_peers(mt__watchdog *w, const ident *me)
{
    for (int r = 0; r < w->size; r++) {
        peer *p = &w->peers[r];
        const ident *id = &w->ids[r];
        p->local = r != w->rank && me->space[0] && id->start && !strcmp(id->host, me->host) &&
                   !strcmp(id->space, me->space);
        if (!p->local) {
            w->remote += r != w->rank;
            continue;
        }
        int fd = shm_open(id->slot, O_RDONLY, 0);
        void *m = fd >= 0 ? mmap(NULL, sizeof(slot), PROT_READ, MAP_SHARED, fd, 0)
                          : MAP_FAILED;
        int e = errno;
        if (fd >= 0)
            close(fd);
        if (m == MAP_FAILED)
            return mt__error(MT_EIO, "rank %d: cannot map rank %d's stall watchdog slot %s: "
                             "%s", w->rank, r, id->slot, strerror(e));
        p->board = m;
        p->visible = !process_gone(id); /* e.g. /proc mounted with hidepid: not checked */
    }
    return MT_OK;
}

static void unlink_slot(mt__watchdog *w)
{
    mt__shm_unlink(w->own_name);
    w->own_name[0] = '\0';
}

static void destroy(mt__watchdog *w)
{
    if (!w)
        return;
    if (w->threaded) {
        atomic_store(&w->state, 2);
        pthread_join(w->thread, NULL);
    }
    if (w->comm != MPI_COMM_NULL)
        MPI_Comm_free(&w->comm);
    unlink_slot(w);
    if (w->own)
        munmap(w->own, sizeof(slot));
    for (int r = 0; w->peers && r < w->size; r++)
        if (w->peers[r].board)
            munmap((void *)w->peers[r].board, sizeof(slot));
    free(w->ids);
    free(w->peers);
    pthread_cond_destroy(&w->wake);
    pthread_mutex_destroy(&w->lock);
    free(w);
}

int mt__watchdog_start(mt__watchdog **out, mt__comm *c, double warn_s, double timeout_s)
{
    int rc = MT_OK, level = 0;
    *out = NULL;
    MPI_Query_thread(&level);
    if (level < MPI_THREAD_MULTIPLE)
        return MT_OK;
    /* local set-up, then one agreement before the first collective of the start */
    mt__watchdog *w = mt__test_fail("watchdog-alloc", c->rank) ? NULL : calloc(1, sizeof *w);
    if (w) {
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_mutex_init(&w->lock, NULL);
        pthread_cond_init(&w->wake, &ca);
        pthread_condattr_destroy(&ca);
        w->comm = MPI_COMM_NULL;
        w->ids = calloc((size_t)c->size, sizeof *w->ids);
        w->peers = calloc((size_t)c->size, sizeof *w->peers);
    }
    ident mine;
    own_ident(&mine);
    if (!w || !w->ids || !w->peers)
        rc = mt__error(MT_ENOMEM, "rank %d: out of memory starting the stall watchdog",
                       c->rank);
    else
        rc = create_slot(w, &mine, c->rank);
    mt__call call;
    mt__call_init(&call, MT__CALL_INTERNAL, 2, 0, 0);
    if ((rc = mt__agree(c, &call, rc, NULL)))
        goto fail;
    /* every rank enters both collectives whatever happened before, then agrees */
    int e = MPI_Comm_dup(c->comm, &w->comm);
    if (e != MPI_SUCCESS)
        rc = mt__mpi_error(e, "MPI_Comm_dup (stall watchdog)");
    e = MPI_Allgather(&mine, sizeof mine, MPI_BYTE, w->ids, sizeof mine, MPI_BYTE, c->comm);
    if (e != MPI_SUCCESS && !rc)
        rc = mt__mpi_error(e, "MPI_Allgather (stall watchdog identities)");
    w->rank = c->rank;
    w->size = c->size;
    w->warn_s = warn_s;
    w->timeout_s = timeout_s;
    w->tick_s = fmin(0.5, fmax(0.02, warn_s / 4));
    w->stale_s = fmax(1.0, 3 * w->tick_s);
    w->grace_s = fmin(10, fmax(1, timeout_s / 10));
    /* a stopped peer's last beat is up to a tick older than its stop, and a beat of
     * another host is dated up to about a tick late (the least offset seen): two ticks */
    w->report_s = fmax(warn_s, w->stale_s + 2 * w->tick_s);
    for (int r = 0; r < c->size; r++)
        w->peers[r].req = w->peers[r].bye_req = MPI_REQUEST_NULL;
    if (!rc)
        rc = map_peers(w, &mine);
    if (!rc && (mt__test_fail("watchdog-thread", c->rank) ||
                pthread_create(&w->thread, NULL, watch, w) != 0))
        rc = mt__error(MT_ENOMEM, "rank %d: cannot start the stall watchdog thread", c->rank);
    w->threaded = !rc;
    mt__call_init(&call, MT__CALL_INTERNAL, 3, 0, 0);
    if ((rc = mt__agree(c, &call, rc, NULL)))
        goto fail;
    unlink_slot(w); /* every rank has mapped what it needs */
    atomic_store(&w->state, 1);
    *out = w;
    return MT_OK;
fail:
    destroy(w);
    return rc;
}

void mt__watchdog_stop(mt__watchdog **wp)
{
    if (!wp || !*wp)
        return;
    mt__watchdog *w = *wp;
    pthread_mutex_lock(&w->lock);
    atomic_store(&w->stop, 1);
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->thread, NULL);
    w->threaded = false;
    destroy(w);
    *wp = NULL;
}
