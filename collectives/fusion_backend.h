/*
 * fusion_backend.h -- what a fusion (fusion.c: tensors in buckets, the communication
 * thread, the wait's agreement) shares with its backends, each of which sums one bucket
 * over the ranks and leaves the average in the bucket's tensors:
 *   fusion_shm.c  every rank on one node: a POSIX shared-memory segment, no MPI call;
 *   fusion_mpi.c  anywhere: MPI_Allreduce on the fusion's private communicator.
 * A fusion takes the first backend in its list that can serve its ranks; a new one (a
 * hierarchical reduction across nodes) is one more table of four entries.
 */
#ifndef MT_FUSION_BACKEND_H
#define MT_FUSION_BACKEND_H

#include "collectives.h"

typedef struct {
    float *ptr;
    size_t count, offset; /* offset inside its bucket */
    int bucket;
    bool ready;
} mt__ftensor;

typedef struct {
    int first, n;         /* tensors [first, first + n) */
    size_t elems;
    int unready;          /* tensors not yet ready this step */
    float *buf;           /* packing buffer (a backend that packs); NULL when the tensors
                             lie end to end in registration order (one tensor, or one
                             allocation): then the bucket is reduced in place from base */
    float *base;
    bool adjacent;        /* its tensors lie end to end from base */
} mt__fbucket;

/* Copies elements [from, from + n) of bucket b (tensors t) to dst. */
void mt__fusion_gather(const mt__fbucket *b, const mt__ftensor *t, size_t from, size_t n,
                       float *dst);
/* The averaging step of every backend: elements [from, from + n) of bucket b become
 * sum[0..n) * scale; sum may be those elements' own memory (reduced in place). */
void mt__fusion_average(const mt__fbucket *b, const mt__ftensor *t, size_t from, size_t n,
                        const float *sum, float scale);
/* Elements a backend moves at most in one step (test hook mt__fusion_set_chunk). */
size_t mt__fusion_chunk(void);

typedef struct {
    const char *name;
    bool packs;           /* buckets whose tensors are not end to end need buf */
    /* Collective over c; data is the fusion's private duplicate of c's communicator
     * (borrowed). Sets *state, or leaves it NULL when this backend cannot serve these
     * ranks (then the next one is asked). Every rank enters the same collectives whatever
     * failed elsewhere; an error is returned on the rank it happened on and agreed by the
     * caller. */
    int (*open)(mt__comm *c, MPI_Comm data, void **state);
    /* Collective: sum bucket b over the ranks and leave the average in its tensors. Every
     * rank calls it for the same buckets in the same order, one call at a time. */
    int (*reduce)(void *state, const mt__fbucket *b, const mt__ftensor *t);
    /* Local (a rank that leaves with an error must not wait for the others here). */
    void (*close)(void *state);
} mt__fusion_backend;

extern const mt__fusion_backend mt__fusion_shm, mt__fusion_mpi;

#endif
