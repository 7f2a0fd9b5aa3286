/*
 * test_io.c -- single-process tests of the importers: IDX round trips (plain and gzip,
 * u8 and f32) checked against the bytes written, the Debian Fashion-MNIST files when
 * present, CSV conversion, and every malformed input with its byte offset or line.
 */
#include "harness.h"

#include "../runtime/runtime.h"
#include "../io/h5.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

static char dir[256];

static const char *tmp(const char *name)
{
    static char p[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
    return p[k];
}

static void put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24); p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8); p[3] = (unsigned char)v;
}

/* len bytes at b as the file, gzip-compressed when gz */
static void write_bytes(const char *file, const unsigned char *b, size_t len, bool gz)
{
    if (gz) {
        gzFile z = gzopen(file, "wb");
        gzwrite(z, b, (unsigned)len);
        gzclose(z);
    } else {
        FILE *f = fopen(file, "wb");
        fwrite(b, 1, len, f);
        fclose(f);
    }
}

/* An IDX file of n images of h x w bytes (value (i*7 + j) % 256), cut to `keep` bytes. */
static void write_idx_u8(const char *file, int n, int h, int w, bool gz, long keep)
{
    size_t len = 16 + (size_t)n * h * w;
    unsigned char *b = malloc(len);
    b[0] = b[1] = 0; b[2] = 0x08; b[3] = 3;
    put_be32(b + 4, (uint32_t)n); put_be32(b + 8, (uint32_t)h); put_be32(b + 12, (uint32_t)w);
    for (size_t i = 16; i < len; i++)
        b[i] = (unsigned char)(((i - 16) * 7) % 256);
    if (keep >= 0 && (size_t)keep < len)
        len = (size_t)keep;
    write_bytes(file, b, len, gz);
    free(b);
}

static void write_idx_labels(const char *file, int n)
{
    unsigned char b[8 + 64];
    b[0] = b[1] = 0; b[2] = 0x08; b[3] = 1;
    put_be32(b + 4, (uint32_t)n);
    for (int i = 0; i < n; i++)
        b[8 + i] = (unsigned char)(i % 10);
    write_bytes(file, b, 8 + (size_t)n, false);
}

static void write_idx_f32(const char *file, int n)
{
    unsigned char b[8 + 4 * 16];
    b[0] = b[1] = 0; b[2] = 0x0D; b[3] = 1;
    put_be32(b + 4, (uint32_t)n);
    for (int i = 0; i < n; i++) {
        float v = (float)i * 0.5f - 1.0f;
        uint32_t u;
        memcpy(&u, &v, 4);
        put_be32(b + 8 + 4 * i, u);
    }
    FILE *f = fopen(file, "wb");
    fwrite(b, 1, 8 + 4 * (size_t)n, f);
    fclose(f);
}

static int read_h5(const char *file, const char *path, hid_t mtype, void *out, hsize_t *dims)
{
    hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0)
        return -1;
    hid_t d = H5Dopen2(f, path, H5P_DEFAULT);
    hid_t sp = H5Dget_space(d);
    H5Sget_simple_extent_dims(sp, dims, NULL);
    int rc = H5Dread(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, out) < 0;
    H5Sclose(sp);
    H5Dclose(d);
    H5Fclose(f);
    return rc;
}

static void test_idx_round_trip(void)
{
    for (int gz = 0; gz < 2; gz++) {
        char img[512], lab[512], out[512];
        snprintf(img, sizeof img, "%s", tmp(gz ? "img.gz" : "img.idx"));
        snprintf(lab, sizeof lab, "%s", tmp("lab.idx"));
        snprintf(out, sizeof out, "%s", tmp(gz ? "rt-gz.h5" : "rt.h5"));
        write_idx_u8(img, 5, 4, 3, gz, -1);
        write_idx_labels(lab, 5);
        mt__import_stats st;
        MT_ASSERT_INT_EQ(mt__import_idx(img, lab, out, "/train", &st), MT_OK);
        MT_ASSERT_INT_EQ(st.rows, 5);
        MT_ASSERT_STR_CONTAINS(st.summary, ":/train: 5 rows; x 5x4x3 u8, y u8");
        uint8_t x[60], y[5];
        hsize_t dims[8];
        MT_ASSERT_INT_EQ(read_h5(out, "/train/x", H5T_NATIVE_UINT8, x, dims), 0);
        MT_ASSERT_INT_EQ(dims[0] * 100 + dims[1] * 10 + dims[2], 543);
        for (int i = 0; i < 60; i++)
            MT_ASSERT_INT_EQ(x[i], (i * 7) % 256);
        MT_ASSERT_INT_EQ(read_h5(out, "/train/y", H5T_NATIVE_UINT8, y, dims), 0);
        for (int i = 0; i < 5; i++)
            MT_ASSERT_INT_EQ(y[i], i % 10);
        /* a second group in the same file; the same group again is refused */
        MT_ASSERT_INT_EQ(mt__import_idx(img, NULL, out, "/test", &st), MT_OK);
        MT_ASSERT_INT_EQ(mt__import_idx(img, lab, out, "/train", &st), MT_EINVAL);
        MT_ASSERT_STR_CONTAINS(mt_last_error(), "group /train exists already");
    }
    const char *f32 = tmp("f32.idx"), *out = tmp("f32.h5");
    write_idx_f32(f32, 9);
    MT_ASSERT_INT_EQ(mt__import_idx(f32, NULL, out, "/g", NULL), MT_OK);
    float v[9];
    hsize_t dims[8];
    MT_ASSERT_INT_EQ(read_h5(out, "/g/x", H5T_NATIVE_FLOAT, v, dims), 0);
    for (int i = 0; i < 9; i++)
        CU_ASSERT_DOUBLE_EQUAL(v[i], i * 0.5 - 1.0, 0);
}

static void test_idx_fashion_mnist(void)
{
    const char *img = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz";
    const char *lab = "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz";
    if (access(img, R_OK) != 0) {
        printf("(dataset-fashion-mnist not installed: real-file round trip skipped) ");
        return;
    }
    const char *out = tmp("fm.h5");
    MT_ASSERT_INT_EQ(mt__import_idx(img, lab, out, "/test", NULL), MT_OK);
    gzFile z = gzopen(img, "rb");
    unsigned char head[16], *raw = malloc(10000 * 784);
    gzread(z, head, 16);
    MT_ASSERT_INT_EQ(gzread(z, raw, 10000 * 784), 10000 * 784);
    gzclose(z);
    uint8_t *x = malloc(10000 * 784);
    hsize_t dims[8];
    MT_ASSERT_INT_EQ(read_h5(out, "/test/x", H5T_NATIVE_UINT8, x, dims), 0);
    CU_ASSERT(memcmp(x, raw, 10000 * 784) == 0);
    free(raw);
    free(x);
}

static void test_idx_malformed(void)
{
    char bad[512];
    snprintf(bad, sizeof bad, "%s", tmp("bad.idx"));
    FILE *f = fopen(bad, "wb");
    fputs("GIF89a....", f);
    fclose(f);
    MT_ASSERT_INT_EQ(mt__import_idx(bad, NULL, tmp("o1.h5"), "/t", NULL), MT_EFORMAT);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "bad.idx: bad magic at byte 0");
    write_idx_u8(bad, 5, 4, 3, false, 10);
    MT_ASSERT_INT_EQ(mt__import_idx(bad, NULL, tmp("o2.h5"), "/t", NULL), MT_EFORMAT);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "truncated: the header needs 16 bytes, the file has 10");
    write_idx_u8(bad, 5, 4, 3, true, 50);
    MT_ASSERT_INT_EQ(mt__import_idx(bad, NULL, tmp("o3.h5"), "/t", NULL), MT_EFORMAT);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "truncated: 60 bytes of data expected from byte 16, the file ends at byte 50");
    char img[512], lab[512];
    snprintf(img, sizeof img, "%s", tmp("img6.idx"));
    snprintf(lab, sizeof lab, "%s", tmp("lab4.idx"));
    write_idx_u8(img, 6, 2, 2, false, -1);
    write_idx_labels(lab, 4);
    MT_ASSERT_INT_EQ(mt__import_idx(img, lab, tmp("o4.h5"), "/t", NULL), MT_EFORMAT);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "has 6 rows but");
    MT_ASSERT_INT_EQ(mt__import_idx(tmp("none.idx"), NULL, tmp("o5.h5"), "/t", NULL), MT_ENOTFOUND);
    /* nothing is written for bad input */
    CU_ASSERT(access(tmp("o1.h5"), F_OK) != 0);
    CU_ASSERT(access(tmp("o4.h5"), F_OK) != 0);
}

static void write_text(const char *file, const char *text)
{
    FILE *f = fopen(file, "w");
    fputs(text, f);
    fclose(f);
}

static void test_csv(void)
{
    char csv[512], out[512];
    snprintf(csv, sizeof csv, "%s", tmp("iris.csv"));
    snprintf(out, sizeof out, "%s", tmp("iris.h5"));
    write_text(csv, "a,b,label,c\n1,2,0,3\n4.5,5,1,6\n\n7,8,2,-9e-1\n");
    mt__import_stats st;
    MT_ASSERT_INT_EQ(mt__import_csv(csv, "label", out, "/train", &st), MT_OK);
    MT_ASSERT_STR_CONTAINS(st.summary, ":/train: 3 rows; x 3x3 f32, y (label) i64");
    float x[9];
    int64_t y[3];
    hsize_t dims[8];
    MT_ASSERT_INT_EQ(read_h5(out, "/train/x", H5T_NATIVE_FLOAT, x, dims), 0);
    float want[9] = {1, 2, 3, 4.5f, 5, 6, 7, 8, -0.9f};
    for (int i = 0; i < 9; i++)
        CU_ASSERT_DOUBLE_EQUAL(x[i], want[i], 1e-6);
    MT_ASSERT_INT_EQ(read_h5(out, "/train/y", H5T_NATIVE_INT64, y, dims), 0);
    MT_ASSERT_INT_EQ(y[2], 2);
    /* float labels stay float */
    write_text(csv, "x,target\n1,0.5\n2,1.5\n");
    MT_ASSERT_INT_EQ(mt__import_csv(csv, "target", tmp("reg.h5"), "/train", &st), MT_OK);
    MT_ASSERT_STR_CONTAINS(st.summary, "y (target) f64");
}

static void test_csv_malformed(void)
{
    char csv[512];
    snprintf(csv, sizeof csv, "%s", tmp("bad.csv"));
    struct { const char *text, *label, *msg; int code; } cases[] = {
        {"a,b,label\n1,2,3\n4,5\n", "label", "bad.csv: line 3: 2 fields, the header has 3", MT_EFORMAT},
        {"a,b,label\n1,2,3\n4,x5,6\n", "label", "bad.csv: line 3, column 2 (b): 'x5' is not a number", MT_EFORMAT},
        {"a,b,label\n1,2,cat\n", "label", "line 2, column 3 (label): 'cat' is not a number", MT_EFORMAT},
        {"a,b,c\n1,2,3\n", "label", "bad.csv: line 1: no column named 'label'", MT_EINVAL},
        {"", "label", "bad.csv: line 1: no header row", MT_EFORMAT},
        {"a,label\n", "label", "no data rows after the header", MT_EFORMAT},
        {"a,label\n1,\n", "label", "line 2, column 2 (label): '' is not a number", MT_EFORMAT},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        write_text(csv, cases[i].text);
        MT_ASSERT_INT_EQ(mt__import_csv(csv, cases[i].label, tmp("never.h5"), "/t", NULL), cases[i].code);
        MT_ASSERT_STR_CONTAINS(mt_last_error(), cases[i].msg);
    }
    CU_ASSERT(access(tmp("never.h5"), F_OK) != 0);
    MT_ASSERT_INT_EQ(mt__import_csv(tmp("missing.csv"), "y", tmp("never.h5"), "/t", NULL), MT_ENOTFOUND);
}



/* An IDX header that lies: dimensions whose product overflows (it imported as "65536
 * rows" from a 2 KB file), a size the file does not have, zero rows, a zero-sized row,
 * data past the announced end; plain and gzip. Each is MT_EFORMAT naming the file. */
static void write_idx_header(const char *file, const uint32_t *dims, int nd, size_t data,
                             bool gz)
{
    size_t len = 4 + 4 * (size_t)nd + data;
    unsigned char *b = calloc(len, 1);
    b[2] = 0x08;
    b[3] = (unsigned char)nd;
    for (int d = 0; d < nd; d++)
        put_be32(b + 4 + 4 * d, dims[d]);
    write_bytes(file, b, len, gz);
    free(b);
}

static void test_idx_headers_that_lie(void)
{
    struct { uint32_t dims[4]; int nd; size_t data; const char *msg; } cases[] = {
        {{65536, 65536, 65536, 65536}, 4, 2000, "multiply past what memory can hold"},
        {{65536, 65536, 65536}, 3, 2000, "bytes of data after byte 16"},
        {{0, 28, 28}, 3, 0, "dimension 0 (byte 4) is 0: no rows to import"},
        {{5, 0}, 2, 0, "dimension 1 (byte 8) is 0: rows of no elements"},
        {{4, 2}, 2, 9, "8 bytes"},
        {{4, 2}, 2, 7, "8 bytes"},
    };
    for (int gz = 0; gz < 2; gz++)
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
            char file[512];
            snprintf(file, sizeof file, "%s", tmp(gz ? "lie.idx.gz" : "lie.idx"));
            write_idx_header(file, cases[i].dims, cases[i].nd, cases[i].data, gz);
            mt__import_stats st = {0};
            MT_ASSERT_INT_EQ(mt__import_idx(file, NULL, tmp("lie.h5"), "/t", &st), MT_EFORMAT);
            MT_ASSERT_STR_CONTAINS(mt_last_error(), gz ? "lie.idx.gz: " : "lie.idx: ");
            if (!gz || i != 1) /* gzip: the size is learnt by reading, the message differs */
                MT_ASSERT_STR_CONTAINS(mt_last_error(), cases[i].msg);
            MT_ASSERT_INT_EQ(st.rows, 0);
            CU_ASSERT(access(tmp("lie.h5"), F_OK) != 0);
        }
    /* exactly what the header says: fine, and 8-dimensional shapes are summarised whole */
    uint32_t dims[8] = {2, 1000000, 1, 1, 1, 1, 1, 1};
    write_idx_header(tmp("ok.idx"), dims, 8, 2000000, false);
    mt__import_stats st = {0};
    MT_ASSERT_INT_EQ(mt__import_idx(tmp("ok.idx"), NULL, tmp("ok.h5"), "/t", &st), MT_OK);
    MT_ASSERT_INT_EQ(st.rows, 2);
    MT_ASSERT_STR_CONTAINS(st.summary, "x 2x1000000x1x1x1x1x1x1 u8");
}

/* CSV features are stored as float32: 1e300 would become inf silently. */
static void test_csv_out_of_float_range(void)
{
    char csv[512];
    snprintf(csv, sizeof csv, "%s", tmp("range.csv"));
    struct { const char *text, *msg; } cases[] = {
        {"a,b,label\n1,2,0\n3,1e300,1\n", "range.csv: line 3, column 2 (b): '1e300' is outside the float32 range"},
        {"a,b,label\n-1e39,2,0\n", "line 2, column 1 (a): '-1e39' is outside the float32 range"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        write_text(csv, cases[i].text);
        MT_ASSERT_INT_EQ(mt__import_csv(csv, "label", tmp("range.h5"), "/t", NULL), MT_EFORMAT);
        MT_ASSERT_STR_CONTAINS(mt_last_error(), cases[i].msg);
        CU_ASSERT(access(tmp("range.h5"), F_OK) != 0);
    }
    /* the largest float32 and a label of 1e300 (labels are f64) are fine */
    write_text(csv, "a,label\n3.4e38,1e300\n");
    MT_ASSERT_INT_EQ(mt__import_csv(csv, "label", tmp("range.h5"), "/t", NULL), MT_OK);
}

/* ------------------------------------------------------------ files from outside */

/* A checkpoint.h5 with one array `name` of nd dimensions (each 1, or `rows` first), its
 * attributes as given; the file and its run directory's run.json listing it. */
typedef struct {
    const char *name;
    int nd;
    hsize_t rows;
    int nlayout;        /* elements of the layout attribute (1 = normal) */
    bool meta_many;     /* a meta:KEY attribute of 100 strings */
    bool meta_vlen;     /* a variable-length string meta:KEY */
    int64_t offsets[3]; /* when offsets[2] != 0: a sharded array's offsets */
    bool no_data;       /* rows claimed but never written (a tiny file, a huge shape) */
} fake_ckpt;

static void write_fake_ckpt(const char *run, const fake_ckpt *fc)
{
    char path[600];
    snprintf(path, sizeof path, "%s/checkpoint_000000", run);
    mkdir(run, 0755);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/checkpoint_000000/checkpoint.h5", run);
    hid_t f = H5I_INVALID_HID;
    CU_ASSERT_EQUAL_FATAL(mt__ckpt_create(path, &f), MT_OK); /* with its checksum header */
    hsize_t dims[64];
    for (int i = 0; i < fc->nd; i++)
        dims[i] = 1;
    dims[0] = fc->rows ? fc->rows : 1;
    hid_t sp = H5Screate_simple(fc->nd, dims, NULL);
    hid_t ds = H5Dcreate2(f, fc->name, H5T_NATIVE_UINT8, sp, H5P_DEFAULT, H5P_DEFAULT,
                          H5P_DEFAULT);
    if (!fc->no_data) {
        unsigned char *zero = calloc(dims[0], 1);
        H5Dwrite(ds, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, zero);
        free(zero);
    }
    H5Sclose(sp);
    int layout[100] = {0};
    hsize_t n = (hsize_t)fc->nlayout;
    sp = H5Screate_simple(1, &n, NULL);
    hid_t at = H5Acreate2(ds, "layout", H5T_NATIVE_INT, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(at, H5T_NATIVE_INT, layout);
    H5Aclose(at);
    H5Sclose(sp);
    sp = H5Screate(H5S_SCALAR);
    uint32_t crc = 0;
    at = H5Acreate2(ds, "crc32", H5T_NATIVE_UINT32, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(at, H5T_NATIVE_UINT32, &crc);
    H5Aclose(at);
    H5Sclose(sp);
    if (fc->offsets[2]) {
        n = 3;
        sp = H5Screate_simple(1, &n, NULL);
        at = H5Acreate2(ds, "offsets", H5T_NATIVE_INT64, sp, H5P_DEFAULT, H5P_DEFAULT);
        H5Awrite(at, H5T_NATIVE_INT64, fc->offsets);
        H5Aclose(at);
        H5Sclose(sp);
    }
    H5Dclose(ds);
    if (fc->meta_many || fc->meta_vlen) {
        hid_t st = H5Tcopy(H5T_C_S1);
        H5Tset_size(st, fc->meta_vlen ? H5T_VARIABLE : 8);
        n = fc->meta_many ? 100 : 1;
        sp = H5Screate_simple(1, &n, NULL);
        at = H5Acreate2(f, "meta:k", st, sp, H5P_DEFAULT, H5P_DEFAULT);
        static char many[100][8];
        const char *one = "value";
        H5Awrite(at, st, fc->meta_vlen ? (const void *)&one : (const void *)many);
        H5Aclose(at);
        H5Sclose(sp);
        H5Tclose(st);
    }
    MT_ASSERT_INT_EQ(mt__ckpt_close(f, path, false), MT_OK);
    snprintf(path, sizeof path, "%s/run.json", run);
    FILE *rj = fopen(path, "w");
    fprintf(rj, "{\"status\": \"finished\", \"attempts\": 1, \"failures\": 0, "
                "\"next_checkpoint_index\": 1, \"training_iteration\": 1, \"time_total_s\": 1.0, "
                "\"checkpoints\": [{\"name\": \"checkpoint_000000\", \"index\": 0, "
                "\"training_iteration\": 1, \"metrics\": {}}], \"latest\": \"checkpoint_000000\"}");
    fclose(rj);
}

/* Every fixed-size field filled from checkpoint.h5 is bounded by what the file says: a
 * 32-dimensional array, a 300-byte name, a layout attribute of 100 values, a metadata
 * attribute of 100 strings or a variable-length one, offsets that do not split the rows,
 * a shape the stored bytes do not hold: MT_EFORMAT naming the file and the array, and
 * mt_result_load (which lists stored checkpoints) neither crashes nor reads past a
 * buffer. */
static void test_checkpoint_file_bounds(void)
{
    char longname[301];
    memset(longname, 'n', 300);
    longname[300] = '\0';
    struct { fake_ckpt fc; const char *msg; } cases[] = {
        {{.name = "deep", .nd = 32, .nlayout = 1}, "array deep has 32 dimensions (1 to 8"},
        {{.name = "deep9", .nd = 9, .nlayout = 1}, "array deep9 has 9 dimensions"},
        {{.name = longname, .nd = 1, .nlayout = 1}, "array name of 300 bytes (at most 255)"},
        {{.name = "x", .nd = 1, .nlayout = 100}, "array x: attribute layout is missing or not 0 or 1"},
        {{.name = "x", .nd = 1, .nlayout = 1, .meta_many = true}, "metadata k: not one fixed-length string"},
        {{.name = "x", .nd = 1, .nlayout = 1, .meta_vlen = true}, "metadata k: not one fixed-length string"},
        {{.name = "x", .nd = 1, .rows = 4, .nlayout = 1, .offsets = {0, 9, 4}}, "array x: attribute offsets does not split its 4 rows"},
        {{.name = "x", .nd = 2, .rows = (hsize_t)1 << 40, .nlayout = 1, .no_data = true}, "array x claims 1099511627776 bytes but the file holds 0"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char run[400];
        snprintf(run, sizeof run, "%s/ckrun%zu", dir, i);
        write_fake_ckpt(run, &cases[i].fc);
        char ck[500];
        snprintf(ck, sizeof ck, "%s/checkpoint_000000", run);
        mt_checkpoint *stored = NULL;
        MT_ASSERT_INT_EQ(mt__checkpoint_open_stored(ck, &stored), MT_EFORMAT);
        MT_ASSERT_STR_CONTAINS(mt_last_error(), "checkpoint_000000/checkpoint.h5: ");
        MT_ASSERT_STR_CONTAINS(mt_last_error(), cases[i].msg);
        CU_ASSERT_PTR_NULL(stored);
        mt_result *r = NULL;
        int rc = mt_result_load(run, &r); /* lists the checkpoint without its arrays */
        MT_ASSERT_INT_EQ(rc, MT_OK);
        MT_ASSERT_INT_EQ(mt_result_num_best(r), 1);
        int nd = 0;
        size_t dims[8];
        MT_ASSERT_INT_EQ(mt_checkpoint_dims(mt_result_checkpoint(r), "deep", &nd, dims),
                         MT_ENOTFOUND);
        mt_result_free(&r);
    }
    /* at the limit: 8 dimensions and a 255-byte name are fine */
    longname[255] = '\0';
    char run[400], ck[500];
    snprintf(run, sizeof run, "%s/ckrun-ok", dir);
    write_fake_ckpt(run, &(fake_ckpt){.name = longname, .nd = 8, .nlayout = 1});
    snprintf(ck, sizeof ck, "%s/checkpoint_000000", run);
    mt_checkpoint *stored = NULL;
    MT_ASSERT_INT_EQ(mt__checkpoint_open_stored(ck, &stored), MT_OK);
    int nd = 0;
    size_t dims[8];
    MT_ASSERT_INT_EQ(mt_checkpoint_dims(stored, longname, &nd, dims), MT_OK);
    MT_ASSERT_INT_EQ(nd, 8);
    mt_checkpoint_free(&stored);
}

/* The whole file as written, to damage copies of it. */
static unsigned char *slurp(const char *file, size_t *n)
{
    FILE *in = fopen(file, "rb");
    unsigned char *b = in ? malloc(1 << 20) : NULL;
    *n = b ? fread(b, 1, 1 << 20, in) : 0;
    if (in)
        fclose(in);
    return b;
}

static void spill(const char *file, const unsigned char *b, size_t n)
{
    FILE *out = fopen(file, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(out);
    CU_ASSERT(fwrite(b, 1, n, out) == n);
    fclose(out);
}

/* mt__ckpt_open refuses, naming the file and what, before HDF5 parses anything: */
static void refused(const char *file, const char *msg)
{
    hid_t f = H5I_INVALID_HID;
    MT_ASSERT_INT_EQ(mt__ckpt_open(file, &f), MT_EFORMAT);
    if (f != H5I_INVALID_HID)
        mt__ckpt_close(f, file, false);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), file);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), msg);
    CU_ASSERT(f == H5I_INVALID_HID);
}

/* checkpoint.h5 starts with a checksum header over everything HDF5 parses (ckpt_seal.c): a
 * damaged byte in the header, the superblock or an object header, a file cut short or
 * appended to, an HDF5 file without the header (an older checkpoint), an empty or foreign
 * file are refused with MT_EFORMAT naming the file; a damaged byte of an array's data
 * passes (the array's own CRC-32 finds it when read); a checkpoint of more arrays than
 * the header lists still round-trips. */
static void test_checkpoint_header(void)
{
    char good[400], bad[400];
    snprintf(good, sizeof good, "%s/good.h5", dir);
    snprintf(bad, sizeof bad, "%s/bad.h5", dir);
    double w[512];
    for (int i = 0; i < 512; i++)
        w[i] = i;
    uint32_t crc = (uint32_t)crc32(crc32(0, NULL, 0), (const Bytef *)w, sizeof w);
    hid_t f = H5I_INVALID_HID, ds = H5I_INVALID_HID;
    MT_ASSERT_INT_EQ(mt__ckpt_create(good, &f), MT_OK);
    MT_ASSERT_INT_EQ(mt__ckpt_add_array(f, "w", MT_F64, 1, (uint64_t[]){512}, &ds), MT_OK);
    MT_ASSERT_INT_EQ(mt__ckpt_rows(ds, MT_F64, 0, 512, w, true), MT_OK);
    MT_ASSERT_INT_EQ(mt__ckpt_finish_array(ds, MT_REPLICATED, crc, NULL, 0), MT_OK);
    MT_ASSERT_INT_EQ(mt__ckpt_set_meta(f, "epoch", "3"), MT_OK);
    MT_ASSERT_INT_EQ(mt__ckpt_seal(f, good), MT_OK);
    MT_ASSERT_INT_EQ(mt__ckpt_close(f, good, true), MT_OK);
    /* where the root object header and the array's bytes are */
    hid_t h = H5Fopen(good, H5F_ACC_RDONLY, H5P_DEFAULT), d = H5Dopen2(h, "w", H5P_DEFAULT);
    H5O_info_t oi;
    CU_ASSERT(H5Oget_info2(h, &oi, H5O_INFO_BASIC) >= 0);
    size_t root = 4096 + (size_t)oi.addr, data = (size_t)H5Dget_offset(d);
    H5Dclose(d);
    H5Fclose(h);
    size_t n;
    unsigned char *b = slurp(good, &n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    CU_ASSERT(n > 4096 + 4096 && data > 4096 && data + sizeof w <= n && root + 32 < n);
    hid_t ok = H5I_INVALID_HID;
    MT_ASSERT_INT_EQ(mt__ckpt_open(good, &ok), MT_OK);
    mt__ckpt_index ix;
    MT_ASSERT_INT_EQ(mt__ckpt_read_index(ok, good, &ix), MT_OK);
    MT_ASSERT_INT_EQ(ix.n, 1);
    mt__ckpt_index_free(&ix);
    MT_ASSERT_INT_EQ(mt__ckpt_close(ok, good, false), MT_OK);
    struct { size_t at; const char *msg; } flips[] = {
        {20, "its checkpoint header is damaged"},
        {600, "its checkpoint header is damaged"}, /* the user block past the header */
        {4096 + 8, "the checksum of its HDF5 metadata does not match"}, /* superblock version */
        {root, "the checksum of its HDF5 metadata does not match"},      /* "OHDR" or v1 */
        {root + 20, "the checksum of its HDF5 metadata does not match"},
        {data - 1, "the checksum of its HDF5 metadata does not match"}, /* unused, even */
    };
    for (size_t i = 0; i < sizeof flips / sizeof *flips; i++) {
        b[flips[i].at] ^= 1;
        spill(bad, b, n);
        b[flips[i].at] ^= 1;
        refused(bad, flips[i].msg);
    }
    b[data + 8] ^= 1; /* the array's bytes: HDF5 reads them as numbers; our CRC checks them */
    spill(bad, b, n);
    b[data + 8] ^= 1;
    MT_ASSERT_INT_EQ(mt__ckpt_open(bad, &ok), MT_OK);
    MT_ASSERT_INT_EQ(mt__ckpt_close(ok, bad, false), MT_OK);
    spill(bad, b, n - 1);
    refused(bad, "but its header says");
    b[n] = 0;
    spill(bad, b, n + 1);
    refused(bad, "(truncated or appended to)");
    spill(bad, b, 100);
    refused(bad, "truncated: 100 bytes");
    spill(bad, b, 0);
    refused(bad, "not a checkpoint file (empty)");
    spill(bad, (const unsigned char *)"{\"not\": \"hdf5\"}\n", 16);
    refused(bad, "no checkpoint header at its start");
    unlink(bad);
    refused(bad, "cannot open: No such file or directory");
    h = H5Fcreate(bad, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT); /* an older checkpoint */
    H5Fclose(h);
    refused(bad, "an HDF5 file without a checkpoint checksum header");
    free(b);
    /* more arrays than the header lists: the smallest are read back into the checksum */
    MT_ASSERT_INT_EQ(mt__ckpt_create(good, &f), MT_OK);
    for (int i = 0; i < 1000; i++) {
        char name[16];
        snprintf(name, sizeof name, "a%d", i);
        MT_ASSERT_INT_EQ(mt__ckpt_add_array(f, name, MT_F64, 1, (uint64_t[]){512}, &ds), MT_OK);
        MT_ASSERT_INT_EQ(mt__ckpt_rows(ds, MT_F64, 0, 512, w, true), MT_OK);
        MT_ASSERT_INT_EQ(mt__ckpt_set_meta(f, name, "x"), MT_OK); /* metadata between */
        MT_ASSERT_INT_EQ(mt__ckpt_finish_array(ds, MT_REPLICATED, crc, NULL, 0), MT_OK);
    }
    MT_ASSERT_INT_EQ(mt__ckpt_seal(f, good), MT_OK);
    MT_ASSERT_INT_EQ(mt__ckpt_close(f, good, false), MT_OK);
    b = slurp(good, &n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    MT_ASSERT_INT_EQ(b[12] | b[13] << 8, 254); /* the header is full */
    free(b);
    MT_ASSERT_INT_EQ(mt__ckpt_open(good, &ok), MT_OK);
    MT_ASSERT_INT_EQ(mt__ckpt_read_index(ok, good, &ix), MT_OK);
    MT_ASSERT_INT_EQ(ix.n, 1000);
    mt__ckpt_index_free(&ix);
    MT_ASSERT_INT_EQ(mt__ckpt_close(ok, good, false), MT_OK);
}

/* Names read back from run.json are a run directory's own checkpoint folders: "../victim"
 * (as a checkpoint or as latest), an absolute path, a name listed twice, an unknown
 * status are a corrupt run.json; nothing outside the run is read or deleted. */
static void test_run_json_names(void)
{
    char victim[400], marker[500];
    snprintf(victim, sizeof victim, "%s/victim", dir);
    mkdir(victim, 0755);
    snprintf(marker, sizeof marker, "%s/keep.txt", victim);
    write_text(marker, "precious\n");
    const char *entry = "{\"name\": \"%s\", \"index\": 0, \"training_iteration\": 1, \"metrics\": {}}";
    struct { const char *kept, *latest, *status, *msg; } cases[] = {
        {"../victim", NULL, "finished", "checkpoint entry 0: not a checkpoint folder name \"../victim\""},
        {"/etc", NULL, "finished", "not a checkpoint folder name \"/etc\""},
        {"checkpoint_000000/../../victim", NULL, "finished", "not a checkpoint folder name"},
        {"checkpoint_00000x", NULL, "finished", "not a checkpoint folder name"},
        {"checkpoint_000000\n", NULL, "finished", "not a checkpoint folder name"},
        {"", NULL, "finished", "not a checkpoint folder name"},
        {"checkpoint_000000", "../victim", "finished", "\"latest\" is not a checkpoint folder name"},
        {"checkpoint_000000", NULL, "hacked", "corrupt run state (status \"hacked\""},
        {"dup", NULL, "finished", "listed twice: \"checkpoint_000000\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char run[400], path[500], one[300], kept[700];
        snprintf(run, sizeof run, "%s/jsonrun%zu", dir, i);
        mkdir(run, 0755);
        if (!strcmp(cases[i].kept, "dup")) {
            snprintf(one, sizeof one, entry, "checkpoint_000000");
            snprintf(kept, sizeof kept, "%s, %s", one, one);
        } else {
            json_t *name = json_string(cases[i].kept);
            char *quoted = json_dumps(name, JSON_ENCODE_ANY);
            snprintf(one, sizeof one, "{\"name\": %s, \"index\": 0, \"training_iteration\": 1, "
                                      "\"metrics\": {}}", quoted);
            free(quoted);
            json_decref(name);
            snprintf(kept, sizeof kept, "%s", one);
        }
        snprintf(path, sizeof path, "%s/run.json", run);
        FILE *f = fopen(path, "w");
        fprintf(f, "{\"status\": \"%s\", \"attempts\": 1, \"failures\": 0, "
                   "\"next_checkpoint_index\": 1, \"training_iteration\": 1, "
                   "\"time_total_s\": 1.0, \"checkpoints\": [%s], \"latest\": %s%s%s}",
                cases[i].status, kept, cases[i].latest ? "\"" : "",
                cases[i].latest ? cases[i].latest : "null", cases[i].latest ? "\"" : "");
        fclose(f);
        mt_result *r = NULL;
        MT_ASSERT_INT_EQ(mt_result_load(run, &r), MT_EFORMAT);
        MT_ASSERT_STR_CONTAINS(mt_last_error(), cases[i].msg);
        CU_ASSERT_PTR_NULL(r);
        mt__rundir rd = {0};
        MT_ASSERT_INT_EQ(mt__run_load(&rd, run), MT_EFORMAT); /* the resume path */
        mt__run_free(&rd);
    }
    CU_ASSERT(access(marker, R_OK) == 0);
    /* a checkpoint folder that is a symbolic link out of the run: not followed when
     * listed, and removing it (retention, leftovers) removes the link only */
    char run[400], link[500];
    snprintf(run, sizeof run, "%s/linkrun", dir);
    mkdir(run, 0755);
    snprintf(link, sizeof link, "%s/checkpoint_000000", run);
    CU_ASSERT(symlink(victim, link) == 0);
    mt_checkpoint *stored = NULL;
    MT_ASSERT_INT_EQ(mt__checkpoint_open_stored(link, &stored), MT_EFORMAT);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "a symbolic link, which is not followed");
    MT_ASSERT_INT_EQ(mt__rmtree(link), MT_OK);
    CU_ASSERT(access(link, F_OK) != 0);
    CU_ASSERT(access(marker, R_OK) == 0);
}

static void make_dir(void)
{
    snprintf(dir, sizeof dir, "%s/mpitrain-io-test-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir))
        perror("mkdtemp");
}

static void remove_dir(void)
{
    mt_test_rmtree(dir);
}

/* The source element i of type `from` as a double (exact for every value used here). */
static double as_double(const unsigned char *src, mt_dtype from, int i)
{
    double d;
    mt__convert(&d, MT_F64, src + i * mt_dtype_size(from), from, 1);
    return d;
}

/* mt__convert (an in-memory column conversion) against H5Tconvert (what a column gets when
 * HDF5 converts it as it reads), for every pair of dtypes, on the values at and beyond each
 * type's limits: both must give the same elements (NaN for NaN), except where HDF5 1.10's
 * own hard conversion falls into the C cast's undefined behaviour, which it does for NaN
 * (x86 gives INT_MIN) and for exactly 2^31 / 2^63 into i32 / i64 (its test is "> MAX" in
 * the source type, where MAX rounds up to 2^k): there mt__convert gives 0 for NaN and the
 * saturated MAX, HDF5's rule for every other value beyond the limit (and its soft
 * conversion's for NaN). */
static void test_convert_matches_hdf5(void)
{
    static const double edges[] = {0, 1, -1, 0.5, -0.5, 3.7, -3.7, 127, 128, 255, 255.5, 256, -256,
                                   2147483647.0, 2147483648.0, -2147483648.0, -2147483649.0,
                                   9007199254740993.0, 9.2233720368547758e18, -9.2233720368547758e18,
                                   1e19, -1e19, FLT_MAX, -FLT_MAX, 3.4028235677973366e38,
                                   1e39, -1e39, 1e300, -1e300, DBL_MAX, -DBL_MAX, INFINITY,
                                   -INFINITY, NAN, FLT_MIN, 1e-40, -1e-300};
    enum { NE = sizeof edges / sizeof edges[0], NX = 6, N = NE + NX };
    static const int64_t extra[NX] = {INT64_MAX, INT64_MIN, INT64_MAX - 1, INT64_MIN + 1,
                                      (int64_t)1 << 53 | 1, -((int64_t)1 << 62) - 1};
    const mt_dtype types[] = {MT_U8, MT_I32, MT_I64, MT_F32, MT_F64};
    int compared = 0;
    for (int a = 0; a < 5; a++) {
        mt_dtype from = types[a];
        /* the edge values as the source type holds them (HDF5's own conversion from
         * double), then int64 values a double cannot hold, as the source type holds them */
        unsigned char src[N * 8], mine[N * 8], theirs[N * 8 * 2];
        size_t es = mt_dtype_size(from);
        memcpy(theirs, edges, sizeof edges);
        CU_ASSERT_FATAL(H5Tconvert(H5T_NATIVE_DOUBLE, mt__h5_native(from), NE, theirs, NULL,
                                   H5P_DEFAULT) >= 0);
        memcpy(src, theirs, NE * es);
        memcpy(theirs, extra, sizeof extra);
        CU_ASSERT_FATAL(H5Tconvert(H5T_NATIVE_LLONG, mt__h5_native(from), NX, theirs, NULL,
                                   H5P_DEFAULT) >= 0);
        memcpy(src + NE * es, theirs, NX * es);
        for (int b = 0; b < 5; b++) {
            mt_dtype to = types[b];
            size_t et = mt_dtype_size(to);
            mt__convert(mine, to, src, from, N);
            memcpy(theirs, src, N * es); /* H5Tconvert converts in place */
            CU_ASSERT_FATAL(H5Tconvert(mt__h5_native(from), mt__h5_native(to), N, theirs, NULL,
                                       H5P_DEFAULT) >= 0);
            for (int i = 0; i < N; i++) {
                const unsigned char *x = mine + i * et, *y = theirs + i * et;
                double v = as_double(src, from, i);
                bool hdf5_undefined = (from == MT_F32 || from == MT_F64) &&
                                      (to == MT_I32 || to == MT_I64 || to == MT_U8) &&
                                      (isnan(v) || (to == MT_I32 && v == 2147483648.0) ||
                                       (to == MT_I64 && v == 9223372036854775808.0));
                if (hdf5_undefined) {
                    int64_t got = 0, want = isnan(v) ? 0 : to == MT_I32 ? INT32_MAX : INT64_MAX;
                    mt__convert(&got, MT_I64, x, to, 1);
                    CU_ASSERT_EQUAL(got, want);
                    compared++;
                    continue;
                }
                bool same = memcmp(x, y, et) == 0;
                if (!same && to == MT_F32) {
                    float fx, fy;
                    memcpy(&fx, x, 4); memcpy(&fy, y, 4);
                    same = isnan(fx) && isnan(fy);
                } else if (!same && to == MT_F64) {
                    double dx, dy;
                    memcpy(&dx, x, 8); memcpy(&dy, y, 8);
                    same = isnan(dx) && isnan(dy);
                }
                if (!same)
                    fprintf(stderr, "convert %s -> %s: element %d differs from HDF5's\n",
                            mt__dtype_name(from), mt__dtype_name(to), i);
                CU_ASSERT(same);
                compared++;
            }
        }
    }
    CU_ASSERT_EQUAL(compared, 25 * N);
}

/* The writer and reader objects the runtime uses (no HDF5 type in their interface): rows
 * given in any order round-trip with their attributes and metadata; an array never begun
 * ends as a no-op; closing with a failure returns it and still leaves a closed file with
 * its checksum header; selecting an array that is not there is MT_EFORMAT. */
static void test_checkpoint_writer_reader(void)
{
    const int64_t s[8] = {100, 101, 102, 103, 104, 105, 106, 107}; /* 4 rows of 2 */
    char path[400], failed[400];
    snprintf(path, sizeof path, "%s/writer.h5", dir);
    snprintf(failed, sizeof failed, "%s/writer_failed.h5", dir);
    uint32_t crc = (uint32_t)crc32(crc32(0, NULL, 0), (const Bytef *)s, sizeof s);
    int64_t off[3] = {0, 1, 4};
    mt__ckpt_writer *w = NULL;
    MT_ASSERT_INT_EQ(mt__ckpt_writer_create(path, &w), MT_OK);
    CU_ASSERT_PTR_NOT_NULL_FATAL(w);
    MT_ASSERT_INT_EQ(mt__ckpt_writer_end(w, MT_REPLICATED, 0, NULL, 0), MT_OK); /* not begun */
    MT_ASSERT_INT_EQ(mt__ckpt_writer_begin(w, "s", MT_I64, 2, (uint64_t[]){4, 2}), MT_OK);
    MT_ASSERT_INT_EQ(mt__ckpt_writer_rows(w, 2, 2, s + 4), MT_OK); /* the later rows first */
    MT_ASSERT_INT_EQ(mt__ckpt_writer_rows(w, 0, 2, s), MT_OK);
    MT_ASSERT_INT_EQ(mt__ckpt_writer_end(w, MT_SHARDED, crc, off, 3), MT_OK);
    MT_ASSERT_INT_EQ(mt__ckpt_writer_meta(w, "epoch", MT__META_I64, "7"), MT_OK);
    MT_ASSERT_INT_EQ(mt__ckpt_writer_close(&w, MT_OK), MT_OK);
    CU_ASSERT_PTR_NULL(w);

    mt__ckpt_reader *r = NULL;
    MT_ASSERT_INT_EQ(mt__ckpt_reader_open(path, &r), MT_OK);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    mt__ckpt_index ix;
    MT_ASSERT_INT_EQ(mt__ckpt_reader_index(r, &ix), MT_OK);
    MT_ASSERT_INT_EQ(ix.n, 1);
    MT_ASSERT_INT_EQ(ix.nmeta, 1);
    if (ix.n == 1 && ix.nmeta == 1) {
        MT_ASSERT_STR_EQ(ix.arrays[0].name, "s");
        MT_ASSERT_INT_EQ(ix.arrays[0].layout, MT_SHARDED);
        CU_ASSERT_EQUAL(ix.arrays[0].crc, crc);
        MT_ASSERT_INT_EQ(ix.arrays[0].noffsets, 3);
        CU_ASSERT(ix.arrays[0].dims[0] == 4 && ix.arrays[0].dims[1] == 2);
        MT_ASSERT_STR_EQ(ix.meta_keys[0], "epoch");
        MT_ASSERT_STR_EQ(ix.meta_values[0], "7");
        MT_ASSERT_INT_EQ(ix.meta_types[0], MT__META_I64);
    }
    mt__ckpt_index_free(&ix);
    int64_t back[8] = {0};
    MT_ASSERT_INT_EQ(mt__ckpt_reader_array(r, "s", MT_I64), MT_OK);
    MT_ASSERT_INT_EQ(mt__ckpt_reader_rows(r, 1, 3, back + 2), MT_OK);
    MT_ASSERT_INT_EQ(mt__ckpt_reader_rows(r, 0, 1, back), MT_OK);
    CU_ASSERT(memcmp(back, s, sizeof s) == 0);
    MT_ASSERT_INT_EQ(mt__ckpt_reader_array(r, "missing", MT_I64), MT_EFORMAT);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "missing");
    mt__ckpt_reader_close(&r);
    CU_ASSERT_PTR_NULL(r);

    MT_ASSERT_INT_EQ(mt__ckpt_writer_create(failed, &w), MT_OK);
    MT_ASSERT_INT_EQ(mt__ckpt_writer_begin(w, "s", MT_I64, 1, (uint64_t[]){8}), MT_OK);
    MT_ASSERT_INT_EQ(mt__ckpt_writer_close(&w, MT_EIO), MT_EIO); /* the array left open too */
    MT_ASSERT_INT_EQ(mt__ckpt_reader_open(failed, &r), MT_OK); /* closed, with its header */
    mt__ckpt_reader_close(&r);
}

/* The writer's queue: pieces queued back to back are written in order from the caller's
 * memory and read back whole; a queued piece that fails (rows past the array's end) is
 * the error of the next wait, in the waiting thread, naming the file and the array;
 * pieces queued after it are skipped; closing returns the failure and leaves a closed
 * file with its checksum header. */
static void test_checkpoint_writer_queue(void)
{
    enum { ROWS = 64 };
    int64_t v[ROWS], back[ROWS] = {0};
    for (int i = 0; i < ROWS; i++)
        v[i] = 1000 + i;
    char path[400], failed[400];
    snprintf(path, sizeof path, "%s/queue.h5", dir);
    snprintf(failed, sizeof failed, "%s/queue_failed.h5", dir);
    mt__ckpt_writer *w = NULL;
    MT_ASSERT_INT_EQ(mt__ckpt_writer_create(path, &w), MT_OK);
    CU_ASSERT_PTR_NOT_NULL_FATAL(w);
    MT_ASSERT_INT_EQ(mt__ckpt_writer_begin(w, "v", MT_I64, 1, (uint64_t[]){ROWS}), MT_OK);
    for (int i = 0; i < ROWS; i += 8)
        MT_ASSERT_INT_EQ(mt__ckpt_writer_queue(w, (uint64_t)i, 8, v + i), MT_OK);
    MT_ASSERT_INT_EQ(mt__ckpt_writer_wait(w, 0), MT_OK);
    MT_ASSERT_INT_EQ(mt__ckpt_writer_end(w, MT_REPLICATED, mt__crc32(0, v, sizeof v), NULL, 0),
                     MT_OK);
    MT_ASSERT_INT_EQ(mt__ckpt_writer_close(&w, MT_OK), MT_OK);
    mt__ckpt_reader *r = NULL;
    MT_ASSERT_INT_EQ(mt__ckpt_reader_open(path, &r), MT_OK);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    MT_ASSERT_INT_EQ(mt__ckpt_reader_array(r, "v", MT_I64), MT_OK);
    MT_ASSERT_INT_EQ(mt__ckpt_reader_rows(r, 0, ROWS, back), MT_OK);
    CU_ASSERT(memcmp(back, v, sizeof v) == 0);
    mt__ckpt_reader_close(&r);

    MT_ASSERT_INT_EQ(mt__ckpt_writer_create(failed, &w), MT_OK);
    MT_ASSERT_INT_EQ(mt__ckpt_writer_begin(w, "v", MT_I64, 1, (uint64_t[]){8}), MT_OK);
    MT_ASSERT_INT_EQ(mt__ckpt_writer_queue(w, 0, 8, v), MT_OK);
    MT_ASSERT_INT_EQ(mt__ckpt_writer_queue(w, 4, 8, v), MT_OK); /* rows 4..12 of 8 */
    MT_ASSERT_INT_EQ(mt__ckpt_writer_queue(w, 0, 8, v + 8), MT_OK); /* skipped */
    mt__error_clear();
    MT_ASSERT_INT_EQ(mt__ckpt_writer_wait(w, 0), MT_EIO);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "queue_failed.h5: array v: write of rows 4..12");
    MT_ASSERT_INT_EQ(mt__ckpt_writer_wait(w, 1), MT_EIO); /* it stays the writer's status */
    MT_ASSERT_INT_EQ(mt__ckpt_writer_end(w, MT_REPLICATED, 0, NULL, 0), MT_EIO);
    MT_ASSERT_INT_EQ(mt__ckpt_writer_close(&w, MT_EIO), MT_EIO);
    MT_ASSERT_INT_EQ(mt__ckpt_reader_open(failed, &r), MT_OK); /* closed, with its header */
    MT_ASSERT_INT_EQ(mt__ckpt_reader_array(r, "v", MT_I64), MT_OK);
    MT_ASSERT_INT_EQ(mt__ckpt_reader_rows(r, 0, 8, back), MT_OK);
    CU_ASSERT(memcmp(back, v, 8 * sizeof *v) == 0); /* the skipped piece wrote nothing */
    mt__ckpt_reader_close(&r);
}

/* mt__crc32, the checksum of every checkpoint array: the number zlib's crc32 gives, for
 * every length to 1 KiB at every alignment, from any starting value, fed whole or in
 * pieces of any size (what the commit does), and on 64 MiB + 13 bytes. */
static void test_checkpoint_crc32(void)
{
    size_t big = ((size_t)64 << 20) + 13;
    unsigned char *b = malloc(big);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    uint32_t x = 12345;
    for (size_t i = 0; i < big; i++) {
        x = x * 1103515245u + 12345u;
        b[i] = (unsigned char)(x >> 16);
    }
    int wrong = 0, cases = 0;
    for (size_t len = 0; len <= 1024; len++)
        for (size_t align = 0; align < 16; align++, cases++) {
            uint32_t start = (uint32_t)(len * 2654435761u);
            wrong += mt__crc32(0, b + align, len) !=
                     (uint32_t)crc32(0, (const Bytef *)b + align, (uInt)len);
            wrong += mt__crc32(start, b + align, len) !=
                     (uint32_t)crc32(start, (const Bytef *)b + align, (uInt)len);
        }
    MT_ASSERT_INT_EQ(wrong, 0);
    MT_ASSERT_INT_EQ(cases, 1025 * 16);
    uint32_t whole = (uint32_t)crc32(0, b, (uInt)big), pieces = 0;
    CU_ASSERT_EQUAL(mt__crc32(0, b, big), whole);
    for (size_t off = 0, n = 1; off < big; off += n, n = n * 3 + 7)
        pieces = mt__crc32(pieces, b + off, big - off < n ? big - off : n);
    CU_ASSERT_EQUAL(pieces, whole);
    free(b);
}

static const mt_test tests[] = {
    {"idx_round_trip", test_idx_round_trip},
    {"idx_fashion_mnist", test_idx_fashion_mnist},
    {"idx_malformed", test_idx_malformed},
    {"csv", test_csv},
    {"csv_malformed", test_csv_malformed},
    {"idx_headers_that_lie", test_idx_headers_that_lie},
    {"csv_out_of_float_range", test_csv_out_of_float_range},
    {"checkpoint_file_bounds", test_checkpoint_file_bounds},
    {"checkpoint_header", test_checkpoint_header},
    {"checkpoint_writer_reader", test_checkpoint_writer_reader},
    {"checkpoint_crc32", test_checkpoint_crc32},
    {"checkpoint_writer_queue", test_checkpoint_writer_queue},
    {"run_json_names", test_run_json_names},
    {"convert_matches_hdf5", test_convert_matches_hdf5},
    {NULL, NULL},
};

int main(int argc, char **argv)
{
    return mt_test_main_with(argc, argv, "io", tests, false, make_dir, remove_dir);
}
