/*
 * test_io.c -- single-process tests of the importers: IDX round trips (plain and gzip,
 * u8 and f32) checked against the bytes written, the Debian Fashion-MNIST files when
 * present, CSV conversion, and every malformed input with its byte offset or line.
 */
#include "harness.h"

#include "../io/io.h"

#include <stdio.h>
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
    if (gz) {
        gzFile z = gzopen(file, "wb");
        gzwrite(z, b, (unsigned)len);
        gzclose(z);
    } else {
        FILE *f = fopen(file, "wb");
        fwrite(b, 1, len, f);
        fclose(f);
    }
    free(b);
}

static void write_idx_labels(const char *file, int n)
{
    unsigned char b[8 + 64];
    b[0] = b[1] = 0; b[2] = 0x08; b[3] = 1;
    put_be32(b + 4, (uint32_t)n);
    for (int i = 0; i < n; i++)
        b[8 + i] = (unsigned char)(i % 10);
    FILE *f = fopen(file, "wb");
    fwrite(b, 1, 8 + (size_t)n, f);
    fclose(f);
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
        {"a,b,label\n1,2,3\n4,x5,6\n", "label", "bad.csv: line 3, column 2 (feature): 'x5' is not a number", MT_EFORMAT},
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

static void make_dir(void)
{
    snprintf(dir, sizeof dir, "%s/mpitrain-io-test-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir))
        perror("mkdtemp");
}

static void remove_dir(void)
{
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

static const mt_test tests[] = {
    {"idx_round_trip", test_idx_round_trip},
    {"idx_fashion_mnist", test_idx_fashion_mnist},
    {"idx_malformed", test_idx_malformed},
    {"csv", test_csv},
    {"csv_malformed", test_csv_malformed},
    {NULL, NULL},
};

int main(int argc, char **argv)
{
    mt_test_before = make_dir;
    mt_test_after = remove_dir;
    return mt_test_main(argc, argv, "io", tests, false);
}
