/*
 * fusion_backend.h -- what a fusion (fusion.c: tensors in buckets, the communication
 * thread, the wait's agreement, the choice of backend) shares with its backends, each of
 * which sums one bucket over the ranks and leaves the average in the bucket's tensors:
 *   fusion_shm.c   every rank on one node: a POSIX shared-memory segment, no MPI call;
 *   fusion_mpi.c   anywhere ("flat"): MPI_Allreduce on the fusion's private communicator;
 *   fusion_hier.c  across nodes: a shared-memory sum within each node, an allreduce among
 *                  one leader per node, the result read back through shared memory.
 * What the fusion and every backend share (a bucket's pieces, the averaging, the step
 * size, the blocks of mt_fusion_alloc) is fusion_pieces.c; auto's timing contest
 * fusion_auto.c. What the shared-memory backends share (the node's segment, its barrier, blocks handed
 * out by mt_fusion_alloc, sums in rank order) is fusion_node.c; the 16-bit wire formats
 * and the compressed allreduce of the network step are fusion_wire.c.
 */
#ifndef MT_FUSION_BACKEND_H
#define MT_FUSION_BACKEND_H

#include "collectives.h"

/* Memory handed out by mt_fusion_alloc: every rank's block of `count` floats. In shared
 * memory (map != NULL) the blocks of all the backend's node ranks are mapped on each of
 * them, rank q's at base + q * stride, so a backend can reduce straight from them;
 * otherwise base is this rank's own block (nranks 1). */
typedef struct {
    float *base;
    size_t stride, count;
    int nranks, me;       /* ranks sharing the mapping, this rank's index among them */
    void *map;            /* the shared mapping to unmap, or NULL: base is free()d */
    size_t map_bytes;
} mt__fblock;

typedef struct {
    float *ptr;
    size_t count, offset; /* offset inside its bucket */
    int bucket;
    bool ready;
    const mt__fblock *blk; /* the block it lies in (NULL: none), at boff floats */
    size_t boff;
} mt__ftensor;

typedef struct {
    int first, n;         /* tensors [first, first + n) */
    size_t elems;
    int unready;          /* tensors not yet ready this step */
    float *buf;           /* packing buffer (a backend that packs); NULL when the tensors
                             lie end to end in registration order (one tensor, or one
                             allocation): then the bucket is reduced in place from base */
    float *base;
    int head;             /* its first tensor with elements (base is its ptr) */
    bool adjacent;        /* its tensors lie end to end from base */
    bool shared;          /* every tensor in a shared block, at the same offsets on every
                             rank: reduced straight from every rank's block */
} mt__fbucket;

/* Visits the pieces of bucket b that cover its flat elements [from, from + n):
 * fn(tensor, element inside that tensor, bucket-relative element, count, arg). An
 * adjacent bucket is one piece of its head tensor (the element may pass that tensor's
 * own count: the memory runs on). */
typedef void (*mt__fpiece_fn)(const mt__ftensor *t, size_t in, size_t at, size_t cnt,
                              void *arg);
void mt__fusion_pieces(const mt__fbucket *b, const mt__ftensor *t, size_t from, size_t n,
                       mt__fpiece_fn fn, void *arg);
/* Copies elements [from, from + n) of bucket b (tensors t) to dst. */
void mt__fusion_gather(const mt__fbucket *b, const mt__ftensor *t, size_t from, size_t n,
                       float *dst);
/* The averaging step of every backend: elements [from, from + n) of bucket b become
 * sum[0..n) * scale; sum may be those elements' own memory (reduced in place). */
void mt__fusion_average(const mt__fbucket *b, const mt__ftensor *t, size_t from, size_t n,
                        const float *sum, float scale);
/* dst[0..n) = src[0..n) * s (dst == src allowed; nothing to do for s == 1 in place). */
void mt__fusion_scale(float *dst, const float *src, size_t n, float s);
/* Elements a backend moves at most in one step (test hook mt__fusion_set_chunk). */
size_t mt__fusion_chunk(void);

/* Where a fusion runs, for its backends' set-up (all borrowed). */
typedef struct {
    mt__comm *c;
    MPI_Comm data;        /* the fusion's private duplicate of c's communicator */
    MPI_Comm node;        /* the ranks of this rank's node (topology.c: MT_NODE_KEY-aware) */
    int num_nodes;
    mt_compression compression; /* of the network step */
    bool forced;          /* asked for by name: a shared segment the system refuses is an
                             error, not a reason to give way to the next backend */
} mt__fusion_where;

typedef struct {
    const char *name;     /* mt_fusion_algo_name's answer */
    bool packs;           /* buckets whose tensors are not end to end need buf */
    /* Collective over w->data; every rank enters the same collectives whatever failed
     * elsewhere, and an error is returned on the rank it happened on (agreed by the
     * caller). Sets *state, or leaves it NULL when this backend cannot serve (a shared
     * segment the system refused, unless w->forced). */
    int (*open)(const mt__fusion_where *w, void **state);
    /* Local: room for buckets of up to max_elems floats, before any reduction (errors
     * agreed by the registration check). NULL: nothing to prepare. */
    int (*prepare)(void *state, size_t max_elems);
    /* Collective: sum bucket b over the ranks and leave the average in its tensors. Every
     * rank calls it for the same buckets in the same order, one call at a time. */
    int (*reduce)(void *state, const mt__fbucket *b, const mt__ftensor *t);
    /* Collective over the backend's node (every rank calls it with the same count): every
     * node rank's block of count zeroed floats in one shared mapping. blk->base stays NULL
     * when the system refuses the mapping (the caller uses ordinary memory); `fail` makes
     * this rank's part fail as out of memory (a test's fault site) after the collectives.
     * NULL for a backend without shared memory. */
    int (*alloc)(void *state, size_t count, bool fail, mt__fblock *blk);
    /* Local (a rank that leaves with an error must not wait for the others here). */
    void (*close)(void *state);
} mt__fusion_backend;

extern const mt__fusion_backend mt__fusion_shm, mt__fusion_mpi, mt__fusion_hier;

/* Collective over the backend's node: count zeroed floats in k, shared when backend be
 * (may be NULL) shares memory and the system gives the mapping, else this rank's own
 * aligned memory; `fail` (a fault site) makes this rank's part fail. */
int mt__fblock_new(const mt__fusion_backend *be, void *state, int rank, size_t count,
                   bool fail, mt__fblock *k);
/* Local: the block's memory (the other ranks keep their mappings); _free also frees k. */
void mt__fblock_release(mt__fblock *k);
void mt__fblock_free(mt__fblock *k);

/* fusion_auto.c. Collective over comm and data (the fusion's), at the registration check
 * under auto: hier and flat both reduce scratch buckets of the sizes of b[0..nb), timed;
 * *hier_wins, the same on every rank, says which was faster. Errors are agreed. */
int mt__fusion_time(mt__comm *comm, MPI_Comm data, const mt__fbucket *b, int nb,
                    const mt__fusion_backend *hier, void *hier_state,
                    const mt__fusion_backend *flat, void *flat_state, bool *hier_wins);

/* ------------------------------------------------ fusion_node.c: one node's shared memory */

/* A segment mapped by the ranks of one node: a barrier at its head, two sets of one slot
 * per rank (slot_elems floats each) and, when asked for, one result area per set. */
typedef struct mt__node_seg {
    MPI_Comm comm;        /* borrowed: the node's ranks, for blocks mapped later */
    int size, rank;
    int who;              /* this rank in the fusion's communicator (messages, fault sites) */
    void *seg;
    size_t seg_bytes;
    void *sync;           /* the barrier at its head */
    float **slot;         /* [set * size + rank] */
    float **part;         /* scratch: size entries */
    float *result[2];     /* per set (NULL when not asked for) */
    size_t slot_elems;
    int set;              /* the set the next chunk uses */
} mt__node_seg;

/* Collective over comm (size ranks, this one is rank; who: its rank in the fusion): map a
 * segment on every rank. *out
 * is NULL, with *refused, when the system refused the mapping on some rank (no error: the
 * caller decides what that means); an allocation failure here is this rank's error,
 * after the collectives (and every rank gives the segment up with it, not refused). */
int mt__node_seg_open(MPI_Comm comm, int size, int rank, int who, bool results,
                      mt__node_seg **out, bool *refused);
void mt__node_seg_close(mt__node_seg *s);   /* local */
/* Every rank of the segment waits until all have arrived (spin, yield, then futex). */
void mt__node_barrier(mt__node_seg *s);
/* sum[0..n) = parts[0][i] + ... + parts[p-1][i], in rank order; sum may be one of the
 * parts. p >= 1. */
void mt__node_sum(float *sum, float *const *parts, int p, size_t n);
/* Bucket-relative elements [from, from + n) of bucket b (shared: every tensor in a block
 * mapped by s's ranks) summed over every node rank's block in rank order into dst[0..n),
 * or, dst NULL, into this rank's own block. */
void mt__node_sum_blocks(mt__node_seg *s, const mt__fbucket *b, const mt__ftensor *t,
                         size_t from, size_t n, float *dst);
/* Writes src[0..n) * scale (src NULL: this rank's own block's elements, which are
 * written last) into elements [from, from + n) of every node rank's block. */
void mt__node_put_blocks(const mt__fbucket *b, const mt__ftensor *t, size_t from, size_t n,
                         const float *src, float scale);
/* alloc of the shared-memory backends: blocks of s's ranks (collective over s->comm). */
int mt__node_block(mt__node_seg *s, size_t count, bool fail, mt__fblock *blk);

/* ------------------------------------------------ fusion_wire.c: 16-bit on the wire */

/* fp32 to fp16 / bf16, round to nearest even. fp16: finite values beyond +-65504 become
 * +-65504, inf stays inf, NaN stays NaN; below 2^-24 (half the smallest subnormal) values
 * round to zero. bf16 has fp32's exponent range: only finite values that would round past
 * its largest (about 3.39e38) are clamped to it. */
uint16_t mt__wire_from_f32(mt_compression k, float f);
float mt__wire_to_f32(mt_compression k, uint16_t h);

/* Room of the compressed allreduce: a window of pieces, each with its 16-bit buffers. */
typedef struct {
    uint16_t *buf;
    size_t piece, seg;    /* values a piece, per rank */
    int slots, size;      /* pieces in flight; ranks */
} mt__wire;
/* Local: room for calls of up to cap floats over size ranks, in pieces across nodes
 * (piped) or in one (grows; MT_ENOMEM on this rank). */
int mt__wire_reserve(mt__wire *w, int size, int rank, size_t cap, bool piped);
void mt__wire_free(mt__wire *w);
/* Collective over comm (w reserved for it): every rank's data[0..n) (n <= the reserved
 * cap) is rounded to 16 bits, each rank sums its segment over the ranks in rank order in
 * fp32, multiplies by scale, rounds once to 16 bits, and every rank receives every
 * segment (MPI_Ialltoall, then MPI_Iallgather, a window of pieces at a time): data
 * becomes that result, the same bits on every rank, and the link carries half the bytes
 * of fp32. */
int mt__wire_allreduce(mt__wire *w, MPI_Comm comm, mt_compression k, float *data, size_t n,
                       float scale);
/* Collective over comm: data[0..n) becomes its sum over the ranks (fp32, unscaled); piped
 * (across nodes): in pieces of 32 KiB, a window of MPI_Iallreduce in flight; else
 * MPI_Allreduce in chunks of mt__fusion_chunk(). The same bits on every rank. */
int mt__wire_sum(MPI_Comm comm, float *data, size_t n, bool piped);
/* Local. Called by the fusion's own thread as it starts: its waits across nodes may sleep
 * between polls (fusion_wire.c says why, how long, and where by default; MT_FUSION_SLEEP=0
 * or 1 decides instead); other threads wait in MPI_Wait. _done: this thread waits in
 * MPI_Wait again (tests). */
void mt__wire_thread_sleeps(void);
void mt__wire_thread_done(void);
/* Local: the backend whose network step this thread runs next (its default wait). */
typedef enum { MT__WIRE_FLAT = 0, MT__WIRE_HIER } mt__wire_path;
void mt__wire_set_path(mt__wire_path p);
/* Local: completes *r, by MPI_Wait, or on a thread that sleeps by polls and sleeps that
 * grow with the wait; an MPI error code. */
int mt__wire_wait(MPI_Request *r);
/* Local: the polls this thread's sleeping waits have made (for tests). */
uint64_t mt__wire_polls(void);

#endif
