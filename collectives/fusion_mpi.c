/*
 * fusion_mpi.c -- the fusion backend that works anywhere: a bucket whose tensors lie end
 * to end is reduced in place, any other is packed into its buffer first; MPI_Allreduce
 * (sum) on the fusion's private communicator, in chunks of at most INT_MAX elements, then
 * the average is written back into the tensors (unpacking and scaling in one pass).
 */
#include "fusion_backend.h"

#include <stdlib.h>

typedef struct {
    MPI_Comm data;        /* borrowed from the fusion */
    int size;
} mpi_state;

/* Local: nothing to set up but the state. */
static int mpi_open(mt__comm *c, MPI_Comm data, void **state)
{
    mpi_state *s = malloc(sizeof *s);
    if (!s)
        return mt__error(MT_ENOMEM, "rank %d: out of memory setting up a fusion", c->rank);
    s->data = data;
    s->size = c->size;
    *state = s;
    return MT_OK;
}

static int mpi_reduce(void *state, const mt__fbucket *b, const mt__ftensor *t)
{
    mpi_state *s = state;
    int rc = MT_OK;
    if (b->buf)
        mt__fusion_gather(b, t, 0, b->elems, b->buf);
    float *data = b->buf ? b->buf : b->base;
    size_t chunk = mt__fusion_chunk();
    for (size_t off = 0; off < b->elems; off += chunk) {
        size_t n = b->elems - off < chunk ? b->elems - off : chunk;
        MT__MPI(MPI_Allreduce(MPI_IN_PLACE, data + off, (int)n, MPI_FLOAT, MPI_SUM, s->data),
                out);
    }
    if (b->elems)
        mt__fusion_average(b, t, 0, b->elems, data, 1.0f / (float)s->size);
out:
    return rc;
}

static void mpi_close(void *state)
{
    free(state);
}

const mt__fusion_backend mt__fusion_mpi = {
    .name = "mpi", .packs = true, .open = mpi_open, .reduce = mpi_reduce, .close = mpi_close,
};
