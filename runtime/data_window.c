/*
 * data_window.c -- a shard's held buffers, the epoch's plan, and its windows with their
 * read-ahead thread (the rules are data.c's invariants; the layouts are in shard.h).
 */
#include "shard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------ held buffers */

void *mt__shard_rb_alloc(size_t bytes)
{
    rb_head *h = malloc(sizeof *h + (bytes ? bytes : 1));
    if (!h)
        return NULL;
    atomic_init(&h->refs, 1);
    h->bytes = bytes;
    return (char *)h + sizeof *h;
}

void mt__shard_rb_unref(void *p)
{
    if (p && atomic_fetch_sub_explicit(&RB_HEAD(p)->refs, 1, memory_order_acq_rel) == 1)
        free(RB_HEAD(p));
}

void mt__shard_rb_ref(void *p)
{
    atomic_fetch_add_explicit(&RB_HEAD(p)->refs, 1, memory_order_relaxed);
}

/* Before the shard writes into *p: a buffer someone holds is left to them and replaced
 * by a fresh one of the same size. */
int mt__shard_rb_own(void **p)
{
    if (!*p || atomic_load_explicit(&RB_HEAD(*p)->refs, memory_order_acquire) == 1)
        return MT_OK;
    void *fresh = mt__shard_rb_alloc(RB_HEAD(*p)->bytes);
    if (!fresh)
        return mt__error(MT_ENOMEM, "out of memory replacing a held batch buffer (%zu bytes)",
                         RB_HEAD(*p)->bytes);
    mt__shard_rb_unref(*p);
    *p = fresh;
    return MT_OK;
}

/* ------------------------------------------------------------ random numbers */

static uint64_t splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t below(uint64_t *x, uint64_t n)
{
    return splitmix(x) % n; /* bias is negligible for n << 2^64 */
}

/* ------------------------------------------------------------ plan */

bool mt__shard_is_split(const mt_data_config *d, const char *name)
{
    if (!d->datasets_to_split)
        return true;
    for (size_t i = 0; d->datasets_to_split[i]; i++)
        if (!strcmp(d->datasets_to_split[i], name))
            return true;
    return false;
}

/* Rows of a block: about 1 MiB, and at least 16 blocks per rank when rows allow. The plan
 * (plan.c) never lists blocks, so their number costs nothing. */
static int64_t block_rows(const mt_shard *s)
{
    int64_t n = s->g->rows, p = s->split ? s->ctx->world_size : 1;
    int64_t by_bytes = (int64_t)((1u << 20) / (s->row_bytes ? s->row_bytes : 1));
    int64_t by_count = n / (16 * p);
    int64_t b = by_bytes < by_count ? by_bytes : by_count;
    return b > 0 ? b : 1;
}

void mt__shard_plan_epoch(mt_shard *s)
{
    int64_t base = s->split ? (int64_t)s->ctx->world_rank * s->rows : 0;
    mt__plan_make(&s->plan, s->g->rows, block_rows(s), s->opt.shuffle, s->opt.seed, s->epoch,
                  base, s->rows);
}

/* The runs covering window k: positions [k*W, k*W + W) of this rank's rows. */
static int window_runs(const mt_shard *s, int64_t k, mt__run **out, int *nout)
{
    return mt__plan_runs(&s->plan, k * s->W, k * s->W + s->W, out, nout, s->name);
}

static int read_window(mt_shard *s, window *w, int64_t k)
{
    mt__run *runs = NULL;
    int n = 0;
    int rc = window_runs(s, k, &runs, &n);
    w->rows = 0;
    for (int i = 0; i < n; i++)
        w->rows += runs[i].count;
    for (int c = 0; c < s->g->ncols && !rc; c++)
        if (!(rc = mt__shard_rb_own(&w->cols[c])))
            rc = mt__h5group_read(s->g, c, runs, n, s->mem[c], w->cols[c]);
    free(runs);
    w->index = k;
    w->rc = rc;
    if (rc)
        snprintf(w->msg, sizeof w->msg, "%s", mt_last_error());
    return rc;
}

static void *read_ahead(void *arg)
{
    struct ahead_job *j = arg;
    read_window(j->s, j->w, j->k);
    return NULL;
}

void mt__shard_join_ahead(mt_shard *s)
{
    if (s->ahead_running) {
        pthread_join(s->ahead, NULL);
        s->ahead_running = false;
    }
}

void mt__shard_start_ahead(mt_shard *s, int64_t k)
{
    window *w = &s->win[1 - s->cur];
    s->ahead_next = 0;
    if (k >= s->nwindows)
        return;
    if (s->g->collective || !s->readahead) { /* collective MPI-IO: every rank's main
                                                 thread, in order */
        read_window(s, w, k);
        return;
    }
    s->job = (struct ahead_job){s, w, k};
    if (pthread_create(&s->ahead, NULL, read_ahead, &s->job) == 0)
        s->ahead_running = true;
    else
        read_window(s, w, k);
}

void mt__shard_free_windows(mt_shard *s)
{
    mt__shard_join_ahead(s);
    for (int i = 0; i < 2; i++) {
        if (s->win[i].cols)
            for (int c = 0; c < s->g->ncols; c++)
                mt__shard_rb_unref(s->win[i].cols[c]);
        free(s->win[i].cols);
        s->win[i].cols = NULL;
    }
    mt_batch *b = &s->batch;
    if (b->gathered)
        for (int c = 0; c < 2 * s->g->ncols; c++)
            mt__shard_rb_unref(b->gathered[c]);
    if (b->conv)
        for (int c = 0; c < 2 * s->g->ncols * 5; c++)
            mt__shard_rb_unref(b->conv[c]);
    free(b->gathered);
    free(b->have_gathered);
    free(b->conv);
    free(b->have_conv);
    free(b->given);
    memset(b, 0, sizeof *b);
    s->ahead_next = 0;
    free(s->perm);
    s->perm = NULL;
    s->alloc_W = s->alloc_bs = 0;
    s->alloc_sets = 0;
    s->kept = false;
}

/* Buffers are kept across epochs while the layout stays the same: fresh memory costs a
 * page fault per page, which on some machines is slower than the read itself. */
int mt__shard_alloc_windows(mt_shard *s)
{
    int nc = s->g->ncols, sets = s->nwindows > 1 ? 2 : 1;
    if (s->win[0].cols && s->alloc_W == s->W && s->alloc_sets == sets &&
        s->alloc_bs == s->bs)
        return MT_OK;
    mt__shard_free_windows(s);
    s->alloc_W = s->W;
    s->alloc_sets = sets;
    s->alloc_bs = s->bs;
    for (int i = 0; i < sets; i++) {
        s->win[i].cols = calloc((size_t)nc, sizeof(void *));
        if (!s->win[i].cols)
            return mt__error(MT_ENOMEM, "out of memory for %s", s->name);
        for (int c = 0; c < nc; c++) {
            const mt__column *col = &s->g->cols[c];
            size_t bytes;
            if (__builtin_mul_overflow((size_t)s->W, col->row_elems * mt_dtype_size(s->mem[c]),
                                       &bytes))
                return mt__error(MT_ENOMEM, "a window of %s (%lld rows of column %s) is larger "
                                 "than memory can address", s->name, (long long)s->W,
                                 col->name);
            if (!(s->win[i].cols[c] = mt__shard_rb_alloc(bytes)))
                return mt__error(MT_ENOMEM, "out of memory for a window of %s (%zu bytes)",
                                 s->name, bytes);
        }
    }
    mt_batch *b = &s->batch;
    b->s = s;
    b->gathered = calloc((size_t)nc * 2, sizeof(void *));
    b->have_gathered = calloc((size_t)nc * 2, sizeof(bool));
    b->conv = calloc((size_t)nc * 2 * 5, sizeof(void *));
    b->have_conv = calloc((size_t)nc * 2 * 5, sizeof(bool));
    b->given = calloc((size_t)nc * 6, sizeof(void *));
    s->perm = malloc((size_t)s->W * sizeof *s->perm);
    if (!b->gathered || !b->have_gathered || !b->conv || !b->have_conv || !b->given || !s->perm)
        return mt__error(MT_ENOMEM, "out of memory for batches of %s", s->name);
    return MT_OK;
}

static bool window_held(const mt_shard *s, const window *w)
{
    for (int c = 0; w->cols && c < s->g->ncols; c++)
        if (w->cols[c] && atomic_load(&RB_HEAD(w->cols[c])->refs) > 1)
            return true;
    return false;
}

/* Make window k current: wait for its read-ahead, shuffle its order; the next one's
 * read-ahead starts at this window's second batch (mt_shard_next), so that the buffer it
 * goes into, the window just left, is not written while the caller still has that
 * window's last batch. */
int mt__shard_enter_window(mt_shard *s, int64_t k)
{
    if (k == 0) {
        if (!s->kept && s->alloc_sets == 2 && window_held(s, &s->win[0]) &&
            !window_held(s, &s->win[1])) { /* the buffer nobody holds takes window 0 */
            window t = s->win[0];
            s->win[0] = s->win[1];
            s->win[1] = t;
        }
        s->cur = 0;
        if (!s->kept && read_window(s, &s->win[0], 0))
            return s->win[0].rc;
        /* one window holding the same rows every epoch (not split, or not shuffled) is
         * read once and kept */
        s->kept = s->nwindows == 1 && (!s->split || !s->opt.shuffle);
    } else {
        if (s->ahead_next) /* a one-batch window: its read-ahead never started */
            mt__shard_start_ahead(s, s->ahead_next - 1);
        mt__shard_join_ahead(s);
        s->cur = 1 - s->cur;
        if (s->win[s->cur].rc) {
            mt__error_set_text(s->win[s->cur].msg);
            return s->win[s->cur].rc;
        }
    }
    s->ahead_next = k + 2;
    window *w = &s->win[s->cur];
    for (int64_t i = 0; i < w->rows; i++)
        s->perm[i] = (uint32_t)i;
    if (s->opt.shuffle) {
        uint64_t x = (s->opt.seed + 0x51ed27ULL) * 0x9e3779b97f4a7c15ULL ^
                     ((uint64_t)s->epoch << 32) ^ ((uint64_t)s->ctx->world_rank << 16) ^
                     (uint64_t)k;
        for (int64_t i = w->rows - 1; i > 0; i--) {
            int64_t j = (int64_t)below(&x, (uint64_t)i + 1);
            uint32_t t = s->perm[i];
            s->perm[i] = s->perm[j];
            s->perm[j] = t;
        }
    }
    s->next_row = 0;
    return MT_OK;
}
