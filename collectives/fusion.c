/*
 * fusion.c -- gradient buckets (mt_fusion): many tensors, few collectives.
 *
 * Tensors are registered in a fixed order and packed into buckets of at most
 * bucket_bytes (a larger tensor gets a bucket of its own). A bucket is handed to the
 * fusion's communication thread once every tensor in it is marked ready, but buckets are
 * always handed over in bucket order, because ranks may mark tensors ready in different
 * orders while their collectives must be issued in the same order everywhere. Register
 * tensors in the order their gradients become ready (last layer first).
 *
 * Why a thread: Open MPI has no asynchronous progress for nonblocking collectives, so an
 * MPI_Iallreduce only advances inside later MPI calls and the reduction would not really
 * overlap the caller's backward pass. The thread packs a bucket and reduces it with a
 * blocking MPI_Allreduce on a private communicator while the caller computes (this needs
 * MPI_THREAD_MULTIPLE; without it, every bucket is reduced inside mt_fusion_wait).
 *
 * mt_fusion_wait passes one agreement before it waits. It carries each rank's status and
 * how many buckets it handed over (always a prefix in bucket order). On success every
 * bucket is reduced and averaged. On an error anywhere, every rank still completes the
 * buckets up to the largest prefix any rank handed over, so no thread is left inside a
 * collective that its peers never join, and then returns the error; tensor contents are
 * unspecified after that step, and the fusion can be used again.
 * Registration (count and sizes) is checked across ranks once, at the first ready or wait.
 * When every rank is on one node, buckets are summed through a POSIX shared-memory
 * segment instead of MPI_Allreduce (MT_FUSION_SHM=0 turns that off). Not an MPI window:
 * freeing one is collective, and a rank that leaves training with an error destroys its
 * fusion while the others still wait in an agreement; unmapping is local. Each rank copies its part
 * of a chunk straight from its tensors into its slot; after a barrier rank r adds up
 * segment r of every slot in rank order and stores it in its own slot; after a second
 * barrier every rank copies all segments, averaged, straight back into its tensors. No
 * packing buffer, no MPI message copies, and every rank gets bit-identical sums. Two sets
 * of slots alternate, so two barriers a chunk suffice.
 * Tensors that lie end to end in memory in registration order (allocate a model's
 * gradients as one block) are reduced in place: no packing copy and no unpacking copy.
 * With one rank nothing moves at all.
 */
#include "collectives.h"
#include "watchdog.h"

#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    float *ptr;
    size_t count, offset; /* offset inside its bucket */
    int bucket;
    bool ready;
} tensor;

typedef struct {
    int first, n;         /* tensors [first, first + n) */
    size_t elems;
    int unready;          /* tensors not yet ready this step */
    float *buf;           /* packing buffer; NULL when the tensors already lie end to end
                             in registration order (one tensor, or one allocation): then
                             the bucket is reduced in place from base */
    float *base;
    bool adjacent;        /* its tensors lie end to end from base */
} bucket;

struct mt_fusion {
    mt__comm *comm;       /* borrowed: agreements */
    MPI_Comm data;        /* owned: reductions */
    size_t bucket_elems;
    tensor *t;
    int nt, tcap;
    bucket *b;
    int nb, bcap;
    bool checked;
    int status;           /* first local error of this step, and its message */
    char status_msg[MT__MSG_LEN];
    uint64_t sig;
    /* hand-over to the communication thread (all under lock) */
    bool threaded, quit;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int handed, claimed, done; /* buckets [0, handed) given to the thread, [0, claimed)
                                  taken by it, [0, done) reduced, this step */
    bool closing;         /* the wait reduces what the thread has not taken */
    int thread_rc;
    char thread_msg[MT__MSG_LEN];
    /* shared-memory reduction (every rank on one node) */
    void *seg;            /* mapped segment: shm_sync, then [set][rank][slot_elems] floats;
                             NULL: MPI_Allreduce */
    struct shm_sync_ *sync; /* its head */
    size_t seg_bytes;
    float **slot;         /* [set * size + rank]: each rank's slot in both sets */
    float **part;         /* scratch: every slot's segment of this rank, size entries */
    size_t slot_elems;
    int set;
};

static size_t fusion_chunk = INT_MAX;

static float *bucket_data(const mt_fusion *f, const bucket *b)
{
    return b->buf ? b->buf : b->base;
}

/* dst = src * s (dst == src allowed), vectorised whatever the -O level: the averaging
 * pass touches every gradient float once per step. */
__attribute__((optimize("tree-vectorize"))) static void scale_into(float *dst,
                                                                   const float *src,
                                                                   size_t n, float s)
{
    if (dst == src) {
        for (size_t i = 0; i < n; i++)
            dst[i] *= s;
        return;
    }
    float *restrict d = dst;
    const float *restrict x = src;
    for (size_t i = 0; i < n; i++)
        d[i] = x[i] * s;
}

/* Visits the pieces of bucket b's tensors that cover flat elements [from, from + n):
 * fn(tensor data, bucket-relative element, count, arg). */
static void pieces(const mt_fusion *f, const bucket *b, size_t from, size_t n,
                   void (*fn)(float *t, size_t at, size_t cnt, void *arg), void *arg)
{
    if (b->adjacent) { /* end to end: one piece */
        fn(b->base + from, from, n, arg);
        return;
    }
    for (int k = b->first; k < b->first + b->n; k++) {
        const tensor *t = &f->t[k];
        size_t lo = t->offset > from ? t->offset : from;
        size_t hi = t->offset + t->count < from + n ? t->offset + t->count : from + n;
        if (lo < hi)
            fn(t->ptr + (lo - t->offset), lo, hi - lo, arg);
    }
}

typedef struct {
    float *slot;      /* where element `from` of the chunk goes or comes from */
    size_t from;
    float scale;
} piece_io;

static void copy_in(float *t, size_t at, size_t cnt, void *arg)
{
    piece_io *io = arg;
    memcpy(io->slot + (at - io->from), t, cnt * sizeof(float));
}

static void copy_out(float *t, size_t at, size_t cnt, void *arg)
{
    piece_io *io = arg;
    scale_into(t, io->slot + (at - io->from), cnt, io->scale);
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

/* The head of the shared segment: a barrier for the node's ranks in shared memory. */
typedef struct shm_sync_ {
    _Alignas(64) atomic_uint arrived;  /* ranks in the current barrier */
    _Alignas(64) atomic_uint phase;    /* barriers completed; the futex word */
    atomic_uint sleepers;              /* ranks asleep on phase */
} shm_sync;
enum { SYNC_BYTES = 4096, SPINS = 2000, YIELDS = 100 };

/* Every rank of the segment waits until all have arrived (no MPI call: see the top). A
 * rank that never comes (it died or stopped) is the stall watchdog's and the lifeline's
 * to act on, as for any collective. */
static void node_barrier(mt_fusion *f)
{
    shm_sync *s = f->sync;
    unsigned ph = atomic_load_explicit(&s->phase, memory_order_acquire);
    if (atomic_fetch_add_explicit(&s->arrived, 1, memory_order_acq_rel) ==
        (unsigned)f->comm->size - 1) {
        atomic_store_explicit(&s->arrived, 0, memory_order_relaxed);
        atomic_fetch_add(&s->phase, 1);
        if (atomic_load(&s->sleepers))
            syscall(SYS_futex, &s->phase, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
        return;
    }
    for (int spin = 0; atomic_load_explicit(&s->phase, memory_order_acquire) == ph; spin++) {
        if (spin < SPINS)
            __builtin_ia32_pause();
        else if (spin < SPINS + YIELDS)
            sched_yield();
        else {
            struct timespec ts = {0, 50 * 1000 * 1000}; /* a missed wake-up costs 50 ms */
            atomic_fetch_add(&s->sleepers, 1);
            syscall(SYS_futex, &s->phase, FUTEX_WAIT, ph, &ts, NULL, 0);
            atomic_fetch_sub(&s->sleepers, 1);
        }
    }
}

/* Collective over f->data: map one segment on every rank (rank 0 creates it and removes
 * its name once all have it open). Sets f->seg when every rank mapped it. */
static int map_segment(mt_fusion *f, int size, int rank)
{
    int rc = MT_OK;
    static int counter;
    char name[64] = "";
    f->slot_elems = (size_t)1 << 18; /* 1 MiB a slot, two sets */
    f->seg_bytes = SYNC_BYTES + 2 * (size_t)size * f->slot_elems * sizeof(float);
    int fd = -1;
    if (rank == 0) {
        snprintf(name, sizeof name, "/mpitrain-fusion-%d-%d", (int)getpid(), counter++);
        fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
        if (fd >= 0 && ftruncate(fd, (off_t)f->seg_bytes) != 0) {
            close(fd);
            shm_unlink(name);
            fd = -1;
        }
        if (fd < 0)
            name[0] = '\0';
    }
    MT__MPI(MPI_Bcast(name, sizeof name, MPI_CHAR, 0, f->data), out);
    if (rank != 0 && name[0])
        fd = shm_open(name, O_RDWR, 0600);
    void *p = fd >= 0 ? mmap(NULL, f->seg_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                      : MAP_FAILED;
    if (fd >= 0)
        close(fd);
    /* the pointer tables count as mapping: every rank gives up the segment with the one
     * that lacks them, and that rank's out of memory is the creation's error (agreed by
     * the caller); a mapping the system refuses is a fallback to MPI, not an error */
    f->slot = calloc((size_t)2 * (size_t)size, sizeof *f->slot);
    f->part = calloc((size_t)size, sizeof *f->part);
    if (!f->slot || !f->part)
        rc = mt__error(MT_ENOMEM, "rank %d: out of memory setting up the fusion's shared "
                                  "segment", rank);
    int mapped = p != MAP_FAILED && !rc && !mt__test_fail("fusion-shm", rank);
    int all = 0;
    int e = MPI_Allreduce(&mapped, &all, 1, MPI_INT, MPI_MIN, f->data);
    if (e != MPI_SUCCESS && !rc)
        rc = mt__mpi_error(e, "MPI_Allreduce (fusion segment)");
    if (rank == 0 && name[0])
        shm_unlink(name); /* every rank has it open or has given up */
    if (!all || rc) {
        if (p != MAP_FAILED)
            munmap(p, f->seg_bytes);
        free(f->slot);
        free(f->part);
        f->slot = NULL;
        f->part = NULL;
        goto out;
    }
    f->seg = p;
    f->sync = p; /* zeroed by ftruncate */
    for (int i = 0; i < 2 * size; i++)
        f->slot[i] = (float *)((char *)p + SYNC_BYTES) + (size_t)i * f->slot_elems;
out:
    return rc;
}

/* Sum bucket b over the node's ranks through the window and average it into the
 * tensors (blocking; every rank calls it for the same buckets in the same order). */
static int reduce_shm(mt_fusion *f, bucket *b)
{
    int P = f->comm->size, r = f->comm->rank, rc = MT_OK;
    size_t cap = f->slot_elems < fusion_chunk ? f->slot_elems : fusion_chunk;
    float scale = 1.0f / (float)P;
    float **part = f->part;
    for (size_t off = 0; off < b->elems && !rc; off += cap) {
        size_t m = b->elems - off < cap ? b->elems - off : cap;
        float **slots = f->slot + (size_t)f->set * (size_t)P;
        f->set ^= 1;
        piece_io in = {slots[r], off, 1.0f};
        pieces(f, b, off, m, copy_in, &in);
        node_barrier(f);
        size_t lo = m * (size_t)r / (size_t)P, hi = m * (size_t)(r + 1) / (size_t)P;
        for (int q = 0; q < P; q++)
            part[q] = slots[q] + lo;
        sum_slots(slots[r] + lo, part, P, hi - lo);
        node_barrier(f);
        for (int q = 0; q < P; q++) {
            size_t qlo = m * (size_t)q / (size_t)P, qhi = m * (size_t)(q + 1) / (size_t)P;
            piece_io out = {slots[q] + qlo, off + qlo, scale};
            if (qhi > qlo)
                pieces(f, b, off + qlo, qhi - qlo, copy_out, &out);
        }
    }
    return rc;
}

/* Pack and sum one bucket across ranks (blocking). */
static int reduce_bucket(mt_fusion *f, bucket *b)
{
    MT__TRACE_ARG("fusion", "bucket", b - f->b);
    int rc = MT_OK;
    if (f->comm->size == 1) /* the sum over one rank is the tensor itself */
        return MT_OK;
    if (f->seg)
        return reduce_shm(f, b);
    for (int k = b->first; k < b->first + b->n && b->buf; k++)
        if (f->t[k].count)
            memcpy(b->buf + f->t[k].offset, f->t[k].ptr, f->t[k].count * sizeof(float));
    float *data = bucket_data(f, b);
    for (size_t off = 0; off < b->elems; off += fusion_chunk) {
        size_t n = b->elems - off < fusion_chunk ? b->elems - off : fusion_chunk;
        MT__MPI(MPI_Allreduce(MPI_IN_PLACE, data + off, (int)n, MPI_FLOAT, MPI_SUM, f->data),
                out);
    }
out:
    return rc;
}

/* The first reduction error of the step, for the wait to report (call under lock, or
 * with no thread). */
static void note_reduce_error(mt_fusion *f, int rc)
{
    if (rc && !f->thread_rc) {
        f->thread_rc = rc;
        snprintf(f->thread_msg, sizeof f->thread_msg, "%s", mt_last_error());
    }
}

static void *comm_thread(void *arg)
{
    mt_fusion *f = arg;
    mt__trace_thread("fusion");
    pthread_mutex_lock(&f->lock);
    for (;;) {
        while (!f->quit && (f->closing || f->claimed == f->handed))
            pthread_cond_wait(&f->cond, &f->lock);
        if (f->quit)
            break;
        bucket *b = &f->b[f->claimed++];
        pthread_mutex_unlock(&f->lock);
        int rc = reduce_bucket(f, b);
        pthread_mutex_lock(&f->lock);
        note_reduce_error(f, rc);
        f->done++;
        pthread_cond_broadcast(&f->cond);
    }
    pthread_mutex_unlock(&f->lock);
    return NULL;
}

/* Give buckets [handed, upto) to the thread. */
static void hand_over(mt_fusion *f, int upto)
{
    pthread_mutex_lock(&f->lock);
    if (upto > f->handed) {
        f->handed = upto;
        pthread_cond_broadcast(&f->cond);
    }
    pthread_mutex_unlock(&f->lock);
}

/* The wait's side: stop the thread taking more, let it finish what it took, then reduce
 * [that, upto) here, in bucket order, so nothing waits on a thread wake-up. */
static void finish(mt_fusion *f, int upto)
{
    int from = 0;
    if (f->threaded) {
        pthread_mutex_lock(&f->lock);
        f->closing = true;
        while (f->done < f->claimed)
            pthread_cond_wait(&f->cond, &f->lock);
        from = f->claimed;
        pthread_mutex_unlock(&f->lock);
    }
    for (int i = from; i < upto; i++)
        note_reduce_error(f, reduce_bucket(f, &f->b[i]));
    pthread_mutex_lock(&f->lock);
    f->handed = f->claimed = f->done = 0;
    f->closing = false;
    pthread_mutex_unlock(&f->lock);
}

/* Local part of the creation: the bucket size (argument or MT_FUSION_BYTES) and the
 * object in *fp. */
static int fusion_new(mt__comm *c, size_t bucket_bytes, mt_fusion **out, mt_fusion **fp)
{
    *fp = NULL;
    if (!out)
        return mt__error(MT_EINVAL, "mt_fusion_create: out is NULL");
    if (bucket_bytes == 0) {
        const char *env = getenv("MT_FUSION_BYTES");
        uint64_t v = (uint64_t)25 << 20;
        if (env && mt__parse_u64("MT_FUSION_BYTES", env, 1, (uint64_t)1 << 34, &v))
            return mt__error(MT_EINVAL, "rank %d: MT_FUSION_BYTES must be a positive number "
                                        "of bytes (got '%s'): %s", c->rank, env, mt_last_error());
        bucket_bytes = (size_t)v;
    }
    mt_fusion *f = mt__test_fail("fusion-alloc", c->rank) ? NULL : calloc(1, sizeof *f);
    if (!f)
        return mt__error(MT_ENOMEM, "rank %d: out of memory creating a fusion", c->rank);
    f->comm = c;
    f->data = MPI_COMM_NULL;
    f->bucket_elems = bucket_bytes / sizeof(float) ? bucket_bytes / sizeof(float) : 1;
    pthread_mutex_init(&f->lock, NULL);
    pthread_cond_init(&f->cond, NULL);
    *fp = f;
    return MT_OK;
}

/* Collective over f->data: the node's shared-memory segment when every rank is on one
 * node (and MT_FUSION_SHM is not 0). */
static int setup_shared(mt_fusion *f, mt__comm *c)
{
    int rc = MT_OK;
    int use = c->size > 1 && mt__env_knob_bool("MT_FUSION_SHM", true), nsize = 0, all = 0;
    MPI_Comm node = MPI_COMM_NULL;
    MT__MPI(MPI_Allreduce(&use, &all, 1, MPI_INT, MPI_MIN, f->data), out); /* one answer */
    if (!all)
        return MT_OK;
    MT__MPI(MPI_Comm_split_type(f->data, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node), out);
    MT__MPI(MPI_Comm_size(node, &nsize), out);
    int one_node = nsize == c->size; /* the same answer on every rank */
    MT__MPI(MPI_Allreduce(&one_node, &all, 1, MPI_INT, MPI_MIN, f->data), out);
    if (all)
        rc = map_segment(f, c->size, c->rank);
out:
    if (node != MPI_COMM_NULL)
        MPI_Comm_free(&node);
    return rc;
}

int mt__fusion_create(mt__comm *c, size_t bucket_bytes, mt_fusion **out)
{
    int rc = MT_OK;
    if (out)
        *out = NULL;
    /* what can fail on one rank alone is agreed before the first collective, and the
     * collectives and the thread after them, so every rank has a fusion or none has */
    mt_fusion *f = NULL;
    mt__call call;
    mt__call_init(&call, MT__CALL_INTERNAL, 5, 0, 0);
    if ((rc = mt__agree(c, &call, fusion_new(c, bucket_bytes, out, &f), NULL)))
        goto fail;
    MT__MPI(MPI_Comm_dup(c->comm, &f->data), agree);
    if ((rc = setup_shared(f, c)))
        goto agree;
    int level = 0;
    MPI_Query_thread(&level);
    if (level >= MPI_THREAD_MULTIPLE) {
        MT__CHECK(!mt__test_fail("fusion-thread", c->rank) &&
                      pthread_create(&f->thread, NULL, comm_thread, f) == 0,
                  MT_ENOMEM, agree, "rank %d: cannot start the fusion's communication thread",
                  c->rank);
        f->threaded = true;
    }
agree:
    mt__call_init(&call, MT__CALL_INTERNAL, 6, 0, 0);
    if ((rc = mt__agree(c, &call, rc, NULL)))
        goto fail;
    *out = f;
    return MT_OK;
fail:
    mt_fusion_destroy(&f);
    return rc;
}

void mt__fusion_orphan(mt_fusion *f)
{
    f->comm = NULL;
}

/* A fusion whose context ended (kept past fit) cannot reach its ranks any more. */
#define NEED_COMM(f, fn)                                                      \
    if (!(f)->comm)                                                           \
        return mt__error(MT_EINVAL, fn ": the fusion's context ended with its fit (create a "\
                                       "fusion inside each fit)");

void mt_fusion_destroy(mt_fusion **fp)
{
    if (!fp || !*fp)
        return;
    mt_fusion *f = *fp;
    mt__live_remove(f);
    if (f->threaded) {
        pthread_mutex_lock(&f->lock); /* a step left without its wait: finish what was taken */
        f->closing = true;
        while (f->done < f->claimed)
            pthread_cond_wait(&f->cond, &f->lock);
        f->quit = true;
        pthread_cond_broadcast(&f->cond);
        pthread_mutex_unlock(&f->lock);
        pthread_join(f->thread, NULL);
    }
    pthread_mutex_destroy(&f->lock);
    pthread_cond_destroy(&f->cond);
    if (f->seg)
        munmap(f->seg, f->seg_bytes); /* local: no rank waits for another here */
    free(f->slot);
    free(f->part);
    if (f->data != MPI_COMM_NULL)
        MPI_Comm_free(&f->data);
    for (int i = 0; i < f->nb; i++)
        free(f->b[i].buf);
    free(f->b);
    free(f->t);
    free(f);
    *fp = NULL;
}

static int new_bucket(mt_fusion *f, int first)
{
    if (f->nb == f->bcap) {
        int cap = f->bcap ? 2 * f->bcap : 8;
        bucket *b = realloc(f->b, (size_t)cap * sizeof *b);
        if (!b)
            return mt__error(MT_ENOMEM, "out of memory adding a fusion bucket");
        f->b = b;
        f->bcap = cap;
    }
    f->b[f->nb] = (bucket){.first = first};
    return f->nb++;
}

/* An add that failed on this rank alone (out of memory) leaves its registration short:
 * remembered, so that the registration check reports it as this rank's error (MT_EPEER
 * on the others) rather than as a mismatch. */
static int add_failed(mt_fusion *f, int rc)
{
    if (!f->status) {
        f->status = rc;
        snprintf(f->status_msg, sizeof f->status_msg, "%s", mt_last_error());
    }
    return rc;
}

int mt_fusion_add(mt_fusion *f, float *tensor_ptr, size_t count)
{
    if (!f)
        return mt__error(MT_EINVAL, "mt_fusion_add: fusion is NULL");
    NEED_COMM(f, "mt_fusion_add");
    if (f->checked)
        return mt__error(MT_EINVAL, "mt_fusion_add: tensors must be added before the first "
                                    "mt_fusion_ready or mt_fusion_wait");
    if (count > 0 && !tensor_ptr)
        return mt__error(MT_EINVAL, "mt_fusion_add: NULL tensor with count %zu", count);
    if (f->nt == INT_MAX)
        return mt__error(MT_EINVAL, "mt_fusion_add: too many tensors");
    if (f->nt == f->tcap) {
        int cap = f->tcap ? 2 * f->tcap : 64;
        tensor *t = realloc(f->t, (size_t)cap * sizeof *t);
        if (!t)
            return add_failed(f, mt__error(MT_ENOMEM, "out of memory adding a fusion tensor"));
        f->t = t;
        f->tcap = cap;
    }
    int idx = f->nt;
    bucket *last = f->nb ? &f->b[f->nb - 1] : NULL;
    bool fits = last && (last->elems + count <= f->bucket_elems || count == 0) &&
                !(last->n == 1 && last->elems > f->bucket_elems);
    int bi = fits ? f->nb - 1 : new_bucket(f, idx);
    if (bi < 0)
        return add_failed(f, bi);
    bucket *b = &f->b[bi];
    f->t[idx] = (tensor){.ptr = tensor_ptr, .count = count, .offset = b->elems, .bucket = bi};
    b->elems += count;
    b->n++;
    f->nt++;
    f->sig = mt__sig_mix(mt__sig_mix(f->sig, count), (uint64_t)bi);
    return idx;
}

/* Collective, once: every rank registered the same tensors; buffers for the layout. */
static int check_registration(mt_fusion *f)
{
    int rc = MT_OK;
    size_t elems = 0;
    for (int i = 0; i < f->nb && !rc; i++) {
        bucket *b = &f->b[i];
        elems += b->elems;
        b->unready = b->n;
        /* end to end in memory (zero-size tensors aside): reduce in place, no copies */
        float *next = NULL;
        bool adjacent = true;
        for (int k = b->first; k < b->first + b->n; k++) {
            if (!f->t[k].count)
                continue;
            if (!b->base)
                b->base = f->t[k].ptr;
            else if (f->t[k].ptr != next)
                adjacent = false;
            next = f->t[k].ptr + f->t[k].count;
        }
        b->adjacent = adjacent && b->base;
        if (!adjacent && f->comm->size > 1 && !f->seg &&
            !(b->buf = malloc(b->elems * sizeof(float))))
            rc = mt__error(MT_ENOMEM, "out of memory for a fusion bucket of %zu floats",
                           b->elems);
    }
    mt__call call;
    mt__call_init(&call, MT__CALL_FUSION_CHECK, elems, f->nt, f->nb);
    call.sig = mt__sig_mix(call.sig, f->sig);
    if (!rc && f->status) { /* an add failed here */
        mt__error_set_text(f->status_msg);
        rc = f->status;
    }
    rc = mt__agree(f->comm, &call, rc, NULL);
    f->checked = rc == MT_OK;
    return rc;
}

int mt_fusion_ready(mt_fusion *f, int index)
{
    if (!f)
        return mt__error(MT_EINVAL, "mt_fusion_ready: fusion is NULL");
    NEED_COMM(f, "mt_fusion_ready");
    int rc = f->checked ? MT_OK : check_registration(f);
    if (rc)
        return rc;
    if (index < 0 || index >= f->nt)
        rc = mt__error(MT_EINVAL, "mt_fusion_ready: index %d is not a tensor (have %d)", index,
                       f->nt);
    else if (f->t[index].ready)
        rc = mt__error(MT_EINVAL, "mt_fusion_ready: tensor %d marked ready twice in one step",
                       index);
    if (rc) {
        if (!f->status) { /* reported to every rank by mt_fusion_wait */
            f->status = rc;
            snprintf(f->status_msg, sizeof f->status_msg, "%s", mt_last_error());
        }
        return rc;
    }
    f->t[index].ready = true;
    f->b[f->t[index].bucket].unready--;
    int upto = f->handed;
    while (upto < f->nb - 1 && f->b[upto].unready == 0) /* the last bucket: the wait's */
        upto++;
    if (upto > f->handed && f->threaded) /* without a thread, the wait reduces */
        hand_over(f, upto);
    return MT_OK;
}

int mt_fusion_wait(mt_fusion *f)
{
    MT__TRACE("fusion_wait", "fusion_wait");
    if (!f)
        return mt__error(MT_EINVAL, "mt_fusion_wait: fusion is NULL");
    NEED_COMM(f, "mt_fusion_wait");
    int rc = f->checked ? MT_OK : check_registration(f);
    if (rc)
        return rc;
    mt__call call;
    mt__call_init(&call, MT__CALL_FUSION_WAIT, 0, f->nt, 0);
    call.sig = mt__sig_mix(call.sig, f->sig);
    if (f->status)
        mt__error_set_text(f->status_msg);
    int64_t handed = f->handed;
    rc = mt__agree_max(f->comm, &call, f->status, NULL, &handed, 1);
    int upto = rc ? (int)handed : f->nb; /* on error: only what some rank already started */
    char msg[MT__MSG_LEN];
    snprintf(msg, sizeof msg, "%s", mt_last_error());
    mt__watch_data(); /* the buckets wait for every rank: a stop here is a stall */
    finish(f, upto);
    mt__watch_leave();
    if (!rc && f->thread_rc) {
        rc = f->thread_rc;
        snprintf(msg, sizeof msg, "%s", f->thread_msg);
    }
    float scale = 1.0f / (float)f->comm->size;
    for (int i = 0; i < f->nb && !rc && f->comm->size > 1 && !f->seg; i++) {
        bucket *b = &f->b[i];
        if (!b->buf) {
            if (b->base)
                scale_into(b->base, b->base, b->elems, scale);
            continue;
        }
        for (int k = b->first; k < b->first + b->n; k++) /* unpack and average in one pass */
            if (f->t[k].count)
                scale_into(f->t[k].ptr, b->buf + f->t[k].offset, f->t[k].count, scale);
    }
    for (int i = 0; i < f->nt; i++)
        f->t[i].ready = false;
    for (int i = 0; i < f->nb; i++)
        f->b[i].unready = f->b[i].n;
    f->status = f->thread_rc = MT_OK;
    if (rc)
        mt__error_set_text(msg);
    return rc;
}

void mt__fusion_set_chunk(size_t n)
{
    fusion_chunk = n > 0 && n <= INT_MAX ? n : INT_MAX;
}

int mt__fusion_buckets(const mt_fusion *f)
{
    return f ? f->nb : 0;
}

int mt__fusion_packed_buckets(const mt_fusion *f)
{
    int n = 0;
    for (int i = 0; f && i < f->nb; i++)
        n += f->b[i].buf != NULL;
    return n;
}

bool mt__fusion_shared(const mt_fusion *f)
{
    return f && f->seg;
}
