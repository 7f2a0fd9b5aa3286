/*
 * checkpoint_build.c -- building a checkpoint (mt_checkpoint_new's kind): arrays borrowed
 * from the caller, typed metadata and files to copy, each checked as it is given, so
 * that the commit inside mt_report starts from a well-formed checkpoint. A stored
 * checkpoint is read-only: every function here refuses one.
 */
#include "checkpoint.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ck is a live checkpoint being built; else recorded, naming fn. */
static mt__ck_building *building(mt_checkpoint *ck, const char *fn)
{
    if (!mt__ck_ok(ck, fn))
        return NULL;
    if (ck->kind != MT__CK_BUILDING) {
        mt__error(MT_EINVAL, "%s: a stored checkpoint is read-only", fn);
        return NULL;
    }
    return &ck->build;
}

/* Array and file names become HDF5 dataset names and files in the checkpoint folder:
 * mt__check_name's rules (no '/', "..", control characters), and no leading '.' (the
 * run directory's own temporary names). */
static bool bad_name(const char *name)
{
    char saved[MT__MSG_LEN];
    snprintf(saved, sizeof saved, "%s", mt_last_error());
    bool bad = !name || name[0] == '.' || mt__check_name("name", name, 200) != MT_OK;
    mt__error_set_text(saved);
    return bad;
}

int mt_checkpoint_put(mt_checkpoint *ck, const char *name, mt_dtype t, int ndim,
                      const size_t *dims, const void *data, mt_layout layout)
{
    mt__ck_building *b = building(ck, "mt_checkpoint_put");
    if (!b)
        return MT_EINVAL;
    if (bad_name(name))
        return mt__error(MT_EINVAL, "mt_checkpoint_put: bad array name \"%.300s\" (1 to 200 "
                         "bytes, no '/' or control characters, not starting with '.')",
                         name ? name : "(null)");
    if (mt_dtype_size(t) == 0)
        return mt__error(MT_EINVAL, "mt_checkpoint_put %s: unknown dtype %d", name, (int)t);
    if (ndim < 1 || ndim > 8 || !dims)
        return mt__error(MT_EINVAL, "mt_checkpoint_put %s: ndim must be 1 to 8 (got %d)", name,
                         ndim);
    if (layout != MT_REPLICATED && layout != MT_SHARDED)
        return mt__error(MT_EINVAL, "mt_checkpoint_put %s: unknown layout %d", name, (int)layout);
    size_t n = 1;
    for (int i = 0; i < ndim; i++)
        if (__builtin_mul_overflow(n, dims[i], &n) || n > SIZE_MAX / mt_dtype_size(t))
            return mt__error(MT_EINVAL, "mt_checkpoint_put %s: the shape's bytes do not fit "
                                        "in memory sizes (dimension %d)", name, i);
    if (n > 0 && !data)
        return mt__error(MT_EINVAL, "mt_checkpoint_put %s: data is NULL", name);
    for (int i = 0; i < b->narrays; i++)
        if (!strcmp(b->arrays[i].name, name))
            return mt__error(MT_EINVAL, "mt_checkpoint_put: array %s was put already", name);
    if (MT__GROW(b->arrays, b->arrays_cap, (size_t)b->narrays + 1))
        return mt__error(MT_ENOMEM, "out of memory adding array %s", name);
    mt__ck_array *a = &b->arrays[b->narrays];
    memset(a, 0, sizeof *a);
    if (!(a->name = mt__strdup(name)))
        return MT_ENOMEM;
    a->dtype = t;
    a->ndim = ndim;
    memcpy(a->dims, dims, (size_t)ndim * sizeof *dims);
    a->data = data;
    a->layout = layout;
    b->narrays++;
    return MT_OK;
}

/* Set key to a value of type MT__META_* given as text; fn names the caller in errors. */
static int set_meta(mt_checkpoint *ck, const char *key, int type, const char *value,
                    const char *fn)
{
    mt__ck_building *b = building(ck, fn);
    if (!b)
        return MT_EINVAL;
    char what[64];
    snprintf(what, sizeof what, "%s: key", fn);
    if (mt__check_text(what, key, 255))
        return MT_EINVAL;
    if (!value)
        return mt__error(MT_EINVAL, "%s %s: value is NULL", fn, key);
    char *v = mt__strdup(value);
    if (!v)
        return MT_ENOMEM;
    for (int i = 0; i < b->nmeta; i++)
        if (!strcmp(b->meta_keys[i], key)) { /* a key set again takes the new value */
            free(b->meta_values[i]);
            b->meta_values[i] = v;
            b->meta_types[i] = type;
            return MT_OK;
        }
    size_t need = (size_t)b->nmeta + 1;
    if (MT__GROW(b->meta_keys, b->keys_cap, need) ||
        MT__GROW(b->meta_values, b->values_cap, need) ||
        MT__GROW(b->meta_types, b->types_cap, need) ||
        !(b->meta_keys[b->nmeta] = mt__strdup(key))) {
        free(v);
        return mt__error(MT_ENOMEM, "out of memory adding metadata");
    }
    b->meta_values[b->nmeta] = v;
    b->meta_types[b->nmeta++] = type;
    return MT_OK;
}

int mt_checkpoint_set_meta(mt_checkpoint *ck, const char *key, const char *value)
{
    return set_meta(ck, key, MT__META_STR, value, "mt_checkpoint_set_meta");
}

int mt_checkpoint_set_meta_i64(mt_checkpoint *ck, const char *key, int64_t value)
{
    char text[32];
    snprintf(text, sizeof text, "%lld", (long long)value);
    return set_meta(ck, key, MT__META_I64, text, "mt_checkpoint_set_meta_i64");
}

int mt_checkpoint_set_meta_f64(mt_checkpoint *ck, const char *key, double value)
{
    char text[32];
    snprintf(text, sizeof text, "%.17g", value);
    return set_meta(ck, key, MT__META_F64, text, "mt_checkpoint_set_meta_f64");
}

int mt_checkpoint_add_file(mt_checkpoint *ck, const char *name, const char *path)
{
    mt__ck_building *b = building(ck, "mt_checkpoint_add_file");
    if (!b)
        return MT_EINVAL;
    if (bad_name(name) || !strcmp(name, "checkpoint.h5") || mt__ck_rank_folder_name(name))
        return mt__error(MT_EINVAL, "mt_checkpoint_add_file: bad file name \"%.300s\" (1 to 200 "
                         "bytes, no '/' or control characters, not starting with '.', not "
                         "checkpoint.h5 or rank<N>)",
                         name ? name : "(null)");
    if (!path || !*path)
        return mt__error(MT_EINVAL, "mt_checkpoint_add_file %s: path is %s", name,
                         path ? "empty" : "NULL");
    for (int i = 0; i < b->nfiles; i++)
        if (!strcmp(b->files[i].name, name))
            return mt__error(MT_EINVAL, "mt_checkpoint_add_file: a file named %s was added "
                             "already (from %s)", name, b->files[i].path);
    int rc = mt__ck_check_file(MT_EINVAL, "mt_checkpoint_add_file", name, path);
    if (rc)
        return rc;
    char what[300];
    snprintf(what, sizeof what, "adding file %s", name);
    return mt__ck_files_add(&b->files, &b->nfiles, &b->files_cap, name, path, what);
}
