/*
 * fixtures.h -- small HDF5 files for the data tests, written by rank 0 with serial HDF5.
 */
#ifndef MT_TEST_FIXTURES_H
#define MT_TEST_FIXTURES_H

#include <hdf5.h>
#include <stdint.h>

typedef enum { FIX_CONTIGUOUS, FIX_CHUNKED, FIX_GZIP } fix_layout;

/* A group with columns id (int64), x (rows x 3 x 2 float32 = id*6+j), y (uint8 = id%251). */
int fix_write_dataset(const char *file, const char *group, int64_t rows, fix_layout layout,
                      int append);
/* A contiguous group with columns id (int64) and x (rows x width float32 = id), written
 * a slab at a time, for files larger than memory should hold. */
int fix_write_wide(const char *file, const char *group, int64_t rows, int width);
/* Broken inputs: which = "empty-group", "ragged", "string-column", "zero-rows", "subgroup". */
int fix_write_broken(const char *file, const char *which);

#endif
