/*
 * io.h -- the HDF5 layer's internal interface: dataset groups opened with the MPI-IO
 * driver, row reads into memory, importers. The only folder that calls HDF5. Functions
 * take an MPI_Comm but never call collectives/; callers make the agreements.
 *
 * HDF5 as packaged with MPI is not thread-safe, so every entry point here holds one
 * process-wide lock while it is inside HDF5 (read-ahead threads read through it too).
 */
#ifndef MT_IO_H
#define MT_IO_H

#include "../common/common.h"

#include <hdf5.h>

typedef struct {
    char *name;
    hid_t dset;
    mt_dtype dtype;       /* the type rows are kept in memory as */
    int ndim;
    hsize_t dims[8];
    size_t row_elems;     /* elements per row: product of dims[1..] */
} mt__column;

typedef struct {
    char *file, *group;
    hid_t fid;
    int ncols;
    mt__column *cols;
    int64_t rows;
    bool collective;      /* MPI-IO transfer mode */
} mt__h5group;

/* The HDF5 memory type of a dtype. */
hid_t mt__h5_native(mt_dtype t);

/* Local: the file exists, is readable and is an HDF5 file. */
int mt__h5_precheck(const char *file);
/* Collective over comm (HDF5 with MPI-IO, collective metadata). Checks every column. */
int mt__h5group_open(MPI_Comm comm, const char *file, const char *group, mt__h5group **out);
void mt__h5group_close(mt__h5group **g);

/* A run of rows [start, start + count) of the dataset. */
typedef struct {
    int64_t start, count;
} mt__run;

/* Read the rows of `runs`, in order, of column `col` into dst (rows x row_elems elements
 * of the column's dtype). Independent transfer unless g->collective (then every rank must
 * call it the same number of times). */
int mt__h5group_read(mt__h5group *g, int col, const mt__run *runs, int nruns, void *dst);

/* Convert n elements. */
void mt__convert(void *dst, mt_dtype to, const void *src, mt_dtype from, size_t n);

/* Importers (local; write a new HDF5 file with /train and /test style groups). */
typedef struct {
    int64_t rows;
    int ncols;
    char summary[1024];
} mt__import_stats;
int mt__import_idx(const char *images, const char *labels, const char *out_file,
                   const char *group, mt__import_stats *st);
int mt__import_csv(const char *csv, const char *label_column, const char *out_file,
                   const char *group, mt__import_stats *st);

#endif
