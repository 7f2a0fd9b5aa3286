/*
 * ckpt.c -- checkpoint.h5: one HDF5 dataset per array (global shape, rows written in
 * pieces), with attributes layout, crc32 (of the array's bytes in row order), offsets
 * (row offset of each rank's part, sharded arrays) and metadata on the root group as
 * "meta:KEY" (a fixed-length string, a 64-bit integer or a double). Serial HDF5, rank 0
 * only.
 *
 * This file holds the file calls and the writing; the index reading and its checks are
 * ckpt_index.c, the sealed checksum header ckpt_seal.c, the writer and reader objects
 * ckpt_writer.c.
 */
#include "h5.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The system's reason for the HDF5 failure just seen (the sec2 driver records it as
 * "error message = '...'" on the error stack), else errno's; call with the lock held,
 * right after the failing call. */
typedef struct {
    char *buf;
    size_t n;
} reason;

static herr_t find_reason(unsigned n, const H5E_error2_t *e, void *arg)
{
    reason *r = arg;
    const char *m = e->desc ? strstr(e->desc, "error message = '") : NULL;
    if (m && !r->buf[0]) {
        m += strlen("error message = '");
        size_t len = strcspn(m, "'");
        snprintf(r->buf, r->n, "%.*s", (int)(len < r->n ? len : r->n - 1), m);
    }
    return 0;
}

static const char *why_failed(char *buf, size_t n, int err)
{
    reason r = {buf, n};
    buf[0] = '\0';
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, find_reason, &r);
    if (!buf[0])
        snprintf(buf, n, "%s", err ? strerror(err) : "HDF5 error");
    return buf;
}

/* ------------------------------------------------------------ files */

int mt__ckpt_create(const char *path, hid_t *out)
{
    char why[256];
    mt__h5_lock();
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hid_t fcpl = H5Pcreate(H5P_FILE_CREATE);
    errno = 0;
    hid_t f = fcpl < 0 || H5Pset_userblock(fcpl, MT__CKPT_UB_SIZE) < 0
                  ? H5I_INVALID_HID
                  : H5Fcreate(path, H5F_ACC_TRUNC, fcpl, H5P_DEFAULT);
    if (f < 0)
        why_failed(why, sizeof why, errno);
    if (fcpl >= 0)
        H5Pclose(fcpl);
    mt__h5_unlock();
    if (f < 0)
        return mt__error(MT_EIO, "%s: cannot create the checkpoint file: %s", path, why);
    *out = f;
    return MT_OK;
}

int mt__ckpt_open(const char *path, hid_t *out)
{
    int rc = mt__ckpt_verify(path);
    if (rc)
        return rc;
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
    char why[256];
    unsigned intent = 0;
    mt__ckpt_regions R = {0};
    mt__h5_lock();
    /* a file this process writes gets its header once HDF5 is done with it */
    bool writing = H5Fget_intent(f, &intent) >= 0 && (intent & H5F_ACC_RDWR);
    int oom = writing ? mt__ckpt_collect_regions(f, &R) : 0;
    errno = 0;
    herr_t e = H5Fclose(f);
    if (e < 0)
        why_failed(why, sizeof why, errno);
    mt__h5_unlock();
    if (e < 0) {
        free(R.r);
        return mt__error(MT_EIO, "%s: close failed: %s", path, why);
    }
    if (oom)
        return mt__error(MT_ENOMEM, "%s: out of memory listing its arrays", path);
    if (writing) {
        int rc = mt__ckpt_write_header(path, &R, sync);
        free(R.r);
        return rc;
    }
    if (sync) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        int bad = fd < 0 || fsync(fd) != 0, err = errno;
        if (fd >= 0)
            close(fd);
        if (bad)
            return mt__error(MT_EIO, "%s: fsync failed: %s", path, strerror(err));
    }
    return MT_OK;
}

int mt__ckpt_add_array(hid_t f, const char *name, mt_dtype t, int ndim, const uint64_t *dims,
                       hid_t *out)
{
    hsize_t d[8];
    for (int i = 0; i < ndim; i++)
        d[i] = dims[i];
    char why[256] = "", file[1024] = "";
    mt__h5_lock();
    hid_t sp = H5Screate_simple(ndim, d, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    /* every row gets written: no fill pass over the file first */
    H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
    errno = 0;
    hid_t ds = H5Dcreate2(f, name, mt__h5_native(t), sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    if (ds < 0) {
        why_failed(why, sizeof why, errno);
        H5Fget_name(f, file, sizeof file);
    }
    H5Pclose(dcpl);
    H5Sclose(sp);
    mt__h5_unlock();
    if (ds < 0)
        return mt__error(MT_EIO, "%s: checkpoint array %s: cannot create: %s", file, name, why);
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
    if (nd < 1 || nd > 8) { /* the index refused such an array; never fill dims[8] */
        H5Sclose(fs);
        mt__h5_unlock();
        return mt__error(MT_EFORMAT, "checkpoint: an array has %d dimensions (1 to 8)", nd);
    }
    hsize_t dims[8], start[8] = {0}, count[8];
    H5Sget_simple_extent_dims(fs, dims, NULL);
    start[0] = row;
    count[0] = nrows;
    for (int i = 1; i < nd; i++)
        count[i] = dims[i];
    H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL);
    hid_t ms = H5Screate_simple(nd, count, NULL);
    errno = 0;
    herr_t e = write ? H5Dwrite(ds, mt__h5_native(t), ms, fs, H5P_DEFAULT, data)
                     : H5Dread(ds, mt__h5_native(t), ms, fs, H5P_DEFAULT, data);
    char why[256] = "", file[1024] = "", name[300] = "";
    if (e < 0) {
        why_failed(why, sizeof why, errno);
        H5Fget_name(ds, file, sizeof file);
        H5Iget_name(ds, name, sizeof name);
    }
    H5Sclose(ms);
    H5Sclose(fs);
    mt__h5_unlock();
    if (e < 0)
        return mt__error(write ? MT_EIO : MT_EFORMAT, "%s: array %s: %s of rows %llu..%llu "
                         "failed: %s", file, name[0] == '/' ? name + 1 : name,
                         write ? "write" : "read", (unsigned long long)row,
                         (unsigned long long)(row + nrows), why);
    return MT_OK;
}

void mt__ckpt_attr_write(hid_t obj, const char *name, hid_t type, hsize_t n, const void *v)
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
    mt__ckpt_attr_write(ds, "layout", H5T_NATIVE_INT, 0, &layout);
    mt__ckpt_attr_write(ds, "crc32", H5T_NATIVE_UINT32, 0, &crc);
    if (offsets && noffsets > 0)
        mt__ckpt_attr_write(ds, "offsets", H5T_NATIVE_INT64, (hsize_t)noffsets, offsets);
    /* the checks, of what the file holds (the reader computes them the same way) */
    mt__ckpt_array a = {.layout = layout, .offsets = (int64_t *)offsets,
                        .noffsets = offsets && noffsets > 0 ? noffsets : 0};
    char path[300] = "";
    H5Iget_name(ds, path, sizeof path);
    snprintf(a.name, sizeof a.name, "%s", path[0] == '/' ? path + 1 : path);
    hid_t ft = H5Dget_type(ds), sp = H5Dget_space(ds);
    a.dtype = mt__ckpt_dtype_of(ft);
    a.ndim = H5Sget_simple_extent_ndims(sp);
    hsize_t d[8] = {0};
    if (a.ndim >= 1 && a.ndim <= 8)
        H5Sget_simple_extent_dims(sp, d, NULL);
    for (int i = 0; i < a.ndim && i < 8; i++)
        a.dims[i] = d[i];
    H5Tclose(ft);
    H5Sclose(sp);
    uint32_t c[MT__CKPT_NCHECKS];
    mt__ckpt_array_checks(&a, c);
    mt__ckpt_attr_write(ds, "check", H5T_NATIVE_UINT32, MT__CKPT_NCHECKS, c);
    char why[256] = "", file[1024] = "";
    errno = 0;
    H5Fget_name(ds, file, sizeof file);
    herr_t e = H5Dclose(ds);
    if (e < 0)
        why_failed(why, sizeof why, errno);
    mt__h5_unlock();
    return e < 0 ? mt__error(MT_EIO, "%s: array %s: close failed: %s", file, a.name, why) : MT_OK;
}

int mt__ckpt_set_meta(hid_t f, const char *key, const char *value)
{
    return mt__ckpt_set_meta_typed(f, key, MT__META_STR, value);
}

int mt__ckpt_set_meta_typed(hid_t f, const char *key, int type, const char *value)
{
    char name[300];
    snprintf(name, sizeof name, "meta:%s", key);
    int64_t i = type == MT__META_I64 ? strtoll(value, NULL, 10) : 0;
    double d = type == MT__META_F64 ? strtod(value, NULL) : 0;
    const void *buf = type == MT__META_I64 ? (const void *)&i
                      : type == MT__META_F64 ? (const void *)&d : (const void *)value;
    mt__h5_lock();
    hid_t st = type == MT__META_I64 ? H5Tcopy(H5T_STD_I64LE)
               : type == MT__META_F64 ? H5Tcopy(H5T_IEEE_F64LE) : H5Tcopy(H5T_C_S1);
    if (type == MT__META_STR)
        H5Tset_size(st, strlen(value) + 1);
    hid_t mem = type == MT__META_I64 ? H5T_NATIVE_INT64 : type == MT__META_F64 ? H5T_NATIVE_DOUBLE
                                                                            : st;
    hid_t sp = H5Screate(H5S_SCALAR);
    errno = 0;
    hid_t a = H5Acreate2(f, name, st, sp, H5P_DEFAULT, H5P_DEFAULT);
    herr_t e = a < 0 ? -1 : H5Awrite(a, mem, buf);
    char why[256] = "", file[1024] = "";
    if (e < 0) {
        why_failed(why, sizeof why, errno);
        H5Fget_name(f, file, sizeof file);
    }
    if (a >= 0)
        H5Aclose(a);
    H5Sclose(sp);
    H5Tclose(st);
    mt__h5_unlock();
    return e < 0 ? mt__error(MT_EIO, "%s: metadata %s: write failed: %s", file, key, why) : MT_OK;
}

int mt__ckpt_seal(hid_t f, const char *path)
{
    mt__ckpt_index ix;
    mt__h5_lock();
    int rc = mt__ckpt_list(f, path, &ix);
    if (!rc) {
        uint32_t c[2];
        int format = MT__CKPT_FORMAT;
        mt__ckpt_index_checks(&ix, c);
        mt__ckpt_attr_write(f, "index_check", H5T_NATIVE_UINT32, 2, c);
        mt__ckpt_attr_write(f, "format", H5T_NATIVE_INT, 0, &format);
        mt__ckpt_index_free(&ix);
        if (H5Aexists(f, "format") <= 0 || H5Aexists(f, "index_check") <= 0)
            rc = mt__error(MT_EIO, "%s: cannot write the index checks", path);
    }
    mt__h5_unlock();
    return rc;
}
