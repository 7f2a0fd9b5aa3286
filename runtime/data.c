/*
 * data.c -- dataset shards: the split, windows with read-ahead, and batches; the epoch's
 * order of blocks and the rows of each window come from plan.c.
 *
 * Invariants:
 * - Every rank computes the same plan and the same block permutation from (seed, epoch)
 *   without communication, so a row is read by exactly one rank per epoch (split
 *   datasets) and all ranks get the same number of batches; mt_shard_begin_epoch's
 *   agreement checks that count anyway, so an uneven shard is an error, not a hang.
 * - Reads stay contiguous: a rank's rows are whole runs of blocks of the file.
 * - A window holds W rows (a multiple of the batch size, so batches never straddle two
 *   windows). A shard that fits data.memory_limit is one window; a larger one is streamed
 *   in windows of about half the limit, and a thread reads the next window while the
 *   caller consumes the current one, so memory stays near two windows.
 * - Windows hold each column in its in-memory dtype (the stored one unless the caller
 *   chose another with mt_shard_set_column_dtype); HDF5 converts during the read. Block
 *   size follows the stored row size (file contiguity), W the in-memory one (memory), and
 *   both stay fixed while the program makes the same calls, so a rerun sees the same order.
 * - Batch memory can be held (mt_batch_hold_new, for bindings whose views must not dangle):
 *   every buffer a batch's columns live in (window, gathered rows, converted copy) is
 *   reference-counted; one that is held when the library is about to write into it is
 *   left to its holders and replaced by a fresh one. So that the usual loop (the caller
 *   still holds batch k while asking for batch k+1) never pays that, batch k's memory is
 *   not written while batch k+1 is made: gathered and converted rows alternate between
 *   two sets of buffers, the read-ahead into the buffer of the window just left starts at
 *   the second batch of the next window, and an epoch's window 0 goes into a buffer that
 *   is not held when one of the two is free.
 */
#include "runtime.h"
#include "../io/io.h"

#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct mt_batch {
    mt_shard *s;
    size_t rows;
    size_t first;           /* first row inside the window */
    int set;                /* which of the two sets of gathered / converted buffers */
    void **gathered;        /* per set and column: rows gathered through the permutation */
    bool *have_gathered;
    void **conv;            /* per set, column and dtype (5 each): converted copies */
    bool *have_conv;
    void **given;           /* the buffers mt_batch_column returned for this batch */
    int ngiven;
};

/* ------------------------------------------------------------ held buffers
 *
 * A buffer: a header with its holders' count (the shard is one) in front of the bytes. */
typedef struct {
    alignas(max_align_t) atomic_int refs;
    size_t bytes;
} rb_head;

#define RB_HEAD(p) ((rb_head *)((char *)(p) - sizeof(rb_head)))

static void *rb_alloc(size_t bytes)
{
    rb_head *h = malloc(sizeof *h + (bytes ? bytes : 1));
    if (!h)
        return NULL;
    atomic_init(&h->refs, 1);
    h->bytes = bytes;
    return (char *)h + sizeof *h;
}

static void rb_unref(void *p)
{
    if (p && atomic_fetch_sub_explicit(&RB_HEAD(p)->refs, 1, memory_order_acq_rel) == 1)
        free(RB_HEAD(p));
}

static void rb_ref(void *p)
{
    atomic_fetch_add_explicit(&RB_HEAD(p)->refs, 1, memory_order_relaxed);
}

/* Before the shard writes into *p: a buffer someone holds is left to them and replaced
 * by a fresh one of the same size. */
static int rb_own(void **p)
{
    if (!*p || atomic_load_explicit(&RB_HEAD(*p)->refs, memory_order_acquire) == 1)
        return MT_OK;
    void *fresh = rb_alloc(RB_HEAD(*p)->bytes);
    if (!fresh)
        return mt__error(MT_ENOMEM, "out of memory replacing a held batch buffer (%zu bytes)",
                         RB_HEAD(*p)->bytes);
    rb_unref(*p);
    *p = fresh;
    return MT_OK;
}

struct mt_batch_hold {
    int n;
    void *bufs[];
};

typedef struct {
    void **cols;            /* per column: W rows in the column's in-memory dtype */
    int64_t rows;           /* rows held */
    int64_t index;          /* window number in the epoch */
    int rc;
    char msg[MT__MSG_LEN];
} window;

struct mt_shard {
    mt_context *ctx;
    char *name;
    mt__h5group *g;
    bool split;
    int64_t rows, dropped;  /* per epoch on this rank; dropped from the split */
    size_t row_bytes;       /* all columns of one row, as stored */
    size_t mem_row_bytes;   /* ... and in memory */
    mt_dtype *mem;          /* per column: dtype the windows hold */
    mt_dtype *want;         /* per column: asked for, applied at the next epoch */
    size_t memory_limit;
    /* the epoch */
    bool in_epoch;
    mt_iter_options opt;
    int64_t bs;             /* rows per batch: opt.batch_size, at most the shard's rows */
    int epoch;
    mt__plan plan;          /* this rank's rows in epoch order (plan.c) */
    int64_t W, nwindows;
    int64_t alloc_W, alloc_bs; /* the layout the window buffers were made for */
    int alloc_sets;
    bool kept;              /* window 0 holds this epoch's rows already (read once, kept) */
    window win[2];          /* current, and the one being read ahead */
    int cur;
    uint32_t *perm;         /* order inside the current window */
    int64_t next_row;       /* inside the current window */
    int64_t batches_left;
    mt_batch batch;
    /* read-ahead */
    bool readahead;         /* worth a thread: this rank has a CPU to spare */
    bool ahead_running;
    int64_t ahead_next;     /* 1 + the window to read ahead at the window's second batch; 0: none */
    pthread_t ahead;
    struct ahead_job {
        mt_shard *s;
        window *w;
        int64_t k;
    } job;
};

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

static bool is_split(const mt_data_config *d, const char *name)
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

static void plan_epoch(mt_shard *s)
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
        if (!(rc = rb_own(&w->cols[c])))
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

static void join_ahead(mt_shard *s)
{
    if (s->ahead_running) {
        pthread_join(s->ahead, NULL);
        s->ahead_running = false;
    }
}

static void start_ahead(mt_shard *s, int64_t k)
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

static void free_windows(mt_shard *s)
{
    join_ahead(s);
    for (int i = 0; i < 2; i++) {
        if (s->win[i].cols)
            for (int c = 0; c < s->g->ncols; c++)
                rb_unref(s->win[i].cols[c]);
        free(s->win[i].cols);
        s->win[i].cols = NULL;
    }
    mt_batch *b = &s->batch;
    if (b->gathered)
        for (int c = 0; c < 2 * s->g->ncols; c++)
            rb_unref(b->gathered[c]);
    if (b->conv)
        for (int c = 0; c < 2 * s->g->ncols * 5; c++)
            rb_unref(b->conv[c]);
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
static int alloc_windows(mt_shard *s)
{
    int nc = s->g->ncols, sets = s->nwindows > 1 ? 2 : 1;
    if (s->win[0].cols && s->alloc_W == s->W && s->alloc_sets == sets &&
        s->alloc_bs == s->bs)
        return MT_OK;
    free_windows(s);
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
            if (!(s->win[i].cols[c] = rb_alloc(bytes)))
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
static int enter_window(mt_shard *s, int64_t k)
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
            start_ahead(s, s->ahead_next - 1);
        join_ahead(s);
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

/* ------------------------------------------------------------ public */

static void shard_free(mt_shard *s)
{
    if (!s)
        return;
    mt__live_remove(s);
    mt__live_remove(&s->batch);
    if (s->g)
        free_windows(s);
    mt__h5group_close(&s->g);
    free(s->mem);
    free(s->want);
    free(s->name);
    free(s);
}

void mt__shards_close(mt_context *c)
{
    for (int i = 0; i < c->nshards; i++)
        shard_free(c->shards[i]);
    free(c->shards);
    c->shards = NULL;
    c->nshards = 0;
    c->shards_cap = 0;
}

static const mt__dataset_spec *find_spec(const mt_context *c, const char *name)
{
    for (int i = 0; i < c->nspecs; i++)
        if (!strcmp(c->specs[i].name, name))
            return &c->specs[i];
    return NULL;
}

/* Straight to stdout, whatever the names' lengths (no buffer to outgrow). */
static void describe(const mt_shard *s)
{
    printf("mpitrain: dataset %s: %s:%s, %lld rows, columns ", s->name, s->g->file,
           s->g->group, (long long)s->g->rows);
    for (int i = 0; i < s->g->ncols; i++) {
        const mt__column *c = &s->g->cols[i];
        printf("%s%s (", i ? ", " : "", c->name);
        for (int d = 1; d < c->ndim; d++)
            printf("%s%llu", d > 1 ? "x" : "", (unsigned long long)c->dims[d]);
        printf("%s%s)", c->ndim > 1 ? " " : "", mt__dtype_name(c->dtype));
    }
    printf("; ");
    if (s->split)
        printf("split over %d ranks: %lld rows each, %lld dropped\n", s->ctx->world_size,
               (long long)s->rows, (long long)s->dropped);
    else
        printf("read whole by every rank\n");
    fflush(stdout);
}

/* Reading ahead pays when a CPU is free to do it (from a page cache a read is a memcpy;
 * on a busy core the thread only competes with the consumer). MT_IO_READAHEAD=0/1
 * overrides. */
static bool want_readahead(const mt_context *c)
{
    const char *env = getenv("MT_IO_READAHEAD");
    if (env && *env)
        return mt__env_knob_bool("MT_IO_READAHEAD", true);
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    int per_rank = c->num_cpus;
    if (online > 0 && c->num_cpus >= online) /* not bound: the node's CPUs are shared */
        per_rank = c->num_cpus / (c->topo.local_size ? c->topo.local_size : 1);
    return per_rank >= 2;
}

static int open_shard(mt_context *c, const mt__dataset_spec *spec, mt_shard **out)
{
    /* what is allocated here (and the room to keep the shard) is agreed before the
     * collective open, which a rank must not skip alone */
    mt_shard *s = calloc(1, sizeof *s);
    bool grown = MT__GROW(c->shards, c->shards_cap, (size_t)c->nshards + 1) == MT_OK;
    if (s) {
        s->ctx = c;
        s->name = mt__strdup(spec->name);
        s->split = is_split(&c->data, spec->name);
        s->memory_limit = c->data.memory_limit;
        s->readahead = want_readahead(c);
        s->g = mt__h5group_new(spec->file, spec->group);
    }
    int rc = mt__h5_precheck(spec->file);
    if (!rc && (!s || !s->name || !s->g || !grown || mt__test_fail("shard-alloc", c->world_rank)))
        rc = mt__error(MT_ENOMEM, "rank %d: out of memory opening %s", c->world_rank,
                       spec->name);
    /* the open below is collective (parallel HDF5): nobody enters it while one rank lacks
     * its shard */
    mt__call call;
    mt__call_init(&call, MT__CALL_DATA_OPEN, 0, 0, 0);
    rc = mt__agree(c->comm, &call, rc, NULL);
    if (rc) {
        shard_free(s);
        return rc;
    }
    rc = mt__h5group_open(c->comm->comm, s->g);
    if (!rc) {
        int64_t n = s->g->rows, p = c->world_size;
        s->mem = malloc((size_t)s->g->ncols * sizeof *s->mem);
        s->want = malloc((size_t)s->g->ncols * sizeof *s->want);
        if (!s->mem || !s->want)
            rc = mt__error(MT_ENOMEM, "out of memory opening %s", spec->name);
        for (int i = 0; !rc && i < s->g->ncols; i++) {
            s->row_bytes += s->g->cols[i].row_elems * mt_dtype_size(s->g->cols[i].dtype);
            s->mem[i] = s->want[i] = s->g->cols[i].dtype;
        }
        s->mem_row_bytes = s->row_bytes;
        s->rows = s->split ? n / p : n;
        s->dropped = s->split ? n % p : 0;
        if (s->rows == 0)
            rc = mt__error(MT_EINVAL, "%s:%s: %lld rows cannot be split over %lld ranks "
                           "(more ranks than rows)", spec->file, spec->group, (long long)n,
                           (long long)p);
    }
    rc = mt__agree(c->comm, &call, rc, NULL);
    if (rc) {
        shard_free(s);
        return rc;
    }
    if (c->world_rank == 0 && c->verbose >= 1)
        describe(s);
    *out = s;
    return MT_OK;
}

/* A shard (or batch) the running fit owns: shards end with the fit that opened them. */
static bool shard_ok(const mt_shard *s, const char *fn)
{
    if (s && mt__live(s, MT__LIVE_SHARD))
        return true;
    mt__error(MT_EINVAL, "%s: %s", fn, s ? "not a live shard: shards belong to the fit that "
                                           "opened them and end when it returns"
                                         : "shard is NULL");
    return false;
}

int mt_get_dataset_shard(mt_context *c, const char *name, mt_shard **out)
{
    MT__TRACE("data", "load_shard");
    if (!mt__ctx_ok(c, "mt_get_dataset_shard"))
        return MT_EINVAL;
    if (!out)
        return mt__error(MT_EINVAL, "mt_get_dataset_shard: NULL argument");
    *out = NULL;
    const mt__dataset_spec *spec = name ? find_spec(c, name) : NULL;
    int rc = MT_OK;
    if (!spec) {
        char *known = NULL;
        size_t len = 0;
        FILE *k = open_memstream(&known, &len); /* any number of names, any lengths */
        for (int i = 0; k && i < c->nspecs; i++)
            fprintf(k, "%s%s", i ? ", " : "", c->specs[i].name);
        if (k)
            fclose(k);
        rc = mt__error(MT_ENOTFOUND, "no dataset named '%s' (registered: %s)",
                       name ? name : "(null)", known && *known ? known : "none");
        free(known);
    }
    for (int i = 0; !rc && i < c->nshards; i++)
        if (!strcmp(c->shards[i]->name, name)) {
            *out = c->shards[i];
            mt__call call;
            mt__call_init(&call, MT__CALL_DATA_OPEN, 1, 0, 0);
            return mt__agree(c->comm, &call, MT_OK, NULL);
        }
    if (rc) { /* still meet the others in the open's first agreement */
        mt__call call;
        mt__call_init(&call, MT__CALL_DATA_OPEN, 0, 0, 0);
        return mt__agree(c->comm, &call, rc, NULL);
    }
    /* room for the shard first: after the open's agreements no rank may fail alone */
    int room = 0; /* the shard's and its batch's places in the table of live handles */
    if (MT__GROW(c->shards, c->shards_cap, (size_t)c->nshards + 1) == MT_OK) {
        while (room < 2 && mt__live_reserve() == MT_OK)
            room++;
    }
    if (room < 2) {
        while (room--)
            mt__live_unreserve();
        mt__call call;
        mt__call_init(&call, MT__CALL_DATA_OPEN, 0, 0, 0);
        return mt__agree(c->comm, &call, mt__error(MT_ENOMEM, "rank %d: out of memory keeping "
                                                   "a shard", c->world_rank), NULL);
    }
    mt_shard *s = NULL;
    rc = open_shard(c, spec, &s);
    if (rc) {
        mt__live_unreserve();
        mt__live_unreserve();
        return rc;
    }
    mt__live_add_reserved(s, MT__LIVE_SHARD); /* reserved before the open's agreements */
    mt__live_add_reserved(&s->batch, MT__LIVE_BATCH);
    c->shards[c->nshards++] = s;
    *out = s;
    return MT_OK;
}

int64_t mt_shard_rows(const mt_shard *s) { return shard_ok(s, "mt_shard_rows") ? s->rows : 0; }
int64_t mt_shard_dropped_rows(const mt_shard *s)
{
    return shard_ok(s, "mt_shard_dropped_rows") ? s->dropped : 0;
}
int mt_shard_num_columns(const mt_shard *s)
{
    return shard_ok(s, "mt_shard_num_columns") ? s->g->ncols : 0;
}

const char *mt_shard_column_name(const mt_shard *s, int i)
{
    return shard_ok(s, "mt_shard_column_name") && i >= 0 && i < s->g->ncols ? s->g->cols[i].name
                                                                           : NULL;
}

static int column_index(const mt_shard *s, const char *column)
{
    for (int i = 0; column && i < s->g->ncols; i++)
        if (!strcmp(s->g->cols[i].name, column))
            return i;
    return -1;
}

int mt_shard_column_shape(const mt_shard *s, const char *column, int *ndim, size_t dims[8],
                          mt_dtype *stored)
{
    if (!shard_ok(s, "mt_shard_column_shape"))
        return MT_EINVAL;
    int i = column_index(s, column);
    if (i < 0)
        return mt__error(MT_ENOTFOUND, "dataset %s has no column '%s'", s->name,
                         column ? column : "(null)");
    const mt__column *c = &s->g->cols[i];
    if (ndim)
        *ndim = c->ndim;
    if (dims) {
        dims[0] = (size_t)s->rows;
        for (int d = 1; d < c->ndim; d++)
            dims[d] = (size_t)c->dims[d];
    }
    if (stored)
        *stored = c->dtype;
    return MT_OK;
}

int mt_shard_set_column_dtype(mt_shard *s, const char *column, mt_dtype as)
{
    if (!shard_ok(s, "mt_shard_set_column_dtype"))
        return MT_EINVAL;
    int i = column_index(s, column);
    if (i < 0)
        return mt__error(MT_ENOTFOUND, "dataset %s has no column '%s'", s->name,
                         column ? column : "(null)");
    if (mt_dtype_size(as) == 0)
        return mt__error(MT_EINVAL, "mt_shard_set_column_dtype: %s/%s: unknown dtype %d",
                         s->name, column, (int)as);
    s->want[i] = as;
    return MT_OK;
}

int mt_shard_begin_epoch(mt_shard *s, int epoch, const mt_iter_options *o)
{
    MT__TRACE("data", "begin_epoch");
    if (!shard_ok(s, "mt_shard_begin_epoch"))
        return MT_EINVAL;
    mt_iter_options opt = o ? *o : (mt_iter_options){0};
    if (!opt.batch_size)
        opt.batch_size = 32;
    int rc = MT_OK;
    if (epoch < 0)
        rc = mt__error(MT_EINVAL, "mt_shard_begin_epoch: epoch must be >= 0 (got %d)", epoch);
    join_ahead(s);
    if (opt.batch_size != s->opt.batch_size || opt.shuffle != s->opt.shuffle)
        s->kept = false;
    if (memcmp(s->mem, s->want, (size_t)s->g->ncols * sizeof *s->mem)) {
        free_windows(s); /* new buffer sizes; nothing kept */
        memcpy(s->mem, s->want, (size_t)s->g->ncols * sizeof *s->mem);
        s->mem_row_bytes = 0;
        for (int i = 0; i < s->g->ncols; i++)
            s->mem_row_bytes += s->g->cols[i].row_elems * mt_dtype_size(s->mem[i]);
    }
    s->in_epoch = false;
    s->opt = opt;
    s->epoch = epoch;
    /* any batch_size up to SIZE_MAX: counted in unsigned arithmetic, and a batch never
     * holds more rows than the shard, so nothing is sized by the request itself */
    uint64_t req = opt.batch_size, rows = (uint64_t)s->rows;
    int64_t batches = (int64_t)(opt.drop_last ? rows / req : rows / req + (rows % req != 0));
    int64_t bs = req < rows ? (int64_t)req : s->rows;
    s->bs = bs;
    if (!rc && bs > (int64_t)UINT32_MAX)
        rc = mt__error(MT_EINVAL, "mt_shard_begin_epoch: %s: batch_size %zu: a batch of more "
                       "than %u rows is not supported", s->name, opt.batch_size, UINT32_MAX);
    /* a batch is the smallest window: one that alone exceeds data.memory_limit (a file
     * whose rows claim gigabytes) is refused here, on every rank, before any buffer */
    uint64_t batch_bytes;
    if (!rc && (__builtin_mul_overflow((uint64_t)bs, (uint64_t)s->mem_row_bytes, &batch_bytes) ||
                batch_bytes > s->memory_limit))
        rc = mt__error(MT_EINVAL, "mt_shard_begin_epoch: %s (%s:%s): a batch of %lld rows of "
                       "%zu bytes is more than data.memory_limit (%zu bytes): lower "
                       "batch_size or raise data.memory_limit", s->name, s->g->file,
                       s->g->group, (long long)bs, s->mem_row_bytes, s->memory_limit);
    if (!rc) {
        /* one window when the shard fits the limit, else windows of about half of it */
        int64_t fit = (int64_t)(s->memory_limit / (s->mem_row_bytes ? s->mem_row_bytes : 1));
        int64_t W = s->rows <= fit ? s->rows : fit / 2;
        W = W / bs * bs;
        s->W = W > bs ? W : bs;
        if (s->W > UINT32_MAX)
            s->W = (int64_t)UINT32_MAX / bs * bs;
        s->nwindows = (s->rows + s->W - 1) / s->W;
        plan_epoch(s);
    }
    if (!rc)
        rc = alloc_windows(s);
    mt__call call;
    mt__call_init(&call, MT__CALL_EPOCH, (uint64_t)batches, epoch, (int64_t)opt.batch_size);
    call.sig = mt__sig_mix(mt__sig_mix(call.sig, opt.seed), (uint64_t)opt.shuffle);
    rc = mt__agree(s->ctx->comm, &call, rc, NULL);
    if (!rc)
        rc = enter_window(s, 0);
    if (rc) {
        free_windows(s);
        return rc;
    }
    if (s->nwindows > 1)
        s->kept = false;
    s->batches_left = batches;
    s->in_epoch = true;
    return MT_OK;
}

int mt_shard_next(mt_shard *s, const mt_batch **out)
{
    MT__TRACE("data", "next_batch");
    if (!shard_ok(s, "mt_shard_next"))
        return MT_EINVAL;
    if (!out)
        return mt__error(MT_EINVAL, "mt_shard_next: NULL argument");
    *out = NULL;
    if (!s->in_epoch)
        return mt__error(MT_EINVAL, "mt_shard_next: %s: call mt_shard_begin_epoch first",
                         s->name);
    if (s->batches_left == 0) {
        s->in_epoch = false;
        join_ahead(s);
        return 0;
    }
    window *w = &s->win[s->cur];
    if (s->next_row >= w->rows) {
        int rc = enter_window(s, w->index + 1);
        if (rc)
            return rc;
        w = &s->win[s->cur];
    } else if (s->ahead_next && s->next_row > 0) {
        start_ahead(s, s->ahead_next - 1);
    }
    mt_batch *b = &s->batch;
    int64_t left = w->rows - s->next_row;
    int nc = s->g->ncols;
    b->first = (size_t)s->next_row;
    b->rows = (size_t)(left < s->bs ? left : s->bs);
    b->set ^= 1; /* batch k-1's set: batch k's stays as it is */
    b->ngiven = 0;
    memset(b->have_gathered + b->set * nc, 0, (size_t)nc * sizeof(bool));
    memset(b->have_conv + b->set * nc * 5, 0, (size_t)nc * 5 * sizeof(bool));
    s->next_row += (int64_t)b->rows;
    s->batches_left--;
    *out = b;
    return 1;
}

size_t mt_batch_rows(const mt_batch *b)
{
    if (!b || !mt__live(b, MT__LIVE_BATCH)) {
        mt__error(MT_EINVAL, "mt_batch_rows: %s", b ? "not a live batch" : "batch is NULL");
        return 0;
    }
    return b->rows;
}

const void *mt_batch_column(const mt_batch *cb, const char *column, mt_dtype as)
{
    if (!cb || !mt__live(cb, MT__LIVE_BATCH)) {
        mt__error(MT_EINVAL, "mt_batch_column: %s", cb ? "not a live batch: batches belong to "
                             "their shard, which ends when fit returns" : "batch is NULL");
        return NULL;
    }
    mt_batch *b = (mt_batch *)cb; /* the batch caches conversions; it is the shard's own */
    mt_shard *s = b->s;
    int c = column_index(s, column);
    if (c < 0) {
        mt__error(MT_ENOTFOUND, "dataset %s has no column '%s'", s->name,
                  column ? column : "(null)");
        return NULL;
    }
    if (mt_dtype_size(as) == 0) {
        mt__error(MT_EINVAL, "mt_batch_column: unknown dtype %d", (int)as);
        return NULL;
    }
    const mt__column *col = &s->g->cols[c];
    mt_dtype have = s->mem[c];
    size_t es = mt_dtype_size(have), re = col->row_elems;
    void *buf = s->win[s->cur].cols[c];
    const char *src = (const char *)buf + b->first * re * es;
    int g = b->set * s->g->ncols + c;
    if (s->opt.shuffle) {
        if (!b->have_gathered[g]) {
            if (rb_own(&b->gathered[g]))
                return NULL;
            if (!b->gathered[g] && !(b->gathered[g] = rb_alloc((size_t)s->bs * re * es))) {
                mt__error(MT_ENOMEM, "out of memory for a batch of %s", s->name);
                return NULL;
            }
            const char *base = s->win[s->cur].cols[c];
            for (size_t r = 0; r < b->rows; r++)
                memcpy((char *)b->gathered[g] + r * re * es,
                       base + (size_t)s->perm[b->first + r] * re * es, re * es);
            b->have_gathered[g] = true;
        }
        src = buf = b->gathered[g];
    }
    if (as != have) {
        int k = g * 5 + ((int)as - 1);
        if (!b->have_conv[k]) {
            if (rb_own(&b->conv[k]))
                return NULL;
            if (!b->conv[k] &&
                !(b->conv[k] = rb_alloc((size_t)s->bs * re * mt_dtype_size(as)))) {
                mt__error(MT_ENOMEM, "out of memory converting a batch of %s", s->name);
                return NULL;
            }
            mt__convert(b->conv[k], as, src, have, b->rows * re);
            b->have_conv[k] = true;
        }
        src = buf = b->conv[k];
    }
    int i = 0;
    while (i < b->ngiven && b->given[i] != buf)
        i++;
    if (i == b->ngiven && i < s->g->ncols * 6)
        b->given[b->ngiven++] = buf;
    return src;
}

mt_batch_hold *mt_batch_hold_new(const mt_batch *b)
{
    if (!b || !mt__live(b, MT__LIVE_BATCH)) {
        mt__error(MT_EINVAL, "mt_batch_hold_new: %s", b ? "not a live batch" : "batch is NULL");
        return NULL;
    }
    mt_batch_hold *h = malloc(sizeof *h + (size_t)b->ngiven * sizeof(void *));
    if (!h) {
        mt__error(MT_ENOMEM, "mt_batch_hold_new: out of memory");
        return NULL;
    }
    h->n = b->ngiven;
    for (int i = 0; i < h->n; i++) {
        h->bufs[i] = b->given[i];
        rb_ref(h->bufs[i]);
    }
    return h;
}

void mt_batch_hold_free(mt_batch_hold **h)
{
    if (!h || !*h)
        return;
    for (int i = 0; i < (*h)->n; i++)
        rb_unref((*h)->bufs[i]);
    free(*h);
    *h = NULL;
}
