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
