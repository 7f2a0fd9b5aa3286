/*
 * mkseeds.c -- writes the seed corpus of fuzz/seeds/ with the library's own writers
 * (checkpoint.h5 files) and small hand-made inputs (IDX, CSV, run directory files), so
 * the seeds stay small and in the formats the library produces. Run it again after a
 * format change: fuzz/mkseeds OUT-FOLDER (fuzz/run.sh --seeds does it).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "../runtime/runtime.h"
#include "../io/h5.h"

static char top[4096];

static void put(const char *harness, const char *name, const void *data, size_t len)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", top, harness);
    mt__mkdirs(path);
    snprintf(path, sizeof path, "%s/%s/%s", top, harness, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, len, f) != len || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
}

/* The harness reads its mode from the first byte. */
static void put_mode(const char *harness, const char *name, int mode, const void *data,
                     size_t len)
{
    unsigned char *b = malloc(len + 1);
    if (!b)
        exit(1);
    b[0] = (unsigned char)mode;
    memcpy(b + 1, data, len);
    put(harness, name, b, len + 1);
    free(b);
}

static size_t idx(unsigned char *b, int type, int ndim, const uint32_t *dims, size_t esize)
{
    b[0] = b[1] = 0, b[2] = (unsigned char)type, b[3] = (unsigned char)ndim;
    size_t n = 4, count = 1;
    for (int d = 0; d < ndim; d++, n += 4) {
        b[n] = (unsigned char)(dims[d] >> 24), b[n + 1] = (unsigned char)(dims[d] >> 16);
        b[n + 2] = (unsigned char)(dims[d] >> 8), b[n + 3] = (unsigned char)dims[d];
        count *= dims[d];
    }
    for (size_t i = 0; i < count * esize; i++)
        b[n++] = (unsigned char)(i * 37);
    return n;
}

static void import_seeds(void)
{
    unsigned char x[256], y[64], pair[512], gz[512];
    uint32_t xd[3] = {3, 4, 4}, yd[1] = {3};
    size_t nx = idx(x, 0x08, 3, xd, 1), ny = idx(y, 0x08, 1, yd, 1);
    put_mode("fuzz_import", "idx_u8", 0, x, nx);
    uint32_t fd[2] = {2, 3};
    unsigned char f[128];
    put_mode("fuzz_import", "idx_f32", 0, f, idx(f, 0x0D, 2, fd, 4));
    put_mode("fuzz_import", "idx_i16", 0, f, idx(f, 0x0B, 2, fd, 2));
    uLongf gl = sizeof gz;
    /* a gzip stream (what MNIST ships): deflate with a gzip header */
    z_stream z = {0};
    deflateInit2(&z, 9, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
    z.next_in = x, z.avail_in = (uInt)nx, z.next_out = gz, z.avail_out = (uInt)gl;
    deflate(&z, Z_FINISH);
    gl = z.total_out;
    deflateEnd(&z);
    put_mode("fuzz_import", "idx_gz", 0, gz, gl);
    pair[0] = (unsigned char)(nx >> 8), pair[1] = (unsigned char)nx;
    memcpy(pair + 2, x, nx);
    memcpy(pair + 2 + nx, y, ny);
    put_mode("fuzz_import", "idx_pair", 1, pair, 2 + nx + ny);
    const char *csv_int = "a,b,label\n1,2,0\n3.5,4,1\n\n5,6e-3,2\n";
    const char *csv_real = "\"label\", x1 , x2\r\n0.5,1,2\r\n-1.25,3,4\r\n";
    put_mode("fuzz_import", "csv_int", 2, csv_int, strlen(csv_int));
    put_mode("fuzz_import", "csv_real", 2, csv_real, strlen(csv_real));
}

static void checkpoint(const char *name, bool sharded)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/.tmp.h5", top);
    hid_t f, ds;
    float w[6] = {1, 2, 3, 4, 5, 6};
    int64_t steps[4] = {7, 8, 9, 10};
    uint64_t wd[2] = {3, 2}, sd[1] = {4};
    int64_t off[3] = {0, 1, 4};
    uint32_t wc = (uint32_t)crc32(crc32(0, NULL, 0), (const Bytef *)w, sizeof w);
    uint32_t sc = (uint32_t)crc32(crc32(0, NULL, 0), (const Bytef *)steps, sizeof steps);
    int rc = mt__ckpt_create(path, &f);
    if (!rc && !(rc = mt__ckpt_add_array(f, "w", MT_F32, 2, wd, &ds)) &&
        !(rc = mt__ckpt_rows(ds, MT_F32, 0, 3, w, true)))
        rc = mt__ckpt_finish_array(ds, MT_REPLICATED, wc, NULL, 0);
    if (!rc && sharded && !(rc = mt__ckpt_add_array(f, "steps", MT_I64, 1, sd, &ds)) &&
        !(rc = mt__ckpt_rows(ds, MT_I64, 0, 4, steps, true)))
        rc = mt__ckpt_finish_array(ds, MT_SHARDED, sc, off, 3);
    if (!rc)
        rc = mt__ckpt_set_meta(f, "epoch", "1");
    if (!rc)
        rc = mt__ckpt_seal(f, path);
    if (!rc) /* with its checksum header, as restore reads it */
        rc = mt__ckpt_close(f, path, false);
    if (rc) {
        fprintf(stderr, "%s\n", mt_last_error());
        exit(1);
    }
    FILE *in = fopen(path, "rb");
    static unsigned char b[1 << 16];
    size_t n = in ? fread(b, 1, sizeof b, in) : 0;
    if (in)
        fclose(in);
    unlink(path);
    put("fuzz_ckpt", name, b, n);
}

static void result_seeds(void)
{
    const char *run = "{\"status\": \"finished\", \"attempts\": 1, \"failures\": 0, "
                      "\"next_checkpoint_index\": 1, \"training_iteration\": 1, \"time_total_s\": 0.5, "
                      "\"checkpoints\": [{\"name\": \"checkpoint_000000\", \"index\": 0, "
                      "\"training_iteration\": 1, \"metrics\": {\"loss\": 0.5, \"acc\": 0.75}}], "
                      "\"latest\": \"checkpoint_000000\"}\n";
    const char *rows = "{\"loss\": 0.5, \"training_iteration\": 1, \"timestamp\": 1700000000, "
                       "\"per_rank\": {\"loss\": {\"min\": 0.5, \"mean\": 0.5, \"max\": 0.5}}}\n"
                       "{\"loss\": 0.25, \"training_iteration\": 2, \"s\": \"x\", \"n\": null}\n";
    const char *params = "{\"run\": {\"checkpoint\": {\"score_attribute\": \"loss\", "
                         "\"score_order\": \"min\"}}}\n";
    const char *error = "rank 1: out of memory\nat step 3\n";
    put_mode("fuzz_result", "run", 0, run, strlen(run));
    put_mode("fuzz_result", "result", 1, rows, strlen(rows));
    put_mode("fuzz_result", "params", 2, params, strlen(params));
    put_mode("fuzz_result", "error", 3, error, strlen(error));
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s OUT-FOLDER (writes OUT-FOLDER/<harness>/...)\n", argv[0]);
        return 2;
    }
    snprintf(top, sizeof top, "%s", argv[1]);
    import_seeds();
    checkpoint("replicated.h5", false);
    checkpoint("sharded.h5", true);
    result_seeds();
    return 0;
}
