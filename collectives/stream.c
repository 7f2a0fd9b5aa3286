/*
 * stream.c -- moving variable amounts of bytes: gathering every rank's bytes to rank 0
 * (a checkpoint's file lists through mt__gather_bytes), broadcasting a buffer of any size, and bounded point-to-point
 * streams that carry a large array to or from rank 0 in chunks, so rank 0 never holds
 * more than its buffers of another rank's data (one, or two that it alternates between so
 * that it can write one piece while the next arrives).
 *
 * These run inside a collective whose agreement already made every rank agree on what is
 * sent; each returns MT_EMPI on an MPI failure. Each is a wait the stall watchdog sees
 * (mt__watch_data), so a peer that stops here is reported and ended like one that never
 * reaches an agreement. A receiver that cannot use the data (a write failed) keeps
 * receiving, so senders never block forever.
 */
#include "collectives.h"
#include "position.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { TAG_STREAM = 7001, TAG_DONE = 7002 };

/* Bytes move only once every rank holds the buffers it needs: a rank without its receive
 * or send buffer cannot take part in the gather, so an allocation failure anywhere is
 * agreed first, and every rank returns the same error (its own, or MT_EPEER). */
static int buffers_agreed(mt__comm *c, int status)
{
    mt__call call;
    mt__call_init(&call, MT__CALL_INTERNAL, 0, 0, 0);
    return mt__agree(c, &call, status, NULL);
}

int mt__gather_bytes(mt__comm *c, const void *send, size_t len, char **all, size_t **lens)
{
    int rc = MT_OK;
    uint64_t mine = len, *sizes = NULL;
    int *counts = NULL, *displs = NULL;
    char *buf = NULL;
    if (c->rank == 0) {
        sizes = calloc((size_t)c->size, sizeof *sizes);
        counts = calloc((size_t)c->size, sizeof *counts);
        displs = calloc((size_t)c->size, sizeof *displs);
        *lens = calloc((size_t)c->size, sizeof **lens);
        if (!sizes || !counts || !displs || !*lens)
            rc = mt__error(MT_ENOMEM, "out of memory gathering from %d ranks", c->size);
    }
    if ((rc = buffers_agreed(c, rc)))
        goto out;
    mt__watch_data();
    MT__MPI(MPI_Gather(&mine, 1, MPI_UINT64_T, sizes, 1, MPI_UINT64_T, 0, c->comm), out);
    if (c->rank == 0) {
        uint64_t total = 0;
        for (int r = 0; r < c->size; r++) {
            displs[r] = (int)total;
            counts[r] = (int)sizes[r];
            (*lens)[r] = sizes[r];
            total += sizes[r];
        }
        if (total > INT_MAX) /* file lists are small; a bug if not */
            rc = mt__error(MT_EINVAL, "%llu bytes gathered from %d ranks exceed 2 GiB",
                           (unsigned long long)total, c->size);
        buf = malloc(total ? total : 1);
        if (!buf && !rc)
            rc = mt__error(MT_ENOMEM, "out of memory gathering %llu bytes",
                           (unsigned long long)total);
    }
    if ((rc = buffers_agreed(c, rc)))
        goto out;
    MT__MPI(MPI_Gatherv(send, (int)len, MPI_BYTE, buf, counts, displs, MPI_BYTE, 0, c->comm),
            out);
out:
    mt__watch_leave();
    free(sizes);
    free(counts);
    free(displs);
    if (c->rank == 0 && rc) {
        free(buf), free(*lens);
        buf = NULL, *lens = NULL;
    }
    if (c->rank == 0)
        *all = buf;
    return rc;
}

int mt__bcast_bytes(mt__comm *c, void *buf, size_t len, int root)
{
    int rc = MT_OK;
    mt__watch_data();
    MT__CHUNKS(off, n, len, (size_t)1 << 30)
        MT__MPI(MPI_Bcast((char *)buf + off, (int)n, MPI_BYTE, root, c->comm), out);
out:
    mt__watch_leave();
    return rc;
}

/* A sender waits while the receiver (rank 0) writes what came before, often for many
 * milliseconds: spin on MPI_Test for the first 200 us (short waits stay fast), then
 * sleep 50 us between tests, so a waiting rank leaves its CPU to ranks sharing it. */
static int wait_politely(MPI_Request *r)
{
    double t0 = mt__now();
    int done = 0;
    for (;;) {
        int e = MPI_Test(r, &done, MPI_STATUS_IGNORE);
        if (e != MPI_SUCCESS)
            return mt__mpi_error(e, "MPI_Test (stream send)");
        if (done)
            return MT_OK;
        if (mt__now() - t0 > 200e-6) {
            struct timespec ts = {0, 50000};
            nanosleep(&ts, NULL);
        }
    }
}

int mt__stream_send(mt__comm *c, int to, const void *data, size_t len, size_t chunk)
{
    int rc = MT_OK;
    mt__watch_data();
    MT__CHUNKS(off, n, len, chunk) {
        MPI_Request r;
        MT__MPI(MPI_Isend((const char *)data + off, (int)n, MPI_BYTE, to, TAG_STREAM, c->comm,
                          &r),
                out);
        if ((rc = wait_politely(&r)))
            break;
    }
out:
    mt__watch_leave();
    return rc;
}

int mt__stream_isend(mt__comm *c, int to, const void *data, size_t len, MPI_Request *r)
{
    int e = len > INT_MAX ? MPI_ERR_COUNT
                          : MPI_Isend(data, (int)len, MPI_BYTE, to, TAG_STREAM, c->comm, r);
    return e == MPI_SUCCESS ? MT_OK : mt__mpi_error(e, "MPI_Isend (stream)");
}

int mt__stream_wait(mt__comm *c, MPI_Request *r)
{
    mt__watch_data();
    int rc = wait_politely(r);
    mt__watch_leave();
    return rc;
}

int mt__stream_done(mt__comm *c)
{
    int rc = MT_OK, one = 1;
    for (int r = 1; r < c->size; r++)
        MT__MPI(MPI_Send(&one, 1, MPI_INT, r, TAG_DONE, c->comm), out);
out:
    return rc;
}

int mt__stream_await(mt__comm *c)
{
    int rc = MT_OK, got = 0;
    MPI_Request r;
    mt__watch_data();
    MT__MPI(MPI_Irecv(&got, 1, MPI_INT, 0, TAG_DONE, c->comm, &r), out);
    rc = wait_politely(&r);
out:
    mt__watch_leave();
    return rc;
}

int mt__stream_recv(mt__comm *c, int from, size_t len, void *const buf[2], size_t chunk,
                    int (*consume)(const void *piece, size_t n, size_t offset, void *arg),
                    void *arg)
{
    int rc = MT_OK, mpi_rc = MT_OK, k = 0;
    mt__watch_data();
    MT__CHUNKS(off, n, len, chunk) {
        void *into = buf[k++ % 2];
        int e;
        {
            MT__TRACE("collective", "stream_recv");
            e = MPI_Recv(into, (int)n, MPI_BYTE, from, TAG_STREAM, c->comm, MPI_STATUS_IGNORE);
        }
        if (e != MPI_SUCCESS) {
            mpi_rc = mt__mpi_error(e, "MPI_Recv (stream)");
            break;
        }
        if (!rc)
            rc = consume(into, n, off, arg); /* after a failure, drain without consuming */
    }
    mt__watch_leave();
    return mpi_rc ? mpi_rc : rc;
}
