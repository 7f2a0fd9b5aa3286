/*
 * fusion_node.c -- the shared memory of one node, for the fusion backends that use it
 * (fusion_shm.c: every rank on one node; fusion_hier.c: within each node): a POSIX
 * shared-memory segment that every rank of the node maps, with a barrier at its head and
 * slots for copies of the buckets; the blocks that mt_fusion_alloc hands out, all the
 * node's ranks' blocks in one mapping; and the sums over the node's ranks in rank order,
 * so every rank gets bit-identical results.
 *
 * Not MPI windows: freeing one is collective, and a rank that leaves training with an
 * error destroys its fusion while the others still wait in an agreement; unmapping is
 * local. The barrier is a counter and a phase word (spin, then yield, then futex wait):
 * no MPI call after the set-up, so the reductions can run on the fusion's thread while
 * the caller's thread makes its own MPI calls, and in spawn mode (where MPI reaches the
 * spawned ranks over TCP loopback only) they still go through memory. A rank that never
 * reaches a barrier (stopped, dead) is the stall watchdog's and, in spawn mode, the
 * lifeline's to act on, as for any collective.
 */
#include "fusion_backend.h"

#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* The head of a segment: a barrier for the node's ranks. */
typedef struct {
    _Alignas(64) atomic_uint arrived;  /* ranks in the current barrier */
    _Alignas(64) atomic_uint phase;    /* barriers completed; the futex word */
    atomic_uint sleepers;              /* ranks asleep on phase */
} shm_sync;
enum { SYNC_BYTES = 4096, SPINS = 2000, YIELDS = 100 };

/* A spin-wait hint to the CPU. */
static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

void mt__node_barrier(mt__node_seg *s)
{
    shm_sync *y = s->sync;
    unsigned ph = atomic_load_explicit(&y->phase, memory_order_acquire);
    if (atomic_fetch_add_explicit(&y->arrived, 1, memory_order_acq_rel) ==
        (unsigned)s->size - 1) {
        atomic_store_explicit(&y->arrived, 0, memory_order_relaxed);
        atomic_fetch_add(&y->phase, 1);
        if (atomic_load(&y->sleepers))
            syscall(SYS_futex, &y->phase, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
        return;
    }
    for (int spin = 0; atomic_load_explicit(&y->phase, memory_order_acquire) == ph; spin++) {
        if (spin < SPINS)
            cpu_relax();
        else if (spin < SPINS + YIELDS)
            sched_yield();
        else {
            struct timespec ts = {0, 50 * 1000 * 1000}; /* a missed wake-up costs 50 ms */
            atomic_fetch_add(&y->sleepers, 1);
            syscall(SYS_futex, &y->phase, FUTEX_WAIT, ph, &ts, NULL, 0);
            atomic_fetch_sub(&y->sleepers, 1);
        }
    }
}

__attribute__((optimize("tree-vectorize"))) void mt__node_sum(float *sum,
                                                              float *const *parts, int p,
                                                              size_t n)
{
    enum { BLOCK = 1024 };
    float acc[BLOCK]; /* each block is added up here first: sum may be one of the parts */
    for (size_t at = 0; at < n; at += BLOCK) {
        size_t m = n - at < BLOCK ? n - at : BLOCK;
        const float *a = parts[0] + at;
        if (p == 1) {
            memmove(sum + at, a, m * sizeof(float));
            continue;
        }
        const float *b2 = parts[1] + at;
        for (size_t i = 0; i < m; i++)
            acc[i] = a[i] + b2[i];
        for (int q = 2; q < p; q++) {
            const float *x = parts[q] + at;
            for (size_t i = 0; i < m; i++)
                acc[i] += x[i];
        }
        memcpy(sum + at, acc, m * sizeof(float));
    }
}

/* ------------------------------------------------------------ mappings */

/* What a rank brings to a mapping: MIN over the ranks decides. */
enum { FAILED = 0, REFUSED = 1, MAPPED = 2 };

/* Collective over comm: one shared mapping of `bytes` on every rank (rank 0 creates it,
 * reserves its pages and removes its name once every rank has it open or has given up;
 * a job killed outright before that leaves the name, which the next job's start removes:
 * common/shm.c).
 * *out is the mapping when every rank mapped it, else NULL on every rank: *refused when
 * the system refused it somewhere (not an error: on a full tmpfs, a container's small
 * /dev/shm, a later write would be SIGBUS where this lets the caller do without; `refuse`
 * plays that), not when a rank `failed` (that rank's error, which its caller reports). */
static int map_shared(MPI_Comm comm, int rank, size_t bytes, bool failed, bool refuse,
                      void **out, bool *refused)
{
    int rc = MT_OK;
    char name[MT__SHM_NAME_LEN] = "";
    int fd = -1;
    *out = NULL;
    *refused = false;
    if (rank == 0) {
        fd = bytes <= (size_t)INT64_MAX ? mt__shm_create("fusion", name, sizeof name) : -1;
        if (fd >= 0 && (ftruncate(fd, (off_t)bytes) != 0 ||
                        posix_fallocate(fd, 0, (off_t)bytes) != 0)) {
            close(fd);
            mt__shm_unlink(name);
            fd = -1;
        }
        if (fd < 0)
            name[0] = '\0';
        else /* killed holding the segment's name (tests/shm.sh; rank: the node rank) */
            mt__test_die("die-fusion-seg", rank);
    }
    int e = MPI_Bcast(name, sizeof name, MPI_CHAR, 0, comm);
    if (e != MPI_SUCCESS) {
        rc = mt__mpi_error(e, "MPI_Bcast (fusion segment)");
        name[0] = rank == 0 ? name[0] : '\0';
    }
    if (rank != 0 && name[0])
        fd = shm_open(name, O_RDWR, 0600);
    void *p = fd >= 0 ? mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                      : MAP_FAILED;
    if (fd >= 0)
        close(fd);
    int mine = failed || rc ? FAILED : p == MAP_FAILED || refuse ? REFUSED : MAPPED;
    int all = FAILED;
    if (!rc && (e = MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, comm)) != MPI_SUCCESS)
        rc = mt__mpi_error(e, "MPI_Allreduce (fusion segment)");
    if (rank == 0 && name[0])
        mt__shm_unlink(name);
    if (all == MAPPED && !rc)
        *out = p;
    else if (p != MAP_FAILED)
        munmap(p, bytes);
    *refused = all == REFUSED;
    return rc;
}

void mt__node_seg_close(mt__node_seg *s)
{
    if (!s)
        return;
    if (s->seg)
        munmap(s->seg, s->seg_bytes); /* local: no rank waits for another here */
    free(s->slot);
    free(s->part);
    free(s);
}

int mt__node_seg_open(MPI_Comm comm, int size, int rank, int who, bool results,
                      mt__node_seg **out, bool *refused)
{
    int rc = MT_OK;
    size_t slot_elems = (size_t)1 << 18; /* 1 MiB a slot, two sets */
    size_t floats = 2 * (size_t)size * slot_elems + (results ? 2 * slot_elems : 0);
    size_t bytes = SYNC_BYTES + floats * sizeof(float);
    *out = NULL;
    /* the tables count as mapping: every rank gives up the segment with the one that
     * lacks them, and that rank's out of memory is its error */
    mt__node_seg *s = calloc(1, sizeof *s);
    if (s) {
        s->slot = calloc((size_t)2 * (size_t)size, sizeof *s->slot);
        s->part = calloc((size_t)size, sizeof *s->part);
    }
    bool fail = !s || !s->slot || !s->part || mt__test_fail("fusion-shm-alloc", who);
    if (fail)
        rc = mt__error(MT_ENOMEM, "rank %d: out of memory setting up the fusion's shared "
                                  "segment", who);
    void *p = NULL;
    int e = map_shared(comm, rank, bytes, fail, mt__test_fail("fusion-shm", who), &p,
                       refused);
    rc = rc ? rc : e;
    if (!p || rc) {
        if (p)
            munmap(p, bytes);
        mt__node_seg_close(s);
        return rc;
    }
    s->comm = comm;
    s->size = size;
    s->rank = rank;
    s->who = who;
    s->seg = p;
    s->seg_bytes = bytes;
    s->sync = p; /* zeroed by ftruncate */
    s->slot_elems = slot_elems;
    float *f = (float *)((char *)p + SYNC_BYTES);
    for (int i = 0; i < 2 * size; i++)
        s->slot[i] = f + (size_t)i * slot_elems;
    if (results) {
        s->result[0] = f + 2 * (size_t)size * slot_elems;
        s->result[1] = s->result[0] + slot_elems;
    }
    *out = s;
    return MT_OK;
}

int mt__node_block(mt__node_seg *s, size_t count, bool fail, mt__fblock *blk)
{
    int rc = MT_OK;
    size_t stride = (count + 15) / 16 * 16; /* every rank's block on a cache line */
    bool fits = count <= SIZE_MAX / sizeof(float) / 16 &&
                stride <= SIZE_MAX / sizeof(float) / (size_t)s->size;
    size_t bytes = fits ? stride * (size_t)s->size * sizeof(float) : 1;
    void *p = NULL;
    bool refused;
    int e = map_shared(s->comm, s->rank, bytes, fail, !fits, &p, &refused);
    if (fail)
        rc = mt__error(MT_ENOMEM, "rank %d: out of memory for a fusion block of %zu floats",
                       s->who, count);
    rc = rc ? rc : e;
    if (!p || rc) {
        if (p)
            munmap(p, bytes);
        return rc; /* refused (no error): ordinary memory instead */
    }
    *blk = (mt__fblock){.base = p, .stride = stride, .count = count, .nranks = s->size,
                        .me = s->rank, .map = p, .map_bytes = bytes};
    return MT_OK;
}

/* ------------------------------------------------------------ sums over the blocks */

typedef struct {
    float *dst;           /* contiguous, for element `from`; NULL: into the own block */
    size_t from;
    float scale;
    const float *src;     /* put: contiguous source; NULL: the own block */
    float **parts;        /* scratch: a pointer per node rank */
} block_io;

/* Where element `in` of tensor t lies in node rank q's block. */
static inline float *in_block(const mt__ftensor *t, size_t in, int q)
{
    const mt__fblock *k = t->blk;
    return k->base + (size_t)q * k->stride + t->boff + in;
}

static void sum_piece(const mt__ftensor *t, size_t in, size_t at, size_t cnt, void *arg)
{
    block_io *io = arg;
    int p = t->blk->nranks;
    for (int q = 0; q < p; q++)
        io->parts[q] = in_block(t, in, q);
    mt__node_sum(io->dst ? io->dst + (at - io->from) : in_block(t, in, t->blk->me),
                 io->parts, p, cnt);
}

static void put_piece(const mt__ftensor *t, size_t in, size_t at, size_t cnt, void *arg)
{
    block_io *io = arg;
    int me = t->blk->me;
    const float *src = io->src ? io->src + (at - io->from) : in_block(t, in, me);
    for (int q = 0; q < t->blk->nranks; q++)
        if (q != me || io->src)
            mt__fusion_scale(in_block(t, in, q), src, cnt, io->scale);
    if (!io->src) /* the own block last: it was the others' source */
        mt__fusion_scale(in_block(t, in, me), src, cnt, io->scale);
}

void mt__node_sum_blocks(mt__node_seg *s, const mt__fbucket *b, const mt__ftensor *t,
                         size_t from, size_t n, float *dst)
{
    block_io io = {.dst = dst, .from = from, .parts = s->part};
    if (n)
        mt__fusion_pieces(b, t, from, n, sum_piece, &io);
}

void mt__node_put_blocks(const mt__fbucket *b, const mt__ftensor *t, size_t from, size_t n,
                         const float *src, float scale)
{
    block_io io = {.from = from, .scale = scale, .src = src};
    if (n)
        mt__fusion_pieces(b, t, from, n, put_piece, &io);
}
