/*
 * ckpt_probe -- checkpoint scenarios driven by tests/checkpoint.sh:
 *   ckpt_probe save NAME ROWS     one sharded checkpoint of ROWS rows (row i holds i), a
 *                                 replicated array "step" and metadata "k", then stop with
 *                                 an error so the run can be resumed
 *   ckpt_probe load NAME ROWS     resume: every rank checks its part of the rows
 *   ckpt_probe twice NAME ROWS    like save, with a second checkpoint (tests pause in it)
 *   ckpt_probe big NAME MIB       a MIB-sized sharded checkpoint; rank 0 prints how much its
 *                                 peak resident memory grew during the commit
 *   ckpt_probe damage FILE WHAT   damage one thing in a checkpoint.h5 with the HDF5 API
 *                                 (no MPI): layout, offsets, shape, dtype, name, meta,
 *                                 drop (an array), add (an array), unformat (the format
 *                                 attribute), legacy (every check: an older file); each
 *                                 then gets a new checksum header, so that the check
 *                                 inside is what finds it. Without one: bytes (16 bytes
 *                                 of the root object header flipped: damaged metadata),
 *                                 bare (the same HDF5 content without the header, as
 *                                 written before the header existed)
 *   ckpt_probe report NAME N      N reports (metric k = 0..N-1), a checkpoint holding k with
 *                                 every MT_PROBE_CKPT_EVERY-th (default 1); a resumed run
 *                                 continues after the restored k; MT_PROBE_FAIL_AT=K fails
 *                                 the first attempt after report K; at report
 *                                 MT_PROBE_BIG_AT=K (1-based) the checkpoint gets a sharded
 *                                 array of MT_PROBE_BIG_MIB MiB and the metrics a string of
 *                                 MT_PROBE_BIG_KIB KiB (to fill a disk)
 * Storage: MT_STORAGE_PATH. A failed fit prints "ckpt_probe: rank R: ERROR" on every rank.
 */
#include "harness.h"

#include "../io/h5.h"
#include <mpitrain.h>

#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *mode;
    long long n;
} probe;

static int save(mt_context *c, long long rows, int times)
{
    int r = mt_world_rank(c), p = mt_world_size(c), rc = MT_OK;
    long long mine = rows / p + (r < rows % p), first = r * (rows / p) + (r < rows % p ? r : rows % p);
    double *part = malloc((size_t)(mine ? mine : 1) * 2 * sizeof *part);
    for (long long i = 0; i < mine; i++)
        part[2 * i] = part[2 * i + 1] = (double)(first + i);
    for (int k = 0; k < times && !rc; k++) {
        mt_checkpoint *ck = mt_checkpoint_new();
        mt_checkpoint_put(ck, "rows", MT_F64, 2, (size_t[]){(size_t)mine, 2}, part, MT_SHARDED);
        int32_t step = k;
        mt_checkpoint_put(ck, "step", MT_I32, 1, (size_t[]){1}, &step, MT_REPLICATED);
        char kv[16];
        snprintf(kv, sizeof kv, "%d", k);
        mt_checkpoint_set_meta(ck, "k", kv);
        mt_metrics *m = mt_metrics_new();
        mt_metrics_set_i64(m, "k", k);
        rc = mt_report(c, m, ck);
        mt_metrics_free(&m);
        mt_checkpoint_free(&ck);
    }
    free(part);
    return rc ? rc : MT_EIO; /* stop here: the run stays resumable */
}

static int load(mt_context *c, long long rows)
{
    const mt_checkpoint *ck = mt_get_checkpoint(c);
    if (!ck) {
        fprintf(stderr, "ckpt_probe: rank %d: no checkpoint to resume from\n", mt_world_rank(c));
        return MT_ENOTFOUND;
    }
    int nd;
    size_t dims[8];
    int rc = mt_checkpoint_dims(ck, "rows", &nd, dims);
    if (rc)
        return rc;
    int r = mt_world_rank(c), p = mt_world_size(c);
    long long start = rows * r / p, count = rows * (r + 1) / p - start;
    float *part = malloc((dims[0] ? dims[0] : 1) * 2 * sizeof *part);
    rc = mt_checkpoint_get(ck, "rows", MT_F32, part, dims[0] * 2);
    int bad = (long long)dims[0] != count;
    for (size_t i = 0; !rc && !bad && i < dims[0]; i++)
        bad += part[2 * i] != (float)(start + (long long)i) || part[2 * i + 1] != part[2 * i];
    printf("ckpt_probe: rank %d of %d: rows %lld..%lld from %s: %s\n", r, p, start,
           start + count, mt_checkpoint_path(ck), bad || rc ? "WRONG" : "ok");
    free(part);
    return rc ? rc : bad ? MT_EFORMAT : MT_OK;
}

static int big(mt_context *c, long long mib)
{
    int p = mt_world_size(c);
    size_t bytes = (size_t)mib << 20, mine = bytes / (size_t)p / 4096 * 4096;
    unsigned char *part = malloc(mine);
    if (!part)
        return MT_ENOMEM;
    for (size_t i = 0; i < mine; i++)
        part[i] = (unsigned char)i;
    long long before = mt_test_status_kib("VmHWM");
    mt_checkpoint *ck = mt_checkpoint_new();
    mt_checkpoint_put(ck, "blob", MT_U8, 2, (size_t[]){mine / 4096, 4096}, part, MT_SHARDED);
    mt_metrics *m = mt_metrics_new();
    int rc = mt_report(c, m, ck);
    long long after = mt_test_status_kib("VmHWM");
    if (mt_world_rank(c) == 0)
        printf("ckpt_probe: committed %lld MiB from %d ranks; rank 0 held %zu MiB itself; its "
               "peak resident memory grew by %lld MiB\n", mib, p, mine >> 20,
               (after - before) >> 10);
    mt_metrics_free(&m);
    mt_checkpoint_free(&ck);
    free(part);
    return rc;
}

static int report(mt_context *c, long long n)
{
    const char *every_env = getenv("MT_PROBE_CKPT_EVERY"), *fail_env = getenv("MT_PROBE_FAIL_AT");
    long long every = every_env ? atoll(every_env) : 1, fail_at = fail_env ? atoll(fail_env) : 0;
    const mt_checkpoint *from = mt_get_checkpoint(c);
    long long k = 0;
    int rc = MT_OK;
    if (from) {
        int64_t v = 0;
        rc = mt_checkpoint_get(from, "k", MT_I64, &v, 1);
        k = v + 1;
    }
    const char *big_env = getenv("MT_PROBE_BIG_AT"), *mib_env = getenv("MT_PROBE_BIG_MIB"),
               *kib_env = getenv("MT_PROBE_BIG_KIB");
    long long big_at = big_env ? atoll(big_env) : 0;
    size_t blob_bytes = mib_env ? (size_t)atoll(mib_env) << 20 : 0;
    size_t text_bytes = kib_env ? (size_t)atoll(kib_env) << 10 : 0;
    for (; k < n && !rc; k++) {
        bool big = k + 1 == big_at;
        mt_metrics *m = mt_metrics_new();
        mt_metrics_set_i64(m, "k", k);
        char *text = big && text_bytes ? malloc(text_bytes + 1) : NULL;
        if (text) {
            memset(text, 'x', text_bytes);
            text[text_bytes] = '\0';
            mt_metrics_set_str(m, "blob", text);
        }
        mt_checkpoint *ck = NULL;
        int64_t v = k;
        size_t rows = blob_bytes / 1024 / (size_t)mt_world_size(c);
        unsigned char *blob = big && rows ? calloc(rows, 1024) : NULL;
        if ((every > 0 && (k + 1) % every == 0) || blob) {
            ck = mt_checkpoint_new();
            mt_checkpoint_put(ck, "k", MT_I64, 1, (size_t[]){1}, &v, MT_REPLICATED);
            if (blob)
                mt_checkpoint_put(ck, "blob", MT_U8, 2, (size_t[]){rows, 1024}, blob, MT_SHARDED);
        }
        rc = mt_report(c, m, ck);
        mt_checkpoint_free(&ck);
        mt_metrics_free(&m);
        free(blob);
        free(text);
        if (!rc && fail_at && k + 1 == fail_at && mt_attempt(c) == 0)
            rc = MT_EIO;
    }
    return rc;
}

static int train(mt_context *c, void *arg)
{
    const probe *p = arg;
    if (!strcmp(p->mode, "save"))
        return save(c, p->n, 1);
    if (!strcmp(p->mode, "twice"))
        return save(c, p->n, 2);
    if (!strcmp(p->mode, "load"))
        return load(c, p->n);
    if (!strcmp(p->mode, "report"))
        return report(c, p->n);
    return big(c, p->n);
}

/* ------------------------------------------------------------ damage (tests/checkpoint.sh) */

static herr_t copy_attr(hid_t from, const char *name, const H5A_info_t *info, void *to)
{
    hid_t a = H5Aopen(from, name, H5P_DEFAULT), t = H5Aget_type(a), sp = H5Aget_space(a);
    size_t n = H5Tget_size(t) * (size_t)H5Sget_simple_extent_npoints(sp);
    void *buf = malloc(n ? n : 1);
    H5Aread(a, t, buf);
    hid_t b = H5Acreate2(*(hid_t *)to, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(b, t, buf);
    H5Aclose(b);
    free(buf);
    H5Sclose(sp);
    H5Tclose(t);
    H5Aclose(a);
    return 0;
}

/* Array `name` again under `as`, with `type` and shape (ndim, dims), the same bytes and
 * the same attributes: only what the metadata says changes. */
static int recreate(hid_t f, const char *name, const char *as, hid_t type, int ndim,
                    const hsize_t *dims)
{
    hid_t ds = H5Dopen2(f, name, H5P_DEFAULT), ft = H5Dget_type(ds);
    hsize_t bytes = H5Dget_storage_size(ds);
    void *buf = malloc(bytes ? bytes : 1);
    H5Dread(ds, ft, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf);
    hid_t sp = H5Screate_simple(ndim, dims, NULL);
    hid_t nd = H5Dcreate2(f, "tmp-damage", type, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    int rc = nd >= 0 && H5Dwrite(nd, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) >= 0 ? 0 : 1;
    hsize_t idx = 0;
    H5Aiterate2(ds, H5_INDEX_NAME, H5_ITER_INC, &idx, copy_attr, &nd);
    H5Dclose(nd);
    H5Sclose(sp);
    H5Tclose(ft);
    H5Dclose(ds);
    free(buf);
    H5Ldelete(f, name, H5P_DEFAULT);
    H5Lmove(f, "tmp-damage", f, as, H5P_DEFAULT, H5P_DEFAULT);
    return rc;
}

/* Flip 16 bytes of the root group's object header, past its first 16 (no HDF5 call
 * sees the result: the file's checksum header must refuse it first). */
static int flip_root_header(const char *file)
{
    hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT), fcpl = H5Fget_create_plist(f);
    H5O_info_t oi;
    hsize_t base = 0;
    int rc = f < 0 || fcpl < 0 || H5Pget_userblock(fcpl, &base) < 0 ||
             H5Oget_info2(f, &oi, H5O_INFO_BASIC) < 0;
    H5Pclose(fcpl);
    H5Fclose(f);
    FILE *io = rc ? NULL : fopen(file, "r+b");
    unsigned char b[16];
    long at = (long)(base + oi.addr + 16);
    rc = !io || fseek(io, at, SEEK_SET) || fread(b, 1, sizeof b, io) != sizeof b;
    for (int i = 0; !rc && i < 16; i++)
        b[i] ^= 0xff;
    rc = rc || fseek(io, at, SEEK_SET) || fwrite(b, 1, sizeof b, io) != sizeof b;
    if (io && fclose(io))
        rc = 1;
    return rc;
}

/* The same objects and root attributes in a file without a user block: what every
 * checkpoint looked like before the checksum header. */
static int bare(const char *file)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.bare", file);
    hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t g = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    int rc = f < 0 || g < 0;
    const char *names[] = {"rows", "step"};
    for (int i = 0; !rc && i < 2; i++)
        rc = H5Ocopy(f, names[i], g, names[i], H5P_DEFAULT, H5P_DEFAULT) < 0;
    hsize_t idx = 0;
    if (!rc)
        rc = H5Aiterate2(f, H5_INDEX_NAME, H5_ITER_INC, &idx, copy_attr, &g) < 0;
    if (g >= 0 && H5Fclose(g) < 0)
        rc = 1;
    if (f >= 0)
        H5Fclose(f);
    return rc || rename(tmp, file);
}

static int damage(const char *file, const char *what)
{
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    if (!strcmp(what, "bytes") || !strcmp(what, "bare")) {
        int rc = what[0] == 'b' && what[1] == 'y' ? flip_root_header(file) : bare(file);
        if (rc)
            fprintf(stderr, "ckpt_probe: damaging %s in %s failed\n", what, file);
        return rc;
    }
    hid_t f = H5Fopen(file, H5F_ACC_RDWR, H5P_DEFAULT);
    if (f < 0) {
        fprintf(stderr, "ckpt_probe: cannot open %s\n", file);
        return 1;
    }
    int rc = 0;
    hid_t ds = H5Dopen2(f, "rows", H5P_DEFAULT), sp = H5Dget_space(ds);
    hsize_t dims[8];
    H5Sget_simple_extent_dims(sp, dims, NULL);
    H5Sclose(sp);
    if (!strcmp(what, "layout")) { /* sharded -> replicated */
        int v = 0;
        hid_t a = H5Aopen(ds, "layout", H5P_DEFAULT);
        rc = H5Awrite(a, H5T_NATIVE_INT, &v) < 0;
        H5Aclose(a);
    } else if (!strcmp(what, "offsets")) { /* move a boundary; with one part, drop them */
        hid_t a = H5Aopen(ds, "offsets", H5P_DEFAULT), asp = H5Aget_space(a);
        hssize_t n = H5Sget_simple_extent_npoints(asp);
        int64_t off[64] = {0};
        H5Sclose(asp);
        if (n > 2 && n <= 64) {
            H5Aread(a, H5T_NATIVE_INT64, off);
            off[1] -= 1;
            rc = H5Awrite(a, H5T_NATIVE_INT64, off) < 0;
            H5Aclose(a);
        } else {
            H5Aclose(a);
            rc = H5Adelete(ds, "offsets") < 0;
        }
    }
    H5Dclose(ds);
    if (!strcmp(what, "shape")) /* N x 2 doubles as 2N x 1: the same bytes */
        rc = recreate(f, "rows", "rows", H5T_NATIVE_DOUBLE, 2, (hsize_t[]){dims[0] * 2, 1});
    else if (!strcmp(what, "dtype")) /* doubles read as int64: the same bytes */
        rc = recreate(f, "rows", "rows", H5T_NATIVE_INT64, 2, dims);
    else if (!strcmp(what, "name")) /* the arrays swap names */
        rc = H5Lmove(f, "rows", f, "x", H5P_DEFAULT, H5P_DEFAULT) < 0 ||
             H5Lmove(f, "step", f, "rows", H5P_DEFAULT, H5P_DEFAULT) < 0 ||
             H5Lmove(f, "x", f, "step", H5P_DEFAULT, H5P_DEFAULT) < 0;
    else if (!strcmp(what, "drop"))
        rc = H5Ldelete(f, "step", H5P_DEFAULT) < 0;
    else if (!strcmp(what, "add"))
        rc = H5Lcreate_hard(f, "step", f, "extra", H5P_DEFAULT, H5P_DEFAULT) < 0;
    else if (!strcmp(what, "legacy")) /* as written before the checks existed */
        rc = H5Adelete(f, "format") < 0 || H5Adelete(f, "index_check") < 0 ||
             H5Adelete_by_name(f, "rows", "check", H5P_DEFAULT) < 0 ||
             H5Adelete_by_name(f, "step", "check", H5P_DEFAULT) < 0;
    else if (!strcmp(what, "unformat")) /* the checks stay, the format goes */
        rc = H5Adelete(f, "format") < 0;
    else if (!strcmp(what, "meta")) {
        hid_t a = H5Aopen(f, "meta:k", H5P_DEFAULT), t = H5Aget_type(a);
        char v[64] = "";
        H5Aread(a, t, v);
        v[0] = v[0] == '9' ? '8' : '9';
        rc = H5Awrite(a, t, v) < 0;
        H5Tclose(t);
        H5Aclose(a);
    } else if (strcmp(what, "layout") && strcmp(what, "offsets")) {
        fprintf(stderr, "ckpt_probe: unknown damage %s\n", what);
        rc = 1;
    }
    if (H5Fclose(f) < 0)
        rc = 1;
    if (!rc && mt__ckpt_reseal(file)) { /* the header must not be what refuses it */
        fprintf(stderr, "ckpt_probe: %s\n", mt_last_error());
        rc = 1;
    }
    if (rc)
        fprintf(stderr, "ckpt_probe: damaging %s in %s failed\n", what, file);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "damage"))
        return damage(argv[2], argv[3]);
    mt_init(&argc, &argv);
    if (argc != 4) {
        fprintf(stderr, "usage: ckpt_probe save|load|twice|big|report NAME N\n");
        mt_finalize();
        return 2;
    }
    probe p = {argv[1], atoll(argv[3])};
    mt_trainer_config cfg = {.run = {.name = argv[2], .verbose = MT_VERBOSE_SILENT}};
    int argc2 = 1;
    char **argv2 = argv;
    mt_config_from_args(&cfg, &argc2, &argv2); /* MT_STORAGE_PATH */
    mt_trainer *t = NULL;
    mt_result *r = NULL;
    int rc = mt_trainer_create(&t, train, &p, &cfg);
    if (!rc)
        rc = mt_trainer_fit(t, &r);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rc && strcmp(p.mode, "save") && strcmp(p.mode, "twice"))
        fprintf(stderr, "ckpt_probe: rank %d: %s\n", rank,
                r && mt_result_error(r) ? mt_result_error(r) : mt_last_error());
    mt_result_free(&r);
    mt_trainer_destroy(&t);
    mt_finalize();
    return rc ? 1 : 0;
}
