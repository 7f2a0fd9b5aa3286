/*
 * checkpoint.c -- the mt_checkpoint handle: its two kinds (being built, stored; see
 * checkpoint.h), making and freeing one, what both kinds answer (metadata, listings, the
 * folder), and the small parts the other checkpoint files share.
 *
 * The rest, one concept a file: checkpoint_build.c (building one: arrays, metadata,
 * files), checkpoint_commit.c (the commit protocol inside mt_report), checkpoint_index.c
 * (a stored checkpoint's index as JSON, for the other ranks and results) and
 * checkpoint_restore.c (opening a stored one, picking a valid one, reading it back).
 */
#include "checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

size_t mt__ck_buffer_bytes(void)
{
    return (size_t)mt__env_knob_u64("MT_CHECKPOINT_BUFFER", (uint64_t)64 << 20);
}

size_t mt__ck_row_chunk(size_t row_bytes)
{
    size_t b = mt__ck_buffer_bytes();
    if (row_bytes == 0)
        return b;
    return b < row_bytes ? row_bytes : b / row_bytes * row_bytes;
}

size_t mt__ck_stream_chunk(size_t row_bytes)
{
    size_t half = mt__ck_buffer_bytes() / 2;
    return row_bytes && row_bytes <= half ? half / row_bytes * row_bytes
                                          : mt__ck_row_chunk(row_bytes);
}

/* ------------------------------------------------------------ the handle */

mt_checkpoint *mt__ck_new(mt__ck_kind kind)
{
    mt_checkpoint *ck = calloc(1, sizeof *ck);
    if (!ck)
        mt__error(MT_ENOMEM, "out of memory creating a checkpoint");
    else if (mt__live_add(ck, MT__LIVE_CHECKPOINT)) {
        free(ck);
        ck = NULL;
    }
    if (ck)
        ck->kind = kind;
    return ck;
}

mt_checkpoint *mt_checkpoint_new(void)
{
    return mt__ck_new(MT__CK_BUILDING);
}

/* A checkpoint not freed yet (the one mt_get_checkpoint gives ends with its fit). */
bool mt__ck_ok(const mt_checkpoint *ck, const char *fn)
{
    if (ck && mt__live(ck, MT__LIVE_CHECKPOINT))
        return true;
    mt__error(MT_EINVAL, "%s: %s", fn, ck ? "not a live checkpoint (freed already, or the "
                                            "restored one kept past its fit)"
                                          : "checkpoint is NULL");
    return false;
}

const char *mt__ck_where(const mt_checkpoint *ck)
{
    return ck->kind == MT__CK_STORED ? ck->stored.path : "(not stored)";
}

void mt__ck_building_free(mt__ck_building *b)
{
    for (int i = 0; i < b->narrays; i++)
        free(b->arrays[i].name);
    free(b->arrays);
    for (int i = 0; i < b->nmeta; i++) {
        free(b->meta_keys[i]);
        free(b->meta_values[i]);
    }
    free(b->meta_keys);
    free(b->meta_values);
    free(b->meta_types);
    mt__ck_files_free(b->files, b->nfiles);
}

static void free_stored(mt__ck_stored *s)
{
    mt__ck_files_free(s->files, s->nfiles);
    free(s->path);
    mt__ckpt_index_free(&s->index);
}

void mt_checkpoint_free(mt_checkpoint **cp)
{
    if (!cp || !*cp)
        return;
    mt_checkpoint *ck = *cp;
    if (!mt__ck_ok(ck, "mt_checkpoint_free")) /* a second free: nothing to give back */
        return;
    mt__live_remove(ck);
    if (ck->kind == MT__CK_BUILDING)
        mt__ck_building_free(&ck->build);
    else
        free_stored(&ck->stored);
    free(ck);
    *cp = NULL;
}

/* ------------------------------------------------------------ files */

int mt__ck_check_file(int code, const char *what, const char *name, const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return mt__error(code, "%s %s: cannot use %s: %s", what, name, path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return mt__error(code, "%s %s: %s is %s, not a regular file", what, name, path,
                         S_ISDIR(st.st_mode) ? "a directory" : "a special file");
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return mt__error(code, "%s %s: cannot read %s: %s", what, name, path, strerror(errno));
    close(fd);
    return MT_OK;
}

bool mt__ck_rank_folder_name(const char *name)
{
    if (strncmp(name, "rank", 4) || !name[4])
        return false;
    for (const char *p = name + 4; *p; p++)
        if (*p < '0' || *p > '9')
            return false;
    return true;
}

int mt__ck_files_add(mt__ck_file **files, int *n, size_t *cap, const char *name,
                     const char *path, const char *what)
{
    if (mt__grow(files, cap, (size_t)*n + 1, sizeof **files))
        return mt__error(MT_ENOMEM, "out of memory %s", what);
    mt__ck_file *f = &(*files)[*n];
    f->name = mt__strdup(name);
    f->path = mt__strdup(path);
    if (!f->name || !f->path) {
        free(f->name);
        free(f->path);
        return mt__error(MT_ENOMEM, "out of memory %s", what);
    }
    (*n)++;
    return MT_OK;
}

void mt__ck_files_free(mt__ck_file *files, int n)
{
    for (int i = 0; i < n; i++) {
        free(files[i].name);
        free(files[i].path);
    }
    free(files);
}

/* ------------------------------------------------------------ metadata */

static const char *const meta_type_name[] = {"a string", "an integer", "a double"};
static const char *const meta_getter[] = {"mt_checkpoint_get_meta", "mt_checkpoint_get_meta_i64",
                                          "mt_checkpoint_get_meta_f64"};

/* The value of key as text and its type; MT_ENOTFOUND when absent (nothing recorded). */
static int find_meta(const mt_checkpoint *ck, const char *key, const char **text, int *type)
{
    if (ck->kind == MT__CK_BUILDING) {
        const mt__ck_building *b = &ck->build;
        for (int i = 0; i < b->nmeta; i++)
            if (!strcmp(b->meta_keys[i], key)) {
                *text = b->meta_values[i];
                *type = b->meta_types[i];
                return MT_OK;
            }
        return MT_ENOTFOUND;
    }
    const mt__ckpt_index *ix = &ck->stored.index;
    for (int i = 0; i < ix->nmeta; i++)
        if (!strcmp(ix->meta_keys[i], key)) {
            *text = ix->meta_values[i];
            *type = ix->meta_types ? ix->meta_types[i] : MT__META_STR;
            return MT_OK;
        }
    return MT_ENOTFOUND;
}

/* A typed getter's common part: the text of key when it has type `want`. */
static int typed_meta(const mt_checkpoint *ck, const char *key, const void *out, int want,
                      const char **text)
{
    const char *fn = meta_getter[want];
    if (!mt__ck_ok(ck, fn))
        return MT_EINVAL;
    if (!key || !out)
        return mt__error(MT_EINVAL, "%s: %s is NULL", fn, !key ? "key" : "out");
    int type = MT__META_STR;
    if (find_meta(ck, key, text, &type))
        return mt__error(MT_ENOTFOUND, "%s: checkpoint %s has no metadata %s", fn,
                         mt__ck_where(ck), key);
    if (type != want)
        return mt__error(MT_EINVAL, "%s: metadata %s of checkpoint %s is %s, not %s (read it "
                         "with %s)", fn, key, mt__ck_where(ck), meta_type_name[type],
                         meta_type_name[want], meta_getter[type]);
    return MT_OK;
}

const char *mt_checkpoint_get_meta(const mt_checkpoint *ck, const char *key)
{
    const char *text = NULL;
    if (!mt__ck_ok(ck, "mt_checkpoint_get_meta"))
        return NULL;
    if (!key) {
        mt__error(MT_EINVAL, "mt_checkpoint_get_meta: key is NULL");
        return NULL;
    }
    int type = MT__META_STR;
    if (find_meta(ck, key, &text, &type))
        return NULL;
    if (type != MT__META_STR) {
        mt__error(MT_EINVAL, "mt_checkpoint_get_meta: metadata %s of checkpoint %s is %s, not "
                  "a string (read it with %s)", key, mt__ck_where(ck), meta_type_name[type],
                  meta_getter[type]);
        return NULL;
    }
    return text;
}

int mt_checkpoint_get_meta_i64(const mt_checkpoint *ck, const char *key, int64_t *out)
{
    const char *text = NULL;
    int rc = typed_meta(ck, key, out, MT__META_I64, &text);
    if (!rc)
        *out = (int64_t)strtoll(text, NULL, 10);
    return rc;
}

int mt_checkpoint_get_meta_f64(const mt_checkpoint *ck, const char *key, double *out)
{
    const char *text = NULL;
    int rc = typed_meta(ck, key, out, MT__META_F64, &text);
    if (!rc)
        *out = strtod(text, NULL);
    return rc;
}

/* ------------------------------------------------------------ listings */

/* What a stored checkpoint lists: its arrays, metadata keys, files (a builder's files are
 * sources, not yet stored: a checkpoint being built lists nothing). */
enum { LIST_ARRAYS, LIST_META, LIST_FILES };
static const char *const list_fn[][2] = {{"mt_checkpoint_array_name", "arrays"},
                                         {"mt_checkpoint_meta_key", "keys"},
                                         {"mt_checkpoint_file_name", "files"}};

static int list_count(const mt_checkpoint *ck, int which)
{
    if (ck->kind != MT__CK_STORED)
        return 0;
    return which == LIST_ARRAYS ? ck->stored.index.n
           : which == LIST_META ? ck->stored.index.nmeta
           : ck->stored.nfiles;
}

/* The listing getters' common part: ck is live (checked before it is read) and i is in
 * range; else recorded, naming the getter. */
static bool listed_ok(const mt_checkpoint *ck, size_t i, int which)
{
    if (!mt__ck_ok(ck, list_fn[which][0]))
        return false;
    int n = list_count(ck, which);
    if (i < (size_t)n)
        return true;
    mt__error(MT_EINVAL, "%s: index %zu out of range (%d %s)", list_fn[which][0], i, n,
              list_fn[which][1]);
    return false;
}

size_t mt_checkpoint_num_arrays(const mt_checkpoint *ck)
{
    return mt__ck_ok(ck, "mt_checkpoint_num_arrays") ? (size_t)list_count(ck, LIST_ARRAYS) : 0;
}

const char *mt_checkpoint_array_name(const mt_checkpoint *ck, size_t i)
{
    return listed_ok(ck, i, LIST_ARRAYS) ? ck->stored.index.arrays[i].name : NULL;
}

size_t mt_checkpoint_num_meta(const mt_checkpoint *ck)
{
    return mt__ck_ok(ck, "mt_checkpoint_num_meta") ? (size_t)list_count(ck, LIST_META) : 0;
}

const char *mt_checkpoint_meta_key(const mt_checkpoint *ck, size_t i)
{
    return listed_ok(ck, i, LIST_META) ? ck->stored.index.meta_keys[i] : NULL;
}

size_t mt_checkpoint_num_files(const mt_checkpoint *ck)
{
    return mt__ck_ok(ck, "mt_checkpoint_num_files") ? (size_t)list_count(ck, LIST_FILES) : 0;
}

const char *mt_checkpoint_file_name(const mt_checkpoint *ck, size_t i)
{
    return listed_ok(ck, i, LIST_FILES) ? ck->stored.files[i].name : NULL;
}

const char *mt_checkpoint_path(const mt_checkpoint *ck)
{
    if (!mt__ck_ok(ck, "mt_checkpoint_path"))
        return NULL;
    return ck->kind == MT__CK_STORED ? ck->stored.path : NULL;
}
