/*
 * typed.c -- mt_allreduce / mt_broadcast / mt_allgather / mt_barrier on a mt__comm.
 *
 * Each call first passes the agreement with its kind and a signature of the arguments
 * that must match (count, dtype, op, root; the array's shape for the _nd calls, so that
 * (2, 3) against (3, 2) is a mismatch too, in the same one agreement), so ranks that disagree get MT_EMISMATCH
 * before any data moves, and a rank whose arguments are bad makes every rank fail with
 * MT_EPEER instead of leaving the others waiting. Only then does the data collective run,
 * in chunks of at most INT_MAX elements (MPI counts are int).
 *
 * An allreduce of at most MT__AGREE_PAYLOAD bytes (192) needs no second step: its data
 * travels in the agreement's own message and is combined there, only between ranks that
 * are in the same call (agree.c), and reaches the caller's buffer only when the agreement
 * is OK. One collective instead of two: a 4-byte mt_allreduce at 2 ranks went from 2.0x
 * to about 1.1x a raw MPI_Allreduce (docs/benchmarks.md).
 */
#include "collectives.h"
#include "position.h"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>

static size_t chunk_elems = INT_MAX;
static size_t fold_bytes = MT__AGREE_PAYLOAD;

void mt__set_fold_bytes(size_t n)
{
    fold_bytes = n < MT__AGREE_PAYLOAD ? n : MT__AGREE_PAYLOAD;
}

void mt__set_chunk_elems(size_t n)
{
    chunk_elems = n > 0 && n <= INT_MAX ? n : INT_MAX;
}

static MPI_Datatype mpi_type(mt_dtype t)
{
    switch (t) {
    case MT_U8: return MPI_UINT8_T;
    case MT_I32: return MPI_INT32_T;
    case MT_I64: return MPI_INT64_T;
    case MT_F32: return MPI_FLOAT;
    case MT_F64: return MPI_DOUBLE;
    }
    return MPI_DATATYPE_NULL;
}

static MPI_Op mpi_op(mt_op op)
{
    switch (op) {
    case MT_SUM: case MT_MEAN: return MPI_SUM;
    case MT_MIN: return MPI_MIN;
    case MT_MAX: return MPI_MAX;
    }
    return MPI_OP_NULL;
}

/* Local argument checks shared by the typed calls. */
static int check_args(const char *fn, const void *buf, size_t count, mt_dtype t)
{
    if (mt_dtype_size(t) == 0)
        return mt__error(MT_EINVAL, "%s: unknown dtype %d", fn, (int)t);
    if (count > 0 && !buf)
        return mt__error(MT_EINVAL, "%s: NULL buffer with count %zu", fn, count);
    return MT_OK;
}

/* Collective: the agreement on a call of this kind with these arguments (rc: this rank's
 * verdict on them). */
static int agreed(mt__comm *c, int kind, size_t count, mt_dtype t, int64_t arg, int ndim,
                  const size_t *dims, int rc)
{
    mt__call call;
    mt__call_init(&call, kind, count, t, arg);
    if (!rc)
        mt__call_shape(&call, ndim, dims);
    return mt__agree(c, &call, rc, NULL);
}

/* The element count of a shape (ndim 0: one element); rc: MT_EINVAL for more than 8
 * dimensions, a NULL dims or a product that overflows, or for MT_ND_FAIL (keeping the
 * message the caller set). */
static int count_of(const char *fn, int ndim, const size_t *dims, size_t *count)
{
    *count = 0;
    if (ndim == MT_ND_FAIL) /* the caller's own error, set by mt_set_error */
        return MT_EINVAL;
    if (ndim < 0 || ndim > MT__CALL_MAX_DIMS)
        return mt__error(MT_EINVAL, "%s: %d dimensions (0 to %d)", fn, ndim, MT__CALL_MAX_DIMS);
    if (ndim > 0 && !dims)
        return mt__error(MT_EINVAL, "%s: NULL dims for %d dimensions", fn, ndim);
    size_t n = 1;
    for (int d = 0; d < ndim; d++) {
        if (dims[d] && n > SIZE_MAX / dims[d])
            return mt__error(MT_EINVAL, "%s: the shape's element count overflows", fn);
        n *= dims[d];
    }
    *count = n;
    return MT_OK;
}

static void divide(void *buf, size_t n, mt_dtype t, int size)
{
    switch (t) {
    case MT_U8: { uint8_t *p = buf; for (size_t i = 0; i < n; i++) p[i] /= (uint8_t)size; break; }
    case MT_I32: { int32_t *p = buf; for (size_t i = 0; i < n; i++) p[i] /= size; break; }
    case MT_I64: { int64_t *p = buf; for (size_t i = 0; i < n; i++) p[i] /= size; break; }
    case MT_F32: { float *p = buf; float d = (float)size; for (size_t i = 0; i < n; i++) p[i] /= d; break; }
    case MT_F64: { double *p = buf; double d = size; for (size_t i = 0; i < n; i++) p[i] /= d; break; }
    }
}

static int allreduce(mt__comm *c, void *buf, size_t count, mt_dtype t, mt_op op, int ndim,
                     const size_t *dims, int rc)
{
    MT__TRACE("collective", "allreduce");
    if (!rc)
        rc = check_args("mt_allreduce", buf, count, t);
    if (!rc && mpi_op(op) == MPI_OP_NULL)
        rc = mt__error(MT_EINVAL, "mt_allreduce: unknown op %d", (int)op);
    size_t es = mt_dtype_size(t);
    if (es && count <= fold_bytes / es) { /* the data rides in the agreement */
        mt__call call;
        mt__call_init(&call, MT__CALL_ALLREDUCE, count, t, op);
        if (!rc)
            mt__call_shape(&call, ndim, dims);
        mt__payload p = {.kind = MT__PAY_REDUCE, .dtype = t, .op = op, .count = count,
                         .buf = buf};
        rc = mt__agree_carry(c, &call, rc, NULL, NULL, 0, count ? &p : NULL);
        if (!rc && op == MT_MEAN)
            divide(buf, count, t, c->size);
        return rc;
    }
    rc = agreed(c, MT__CALL_ALLREDUCE, count, t, op, ndim, dims, rc);
    if (rc)
        return rc;
    mt__watch_data();
    MT__CHUNKS(off, n, count, chunk_elems)
        MT__MPI(MPI_Allreduce(MPI_IN_PLACE, (char *)buf + off * es, (int)n, mpi_type(t),
                              mpi_op(op), c->comm), out);
    if (op == MT_MEAN)
        divide(buf, count, t, c->size);
out:
    mt__watch_leave();
    return rc;
}

int mt__allreduce(mt__comm *c, void *buf, size_t count, mt_dtype t, mt_op op)
{
    return allreduce(c, buf, count, t, op, 0, NULL, MT_OK);
}

int mt__allreduce_nd(mt__comm *c, void *buf, int ndim, const size_t *dims, mt_dtype t,
                     mt_op op)
{
    size_t count;
    int rc = count_of("mt_allreduce_nd", ndim, dims, &count);
    return allreduce(c, buf, count, t, op, ndim, dims, rc);
}

static int broadcast(mt__comm *c, void *buf, size_t count, mt_dtype t, int root, int ndim,
                     const size_t *dims, int rc)
{
    MT__TRACE("collective", "broadcast");
    if (!rc)
        rc = check_args("mt_broadcast", buf, count, t);
    if (!rc && (root < 0 || root >= c->size))
        rc = mt__error(MT_EINVAL, "mt_broadcast: root %d is not a rank of this %d-rank job",
                       root, c->size);
    rc = agreed(c, MT__CALL_BROADCAST, count, t, root, ndim, dims, rc);
    if (rc)
        return rc;
    size_t es = mt_dtype_size(t);
    mt__watch_data();
    MT__CHUNKS(off, n, count, chunk_elems)
        MT__MPI(MPI_Bcast((char *)buf + off * es, (int)n, mpi_type(t), root, c->comm), out);
out:
    mt__watch_leave();
    return rc;
}

int mt__broadcast(mt__comm *c, void *buf, size_t count, mt_dtype t, int root)
{
    return broadcast(c, buf, count, t, root, 0, NULL, MT_OK);
}

int mt__broadcast_nd(mt__comm *c, void *buf, int ndim, const size_t *dims, mt_dtype t,
                     int root)
{
    size_t count;
    int rc = count_of("mt_broadcast_nd", ndim, dims, &count);
    return broadcast(c, buf, count, t, root, ndim, dims, rc);
}

/* One chunk [off, off+n) of every rank's block: received with a type whose extent is a
 * whole block, so chunks land in place whatever the total size. */
static int allgather_chunk(mt__comm *c, const char *send, char *recv, size_t count,
                           size_t off, size_t n, mt_dtype t)
{
    int rc = MT_OK;
    size_t es = mt_dtype_size(t);
    MPI_Datatype block = MPI_DATATYPE_NULL, spread = MPI_DATATYPE_NULL;
    MT__MPI(MPI_Type_contiguous((int)n, mpi_type(t), &block), out);
    MT__MPI(MPI_Type_create_resized(block, 0, (MPI_Aint)(count * es), &spread), out);
    MT__MPI(MPI_Type_commit(&spread), out);
    MT__MPI(MPI_Allgather(send + off * es, (int)n, mpi_type(t), recv + off * es, 1, spread,
                          c->comm), out);
out:
    if (spread != MPI_DATATYPE_NULL)
        MPI_Type_free(&spread);
    if (block != MPI_DATATYPE_NULL)
        MPI_Type_free(&block);
    return rc;
}

static int allgather(mt__comm *c, const void *send, void *recv, size_t count, mt_dtype t,
                     int ndim, const size_t *dims, int rc)
{
    MT__TRACE("collective", "allgather");
    if (!rc)
        rc = check_args("mt_allgather", send, count, t);
    if (!rc && count > 0 && !recv)
        rc = mt__error(MT_EINVAL, "mt_allgather: NULL receive buffer with count %zu", count);
    rc = agreed(c, MT__CALL_ALLGATHER, count, t, 0, ndim, dims, rc);
    if (rc || count == 0)
        return rc;
    mt__watch_data();
    if (count * (size_t)c->size <= chunk_elems) {
        MT__MPI(MPI_Allgather(send, (int)count, mpi_type(t), recv, (int)count, mpi_type(t),
                              c->comm), out);
        goto out;
    }
    MT__CHUNKS(off, n, count, chunk_elems)
        if ((rc = allgather_chunk(c, send, recv, count, off, n, t)))
            break;
out:
    mt__watch_leave();
    return rc;
}

int mt__allgather(mt__comm *c, const void *send, void *recv, size_t count, mt_dtype t)
{
    return allgather(c, send, recv, count, t, 0, NULL, MT_OK);
}

int mt__allgather_nd(mt__comm *c, const void *send, void *recv, int ndim, const size_t *dims,
                     mt_dtype t)
{
    size_t count;
    int rc = count_of("mt_allgather_nd", ndim, dims, &count);
    return allgather(c, send, recv, count, t, ndim, dims, rc);
}

int mt__barrier(mt__comm *c)
{
    MT__TRACE("collective", "barrier");
    mt__call call;
    mt__call_init(&call, MT__CALL_BARRIER, 0, 0, 0);
    /* the agreement is itself a full synchronisation */
    return mt__agree(c, &call, MT_OK, NULL);
}
