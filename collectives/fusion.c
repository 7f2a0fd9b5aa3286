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
 * From then on mt_fusion_destroy is collective too: a rank that destroys the fusion while
 * the others step meets their wait's agreement (a mismatch that names both calls), the
 * buckets handed over are completed there, and the others' fusions only wait to be
 * destroyed (locally).
 *
 * How a bucket is summed over the ranks and averaged is a backend's business
 * (fusion_backend.h): shared memory when every rank is on one node (fusion_shm.c),
 * MPI_Allreduce anywhere (fusion_mpi.c), or node by node with one leader per node on the
 * network (fusion_hier.c). Which one runs is decided at creation from the node layout
 * (topology.c) and the options, and under auto across nodes by timing the candidates at
 * the registration check (fusion_auto.c), on every rank the same. Memory from mt_fusion_alloc
 * lies in the node's shared segment when the backend shares memory, so buckets in it are
 * reduced straight from every rank's block; tensors that lie end to end in memory in
 * registration order are reduced in place by MPI. With one rank nothing moves at all.
 */
#include "fusion_backend.h"
#include "position.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef mt__ftensor tensor;
typedef mt__fbucket bucket;

struct mt_fusion {
    mt__comm *comm;       /* borrowed: agreements */
    MPI_Comm data;        /* owned: the backends' collectives (lent to them) */
    MPI_Comm node;        /* owned: this rank's node (lent to the shared-memory backends) */
    int num_nodes;
    size_t bucket_elems;
    mt_compression compression;
    mt_fusion_algo algo;  /* asked for (after the environment) */
    tensor *t;
    int nt;
    size_t tcap;
    bucket *b;
    int nb;
    size_t bcap;
    mt__fblock **blocks;  /* from mt_fusion_alloc, in allocation order */
    size_t nblocks, blocks_cap;
    bool checked;
    bool gone;            /* a rank destroyed it during a step: the rest of it is local */
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
    /* the backend that sums a bucket over the ranks (none with one rank), and under auto
     * until the registration check the other candidate (flat, with hier in be) */
    const mt__fusion_backend *be, *alt;
    void *be_state, *alt_state;
};


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
    mt__wire_thread_sleeps();
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

/* Local: the options with their zero fields from the environment (MT_FUSION_BYTES,
 * MT_FUSION_COMPRESS, MT_FUSION_ALGO), checked; *r gets them even on an error (what the
 * creation's agreement compares). */
static int resolve(const mt__comm *c, const mt_fusion_options *o, mt_fusion_options *r)
{
    *r = o ? *o : (mt_fusion_options){0};
    int word = 0;
    if ((unsigned)r->compression > MT_COMPRESS_BF16)
        return mt__error(MT_EINVAL, "rank %d: mt_fusion_options.compression must be "
                                    "MT_COMPRESS_NONE, _FP16 or _BF16 (got %d)", c->rank,
                         (int)r->compression);
    if ((unsigned)r->algo > MT_FUSION_HIER)
        return mt__error(MT_EINVAL, "rank %d: mt_fusion_options.algo must be MT_FUSION_AUTO, "
                                    "_FLAT, _SHM or _HIER (got %d)", c->rank, (int)r->algo);
    if (r->bucket_bytes == 0) {
        const char *env = getenv("MT_FUSION_BYTES");
        uint64_t v = (uint64_t)25 << 20;
        if (env && mt__parse_u64("MT_FUSION_BYTES", env, 1, (uint64_t)1 << 34, &v))
            return mt__error(MT_EINVAL, "rank %d: MT_FUSION_BYTES must be a positive number "
                                        "of bytes (got '%s'): %s", c->rank, env, mt_last_error());
        r->bucket_bytes = (size_t)v;
    }
    if (!r->compression) {
        if (mt__env_word("MT_FUSION_COMPRESS", MT__FUSION_COMPRESS_WORDS, &word))
            return mt__error(MT_EINVAL, "rank %d: %s", c->rank, mt_last_error());
        r->compression = (mt_compression)word;
    }
    if (!r->algo) {
        word = 0;
        if (mt__env_word("MT_FUSION_ALGO", MT__FUSION_ALGO_WORDS, &word))
            return mt__error(MT_EINVAL, "rank %d: %s", c->rank, mt_last_error());
        r->algo = (mt_fusion_algo)word;
    }
    return MT_OK;
}

/* Local part of the creation: the object in *fp. */
static int fusion_new(mt__comm *c, const mt_fusion_options *r, mt_fusion **out,
                      mt_fusion **fp)
{
    *fp = NULL;
    if (!out)
        return mt__error(MT_EINVAL, "mt_fusion_create: out is NULL");
    mt_fusion *f = mt__test_fail("fusion-alloc", c->rank) ? NULL : calloc(1, sizeof *f);
    if (!f)
        return mt__error(MT_ENOMEM, "rank %d: out of memory creating a fusion", c->rank);
    f->comm = c;
    f->data = f->node = MPI_COMM_NULL;
    f->bucket_elems = r->bucket_bytes / sizeof(float) ? r->bucket_bytes / sizeof(float) : 1;
    f->compression = r->compression;
    f->algo = r->algo;
    pthread_mutex_init(&f->lock, NULL);
    pthread_cond_init(&f->cond, NULL);
    *fp = f;
    return MT_OK;
}

/* Opens backend be into (*slot, *state); leaves them alone when it cannot serve. */
static int open_one(const mt__fusion_backend *be, const mt__fusion_where *w,
                    const mt__fusion_backend **slot, void **state)
{
    void *st = NULL;
    int rc = be->open(w, &st);
    if (!rc && st) {
        *slot = be;
        *state = st;
    }
    return rc;
}

/* Collective: the backends for these ranks, by the rule in mpitrain.h. The node layout
 * and MT_FUSION_SHM are agreed first, so every rank takes the same branch. */
static int open_backends(mt_fusion *f, mt__comm *c)
{
    int rc = MT_OK;
    mt__topology topo;
    if ((rc = mt__topology_node(c, &topo, &f->node)))
        return rc;
    f->num_nodes = topo.num_nodes;
    int v[2] = {mt__env_knob_bool("MT_FUSION_SHM", true), -topo.local_size}, all[2];
    int e = mt__test_mpi("fusion-layout-mpi", c->rank,
                         MPI_Allreduce(v, all, 2, MPI_INT, MPI_MIN, f->data));
    if (e != MPI_SUCCESS)
        rc = mt__mpi_error(e, "MPI_Allreduce (fusion layout)");
    mt__call call;
    mt__call_init(&call, MT__CALL_INTERNAL, 21, 0, 0);
    if ((rc = mt__agree(c, &call, rc, NULL))) /* every rank opens the same backends or none */
        goto out;
    bool shm_ok = all[0], crowded = -all[1] > 1; /* some node has several ranks */
    mt__fusion_where w = {.c = c, .data = f->data, .node = f->node,
                          .num_nodes = f->num_nodes, .compression = f->compression,
                          .forced = f->algo != MT_FUSION_AUTO};
    const char *name = mt_fusion_algo_word(f->algo);
    if ((f->algo == MT_FUSION_SHM || f->algo == MT_FUSION_HIER) && !shm_ok)
        return mt__error(MT_EINVAL, "rank %d: fusion algorithm %s needs shared memory, but "
                                    "MT_FUSION_SHM=0", c->rank, name);
    if (f->algo == MT_FUSION_SHM && f->num_nodes > 1)
        return mt__error(MT_EINVAL, "rank %d: fusion algorithm shm serves ranks on one node, "
                                    "and these are on %d (use hier or flat)", c->rank,
                         f->num_nodes);
    if (f->algo == MT_FUSION_SHM || (!f->algo && shm_ok && f->num_nodes == 1))
        rc = open_one(&mt__fusion_shm, &w, &f->be, &f->be_state);
    else if (f->algo == MT_FUSION_HIER || (!f->algo && shm_ok && crowded))
        rc = open_one(&mt__fusion_hier, &w, &f->be, &f->be_state);
    if (!rc && !f->be) /* flat, or auto's fall-back */
        rc = open_one(&mt__fusion_mpi, &w, &f->be, &f->be_state);
    else if (!rc && !f->algo && f->be == &mt__fusion_hier) /* timed against flat later */
        rc = open_one(&mt__fusion_mpi, &w, &f->alt, &f->alt_state);
out:
    return rc;
}

int mt__fusion_create(mt__comm *c, size_t bucket_bytes, mt_fusion **out)
{
    mt_fusion_options o = {.bucket_bytes = bucket_bytes};
    return mt__fusion_create_opts(c, &o, out);
}

int mt__fusion_create_opts(mt__comm *c, const mt_fusion_options *o, mt_fusion **out)
{
    int rc = MT_OK;
    if (out)
        *out = NULL;
    /* what can fail on one rank alone is agreed before the first collective, and the
     * collectives and the thread after them, so every rank has a fusion or none has */
    mt_fusion *f = NULL;
    mt_fusion_options r;
    rc = resolve(c, o, &r);
    if (!rc)
        rc = fusion_new(c, &r, out, &f);
    mt__call call;
    mt__call_init(&call, MT__CALL_FUSION_CREATE, 0, r.algo, r.compression);
    if ((rc = mt__agree(c, &call, rc, NULL)))
        goto fail;
    /* each collective step is agreed before the next, so an MPI error on one rank never
     * makes it skip what the others enter */
    int e = mt__test_mpi("fusion-dup-mpi", c->rank, MPI_Comm_dup(c->comm, &f->data));
    if (e != MPI_SUCCESS)
        rc = mt__mpi_error(e, "MPI_Comm_dup (fusion)");
    mt__call_init(&call, MT__CALL_INTERNAL, 22, 0, 0);
    if ((rc = mt__agree(c, &call, rc, NULL)))
        goto fail;
    if (c->size > 1 && (rc = open_backends(f, c)))
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


int mt_fusion_alloc(mt_fusion *f, size_t count, float **out)
{
    if (!f)
        return mt__error(MT_EINVAL, "mt_fusion_alloc: fusion is NULL");
    NEED_COMM(f, "mt_fusion_alloc");
    int rc = MT_OK, rank = f->comm->rank;
    mt__fblock *k = NULL;
    if (out)
        *out = NULL;
    if (!out)
        rc = mt__error(MT_EINVAL, "mt_fusion_alloc: out is NULL");
    else if (!count)
        rc = mt__error(MT_EINVAL, "mt_fusion_alloc: count must be > 0");
    else if (f->checked) /* blocks are for tensors, which must be added before */
        rc = mt__error(MT_EINVAL, "mt_fusion_alloc: blocks must be allocated before the "
                                  "first mt_fusion_ready or mt_fusion_wait");
    else if (MT__GROW(f->blocks, f->blocks_cap, f->nblocks + 1) ||
             mt__test_fail("fusion-block", rank) || !(k = calloc(1, sizeof *k)))
        rc = mt__error(MT_ENOMEM, "rank %d: out of memory allocating a fusion block", rank);
    mt__call call;
    mt__call_init(&call, MT__CALL_FUSION_ALLOC, count, 0, 0);
    if ((rc = mt__agree(f->comm, &call, rc, NULL)))
        goto fail;
    rc = mt__fblock_new(f->be, f->be_state, rank, count,
                   mt__test_fail("fusion-block-memory", rank), k);
    mt__call_init(&call, MT__CALL_INTERNAL, 8, 0, 0);
    if ((rc = mt__agree(f->comm, &call, rc, NULL)))
        goto fail;
    f->blocks[f->nblocks++] = k;
    *out = k->base + (size_t)k->me * k->stride;
    return MT_OK;
fail:
    if (k && k->base)
        mt__fblock_free(k);
    else
        free(k);
    return rc;
}

const char *mt_fusion_algo_name(const mt_fusion *f)
{
    if (!f)
        return NULL;
    return f->alt ? "auto" : f->be ? f->be->name : "none";
}

const char *mt_fusion_compression_name(const mt_fusion *f)
{
    return f ? mt_compression_word(f->compression) : NULL;
}

/* Collective, once the fusion has stepped: the destroy's agreement, which a rank still
 * in a step (in mt_fusion_wait, or about to be) meets as a mismatch, so both sides learn
 * it; then every rank completes the buckets any rank handed over, as a failed wait does,
 * so no communication thread is left in a reduction that a peer never joins. */
static void end_steps(mt_fusion *f)
{
    mt__call call;
    mt__call_init(&call, MT__CALL_FUSION_DESTROY, 0, f->nt, 0);
    call.sig = mt__sig_mix(call.sig, f->sig);
    int64_t v[2] = {f->handed, 1}; /* 1: a rank destroys it (the waits' second word) */
    mt__agree_max(f->comm, &call, MT_OK, NULL, v, 2); /* an error is in mt_last_error */
    mt__watch_data();
    finish(f, (int)v[0]);
    mt__watch_leave();
}

void mt_fusion_destroy(mt_fusion **fp)
{
    if (!fp || !*fp)
        return;
    mt_fusion *f = *fp;
    mt__live_remove(f);
    if (f->comm && f->checked && !f->gone && f->comm->size > 1)
        end_steps(f);
    if (f->threaded) {
        pthread_mutex_lock(&f->lock); /* nothing is left to take: the thread quits */
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
    if (f->alt)
        f->alt->close(f->alt_state);
    if (f->data != MPI_COMM_NULL)
        MPI_Comm_free(&f->data);
    if (f->node != MPI_COMM_NULL)
        MPI_Comm_free(&f->node);
    for (size_t i = 0; i < f->nblocks; i++)
        mt__fblock_free(f->blocks[i]);
    free(f->blocks);
    for (int i = 0; i < f->nb; i++)
        free(f->b[i].buf);
    free(f->b);
    free(f->t);
    free(f);
    *fp = NULL;
}

static int new_bucket(mt_fusion *f, int first)
{
    if (MT__GROW(f->b, f->bcap, (size_t)f->nb + 1))
        return mt__error(MT_ENOMEM, "out of memory adding a fusion bucket");
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
    if (MT__GROW(f->t, f->tcap, (size_t)f->nt + 1))
        return add_failed(f, mt__error(MT_ENOMEM, "out of memory adding a fusion tensor"));
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

/* The block tensor t lies in (this rank's own block of it), at *boff floats; or NULL. */
static mt__fblock *block_of(const mt_fusion *f, const tensor *t, size_t *boff)
{
    uintptr_t p = (uintptr_t)t->ptr;
    for (size_t i = 0; i < f->nblocks; i++) {
        mt__fblock *k = f->blocks[i];
        uintptr_t own = (uintptr_t)(k->base + (size_t)k->me * k->stride);
        size_t at = (size_t)(p - own) / sizeof(float);
        if (p >= own && (p - own) % sizeof(float) == 0 && at <= k->count &&
            t->count <= k->count - at) {
            *boff = at;
            return k;
        }
    }
    return NULL;
}

/* Local: each bucket's layout (end to end in memory? in blocks?) and, where a backend
 * packs, its buffer; *layout gets a signature of where the tensors lie in the blocks. */
static int lay_out(mt_fusion *f, uint64_t *layout, size_t *elems, size_t *most)
{
    bool packs = (f->be && f->be->packs) || (f->alt && f->alt->packs);
    for (int i = 0; i < f->nt; i++) {
        tensor *t = &f->t[i];
        t->blk = t->count ? block_of(f, t, &t->boff) : NULL;
        for (size_t k = 0; t->blk && k < f->nblocks; k++)
            if (f->blocks[k] == t->blk)
                *layout = mt__sig_mix(mt__sig_mix(*layout, k + 1), t->boff);
        if (!t->blk)
            *layout = mt__sig_mix(*layout, 0);
    }
    for (int i = 0; i < f->nb; i++) {
        bucket *b = &f->b[i];
        *elems += b->elems;
        *most = b->elems > *most ? b->elems : *most;
        b->unready = b->n;
        /* end to end in memory (zero-size tensors aside): reduce in place, no copies */
        float *next = NULL;
        bool adjacent = true;
        b->base = NULL;
        for (int k = b->first; k < b->first + b->n; k++) {
            if (!f->t[k].count)
                continue;
            if (!b->base) {
                b->base = f->t[k].ptr;
                b->head = k;
            } else if (f->t[k].ptr != next)
                adjacent = false;
            next = f->t[k].ptr + f->t[k].count;
        }
        b->adjacent = adjacent && b->base;
        if (!adjacent && f->comm->size > 1 && packs && !b->buf &&
            !(b->buf = malloc(b->elems * sizeof(float))))
            return mt__error(MT_ENOMEM, "out of memory for a fusion bucket of %zu floats",
                             b->elems);
    }
    return MT_OK;
}

/* Agreed: whether the buckets lie in shared blocks at the same offsets on every rank. */
static void mark_shared(mt_fusion *f, bool same_layout)
{
    for (int i = 0; i < f->nb; i++) {
        bucket *b = &f->b[i];
        bool in = same_layout && b->elems > 0;
        for (int k = b->first; in && k < b->first + b->n; k++)
            in = !f->t[k].count || (f->t[k].blk && f->t[k].blk->map);
        b->shared = in;
    }
}


/* Collective, at the registration check under auto with two candidates (hier in be,
 * flat in alt): the contest (fusion_auto.c) decides, the same on every rank; the loser
 * is closed. */
static int choose(mt_fusion *f)
{
    bool hier_wins = false;
    int rc = mt__fusion_time(f->comm, f->data, f->b, f->nb, f->be, f->be_state, f->alt,
                             f->alt_state, &hier_wins);
    if (rc)
        return rc;
    const mt__fusion_backend *lose = hier_wins ? f->alt : f->be;
    lose->close(hier_wins ? f->alt_state : f->be_state);
    if (!hier_wins) {
        f->be = f->alt;
        f->be_state = f->alt_state;
        for (int i = 0; i < f->nb; i++)
            f->b[i].shared = false; /* nothing reads the blocks across ranks now */
    } else
        for (int i = 0; i < f->nb; i++) { /* hier does not pack */
            free(f->b[i].buf);
            f->b[i].buf = NULL;
        }
    f->alt = NULL;
    f->alt_state = NULL;
    return MT_OK;
}

/* Collective, once: every rank registered the same tensors; buffers for the layout;
 * under auto with two candidates, the choice. */
static int check_registration(mt_fusion *f)
{
    uint64_t layout = 0;
    size_t elems = 0, most = 0;
    int rc = lay_out(f, &layout, &elems, &most);
    if (!rc && f->be && f->be->prepare)
        rc = f->be->prepare(f->be_state, most);
    if (!rc && f->alt && f->alt->prepare)
        rc = f->alt->prepare(f->alt_state, most);
    mt__call call;
    mt__call_init(&call, MT__CALL_FUSION_CHECK, elems, f->nt, f->nb);
    call.sig = mt__sig_mix(call.sig, f->sig);
    if (!rc && f->status) { /* an add failed here */
        mt__error_set_text(f->status_msg);
        rc = f->status;
    }
    /* the blocks' layout compared by its maximum and minimum: a rank whose tensors lie
     * elsewhere in its blocks makes every bucket go the copying way, not an error */
    int64_t v[2] = {(int64_t)(layout >> 1), -(int64_t)(layout >> 1)};
    rc = mt__agree_max(f->comm, &call, rc, NULL, v, 2);
    if (!rc)
        mark_shared(f, v[0] == -v[1]);
    if (!rc && f->alt)
        rc = choose(f);
    f->checked = rc == MT_OK;
    return rc;
}

/* A rank destroyed the fusion during a step: the others can only destroy theirs. */
#define NOT_GONE(f, fn)                                                       \
    if ((f)->gone)                                                            \
        return mt__error(MT_EINVAL, fn ": another rank destroyed this fusion during a step; "\
                                       "destroy it here too");

int mt_fusion_ready(mt_fusion *f, int index)
{
    if (!f)
        return mt__error(MT_EINVAL, "mt_fusion_ready: fusion is NULL");
    NEED_COMM(f, "mt_fusion_ready");
    NOT_GONE(f, "mt_fusion_ready");
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
    NOT_GONE(f, "mt_fusion_wait");
    int rc = f->checked ? MT_OK : check_registration(f);
    if (rc)
        return rc;
    mt__call call;
    mt__call_init(&call, MT__CALL_FUSION_WAIT, 0, f->nt, 0);
    call.sig = mt__sig_mix(call.sig, f->sig);
    if (f->status)
        mt__error_set_text(f->status_msg);
    int64_t v[2] = {f->handed, 0};
    rc = mt__agree_max(f->comm, &call, f->status, NULL, v, 2);
    int upto = rc ? (int)v[0] : f->nb; /* on error: only what some rank already started */
    f->gone = v[1] != 0; /* met a rank's mt_fusion_destroy: that rank has no fusion now */
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

int mt__fusion_block_buckets(const mt_fusion *f)
{
    int n = 0;
    for (int i = 0; f && i < f->nb; i++)
        n += f->b[i].shared;
    return n;
}
