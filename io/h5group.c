/*
 * h5group.c -- a dataset is an HDF5 group whose member datasets ("columns") share their
 * first dimension (rows). Opened with the MPI-IO driver and collective metadata reads, so
 * rank 0 reads the metadata once and every rank sees the same answer: a problem with the
 * file is the same error on every rank, and the caller's agreement keeps them together.
 */
#include "h5.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* io.h keeps HDF5's handles as int64_t, its sizes as uint64_t */
_Static_assert(sizeof(hid_t) == sizeof(int64_t) && (hid_t)-1 < 0, "hid_t is HDF5 1.10's");
_Static_assert(sizeof(hsize_t) == sizeof(uint64_t), "hsize_t is 64 bits");

static pthread_mutex_t h5_lock = PTHREAD_MUTEX_INITIALIZER;
#define LOCK() pthread_mutex_lock(&h5_lock)
#define UNLOCK() pthread_mutex_unlock(&h5_lock)

void mt__h5_lock(void) { LOCK(); }
void mt__h5_unlock(void) { UNLOCK(); }

static void quiet_hdf5(void)
{
    static bool done;
    if (!done) {
        H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
        done = true;
    }
}

hid_t mt__h5_native(mt_dtype t)
{
    switch (t) {
    case MT_U8: return H5T_NATIVE_UINT8;
    case MT_I32: return H5T_NATIVE_INT32;
    case MT_I64: return H5T_NATIVE_INT64;
    case MT_F32: return H5T_NATIVE_FLOAT;
    case MT_F64: return H5T_NATIVE_DOUBLE;
    }
    return H5I_INVALID_HID;
}

int mt__h5_precheck(const char *file)
{
    if (access(file, F_OK) != 0)
        return mt__error(MT_ENOTFOUND, "%s: no such file", file);
    if (access(file, R_OK) != 0)
        return mt__error(MT_EIO, "%s: not readable: %s", file, strerror(errno));
    LOCK();
    quiet_hdf5();
    htri_t ok = H5Fis_hdf5(file);
    UNLOCK();
    if (ok <= 0)
        return mt__error(MT_EFORMAT, "%s: not an HDF5 file", file);
    return MT_OK;
}

/* The memory dtype for a column's file type; 0 when not numeric. */
static mt_dtype pick_dtype(hid_t ftype, char *why, size_t len)
{
    H5T_class_t cls = H5Tget_class(ftype);
    size_t size = H5Tget_size(ftype);
    if (cls == H5T_INTEGER) {
        bool is_signed = H5Tget_sign(ftype) == H5T_SGN_2;
        if (size == 1 && !is_signed)
            return MT_U8;
        if (size < 4 || (size == 4 && is_signed))
            return MT_I32;
        if (size <= 8)
            return MT_I64;
    } else if (cls == H5T_FLOAT) {
        return size <= 4 ? MT_F32 : MT_F64;
    }
    static const char *names[] = {"integer", "float", "time", "string", "bitfield", "opaque",
                                  "compound", "reference", "enum", "variable-length", "array"};
    snprintf(why, len, "%s", cls >= 0 && cls <= 10 ? names[cls] : "unknown");
    return 0;
}

/* "file:group/column" for messages, whatever the lengths (NULL when out of memory). */
static char *where_of(const mt__h5group *g, const char *name)
{
    size_t len = strlen(g->file) + strlen(g->group) + strlen(name) + 3;
    char *w = malloc(len);
    if (w)
        snprintf(w, len, "%s:%s/%s", g->file, g->group, name);
    return w;
}

static int open_column(mt__h5group *g, hid_t grp, const char *name, mt__column *c)
{
    char *where = where_of(g, name);
    if (!where)
        return mt__error(MT_ENOMEM, "out of memory opening %s", g->file);
    int rc = MT_OK;
    H5O_info_t info;
    if (H5Oget_info_by_name(grp, name, &info, H5P_DEFAULT) < 0)
        rc = mt__error(MT_EFORMAT, "%s: cannot read object info", where);
    else if (info.type != H5O_TYPE_DATASET)
        rc = mt__error(MT_EFORMAT, "%s: is not a dataset (every member of a dataset group "
                                   "must be a column)", where);
    else {
        c->name = mt__strdup(name);
        c->dset = H5Dopen2(grp, name, H5P_DEFAULT);
        if (!c->name)
            rc = mt__error(MT_ENOMEM, "%s: out of memory opening the column", where);
        else if (c->dset < 0)
            rc = mt__error(MT_EFORMAT, "%s: cannot open dataset", where);
    }
    if (rc) {
        free(where);
        return rc;
    }
    hid_t ft = H5Dget_type(c->dset), sp = H5Dget_space(c->dset);
    char why[32] = "";
    c->dtype = pick_dtype(ft, why, sizeof why);
    int nd = H5Sget_simple_extent_ndims(sp);
    if (!c->dtype)
        rc = mt__error(MT_EFORMAT, "%s: column type is %s, not numeric (need integers or "
                                   "floats)", where, why);
    else if (nd < 1 || nd > 8) /* checked before the dimensions land in dims[8] */
        rc = mt__error(MT_EFORMAT, "%s: has %d dimensions (need 1 to 8, rows first)", where, nd);
    else {
        c->ndim = nd;
        hsize_t dims[8];
        H5Sget_simple_extent_dims(sp, dims, NULL);
        for (int d = 0; d < nd; d++)
            c->dims[d] = dims[d];
        /* a row's bytes, and the rows, must be sizes this process can hold and count */
        uint64_t row = mt_dtype_size(c->dtype);
        for (int d = 1; d < nd && !rc; d++) {
            if (c->dims[d] && row > ((uint64_t)1 << 40) / c->dims[d])
                rc = mt__error(MT_EFORMAT, "%s: a row of shape %llu x ... is over 1 TiB "
                               "(dimension %d)", where, (unsigned long long)c->dims[1], d);
            row *= c->dims[d];
        }
        if (!rc && c->dims[0] > (hsize_t)INT64_MAX / 2)
            rc = mt__error(MT_EFORMAT, "%s: claims %llu rows", where,
                           (unsigned long long)c->dims[0]);
        c->row_elems = (size_t)(row / mt_dtype_size(c->dtype));
    }
    H5Tclose(ft);
    H5Sclose(sp);
    free(where);
    return rc;
}

static int open_columns(mt__h5group *g, hid_t grp)
{
    H5G_info_t gi;
    if (H5Gget_info(grp, &gi) < 0)
        return mt__error(MT_EFORMAT, "%s:%s: cannot read the group", g->file, g->group);
    if (gi.nlinks == 0)
        return mt__error(MT_EFORMAT, "%s:%s: the group is empty (a dataset needs at least one "
                                     "column)", g->file, g->group);
    g->cols = calloc(gi.nlinks, sizeof *g->cols);
    int nomem = g->cols ? MT_OK : mt__error(MT_ENOMEM, "out of memory listing %s:%s", g->file,
                                             g->group);
    if (gi.nlinks > 65536)
        return mt__error(MT_EFORMAT, "%s:%s: %llu members (a dataset has at most 65536 "
                         "columns)", g->file, g->group, (unsigned long long)gi.nlinks);
    /* metadata reads are collective: a rank out of memory still makes every HDF5 call the
     * others make (into a scratch column), and its error is agreed by the caller */
    for (hsize_t i = 0; i < gi.nlinks; i++) {
        /* the name's length first: a name is never cut to fit a buffer */
        ssize_t len = H5Lget_name_by_idx(grp, ".", H5_INDEX_NAME, H5_ITER_INC, i, NULL, 0,
                                         H5P_DEFAULT);
        char *name = len >= 0 ? malloc((size_t)len + 1) : NULL;
        if (len < 0 || !name ||
            H5Lget_name_by_idx(grp, ".", H5_INDEX_NAME, H5_ITER_INC, i, name, (size_t)len + 1,
                               H5P_DEFAULT) < 0) {
            free(name);
            return mt__error(len < 0 || name ? MT_EFORMAT : MT_ENOMEM,
                             "%s:%s: cannot read member %llu", g->file, g->group,
                             (unsigned long long)i);
        }
        mt__column scratch = {.dset = H5I_INVALID_HID};
        mt__column *c = g->cols ? &g->cols[g->ncols++] : &scratch;
        c->dset = H5I_INVALID_HID;
        int rc = open_column(g, grp, name, c);
        free(name);
        if (c == &scratch) {
            if (scratch.dset >= 0)
                H5Dclose(scratch.dset);
            free(scratch.name);
        }
        if (rc == MT_ENOMEM && !nomem)
            nomem = rc;
        else if (rc && rc != MT_ENOMEM)
            return rc;
    }
    if (nomem)
        return nomem;
    g->rows = (int64_t)g->cols[0].dims[0];
    for (int i = 1; i < g->ncols; i++)
        if ((int64_t)g->cols[i].dims[0] != g->rows)
            return mt__error(MT_EFORMAT, "%s:%s: columns have different row counts: %s has "
                             "%lld rows, %s has %llu", g->file, g->group, g->cols[0].name,
                             (long long)g->rows, g->cols[i].name,
                             (unsigned long long)g->cols[i].dims[0]);
    if (g->rows == 0)
        return mt__error(MT_EFORMAT, "%s:%s: the dataset has zero rows", g->file, g->group);
    return MT_OK;
}

mt__h5group *mt__h5group_new(const char *file, const char *group)
{
    mt__h5group *g = calloc(1, sizeof *g);
    if (g) {
        g->fid = H5I_INVALID_HID;
        g->file = mt__strdup(file);
        g->group = mt__strdup(group);
    }
    if (!g || !g->file || !g->group) {
        mt__h5group_close(&g);
        mt__error(MT_ENOMEM, "out of memory opening %s", file);
    }
    return g;
}

int mt__h5group_open(MPI_Comm comm, mt__h5group *g)
{
    int rc = MT_OK;
    const char *file = g->file, *group = g->group;
    g->collective = mt__env_knob_bool("MT_IO_COLLECTIVE", false);
    LOCK();
    quiet_hdf5();
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS), grp = H5I_INVALID_HID;
    H5Pset_fapl_mpio(fapl, comm, MPI_INFO_NULL);
    H5Pset_all_coll_metadata_ops(fapl, true);
    g->fid = H5Fopen(file, H5F_ACC_RDONLY, fapl);
    H5Pclose(fapl);
    if (g->fid < 0)
        rc = mt__error(MT_EFORMAT, "%s: cannot open as HDF5 with MPI-IO", file);
    else if (H5Lexists(g->fid, group, H5P_DEFAULT) <= 0)
        rc = mt__error(MT_ENOTFOUND, "%s: no group %s", file, group);
    else if ((grp = H5Gopen2(g->fid, group, H5P_DEFAULT)) < 0)
        rc = mt__error(MT_EFORMAT, "%s:%s: is not a group (a dataset is a group of columns)",
                       file, group);
    else
        rc = open_columns(g, grp);
    if (grp >= 0)
        H5Gclose(grp);
    UNLOCK();
    return rc;
}

void mt__h5group_close(mt__h5group **gp)
{
    if (!gp || !*gp)
        return;
    mt__h5group *g = *gp;
    LOCK();
    for (int i = 0; i < g->ncols; i++) {
        if (g->cols[i].dset >= 0)
            H5Dclose(g->cols[i].dset);
        free(g->cols[i].name);
    }
    if (g->fid >= 0)
        H5Fclose(g->fid);
    UNLOCK();
    free(g->cols);
    free(g->file);
    free(g->group);
    free(g);
    *gp = NULL;
}

int mt__h5group_read(mt__h5group *g, int col, const mt__run *runs, int nruns, mt_dtype as,
                     void *dst)
{
    mt__column *c = &g->cols[col];
    int rc = MT_OK;
    LOCK();
    hid_t fs = H5Dget_space(c->dset);
    hsize_t start[8] = {0}, count[8], total = 0;
    for (int d = 1; d < c->ndim; d++)
        count[d] = c->dims[d];
    H5Sselect_none(fs);
    for (int i = 0; i < nruns; i++) {
        if (runs[i].count == 0)
            continue;
        start[0] = (hsize_t)runs[i].start;
        count[0] = (hsize_t)runs[i].count;
        /* SET for the first run keeps a single run a regular hyperslab (fast path) */
        H5Sselect_hyperslab(fs, total ? H5S_SELECT_OR : H5S_SELECT_SET, start, NULL, count,
                            NULL);
        total += count[0];
    }
    /* the memory space has the file's rank: with a flat one HDF5 takes an element-wise
     * path that reads 30x slower */
    hsize_t mdims[8];
    mdims[0] = total;
    for (int d = 1; d < c->ndim; d++)
        mdims[d] = c->dims[d];
    hid_t ms = H5Screate_simple(c->ndim, mdims, NULL);
    if (total == 0)
        H5Sselect_none(ms);
    hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
    H5Pset_dxpl_mpio(dxpl, g->collective ? H5FD_MPIO_COLLECTIVE : H5FD_MPIO_INDEPENDENT);
    /* a union of hyperslabs reads in file order; runs are given in increasing order by the
     * caller when the order matters */
    /* HDF5 converts from the stored type to `as` as it reads (out-of-range values
     * saturate), so a converted column needs no second pass and no stored-type copy */
    if (H5Dread(c->dset, mt__h5_native(as), ms, fs, dxpl, dst) < 0)
        rc = mt__error(MT_EIO, "%s:%s/%s: read of %llu rows failed", g->file, g->group,
                       c->name, (unsigned long long)total);
    H5Pclose(dxpl);
    H5Sclose(ms);
    H5Sclose(fs);
    UNLOCK();
    return rc;
}
