/*
 * plan.c -- a shard's epoch plan: which rows of the file each window of this rank reads,
 * made without ever listing the blocks. The cost is in the windows a rank reads, never in
 * the rows or the blocks of the dataset: planning an epoch of 10^10 rows is the same few
 * operations as one of 10^6, and each window costs its own blocks.
 *
 * The dataset is cut into blocks of B rows (the last one shorter); an epoch's order of
 * blocks is a permutation of [0, nblocks) given by a function, not a table: a 4-round
 * Feistel network over the smallest even number of bits that holds nblocks, keyed by the
 * seed and the epoch, with cycle-walking back into [0, nblocks) (a bijection: every block
 * exactly once), or the identity without shuffling. Every rank evaluates the same
 * function, so the plan is the same everywhere without communication. A position in the
 * epoch's sequence of rows maps to its block in O(1): every block before the short last
 * one starts at i * B, every block after it B - (its length) earlier; where the short
 * block sits is the inverse permutation of its number.
 *
 * A rank's rows are positions [base, base + rows) of that sequence (split datasets: its
 * contiguous part; others: all); window k is [k W, k W + W) of them. Its runs are read in
 * file order (a union of hyperslabs is read that way), so they are sorted and touching
 * runs merged.
 */
#include "runtime.h"

#include <stdlib.h>

static uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t round_fn(const mt__plan *p, int r, uint64_t half)
{
    return mix(p->key + 0x9e3779b97f4a7c15ULL * (uint64_t)(r + 1) + half);
}

static uint64_t feistel(const mt__plan *p, uint64_t x)
{
    uint64_t m = ((uint64_t)1 << p->half_bits) - 1, l = x >> p->half_bits, r = x & m;
    for (int i = 0; i < 4; i++) {
        uint64_t t = r;
        r = (l ^ round_fn(p, i, r)) & m;
        l = t;
    }
    return l << p->half_bits | r;
}

static uint64_t feistel_inverse(const mt__plan *p, uint64_t y)
{
    uint64_t m = ((uint64_t)1 << p->half_bits) - 1, l = y >> p->half_bits, r = y & m;
    for (int i = 3; i >= 0; i--) {
        uint64_t t = l;
        l = (r ^ round_fn(p, i, l)) & m;
        r = t;
    }
    return l << p->half_bits | r;
}

/* The block at place i of the epoch's order, and the place of block b. */
static int64_t block_at(const mt__plan *p, int64_t i)
{
    if (!p->shuffle)
        return i;
    uint64_t x = (uint64_t)i;
    do /* cycle-walking: the domain holds at most 4 nblocks values */
        x = feistel(p, x);
    while (x >= (uint64_t)p->nblocks);
    return (int64_t)x;
}

static int64_t place_of(const mt__plan *p, int64_t b)
{
    if (!p->shuffle)
        return b;
    uint64_t x = (uint64_t)b;
    do
        x = feistel_inverse(p, x);
    while (x >= (uint64_t)p->nblocks);
    return (int64_t)x;
}

void mt__plan_make(mt__plan *p, int64_t n, int64_t B, bool shuffle, uint64_t seed, int epoch,
                   int64_t base, int64_t rows)
{
    *p = (mt__plan){.n = n, .B = B, .shuffle = shuffle, .base = base, .rows = rows};
    p->nblocks = (n + B - 1) / B;
    p->last_len = n - (p->nblocks - 1) * B;
    int bits = 1;
    while (bits < 31 && ((uint64_t)1 << (2 * bits)) < (uint64_t)p->nblocks)
        bits++;
    p->half_bits = bits;
    p->key = mix(seed * 0x100000001b3ULL ^ (uint64_t)epoch ^ 0x5bd1e995ULL);
    p->short_place = place_of(p, p->nblocks - 1);
}

/* The place in the order whose block holds sequence position g, and where it starts. */
static int64_t place_at(const mt__plan *p, int64_t g, int64_t *start)
{
    int64_t s = p->short_place, cut = s * p->B + p->last_len, d = p->B - p->last_len;
    int64_t i = g < cut ? g / p->B : (g + d) / p->B;
    *start = i <= s ? i * p->B : i * p->B - d;
    return i;
}

static int by_start(const void *a, const void *b)
{
    int64_t x = ((const mt__run *)a)->start, y = ((const mt__run *)b)->start;
    return x < y ? -1 : x > y;
}

int mt__plan_runs(const mt__plan *p, int64_t lo, int64_t hi, mt__run **out, int *nout,
                  const char *name)
{
    *out = NULL;
    *nout = 0;
    if (hi > p->rows)
        hi = p->rows;
    if (lo >= hi)
        return MT_OK;
    int64_t g = p->base + lo, end = p->base + hi, start;
    int64_t i = place_at(p, g, &start), most = (end - g) / p->B + 3;
    if (most > INT32_MAX)
        return mt__error(MT_ENOMEM, "%s: a window of %lld rows spans too many blocks", name,
                         (long long)(hi - lo));
    mt__run *r = malloc((size_t)most * sizeof *r);
    if (!r)
        return mt__error(MT_ENOMEM, "out of memory reading %s", name);
    int n = 0;
    for (; g < end; i++) {
        int64_t b = block_at(p, i), len = b == p->nblocks - 1 ? p->last_len : p->B;
        int64_t take = start + len < end ? start + len - g : end - g;
        r[n++] = (mt__run){b * p->B + (g - start), take};
        g += take;
        start += len;
    }
    qsort(r, (size_t)n, sizeof *r, by_start);
    int m = 0;
    for (int k = 0; k < n; k++) {
        if (m && r[m - 1].start + r[m - 1].count == r[k].start)
            r[m - 1].count += r[k].count;
        else
            r[m++] = r[k];
    }
    *out = r;
    *nout = m;
    return MT_OK;
}
