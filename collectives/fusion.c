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
 * overlap the caller's backward pass. The thread hands a bucket to the backend, which
 * reduces it blocking (on a private communicator, or in shared memory) while the caller
 * computes (this needs MPI_THREAD_MULTIPLE; without it, every bucket is reduced inside
 * mt_fusion_wait).
 *
 * mt_fusion_wait passes one agreement before it waits. It carries each rank's status and
 * how many buckets it handed over (always a prefix in bucket order). On success every
 * bucket is reduced and averaged. On an error anywhere, every rank still completes the
 * buckets up to the largest prefix any rank handed over, so no thread is left inside a
 * collective that its peers never join, and then returns the error; tensor contents are
 * unspecified after that step, and the fusion can be used again.
 * Registration (count and sizes) is checked across ranks once, at the first ready or wait.
 *
 * How a bucket is summed over the ranks and averaged is a backend's business
 * (fusion_backend.h): through a shared-memory segment when every rank is on one node
 * (fusion_shm.c), else MPI_Allreduce (fusion_mpi.c). Tensors that lie end to end in
 * memory in registration order (allocate a model's gradients as one block) are reduced
 * in place: no packing copy and no unpacking copy. With one rank nothing moves at all.
 */
#include "fusion_backend.h"
#include "watchdog.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef mt__ftensor tensor;
typedef mt__fbucket bucket;

struct mt_fusion {
    mt__comm *comm;       /* borrowed: agreements */
    MPI_Comm data;        /* owned: the backend's collectives (lent to it) */
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
    /* the backend that sums a bucket over the ranks (none with one rank) */
    const mt__fusion_backend *be;
    void *be_state;
};

static size_t fusion_chunk = INT_MAX;

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

size_t mt__fusion_chunk(void)
{
    return fusion_chunk;
}

/* Visits the pieces of bucket b's tensors (in t) that cover flat elements
 * [from, from + n): fn(tensor data, bucket-relative element, count, arg). */
static void pieces(const bucket *b, const tensor *tensors, size_t from, size_t n,
                   void (*fn)(float *t, size_t at, size_t cnt, void *arg), void *arg)
{
    if (b->adjacent) { /* end to end: one piece */
        fn(b->base + from, from, n, arg);
        return;
    }
    for (int k = b->first; k < b->first + b->n; k++) {
        const tensor *t = &tensors[k];
        size_t lo = t->offset > from ? t->offset : from;
        size_t hi = t->offset + t->count < from + n ? t->offset + t->count : from + n;
        if (lo < hi)
            fn(t->ptr + (lo - t->offset), lo, hi - lo, arg);
    }
}

typedef struct {
    float *flat;      /* where element `from` goes or comes from */
    size_t from;
    float scale;
} piece_io;

static void copy_in(float *t, size_t at, size_t cnt, void *arg)
{
    piece_io *io = arg;
    memcpy(io->flat + (at - io->from), t, cnt * sizeof(float));
}

static void copy_out(float *t, size_t at, size_t cnt, void *arg)
{
    piece_io *io = arg;
    scale_into(t, io->flat + (at - io->from), cnt, io->scale);
}

void mt__fusion_gather(const bucket *b, const tensor *t, size_t from, size_t n, float *dst)
{
    piece_io io = {dst, from, 1.0f};
    pieces(b, t, from, n, copy_in, &io);
}

void mt__fusion_average(const bucket *b, const tensor *t, size_t from, size_t n,
                        const float *sum, float scale)
{
    piece_io io = {(float *)sum, from, scale};
    pieces(b, t, from, n, copy_out, &io);
}

/* Sum one bucket across ranks and average it into its tensors (blocking). */
static int reduce_bucket(mt_fusion *f, bucket *b)
{
    MT__TRACE_ARG("fusion", "bucket", b - f->b);
    if (f->comm->size == 1) /* the average over one rank is the tensor itself */
        return MT_OK;
    return f->be->reduce(f->be_state, b, f->t);
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

/* Collective: the first backend that can serve these ranks (a later one, e.g. across
 * nodes, goes in front of MPI, which serves any). */
static int open_backend(mt_fusion *f, mt__comm *c)
{
    static const mt__fusion_backend *const order[] = {&mt__fusion_shm, &mt__fusion_mpi};
    for (size_t i = 0; i < sizeof order / sizeof *order && !f->be; i++) {
        void *state = NULL;
        int rc = order[i]->open(c, f->data, &state);
        if (rc)
            return rc;
        if (state) {
            f->be = order[i];
            f->be_state = state;
        }
    }
    return MT_OK;
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
    if ((rc = open_backend(f, c)))
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
    if (f->be)
        f->be->close(f->be_state); /* local: no rank waits for another here */
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
        if (!adjacent && f->comm->size > 1 && f->be->packs &&
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
    return f && f->be == &mt__fusion_shm;
}
