/*
 * ckpt_writer.c -- the writer and reader objects of checkpoint.h5 (io.h), built on ckpt.c's
 * file calls: what the runtime holds, with the writer's own thread.
 */
#include "h5.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* What the runtime holds while it writes or reads checkpoint.h5: the file and the one
 * array in progress, behind a type that carries no HDF5 handle across the layer.
 *
 * A writer has a thread of its own for rows handed over with mt__ckpt_writer_queue: it
 * writes them in order (HDF5 under the process-wide lock, then starts their writeback)
 * while the caller receives the next piece into another buffer, so the receive, the copy
 * into the page cache and the disk overlap instead of taking turns. Everything but the
 * queue (the file, the array) is touched by the caller only when nothing is queued. The
 * first failure stops the writing of later pieces (they are skipped, not read); its
 * message goes back to the caller's thread. Without a thread (it could not be started),
 * queued rows are written at once, with the same results. */
#define QUEUE_CAP 2

typedef struct {
    uint64_t row, nrows;
    const void *data;
} queued;

struct mt__ckpt_writer {
    char *path;
    hid_t f, ds;  /* the file; the array begun and not yet ended (or invalid) */
    mt_dtype t;
    int kick_fd;  /* the file, to start its writeback early (-1: none) */
    pthread_t thread;
    bool threaded, quit;
    pthread_mutex_t mu;
    pthread_cond_t cv;       /* a piece queued, written, or quit */
    queued q[QUEUE_CAP];
    int head, n;             /* n: queued and not yet written (the one being written too) */
    int status;              /* the first failure, its message in why */
    char why[MT__MSG_LEN];
};

struct mt__ckpt_reader {
    char *path;
    hid_t f, ds;  /* the file; the array selected (or invalid) */
    mt_dtype t;
};

int mt__ckpt_writer_create(const char *path, mt__ckpt_writer **out)
{
    *out = NULL;
    mt__ckpt_writer *w = calloc(1, sizeof *w);
    if (!w || !(w->path = mt__strdup(path))) {
        free(w);
        return mt__error(MT_ENOMEM, "%s: out of memory creating the checkpoint file", path);
    }
    w->ds = H5I_INVALID_HID;
    int rc = mt__ckpt_create(path, &w->f);
    if (rc) {
        free(w->path);
        free(w);
        return rc;
    }
    w->kick_fd = open(path, O_RDONLY | O_CLOEXEC);
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    *out = w;
    return MT_OK;
}

int mt__ckpt_writer_begin(mt__ckpt_writer *w, const char *name, mt_dtype t, int ndim,
                          const uint64_t *dims)
{
    w->t = t;
    return mt__ckpt_add_array(w->f, name, t, ndim, dims, &w->ds);
}

/* One piece into the file; the disk starts on its pages at once, instead of all at the
 * final fsync. */
static int write_queued(mt__ckpt_writer *w, const queued *p)
{
    int rc;
    {
        MT__TRACE("checkpoint", "h5write");
        rc = mt__ckpt_rows(w->ds, w->t, p->row, p->nrows, (void *)p->data, true);
    }
    MT__TRACE("checkpoint", "writeback");
    if (!rc && w->kick_fd >= 0)
        sync_file_range(w->kick_fd, 0, 0, SYNC_FILE_RANGE_WRITE);
    return rc;
}

/* With w->mu held: the piece at the head is done (rc its outcome). */
static void piece_done(mt__ckpt_writer *w, int rc)
{
    if (rc && !w->status) {
        w->status = rc;
        snprintf(w->why, sizeof w->why, "%s", mt_last_error());
    }
    w->head = (w->head + 1) % QUEUE_CAP;
    w->n--;
    pthread_cond_broadcast(&w->cv);
}

static void *writer_thread(void *arg)
{
    mt__ckpt_writer *w = arg;
    mt__trace_thread("checkpoint writer");
    mt__h5_lock(); /* HDF5's error stack may be this thread's own: quiet it too */
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    mt__h5_unlock();
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (w->n == 0 && !w->quit)
            pthread_cond_wait(&w->cv, &w->mu);
        if (w->n == 0)
            break;
        queued p = w->q[w->head];
        bool skip = w->status != MT_OK;
        pthread_mutex_unlock(&w->mu);
        int rc = skip ? MT_OK : write_queued(w, &p);
        pthread_mutex_lock(&w->mu);
        piece_done(w, rc);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

int mt__ckpt_writer_queue(mt__ckpt_writer *w, uint64_t row, uint64_t nrows, const void *data)
{
    queued p = {row, nrows, data};
    pthread_mutex_lock(&w->mu);
    if (!w->threaded && !w->quit) /* quit: it could not be started; write at once */
        w->threaded = pthread_create(&w->thread, NULL, writer_thread, w) == 0;
    w->quit = !w->threaded;
    if (!w->threaded) {
        w->n++; /* as if queued: piece_done takes it back */
        int rc = w->status ? MT_OK : write_queued(w, &p);
        piece_done(w, rc);
        pthread_mutex_unlock(&w->mu);
        return MT_OK;
    }
    while (w->n == QUEUE_CAP)
        pthread_cond_wait(&w->cv, &w->mu);
    w->q[(w->head + w->n) % QUEUE_CAP] = p;
    w->n++;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return MT_OK;
}

int mt__ckpt_writer_wait(mt__ckpt_writer *w, int pending)
{
    pthread_mutex_lock(&w->mu);
    while (w->n > pending)
        pthread_cond_wait(&w->cv, &w->mu);
    int rc = w->status;
    if (rc)
        mt__error_set_text(w->why);
    pthread_mutex_unlock(&w->mu);
    return rc;
}

int mt__ckpt_writer_rows(mt__ckpt_writer *w, uint64_t row, uint64_t nrows, const void *data)
{
    int rc = mt__ckpt_writer_queue(w, row, nrows, data);
    return rc ? rc : mt__ckpt_writer_wait(w, 0);
}

/* The thread ends once the queue is empty. */
static void writer_stop(mt__ckpt_writer *w)
{
    pthread_mutex_lock(&w->mu);
    bool join = w->threaded;
    w->quit = true;
    w->threaded = false;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    if (join)
        pthread_join(w->thread, NULL);
}

int mt__ckpt_writer_end(mt__ckpt_writer *w, int layout, uint32_t crc, const int64_t *offsets,
                        int noffsets)
{
    int rc = mt__ckpt_writer_wait(w, 0);
    if (w->ds < 0) /* never begun (an earlier failure) */
        return rc;
    hid_t ds = w->ds;
    w->ds = H5I_INVALID_HID;
    int e = mt__ckpt_finish_array(ds, layout, crc, offsets, noffsets);
    return rc ? rc : e;
}

int mt__ckpt_writer_meta(mt__ckpt_writer *w, const char *key, int type, const char *value)
{
    return mt__ckpt_set_meta_typed(w->f, key, type, value);
}

int mt__ckpt_writer_close(mt__ckpt_writer **wp, int status)
{
    mt__ckpt_writer *w = *wp;
    if (!w)
        return status;
    *wp = NULL;
    writer_stop(w);
    if (!status)
        status = mt__ckpt_writer_wait(w, 0);
    if (w->ds >= 0)
        mt__ckpt_close_array(w->ds);
    if (!status)
        status = mt__ckpt_seal(w->f, w->path);
    int e = mt__ckpt_close(w->f, w->path, true);
    if (!status)
        status = e;
    if (w->kick_fd >= 0)
        close(w->kick_fd);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w->path);
    free(w);
    return status;
}

int mt__ckpt_reader_open(const char *path, mt__ckpt_reader **out)
{
    *out = NULL;
    mt__ckpt_reader *r = calloc(1, sizeof *r);
    if (!r || !(r->path = mt__strdup(path))) {
        free(r);
        return mt__error(MT_ENOMEM, "%s: out of memory opening the checkpoint file", path);
    }
    r->ds = H5I_INVALID_HID;
    int rc = mt__ckpt_open(path, &r->f);
    if (rc) {
        free(r->path);
        free(r);
        return rc;
    }
    *out = r;
    return MT_OK;
}

int mt__ckpt_reader_index(mt__ckpt_reader *r, mt__ckpt_index *ix)
{
    return mt__ckpt_read_index(r->f, r->path, ix);
}

int mt__ckpt_reader_array(mt__ckpt_reader *r, const char *name, mt_dtype t)
{
    if (r->ds >= 0)
        mt__ckpt_close_array(r->ds);
    r->ds = H5I_INVALID_HID;
    r->t = t;
    return mt__ckpt_open_array(r->f, name, &r->ds);
}

int mt__ckpt_reader_rows(mt__ckpt_reader *r, uint64_t row, uint64_t nrows, void *data)
{
    return mt__ckpt_rows(r->ds, r->t, row, nrows, data, false);
}

void mt__ckpt_reader_close(mt__ckpt_reader **rp)
{
    mt__ckpt_reader *r = *rp;
    if (!r)
        return;
    *rp = NULL;
    if (r->ds >= 0)
        mt__ckpt_close_array(r->ds);
    mt__ckpt_close(r->f, r->path, false);
    free(r->path);
    free(r);
}
