/*
 * ckpt.c -- checkpoint.h5: one HDF5 dataset per array (global shape, rows written in
 * pieces), with attributes layout, crc32 (of the array's bytes in row order), offsets
 * (row offset of each rank's part, sharded arrays) and string metadata on the root group
 * as "meta:KEY". Serial HDF5, rank 0 only.
 */
#include "io.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int mt__ckpt_create(const char *path, hid_t *out)
{
    mt__h5_lock();
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    mt__h5_unlock();
    if (f < 0)
        return mt__error(MT_EIO, "%s: cannot create the checkpoint file", path);
    *out = f;
    return MT_OK;
}

int mt__ckpt_open(const char *path, hid_t *out)
{
    mt__h5_lock();
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    mt__h5_unlock();
    if (f < 0)
        return mt__error(MT_EFORMAT, "%s: cannot open (missing, truncated or not HDF5)", path);
    *out = f;
    return MT_OK;
}

int mt__ckpt_close(hid_t f, const char *path, bool sync)
{
    mt__h5_lock();
    herr_t e = H5Fclose(f);
    mt__h5_unlock();
    if (e < 0)
        return mt__error(MT_EIO, "%s: close failed", path);
    if (sync) {
        int fd = open(path, O_RDONLY);
        int bad = fd < 0 || fsync(fd) != 0;
        if (fd >= 0)
            close(fd);
        if (bad)
            return mt__error(MT_EIO, "%s: fsync failed", path);
    }
    return MT_OK;
}

int mt__ckpt_add_array(hid_t f, const char *name, mt_dtype t, int ndim, const uint64_t *dims,
                       hid_t *out)
{
    hsize_t d[8];
    for (int i = 0; i < ndim; i++)
        d[i] = dims[i];
    mt__h5_lock();
    hid_t sp = H5Screate_simple(ndim, d, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    /* every row gets written: no fill pass over the file first */
    H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
    hid_t ds = H5Dcreate2(f, name, mt__h5_native(t), sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    H5Pclose(dcpl);
    H5Sclose(sp);
    mt__h5_unlock();
    if (ds < 0)
        return mt__error(MT_EIO, "checkpoint array %s: cannot create", name);
    *out = ds;
    return MT_OK;
}

/* Rows [row, row + nrows) of dataset ds from data (C order). */
int mt__ckpt_rows(hid_t ds, mt_dtype t, uint64_t row, uint64_t nrows, void *data, bool write)
{
    if (nrows == 0)
        return MT_OK;
    mt__h5_lock();
    hid_t fs = H5Dget_space(ds);
    int nd = H5Sget_simple_extent_ndims(fs);
    hsize_t dims[8], start[8] = {0}, count[8];
    H5Sget_simple_extent_dims(fs, dims, NULL);
    start[0] = row;
    count[0] = nrows;
    for (int i = 1; i < nd; i++)
        count[i] = dims[i];
    H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL);
    hid_t ms = H5Screate_simple(nd, count, NULL);
    herr_t e = write ? H5Dwrite(ds, mt__h5_native(t), ms, fs, H5P_DEFAULT, data)
                     : H5Dread(ds, mt__h5_native(t), ms, fs, H5P_DEFAULT, data);
    H5Sclose(ms);
    H5Sclose(fs);
    mt__h5_unlock();
    if (e < 0)
        return mt__error(write ? MT_EIO : MT_EFORMAT, "checkpoint: %s of rows %llu..%llu failed",
                         write ? "write" : "read", (unsigned long long)row,
                         (unsigned long long)(row + nrows));
    return MT_OK;
}

static void attr_write(hid_t obj, const char *name, hid_t type, hsize_t n, const void *v)
{
    hid_t sp = n ? H5Screate_simple(1, &n, NULL) : H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(obj, name, type, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, type, v);
    H5Aclose(a);
    H5Sclose(sp);
}

int mt__ckpt_finish_array(hid_t ds, int layout, uint32_t crc, const int64_t *offsets,
                          int noffsets)
{
    mt__h5_lock();
    attr_write(ds, "layout", H5T_NATIVE_INT, 0, &layout);
    attr_write(ds, "crc32", H5T_NATIVE_UINT32, 0, &crc);
    if (offsets && noffsets > 0)
        attr_write(ds, "offsets", H5T_NATIVE_INT64, (hsize_t)noffsets, offsets);
    herr_t e = H5Dclose(ds);
    mt__h5_unlock();
    return e < 0 ? mt__error(MT_EIO, "checkpoint: closing an array failed") : MT_OK;
}

int mt__ckpt_set_meta(hid_t f, const char *key, const char *value)
{
    char name[300];
    snprintf(name, sizeof name, "meta:%s", key);
    mt__h5_lock();
    hid_t st = H5Tcopy(H5T_C_S1);
    H5Tset_size(st, strlen(value) + 1);
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(f, name, st, sp, H5P_DEFAULT, H5P_DEFAULT);
    herr_t e = a < 0 ? -1 : H5Awrite(a, st, value);
    if (a >= 0)
        H5Aclose(a);
    H5Sclose(sp);
    H5Tclose(st);
    mt__h5_unlock();
    return e < 0 ? mt__error(MT_EIO, "checkpoint: metadata %s: write failed", key) : MT_OK;
}

/* ------------------------------------------------------------ reading the index */

static mt_dtype dtype_of(hid_t ft)
{
    H5T_class_t cls = H5Tget_class(ft);
    size_t size = H5Tget_size(ft);
    if (cls == H5T_FLOAT)
        return size == 4 ? MT_F32 : MT_F64;
    if (cls == H5T_INTEGER)
        return size == 1 ? MT_U8 : size == 4 ? MT_I32 : MT_I64;
    return 0;
}

/* One value: what layout and crc32 must be (an array attribute would overrun the read). */
static bool scalar_attr(hid_t at)
{
    hid_t sp = H5Aget_space(at);
    bool one = sp >= 0 && H5Sget_simple_extent_npoints(sp) == 1;
    if (sp >= 0)
        H5Sclose(sp);
    return one;
}

static herr_t list_array(hid_t g, const char *name, const H5L_info_t *info, void *arg)
{
    mt__ckpt_index *ix = arg;
    if (ix->n == ix->cap) {
        int cap = ix->cap ? ix->cap * 2 : 8;
        mt__ckpt_array *a = realloc(ix->arrays, (size_t)cap * sizeof *a);
        if (!a) {
            ix->oom = true;
            return -1;
        }
        ix->arrays = a;
        ix->cap = cap;
    }
    mt__ckpt_array *a = &ix->arrays[ix->n];
    memset(a, 0, sizeof *a);
    hid_t ds = H5Dopen2(g, name, H5P_DEFAULT);
    if (ds < 0)
        return -1;
    hid_t ft = H5Dget_type(ds), sp = H5Dget_space(ds);
    a->dtype = dtype_of(ft);
    a->ndim = H5Sget_simple_extent_ndims(sp);
    snprintf(a->name, sizeof a->name, "%s", name);
    int ok = a->dtype && a->ndim >= 1 && a->ndim <= 8;
    /* a hostile file cannot make the reader loop over rows it does not hold: every array
     * is written whole, so its stored bytes are its shape's bytes */
    hsize_t d[8], bytes = ok ? H5Tget_size(ft) : 0;
    if (ok && H5Sget_simple_extent_dims(sp, d, NULL) < 0)
        ok = 0;
    for (int i = 0; ok && i < a->ndim; i++) {
        a->dims[i] = d[i];
        if (d[i] && bytes > UINT64_MAX / d[i])
            ok = 0;
        else
            bytes *= d[i];
    }
    if (ok && H5Dget_storage_size(ds) != bytes)
        ok = 0;
    hid_t at;
    if (ok && (at = H5Aopen(ds, "layout", H5P_DEFAULT)) >= 0) {
        ok = scalar_attr(at) && H5Aread(at, H5T_NATIVE_INT, &a->layout) >= 0;
        H5Aclose(at);
    } else
        ok = 0;
    if (ok && (at = H5Aopen(ds, "crc32", H5P_DEFAULT)) >= 0) {
        ok = scalar_attr(at) && H5Aread(at, H5T_NATIVE_UINT32, &a->crc) >= 0;
        H5Aclose(at);
    } else
        ok = 0;
    if (ok && H5Aexists(ds, "offsets") > 0 && (at = H5Aopen(ds, "offsets", H5P_DEFAULT)) >= 0) {
        hid_t asp = H5Aget_space(at);
        hssize_t n = H5Sget_simple_extent_npoints(asp);
        if (n > 0 && n <= 1 << 20 && (a->offsets = malloc((size_t)n * sizeof(int64_t)))) {
            H5Aread(at, H5T_NATIVE_INT64, a->offsets);
            a->noffsets = (int)n;
        } else if (n > 0 && n <= 1 << 20)
            ok = 0, ix->oom = true;
        H5Sclose(asp);
        H5Aclose(at);
    }
    H5Tclose(ft);
    H5Sclose(sp);
    H5Dclose(ds);
    if (!ok)
        return -1;
    ix->n++;
    return 0;
}

static herr_t list_meta(hid_t obj, const char *name, const H5A_info_t *info, void *arg)
{
    mt__ckpt_index *ix = arg;
    if (strncmp(name, "meta:", 5))
        return 0;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    hid_t t = H5Aget_type(a);
    /* a fixed-length string of one value, as written; anything else would overrun v */
    size_t n = H5Tget_class(t) == H5T_STRING && !H5Tis_variable_str(t) && scalar_attr(a)
                   ? H5Tget_size(t)
                   : 0;
    char *v = n ? calloc(n + 1, 1) : NULL;
    char **keys = realloc(ix->meta_keys, (size_t)(ix->nmeta + 1) * sizeof *keys);
    if (keys)
        ix->meta_keys = keys;
    char **vals = realloc(ix->meta_values, (size_t)(ix->nmeta + 1) * sizeof *vals);
    if (vals)
        ix->meta_values = vals;
    int rc = -1;
    char *k = n && keys && vals ? strdup(name + 5) : NULL;
    if (n && (!v || !keys || !vals || !k))
        ix->oom = true;
    if (v && k && H5Aread(a, t, v) >= 0) {
        ix->meta_keys[ix->nmeta] = k;
        ix->meta_values[ix->nmeta++] = v;
        rc = 0;
    } else
        free(v), free(k);
    H5Tclose(t);
    H5Aclose(a);
    return rc;
}

int mt__ckpt_read_index(hid_t f, const char *path, mt__ckpt_index *ix)
{
    memset(ix, 0, sizeof *ix);
    mt__h5_lock();
    hsize_t idx = 0;
    herr_t e = H5Literate(f, H5_INDEX_NAME, H5_ITER_INC, &idx, list_array, ix);
    hsize_t aidx = 0;
    if (e >= 0)
        e = H5Aiterate2(f, H5_INDEX_NAME, H5_ITER_INC, &aidx, list_meta, ix);
    mt__h5_unlock();
    if (e < 0) {
        bool oom = ix->oom;
        mt__ckpt_index_free(ix);
        return oom ? mt__error(MT_ENOMEM, "%s: out of memory reading the checkpoint index", path)
                   : mt__error(MT_EFORMAT, "%s: corrupt checkpoint index", path);
    }
    return MT_OK;
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
