/*
 * h5.h -- io/'s HDF5-typed calls: the memory type of a dtype and checkpoint.h5 handled
 * through hid_t handles, the pieces io/'s writer and reader objects (io.h) are made of.
 * For io/ itself and for the tests and fuzz seeds that build or damage files through
 * HDF5 on purpose; the runtime includes io.h only.
 */
#ifndef MT_IO_H5_H
#define MT_IO_H5_H

#include "io.h"

#include <hdf5.h>

/* The HDF5 memory type of a dtype. */
hid_t mt__h5_native(mt_dtype t);

int mt__ckpt_create(const char *path, hid_t *out);
/* Read-only; a file whose checksum header is missing or does not match is MT_EFORMAT
 * naming it and what, before HDF5 parses any of it. */
int mt__ckpt_open(const char *path, hid_t *out);
/* Closing a file opened for writing writes its checksum header (see ckpt_seal.c). */
int mt__ckpt_close(hid_t f, const char *path, bool sync);
int mt__ckpt_add_array(hid_t f, const char *name, mt_dtype t, int ndim, const uint64_t *dims,
                       hid_t *out);
int mt__ckpt_rows(hid_t ds, mt_dtype t, uint64_t row, uint64_t nrows, void *data, bool write);
int mt__ckpt_finish_array(hid_t ds, int layout, uint32_t crc, const int64_t *offsets,
                          int noffsets);
int mt__ckpt_set_meta(hid_t f, const char *key, const char *value);
/* A metadata value of type MT__META_* (value: its text), as a string, int64 or double
 * attribute. */
int mt__ckpt_set_meta_typed(hid_t f, const char *key, int type, const char *value);
/* The arrays and metadata, every check compared (MT_EFORMAT naming what does not match). */
int mt__ckpt_read_index(hid_t f, const char *path, mt__ckpt_index *ix);
/* After the last array and metadata are written: the file-level checks (see ckpt.c). */
int mt__ckpt_seal(hid_t f, const char *path);
int mt__ckpt_open_array(hid_t f, const char *name, hid_t *out);
void mt__ckpt_close_array(hid_t ds);

/* Between io/'s checkpoint files (ckpt.c writes, ckpt_index.c reads and checks,
 * ckpt_seal.c seals): the user block holding the checksum header, the raw-data regions
 * the file checksum skips, and the per-array checks both sides compute. */
#define MT__CKPT_UB_SIZE 4096u
#define MT__CKPT_NCHECKS 5
#define MT__CKPT_FORMAT 2 /* the root's "format": the checks below exist */
typedef struct {
    uint64_t off, len;
} mt__ckpt_region;
typedef struct {
    mt__ckpt_region *r;
    int n;
    size_t cap;
    bool oom;
} mt__ckpt_regions;
/* Local. Before HDF5 sees path: its header, length and checksums (MT_EFORMAT naming what
 * does not match, MT_ENOMEM). */
int mt__ckpt_verify(const char *path);
/* With the HDF5 lock held, f open: its arrays' regions into *R (owned; -1 out of memory). */
int mt__ckpt_collect_regions(hid_t f, mt__ckpt_regions *R);
/* The header of the closed file path whose regions are R; fsync too when sync. */
int mt__ckpt_write_header(const char *path, mt__ckpt_regions *R, bool sync);
/* With the HDF5 lock held: the arrays and metadata, without the file-level checks (what
 * sealing reads back before it writes them). */
int mt__ckpt_list(hid_t f, const char *path, mt__ckpt_index *ix);
/* The CRC-32s of the list of array names and of the metadata (the root's index_check). */
void mt__ckpt_index_checks(const mt__ckpt_index *ix, uint32_t c[2]);
/* With the HDF5 lock held: attribute name of n elements (0: a scalar) on obj. */
void mt__ckpt_attr_write(hid_t obj, const char *name, hid_t type, hsize_t n, const void *v);
/* The CRC-32s of an array's name, dtype, shape, layout and offsets. */
void mt__ckpt_array_checks(const mt__ckpt_array *a, uint32_t c[MT__CKPT_NCHECKS]);
/* The dtype of an HDF5 file type (0: none of ours). */
mt_dtype mt__ckpt_dtype_of(hid_t ft);

#endif
