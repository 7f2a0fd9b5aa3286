/*
 * checkpoint.c -- mt_checkpoint: building one, committing it through rank 0, restoring.
 *
 * Commit (inside mt_report, every rank): the arrays are described and agreed (names,
 * types, layouts and row shapes must match on every rank); rank 0 writes
 * .checkpoint_NNNNNN.tmp/checkpoint.h5, taking the other ranks' sharded rows and files
 * over MPI in chunks of at most MT_CHECKPOINT_BUFFER bytes (default 64 MiB), so it never
 * holds more than one chunk of anyone else's data. Then: fsync the file and the folder,
 * rename the folder to checkpoint_NNNNNN, fsync the run directory, replace run.json, and
 * only then delete what retention drops. A crash at any point leaves the previous
 * checkpoints and run.json intact.
 *
 * Every array carries a CRC-32 of its bytes in row order; restore verifies it. Each rank
 * sums its own rows (in parallel, before sending) and rank 0 combines the sums. What
 * decides which rows a rank gets back (names, dtypes, shapes, layouts, row offsets,
 * metadata) is checked too (io/ckpt.c); a checkpoint failing any check is skipped with a
 * warning naming the file and what failed, and the previous one is used.
 */
#include "runtime.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

static size_t buffer_bytes(void)
{
    return (size_t)mt__env_knob_u64("MT_CHECKPOINT_BUFFER", (uint64_t)64 << 20);
}

/* Rank 0's staging buffer for other ranks' data, buffer_bytes() long, made on the first
 * commit and kept until the context ends (pages are touched only as far as chunks go). */
static char *staging(mt_context *c)
{
    if (!c->ck_buf)
        c->ck_buf = malloc(buffer_bytes());
    return c->ck_buf;
}

void mt__checkpoint_release(mt_context *c)
{
    free(c->ck_buf);
    c->ck_buf = NULL;
}

/* A chunk size that is a whole number of rows (at least one row). */
static size_t row_chunk(size_t row_bytes)
{
    size_t b = buffer_bytes();
    if (row_bytes == 0)
        return b;
    return b < row_bytes ? row_bytes : b / row_bytes * row_bytes;
}

/* ------------------------------------------------------------ building */

mt_checkpoint *mt_checkpoint_new(void)
{
    mt_checkpoint *ck = calloc(1, sizeof *ck);
    if (!ck)
        mt__error(MT_ENOMEM, "out of memory creating a checkpoint");
    else if (mt__live_add(ck, MT__LIVE_CHECKPOINT)) {
        free(ck);
        ck = NULL;
    }
    return ck;
}

/* A checkpoint not freed yet (the one mt_get_checkpoint gives ends with its fit). */
static bool ck_ok(const mt_checkpoint *ck, const char *fn)
{
    if (ck && mt__live(ck, MT__LIVE_CHECKPOINT))
        return true;
    mt__error(MT_EINVAL, "%s: %s", fn, ck ? "not a live checkpoint (freed already, or the "
                                            "restored one kept past its fit)"
                                          : "checkpoint is NULL");
    return false;
}

void mt_checkpoint_free(mt_checkpoint **cp)
{
    if (!cp || !*cp)
        return;
    mt_checkpoint *ck = *cp;
    if (!ck_ok(ck, "mt_checkpoint_free")) /* a second free: nothing to give back */
        return;
    mt__live_remove(ck);
    for (int i = 0; i < ck->narrays; i++)
        free(ck->arrays[i].name);
    free(ck->arrays);
    for (int i = 0; i < ck->nmeta; i++) {
        free(ck->meta_keys[i]);
        free(ck->meta_values[i]);
    }
    free(ck->meta_keys);
    free(ck->meta_values);
    free(ck->meta_types);
    for (int i = 0; i < ck->nfiles; i++) {
        free(ck->files[i].name);
        free(ck->files[i].path);
    }
    free(ck->files);
    free(ck->path);
    mt__ckpt_index_free(&ck->index);
    free(ck);
    *cp = NULL;
}

/* Array and file names become HDF5 dataset names and files in the checkpoint folder:
 * mt__check_name's rules (no '/', "..", control characters), and no leading '.' (the
 * run directory's own temporary names). */
static bool bad_name(const char *name)
{
    char saved[MT__MSG_LEN];
    snprintf(saved, sizeof saved, "%s", mt_last_error());
    bool bad = !name || name[0] == '.' || mt__check_name("name", name, 200) != MT_OK;
    mt__error_set_text(saved);
    return bad;
}

int mt_checkpoint_put(mt_checkpoint *ck, const char *name, mt_dtype t, int ndim,
                      const size_t *dims, const void *data, mt_layout layout)
{
    if (!ck_ok(ck, "mt_checkpoint_put"))
        return MT_EINVAL;
    if (ck->path)
        return mt__error(MT_EINVAL, "mt_checkpoint_put: a stored checkpoint is read-only");
    if (bad_name(name))
        return mt__error(MT_EINVAL, "mt_checkpoint_put: bad array name \"%.300s\" (1 to 200 "
                         "bytes, no '/' or control characters, not starting with '.')",
                         name ? name : "(null)");
    if (mt_dtype_size(t) == 0)
        return mt__error(MT_EINVAL, "mt_checkpoint_put %s: unknown dtype %d", name, (int)t);
    if (ndim < 1 || ndim > 8 || !dims)
        return mt__error(MT_EINVAL, "mt_checkpoint_put %s: ndim must be 1 to 8 (got %d)", name,
                         ndim);
    if (layout != MT_REPLICATED && layout != MT_SHARDED)
        return mt__error(MT_EINVAL, "mt_checkpoint_put %s: unknown layout %d", name, (int)layout);
    size_t n = 1;
    for (int i = 0; i < ndim; i++)
        if (__builtin_mul_overflow(n, dims[i], &n) || n > SIZE_MAX / mt_dtype_size(t))
            return mt__error(MT_EINVAL, "mt_checkpoint_put %s: the shape's bytes do not fit "
                                        "in memory sizes (dimension %d)", name, i);
    if (n > 0 && !data)
        return mt__error(MT_EINVAL, "mt_checkpoint_put %s: data is NULL", name);
    for (int i = 0; i < ck->narrays; i++)
        if (!strcmp(ck->arrays[i].name, name))
            return mt__error(MT_EINVAL, "mt_checkpoint_put: array %s was put already", name);
    mt__ck_array *a = realloc(ck->arrays, (size_t)(ck->narrays + 1) * sizeof *a);
    if (!a)
        return mt__error(MT_ENOMEM, "out of memory adding array %s", name);
    ck->arrays = a;
    a = &ck->arrays[ck->narrays];
    memset(a, 0, sizeof *a);
    if (!(a->name = mt__strdup(name)))
        return MT_ENOMEM;
    a->dtype = t;
    a->ndim = ndim;
    memcpy(a->dims, dims, (size_t)ndim * sizeof *dims);
    a->data = data;
    a->layout = layout;
    ck->narrays++;
    return MT_OK;
}

/* Set key to a value of type MT__META_* given as text; fn names the caller in errors. */
static int set_meta(mt_checkpoint *ck, const char *key, int type, const char *value,
                    const char *fn)
{
    if (!ck_ok(ck, fn))
        return MT_EINVAL;
    if (ck->path)
        return mt__error(MT_EINVAL, "%s: a stored checkpoint is read-only", fn);
    char what[64];
    snprintf(what, sizeof what, "%s: key", fn);
    if (mt__check_text(what, key, 255))
        return MT_EINVAL;
    if (!value)
        return mt__error(MT_EINVAL, "%s %s: value is NULL", fn, key);
    char *v = mt__strdup(value);
    if (!v)
        return MT_ENOMEM;
    for (int i = 0; i < ck->nmeta; i++)
        if (!strcmp(ck->meta_keys[i], key)) { /* a key set again takes the new value */
            free(ck->meta_values[i]);
            ck->meta_values[i] = v;
            ck->meta_types[i] = type;
            return MT_OK;
        }
    char **k = realloc(ck->meta_keys, (size_t)(ck->nmeta + 1) * sizeof *k);
    if (k)
        ck->meta_keys = k;
    char **vs = realloc(ck->meta_values, (size_t)(ck->nmeta + 1) * sizeof *vs);
    if (vs)
        ck->meta_values = vs;
    int *ts = realloc(ck->meta_types, (size_t)(ck->nmeta + 1) * sizeof *ts);
    if (ts)
        ck->meta_types = ts;
    if (!k || !vs || !ts || !(ck->meta_keys[ck->nmeta] = mt__strdup(key))) {
        free(v);
        return mt__error(MT_ENOMEM, "out of memory adding metadata");
    }
    ck->meta_values[ck->nmeta] = v;
    ck->meta_types[ck->nmeta++] = type;
    return MT_OK;
}

int mt_checkpoint_set_meta(mt_checkpoint *ck, const char *key, const char *value)
{
    return set_meta(ck, key, MT__META_STR, value, "mt_checkpoint_set_meta");
}

int mt_checkpoint_set_meta_i64(mt_checkpoint *ck, const char *key, int64_t value)
{
    char text[32];
    snprintf(text, sizeof text, "%lld", (long long)value);
    return set_meta(ck, key, MT__META_I64, text, "mt_checkpoint_set_meta_i64");
}

int mt_checkpoint_set_meta_f64(mt_checkpoint *ck, const char *key, double value)
{
    char text[32];
    snprintf(text, sizeof text, "%.17g", value);
    return set_meta(ck, key, MT__META_F64, text, "mt_checkpoint_set_meta_f64");
}

/* A file the checkpoint can copy: a readable regular file (following links). */
static int check_file(int code, const char *what, const char *name, const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return mt__error(code, "%s %s: cannot use %s: %s", what, name, path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return mt__error(code, "%s %s: %s is %s, not a regular file", what, name, path,
                         S_ISDIR(st.st_mode) ? "a directory" : "a special file");
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return mt__error(code, "%s %s: cannot read %s: %s", what, name, path, strerror(errno));
    close(fd);
    return MT_OK;
}

/* rank<r> is where other ranks' files go: a name of that form would collide with them. */
static bool rank_folder_name(const char *name)
{
    if (strncmp(name, "rank", 4) || !name[4])
        return false;
    for (const char *p = name + 4; *p; p++)
        if (*p < '0' || *p > '9')
            return false;
    return true;
}

/* A stored checkpoint's file, listed (name, full path). */
static int add_stored_file(mt_checkpoint *ck, const char *name, const char *path)
{
    mt__ck_file *f = realloc(ck->files, (size_t)(ck->nfiles + 1) * sizeof *f);
    if (!f)
        return mt__error(MT_ENOMEM, "out of memory listing %s", ck->path);
    ck->files = f;
    f[ck->nfiles].name = mt__strdup(name);
    f[ck->nfiles].path = mt__strdup(path);
    if (!f[ck->nfiles].name || !f[ck->nfiles].path) {
        free(f[ck->nfiles].name);
        free(f[ck->nfiles].path);
        return mt__error(MT_ENOMEM, "out of memory listing %s", ck->path);
    }
    ck->nfiles++;
    return MT_OK;
}

int mt_checkpoint_add_file(mt_checkpoint *ck, const char *name, const char *path)
{
    if (!ck_ok(ck, "mt_checkpoint_add_file"))
        return MT_EINVAL;
    if (ck->path)
        return mt__error(MT_EINVAL, "mt_checkpoint_add_file: a stored checkpoint is read-only");
    if (bad_name(name) || !strcmp(name, "checkpoint.h5") || rank_folder_name(name))
        return mt__error(MT_EINVAL, "mt_checkpoint_add_file: bad file name \"%.300s\" (1 to 200 "
                         "bytes, no '/' or control characters, not starting with '.', not "
                         "checkpoint.h5 or rank<N>)",
                         name ? name : "(null)");
    if (!path || !*path)
        return mt__error(MT_EINVAL, "mt_checkpoint_add_file %s: path is %s", name,
                         path ? "empty" : "NULL");
    for (int i = 0; i < ck->nfiles; i++)
        if (!strcmp(ck->files[i].name, name))
            return mt__error(MT_EINVAL, "mt_checkpoint_add_file: a file named %s was added "
                             "already (from %s)", name, ck->files[i].path);
    int rc = check_file(MT_EINVAL, "mt_checkpoint_add_file", name, path);
    if (rc)
        return rc;
    mt__ck_file *f = realloc(ck->files, (size_t)(ck->nfiles + 1) * sizeof *f);
    if (!f)
        return mt__error(MT_ENOMEM, "out of memory adding file %s", name);
    ck->files = f;
    f[ck->nfiles].name = mt__strdup(name);
    f[ck->nfiles].path = mt__strdup(path);
    if (!f[ck->nfiles].name || !f[ck->nfiles].path) {
        free(f[ck->nfiles].name);
        free(f[ck->nfiles].path);
        return MT_ENOMEM;
    }
    ck->nfiles++;
    return MT_OK;
}

static const char *const meta_type_name[] = {"a string", "an integer", "a double"};
static const char *const meta_getter[] = {"mt_checkpoint_get_meta", "mt_checkpoint_get_meta_i64",
                                          "mt_checkpoint_get_meta_f64"};

/* The value of key as text and its type; MT_ENOTFOUND when absent (nothing recorded). */
static int find_meta(const mt_checkpoint *ck, const char *key, const char **text, int *type)
{
    for (int i = 0; i < ck->nmeta; i++)
        if (!strcmp(ck->meta_keys[i], key)) {
            *text = ck->meta_values[i];
            *type = ck->meta_types[i];
            return MT_OK;
        }
    for (int i = 0; i < ck->index.nmeta; i++)
        if (!strcmp(ck->index.meta_keys[i], key)) {
            *text = ck->index.meta_values[i];
            *type = ck->index.meta_types ? ck->index.meta_types[i] : MT__META_STR;
            return MT_OK;
        }
    return MT_ENOTFOUND;
}

/* A typed getter's common part: the text of key when it has type `want`. */
static int typed_meta(const mt_checkpoint *ck, const char *key, const void *out, int want,
                      const char **text)
{
    const char *fn = meta_getter[want];
    if (!ck_ok(ck, fn))
        return MT_EINVAL;
    if (!key || !out)
        return mt__error(MT_EINVAL, "%s: %s is NULL", fn, !key ? "key" : "out");
    int type = MT__META_STR;
    if (find_meta(ck, key, text, &type))
        return mt__error(MT_ENOTFOUND, "%s: checkpoint %s has no metadata %s", fn,
                         ck->path ? ck->path : "(not stored)", key);
    if (type != want)
        return mt__error(MT_EINVAL, "%s: metadata %s of checkpoint %s is %s, not %s (read it "
                         "with %s)", fn, key, ck->path ? ck->path : "(not stored)",
                         meta_type_name[type], meta_type_name[want], meta_getter[type]);
    return MT_OK;
}

const char *mt_checkpoint_get_meta(const mt_checkpoint *ck, const char *key)
{
    const char *text = NULL;
    if (!ck_ok(ck, "mt_checkpoint_get_meta"))
        return NULL;
    if (!key) {
        mt__error(MT_EINVAL, "mt_checkpoint_get_meta: key is NULL");
        return NULL;
    }
    int type = MT__META_STR;
    if (find_meta(ck, key, &text, &type))
        return NULL;
    if (type != MT__META_STR) {
        mt__error(MT_EINVAL, "mt_checkpoint_get_meta: metadata %s of checkpoint %s is %s, not "
                  "a string (read it with %s)", key, ck->path ? ck->path : "(not stored)",
                  meta_type_name[type], meta_getter[type]);
        return NULL;
    }
    return text;
}

int mt_checkpoint_get_meta_i64(const mt_checkpoint *ck, const char *key, int64_t *out)
{
    const char *text = NULL;
    int rc = typed_meta(ck, key, out, MT__META_I64, &text);
    if (!rc)
        *out = (int64_t)strtoll(text, NULL, 10);
    return rc;
}

int mt_checkpoint_get_meta_f64(const mt_checkpoint *ck, const char *key, double *out)
{
    const char *text = NULL;
    int rc = typed_meta(ck, key, out, MT__META_F64, &text);
    if (!rc)
        *out = strtod(text, NULL);
    return rc;
}

/* What a stored checkpoint lists: its arrays, metadata keys, files (a builder's files are
 * sources, not yet stored: not listed). */
enum { LIST_ARRAYS, LIST_META, LIST_FILES };
static const char *const list_fn[][2] = {{"mt_checkpoint_array_name", "arrays"},
                                         {"mt_checkpoint_meta_key", "keys"},
                                         {"mt_checkpoint_file_name", "files"}};

static int list_count(const mt_checkpoint *ck, int which)
{
    return which == LIST_ARRAYS ? ck->index.n
           : which == LIST_META ? ck->index.nmeta
           : ck->path           ? ck->nfiles : 0;
}

/* The listing getters' common part: ck is live (checked before it is read) and i is in
 * range; else recorded, naming the getter. */
static bool listed_ok(const mt_checkpoint *ck, size_t i, int which)
{
    if (!ck_ok(ck, list_fn[which][0]))
        return false;
    int n = list_count(ck, which);
    if (i < (size_t)n)
        return true;
    mt__error(MT_EINVAL, "%s: index %zu out of range (%d %s)", list_fn[which][0], i, n,
              list_fn[which][1]);
    return false;
}

size_t mt_checkpoint_num_arrays(const mt_checkpoint *ck)
{
    return ck_ok(ck, "mt_checkpoint_num_arrays") ? (size_t)list_count(ck, LIST_ARRAYS) : 0;
}

const char *mt_checkpoint_array_name(const mt_checkpoint *ck, size_t i)
{
    return listed_ok(ck, i, LIST_ARRAYS) ? ck->index.arrays[i].name : NULL;
}

size_t mt_checkpoint_num_meta(const mt_checkpoint *ck)
{
    return ck_ok(ck, "mt_checkpoint_num_meta") ? (size_t)list_count(ck, LIST_META) : 0;
}

const char *mt_checkpoint_meta_key(const mt_checkpoint *ck, size_t i)
{
    return listed_ok(ck, i, LIST_META) ? ck->index.meta_keys[i] : NULL;
}

size_t mt_checkpoint_num_files(const mt_checkpoint *ck)
{
    return ck_ok(ck, "mt_checkpoint_num_files") ? (size_t)list_count(ck, LIST_FILES) : 0;
}

const char *mt_checkpoint_file_name(const mt_checkpoint *ck, size_t i)
{
    return listed_ok(ck, i, LIST_FILES) ? ck->files[i].name : NULL;
}

const char *mt_checkpoint_path(const mt_checkpoint *ck)
{
    return ck_ok(ck, "mt_checkpoint_path") ? ck->path : NULL;
}

/* ------------------------------------------------------------ commit */

static size_t row_bytes_of(const mt__ck_array *a)
{
    size_t n = mt_dtype_size(a->dtype);
    for (int i = 1; i < a->ndim; i++)
        n *= a->dims[i];
    return n;
}

/* Local checks and the signature every rank must share. */
static int describe_local(const mt_checkpoint *ck, uint64_t *sig, int *nsharded)
{
    uint64_t h = mt__sig_mix(0, (uint64_t)ck->narrays);
    *nsharded = 0;
    for (int i = 0; i < ck->narrays; i++) {
        const mt__ck_array *a = &ck->arrays[i];
        for (const char *p = a->name; *p; p++)
            h = mt__sig_mix(h, (uint64_t)(unsigned char)*p);
        h = mt__sig_mix(mt__sig_mix(mt__sig_mix(h, a->dtype), a->layout), (uint64_t)a->ndim);
        for (int d = a->layout == MT_SHARDED ? 1 : 0; d < a->ndim; d++)
            h = mt__sig_mix(h, a->dims[d]);
        *nsharded += a->layout == MT_SHARDED;
    }
    *sig = h;
    /* again at commit: the file may have gone or changed since it was added */
    for (int i = 0; i < ck->nfiles; i++) {
        int rc = check_file(MT_EIO, "checkpoint file", ck->files[i].name, ck->files[i].path);
        if (rc)
            return rc;
    }
    return MT_OK;
}

typedef struct {
    hid_t ds;
    mt_dtype t;
    size_t row_bytes;
    uint64_t row0;
    uLong crc;
    bool sum;              /* fold pieces into crc (rank 0's own rows; senders sum theirs) */
    int kick_fd;           /* the file, to start its writeback early (-1: none) */
    const char *fail_hook; /* test hook: pause after the first piece */
} writer;

/* Test hook: MT_TEST_COMMIT_PAUSE=SECONDS pauses rank 0 after the first piece of checkpoint
 * number MT_TEST_COMMIT_PAUSE_AT (default 0), so a test can kill it mid-commit; with
 * MT_TEST_COMMIT_RESUME_FILE=PATH the pause ends as soon as PATH exists. */
static bool pause_here(int64_t index)
{
    return mt__env_knob_f64("MT_TEST_COMMIT_PAUSE", 0) > 0 &&
           (uint64_t)index == mt__env_knob_u64("MT_TEST_COMMIT_PAUSE_AT", 0);
}

static void test_pause(void)
{
    double p = mt__env_knob_f64("MT_TEST_COMMIT_PAUSE", 0);
    const char *go = getenv("MT_TEST_COMMIT_RESUME_FILE");
    if (p > 0) {
        fprintf(stderr, "mpitrain: test hook: pid %d pausing %g s inside a checkpoint commit\n", (int)getpid(), p);
        fflush(stderr);
        for (double left = p; left > 0 && !(go && access(go, F_OK) == 0); left -= 0.05)
            usleep(50000);
    }
}

static int write_piece(const void *piece, size_t n, size_t offset, void *arg)
{
    writer *w = arg;
    int rc = mt__ckpt_rows(w->ds, w->t, w->row0 + offset / w->row_bytes, n / w->row_bytes,
                           (void *)piece, true);
    /* the disk starts on these pages now, while the CPU sums them and takes the next
     * piece, instead of all at the final fsync */
    if (!rc && w->kick_fd >= 0)
        sync_file_range(w->kick_fd, 0, 0, SYNC_FILE_RANGE_WRITE);
    if (w->sum)
        w->crc = crc32_z(w->crc, piece, n);
    if (w->fail_hook) {
        w->fail_hook = NULL;
        test_pause();
    }
    return rc;
}

typedef struct {
    FILE *f;
    const char *path;
} copier;

static int copy_piece(const void *piece, size_t n, size_t offset, void *arg)
{
    copier *cp = arg;
    return fwrite(piece, 1, n, cp->f) == n
               ? MT_OK
               : mt__error(MT_EIO, "cannot write %s: %s", cp->path, strerror(errno));
}

static int drain(const void *piece, size_t n, size_t offset, void *arg)
{
    return MT_OK;
}

/* Rank 0: write one array (its own rows, then every other rank's for a sharded one). */
static int write_array(mt_context *c, hid_t file, int kick_fd, const mt__ck_array *a,
                       const int64_t *rows, char *buf, bool first, int status)
{
    int P = c->world_size, rc = status;
    uint64_t dims[8];
    for (int d = 0; d < a->ndim; d++)
        dims[d] = a->dims[d];
    int64_t *off = NULL;
    if (a->layout == MT_SHARDED) {
        off = calloc((size_t)P + 1, sizeof *off);
        if (!off && !rc)
            rc = mt__error(MT_ENOMEM, "out of memory");
        for (int r = 0; off && r < P; r++)
            off[r + 1] = off[r] + rows[r];
        dims[0] = off ? (uint64_t)off[P] : 0;
    }
    writer w = {.ds = H5I_INVALID_HID, .t = a->dtype, .row_bytes = row_bytes_of(a),
                .crc = crc32(0, NULL, 0), .sum = true, .kick_fd = kick_fd,
                .fail_hook = first ? "pause" : NULL};
    if (!rc)
        rc = mt__ckpt_add_array(file, a->name, a->dtype, a->ndim, dims, &w.ds);
    size_t own = (size_t)(a->layout == MT_SHARDED ? (size_t)rows[0] : a->dims[0]) * w.row_bytes;
    if (!rc && own)
        rc = write_piece(a->data, own, 0, &w);
    size_t chunk = row_chunk(w.row_bytes);
    w.sum = false;
    for (int r = 1; a->layout == MT_SHARDED && r < P; r++) {
        w.row0 = off ? (uint64_t)off[r] : 0;
        /* after a failure, keep receiving so rank r is not left waiting */
        size_t len = (size_t)rows[r] * w.row_bytes;
        int e = mt__stream_recv(c->comm, r, len, buf, chunk, rc ? drain : write_piece, &w);
        /* then the CRC-32 rank r computed of its rows while rank 0 wrote the ones before */
        uint32_t theirs = 0;
        int e2 = mt__stream_recv(c->comm, r, sizeof theirs, &theirs, sizeof theirs, drain, NULL);
        w.crc = crc32_combine(w.crc, theirs, (z_off_t)len);
        if (!rc)
            rc = e ? e : e2;
    }
    if (w.ds >= 0) {
        int e = mt__ckpt_finish_array(w.ds, a->layout, (uint32_t)w.crc, off, off ? P + 1 : 0);
        if (!rc)
            rc = e;
    }
    free(off);
    return rc;
}


/* Rank 0: receive the other ranks' files (names and sizes in `desc`), then copy its own. */
static int write_files(mt_context *c, const mt_checkpoint *ck, const char *dir, char *desc,
                       size_t *lens, char *buf, int status)
{
    int rc = status;
    size_t chunk = buffer_bytes(), pos = 0;
    for (int r = 0; r < c->world_size; r++) {
        size_t end = pos + lens[r];
        while (pos < end) {
            const char *name = desc + pos;
            pos += strlen(name) + 1;
            uint64_t size;
            memcpy(&size, desc + pos, 8);
            pos += 8;
            char path[4096];
            if (r == 0)
                snprintf(path, sizeof path, "%s/%s", dir, name);
            else {
                snprintf(path, sizeof path, "%s/rank%d", dir, r);
                if (!rc)
                    rc = mt__mkdirs(path);
                snprintf(path, sizeof path, "%s/rank%d/%s", dir, r, name);
            }
            FILE *out = rc ? NULL : fopen(path, "wb");
            if (!rc && !out)
                rc = mt__error(MT_EIO, "cannot write %s: %s", path, strerror(errno));
            copier cp = {out, path};
            if (r > 0) {
                /* after a failed write, keep receiving so rank r is not left waiting */
                int e = mt__stream_recv(c->comm, r, size, buf, chunk,
                                        out && !rc ? copy_piece : drain, &cp);
                if (!rc)
                    rc = e;
                if (rc && out) {
                    fclose(out);
                    out = NULL;
                }
            } else if (out) {
                const mt__ck_file *f = NULL;
                for (int i = 0; i < ck->nfiles && !f; i++)
                    if (!strcmp(ck->files[i].name, name))
                        f = &ck->files[i];
                FILE *in = f ? fopen(f->path, "rb") : NULL;
                size_t n;
                while (in && (n = fread(buf, 1, chunk, in)) > 0 && !rc)
                    rc = copy_piece(buf, n, 0, &cp);
                if (!in && !rc)
                    rc = mt__error(MT_EIO, "cannot read checkpoint file %s (%s): %s", name,
                                   f ? f->path : "not added", strerror(errno));
                else if (in && ferror(in) && !rc)
                    rc = mt__error(MT_EIO, "cannot read checkpoint file %s (%s)", name, f->path);
                if (in)
                    fclose(in);
            }
            if (out && (fflush(out) != 0 || ferror(out) || fsync(fileno(out)) != 0) && !rc)
                rc = mt__error(MT_EIO, "cannot write %s: %s", path, strerror(errno));
            if (out && fclose(out) != 0 && !rc)
                rc = mt__error(MT_EIO, "cannot write %s: %s", path, strerror(errno));
        }
    }
    return rc;
}

/* Other ranks: their sharded rows, then their files (through buf, buffer_bytes() long). */
static int send_parts(mt_context *c, const mt_checkpoint *ck, char *buf)
{
    int rc = MT_OK;
    for (int i = 0; i < ck->narrays && !rc; i++) {
        const mt__ck_array *a = &ck->arrays[i];
        if (a->layout == MT_SHARDED) {
            size_t len = a->dims[0] * row_bytes_of(a);
            uint32_t crc = (uint32_t)crc32_z(crc32(0, NULL, 0), a->data, len);
            rc = mt__stream_send(c->comm, 0, a->data, len, row_chunk(row_bytes_of(a)));
            if (!rc)
                rc = mt__stream_send(c->comm, 0, &crc, sizeof crc, sizeof crc);
        }
    }
    size_t chunk = buffer_bytes();
    for (int i = 0; i < ck->nfiles && !rc; i++) {
        FILE *in = fopen(ck->files[i].path, "rb");
        struct stat st;
        size_t left = in && fstat(fileno(in), &st) == 0 ? (size_t)st.st_size : 0;
        /* the size was announced: send exactly that many bytes whatever happens */
        while (left > 0 && !rc) {
            size_t n = left < chunk ? left : chunk, got = in && buf ? fread(buf, 1, n, in) : 0;
            if (got < n && buf)
                memset(buf + got, 0, n - got);
            rc = buf ? mt__stream_send(c->comm, 0, buf, n, chunk) : MT_ENOMEM;
            left -= n;
        }
        if (in)
            fclose(in);
    }
    return rc;
}

static char *describe_files(const mt_checkpoint *ck, size_t *len)
{
    size_t n = 0;
    for (int i = 0; i < ck->nfiles; i++)
        n += strlen(ck->files[i].name) + 1 + 8;
    char *b = malloc(n ? n : 1), *p = b;
    for (int i = 0; b && i < ck->nfiles; i++) {
        struct stat st;
        uint64_t size = stat(ck->files[i].path, &st) == 0 ? (uint64_t)st.st_size : 0;
        size_t l = strlen(ck->files[i].name) + 1;
        memcpy(p, ck->files[i].name, l), p += l;
        memcpy(p, &size, 8), p += 8;
    }
    *len = n;
    return b;
}

/* Rank 0, after the data is durable: publish the folder, record it, apply retention. */
static int publish(mt_context *c, mt__rundir *run, const char *tmp, const char *name,
                   const mt_metrics *metrics, int64_t iteration)
{
    char final[4096];
    snprintf(final, sizeof final, "%s/%s", run->dir, name);
    /* what recording it takes is allocated before the folder is published: a published
     * checkpoint left unrecorded would have its name taken again by the next commit */
    size_t n = (size_t)run->nkept + 1;
    mt__kept *grown = realloc(run->kept, n * sizeof *grown);
    if (grown)
        run->kept = grown;
    mt_metrics *m = mt_metrics_new();
    bool *drop = calloc(n, sizeof *drop);
    mt__kept *keep = calloc(n, sizeof *keep), *gone = calloc(n, sizeof *gone);
    const char **names = calloc(n, sizeof *names);
    int rc = grown && m && drop && keep && gone && names && !mt__metrics_copy(m, metrics)
                 ? mt__fsync_dir(tmp)
                 : mt__error(MT_ENOMEM, "out of memory recording %s", name);
    if (!rc && rename(tmp, final) != 0)
        rc = mt__error(MT_EIO, "cannot rename %s to %s: %s", tmp, final, strerror(errno));
    if (rc) {
        mt_metrics_free(&m);
        free(drop), free(keep), free(gone), free(names);
        return rc;
    }
    mt__kept *k = &run->kept[run->nkept];
    memset(k, 0, sizeof *k);
    snprintf(k->name, sizeof k->name, "%s", name);
    k->index = run->next_index++;
    k->iteration = iteration;
    k->metrics = m;
    run->latest = run->nkept++;
    int kept_all = mt__retention(run->kept, run->nkept, run->latest, &c->cfg->run.checkpoint, drop);
    /* the state that forgets them is durable before any folder goes */
    int nk = 0, ng = 0, latest = -1;
    for (int i = 0; i < run->nkept; i++) {
        if (drop[i])
            gone[ng++] = run->kept[i];
        else {
            if (i == run->latest)
                latest = nk;
            keep[nk++] = run->kept[i];
        }
    }
    free(drop);
    free(run->kept);
    run->kept = keep;
    run->nkept = nk;
    run->latest = latest;
    rc = mt__fsync_dir(run->dir);
    if (!rc)
        rc = mt__run_save(run);
    for (int i = 0; i < ng; i++)
        names[i] = gone[i].name;
    if (!rc)
        rc = mt__run_drop(run, names, ng);
    free(names);
    for (int i = 0; i < ng; i++)
        mt_metrics_free(&gone[i].metrics);
    free(gone);
    return rc ? rc : kept_all;
}

int mt__checkpoint_commit(mt_context *c, const mt_checkpoint *ck, mt__rundir *run,
                          const mt_metrics *metrics, int64_t iteration, char *name, size_t len,
                          bool *agreed)
{
    MT__TRACE("checkpoint", "commit");
    *agreed = true;
    uint64_t sig = 0;
    int nsh = 0, rc = describe_local(ck, &sig, &nsh);
    /* what this rank needs is allocated before the agreement, so that running out of
     * memory is agreed instead of leaving the others in the gathers below */
    int P = c->world_size;
    int64_t *mine = calloc((size_t)(nsh ? nsh : 1), sizeof *mine);
    int64_t *all = calloc((size_t)(nsh ? nsh : 1) * (size_t)P, sizeof *all);
    size_t flen = 0, *flens = NULL;
    char *fdesc = describe_files(ck, &flen), *allf = NULL;
    char *fbuf = c->world_rank != 0 && ck->nfiles ? malloc(buffer_bytes()) : NULL;
    int64_t *rows = c->world_rank == 0 ? calloc((size_t)P, sizeof *rows) : NULL;
    char *buf = c->world_rank == 0 ? staging(c) : NULL; /* kept in c across commits */
    if (!rc && (!mine || !all || !fdesc || (c->world_rank != 0 && ck->nfiles && !fbuf) ||
                (c->world_rank == 0 && (!rows || !buf))))
        rc = mt__error(MT_ENOMEM, "out of memory committing a checkpoint");
    mt__call call;
    mt__call_init(&call, MT__CALL_REPORT, 1, ck->narrays, nsh);
    call.sig = mt__sig_mix(call.sig, sig);
    rc = mt__agree(c->comm, &call, rc, NULL);
    /* each rank's row count for every sharded array */
    for (int i = 0, k = 0; !rc && i < ck->narrays; i++)
        if (ck->arrays[i].layout == MT_SHARDED)
            mine[k++] = (int64_t)ck->arrays[i].dims[0];
    if (!rc && nsh)
        rc = mt__allgather(c->comm, mine, all, (size_t)nsh, MT_I64);
    if (!rc)
        rc = mt__gather_bytes(c->comm, fdesc, flen, &allf, &flens);
    if (rc) { /* agreed, or an MPI failure: nothing sensible is left to do together */
        free(mine), free(all), free(fdesc), free(allf), free(flens), free(fbuf), free(rows);
        return rc;
    }
    *agreed = false; /* from here each rank has its own status; the report agrees on it */
    if (c->world_rank != 0) {
        rc = send_parts(c, ck, fbuf);
        /* then wait, off the CPU, while rank 0 finishes the file and publishes it */
        int e = mt__stream_await(c->comm);
        free(mine), free(all), free(fdesc), free(fbuf);
        return rc ? rc : e;
    }
    /* rank 0 */
    snprintf(name, len, "checkpoint_%06lld", (long long)run->next_index);
    char tmp[4096], h5[4200];
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp", run->dir, name);
    snprintf(h5, sizeof h5, "%s/checkpoint.h5", tmp);
    mt__rmtree(tmp);
    int status = mt__mkdirs(tmp);
    hid_t file = H5I_INVALID_HID;
    if (!status)
        status = mt__ckpt_create(h5, &file);
    int kick_fd = status ? -1 : open(h5, O_RDONLY);
    for (int i = 0, k = 0; i < ck->narrays; i++) {
        const mt__ck_array *a = &ck->arrays[i];
        if (a->layout == MT_SHARDED) {
            for (int r = 0; r < P; r++)
                rows[r] = all[(size_t)r * (size_t)nsh + (size_t)k];
            k++;
        }
        status = write_array(c, file, kick_fd, a, rows, buf,
                             i == 0 && pause_here(run->next_index), status);
    }
    for (int i = 0; i < ck->nmeta && !status; i++)
        status = mt__ckpt_set_meta_typed(file, ck->meta_keys[i], ck->meta_types[i],
                                         ck->meta_values[i]);
    if (!status)
        status = mt__ckpt_seal(file, h5);
    if (file >= 0) {
        int e = mt__ckpt_close(file, h5, true);
        if (!status)
            status = e;
    }
    if (kick_fd >= 0)
        close(kick_fd);
    status = write_files(c, ck, tmp, allf, flens, buf, status);
    if (!status)
        status = publish(c, run, tmp, name, metrics, iteration);
    else
        mt__rmtree(tmp);
    int e = mt__stream_done(c->comm); /* on every path: the others wait for it */
    free(rows), free(mine), free(all), free(fdesc), free(allf), free(flens);
    return status ? status : e;
}

/* ------------------------------------------------------------ stored checkpoints */

/* A stored checkpoint is a real folder of the run holding a regular checkpoint.h5: a
 * symbolic link (to anywhere outside the run) is not followed. */
static int stored_files_ok(const char *dir, const char *h5)
{
    struct stat st;
    if (lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return mt__error(MT_EFORMAT, "%s: not a checkpoint folder (missing, or a symbolic "
                                     "link, which is not followed)", dir);
    if (lstat(h5, &st) != 0 || !S_ISREG(st.st_mode))
        return mt__error(MT_EFORMAT, "%s: not a regular file (missing, or a symbolic link, "
                                     "which is not followed)", h5);
    return MT_OK;
}

/* Rank 0: read every array and compare its checksum. */
static int verify(const char *dir, mt__ckpt_index *ix)
{
    char h5[4200];
    snprintf(h5, sizeof h5, "%s/checkpoint.h5", dir);
    hid_t f;
    int rc = stored_files_ok(dir, h5);
    if (rc)
        return rc;
    rc = mt__ckpt_open(h5, &f);
    if (rc)
        return rc;
    rc = mt__ckpt_read_index(f, h5, ix);
    char *buf = rc ? NULL : malloc(buffer_bytes());
    if (!rc && !buf)
        rc = mt__error(MT_ENOMEM, "out of memory verifying %s", h5);
    for (int i = 0; !rc && i < ix->n; i++) {
        const mt__ckpt_array *a = &ix->arrays[i];
        size_t rb = mt_dtype_size(a->dtype);
        for (int d = 1; d < a->ndim; d++)
            rb *= a->dims[d];
        size_t per = row_chunk(rb) / (rb ? rb : 1);
        hid_t ds;
        rc = mt__ckpt_open_array(f, a->name, &ds);
        uLong crc = crc32(0, NULL, 0);
        for (uint64_t r = 0; !rc && r < a->dims[0]; r += per) {
            uint64_t n = a->dims[0] - r < per ? a->dims[0] - r : per;
            rc = mt__ckpt_rows(ds, a->dtype, r, n, buf, false);
            if (!rc)
                crc = crc32(crc, (const Bytef *)buf, (uInt)(n * rb));
        }
        if (!rc)
            mt__ckpt_close_array(ds);
        if (!rc && (uint32_t)crc != a->crc)
            rc = mt__error(MT_EFORMAT, "%s: array %s fails its checksum", h5, a->name);
    }
    free(buf);
    mt__ckpt_close(f, h5, false);
    if (rc)
        mt__ckpt_index_free(ix);
    return rc;
}

int mt__checkpoint_pick_valid(mt__rundir *run, int verbose, int64_t max_iteration, int *picked)
{
    /* newest first */
    for (;;) {
        int best = -1;
        for (int i = 0; i < run->nkept; i++)
            if (best < 0 || run->kept[i].index > run->kept[best].index)
                best = i;
        *picked = best;
        if (best < 0)
            return MT_OK;
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/%s", run->dir, run->kept[best].name);
        mt__ckpt_index ix;
        int rc = MT_EFORMAT;
        if (run->kept[best].iteration > max_iteration)
            mt__error(MT_EFORMAT, "its report (training_iteration %lld) is not in result.json, "
                      "which ends at %lld: the job ended between the commit and the report",
                      (long long)run->kept[best].iteration, (long long)max_iteration);
        else
            rc = verify(dir, &ix);
        if (rc == MT_OK) {
            mt__ckpt_index_free(&ix);
            run->latest = best;
            return MT_OK;
        }
        if (rc == MT_ENOMEM) /* not the checkpoint's fault: it must not be forgotten */
            return rc;
        fprintf(stderr, "mpitrain: warning: skipping %s: %s\n", dir, mt_last_error());
        /* forget it (the folder stays for inspection) */
        mt_metrics_free(&run->kept[best].metrics);
        run->kept[best] = run->kept[--run->nkept];
        run->latest = -1;
    }
}

char *mt__checkpoint_describe(const char *path, const mt__ckpt_index *ix)
{
    /* any allocation failing: NULL, never a description with parts missing */
    json_t *arrays = json_array(), *meta = json_object();
    int bad = !arrays || !meta;
    for (int i = 0; !bad && i < ix->n; i++) {
        const mt__ckpt_array *a = &ix->arrays[i];
        json_t *dims = json_array(), *off = json_array();
        bad = !dims || !off;
        for (int d = 0; !bad && d < a->ndim; d++)
            bad = json_array_append_new(dims, json_integer((json_int_t)a->dims[d]));
        for (int k = 0; !bad && k < a->noffsets; k++)
            bad = json_array_append_new(off, json_integer(a->offsets[k]));
        if (bad) {
            json_decref(dims), json_decref(off);
            break;
        }
        bad = json_array_append_new(arrays, json_pack("{s:s, s:i, s:o, s:i, s:I, s:o}", "name",
                                                      a->name, "dtype", (int)a->dtype, "dims",
                                                      dims, "layout", a->layout, "crc",
                                                      (json_int_t)a->crc, "offsets", off));
    }
    /* a string as a string; a number as [type, text] (a double may be NaN: not JSON) */
    for (int i = 0; !bad && i < ix->nmeta; i++) {
        int type = ix->meta_types ? ix->meta_types[i] : MT__META_STR;
        bad = json_object_set_new(meta, ix->meta_keys[i],
                                  type == MT__META_STR
                                      ? json_string(ix->meta_values[i])
                                      : json_pack("[i, s]", type, ix->meta_values[i]));
    }
    if (bad) {
        json_decref(arrays), json_decref(meta);
        return NULL;
    }
    json_t *j = json_pack("{s:s, s:o, s:o}", "path", path, "arrays", arrays, "meta", meta);
    char *text = mt__json_dumps(j, JSON_COMPACT);
    json_decref(j);
    return text;
}

int mt__checkpoint_from_description(const char *text, mt_checkpoint **out)
{
    mt__json_watch();
    json_t *j = json_loads(text, 0, NULL), *arrays, *meta;
    const char *path;
    if (!j || json_unpack(j, "{s:s, s:o, s:o}", "path", &path, "arrays", &arrays, "meta", &meta) ||
        mt__json_oom(NULL)) {
        json_decref(j);
        return mt__json_oom(NULL) ? mt__error(MT_ENOMEM, "out of memory reading a checkpoint "
                                                         "description")
                                  : mt__error(MT_EFORMAT, "corrupt checkpoint description");
    }
    mt_checkpoint *ck = mt_checkpoint_new();
    int rc = ck && (ck->path = mt__strdup(path)) ? MT_OK : MT_ENOMEM;
    size_t n = json_array_size(arrays);
    if (!rc && n && !(ck->index.arrays = calloc(n, sizeof *ck->index.arrays)))
        rc = MT_ENOMEM;
    for (size_t i = 0; !rc && i < n; i++) {
        json_t *e = json_array_get(arrays, i), *dims, *off;
        const char *name;
        int dtype, layout;
        json_int_t crc;
        if (json_unpack(e, "{s:s, s:i, s:o, s:i, s:I, s:o}", "name", &name, "dtype", &dtype,
                        "dims", &dims, "layout", &layout, "crc", &crc, "offsets", &off)) {
            rc = mt__json_oom(NULL) ? MT_ENOMEM
                                    : mt__error(MT_EFORMAT, "corrupt checkpoint description");
            break;
        }
        mt__ckpt_array *a = &ck->index.arrays[ck->index.n++];
        snprintf(a->name, sizeof a->name, "%s", name);
        a->dtype = (mt_dtype)dtype;
        a->layout = layout;
        a->crc = (uint32_t)crc;
        a->ndim = (int)json_array_size(dims);
        if (a->ndim < 1 || a->ndim > 8 || strlen(name) >= sizeof a->name) {
            rc = mt__error(MT_EFORMAT, "corrupt checkpoint description (array %.64s)", name);
            break;
        }
        for (int d = 0; d < a->ndim; d++)
            a->dims[d] = (uint64_t)json_integer_value(json_array_get(dims, (size_t)d));
        a->noffsets = (int)json_array_size(off);
        if (a->noffsets && !(a->offsets = malloc((size_t)a->noffsets * sizeof(int64_t)))) {
            a->noffsets = 0; /* never a count without its offsets */
            rc = MT_ENOMEM;
        }
        for (int k = 0; !rc && k < a->noffsets; k++)
            a->offsets[k] = json_integer_value(json_array_get(off, (size_t)k));
    }
    const char *key;
    json_t *v;
    json_object_foreach(meta, key, v)
    {
        if (rc)
            break;
        char **k = realloc(ck->index.meta_keys, (size_t)(ck->index.nmeta + 1) * sizeof *k);
        char **vals = k ? realloc(ck->index.meta_values, (size_t)(ck->index.nmeta + 1) * sizeof *vals) : NULL;
        int *types = vals ? realloc(ck->index.meta_types, (size_t)(ck->index.nmeta + 1) * sizeof *types) : NULL;
        if (k)
            ck->index.meta_keys = k;
        if (vals)
            ck->index.meta_values = vals;
        if (types)
            ck->index.meta_types = types;
        if (!k || !vals || !types) {
            rc = MT_ENOMEM;
            break;
        }
        int type = MT__META_STR;
        const char *value = json_string_value(v);
        if (json_is_array(v)) {
            type = (int)json_integer_value(json_array_get(v, 0));
            value = json_string_value(json_array_get(v, 1));
            if ((type != MT__META_I64 && type != MT__META_F64) || !value) {
                rc = mt__error(MT_EFORMAT, "corrupt checkpoint description (metadata %.64s)", key);
                break;
            }
        }
        ck->index.meta_types[ck->index.nmeta] = type;
        char *kk = strdup(key), *vv = strdup(value ? value : "");
        if (!kk || !vv) {
            free(kk), free(vv);
            rc = MT_ENOMEM;
            break;
        }
        ck->index.meta_keys[ck->index.nmeta] = kk;
        ck->index.meta_values[ck->index.nmeta++] = vv;
    }
    if (!rc && mt__json_oom(NULL)) /* an unpack above may have lost a field */
        rc = MT_ENOMEM;
    json_decref(j);
    if (rc == MT_ENOMEM)
        mt__error(MT_ENOMEM, "out of memory reading a checkpoint description");
    if (rc) {
        mt_checkpoint_free(&ck);
        return rc;
    }
    *out = ck;
    return MT_OK;
}

int mt__checkpoint_open_stored(const char *path, mt_checkpoint **out)
{
    char h5[4200];
    snprintf(h5, sizeof h5, "%s/checkpoint.h5", path);
    hid_t f;
    int rc = stored_files_ok(path, h5);
    if (!rc)
        rc = mt__ckpt_open(h5, &f);
    if (rc)
        return rc;
    mt_checkpoint *ck = mt_checkpoint_new();
    rc = ck && (ck->path = mt__strdup(path)) ? mt__ckpt_read_index(f, h5, &ck->index) : MT_ENOMEM;
    mt__ckpt_close(f, h5, false);
    if (rc)
        mt_checkpoint_free(&ck);
    *out = ck;
    return rc;
}

int mt__checkpoint_resolve(const char *field, const char *path, char *out, size_t len)
{
    if (!path || !*path)
        return mt__error(MT_EINVAL, "%s: the path is %s", field, path ? "empty" : "NULL");
    if (strlen(path) > MT__DIR_MAX)
        return mt__error(MT_EINVAL, "%s: the path is %zu bytes (at most %d)", field,
                         strlen(path), MT__DIR_MAX);
    char *real = realpath(path, NULL);
    if (!real)
        return mt__error(MT_EFORMAT, "%s: %s is not a checkpoint: %s", field, path,
                         strerror(errno));
    int rc = strlen(real) < len && strlen(real) <= MT__DIR_MAX
                 ? MT_OK
                 : mt__error(MT_EINVAL, "%s: %s: the resolved path is too long", field, path);
    if (!rc)
        snprintf(out, len, "%s", real);
    free(real);
    return rc;
}

/* The files a stored checkpoint holds besides checkpoint.h5: NAME (rank 0's) and
 * rankR/NAME, into ck->files (name, full path), in directory order. */
static int list_stored_files(mt_checkpoint *ck)
{
    DIR *d = opendir(ck->path);
    if (!d)
        return mt__error(MT_EFORMAT, "%s: cannot list the checkpoint folder: %s", ck->path,
                         strerror(errno));
    int rc = MT_OK;
    struct dirent *e;
    while (!rc && (e = readdir(d))) {
        if (e->d_name[0] == '.' || !strcmp(e->d_name, "checkpoint.h5"))
            continue;
        char sub[4300];
        snprintf(sub, sizeof sub, "%s/%s", ck->path, e->d_name);
        struct stat st;
        if (lstat(sub, &st) != 0)
            continue;
        if (S_ISREG(st.st_mode)) {
            rc = add_stored_file(ck, e->d_name, sub);
            continue;
        }
        if (!S_ISDIR(st.st_mode) || !rank_folder_name(e->d_name))
            continue;
        DIR *rd = opendir(sub);
        struct dirent *f;
        while (!rc && rd && (f = readdir(rd))) {
            char name[600], full[4300];
            snprintf(name, sizeof name, "%s/%s", e->d_name, f->d_name);
            snprintf(full, sizeof full, "%s/%s", sub, f->d_name);
            if (f->d_name[0] != '.' && lstat(full, &st) == 0 && S_ISREG(st.st_mode))
                rc = add_stored_file(ck, name, full);
        }
        if (rd)
            closedir(rd);
    }
    closedir(d);
    return rc;
}

int mt_checkpoint_open(const char *path, mt_checkpoint **out)
{
    if (out)
        *out = NULL;
    if (!path || !out)
        return mt__error(MT_EINVAL, "mt_checkpoint_open: %s is NULL", !path ? "path" : "out");
    char dir[4096];
    int rc = mt__checkpoint_resolve("mt_checkpoint_open", path, dir, sizeof dir);
    mt_checkpoint *ck = NULL;
    if (rc)
        return rc;
    rc = mt__checkpoint_open_stored(dir, &ck);
    if (rc && rc != MT_ENOMEM)
        rc = mt__error(MT_EFORMAT, "mt_checkpoint_open: %s is not a checkpoint: %s", path,
                       mt_last_error());
    if (!rc)
        rc = list_stored_files(ck);
    if (rc) {
        mt_checkpoint_free(&ck);
        return rc;
    }
    *out = ck;
    return MT_OK;
}

/* ------------------------------------------------------------ restore */

static const mt__ckpt_array *stored_array(const mt_checkpoint *ck, const char *name)
{
    for (int i = 0; ck && name && i < ck->index.n; i++)
        if (!strcmp(ck->index.arrays[i].name, name))
            return &ck->index.arrays[i];
    return NULL;
}

/* This rank's rows of a sharded array: the saved split at the same world size, else an
 * even split. */
static void my_rows(const mt_checkpoint *ck, const mt__ckpt_array *a, int rank, int size,
                    uint64_t *start, uint64_t *count)
{
    if (!ck->ctx || a->layout != MT_SHARDED) {
        *start = 0;
        *count = a->dims[0];
    } else if (a->noffsets == size + 1) {
        *start = (uint64_t)a->offsets[rank];
        *count = (uint64_t)(a->offsets[rank + 1] - a->offsets[rank]);
    } else {
        uint64_t n = a->dims[0];
        *start = n * (uint64_t)rank / (uint64_t)size;
        *count = n * (uint64_t)(rank + 1) / (uint64_t)size - *start;
    }
}

int mt_checkpoint_dims(const mt_checkpoint *ck, const char *name, int *ndim, size_t dims[8])
{
    if (!ck_ok(ck, "mt_checkpoint_dims"))
        return MT_EINVAL;
    const mt__ckpt_array *a = stored_array(ck, name);
    if (!a)
        return mt__error(MT_ENOTFOUND, "checkpoint %s has no array %s",
                         ck && ck->path ? ck->path : "(not stored)", name ? name : "(null)");
    uint64_t start, count;
    my_rows(ck, a, ck->ctx ? ck->ctx->world_rank : 0, ck->ctx ? ck->ctx->world_size : 1,
            &start, &count);
    if (ndim)
        *ndim = a->ndim;
    if (dims) {
        dims[0] = (size_t)count;
        for (int d = 1; d < a->ndim; d++)
            dims[d] = (size_t)a->dims[d];
    }
    return MT_OK;
}

typedef struct {
    char *out;
    mt_dtype to, from;
} converter;

static int convert_piece(const void *piece, size_t n, size_t offset, void *arg)
{
    converter *cv = arg;
    size_t es = mt_dtype_size(cv->from);
    mt__convert(cv->out + offset / es * mt_dtype_size(cv->to), cv->to, piece, cv->from, n / es);
    return MT_OK;
}

/* Rank 0 reads rows [start, start+count) piece by piece; each piece goes to `sink`. For
 * whom (a rank) names the reader in the test hook "restore-read" (a read error after the
 * first piece). */
static int read_rows(hid_t ds, const mt__ckpt_array *a, uint64_t start, uint64_t count,
                     char *buf, uLong *crc, int (*sink)(const void *, size_t, size_t, void *),
                     void *arg, int for_whom)
{
    size_t rb = mt_dtype_size(a->dtype);
    for (int d = 1; d < a->ndim; d++)
        rb *= a->dims[d];
    size_t per = row_chunk(rb) / (rb ? rb : 1);
    int rc = MT_OK;
    for (uint64_t r = 0; !rc && r < count; r += per) {
        uint64_t n = count - r < per ? count - r : per;
        if (r > 0 && mt__test_fail("restore-read", for_whom))
            return mt__error(MT_EIO, "%s: reading rows %llu.. of array %s failed (injected by "
                             "MT_TEST_FAIL_AT)", a->name, (unsigned long long)(start + r),
                             a->name);
        rc = mt__ckpt_rows(ds, a->dtype, start + r, n, buf, false);
        if (!rc) {
            *crc = crc32(*crc, (const Bytef *)buf, (uInt)(n * rb));
            rc = sink(buf, n * rb, r * rb, arg);
        }
    }
    return rc;
}

typedef struct {
    mt__comm *comm;
    int to;
    size_t chunk;
    size_t sent;   /* bytes of the promised total sent so far */
} sender;

static int send_piece(const void *piece, size_t n, size_t offset, void *arg)
{
    sender *s = arg;
    int rc = mt__stream_send(s->comm, s->to, piece, n, s->chunk);
    if (!rc)
        s->sent += n;
    return rc;
}

/* After a failure: the rest of the promised bytes, zeros in the same chunks, so the
 * receiver's stream ends where it expects and it reaches the closing agreement. */
static void send_rest(sender *s, char *buf, size_t total)
{
    memset(buf, 0, s->chunk);
    while (s->sent < total) {
        size_t n = total - s->sent < s->chunk ? total - s->sent : s->chunk;
        if (mt__stream_send(s->comm, s->to, buf, n, s->chunk) != MT_OK)
            return; /* MPI itself failed: the watchdog ends a peer left waiting */
        s->sent += n;
    }
}

typedef struct {
    mt__comm *comm;
    converter cv;
} bcaster;

static int bcast_piece(const void *piece, size_t n, size_t offset, void *arg)
{
    bcaster *b = arg;
    uint64_t len = n;
    int rc = mt__bcast_bytes(b->comm, &len, sizeof len, 0);
    if (!rc)
        rc = mt__bcast_bytes(b->comm, (void *)piece, n, 0);
    if (!rc)
        convert_piece(piece, n, offset, &b->cv);
    return rc;
}

/* Local read of a whole array (outside fit). */
static int get_local(const mt_checkpoint *ck, const mt__ckpt_array *a, mt_dtype t, void *out)
{
    char h5[4200];
    snprintf(h5, sizeof h5, "%s/checkpoint.h5", ck->path);
    hid_t f, ds;
    int rc = mt__ckpt_open(h5, &f);
    if (rc)
        return rc;
    char *buf = malloc(buffer_bytes());
    rc = buf ? mt__ckpt_open_array(f, a->name, &ds) : MT_ENOMEM;
    uLong crc = crc32(0, NULL, 0);
    converter cv = {out, t, a->dtype};
    if (!rc) {
        rc = read_rows(ds, a, 0, a->dims[0], buf, &crc, convert_piece, &cv, 0);
        mt__ckpt_close_array(ds);
    }
    if (!rc && (uint32_t)crc != a->crc)
        rc = mt__error(MT_EFORMAT, "%s: array %s fails its checksum", h5, a->name);
    free(buf);
    mt__ckpt_close(f, h5, false);
    return rc;
}

int mt_checkpoint_get(const mt_checkpoint *ck, const char *name, mt_dtype t, void *out,
                      size_t count)
{
    if (!ck_ok(ck, "mt_checkpoint_get")) /* a stale one: its context is gone too */
        return MT_EINVAL;
    int rc = MT_OK;
    const mt__ckpt_array *a = stored_array(ck, name);
    uint64_t start = 0, rows = 0;
    size_t re = 1;
    if (!ck || !ck->path)
        rc = mt__error(MT_EINVAL, "mt_checkpoint_get: not a stored checkpoint");
    else if (!a)
        rc = mt__error(MT_ENOTFOUND, "checkpoint %s has no array %s", ck->path,
                       name ? name : "(null)");
    else if (mt_dtype_size(t) == 0)
        rc = mt__error(MT_EINVAL, "mt_checkpoint_get %s: unknown dtype %d", name, (int)t);
    else {
        for (int d = 1; d < a->ndim; d++)
            re *= a->dims[d];
        my_rows(ck, a, ck->ctx ? ck->ctx->world_rank : 0, ck->ctx ? ck->ctx->world_size : 1,
                &start, &rows);
        if (count != rows * re)
            rc = mt__error(MT_EINVAL, "mt_checkpoint_get %s: out holds %zu elements, this rank's "
                           "part has %llu (see mt_checkpoint_dims)", name, count,
                           (unsigned long long)(rows * re));
        else if (count && !out)
            rc = mt__error(MT_EINVAL, "mt_checkpoint_get %s: out is NULL", name);
    }
    if (!ck || !ck->ctx)
        return rc ? rc : get_local(ck, a, t, out);
    mt_context *c = ck->ctx;
    /* every rank's buffer is agreed on before pieces move: a rank without one cannot
     * take part in the broadcasts or the stream */
    size_t es = a ? mt_dtype_size(a->dtype) : 1, chunk = row_chunk(re * es);
    char *buf = NULL;
    if (!rc && !(buf = mt__test_fail("restore-alloc", c->world_rank) ? NULL : malloc(chunk)))
        rc = mt__error(MT_ENOMEM, "rank %d: out of memory (%zu bytes) restoring %s from %s",
                       c->world_rank, chunk, name, ck->path);
    mt__call call;
    uint64_t h = 0;
    for (const char *p = name ? name : ""; *p; p++)
        h = mt__sig_mix(h, (uint64_t)(unsigned char)*p);
    mt__call_init(&call, MT__CALL_CKPT_GET, 0, (int64_t)t, 0);
    call.sig = mt__sig_mix(call.sig, h);
    rc = mt__agree(c->comm, &call, rc, NULL);
    if (rc) {
        free(buf);
        return rc;
    }
    converter cv = {out, t, a->dtype};
    int status = MT_OK;
    if (c->world_rank == 0) {
        char h5[4200];
        snprintf(h5, sizeof h5, "%s/checkpoint.h5", ck->path);
        hid_t f = H5I_INVALID_HID, ds = H5I_INVALID_HID;
        status = mt__ckpt_open(h5, &f);
        if (!status)
            status = mt__ckpt_open_array(f, a->name, &ds);
        uLong crc = crc32(0, NULL, 0);
        if (a->layout == MT_REPLICATED) {
            bcaster b = {c->comm, cv};
            uint64_t zero = 0;
            if (!status)
                status = read_rows(ds, a, 0, a->dims[0], buf, &crc, bcast_piece, &b, 0);
            mt__bcast_bytes(c->comm, &zero, sizeof zero, 0); /* end of the pieces */
        } else {
            for (int r = 0; r < c->world_size; r++) {
                uint64_t s0, n0;
                my_rows(ck, a, r, c->world_size, &s0, &n0);
                sender snd = {c->comm, r, chunk, 0};
                if (r == 0)
                    status = status ? status
                                    : read_rows(ds, a, s0, n0, buf, &crc, convert_piece, &cv, 0);
                else {
                    if (!status)
                        status = read_rows(ds, a, s0, n0, buf, &crc, send_piece, &snd, r);
                    /* keep the promise of n0 rows, also after a failure part-way, so
                     * rank r does not wait forever */
                    send_rest(&snd, buf, (size_t)(n0 * re * es));
                }
            }
        }
        if (!status && (uint32_t)crc != a->crc)
            status = mt__error(MT_EFORMAT, "%s: array %s fails its checksum", h5, a->name);
        if (ds >= 0)
            mt__ckpt_close_array(ds);
        if (f >= 0)
            mt__ckpt_close(f, h5, false);
    } else if (a->layout == MT_REPLICATED) {
        size_t offset = 0;
        for (;;) {
            uint64_t len = 0;
            int e = mt__bcast_bytes(c->comm, &len, sizeof len, 0);
            if (e || len == 0) {
                status = e;
                break;
            }
            e = mt__bcast_bytes(c->comm, buf, (size_t)len, 0);
            if (e) {
                status = e;
                break;
            }
            convert_piece(buf, (size_t)len, offset, &cv);
            offset += (size_t)len;
        }
    } else
        status = mt__stream_recv(c->comm, 0, rows * re * es, buf, chunk, convert_piece, &cv);
    free(buf);
    mt__call done;
    mt__call_init(&done, MT__CALL_CKPT_GET, 1, (int64_t)t, 0);
    return mt__agree(c->comm, &done, status, NULL);
}
