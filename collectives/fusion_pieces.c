/*
 * fusion_pieces.c -- what the fusion (fusion.c) and its backends (fusion_backend.h) both
 * use: a bucket's pieces (the tensors covering its flat elements), copying them in and
 * averaging into them, the largest step a backend moves at once, and the blocks that
 * mt_fusion_alloc hands out. It reaches neither the fusion object nor any backend's
 * state, so the backends depend on it and never on fusion.c.
 */
#include "fusion_backend.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

typedef mt__ftensor tensor;
typedef mt__fbucket bucket;

static size_t fusion_chunk = INT_MAX;

/* Vectorised whatever the -O level: the averaging pass touches every gradient float
 * once per step. */
__attribute__((optimize("tree-vectorize"))) void mt__fusion_scale(float *dst, const float *src,
                                                                  size_t n, float s)
{
    if (dst == src) {
        if (s != 1.0f)
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

void mt__fusion_pieces(const bucket *b, const tensor *tensors, size_t from, size_t n,
                       mt__fpiece_fn fn, void *arg)
{
    if (b->adjacent) { /* end to end: one piece */
        fn(&tensors[b->head], from, from, n, arg);
        return;
    }
    for (int k = b->first; k < b->first + b->n; k++) {
        const tensor *t = &tensors[k];
        size_t lo = t->offset > from ? t->offset : from;
        size_t hi = t->offset + t->count < from + n ? t->offset + t->count : from + n;
        if (lo < hi)
            fn(t, lo - t->offset, lo, hi - lo, arg);
    }
}

typedef struct {
    float *flat;      /* where element `from` goes or comes from */
    size_t from;
    float scale;
} piece_io;

static void copy_in(const tensor *t, size_t in, size_t at, size_t cnt, void *arg)
{
    piece_io *io = arg;
    memcpy(io->flat + (at - io->from), t->ptr + in, cnt * sizeof(float));
}

static void copy_out(const tensor *t, size_t in, size_t at, size_t cnt, void *arg)
{
    piece_io *io = arg;
    mt__fusion_scale(t->ptr + in, io->flat + (at - io->from), cnt, io->scale);
}

void mt__fusion_gather(const bucket *b, const tensor *t, size_t from, size_t n, float *dst)
{
    piece_io io = {dst, from, 1.0f};
    mt__fusion_pieces(b, t, from, n, copy_in, &io);
}

void mt__fusion_average(const bucket *b, const tensor *t, size_t from, size_t n,
                        const float *sum, float scale)
{
    piece_io io = {(float *)sum, from, scale};
    mt__fusion_pieces(b, t, from, n, copy_out, &io);
}

void mt__fusion_set_chunk(size_t n)
{
    fusion_chunk = n > 0 && n <= INT_MAX ? n : INT_MAX;
}

/* ------------------------------------------------------------ blocks */

/* The block's memory (local: the other ranks keep their mappings). */
void mt__fblock_release(mt__fblock *k)
{
    if (k->map)
        munmap(k->map, k->map_bytes);
    else
        free(k->base);
    *k = (mt__fblock){0};
}

void mt__fblock_free(mt__fblock *k)
{
    if (k)
        mt__fblock_release(k);
    free(k);
}

/* Collective over the backend's node: count zeroed floats in k, shared when backend be
 * (may be NULL) shares memory and the system gives the mapping, else this rank's own
 * aligned memory; `fail` (a fault site) makes this rank's part fail. */
int mt__fblock_new(const mt__fusion_backend *be, void *state, int rank, size_t count,
                   bool fail, mt__fblock *k)
{
    int rc = be && be->alloc ? be->alloc(state, count, fail, k) : MT_OK;
    if (rc || k->base)
        return rc;
    void *p = NULL;
    if (fail || count > SIZE_MAX / sizeof(float) ||
        posix_memalign(&p, 64, count * sizeof(float)) != 0)
        return mt__error(MT_ENOMEM, "rank %d: out of memory for a fusion block of %zu floats",
                         rank, count);
    memset(p, 0, count * sizeof(float));
    *k = (mt__fblock){.base = p, .stride = count, .count = count, .nranks = 1};
    return MT_OK;
}
