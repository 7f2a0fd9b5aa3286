/*
 * bench_data.c -- the shard suite: aggregate read throughput of a dataset through
 * mt_get_dataset_shard (parallel HDF5, MPI-IO) against every rank pread-ing the same byte
 * ranges of the same file, warm page cache, in the same run; independent and collective
 * MPI-IO transfers side by side (the library's default is the one that wins here); and
 * the cost of an epoch with shuffle on.
 */
#include "bench.h"

#include <fcntl.h>
#include <hdf5.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ROW_BYTES 4096

typedef struct {
    const char *file;
    int64_t rows;
    haddr_t offset; /* of the contiguous dataset in the file */
} shard_file;

/* Rank 0 writes the file into this run's private folder (removed at exit). */
static int make_file(bench *b, shard_file *sf, char *path, size_t len)
{
    size_t bytes = b->quick ? (size_t)256 << 20 : (size_t)1 << 30;
    sf->rows = (int64_t)(bytes / ROW_BYTES);
    snprintf(path, len, "%s/mpitrain-bench-shard-%lld.h5", b->tmpdir, (long long)sf->rows);
    sf->file = path;
    long long off = -1;
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    if (b->rank == 0) {
        hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
        if (f < 0) {
            bench_say(b, "writing %s (%zu MiB)...\n", path, bytes >> 20);
            f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
            hid_t g = H5Gcreate2(f, "/train", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
            hsize_t dims[2] = {(hsize_t)sf->rows, ROW_BYTES};
            hid_t sp = H5Screate_simple(2, dims, NULL);
            hid_t d = H5Dcreate2(g, "x", H5T_NATIVE_UINT8, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
            hsize_t slab = 16384, start[2] = {0, 0}, count[2] = {0, ROW_BYTES};
            unsigned char *buf = malloc(slab * ROW_BYTES);
            for (size_t i = 0; i < slab * ROW_BYTES; i++)
                buf[i] = (unsigned char)(i * 31);
            for (hsize_t r = 0; r < dims[0]; r += slab) {
                start[0] = r;
                count[0] = r + slab > dims[0] ? dims[0] - r : slab;
                hid_t fs = H5Dget_space(d), ms = H5Screate_simple(2, count, NULL);
                H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL);
                H5Dwrite(d, H5T_NATIVE_UINT8, ms, fs, H5P_DEFAULT, buf);
                H5Sclose(fs);
                H5Sclose(ms);
            }
            free(buf);
            H5Dclose(d);
            H5Sclose(sp);
            H5Gclose(g);
            H5Fclose(f);
            f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
        }
        hid_t d = f >= 0 ? H5Dopen2(f, "/train/x", H5P_DEFAULT) : -1;
        off = d >= 0 ? (long long)H5Dget_offset(d) : -1;
        if (d >= 0)
            H5Dclose(d);
        if (f >= 0)
            H5Fclose(f);
    }
    MPI_Bcast(&off, 1, MPI_LONG_LONG, 0, b->raw);
    sf->offset = (haddr_t)off;
    return off < 0 ? MT_EIO : MT_OK;
}

/* Every rank preads its rows' bytes in 8 MiB pieces; seconds. */
static double raw_read(bench *b, const shard_file *sf, unsigned char *buf)
{
    int64_t q = sf->rows / b->size;
    off_t start = (off_t)sf->offset + (off_t)b->rank * q * ROW_BYTES;
    size_t total = (size_t)q * ROW_BYTES, piece = (size_t)8 << 20;
    int fd = open(sf->file, O_RDONLY);
    MPI_Barrier(b->raw);
    double t0 = bench_now();
    for (size_t done = 0; done < total;) {
        size_t n = total - done < piece ? total - done : piece;
        ssize_t got = pread(fd, buf + done, n, start + (off_t)done);
        if (got <= 0)
            break;
        done += (size_t)got;
    }
    double t = bench_now() - t0;
    close(fd);
    return t;
}

/* One epoch through the shard: begin (reads) and every batch; seconds. */
static int shard_epoch(bench *b, mt_shard *s, bool shuffle, double *secs)
{
    mt_iter_options o = {.batch_size = 256, .shuffle = shuffle, .seed = 1};
    MPI_Barrier(b->raw);
    double t0 = bench_now();
    int rc = mt_shard_begin_epoch(s, 0, &o);
    const mt_batch *batch;
    volatile unsigned sum = 0;
    int got = 0;
    while (!rc && (got = mt_shard_next(s, &batch)) == 1) {
        const unsigned char *x = mt_batch_column(batch, "x", MT_U8);
        sum += x[0];
    }
    *secs = bench_now() - t0;
    return rc ? rc : got < 0 ? got : MT_OK;
}

static double gbps(const bench *b, const shard_file *sf, double secs_max)
{
    return (double)(sf->rows / b->size) * b->size * ROW_BYTES / secs_max / 1e9;
}

/* Median over reps of epochs >= 1 of a shard (epoch 0 warms its buffers). */
static int epochs(bench *b, const char *name, bool shuffle, int reps, double *gb,
                  const shard_file *sf)
{
    mt_shard *s = NULL;
    double t[8], x;
    int rc = mt_get_dataset_shard(b->ctx, name, &s);
    if (!rc)
        rc = shard_epoch(b, s, shuffle, &x);
    for (int r = 0; r < reps && !rc; r++) {
        rc = shard_epoch(b, s, shuffle, &x);
        bench_over_ranks(b, x, NULL, NULL, &t[r]);
    }
    *gb = rc ? 0 : gbps(b, sf, bench_median(t, reps));
    return rc;
}

int bench_shard(bench *b)
{
    char path[1024];
    shard_file sf;
    int rc = make_file(b, &sf, path, sizeof path);
    if (rc)
        return rc;
    size_t mine = (size_t)(sf.rows / b->size) * ROW_BYTES;
    unsigned char *warm = malloc(mine);
    if (!warm)
        return MT_ENOMEM;
    raw_read(b, &sf, warm); /* the page cache, and this buffer, are warm from here on */
    int reps = b->quick ? 3 : 5;
    double raw[8];
    for (int r = 0; r < reps; r++)
        bench_over_ranks(b, raw_read(b, &sf, warm), NULL, NULL, &raw[r]);
    double graw = gbps(b, &sf, bench_median(raw, reps)), gind = 0, gcol = 0, gshuf = 0;
    unsetenv("MT_IO_COLLECTIVE");
    rc = epochs(b, "bench-independent", false, reps, &gind, &sf);
    setenv("MT_IO_COLLECTIVE", "1", 1);
    if (!rc)
        rc = epochs(b, "bench-collective", false, reps, &gcol, &sf);
    unsetenv("MT_IO_COLLECTIVE");
    if (!rc)
        rc = epochs(b, "bench-shuffle", true, reps, &gshuf, &sf);
    if (!rc) {
        bench_say(b, "each rank's shard streamed in 8 windows (data.memory_limit = 1/4 of it), "
                     "buffers kept across epochs; raw = pread of the same bytes\n");
        bench_say(b, "%5s %6s %9s %11s %6s %11s %6s %13s\n", "ranks", "MiB", "raw_GBps",
                  "indep_GBps", "ratio", "collec_GBps", "ratio", "shuffled_GBps");
        bench_say(b, "%5d %6lld %9.2f %11.2f %6.2f %11.2f %6.2f %13.2f\n", b->size,
                  (long long)(sf.rows * ROW_BYTES >> 20), graw, gind, gind / graw, gcol,
                  gcol / graw, gshuf);
        bench_say(b, "transfer mode: independent (the library's default) %s collective here "
                     "(%.2f vs %.2f GB/s)\n", gind >= gcol ? "beats" : "loses to", gind, gcol);
        bench_say(b, "budget: shard read >= 0.8x raw pread: %.2fx (%s)\n", gind / graw,
                  bench_verdict(b, gind / graw >= 0.8));
        bench_json(b, "shard", "\"bytes\": %lld, \"raw_GBps\": %.4f, "
                   "\"independent_GBps\": %.4f, \"collective_GBps\": %.4f, "
                   "\"shuffled_GBps\": %.4f, \"ratio\": %.4f, "
                   "\"default_mode\": \"independent\", \"faster_mode\": \"%s\"%s",
                   (long long)(sf.rows * ROW_BYTES), graw, gind, gcol, gshuf, gind / graw,
                   gind >= gcol ? "independent" : "collective",
                   bench_budget(b, b->size <= 4, gind / graw >= 0.8, "ratio >= 0.8 at 1 to 4 ranks"));
    }
    free(warm);
    return rc;
}
