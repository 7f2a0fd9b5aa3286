/*
 * fixtures.c -- writes the test files (serial HDF5, one process).
 */
#include "fixtures.h"

#include <stdlib.h>
#include <string.h>

static hid_t dcpl_for(fix_layout layout, int rank, const hsize_t *dims)
{
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    if (layout != FIX_CONTIGUOUS && dims[0] > 0) {
        hsize_t chunk[3] = {dims[0] < 64 ? dims[0] : 64, rank > 1 ? dims[1] : 0,
                            rank > 2 ? dims[2] : 0};
        H5Pset_chunk(dcpl, rank, chunk);
        if (layout == FIX_GZIP)
            H5Pset_deflate(dcpl, 4);
    }
    return dcpl;
}

static int write_col(hid_t g, const char *name, hid_t ftype, hid_t mtype, int rank,
                     const hsize_t *dims, const void *data, fix_layout layout)
{
    hid_t sp = H5Screate_simple(rank, dims, NULL), dcpl = dcpl_for(layout, rank, dims);
    hid_t d = H5Dcreate2(g, name, ftype, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    int rc = d < 0 || (dims[0] > 0 && H5Dwrite(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0);
    H5Dclose(d);
    H5Pclose(dcpl);
    H5Sclose(sp);
    return rc ? -1 : 0;
}

int fix_write_dataset(const char *file, const char *group, int64_t rows, fix_layout layout,
                      int append)
{
    hid_t f = append ? H5Fopen(file, H5F_ACC_RDWR, H5P_DEFAULT)
                     : H5Fcreate(file, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (f < 0)
        return -1;
    hid_t g = H5Gcreate2(f, group, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    int64_t *id = malloc((size_t)(rows ? rows : 1) * sizeof *id);
    float *x = malloc((size_t)(rows ? rows : 1) * 6 * sizeof *x);
    uint8_t *y = malloc((size_t)(rows ? rows : 1));
    for (int64_t i = 0; i < rows; i++) {
        id[i] = i;
        y[i] = (uint8_t)(i % 251);
        for (int j = 0; j < 6; j++)
            x[i * 6 + j] = (float)(i * 6 + j);
    }
    hsize_t d1[1] = {(hsize_t)rows}, d3[3] = {(hsize_t)rows, 3, 2};
    int rc = write_col(g, "id", H5T_STD_I64LE, H5T_NATIVE_INT64, 1, d1, id, layout) |
             write_col(g, "x", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 3, d3, x, layout) |
             write_col(g, "y", H5T_STD_U8LE, H5T_NATIVE_UINT8, 1, d1, y, layout);
    free(id);
    free(x);
    free(y);
    H5Gclose(g);
    H5Fclose(f);
    return rc;
}

int fix_write_broken(const char *file, const char *which)
{
    hid_t f = H5Fcreate(file, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hid_t g = H5Gcreate2(f, "/train", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    int64_t v[10] = {0};
    hsize_t ten[1] = {10}, nine[1] = {9}, zero[1] = {0};
    int rc = 0;
    if (!strcmp(which, "ragged")) {
        rc |= write_col(g, "a", H5T_STD_I64LE, H5T_NATIVE_INT64, 1, ten, v, FIX_CONTIGUOUS);
        rc |= write_col(g, "b", H5T_STD_I64LE, H5T_NATIVE_INT64, 1, nine, v, FIX_CONTIGUOUS);
    } else if (!strcmp(which, "string-column")) {
        rc |= write_col(g, "a", H5T_STD_I64LE, H5T_NATIVE_INT64, 1, ten, v, FIX_CONTIGUOUS);
        hid_t st = H5Tcopy(H5T_C_S1);
        H5Tset_size(st, 8);
        char s[10][8] = {{0}};
        rc |= write_col(g, "name", st, st, 1, ten, s, FIX_CONTIGUOUS);
        H5Tclose(st);
    } else if (!strcmp(which, "zero-rows")) {
        rc |= write_col(g, "a", H5T_STD_I64LE, H5T_NATIVE_INT64, 1, zero, v, FIX_CONTIGUOUS);
    } else if (!strcmp(which, "subgroup")) {
        rc |= write_col(g, "a", H5T_STD_I64LE, H5T_NATIVE_INT64, 1, ten, v, FIX_CONTIGUOUS);
        H5Gclose(H5Gcreate2(g, "nested", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    } /* "empty-group": nothing more */
    H5Gclose(g);
    H5Fclose(f);
    return rc;
}

int fix_write_wide(const char *file, const char *group, int64_t rows, int width)
{
    hid_t f = H5Fcreate(file, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (f < 0)
        return -1;
    hid_t g = H5Gcreate2(f, group, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t d1[1] = {(hsize_t)rows}, d2[2] = {(hsize_t)rows, (hsize_t)width};
    hid_t s1 = H5Screate_simple(1, d1, NULL), s2 = H5Screate_simple(2, d2, NULL);
    hid_t did = H5Dcreate2(g, "id", H5T_STD_I64LE, s1, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hid_t dx = H5Dcreate2(g, "x", H5T_IEEE_F32LE, s2, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    const int64_t slab = 1024;
    int64_t *id = malloc((size_t)slab * sizeof *id);
    float *x = malloc((size_t)slab * (size_t)width * sizeof *x);
    int rc = g < 0 || did < 0 || dx < 0 || !id || !x;
    for (int64_t r0 = 0; r0 < rows && !rc; r0 += slab) {
        int64_t n = rows - r0 < slab ? rows - r0 : slab;
        for (int64_t i = 0; i < n; i++) {
            id[i] = r0 + i;
            for (int j = 0; j < width; j++)
                x[i * width + j] = (float)(r0 + i);
        }
        hsize_t st[2] = {(hsize_t)r0, 0}, c1[1] = {(hsize_t)n}, c2[2] = {(hsize_t)n, (hsize_t)width};
        hid_t m1 = H5Screate_simple(1, c1, NULL), m2 = H5Screate_simple(2, c2, NULL);
        H5Sselect_hyperslab(s1, H5S_SELECT_SET, st, NULL, c1, NULL);
        H5Sselect_hyperslab(s2, H5S_SELECT_SET, st, NULL, c2, NULL);
        rc |= H5Dwrite(did, H5T_NATIVE_INT64, m1, s1, H5P_DEFAULT, id) < 0;
        rc |= H5Dwrite(dx, H5T_NATIVE_FLOAT, m2, s2, H5P_DEFAULT, x) < 0;
        H5Sclose(m1);
        H5Sclose(m2);
    }
    free(id);
    free(x);
    H5Dclose(did);
    H5Dclose(dx);
    H5Sclose(s1);
    H5Sclose(s2);
    H5Gclose(g);
    H5Fclose(f);
    return rc ? -1 : 0;
}
