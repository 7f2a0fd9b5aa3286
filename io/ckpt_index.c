/*
 * ckpt_index.c -- reading the index of checkpoint.h5 (its arrays and metadata, see ckpt.c)
 * and the checks that guard it, with the legacy path for files written before the checks.
 *
 * The bytes are not all that decides what a rank gets back: the name it is found by,
 * the dtype, the shape, the layout and the row offsets do too, and a damaged one would
 * restore the wrong rows silently. So each array also carries "check": CRC-32s of its
 * name, dtype, shape, layout and offsets (integers as little-endian bytes), and the root
 * carries "format" (2) and "index_check": CRC-32s of the list of array names and of the
 * metadata. Reading the index compares them all and names what does not match; the
 * caller treats that as a corrupt checkpoint. Files without "format" (written before the
 * checks existed) are read as before, with the structural checks only, provided they
 * carry the checksum header below (those written before the header are refused).
 */
#include "h5.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

enum { CHECK_NAME, CHECK_DTYPE, CHECK_SHAPE, CHECK_LAYOUT, CHECK_OFFSETS, NCHECKS };
static const char *const check_what[NCHECKS] = {"name", "dtype", "shape", "layout",
                                                "row offsets"};
_Static_assert(NCHECKS == MT__CKPT_NCHECKS, "h5.h counts the checks");

static uLong crc_u64(uLong crc, uint64_t v)
{
    unsigned char b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(v >> (8 * i));
    return crc32(crc, b, 8);
}

static uLong crc_str(uLong crc, const char *s)
{
    return crc32(crc, (const Bytef *)s, (uInt)strlen(s) + 1);
}

/* The checks of everything but the bytes that decides what a rank gets back. */
void mt__ckpt_array_checks(const mt__ckpt_array *a, uint32_t c[NCHECKS])
{
    uLong z = crc32(0, NULL, 0), v;
    c[CHECK_NAME] = (uint32_t)crc_str(z, a->name);
    c[CHECK_DTYPE] = (uint32_t)crc_u64(z, (uint64_t)a->dtype);
    v = crc_u64(z, (uint64_t)a->ndim);
    for (int i = 0; i < a->ndim && i < 8; i++)
        v = crc_u64(v, a->dims[i]);
    c[CHECK_SHAPE] = (uint32_t)v;
    c[CHECK_LAYOUT] = (uint32_t)crc_u64(z, (uint64_t)(int64_t)a->layout);
    v = crc_u64(z, (uint64_t)a->noffsets);
    for (int i = 0; i < a->noffsets; i++)
        v = crc_u64(v, (uint64_t)a->offsets[i]);
    c[CHECK_OFFSETS] = (uint32_t)v;
}
mt_dtype mt__ckpt_dtype_of(hid_t ft)
{
    H5T_class_t cls = H5Tget_class(ft);
    size_t size = H5Tget_size(ft);
    if (cls == H5T_FLOAT)
        return size == 4 ? MT_F32 : MT_F64;
    if (cls == H5T_INTEGER)
        return size == 1 ? MT_U8 : size == 4 ? MT_I32 : MT_I64;
    return 0;
}

typedef struct {
    mt__ckpt_index *ix;
    int checked;        /* arrays that carry "check" */
    char why[512];      /* what did not match */
} lister;

/* Structure a reader relies on, whatever the format: a known layout, offsets that start
 * at 0, never go down and end at the row count. */
static bool plausible(const mt__ckpt_array *a, char *why, size_t n)
{
    if (a->layout != 0 && a->layout != 1) {
        snprintf(why, n, "array %s: layout is %d (0 or 1 expected)", a->name, a->layout);
        return false;
    }
    if (a->noffsets > 0) {
        bool ok = a->offsets[0] == 0 && (uint64_t)a->offsets[a->noffsets - 1] == a->dims[0];
        for (int i = 1; ok && i < a->noffsets; i++)
            ok = a->offsets[i] >= a->offsets[i - 1];
        if (!ok) {
            snprintf(why, n, "array %s: attribute offsets does not split its %llu rows",
                     a->name, (unsigned long long)a->dims[0]);
            return false;
        }
    }
    return true;
}

/* A one-element numeric attribute into *out (mem: its native type); -1 otherwise (a
 * many-element attribute read into one number would overflow it). */
static int read_scalar_attr(hid_t obj, const char *name, hid_t mem, void *out)
{
    if (H5Aexists(obj, name) <= 0)
        return -1;
    hid_t at = H5Aopen(obj, name, H5P_DEFAULT);
    if (at < 0)
        return -1;
    hid_t sp = H5Aget_space(at), ft = H5Aget_type(at);
    int ok = H5Sget_simple_extent_npoints(sp) == 1 &&
             (H5Tget_class(ft) == H5T_INTEGER || H5Tget_class(ft) == H5T_FLOAT) &&
             H5Aread(at, mem, out) >= 0;
    H5Tclose(ft);
    H5Sclose(sp);
    H5Aclose(at);
    return ok ? 0 : -1;
}

/* Reading the index is reading a file from outside: every size is checked against the
 * fixed fields it lands in (at most 8 dimensions, names that fit, one element per scalar
 * attribute, metadata of one fixed-length string, shapes the stored bytes hold). */
static herr_t list_array(hid_t g, const char *name, const H5L_info_t *info, void *arg)
{
    lister *L = arg;
    mt__ckpt_index *ix = L->ix;
    if (strlen(name) >= sizeof ix->arrays[0].name) {
        snprintf(L->why, sizeof L->why, "an array name of %zu bytes (at most %zu)", strlen(name),
                 sizeof ix->arrays[0].name - 1);
        return -1;
    }
    if (MT__GROW(ix->arrays, ix->cap, (size_t)ix->n + 1)) {
        ix->oom = true;
        snprintf(L->why, sizeof L->why, "out of memory");
        return -1;
    }
    mt__ckpt_array *a = &ix->arrays[ix->n];
    memset(a, 0, sizeof *a);
    snprintf(a->name, sizeof a->name, "%s", name);
    hid_t ds = H5Dopen2(g, name, H5P_DEFAULT);
    if (ds < 0) {
        snprintf(L->why, sizeof L->why, "%s is not an array (dataset)", name);
        return -1;
    }
    hid_t ft = H5Dget_type(ds), sp = H5Dget_space(ds);
    a->dtype = mt__ckpt_dtype_of(ft);
    a->ndim = H5Sget_simple_extent_ndims(sp);
    hsize_t d[8];
    int ok = a->dtype && a->ndim >= 1 && a->ndim <= 8; /* before dims land in d[8] */
    if (ok)
        H5Sget_simple_extent_dims(sp, d, NULL);
    uint64_t bytes = mt_dtype_size(a->dtype);
    for (int i = 0; ok && i < a->ndim; i++) {
        a->dims[i] = d[i];
        if (d[i] > INT64_MAX || (d[i] && bytes > UINT64_MAX / 2 / d[i])) {
            snprintf(L->why, sizeof L->why, "array %s: its shape does not fit in memory sizes",
                     name);
            ok = 0;
        }
        bytes *= d[i];
    }
    if (!ok && !L->why[0] && !a->dtype)
        snprintf(L->why, sizeof L->why, "array %s: not a numeric type", name);
    else if (!ok && !L->why[0])
        snprintf(L->why, sizeof L->why, "array %s has %d dimensions (1 to 8 are possible)", name,
                 a->ndim);
    /* checkpoints are written whole and uncompressed: a shape the stored bytes do not hold
     * is a lie (a 2 KB file claiming 2^40 rows), refused before anything reads it */
    if (ok && H5Dget_storage_size(ds) != bytes) {
        snprintf(L->why, sizeof L->why, "array %s claims %llu bytes but the file holds %llu for "
                 "it", name, (unsigned long long)bytes,
                 (unsigned long long)H5Dget_storage_size(ds));
        ok = 0;
    }
    hid_t at;
    if (ok && (read_scalar_attr(ds, "layout", H5T_NATIVE_INT, &a->layout) ||
               (a->layout != 0 && a->layout != 1))) {
        snprintf(L->why, sizeof L->why, "array %s: attribute layout is missing or not 0 or 1",
                 name);
        ok = 0;
    }
    if (ok && read_scalar_attr(ds, "crc32", H5T_NATIVE_UINT32, &a->crc)) {
        snprintf(L->why, sizeof L->why, "array %s: attribute crc32 is missing or not one number",
                 name);
        ok = 0;
    }
    if (ok && H5Aexists(ds, "offsets") > 0 && (at = H5Aopen(ds, "offsets", H5P_DEFAULT)) >= 0) {
        hid_t asp = H5Aget_space(at);
        hssize_t n = H5Sget_simple_extent_npoints(asp);
        if (n >= 2 && n <= 1 << 20 && (a->offsets = malloc((size_t)n * sizeof(int64_t)))) {
            a->noffsets = (int)n;
            ok = H5Aread(at, H5T_NATIVE_INT64, a->offsets) >= 0;
        } else {
            ok = 0;
            if (n >= 2 && n <= 1 << 20)
                ix->oom = true;
        }
        if (!ok)
            snprintf(L->why, sizeof L->why, "array %s: its offsets attribute is unreadable", name);
        H5Sclose(asp);
        H5Aclose(at);
    }
    if (ok && H5Aexists(ds, "check") > 0) {
        uint32_t want[NCHECKS] = {0}, have[NCHECKS];
        hid_t cat = H5Aopen(ds, "check", H5P_DEFAULT), csp = H5Aget_space(cat);
        ok = H5Sget_simple_extent_npoints(csp) == NCHECKS &&
             H5Aread(cat, H5T_NATIVE_UINT32, want) >= 0;
        H5Sclose(csp);
        H5Aclose(cat);
        if (!ok)
            snprintf(L->why, sizeof L->why, "array %s: its check attribute is unreadable", name);
        mt__ckpt_array_checks(a, have);
        for (int i = 0; ok && i < NCHECKS; i++)
            if (have[i] != want[i]) {
                snprintf(L->why, sizeof L->why, "array %s: the checksum of its %s does not "
                         "match (damaged metadata)", name, check_what[i]);
                ok = 0;
            }
        L->checked++;
    }
    if (ok)
        ok = plausible(a, L->why, sizeof L->why);
    H5Tclose(ft);
    H5Sclose(sp);
    H5Dclose(ds);
    if (!ok) {
        free(a->offsets);
        a->offsets = NULL;
        return -1;
    }
    ix->n++;
    return 0;
}

static herr_t list_meta(hid_t obj, const char *name, const H5A_info_t *info, void *arg)
{
    lister *L = arg;
    mt__ckpt_index *ix = L->ix;
    if (strncmp(name, "meta:", 5))
        return 0;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    if (a < 0) {
        snprintf(L->why, sizeof L->why, "metadata %s cannot be opened", name + 5);
        return -1;
    }
    hid_t t = H5Aget_type(a), sp = H5Aget_space(a);
    size_t n = H5Tget_size(t);
    H5T_class_t cls = H5Tget_class(t);
    /* one fixed-length string, 64-bit integer or double: what mt__ckpt_set_meta_typed
     * writes, and all the buffer holds */
    int type = cls == H5T_INTEGER ? MT__META_I64 : cls == H5T_FLOAT ? MT__META_F64 : MT__META_STR;
    int scalar = H5Sget_simple_extent_npoints(sp) == 1;
    int one = scalar && (type == MT__META_STR ? cls == H5T_STRING && H5Tis_variable_str(t) == 0 &&
                                                    n > 0 && n <= (16u << 20)
                                              : n == 8);
    H5Sclose(sp);
    char *v = one ? calloc(type == MT__META_STR ? n + 1 : 32, 1) : NULL;
    size_t need = (size_t)ix->nmeta + 1;
    bool room = !MT__GROW(ix->meta_keys, ix->keys_cap, need) &&
                !MT__GROW(ix->meta_values, ix->values_cap, need) &&
                !MT__GROW(ix->meta_types, ix->types_cap, need);
    int64_t iv = 0;
    double dv = 0;
    herr_t got = !one ? -1
                 : type == MT__META_I64 ? H5Aread(a, H5T_NATIVE_INT64, &iv)
                 : type == MT__META_F64 ? H5Aread(a, H5T_NATIVE_DOUBLE, &dv)
                 : v ? H5Aread(a, t, v) : 0;
    if (got >= 0 && v && type == MT__META_I64)
        snprintf(v, 32, "%lld", (long long)iv);
    else if (got >= 0 && v && type == MT__META_F64)
        snprintf(v, 32, "%.17g", dv);
    int rc = -1;
    if (!one) {
        snprintf(L->why, sizeof L->why, "metadata %s: not one fixed-length string, 64-bit "
                 "integer or double", name + 5);
    } else if (!v || !room) {
        ix->oom = true;
        free(v);
    } else if (got < 0) {
        free(v);
        snprintf(L->why, sizeof L->why, "metadata %s is unreadable", name + 5);
    } else if (!(ix->meta_keys[ix->nmeta] = strdup(name + 5))) {
        ix->oom = true;
        free(v);
    } else {
        ix->meta_types[ix->nmeta] = type;
        ix->meta_values[ix->nmeta++] = v;
        rc = 0;
    }
    H5Tclose(t);
    H5Aclose(a);
    return rc;
}

/* CRC-32s of the array names and of the metadata, in the file's name order. */
void mt__ckpt_index_checks(const mt__ckpt_index *ix, uint32_t c[2])
{
    uLong names = crc_u64(crc32(0, NULL, 0), (uint64_t)ix->n);
    uLong meta = crc_u64(crc32(0, NULL, 0), (uint64_t)ix->nmeta);
    for (int i = 0; i < ix->n; i++)
        names = crc_str(names, ix->arrays[i].name);
    for (int i = 0; i < ix->nmeta; i++) {
        meta = crc_str(crc_str(meta, ix->meta_keys[i]), ix->meta_values[i] ? ix->meta_values[i] : "");
        if (ix->meta_types && ix->meta_types[i] != MT__META_STR) /* strings: as before types */
            meta = crc_u64(meta, (uint64_t)ix->meta_types[i]);
    }
    c[0] = (uint32_t)names;
    c[1] = (uint32_t)meta;
}

/* With the HDF5 lock held: the arrays and metadata; unless `sealing`, the file-level
 * checks too. */
static int read_index(hid_t f, const char *path, mt__ckpt_index *ix, bool sealing)
{
    lister L = {.ix = ix};
    memset(ix, 0, sizeof *ix);
    hsize_t idx = 0, aidx = 0;
    herr_t e = H5Literate(f, H5_INDEX_NAME, H5_ITER_INC, &idx, list_array, &L);
    if (e >= 0)
        e = H5Aiterate2(f, H5_INDEX_NAME, H5_ITER_INC, &aidx, list_meta, &L);
    if (e >= 0 && !sealing) {
        int format = 0;
        hid_t at = H5Aexists(f, "format") > 0 ? H5Aopen(f, "format", H5P_DEFAULT) : -1;
        if (at >= 0) {
            if (H5Aread(at, H5T_NATIVE_INT, &format) < 0)
                format = -1;
            H5Aclose(at);
        }
        uint32_t want[2] = {0}, have[2];
        if (format == 0 && L.checked > 0) {
            snprintf(L.why, sizeof L.why, "its arrays carry checks but the file has no format "
                     "attribute (damaged metadata)");
            e = -1;
        } else if (format != 0 && format != MT__CKPT_FORMAT) {
            snprintf(L.why, sizeof L.why, "format %d is not one this version reads (%d)", format,
                     MT__CKPT_FORMAT);
            e = -1;
        } else if (format == MT__CKPT_FORMAT) {
            at = H5Aexists(f, "index_check") > 0 ? H5Aopen(f, "index_check", H5P_DEFAULT) : -1;
            if (at < 0 || H5Aread(at, H5T_NATIVE_UINT32, want) < 0) {
                snprintf(L.why, sizeof L.why, "its index_check attribute is missing or unreadable");
                e = -1;
            }
            if (at >= 0)
                H5Aclose(at);
            mt__ckpt_index_checks(ix, have);
            if (e >= 0 && L.checked != ix->n) {
                snprintf(L.why, sizeof L.why, "%d of its %d arrays have no check attribute "
                         "(damaged metadata)", ix->n - L.checked, ix->n);
                e = -1;
            } else if (e >= 0 && (have[0] != want[0] || have[1] != want[1])) {
                snprintf(L.why, sizeof L.why, "the checksum of its %s does not match (damaged "
                         "metadata: an array or key added, removed or changed)",
                         have[0] != want[0] ? "list of arrays" : "metadata");
                e = -1;
            }
        }
    }
    if (e < 0) {
        bool oom = ix->oom;
        mt__ckpt_index_free(ix);
        return oom ? mt__error(MT_ENOMEM, "%s: out of memory reading the checkpoint index", path)
                   : mt__error(MT_EFORMAT, "%s: corrupt checkpoint index: %s", path,
                               L.why[0] ? L.why : "unreadable");
    }
    return MT_OK;
}

int mt__ckpt_read_index(hid_t f, const char *path, mt__ckpt_index *ix)
{
    mt__h5_lock();
    int rc = read_index(f, path, ix, false);
    mt__h5_unlock();
    return rc;
}

int mt__ckpt_list(hid_t f, const char *path, mt__ckpt_index *ix)
{
    return read_index(f, path, ix, true);
}

void mt__ckpt_index_free(mt__ckpt_index *ix)
{
    for (int i = 0; i < ix->n; i++)
        free(ix->arrays[i].offsets);
    free(ix->arrays);
    for (int i = 0; i < ix->nmeta; i++) {
        free(ix->meta_keys[i]);
        free(ix->meta_values[i]);
    }
    free(ix->meta_keys);
    free(ix->meta_values);
    free(ix->meta_types);
    memset(ix, 0, sizeof *ix);
}

int mt__ckpt_open_array(hid_t f, const char *name, hid_t *out)
{
    mt__h5_lock();
    hid_t ds = H5Dopen2(f, name, H5P_DEFAULT);
    mt__h5_unlock();
    if (ds < 0)
        return mt__error(MT_EFORMAT, "checkpoint array %s: cannot open", name);
    *out = ds;
    return MT_OK;
}

void mt__ckpt_close_array(hid_t ds)
{
    mt__h5_lock();
    H5Dclose(ds);
    mt__h5_unlock();
}
