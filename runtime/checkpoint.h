/*
 * checkpoint.h -- the checkpoint handle inside the runtime: its two kinds, what the
 * checkpoint files share (buffer sizes, name rules, the file list). Only runtime/
 * checkpoint*.c include it; the rest of the runtime goes through runtime.h.
 *
 * One public type, mt_checkpoint, is two things: a checkpoint being built (arrays
 * borrowed from the caller, metadata, files to copy; committed by mt_report) and a
 * checkpoint stored on disk and read back (its index: arrays and metadata). `kind` says
 * which; every function that treats them differently dispatches on it.
 */
#ifndef MT_CHECKPOINT_H
#define MT_CHECKPOINT_H

#include "runtime.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    char *name;
    mt_dtype dtype;
    int ndim;
    size_t dims[8];
    const void *data;
    mt_layout layout;
} mt__ck_array;

typedef struct {
    char *name, *path;
} mt__ck_file;

/* A checkpoint being built (mt_checkpoint_new). */
typedef struct {
    mt__ck_array *arrays; /* to write; data borrowed until the report returns */
    int narrays;
    char **meta_keys, **meta_values;
    int *meta_types;      /* MT__META_*; numbers are kept as text too */
    int nmeta;
    mt__ck_file *files;   /* to copy: name in the folder, source path */
    int nfiles;
    size_t arrays_cap, keys_cap, values_cap, types_cap, files_cap; /* MT__GROW's */
} mt__ck_building;

/* A checkpoint stored on disk, read back (mt_checkpoint_open, a result's, the one a fit
 * resumes from). Read-only. */
typedef struct {
    char *path;           /* its folder */
    mt__ckpt_index index; /* its arrays and metadata */
    mt__ck_file *files;   /* what it holds besides checkpoint.h5 (mt_checkpoint_open only) */
    int nfiles;
    size_t files_cap;
    mt_context *ctx;      /* the fit restoring from it: mt_checkpoint_get is collective
                             over ctx; NULL: local */
} mt__ck_stored;

typedef enum { MT__CK_BUILDING = 1, MT__CK_STORED } mt__ck_kind;

struct mt_checkpoint {
    mt__ck_kind kind;
    union {
        mt__ck_building build; /* kind MT__CK_BUILDING */
        mt__ck_stored stored;  /* kind MT__CK_STORED */
    };
};

/* A new, empty checkpoint of that kind, registered as live (NULL and recorded when out
 * of memory). */
mt_checkpoint *mt__ck_new(mt__ck_kind kind);
/* ck is a live checkpoint; otherwise records MT_EINVAL naming fn. */
bool mt__ck_ok(const mt_checkpoint *ck, const char *fn);
/* A stored checkpoint's folder, "(not stored)" for one being built (for messages). */
const char *mt__ck_where(const mt_checkpoint *ck);

/* MT_CHECKPOINT_BUFFER: the most bytes moved or staged at once (default 64 MiB). */
size_t mt__ck_buffer_bytes(void);
/* A chunk size that is a whole number of rows (at least one row). */
size_t mt__ck_row_chunk(size_t row_bytes);
/* The piece size of a commit's row stream (sender and receiver must agree): whole rows in
 * half the buffer, so rank 0 receives into one half while the other is written; rows
 * larger than half the buffer take all of it (one piece at a time). */
size_t mt__ck_stream_chunk(size_t row_bytes);

/* ------------------------------------------------------------ one commit's work */

/* An asynchronous commit's staging (checkpoint_async.c): the pieces this rank writes or
 * sends, in the order the commit takes them, copied into one bounded block by the
 * training thread and taken by the commit thread. */
typedef struct mt__ck_stage mt__ck_stage;
/* Commit thread: the next staged piece, which must be n bytes long, once it is staged
 * (NULL when staging stopped or is out of step: a bug); it stays valid until
 * mt__ck_stage_release gives the oldest piece taken back. */
const char *mt__ck_stage_take(mt__ck_stage *s, size_t n);
void mt__ck_stage_release(mt__ck_stage *s);
/* MT_OK, or the first failure of the staging itself (a file that could not be read
 * whole), recorded in this thread. */
int mt__ck_stage_status(mt__ck_stage *s);

/* Everything a commit needs after its agreement, on every rank: the same whether it runs
 * inside mt_report or in the commit thread (then every pointer is the thread's own). */
typedef struct {
    mt__comm *comm;             /* the report's, or the commit thread's own */
    const mt__ck_building *ck;  /* what to commit; the arrays' memory only without stage */
    mt__ck_stage *stage;        /* NULL: the arrays' memory and the files themselves */
    int64_t *all;               /* rows of each sharded array: rank r's k-th at r * nsh + k */
    int nsh;
    char *fdesc;                /* this rank's files: name, NUL, 8-byte size; in order */
    char *allf;                 /* rank 0: every rank's fdesc, lengths in flens */
    size_t *flens;
    int64_t *rows;              /* rank 0: room for one array's rows per rank */
    char *buf;                  /* rank 0: the staging buffer; others: files' (or NULL) */
    mt__rundir *run;            /* rank 0 */
    const mt_checkpoint_config *retention;
    const mt_metrics *metrics;  /* rank 0: reported with it */
    int64_t iteration;
    char name[32];              /* rank 0: checkpoint_NNNNNN */
    bool pause;                 /* test hook: pause after the first piece */
    bool snapshot;              /* run.json from a copy (another thread updates run) */
} mt__ck_job;
/* The commit after its agreement (checkpoint_commit.c): rank 0 writes, fsyncs and
 * publishes, the others send their parts; each rank's own status (the report, or the
 * next one for an asynchronous commit, agrees on them). */
int mt__ck_commit_body(mt__ck_job *j);
void mt__ck_job_free(mt__ck_job *j);
void mt__ck_building_free(mt__ck_building *b);

/* The asynchronous side (checkpoint_async.c), on the training thread. Before the commit's
 * agreement: whether this commit should be asynchronous here, and everything it will
 * need allocated (MT_ENOMEM, agreed, when not); after it: start it (the commit thread
 * takes job's allocations) and stage this rank's part, or drop what was prepared. */
bool mt__ck_async_wanted(mt_context *c);
int mt__ck_async_prepare(mt_context *c, const mt__ck_building *ck, const char *fdesc,
                         const mt_metrics *metrics);
/* Collective: the commit thread's communicator, made at the first asynchronous commit. */
int mt__ck_async_comm(mt_context *c);
int mt__ck_async_start(mt_context *c, mt__ck_job *job, const mt__ck_building *ck);
void mt__ck_async_drop(mt_context *c);
/* Waits for a commit in flight, then frees the staging memory and the communicator. */
void mt__ck_async_free(mt_context *c);

/* A file the checkpoint can copy: a readable regular file (following links); errors
 * are `code`, naming what and name. */
int mt__ck_check_file(int code, const char *what, const char *name, const char *path);
/* rank<r> is where other ranks' files go: a name of that form would collide with them. */
bool mt__ck_rank_folder_name(const char *name);
/* Append (name, path) to a file list of *n entries and capacity *cap (MT_ENOMEM recorded,
 * naming `what`, and the list unchanged when out of memory). */
int mt__ck_files_add(mt__ck_file **files, int *n, size_t *cap, const char *name,
                     const char *path, const char *what);
void mt__ck_files_free(mt__ck_file *files, int n);

#endif
