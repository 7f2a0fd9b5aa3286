/*
 * io.h -- the HDF5 layer's internal interface: dataset groups opened with the MPI-IO
 * driver, row reads into memory, checkpoint.h5 (and the writer and reader objects the
 * runtime uses for it), importers. The only folder that calls HDF5. Functions take an
 * MPI_Comm but never call collectives/; callers make the agreements.
 *
 * HDF5 as packaged with MPI is not thread-safe, so every entry point here holds one
 * process-wide lock while it is inside HDF5 (read-ahead threads read through it too).
 */
#ifndef MT_IO_H
#define MT_IO_H

#include "../common/common.h"

/* HDF5's own types stay in io/ (io/h5.h): a handle here is an HDF5 hid_t kept as the
 * int64_t it is (HDF5 >= 1.10; h5group.c checks), opaque to the runtime. */
typedef struct {
    char *name;
    int64_t dset;         /* the dataset's handle (io/'s) */
    mt_dtype dtype;       /* the stored type, as the mt_dtype that holds it (an int16
                             column is MT_I32): a shard's default in memory */
    int ndim;
    uint64_t dims[8];
    size_t row_elems;     /* elements per row: product of dims[1..] */
} mt__column;

typedef struct {
    char *file, *group;
    int64_t fid;          /* the file's handle (io/'s) */
    int ncols;
    mt__column *cols;
    int64_t rows;
    bool collective;      /* MPI-IO transfer mode */
} mt__h5group;

/* Local: the file exists, is readable and is an HDF5 file. */
int mt__h5_precheck(const char *file);
/* Local: a group not yet open (NULL when out of memory), so that the caller can agree on
 * its allocation before the collective open. */
mt__h5group *mt__h5group_new(const char *file, const char *group);
/* Collective over comm (HDF5 with MPI-IO, collective metadata). Checks every column. On
 * error too, g stays open as far as it got: close it after agreeing on the outcome (the
 * close is collective, and a rank may have failed alone). */
int mt__h5group_open(MPI_Comm comm, mt__h5group *g);
void mt__h5group_close(mt__h5group **g);

/* A run of rows [start, start + count) of the dataset. */
typedef struct {
    int64_t start, count;
} mt__run;

/* Read the rows of `runs`, in order, of column `col` into dst (rows x row_elems elements
 * of dtype `as`, converted from the stored type by HDF5 during the read: out-of-range
 * values saturate). Independent transfer unless g->collective (then every rank must call
 * it the same number of times). */
int mt__h5group_read(mt__h5group *g, int col, const mt__run *runs, int nruns, mt_dtype as,
                     void *dst);

/* The process-wide HDF5 lock (HDF5 with MPI is not thread-safe). */
void mt__h5_lock(void);
void mt__h5_unlock(void);

/* checkpoint.h5 (serial HDF5, rank 0) */
typedef struct {
    char name[256];
    mt_dtype dtype;
    int ndim;
    uint64_t dims[8];
    int layout;
    uint32_t crc;
    int64_t *offsets;   /* sharded: row offset of each rank's part, then the total */
    int noffsets;
} mt__ckpt_array;
/* A metadata value's type; every value is also kept as text (numbers: "%lld", "%.17g"). */
enum { MT__META_STR = 0, MT__META_I64, MT__META_F64 };
typedef struct {
    mt__ckpt_array *arrays;
    int n;
    size_t cap;         /* of arrays */
    char **meta_keys, **meta_values;
    int *meta_types;
    int nmeta;
    size_t keys_cap, values_cap, types_cap; /* of the three meta_ arrays */
    bool oom;           /* reading it ran out of memory (not a corrupt file) */
} mt__ckpt_index;
/* The hid_t calls that the writer and reader objects below are made of are io/'s own
 * (io/h5.h; the tests that damage a checkpoint on purpose use them too). */
/* A new checksum header for a checkpoint edited through HDF5 on purpose (tests that
 * damage what the header would otherwise refuse first). */
int mt__ckpt_reseal(const char *path);
void mt__ckpt_index_free(mt__ckpt_index *ix);

/* The checkpoint file as the runtime sees it: objects that carry no HDF5 handle.
 *
 * A writer (rank 0, during a commit): each array is begun, given its rows (any order,
 * C order within a piece; each piece starts the disk's writeback at once) and ended with
 * its layout, CRC-32 and row offsets; then the metadata. Closing it seals the file (the
 * file-level checks) when status is MT_OK, closes it, writes its checksum header and
 * fsyncs it; it returns status, else the first error of its own. */
typedef struct mt__ckpt_writer mt__ckpt_writer;
int mt__ckpt_writer_create(const char *path, mt__ckpt_writer **out);
int mt__ckpt_writer_begin(mt__ckpt_writer *w, const char *name, mt_dtype t, int ndim,
                          const uint64_t *dims);
/* Rows written before it returns: MT_OK, or the first failure of this or any queued piece. */
int mt__ckpt_writer_rows(mt__ckpt_writer *w, uint64_t row, uint64_t nrows, const void *data);
/* Rows handed to the writer's thread, written in the order queued while the caller goes
 * on; data must stay as it is until mt__ckpt_writer_wait says the piece is written. Waits
 * while two pieces are queued already. After a failure, later pieces are skipped. */
int mt__ckpt_writer_queue(mt__ckpt_writer *w, uint64_t row, uint64_t nrows, const void *data);
/* Waits until at most `pending` queued pieces are not yet written (0: all are); returns
 * the first failure of any piece (its message recorded in this thread), else MT_OK. */
int mt__ckpt_writer_wait(mt__ckpt_writer *w, int pending);
/* Waits for the queued rows first; a no-op (their status) when the array was not begun
 * successfully. */
int mt__ckpt_writer_end(mt__ckpt_writer *w, int layout, uint32_t crc, const int64_t *offsets,
                        int noffsets);
int mt__ckpt_writer_meta(mt__ckpt_writer *w, const char *key, int type, const char *value);
int mt__ckpt_writer_close(mt__ckpt_writer **w, int status);

/* A reader (local): opened after the checksum header is checked (mt__ckpt_open); its
 * index, then one array at a time selected by name and read by rows as dtype t (HDF5
 * converts from the stored type; the runtime asks for the stored one, from the index). */
typedef struct mt__ckpt_reader mt__ckpt_reader;
int mt__ckpt_reader_open(const char *path, mt__ckpt_reader **out);
int mt__ckpt_reader_index(mt__ckpt_reader *r, mt__ckpt_index *ix);
int mt__ckpt_reader_array(mt__ckpt_reader *r, const char *name, mt_dtype t);
int mt__ckpt_reader_rows(mt__ckpt_reader *r, uint64_t row, uint64_t nrows, void *data);
void mt__ckpt_reader_close(mt__ckpt_reader **r);


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
