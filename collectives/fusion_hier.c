/*
 * fusion_hier.c -- the hierarchical fusion backend, for ranks on several nodes: within
 * each node a shared-memory sum (the node's segment and barrier, fusion_node.c), among one
 * leader per node (the node's lowest rank) an allreduce over the network, and back within
 * each node through shared memory. Only one rank per node talks to the network, with the
 * node's sum: between two nodes of L ranks each, the link carries 1/L of what a flat
 * allreduce over all ranks sends through it.
 *
 * A bucket goes in chunks of at most one result area (1 MiB). Per chunk: barrier (every
 * rank's values are in place); each rank sums its share of the chunk over the node's
 * ranks in rank order into the node's result area, straight from the ranks' blocks when
 * the bucket lies in blocks from mt_fusion_alloc, else from copies in the slots; barrier;
 * the leader allreduces the result area with the other leaders (MPI_Allreduce, or with
 * compression fusion_wire.c's 16-bit exchange, which also averages); barrier; then every
 * rank reads the average back: each its share into every rank's block, or all of it into
 * its own tensors. The result areas alternate between two sets, so a chunk needs three
 * barriers (and a bucket in blocks one more at its end, before any rank goes on while
 * another still writes into its block). Every rank ends with the leader's bits: the same
 * on every node, since the leaders' allreduce gives each leader the same result.
 *
 * A node with one rank (layouts such as 1+2+1) is its own leader and its barriers pass at
 * once. The leader's MPI calls run on the fusion's thread (the leaders' communicator is
 * the backend's own); the other ranks wait for it in the barrier without holding a CPU.
 */
#include "fusion_backend.h"

#include <stdlib.h>

typedef struct {
    mt__node_seg *seg;    /* the node's ranks */
    MPI_Comm leaders;     /* one rank per node; MPI_COMM_NULL on the others */
    int world;            /* ranks in all: the average's divisor */
    bool piped;           /* the leaders are on several nodes: their step in pieces */
    mt_compression compression;
    mt__wire wire;        /* the leader's 16-bit buffers, with compression */
} hier_state;

static void hier_close(void *state)
{
    hier_state *s = state;
    if (!s)
        return;
    mt__node_seg_close(s->seg);
    if (s->leaders != MPI_COMM_NULL)
        MPI_Comm_free(&s->leaders);
    mt__wire_free(&s->wire);
    free(s);
}

/* Collective over w->data: the leaders' communicator and every node's segment. */
static int hier_open(const mt__fusion_where *w, void **state)
{
    int rc = MT_OK, lsize = 0, lrank = 0, nleaders = 0, all = 0;
    int rank = w->c->rank;
    /* what can fail on this rank alone comes first, but every rank still enters every
     * collective below; the error is this rank's, agreed by the caller */
    hier_state *s = mt__test_fail("fusion-hier", rank) ? NULL : calloc(1, sizeof *s);
    if (!s)
        rc = mt__error(MT_ENOMEM, "rank %d: out of memory setting up the hierarchical "
                                  "fusion", rank);
    MPI_Comm leaders = MPI_COMM_NULL;
    mt__node_seg *seg = NULL;
    MT__MPI(MPI_Comm_size(w->node, &lsize), out);
    MT__MPI(MPI_Comm_rank(w->node, &lrank), out);
    MT__MPI(MPI_Comm_split(w->data, lrank == 0 ? 0 : MPI_UNDEFINED, rank, &leaders), out);
    bool refused = false;
    int e = mt__node_seg_open(w->node, lsize, lrank, rank, true, &seg, &refused);
    /* every node's segment or none: 2 mapped, 1 refused, 0 failed on some rank (its
     * own error, which the agreement reports) */
    int mine = seg ? 2 : refused ? 1 : 0;
    MT__MPI(MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, w->data), out);
    rc = rc ? rc : e;
    if (!rc && all == 1 && w->forced)
        rc = mt__error(MT_EIO, "rank %d: fusion algorithm hier asked for, but the system "
                               "refused a node's shared-memory segment (/dev/shm full?)",
                       rank);
    if (!rc && all == 2 && leaders != MPI_COMM_NULL) {
        MT__MPI(MPI_Comm_size(leaders, &nleaders), out);
        if (w->compression)
            rc = mt__wire_reserve(&s->wire, nleaders, rank, seg->slot_elems,
                                  w->num_nodes > 1);
    }
out:
    if (s) {
        s->seg = seg;
        s->leaders = leaders;
        s->world = w->c->size;
        s->piped = w->num_nodes > 1;
        s->compression = w->compression;
    } else if (leaders != MPI_COMM_NULL)
        MPI_Comm_free(&leaders);
    if (rc || all != 2) {
        if (!s)
            mt__node_seg_close(seg);
        hier_close(s);
        return rc;
    }
    *state = s;
    return MT_OK;
}

/* The leader's step: the node's sums of a chunk summed over the nodes (and averaged, with
 * compression). */
static int leaders_step(hier_state *s, float *res, size_t m)
{
    if (s->leaders == MPI_COMM_NULL)
        return MT_OK;
    mt__wire_set_path(MT__WIRE_HIER);
    if (s->compression)
        return mt__wire_allreduce(&s->wire, s->leaders, s->compression, res, m,
                                  1.0f / (float)s->world);
    return mt__wire_sum(s->leaders, res, m, s->piped);
}

static int hier_reduce(void *state, const mt__fbucket *b, const mt__ftensor *t)
{
    hier_state *s = state;
    mt__node_seg *g = s->seg;
    int L = g->size, r = g->rank, rc = MT_OK;
    size_t chunk = mt__fusion_chunk();
    size_t cap = g->slot_elems < chunk ? g->slot_elems : chunk;
    float scale = s->compression ? 1.0f : 1.0f / (float)s->world; /* compressed: averaged */
    for (size_t off = 0; off < b->elems; off += cap) {
        size_t m = b->elems - off < cap ? b->elems - off : cap;
        float **slots = g->slot + (size_t)g->set * (size_t)L, *res = g->result[g->set];
        g->set ^= 1;
        size_t lo = m * (size_t)r / (size_t)L, hi = m * (size_t)(r + 1) / (size_t)L;
        if (!b->shared)
            mt__fusion_gather(b, t, off, m, slots[r]);
        mt__node_barrier(g);
        if (b->shared)
            mt__node_sum_blocks(g, b, t, off + lo, hi - lo, res + lo);
        else {
            for (int q = 0; q < L; q++)
                g->part[q] = slots[q] + lo;
            mt__node_sum(res + lo, g->part, L, hi - lo);
        }
        mt__node_barrier(g);
        int e = leaders_step(s, res, m); /* an error still goes through the barriers */
        rc = rc ? rc : e;
        mt__node_barrier(g);
        if (b->shared)
            mt__node_put_blocks(b, t, off + lo, hi - lo, res + lo, scale);
        else
            mt__fusion_average(b, t, off, m, res, scale);
    }
    if (b->shared && b->elems)
        mt__node_barrier(g);
    return rc;
}

static int hier_alloc(void *state, size_t count, bool fail, mt__fblock *blk)
{
    hier_state *s = state;
    return mt__node_block(s->seg, count, fail, blk);
}

const mt__fusion_backend mt__fusion_hier = {
    .name = "hier", .packs = false, .open = hier_open, .reduce = hier_reduce,
    .alloc = hier_alloc, .close = hier_close,
};
