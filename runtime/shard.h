/*
 * shard.h -- what runtime/data.c (the public shard and batch calls) and
 * runtime/data_window.c (held buffers, the epoch's plan, windows and their read-ahead)
 * share: the shard's and batch's layouts and the window calls. Private to runtime/.
 */
#ifndef MT_RUNTIME_SHARD_H
#define MT_RUNTIME_SHARD_H

#include "runtime.h"
#include "../io/io.h"

#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>

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

/* Held buffers (see data.c's invariants): a buffer with its holders' count. */
void *mt__shard_rb_alloc(size_t bytes);
void mt__shard_rb_unref(void *p);
void mt__shard_rb_ref(void *p);
/* Before the shard writes into *p: a held buffer is left to its holders and replaced. */
int mt__shard_rb_own(void **p);
/* Whether dataset name is split over the ranks (data.datasets_to_split). */
bool mt__shard_is_split(const mt_data_config *d, const char *name);
/* This epoch's plan of this rank's rows (plan.c). */
void mt__shard_plan_epoch(mt_shard *s);
/* The read-ahead thread: joined (its window's outcome kept in the window), started on k. */
void mt__shard_join_ahead(mt_shard *s);
void mt__shard_start_ahead(mt_shard *s, int64_t k);
/* The window buffers: freed, made for the epoch's layout. */
void mt__shard_free_windows(mt_shard *s);
int mt__shard_alloc_windows(mt_shard *s);
/* Make window k the current one (read, or taken from the read-ahead). */
int mt__shard_enter_window(mt_shard *s, int64_t k);

#endif
