/*
 * fusion_shm.c -- the fusion backend for ranks that all share one node: buckets are
 * summed through the node's shared-memory segment (fusion_node.c), with no MPI call after
 * the set-up (MT_FUSION_SHM=0 turns it off).
 *
 * A bucket whose tensors lie in blocks from mt_fusion_alloc (every rank's block is mapped
 * on every rank) is reduced straight from the blocks: after a barrier each rank r sums
 * its share r of the bucket over every rank's block in rank order and writes the average
 * into every rank's block; a second barrier ends the bucket. No copy in, no copy out:
 * each rank reads and writes the bucket's size once.
 *
 * Any other bucket goes through the segment's slots, chunk by chunk: each rank copies its
 * part of the chunk straight from its tensors into its slot; after a barrier rank r adds
 * up segment r of every slot in rank order and stores it in its own slot; after a second
 * barrier every rank copies all segments, averaged, straight back into its tensors. The
 * two sets of slots alternate, so two barriers a chunk suffice.
 *
 * Both ways every rank gets bit-identical sums, added in the same order.
 */
#include "fusion_backend.h"

#include <stdlib.h>

/* Collective over w->data: a segment when every rank is on one node; the caller decided
 * that (and MT_FUSION_SHM). */
static int shm_open_backend(const mt__fusion_where *w, void **state)
{
    mt__node_seg *s = NULL;
    bool refused = false;
    int rc = mt__node_seg_open(w->data, w->c->size, w->c->rank, w->c->rank, false, &s,
                               &refused);
    if (!rc && refused && w->forced)
        rc = mt__error(MT_EIO, "rank %d: fusion algorithm shm asked for, but the system "
                               "refused the shared-memory segment (/dev/shm full?)",
                       w->c->rank);
    *state = s;
    return rc;
}

/* One shared bucket: each rank's share summed from every block, averaged into all. */
static void reduce_blocks(mt__node_seg *s, const mt__fbucket *b, const mt__ftensor *t)
{
    size_t n = b->elems, P = (size_t)s->size, r = (size_t)s->rank;
    size_t lo = n * r / P, hi = n * (r + 1) / P;
    mt__node_barrier(s); /* every rank's gradients are in its block */
    mt__node_sum_blocks(s, b, t, lo, hi - lo, NULL);
    mt__node_put_blocks(b, t, lo, hi - lo, NULL, 1.0f / (float)P);
    mt__node_barrier(s); /* no rank goes on while another still writes into its block */
}

static int shm_reduce(void *state, const mt__fbucket *b, const mt__ftensor *t)
{
    mt__node_seg *s = state;
    int P = s->size, r = s->rank;
    if (!b->elems)
        return MT_OK;
    if (b->shared) {
        reduce_blocks(s, b, t);
        return MT_OK;
    }
    size_t chunk = mt__fusion_chunk();
    size_t cap = s->slot_elems < chunk ? s->slot_elems : chunk;
    float scale = 1.0f / (float)P;
    float **part = s->part;
    for (size_t off = 0; off < b->elems; off += cap) {
        size_t m = b->elems - off < cap ? b->elems - off : cap;
        float **slots = s->slot + (size_t)s->set * (size_t)P;
        s->set ^= 1;
        mt__fusion_gather(b, t, off, m, slots[r]);
        mt__node_barrier(s);
        size_t lo = m * (size_t)r / (size_t)P, hi = m * (size_t)(r + 1) / (size_t)P;
        for (int q = 0; q < P; q++)
            part[q] = slots[q] + lo;
        mt__node_sum(slots[r] + lo, part, P, hi - lo);
        mt__node_barrier(s);
        for (int q = 0; q < P; q++) {
            size_t qlo = m * (size_t)q / (size_t)P, qhi = m * (size_t)(q + 1) / (size_t)P;
            if (qhi > qlo)
                mt__fusion_average(b, t, off + qlo, qhi - qlo, slots[q] + qlo, scale);
        }
    }
    return MT_OK;
}

static int shm_alloc(void *state, size_t count, bool fail, mt__fblock *blk)
{
    return mt__node_block(state, count, fail, blk);
}

static void shm_close(void *state)
{
    mt__node_seg_close(state);
}

const mt__fusion_backend mt__fusion_shm = {
    .name = "shm", .packs = false, .open = shm_open_backend, .reduce = shm_reduce,
    .alloc = shm_alloc, .close = shm_close,
};
