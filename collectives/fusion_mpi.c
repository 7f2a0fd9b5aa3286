/*
 * fusion_mpi.c -- the fusion backend that works anywhere ("flat"): a bucket whose tensors
 * lie end to end is reduced in place, any other is packed into its buffer first; the sum
 * over all ranks on the fusion's private communicator (fusion_wire.c: MPI_Allreduce
 * within a node, pieces of MPI_Iallreduce in flight across nodes), then the average is
 * written back into the tensors (unpacking and scaling in one pass). With compression the
 * sum is fusion_wire.c's 16-bit reduce-scatter and allgather, which averages as it goes.
 */
#include "fusion_backend.h"

#include <stdlib.h>

typedef struct {
    MPI_Comm data;        /* borrowed from the fusion */
    int size, rank;
    bool piped;           /* the ranks span nodes: the network step in pieces */
    mt_compression compression;
    mt__wire wire;        /* with compression: the 16-bit buffers */
} mpi_state;

/* Local: nothing to set up but the state. */
static int mpi_open(const mt__fusion_where *w, void **state)
{
    mpi_state *s = calloc(1, sizeof *s);
    if (!s)
        return mt__error(MT_ENOMEM, "rank %d: out of memory setting up a fusion", w->c->rank);
    s->data = w->data;
    s->size = w->c->size;
    s->rank = w->c->rank;
    s->piped = w->num_nodes > 1;
    s->compression = w->compression;
    *state = s;
    return MT_OK;
}

static int mpi_prepare(void *state, size_t max_elems)
{
    mpi_state *s = state;
    size_t chunk = mt__fusion_chunk();
    if (!s->compression || !max_elems)
        return MT_OK;
    return mt__wire_reserve(&s->wire, s->size, s->rank, max_elems < chunk ? max_elems : chunk,
                            s->piped);
}

static int mpi_reduce(void *state, const mt__fbucket *b, const mt__ftensor *t)
{
    mpi_state *s = state;
    int rc = MT_OK;
    float scale = 1.0f / (float)s->size;
    if (b->buf)
        mt__fusion_gather(b, t, 0, b->elems, b->buf);
    float *data = b->buf ? b->buf : b->base;
    mt__wire_set_path(MT__WIRE_FLAT);
    if (s->compression) { /* averaged on the way: written back as it is */
        rc = mt__wire_allreduce(&s->wire, s->data, s->compression, data, b->elems, scale);
        scale = 1.0f;
    } else
        rc = mt__wire_sum(s->data, data, b->elems, s->piped);
    if (!rc && b->elems)
        mt__fusion_average(b, t, 0, b->elems, data, scale);
    return rc;
}

static void mpi_close(void *state)
{
    mpi_state *s = state;
    if (s)
        mt__wire_free(&s->wire);
    free(s);
}

const mt__fusion_backend mt__fusion_mpi = {
    .name = "mpi", .packs = true, .open = mpi_open, .prepare = mpi_prepare,
    .reduce = mpi_reduce, .close = mpi_close,
};
