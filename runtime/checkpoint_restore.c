/*
 * checkpoint_restore.c -- a stored checkpoint read back: opening one by path (its index
 * and files), rank 0's pick of the newest valid one of a run (every checksum read and
 * compared, and where it says it belongs checked against run.json), and reading arrays
 * back with mt_checkpoint_get.
 *
 * mt_checkpoint_get has two modes, by the checkpoint it is given: the one a fit resumes
 * from (mt_get_checkpoint, the trainable's load) is bound to the fit's context and read
 * collectively (rank 0 reads; replicated arrays are broadcast, sharded ones streamed to
 * each rank as its part, re-split when the world size changed); any other stored
 * checkpoint is read locally, whole. The file itself is read through an io/ reader.
 */
#include "checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
    mt__ckpt_reader *f = NULL;
    int rc = stored_files_ok(dir, h5);
    if (rc)
        return rc;
    rc = mt__ckpt_reader_open(h5, &f);
    if (rc)
        return rc;
    rc = mt__ckpt_reader_index(f, ix);
    char *buf = rc ? NULL : malloc(mt__ck_buffer_bytes());
    if (!rc && !buf)
        rc = mt__error(MT_ENOMEM, "out of memory verifying %s", h5);
    for (int i = 0; !rc && i < ix->n; i++) {
        const mt__ckpt_array *a = &ix->arrays[i];
        size_t rb = mt_dtype_size(a->dtype);
        for (int d = 1; d < a->ndim; d++)
            rb *= a->dims[d];
        size_t per = mt__ck_row_chunk(rb) / (rb ? rb : 1);
        rc = mt__ckpt_reader_array(f, a->name, a->dtype);
        uint32_t crc = 0;
        for (uint64_t r = 0; !rc && r < a->dims[0]; r += per) {
            uint64_t n = a->dims[0] - r < per ? a->dims[0] - r : per;
            rc = mt__ckpt_reader_rows(f, r, n, buf);
            if (!rc)
                crc = mt__crc32(crc, buf, n * rb);
        }
        if (!rc && crc != a->crc)
            rc = mt__error(MT_EFORMAT, "%s: array %s fails its checksum", h5, a->name);
    }
    free(buf);
    mt__ckpt_reader_close(&f);
    if (rc)
        mt__ckpt_index_free(ix);
    return rc;
}

/* The metadata value of key in ix, or NULL. */
static const char *meta_of(const mt__ckpt_index *ix, const char *key)
{
    for (int i = 0; i < ix->nmeta; i++)
        if (!strcmp(ix->meta_keys[i], key))
            return ix->meta_values[i];
    return NULL;
}

/* Rank 0: MT_OK when the checkpoint in dir (its index ix) is the one run.json's entry k
 * names: this run's, this folder's, this iteration's, where it says (an older checkpoint
 * says nothing: its checksums are all there is); else MT_EFORMAT saying what it is. */
static int belongs(const mt__rundir *run, const mt__kept *k, const mt__ckpt_index *ix,
                   const char *dir)
{
    const char *id = meta_of(ix, MT__META_RUN), *name = meta_of(ix, MT__META_NAME);
    const char *it = meta_of(ix, MT__META_ITERATION);
    const char *trainable = meta_of(ix, "mt.training_iteration"); /* a trainable's own count */
    char want[32];
    snprintf(want, sizeof want, "%lld", (long long)k->iteration);
    if (id && run->run_id[0] && strcmp(id, run->run_id))
        return mt__error(MT_EFORMAT, "%s holds a checkpoint of another run (%s %.40s; this run "
                         "is %s): a file copied in from elsewhere", dir, MT__META_RUN, id,
                         run->run_id);
    if (name && strcmp(name, k->name))
        return mt__error(MT_EFORMAT, "%s holds this run's %.40s, not %s: a checkpoint file "
                         "copied over another", dir, name, k->name);
    if ((it && strcmp(it, want)) || (!it && trainable && strcmp(trainable, want)))
        return mt__error(MT_EFORMAT, "%s was committed at training_iteration %.32s, but run.json "
                         "records %s there: a checkpoint file copied over another", dir,
                         it ? it : trainable, want);
    return MT_OK;
}

int mt__checkpoint_pick_valid(mt__rundir *run, int64_t max_iteration, int *picked)
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
        else if ((rc = verify(dir, &ix)) == MT_OK && (rc = belongs(run, &run->kept[best], &ix,
                                                                    dir)) != MT_OK)
            mt__ckpt_index_free(&ix);
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

int mt__checkpoint_open_stored(const char *path, mt_checkpoint **out)
{
    char h5[4200];
    snprintf(h5, sizeof h5, "%s/checkpoint.h5", path);
    mt__ckpt_reader *f = NULL;
    int rc = stored_files_ok(path, h5);
    if (!rc)
        rc = mt__ckpt_reader_open(h5, &f);
    if (rc)
        return rc;
    mt_checkpoint *ck = mt__ck_new(MT__CK_STORED);
    rc = ck && (ck->stored.path = mt__strdup(path)) ? mt__ckpt_reader_index(f, &ck->stored.index)
                                                    : MT_ENOMEM;
    mt__ckpt_reader_close(&f);
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
static int list_stored_files(mt__ck_stored *ck)
{
    char what[4200];
    snprintf(what, sizeof what, "listing %s", ck->path);
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
            rc = mt__ck_files_add(&ck->files, &ck->nfiles, &ck->files_cap, e->d_name, sub, what);
            continue;
        }
        if (!S_ISDIR(st.st_mode) || !mt__ck_rank_folder_name(e->d_name))
            continue;
        DIR *rd = opendir(sub);
        struct dirent *f;
        while (!rc && rd && (f = readdir(rd))) {
            char name[600], full[4300];
            snprintf(name, sizeof name, "%s/%s", e->d_name, f->d_name);
            snprintf(full, sizeof full, "%s/%s", sub, f->d_name);
            if (f->d_name[0] != '.' && lstat(full, &st) == 0 && S_ISREG(st.st_mode))
                rc = mt__ck_files_add(&ck->files, &ck->nfiles, &ck->files_cap, name, full, what);
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
        rc = list_stored_files(&ck->stored);
    if (rc) {
        mt_checkpoint_free(&ck);
        return rc;
    }
    *out = ck;
    return MT_OK;
}

/* ck's array called name (NULL: none, or ck is being built). */
static const mt__ckpt_array *stored_array(const mt_checkpoint *ck, const char *name)
{
    const mt__ckpt_index *ix = ck->kind == MT__CK_STORED ? &ck->stored.index : NULL;
    for (int i = 0; ix && name && i < ix->n; i++)
        if (!strcmp(ix->arrays[i].name, name))
            return &ix->arrays[i];
    return NULL;
}

/* This rank's rows of a sharded array: the saved split at the same world size, else an
 * even split. */
static void my_rows(const mt__ck_stored *ck, const mt__ckpt_array *a, int rank, int size,
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
    if (!mt__ck_ok(ck, "mt_checkpoint_dims"))
        return MT_EINVAL;
    const mt__ckpt_array *a = stored_array(ck, name);
    if (!a)
        return mt__error(MT_ENOTFOUND, "checkpoint %s has no array %s", mt__ck_where(ck),
                         name ? name : "(null)");
    const mt__ck_stored *s = &ck->stored; /* an array was found: a stored checkpoint */
    uint64_t start, count;
    my_rows(s, a, s->ctx ? s->ctx->world_rank : 0, s->ctx ? s->ctx->world_size : 1, &start,
            &count);
    if (ndim)
        *ndim = a->ndim;
    if (dims) {
        dims[0] = (size_t)count;
        for (int d = 1; d < a->ndim; d++)
            dims[d] = (size_t)a->dims[d];
    }
    return MT_OK;
}

int mt_checkpoint_array_type(const mt_checkpoint *ck, const char *name, mt_dtype *dtype,
                             mt_layout *layout)
{
    if (!mt__ck_ok(ck, "mt_checkpoint_array_type"))
        return MT_EINVAL;
    if (!name)
        return mt__error(MT_EINVAL, "mt_checkpoint_array_type: name is NULL");
    if (ck->kind != MT__CK_STORED)
        return mt__error(MT_EINVAL, "mt_checkpoint_array_type: the checkpoint is one being "
                                    "built, not a stored one");
    const mt__ckpt_array *a = stored_array(ck, name);
    if (!a)
        return mt__error(MT_ENOTFOUND, "checkpoint %s has no array %s", mt__ck_where(ck), name);
    if (dtype)
        *dtype = a->dtype;
    if (layout)
        *layout = a->layout == MT_SHARDED ? MT_SHARDED : MT_REPLICATED;
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
static int read_rows(mt__ckpt_reader *f, const mt__ckpt_array *a, uint64_t start, uint64_t count,
                     char *buf, uint32_t *crc, int (*sink)(const void *, size_t, size_t, void *),
                     void *arg, int for_whom)
{
    size_t rb = mt_dtype_size(a->dtype);
    for (int d = 1; d < a->ndim; d++)
        rb *= a->dims[d];
    size_t per = mt__ck_row_chunk(rb) / (rb ? rb : 1);
    int rc = MT_OK;
    for (uint64_t r = 0; !rc && r < count; r += per) {
        uint64_t n = count - r < per ? count - r : per;
        if (r > 0 && mt__test_fail("restore-read", for_whom))
            return mt__error(MT_EIO, "%s: reading rows %llu.. of array %s failed (injected by "
                             "MT_TEST_FAIL_AT)", a->name, (unsigned long long)(start + r),
                             a->name);
        rc = mt__ckpt_reader_rows(f, start + r, n, buf);
        if (!rc) {
            *crc = mt__crc32(*crc, buf, n * rb);
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
static int get_local(const mt__ck_stored *ck, const mt__ckpt_array *a, mt_dtype t, void *out)
{
    char h5[4200];
    snprintf(h5, sizeof h5, "%s/checkpoint.h5", ck->path);
    mt__ckpt_reader *f = NULL;
    int rc = mt__ckpt_reader_open(h5, &f);
    if (rc)
        return rc;
    char *buf = malloc(mt__ck_buffer_bytes());
    rc = buf ? mt__ckpt_reader_array(f, a->name, a->dtype) : MT_ENOMEM;
    uint32_t crc = 0;
    converter cv = {out, t, a->dtype};
    if (!rc)
        rc = read_rows(f, a, 0, a->dims[0], buf, &crc, convert_piece, &cv, 0);
    if (!rc && crc != a->crc)
        rc = mt__error(MT_EFORMAT, "%s: array %s fails its checksum", h5, a->name);
    free(buf);
    mt__ckpt_reader_close(&f);
    return rc;
}

int mt_checkpoint_get(const mt_checkpoint *ck, const char *name, mt_dtype t, void *out,
                      size_t count)
{
    if (!mt__ck_ok(ck, "mt_checkpoint_get")) /* a stale one: its context is gone too */
        return MT_EINVAL;
    int rc = MT_OK;
    const mt__ckpt_array *a = stored_array(ck, name);
    const mt__ck_stored *s = ck->kind == MT__CK_STORED ? &ck->stored : NULL;
    uint64_t start = 0, rows = 0;
    size_t re = 1;
    if (!s)
        rc = mt__error(MT_EINVAL, "mt_checkpoint_get: not a stored checkpoint");
    else if (!a)
        rc = mt__error(MT_ENOTFOUND, "checkpoint %s has no array %s", s->path,
                       name ? name : "(null)");
    else if (mt_dtype_size(t) == 0)
        rc = mt__error(MT_EINVAL, "mt_checkpoint_get %s: unknown dtype %d", name, (int)t);
    else {
        for (int d = 1; d < a->ndim; d++)
            re *= a->dims[d];
        my_rows(s, a, s->ctx ? s->ctx->world_rank : 0, s->ctx ? s->ctx->world_size : 1,
                &start, &rows);
        if (count != rows * re)
            rc = mt__error(MT_EINVAL, "mt_checkpoint_get %s: out holds %zu elements, this rank's "
                           "part has %llu (see mt_checkpoint_dims)", name, count,
                           (unsigned long long)(rows * re));
        else if (count && !out)
            rc = mt__error(MT_EINVAL, "mt_checkpoint_get %s: out is NULL", name);
    }
    /* Local: any stored checkpoint but the one a fit resumes from */
    if (!s || !s->ctx)
        return rc ? rc : get_local(s, a, t, out);
    /* Collective over the fit's ranks */
    mt_context *c = s->ctx;
    /* every rank's buffer is agreed on before pieces move: a rank without one cannot
     * take part in the broadcasts or the stream */
    size_t es = a ? mt_dtype_size(a->dtype) : 1, chunk = mt__ck_row_chunk(re * es);
    char *buf = NULL;
    if (!rc && !(buf = mt__test_fail("restore-alloc", c->world_rank) ? NULL : malloc(chunk)))
        rc = mt__error(MT_ENOMEM, "rank %d: out of memory (%zu bytes) restoring %s from %s",
                       c->world_rank, chunk, name, s->path);
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
        snprintf(h5, sizeof h5, "%s/checkpoint.h5", s->path);
        mt__ckpt_reader *f = NULL;
        status = mt__ckpt_reader_open(h5, &f);
        if (!status)
            status = mt__ckpt_reader_array(f, a->name, a->dtype);
        uint32_t crc = 0;
        if (a->layout == MT_REPLICATED) {
            bcaster b = {c->comm, cv};
            uint64_t zero = 0;
            if (!status)
                status = read_rows(f, a, 0, a->dims[0], buf, &crc, bcast_piece, &b, 0);
            mt__bcast_bytes(c->comm, &zero, sizeof zero, 0); /* end of the pieces */
        } else {
            for (int r = 0; r < c->world_size; r++) {
                uint64_t s0, n0;
                my_rows(s, a, r, c->world_size, &s0, &n0);
                sender snd = {c->comm, r, chunk, 0};
                if (r == 0)
                    status = status ? status
                                    : read_rows(f, a, s0, n0, buf, &crc, convert_piece, &cv, 0);
                else {
                    if (!status)
                        status = read_rows(f, a, s0, n0, buf, &crc, send_piece, &snd, r);
                    /* keep the promise of n0 rows, also after a failure part-way, so
                     * rank r does not wait forever */
                    send_rest(&snd, buf, (size_t)(n0 * re * es));
                }
            }
        }
        if (!status && crc != a->crc)
            status = mt__error(MT_EFORMAT, "%s: array %s fails its checksum", h5, a->name);
        mt__ckpt_reader_close(&f);
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
        status = mt__stream_recv(c->comm, 0, rows * re * es, (void *[]){buf, buf}, chunk,
                                 convert_piece, &cv);
    free(buf);
    mt__call done;
    mt__call_init(&done, MT__CALL_CKPT_GET, 1, (int64_t)t, 0);
    return mt__agree(c->comm, &done, status, NULL);
}

void mt__checkpoint_restoring(mt_checkpoint *ck, mt_context *c)
{
    if (ck->kind == MT__CK_STORED)
        ck->stored.ctx = c;
}

int mt__checkpoint_path_only(const char *path, mt_checkpoint **out)
{
    *out = mt__ck_new(MT__CK_STORED);
    if (*out && !((*out)->stored.path = mt__strdup(path)))
        mt_checkpoint_free(out);
    return *out ? MT_OK : MT_ENOMEM;
}
