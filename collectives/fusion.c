/*
 * fusion.c -- gradient buckets (mt_fusion): many tensors, few collectives.
 *
 * Tensors are registered in a fixed order and packed into buckets of at most
 * bucket_bytes (a larger tensor gets a bucket of its own). A bucket's reduction starts
 * (MPI_Iallreduce) once every tensor in it is marked ready, but buckets always start in
 * bucket order: nonblocking collectives must be issued in the same order on every rank,
 * and ranks may mark tensors ready in different orders. Register tensors in the order
 * their gradients become ready (last layer first) and the buckets start while the
 * caller's backward pass goes on.
 *
 * The reductions run on a private communicator, so they never meet the agreement
 * traffic. mt_fusion_wait passes one agreement before it waits: if any rank failed during
 * the step, every rank returns the error without waiting for reductions that some ranks
 * never started (those requests are abandoned and the object is unusable afterwards).
 * Registration (count and sizes) is checked across ranks once, at the first ready or
 * wait call.
 */
#include "collectives.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    float *buf;           /* packing buffer; NULL when the bucket is one tensor */
    MPI_Request *req;
    int nreq;
    bool launched;
} bucket;

struct mt_fusion {
    mt__comm *comm;       /* borrowed: agreements */
    MPI_Comm data;        /* owned: reductions */
    size_t bucket_elems;
    tensor *t;
    int nt, tcap;
    bucket *b;
    int nb, bcap;
    int next_launch;
    bool checked, broken;
    int status;           /* first local error of this step, and its message */
    char status_msg[MT__MSG_LEN];
    uint64_t sig;
};

static size_t fusion_chunk = INT_MAX;

int mt__fusion_create(mt__comm *c, size_t bucket_bytes, mt_fusion **out)
{
    int rc = MT_OK;
    if (!out)
        return mt__error(MT_EINVAL, "mt_fusion_create: out is NULL");
    *out = NULL;
    if (bucket_bytes == 0) {
        const char *env = getenv("MT_FUSION_BYTES");
        char *end = NULL;
        unsigned long long v = env ? strtoull(env, &end, 10) : 0;
        if (env && (!*env || *end || v == 0))
            return mt__error(MT_EINVAL, "MT_FUSION_BYTES must be a positive number of bytes "
                                        "(got '%s')", env);
        bucket_bytes = v ? (size_t)v : (size_t)25 << 20;
    }
    mt_fusion *f = calloc(1, sizeof *f);
    MT__CHECK(f, MT_ENOMEM, fail, "out of memory creating a fusion");
    f->comm = c;
    f->data = MPI_COMM_NULL;
    f->bucket_elems = bucket_bytes / sizeof(float) ? bucket_bytes / sizeof(float) : 1;
    MT__MPI(MPI_Comm_dup(c->comm, &f->data), fail);
    *out = f;
    return MT_OK;
fail:
    mt_fusion_destroy(&f);
    return rc;
}

static void free_buckets(mt_fusion *f)
{
    for (int i = 0; i < f->nb; i++) {
        free(f->b[i].buf);
        free(f->b[i].req);
    }
    free(f->b);
    f->b = NULL;
    f->nb = f->bcap = 0;
}

void mt_fusion_destroy(mt_fusion **fp)
{
    if (!fp || !*fp)
        return;
    mt_fusion *f = *fp;
    if (f->data != MPI_COMM_NULL)
        MPI_Comm_free(&f->data);
    free_buckets(f);
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

int mt_fusion_add(mt_fusion *f, float *tensor_ptr, size_t count)
{
    if (!f)
        return mt__error(MT_EINVAL, "mt_fusion_add: fusion is NULL");
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
            return mt__error(MT_ENOMEM, "out of memory adding a fusion tensor");
        f->t = t;
        f->tcap = cap;
    }
    int idx = f->nt;
    bucket *last = f->nb ? &f->b[f->nb - 1] : NULL;
    bool fits = last && (last->elems + count <= f->bucket_elems || count == 0) &&
                !(last->n == 1 && last->elems > f->bucket_elems);
    int bi = fits ? f->nb - 1 : new_bucket(f, idx);
    if (bi < 0)
        return bi;
    bucket *b = &f->b[bi];
    f->t[idx] = (tensor){.ptr = tensor_ptr, .count = count, .offset = b->elems, .bucket = bi};
    b->elems += count;
    b->n++;
    f->nt++;
    f->sig = mt__sig_mix(mt__sig_mix(f->sig, count), (uint64_t)bi);
    return idx;
}

/* Buffers and per-step counters, once the layout is final. */
static int prepare(mt_fusion *f)
{
    for (int i = 0; i < f->nb; i++) {
        bucket *b = &f->b[i];
        b->nreq = (int)((b->elems + fusion_chunk - 1) / fusion_chunk);
        b->req = calloc((size_t)(b->nreq ? b->nreq : 1), sizeof *b->req);
        if (b->n > 1 && b->elems)
            b->buf = malloc(b->elems * sizeof(float));
        if (!b->req || (b->n > 1 && b->elems && !b->buf))
            return mt__error(MT_ENOMEM, "out of memory for fusion buckets (%zu floats)",
                             b->elems);
        b->unready = b->n;
    }
    return MT_OK;
}

/* Collective, once: every rank registered the same tensors. */
static int check_registration(mt_fusion *f)
{
    size_t elems = 0;
    for (int i = 0; i < f->nt; i++)
        elems += f->t[i].count;
    int rc = prepare(f);
    mt__call call;
    mt__call_init(&call, MT__CALL_FUSION, f->sig, "fusion-check(tensors=%d, floats=%zu, "
                  "buckets=%d)", f->nt, elems, f->nb);
    rc = mt__agree(f->comm, &call, rc, NULL);
    f->checked = true;
    if (rc)
        f->broken = true;
    return rc;
}

static float *bucket_data(const mt_fusion *f, const bucket *b)
{
    return b->buf ? b->buf : f->t[b->first].ptr;
}

static int launch(mt_fusion *f, bucket *b)
{
    int rc = MT_OK;
    for (int k = b->first; k < b->first + b->n && b->buf; k++)
        if (f->t[k].count)
            memcpy(b->buf + f->t[k].offset, f->t[k].ptr, f->t[k].count * sizeof(float));
    float *data = bucket_data(f, b);
    for (int r = 0; r < b->nreq; r++) {
        size_t off = (size_t)r * fusion_chunk;
        size_t n = b->elems - off < fusion_chunk ? b->elems - off : fusion_chunk;
        MT__MPI(MPI_Iallreduce(MPI_IN_PLACE, data + off, (int)n, MPI_FLOAT, MPI_SUM, f->data,
                               &b->req[r]), out);
    }
    b->launched = true;
out:
    return rc;
}

/* Start every complete bucket that is next in order; let started ones progress. */
static int launch_in_order(mt_fusion *f)
{
    int rc = MT_OK;
    while (f->next_launch < f->nb && f->b[f->next_launch].unready == 0) {
        rc = launch(f, &f->b[f->next_launch++]);
        if (rc)
            return rc;
    }
    for (int i = 0; i < f->next_launch; i++) { /* progress (Open MPI has no async thread) */
        int done;
        if (f->b[i].nreq)
            MPI_Testall(f->b[i].nreq, f->b[i].req, &done, MPI_STATUSES_IGNORE);
    }
    return rc;
}

int mt_fusion_ready(mt_fusion *f, int index)
{
    if (!f)
        return mt__error(MT_EINVAL, "mt_fusion_ready: fusion is NULL");
    if (f->broken)
        return mt__error(MT_EINVAL, "mt_fusion_ready: this fusion failed earlier; create a new one");
    if (!f->checked) {
        int rc = check_registration(f);
        if (rc)
            return rc;
    }
    int rc = MT_OK;
    if (index < 0 || index >= f->nt)
        rc = mt__error(MT_EINVAL, "mt_fusion_ready: index %d is not a tensor (have %d)", index,
                       f->nt);
    else if (f->t[index].ready)
        rc = mt__error(MT_EINVAL, "mt_fusion_ready: tensor %d marked ready twice in one step",
                       index);
    if (!rc) {
        f->t[index].ready = true;
        f->b[f->t[index].bucket].unready--;
        rc = launch_in_order(f);
    }
    if (rc && !f->status) { /* reported to every rank by mt_fusion_wait */
        f->status = rc;
        snprintf(f->status_msg, sizeof f->status_msg, "%s", mt_last_error());
    }
    return rc;
}

int mt_fusion_wait(mt_fusion *f)
{
    if (!f)
        return mt__error(MT_EINVAL, "mt_fusion_wait: fusion is NULL");
    if (f->broken)
        return mt__error(MT_EINVAL, "mt_fusion_wait: this fusion failed earlier; create a new one");
    if (!f->checked) {
        int rc = check_registration(f);
        if (rc)
            return rc;
    }
    mt__call call;
    mt__call_init(&call, MT__CALL_FUSION, f->sig, "fusion-wait(tensors=%d)", f->nt);
    if (f->status)
        mt__error_set_text(f->status_msg);
    int rc = mt__agree(f->comm, &call, f->status, NULL);
    if (rc) {
        f->broken = true; /* some ranks may have reductions in flight that others never started */
        return rc;
    }
    for (int i = 0; i < f->nb; i++)
        f->b[i].unready = 0;
    rc = launch_in_order(f);
    float scale = 1.0f / (float)f->comm->size;
    for (int i = 0; i < f->nb && !rc; i++) {
        bucket *b = &f->b[i];
        MT__MPI(MPI_Waitall(b->nreq, b->req, MPI_STATUSES_IGNORE), out);
        float *data = bucket_data(f, b);
        for (size_t k = 0; k < b->elems; k++)
            data[k] *= scale;
        for (int k = b->first; k < b->first + b->n && b->buf; k++)
            if (f->t[k].count)
                memcpy(f->t[k].ptr, b->buf + f->t[k].offset, f->t[k].count * sizeof(float));
    }
out:
    for (int i = 0; i < f->nt; i++)
        f->t[i].ready = false;
    for (int i = 0; i < f->nb; i++) {
        f->b[i].unready = f->b[i].n;
        f->b[i].launched = false;
    }
    f->next_launch = 0;
    if (rc)
        f->broken = true;
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
