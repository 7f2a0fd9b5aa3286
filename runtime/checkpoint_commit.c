/*
 * checkpoint_commit.c -- the commit protocol: a checkpoint being built becomes
 * checkpoint_NNNNNN in the run directory, through rank 0, inside mt_report (every rank).
 *
 * The arrays are described and agreed (names, types, layouts and row shapes must match on
 * every rank); rank 0 writes .checkpoint_NNNNNN.tmp/checkpoint.h5 through an io/ writer,
 * taking the other ranks' sharded rows and files over MPI through one staging buffer of
 * MT_CHECKPOINT_BUFFER bytes (default 64 MiB), so it never holds more than that of anyone
 * else's data. Then: fsync the file and the folder, rename the folder to
 * checkpoint_NNNNNN, fsync the run directory, replace run.json, and only then delete what
 * retention drops. A crash at any point leaves the previous checkpoints and run.json
 * intact.
 *
 * The rows are a pipeline, because at 1 GiB taking turns cost half the throughput
 * (measured: 0.32-0.48x of a plain write+fsync): the buffer is two halves, and while the
 * writer's thread (io/) copies one half into the file and starts its writeback, rank 0
 * receives the next piece into the other; rank 0's own rows go to the writer straight
 * from the caller's memory while rank 0 sums them. A sender sums each piece just before
 * sending it, while rank 0 writes the piece before. Each sender ends with its status:
 * rank 0 publishes nothing that a rank could not send whole, and a failure anywhere
 * reaches every rank in the report's agreement.
 *
 * Every array carries a CRC-32 of its bytes in row order; restore verifies it. Each rank
 * sums its own rows and rank 0 combines the sums (crc32_combine). What decides which rows
 * a rank gets back (names, dtypes, shapes, layouts, row offsets, metadata) is checked too
 * (io/ckpt_index.c); a checkpoint failing any check is skipped with a warning naming the file
 * and what failed, and the previous one is used (checkpoint_restore.c).
 *
 * The part after the agreement is one function over an mt__ck_job (checkpoint.h), so that
 * an asynchronous commit (checkpoint_async.c) runs exactly this protocol in its thread, on
 * its own communicator, taking the pieces from its staging instead of the caller's memory.
 */
#include "checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

/* Rank 0's staging buffer for other ranks' data, mt__ck_buffer_bytes() long, made on the
 * first commit and kept until the context ends (pages are touched only as far as chunks
 * go). */
static char *staging(mt_context *c)
{
    if (!c->ck_buf)
        c->ck_buf = malloc(mt__ck_buffer_bytes());
    return c->ck_buf;
}

void mt__checkpoint_release(mt_context *c)
{
    mt__ck_async_free(c); /* waits for a commit in flight first */
    free(c->ck_buf);
    c->ck_buf = NULL;
}

static size_t row_bytes_of(const mt__ck_array *a)
{
    size_t n = mt_dtype_size(a->dtype);
    for (int i = 1; i < a->ndim; i++)
        n *= a->dims[i];
    return n;
}

/* Local checks and the signature every rank must share. */
static int describe_local(const mt__ck_building *ck, uint64_t *sig, int *nsharded)
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
    /* rows move (and come back at restore) through the buffer one whole row at least */
    size_t most = mt__ck_buffer_bytes();
    for (int i = 0; i < ck->narrays; i++)
        if (row_bytes_of(&ck->arrays[i]) > most)
            return mt__error(MT_EINVAL, "checkpoint array %s: one row is %zu bytes, more than "
                             "MT_CHECKPOINT_BUFFER (%zu bytes), the most of it rank 0 holds at "
                             "a time", ck->arrays[i].name, row_bytes_of(&ck->arrays[i]), most);
    /* again at commit: the file may have gone or changed since it was added */
    for (int i = 0; i < ck->nfiles; i++) {
        int rc = mt__ck_check_file(MT_EIO, "checkpoint file", ck->files[i].name, ck->files[i].path);
        if (rc)
            return rc;
    }
    return MT_OK;
}

/* One array on its way into the file: where the next piece goes. */
typedef struct {
    mt__ckpt_writer *file;
    size_t row_bytes;
    uint64_t row0;
    int pending;           /* pieces that may stay queued once the next has its buffer */
    int pieces;            /* handed over so far (the fault site "commit-write") */
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

/* A piece to the writer's thread; returns once the buffer the next piece goes into is
 * free (after a failure: once no piece is queued, so a drain may use either buffer). */
static int write_piece(const void *piece, size_t n, size_t offset, void *arg)
{
    writer *w = arg;
    uint64_t row = w->row0 + offset / w->row_bytes;
    int rc = w->pieces++ > 0 && mt__test_fail("commit-write", 0)
                 ? mt__error(MT_EIO, "checkpoint: writing rows %llu.. failed (injected by "
                             "MT_TEST_FAIL_AT)", (unsigned long long)row)
                 : mt__ckpt_writer_queue(w->file, row, n / w->row_bytes, piece);
    int e = mt__ckpt_writer_wait(w->file, rc ? 0 : w->pending);
    if (!rc && e)
        rc = mt__ckpt_writer_wait(w->file, 0);
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

/* A word a rank sends after its rows or files (its CRC-32, its status). */
static int recv_word(mt__comm *comm, int from, uint32_t *word)
{
    return mt__stream_recv(comm, from, sizeof *word, (void *[]){word, word}, sizeof *word,
                           drain, NULL);
}

/* The next n bytes of what this rank writes or sends: at `direct` (the caller's memory),
 * or, in an asynchronous commit, the next staged piece (NULL, recorded, when staging is
 * out of step: a bug). put gives a staged piece back once it is written or sent. */
static const char *take(mt__ck_job *j, const void *direct, size_t n)
{
    if (!j->stage)
        return direct;
    const char *p = mt__ck_stage_take(j->stage, n);
    if (!p)
        mt__error(MT_EIO, "checkpoint: the staged part ended before a piece of %zu bytes", n);
    return p;
}

static void put(mt__ck_job *j)
{
    if (j->stage)
        mt__ck_stage_release(j->stage);
}

/* Rank 0's own rows: to the writer from the caller's memory, summed meanwhile; from
 * staging, each piece written before it is given back. */
static int write_own(mt__ck_job *j, writer *w, const mt__ck_array *a, size_t bytes,
                     size_t chunk, uint32_t *crc)
{
    int rc = MT_OK;
    w->pending = j->stage ? 0 : 2; /* the caller's memory: only the queue's own bound */
    MT__CHUNKS(off, n, bytes, chunk) {
        const char *p = take(j, (const char *)a->data + off, n);
        if (!p || (rc = write_piece(p, n, off, w))) {
            rc = rc ? rc : MT_EIO;
            break;
        }
        {
            MT__TRACE("checkpoint", "crc");
            *crc = mt__crc32(*crc, p, n);
        }
        put(j);
    }
    return rc;
}

/* Rank 0: write one array (its own rows, then every other rank's for a sharded one). */
static int write_array(mt__ck_job *j, mt__ckpt_writer *file, const mt__ck_array *a,
                       const int64_t *rows, bool first, int status)
{
    int P = j->comm->size, rc = status;
    char *buf = j->buf;
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
    writer w = {.file = file, .row_bytes = row_bytes_of(a), .fail_hook = first ? "pause" : NULL};
    uint32_t crc = 0;
    size_t chunk = mt__ck_stream_chunk(w.row_bytes);
    if (!rc)
        rc = mt__ckpt_writer_begin(file, a->name, a->dtype, a->ndim, dims);
    size_t own = (size_t)(a->layout == MT_SHARDED ? (size_t)rows[0] : a->dims[0]) * w.row_bytes;
    if (!rc)
        rc = write_own(j, &w, a, own, chunk, &crc);
    /* two halves when two pieces fit in the buffer, else one piece at a time */
    bool halves = 2 * chunk <= mt__ck_buffer_bytes();
    char *half[2] = {buf, halves ? buf + chunk : buf};
    int next = 0; /* the half the next piece goes into */
    w.pending = halves ? 1 : 0;
    for (int r = 1; a->layout == MT_SHARDED && r < P; r++) {
        w.row0 = off ? (uint64_t)off[r] : 0;
        /* after a failure, keep receiving so rank r is not left waiting */
        size_t len = (size_t)rows[r] * w.row_bytes;
        int e = mt__stream_recv(j->comm, r, len, (void *[]){half[next], half[1 - next]}, chunk,
                                rc ? drain : write_piece, &w);
        next = (next + (int)((len + chunk - 1) / chunk % 2)) % 2;
        /* then the CRC-32 rank r computed of its rows, piece by piece as it sent them */
        uint32_t theirs = 0;
        int e2 = recv_word(j->comm, r, &theirs);
        crc = (uint32_t)crc32_combine(crc, theirs, (z_off_t)len);
        if (!rc)
            rc = e ? e : e2;
    }
    if (file) {
        int e = mt__ckpt_writer_end(file, a->layout, crc, off, off ? P + 1 : 0);
        if (!rc)
            rc = e;
    }
    free(off);
    return rc;
}

/* Rank 0's own file of `size` bytes (announced) into cp: from the file itself, or from
 * staging, where it was copied when the report returned. */
static int copy_own(mt__ck_job *j, const char *name, uint64_t size, copier *cp)
{
    int rc = MT_OK;
    size_t chunk = mt__ck_buffer_bytes();
    if (j->stage) {
        MT__CHUNKS(off, n, (size_t)size, chunk) {
            const char *p = take(j, NULL, n);
            if (!p)
                return MT_EIO;
            if (!rc)
                rc = copy_piece(p, n, off, cp);
            put(j);
        }
        return rc ? rc : mt__ck_stage_status(j->stage);
    }
    const mt__ck_file *f = NULL;
    for (int i = 0; i < j->ck->nfiles && !f; i++)
        if (!strcmp(j->ck->files[i].name, name))
            f = &j->ck->files[i];
    FILE *in = f ? fopen(f->path, "rb") : NULL;
    size_t n;
    while (in && (n = fread(j->buf, 1, chunk, in)) > 0 && !rc)
        rc = copy_piece(j->buf, n, 0, cp);
    if (!in && !rc)
        rc = mt__error(MT_EIO, "cannot read checkpoint file %s (%s): %s", name,
                       f ? f->path : "not added", strerror(errno));
    else if (in && ferror(in) && !rc)
        rc = mt__error(MT_EIO, "cannot read checkpoint file %s (%s)", name, f->path);
    if (in)
        fclose(in);
    return rc;
}

/* Rank 0: receive the other ranks' files (names and sizes in allf), then copy its own. */
static int write_files(mt__ck_job *j, const char *dir, int status)
{
    int rc = status;
    size_t chunk = mt__ck_buffer_bytes(), pos = 0;
    for (int r = 0; r < j->comm->size; r++) {
        size_t end = pos + j->flens[r];
        while (pos < end) {
            const char *name = j->allf + pos;
            pos += strlen(name) + 1;
            uint64_t size;
            memcpy(&size, j->allf + pos, 8);
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
            FILE *out = rc ? NULL : mt__run_fopen(path, "x", &rc); /* new, never a link */
            copier cp = {out, path};
            if (r > 0) {
                /* after a failed write, keep receiving so rank r is not left waiting */
                int e = mt__stream_recv(j->comm, r, size, (void *[]){j->buf, j->buf}, chunk,
                                        out && !rc ? copy_piece : drain, &cp);
                if (!rc)
                    rc = e;
                if (rc && out) {
                    fclose(out);
                    out = NULL;
                }
            } else if (out)
                rc = copy_own(j, name, size, &cp);
            if (out && (fflush(out) != 0 || ferror(out) || fsync(fileno(out)) != 0) && !rc)
                rc = mt__error(MT_EIO, "cannot write %s: %s", path, strerror(errno));
            if (out && fclose(out) != 0 && !rc)
                rc = mt__error(MT_EIO, "cannot write %s: %s", path, strerror(errno));
        }
    }
    return rc;
}

/* Other ranks: one sharded array's rows, each piece summed while it is sent (rank 0
 * takes it meanwhile; the sum does not wait for this rank's turn on a busy machine), then
 * the sum. The fault site "commit-send" fails the rank after its first piece; it still
 * sends all it announced. */
static int send_rows(mt__ck_job *j, const mt__ck_array *a, int *failed)
{
    int rc = MT_OK;
    size_t rb = row_bytes_of(a), len = a->dims[0] * rb, chunk = mt__ck_stream_chunk(rb);
    uint32_t crc = 0;
    MT__CHUNKS(off, n, len, chunk) {
        const char *piece = take(j, (const char *)a->data + off, n);
        if (!piece)
            return MT_EIO;
        MPI_Request r;
        rc = mt__stream_isend(j->comm, 0, piece, n, &r);
        if (!rc) {
            MT__TRACE("checkpoint", "crc");
            crc = mt__crc32(crc, piece, n);
        }
        if (off > 0 && !*failed && mt__test_fail("commit-send", j->comm->rank))
            *failed = mt__error(MT_EIO, "checkpoint array %s: sending rows from %llu failed "
                                "(injected by MT_TEST_FAIL_AT)", a->name,
                                (unsigned long long)(off / rb));
        if (!rc)
            rc = mt__stream_wait(j->comm, &r);
        put(j);
        if (rc)
            return rc;
    }
    return mt__stream_send(j->comm, 0, &crc, sizeof crc, sizeof crc);
}

/* Other ranks: their files, exactly the sizes announced in fdesc (zeros after a file that
 * could not be read whole, which is this rank's failure then), through buf, or from
 * staging. */
static int send_files(mt__ck_job *j, int *failed)
{
    int rc = MT_OK;
    const mt__ck_building *ck = j->ck;
    size_t chunk = mt__ck_buffer_bytes(), pos = 0;
    for (int i = 0; i < ck->nfiles && !rc; i++) {
        pos += strlen(j->fdesc + pos) + 1;
        uint64_t size;
        memcpy(&size, j->fdesc + pos, 8);
        pos += 8;
        FILE *in = j->stage ? NULL : fopen(ck->files[i].path, "rb");
        if (!j->stage && !in && !*failed)
            *failed = mt__error(MT_EIO, "cannot read checkpoint file %s (%s): %s",
                                ck->files[i].name, ck->files[i].path, strerror(errno));
        MT__CHUNKS(off, n, (size_t)size, chunk) {
            const char *p = j->buf;
            if (j->stage && !(p = take(j, NULL, n))) {
                rc = MT_EIO;
                break;
            }
            size_t got = j->stage ? n : in ? fread(j->buf, 1, n, in) : 0;
            if (got < n) {
                if (!*failed)
                    *failed = mt__error(MT_EIO, "checkpoint file %s (%s): %zu bytes were "
                                        "announced, fewer could be read", ck->files[i].name,
                                        ck->files[i].path, (size_t)size);
                memset(j->buf + got, 0, n - got);
            }
            rc = mt__stream_send(j->comm, 0, p, n, chunk);
            put(j);
            if (rc)
                break;
        }
        if (in)
            fclose(in);
    }
    if (!rc && j->stage && !*failed)
        *failed = mt__ck_stage_status(j->stage);
    return rc;
}

/* Other ranks: their sharded rows, their files, then their status (so that rank 0 does
 * not publish a part that is missing). An MPI failure stops the stream at once. */
static int send_parts(mt__ck_job *j)
{
    int rc = MT_OK, failed = MT_OK;
    for (int i = 0; i < j->ck->narrays && !rc; i++)
        if (j->ck->arrays[i].layout == MT_SHARDED)
            rc = send_rows(j, &j->ck->arrays[i], &failed);
    if (!rc)
        rc = send_files(j, &failed);
    uint32_t word = (uint32_t)(failed != MT_OK);
    if (!rc)
        rc = mt__stream_send(j->comm, 0, &word, sizeof word, sizeof word);
    return rc ? rc : failed;
}

/* Rank 0: every other rank's status; a rank that could not send its part whole fails the
 * commit (that rank's own error is what the report's agreement tells everyone). */
static int recv_statuses(mt__comm *comm, const char *name, int status)
{
    for (int r = 1; r < comm->size; r++) {
        uint32_t word = 0;
        int e = recv_word(comm, r, &word);
        if (!status && e)
            status = e;
        else if (!status && word)
            status = mt__error(MT_EPEER, "rank %d could not send its part of %s", r, name);
    }
    return status;
}

static char *describe_files(const mt__ck_building *ck, size_t *len)
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

/* run.json. From the commit thread, a copy of the run's state with the checkpoint's
 * iteration: the training thread goes on updating run->iteration meanwhile (and nothing
 * else of what run.json holds until it waits for this commit). */
static int save_state(const mt__ck_job *j)
{
    if (!j->snapshot)
        return mt__run_save(j->run);
    const mt__rundir *r = j->run;
    mt__rundir s = {.dir = r->dir, .attempts = r->attempts, .failures = r->failures,
                    .next_index = r->next_index, .iteration = j->iteration,
                    .time_total = r->time_total, .kept = r->kept, .kept_cap = r->kept_cap,
                    .nkept = r->nkept, .latest = r->latest};
    memcpy(s.run_id, r->run_id, sizeof s.run_id);
    memcpy(s.status, r->status, sizeof s.status);
    return mt__run_save(&s);
}

/* Rank 0, after the data is durable: publish the folder, record it, apply retention. */
static int publish(const mt__ck_job *j, const char *tmp)
{
    mt__rundir *run = j->run;
    const char *name = j->name;
    const mt_metrics *metrics = j->metrics;
    int64_t iteration = j->iteration;
    char final[4096];
    snprintf(final, sizeof final, "%s/%s", run->dir, name);
    /* what recording it takes is allocated before the folder is published: a published
     * checkpoint left unrecorded would have its name taken again by the next commit */
    size_t n = (size_t)run->nkept + 1;
    bool grown = MT__GROW(run->kept, run->kept_cap, n) == MT_OK;
    mt_metrics *m = mt_metrics_new();
    bool *drop = calloc(n, sizeof *drop);
    mt__kept *keep = calloc(n, sizeof *keep), *gone = calloc(n, sizeof *gone);
    const char **names = calloc(n, sizeof *names);
    int rc = grown && m && drop && keep && gone && names && !mt__metrics_copy(m, metrics)
                 ? mt__fsync_dir(tmp)
                 : mt__error(MT_ENOMEM, "out of memory recording %s", name);
    struct stat st;
    if (!rc && lstat(final, &st) == 0) /* a link or a folder in its place: never replaced */
        rc = mt__error(MT_EIO, "cannot publish %s: %s is there already (%s); remove it",
                       name, final, S_ISLNK(st.st_mode) ? "a symbolic link" : "not recorded");
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
    int kept_all = mt__retention(run->kept, run->nkept, run->latest, j->retention, drop);
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
    run->kept_cap = n;
    run->nkept = nk;
    run->latest = latest;
    rc = mt__fsync_dir(run->dir);
    if (!rc)
        rc = save_state(j);
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

/* Rank 0 after the agreement: .checkpoint_N.tmp/checkpoint.h5 written from every rank's
 * part, sealed and fsynced, the files copied, then published. */
static int write_all(mt__ck_job *j)
{
    const mt__ck_building *ck = j->ck;
    int P = j->comm->size;
    char tmp[4096], h5[4200];
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp", j->run->dir, j->name);
    snprintf(h5, sizeof h5, "%s/checkpoint.h5", tmp);
    mt__rmtree(tmp); /* a crash's leftover, or a link: the name goes, never its target */
    int status = mt__mkdirs(tmp);
    struct stat st;
    if (!status && (lstat(tmp, &st) != 0 || !S_ISDIR(st.st_mode)))
        status = mt__error(MT_EIO, "%s: not a folder this commit created (a link appeared "
                           "in its place); nothing is written through it", tmp);
    mt__ckpt_writer *file = NULL;
    if (!status)
        status = mt__ckpt_writer_create(h5, &file);
    for (int i = 0, k = 0; i < ck->narrays; i++) {
        const mt__ck_array *a = &ck->arrays[i];
        if (a->layout == MT_SHARDED) {
            for (int r = 0; r < P; r++)
                j->rows[r] = j->all[(size_t)r * (size_t)j->nsh + (size_t)k];
            k++;
        }
        status = write_array(j, file, a, j->rows, i == 0 && j->pause, status);
    }
    /* where it belongs, for restore to check: the run, this folder, this iteration (the
     * library's values under these keys, whatever the checkpoint's own held) */
    char it_text[32];
    snprintf(it_text, sizeof it_text, "%lld", (long long)j->iteration);
    const char *stamp[3][2] = {{MT__META_RUN, j->run->run_id}, {MT__META_NAME, j->name},
                               {MT__META_ITERATION, it_text}};
    for (int i = 0; i < ck->nmeta && !status; i++)
        if (strcmp(ck->meta_keys[i], MT__META_RUN) && strcmp(ck->meta_keys[i], MT__META_NAME) &&
            strcmp(ck->meta_keys[i], MT__META_ITERATION))
            status = mt__ckpt_writer_meta(file, ck->meta_keys[i], ck->meta_types[i],
                                          ck->meta_values[i]);
    /* test-only: a checkpoint as one written before these keys existed */
    bool unstamped = mt__test_fail("commit-unstamped", 0);
    for (int i = 0; i < 3 && !status && !unstamped; i++)
        status = mt__ckpt_writer_meta(file, stamp[i][0], i == 2 ? MT__META_I64 : MT__META_STR,
                                      stamp[i][1]);
    {   /* seals the file when all went well; closes and fsyncs it in any case */
        MT__TRACE("checkpoint", "close");
        status = mt__ckpt_writer_close(&file, status);
    }
    status = write_files(j, tmp, status);
    status = recv_statuses(j->comm, j->name, status);
    if (!status) {
        MT__TRACE("checkpoint", "publish");
        status = publish(j, tmp);
    } else
        mt__rmtree(tmp);
    int e = mt__stream_done(j->comm); /* on every path: the others wait for it */
    return status ? status : e;
}

int mt__ck_commit_body(mt__ck_job *j)
{
    if (j->comm->rank == 0)
        return write_all(j);
    int rc = send_parts(j);
    /* then wait, off the CPU, while rank 0 finishes the file and publishes it */
    int e = mt__stream_await(j->comm);
    return rc ? rc : e;
}

void mt__ck_job_free(mt__ck_job *j)
{
    free(j->all), free(j->fdesc), free(j->allf), free(j->flens), free(j->rows);
    j->all = j->rows = NULL;
    j->fdesc = j->allf = NULL;
    j->flens = NULL;
}

int mt__checkpoint_commit(mt_context *c, const mt_checkpoint *handle, mt__rundir *run,
                          const mt_metrics *metrics, int64_t iteration, char *name, size_t len,
                          bool *agreed)
{
    MT__TRACE("checkpoint", "commit");
    /* a stored checkpoint given back to mt_report is committed as what it lists to copy
     * (its files, when mt_checkpoint_open listed them), nothing else */
    mt__ck_building again = {0};
    if (handle->kind == MT__CK_STORED) {
        again.files = handle->stored.files;
        again.nfiles = handle->stored.nfiles;
    }
    const mt__ck_building *ck = handle->kind == MT__CK_BUILDING ? &handle->build : &again;
    *agreed = true;
    uint64_t sig = 0;
    int nsh = 0, rc = describe_local(ck, &sig, &nsh);
    bool async = mt__ck_async_wanted(c);
    /* what this rank needs is allocated before the agreement, so that running out of
     * memory is agreed instead of leaving the others in the gathers below */
    int P = c->world_size;
    int64_t *mine = calloc((size_t)(nsh ? nsh : 1), sizeof *mine);
    size_t flen = 0;
    mt__ck_job j = {.ck = ck, .nsh = nsh, .run = run, .retention = &c->cfg->run.checkpoint,
                    .metrics = metrics, .iteration = iteration};
    j.all = calloc((size_t)(nsh ? nsh : 1) * (size_t)P, sizeof *j.all);
    j.fdesc = describe_files(ck, &flen);
    char *fbuf = !async && c->world_rank != 0 && ck->nfiles ? malloc(mt__ck_buffer_bytes()) : NULL;
    j.rows = c->world_rank == 0 ? calloc((size_t)P, sizeof *j.rows) : NULL;
    size_t *nolens = c->world_rank == 0 ? calloc((size_t)P, sizeof *nolens) : NULL;
    j.buf = c->world_rank == 0 ? staging(c) : fbuf; /* rank 0's: kept in c across commits */
    if (!rc && (!mine || !j.all || !j.fdesc || (!async && c->world_rank != 0 && ck->nfiles && !fbuf) ||
                (c->world_rank == 0 && (!j.rows || !j.buf || !nolens))))
        rc = mt__error(MT_ENOMEM, "out of memory committing a checkpoint");
    if (!rc && async)
        rc = mt__ck_async_prepare(c, ck, j.fdesc, metrics);
    mt__call call;
    mt__call_init(&call, MT__CALL_REPORT, 1, ck->narrays, nsh);
    call.sig = mt__sig_mix(call.sig, sig);
    /* every rank commits the same way (the highest and the lowest async agree), and
     * whether any rank has files (else their lists are not gathered: two agreements and
     * two gathers fewer, which under load cost more than a small checkpoint's bytes) */
    int64_t way[2] = {2 * (int64_t)async + (ck->nfiles > 0), -(int64_t)async};
    rc = mt__agree_max(c->comm, &call, rc, NULL, way, 2);
    bool files = way[0] & 1;
    if (!rc && way[0] >> 1 != -way[1])
        rc = mt__error(MT_EINVAL, "run.checkpoint.async_commit is on for some ranks and off "
                       "for others (MT_CHECKPOINT_ASYNC set on some only, or MPI without "
                       "MPI_THREAD_MULTIPLE on some): every rank must commit the same way");
    /* each rank's row count for every sharded array */
    for (int i = 0, k = 0; !rc && i < ck->narrays; i++)
        if (ck->arrays[i].layout == MT_SHARDED)
            mine[k++] = (int64_t)ck->arrays[i].dims[0];
    if (!rc && nsh)
        rc = mt__allgather(c->comm, mine, j.all, (size_t)nsh, MT_I64);
    if (!rc && files)
        rc = mt__gather_bytes(c->comm, j.fdesc, flen, &j.allf, &j.flens);
    if (!files) { /* no rank has any: every list is empty */
        j.flens = nolens;
        nolens = NULL;
    }
    free(nolens);
    if (!rc && async)
        rc = mt__ck_async_comm(c);
    free(mine);
    if (rc) { /* agreed, or an MPI failure: nothing sensible is left to do together */
        if (async)
            mt__ck_async_drop(c);
        mt__ck_job_free(&j);
        free(fbuf);
        return rc;
    }
    *agreed = false; /* from here each rank has its own status; the report agrees on it */
    if (c->world_rank == 0) {
        snprintf(j.name, sizeof j.name, "checkpoint_%06lld", (long long)run->next_index);
        snprintf(name, len, "%s", j.name);
        j.pause = pause_here(run->next_index);
    }
    if (async)
        return mt__ck_async_start(c, &j, ck); /* takes j's allocations */
    j.comm = c->comm;
    rc = mt__ck_commit_body(&j);
    mt__ck_job_free(&j);
    free(fbuf);
    return rc;
}
