/*
 * fusion_shm.c -- the fusion backend for ranks that all share one node: buckets are
 * summed through a POSIX shared-memory segment that every rank maps (MT_FUSION_SHM=0
 * turns it off). Not an MPI window: freeing one is collective, and a rank that leaves
 * training with an error destroys its fusion while the others still wait in an
 * agreement; unmapping is local.
 *
 * The segment holds a barrier (a counter and a phase word: spin, then yield, then futex
 * wait) and two sets of one slot per rank. For each chunk of a bucket, each rank copies
 * its part straight from its tensors into its slot; after a barrier rank r adds up
 * segment r of every slot in rank order and stores it in its own slot; after a second
 * barrier every rank copies all segments, averaged, straight back into its tensors. No
 * packing buffer, no message copies, and every rank gets bit-identical sums. The two
 * sets alternate, so two barriers a chunk suffice. No MPI call after the set-up: in spawn
 * mode MPI reaches the spawned ranks over TCP loopback only, and the reductions run on
 * the fusion's thread while the caller's thread makes its own MPI calls. A rank that
 * never reaches a barrier (stopped, dead) is the stall watchdog's and, in spawn mode,
 * the lifeline's to act on, as for any collective.
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

/* The head of the segment: a barrier for the node's ranks. */
typedef struct {
    _Alignas(64) atomic_uint arrived;  /* ranks in the current barrier */
    _Alignas(64) atomic_uint phase;    /* barriers completed; the futex word */
    atomic_uint sleepers;              /* ranks asleep on phase */
} shm_sync;
enum { SYNC_BYTES = 4096, SPINS = 2000, YIELDS = 100 };

typedef struct {
    int size, rank;
    void *seg;            /* mapped: shm_sync, then [set][rank][slot_elems] floats */
    size_t seg_bytes;
    shm_sync *sync;       /* its head */
    float **slot;         /* [set * size + rank]: each rank's slot in both sets */
    float **part;         /* scratch: every slot's segment of this rank, size entries */
    size_t slot_elems;
    int set;
} shm_state;

/* Every rank of the segment waits until all have arrived. */
static void node_barrier(shm_state *s)
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
            __builtin_ia32_pause();
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

/* sum = slots[0] + ... + slots[p-1] over n elements, in rank order; sum may be one of the
 * slots (each block is added up on the stack first) */
__attribute__((optimize("tree-vectorize"))) static void sum_slots(float *sum, float **slots,
                                                                  int p, size_t n)
{
    enum { BLOCK = 1024 };
    float acc[BLOCK];
    for (size_t at = 0; at < n; at += BLOCK) {
        size_t m = n - at < BLOCK ? n - at : BLOCK;
        const float *a = slots[0] + at, *b2 = slots[1] + at;
        for (size_t i = 0; i < m; i++)
            acc[i] = a[i] + b2[i];
        for (int q = 2; q < p; q++) {
            const float *x = slots[q] + at;
            for (size_t i = 0; i < m; i++)
                acc[i] += x[i];
        }
        memcpy(sum + at, acc, m * sizeof(float));
    }
}

static void shm_close(void *state)
{
    shm_state *s = state;
    if (!s)
        return;
    if (s->seg)
        munmap(s->seg, s->seg_bytes); /* local: no rank waits for another here */
    free(s->slot);
    free(s->part);
    free(s);
}

/* Collective over data: map one segment on every rank (rank 0 creates it and removes its
 * name once all have it open). *out is set when every rank mapped it. */
static int map_segment(MPI_Comm data, int size, int rank, shm_state **out)
{
    int rc = MT_OK;
    static int counter;
    char name[64] = "";
    size_t slot_elems = (size_t)1 << 18; /* 1 MiB a slot, two sets */
    size_t bytes = SYNC_BYTES + 2 * (size_t)size * slot_elems * sizeof(float);
    int fd = -1;
    if (rank == 0) {
        snprintf(name, sizeof name, "/mpitrain-fusion-%d-%d", (int)getpid(), counter++);
        fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
        if (fd >= 0 && ftruncate(fd, (off_t)bytes) != 0) {
            close(fd);
            shm_unlink(name);
            fd = -1;
        }
        if (fd < 0)
            name[0] = '\0';
    }
    MT__MPI(MPI_Bcast(name, sizeof name, MPI_CHAR, 0, data), out);
    if (rank != 0 && name[0])
        fd = shm_open(name, O_RDWR, 0600);
    void *p = fd >= 0 ? mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                      : MAP_FAILED;
    if (fd >= 0)
        close(fd);
    /* the tables count as mapping: every rank gives up the segment with the one that
     * lacks them, and that rank's out of memory is the creation's error (agreed by the
     * caller); a mapping the system refuses is a fallback to MPI, not an error */
    shm_state *s = calloc(1, sizeof *s);
    if (s) {
        s->slot = calloc((size_t)2 * (size_t)size, sizeof *s->slot);
        s->part = calloc((size_t)size, sizeof *s->part);
    }
    if (!s || !s->slot || !s->part)
        rc = mt__error(MT_ENOMEM, "rank %d: out of memory setting up the fusion's shared "
                                  "segment", rank);
    int mapped = p != MAP_FAILED && !rc && !mt__test_fail("fusion-shm", rank);
    int all = 0;
    int e = MPI_Allreduce(&mapped, &all, 1, MPI_INT, MPI_MIN, data);
    if (e != MPI_SUCCESS && !rc)
        rc = mt__mpi_error(e, "MPI_Allreduce (fusion segment)");
    if (rank == 0 && name[0])
        shm_unlink(name); /* every rank has it open or has given up */
    if (!all || rc) {
        if (p != MAP_FAILED)
            munmap(p, bytes);
        shm_close(s);
        goto out;
    }
    s->size = size;
    s->rank = rank;
    s->seg = p;
    s->seg_bytes = bytes;
    s->sync = p; /* zeroed by ftruncate */
    s->slot_elems = slot_elems;
    for (int i = 0; i < 2 * size; i++)
        s->slot[i] = (float *)((char *)p + SYNC_BYTES) + (size_t)i * slot_elems;
    *out = s;
out:
    return rc;
}

/* Collective over data: a segment when every rank is on one node (and MT_FUSION_SHM is
 * not 0); the node communicator only decides that. */
static int shm_open_backend(mt__comm *c, MPI_Comm data, void **state)
{
    int rc = MT_OK;
    int use = c->size > 1 && mt__env_knob_bool("MT_FUSION_SHM", true), nsize = 0, all = 0;
    MPI_Comm node = MPI_COMM_NULL;
    shm_state *s = NULL;
    MT__MPI(MPI_Allreduce(&use, &all, 1, MPI_INT, MPI_MIN, data), out); /* one answer */
    if (!all)
        return MT_OK;
    MT__MPI(MPI_Comm_split_type(data, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node), out);
    MT__MPI(MPI_Comm_size(node, &nsize), out);
    int one_node = nsize == c->size; /* the same answer on every rank */
    MT__MPI(MPI_Allreduce(&one_node, &all, 1, MPI_INT, MPI_MIN, data), out);
    if (all && !(rc = map_segment(data, c->size, c->rank, &s)))
        *state = s;
out:
    if (node != MPI_COMM_NULL)
        MPI_Comm_free(&node);
    return rc;
}

static int shm_reduce(void *state, const mt__fbucket *b, const mt__ftensor *t)
{
    shm_state *s = state;
    int P = s->size, r = s->rank;
    size_t chunk = mt__fusion_chunk();
    size_t cap = s->slot_elems < chunk ? s->slot_elems : chunk;
    float scale = 1.0f / (float)P;
    float **part = s->part;
    for (size_t off = 0; off < b->elems; off += cap) {
        size_t m = b->elems - off < cap ? b->elems - off : cap;
        float **slots = s->slot + (size_t)s->set * (size_t)P;
        s->set ^= 1;
        mt__fusion_gather(b, t, off, m, slots[r]);
        node_barrier(s);
        size_t lo = m * (size_t)r / (size_t)P, hi = m * (size_t)(r + 1) / (size_t)P;
        for (int q = 0; q < P; q++)
            part[q] = slots[q] + lo;
        sum_slots(slots[r] + lo, part, P, hi - lo);
        node_barrier(s);
        for (int q = 0; q < P; q++) {
            size_t qlo = m * (size_t)q / (size_t)P, qhi = m * (size_t)(q + 1) / (size_t)P;
            if (qhi > qlo)
                mt__fusion_average(b, t, off + qlo, qhi - qlo, slots[q] + qlo, scale);
        }
    }
    return MT_OK;
}

const mt__fusion_backend mt__fusion_shm = {
    .name = "shm", .packs = false, .open = shm_open_backend, .reduce = shm_reduce,
    .close = shm_close,
};
