/*
 * data.c -- dataset shards: the public calls (opening a shard, its epochs, its batches and
 * their holds); the windows with read-ahead and the held buffers are in data_window.c, the
 * layouts they share in shard.h, and the epoch's order of blocks and the rows of each
 * window come from plan.c.
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
#include "shard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------ public */

static void shard_free(mt_shard *s)
{
    if (!s)
        return;
    mt__live_remove(s);
    mt__live_remove(&s->batch);
    if (s->g)
        mt__shard_free_windows(s);
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
        s->split = mt__shard_is_split(&c->data, spec->name);
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
    mt__shard_join_ahead(s);
    if (opt.batch_size != s->opt.batch_size || opt.shuffle != s->opt.shuffle)
        s->kept = false;
    if (memcmp(s->mem, s->want, (size_t)s->g->ncols * sizeof *s->mem)) {
        mt__shard_free_windows(s); /* new buffer sizes; nothing kept */
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
        mt__shard_plan_epoch(s);
    }
    if (!rc)
        rc = mt__shard_alloc_windows(s);
    mt__call call;
    mt__call_init(&call, MT__CALL_EPOCH, (uint64_t)batches, epoch, (int64_t)opt.batch_size);
    call.sig = mt__sig_mix(mt__sig_mix(call.sig, opt.seed), (uint64_t)opt.shuffle);
    rc = mt__agree(s->ctx->comm, &call, rc, NULL);
    if (!rc)
        rc = mt__shard_enter_window(s, 0);
    if (rc) {
        mt__shard_free_windows(s);
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
        mt__shard_join_ahead(s);
        return 0;
    }
    window *w = &s->win[s->cur];
    if (s->next_row >= w->rows) {
        int rc = mt__shard_enter_window(s, w->index + 1);
        if (rc)
            return rc;
        w = &s->win[s->cur];
    } else if (s->ahead_next && s->next_row > 0) {
        mt__shard_start_ahead(s, s->ahead_next - 1);
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
            if (mt__shard_rb_own(&b->gathered[g]))
                return NULL;
            if (!b->gathered[g] && !(b->gathered[g] = mt__shard_rb_alloc((size_t)s->bs * re * es))) {
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
            if (mt__shard_rb_own(&b->conv[k]))
                return NULL;
            if (!b->conv[k] &&
                !(b->conv[k] = mt__shard_rb_alloc((size_t)s->bs * re * mt_dtype_size(as)))) {
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
        mt__shard_rb_ref(h->bufs[i]);
    }
    return h;
}

void mt_batch_hold_free(mt_batch_hold **h)
{
    if (!h || !*h)
        return;
    for (int i = 0; i < (*h)->n; i++)
        mt__shard_rb_unref((*h)->bufs[i]);
    free(*h);
    *h = NULL;
}
