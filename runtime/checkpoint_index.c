/*
 * checkpoint_index.c -- a stored checkpoint's index (its folder, arrays with shapes,
 * layouts, checksums and row offsets, and typed metadata) as JSON text, and back: the
 * form in which rank 0 sends the checkpoint a fit resumes from to the other ranks, and in
 * which results keep their checkpoints without opening the files again.
 *
 * A string value is a JSON string; a number is [type, text] (a double may be NaN, which
 * JSON cannot hold). Reading a description checks its shape and names what is corrupt.
 */
#include "checkpoint.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *mt__checkpoint_describe(const mt_checkpoint *ck)
{
    if (ck->kind != MT__CK_STORED) { /* only a stored checkpoint has an index */
        mt__error(MT_EINVAL, "mt__checkpoint_describe: not a stored checkpoint");
        return NULL;
    }
    const char *path = ck->stored.path;
    const mt__ckpt_index *ix = &ck->stored.index;
    /* any allocation failing: NULL, never a description with parts missing */
    json_t *arrays = json_array(), *meta = json_object();
    int bad = !arrays || !meta;
    for (int i = 0; !bad && i < ix->n; i++) {
        const mt__ckpt_array *a = &ix->arrays[i];
        json_t *dims = json_array(), *off = json_array();
        bad = !dims || !off;
        for (int d = 0; !bad && d < a->ndim; d++)
            bad = json_array_append_new(dims, json_integer((json_int_t)a->dims[d]));
        for (int k = 0; !bad && k < a->noffsets; k++)
            bad = json_array_append_new(off, json_integer(a->offsets[k]));
        if (bad) {
            json_decref(dims), json_decref(off);
            break;
        }
        bad = json_array_append_new(arrays, json_pack("{s:s, s:i, s:o, s:i, s:I, s:o}", "name",
                                                      a->name, "dtype", (int)a->dtype, "dims",
                                                      dims, "layout", a->layout, "crc",
                                                      (json_int_t)a->crc, "offsets", off));
    }
    /* a string as a string; a number as [type, text] (a double may be NaN: not JSON) */
    for (int i = 0; !bad && i < ix->nmeta; i++) {
        int type = ix->meta_types ? ix->meta_types[i] : MT__META_STR;
        bad = json_object_set_new(meta, ix->meta_keys[i],
                                  type == MT__META_STR
                                      ? json_string(ix->meta_values[i])
                                      : json_pack("[i, s]", type, ix->meta_values[i]));
    }
    if (bad) {
        json_decref(arrays), json_decref(meta);
        return NULL;
    }
    json_t *j = json_pack("{s:s, s:o, s:o}", "path", path, "arrays", arrays, "meta", meta);
    char *text = mt__json_dumps(j, JSON_COMPACT);
    json_decref(j);
    return text;
}

int mt__checkpoint_from_description(const char *text, mt_checkpoint **out)
{
    mt__json_watch();
    json_t *j = json_loads(text, 0, NULL), *arrays, *meta;
    const char *path;
    if (!j || json_unpack(j, "{s:s, s:o, s:o}", "path", &path, "arrays", &arrays, "meta", &meta) ||
        mt__json_oom(NULL)) {
        json_decref(j);
        return mt__json_oom(NULL) ? mt__error(MT_ENOMEM, "out of memory reading a checkpoint "
                                                         "description")
                                  : mt__error(MT_EFORMAT, "corrupt checkpoint description");
    }
    mt_checkpoint *ck = mt__ck_new(MT__CK_STORED);
    mt__ckpt_index *ix = ck ? &ck->stored.index : NULL;
    int rc = ck && (ck->stored.path = mt__strdup(path)) ? MT_OK : MT_ENOMEM;
    size_t n = json_array_size(arrays);
    if (!rc && n && !(ix->arrays = calloc(n, sizeof *ix->arrays)))
        rc = MT_ENOMEM;
    if (!rc)
        ix->cap = n;
    for (size_t i = 0; !rc && i < n; i++) {
        json_t *e = json_array_get(arrays, i), *dims, *off;
        const char *name;
        int dtype, layout;
        json_int_t crc;
        if (json_unpack(e, "{s:s, s:i, s:o, s:i, s:I, s:o}", "name", &name, "dtype", &dtype,
                        "dims", &dims, "layout", &layout, "crc", &crc, "offsets", &off)) {
            rc = mt__json_oom(NULL) ? MT_ENOMEM
                                    : mt__error(MT_EFORMAT, "corrupt checkpoint description");
            break;
        }
        mt__ckpt_array *a = &ix->arrays[ix->n++];
        snprintf(a->name, sizeof a->name, "%s", name);
        a->dtype = (mt_dtype)dtype;
        a->layout = layout;
        a->crc = (uint32_t)crc;
        a->ndim = (int)json_array_size(dims);
        if (a->ndim < 1 || a->ndim > 8 || strlen(name) >= sizeof a->name) {
            rc = mt__error(MT_EFORMAT, "corrupt checkpoint description (array %.64s)", name);
            break;
        }
        for (int d = 0; d < a->ndim; d++)
            a->dims[d] = (uint64_t)json_integer_value(json_array_get(dims, (size_t)d));
        a->noffsets = (int)json_array_size(off);
        if (a->noffsets && !(a->offsets = malloc((size_t)a->noffsets * sizeof(int64_t)))) {
            a->noffsets = 0; /* never a count without its offsets */
            rc = MT_ENOMEM;
        }
        for (int k = 0; !rc && k < a->noffsets; k++)
            a->offsets[k] = json_integer_value(json_array_get(off, (size_t)k));
    }
    const char *key;
    json_t *v;
    json_object_foreach(meta, key, v)
    {
        if (rc)
            break;
        size_t need = (size_t)ix->nmeta + 1;
        if (MT__GROW(ix->meta_keys, ix->keys_cap, need) ||
            MT__GROW(ix->meta_values, ix->values_cap, need) ||
            MT__GROW(ix->meta_types, ix->types_cap, need)) {
            rc = MT_ENOMEM;
            break;
        }
        int type = MT__META_STR;
        const char *value = json_string_value(v);
        if (json_is_array(v)) {
            type = (int)json_integer_value(json_array_get(v, 0));
            value = json_string_value(json_array_get(v, 1));
            if ((type != MT__META_I64 && type != MT__META_F64) || !value) {
                rc = mt__error(MT_EFORMAT, "corrupt checkpoint description (metadata %.64s)", key);
                break;
            }
        }
        ix->meta_types[ix->nmeta] = type;
        char *kk = strdup(key), *vv = strdup(value ? value : "");
        if (!kk || !vv) {
            free(kk), free(vv);
            rc = MT_ENOMEM;
            break;
        }
        ix->meta_keys[ix->nmeta] = kk;
        ix->meta_values[ix->nmeta++] = vv;
    }
    if (!rc && mt__json_oom(NULL)) /* an unpack above may have lost a field */
        rc = MT_ENOMEM;
    json_decref(j);
    if (rc == MT_ENOMEM)
        mt__error(MT_ENOMEM, "out of memory reading a checkpoint description");
    if (rc) {
        mt_checkpoint_free(&ck);
        return rc;
    }
    *out = ck;
    return MT_OK;
}
