/*
 * collectives.h -- the MPI layer's internal interface: the workers' communicator, the
 * agreement step every collective ends in, and the typed collectives. This folder is the
 * only place that calls MPI collectives directly.
 */
#ifndef MT_COLLECTIVES_H
#define MT_COLLECTIVES_H

#include "../common/common.h"

#include <math.h>

/* Kinds of collective call, carried by the agreement so ranks in different calls notice. */
#define MT__CALL_MAP(XX)                                                      \
    XX(FIT_BEGIN, "fit-begin")                                                \
    XX(FIT_END, "fit-end")                                                    \
    XX(ALLREDUCE, "allreduce")                                                \
    XX(BROADCAST, "broadcast")                                                \
    XX(ALLGATHER, "allgather")                                                \
    XX(BARRIER, "barrier")                                                    \
    XX(FUSION_CREATE, "fusion-create")                                        \
    XX(FUSION_ALLOC, "fusion-alloc")                                          \
    XX(FUSION_CHECK, "fusion-check")                                          \
    XX(FUSION_WAIT, "fusion-wait")                                            \
    XX(FUSION_DESTROY, "fusion-destroy")                                      \
    XX(DATA_OPEN, "dataset-open")                                             \
    XX(REPORT, "report")                                                      \
    XX(REPORT_DONE, "report-commit")                                          \
    XX(CKPT_GET, "checkpoint-get")                                            \
    XX(CKPT_WAIT, "checkpoint-wait")                                          \
    XX(EPOCH, "begin-epoch")                                                  \
    XX(INTERNAL, "internal")                                                  \
    XX(TEST, "test")

typedef enum {
    MT__CALL_NONE = 0,
#define XX(name, text) MT__CALL_##name,
    MT__CALL_MAP(XX)
#undef XX
} mt__call_kind;

const char *mt__call_name(int kind);

#define MT__DESC_LEN 128

/* Test only: true when MT_TEST_FAIL_AT names this site for this rank (fault.c). */
bool mt__test_fail(const char *site, int rank);
/* The same against a value of MT_TEST_FAIL_AT read once (NULL: unset), for a hot path
 * that checks several sites (a getenv costs about 150 ns under mpirun's environment). */
bool mt__test_fail_in(const char *spec, const char *site, int rank);
/* MT_TEST_FAIL_AT's value (NULL: unset). Read at each call only in a process that had it
 * set when a site was first reached, or that called mt__test_arm (a test program setting
 * it between calls); otherwise never read again. */
const char *mt__test_sites(void);
void mt__test_arm(void);
/* Test only: the process kills itself (SIGKILL) when MT_TEST_FAIL_AT names this site for
 * this rank: a rank that dies at a chosen moment. */
void mt__test_die(const char *site, int rank);
/* Test only: the same with SIGSTOP: a rank that stops (hangs) at a chosen moment. */
void mt__test_stop(const char *site, int rank);
/* Test only: the rank sleeps MT_TEST_PAUSE_S seconds (default 5) there: a slow rank. */
void mt__test_pause(const char *site, int rank);
/* Test only: e, or MPI_ERR_OTHER when MT_TEST_FAIL_AT names this site for this rank: an
 * MPI call that returned an error on one rank alone (after taking part in it). */
int mt__test_mpi(const char *site, int rank, int e);

/* One collective call as the agreement sees it (call.c): its kind and arguments that must match
 * across ranks (n, x, y; their meaning depends on the kind), an array's shape when it has
 * more than one dimension (ndim, dims; ndim 0 otherwise), and their signature. Text is
 * made only when a message needs it (mt__call_describe), never on the fast path. */
#define MT__CALL_MAX_DIMS 8
typedef struct {
    int kind;
    int ndim;
    uint64_t n;
    int64_t x, y;
    uint64_t dims[MT__CALL_MAX_DIMS];
    uint64_t sig;
} mt__call;

/* Fill call (no shape); the signature covers kind, n, x and y. */
void mt__call_init(mt__call *call, int kind, uint64_t n, int64_t x, int64_t y);
/* Give call a shape of ndim (<= MT__CALL_MAX_DIMS) dimensions, mixed into its signature
 * when ndim > 1 (a 0-d or 1-d array signs as the plain call of its count). */
void mt__call_shape(mt__call *call, int ndim, const size_t *dims);
/* "allreduce(count=4, f64, sum)" and the like. */
void mt__call_describe(const mt__call *call, char *buf, size_t len);

typedef struct mt__comm {
    MPI_Comm comm;   /* private duplicate, MPI_ERRORS_RETURN */
    int rank, size;
    uint64_t seq;    /* agreements passed so far, equal on every rank */
} mt__comm;

/* Collective over parent: duplicate it with MPI_ERRORS_RETURN. */
int mt__comm_create(mt__comm **out, MPI_Comm parent);
void mt__comm_destroy(mt__comm **c);

/*
 * The agreement step (collective over c). Every rank passes its local status (0 or a
 * negative code with the message in mt_last_error) and its call. All ranks return:
 *  - 0 when every rank was OK and in the same call with the same signature;
 *  - when any rank failed: the lowest failing rank its own code, every other rank
 *    MT_EPEER with "rank N failed: <its message>". A rank whose status is itself a
 *    consequence of another's failure (MT_EPEER, MT_EMISMATCH) wins only when no rank
 *    has an error of its own;
 *  - otherwise, when calls differ: MT_EMISMATCH on every rank, naming both calls.
 * who (may be NULL) receives the rank whose error won (-1 when none) and its code.
 */
typedef struct {
    int rank;                 /* -1 when no rank failed */
    int code;
    char msg[MT__MSG_LEN];    /* the winner's message, the same on every rank */
} mt__winner;
int mt__agree(mt__comm *c, const mt__call *call, int status, mt__winner *who);
/* The same, also giving every rank the maximum over ranks of each of values[0..n) (in and
 * out; n <= 2). */
int mt__agree_max(mt__comm *c, const mt__call *call, int status, mt__winner *who,
                  int64_t *values, int nvalues);

/*
 * A payload that travels in the agreement's own message and is combined there (agree.c,
 * combine.c): the data of a small allreduce (MT__PAY_REDUCE: count elements of dtype,
 * reduced by op) or a report's statistics (MT__PAY_STATS: count quads {min, max, sum, n};
 * MT__PAY_TRIPLES: count triples {min, max, sum} without the ranks' count, so that 7 and 8
 * keys fit: a rank without a finite value gives {+inf, -inf, NaN}, so a combined sum is
 * NaN when some rank lacked the key, and the caller then reduces the whole statistics,
 * counts included, in a step of their own).
 * At most MT__AGREE_PAYLOAD bytes. Every rank in the same call passes the same
 * description; buf is this rank's contribution (read only when its status is OK) and
 * receives the combined result when the agreement is OK (untouched otherwise).
 */
#define MT__AGREE_PAYLOAD 192
/* The agreement's point-to-point messages on a mt__comm (agree.c); no other message there
 * uses it. */
#define MT__TAG_AGREE 7100
enum { MT__PAY_NONE = 0, MT__PAY_REDUCE, MT__PAY_STATS, MT__PAY_TRIPLES };
typedef struct {
    int kind, dtype, op;
    size_t count;
    void *buf;
} mt__payload;
/* Its size in bytes (SIZE_MAX for a description no frame holds). */
size_t mt__payload_bytes(const mt__payload *p);
/* mt__agree_max, with p combined across ranks in the same message (p may be NULL). */
int mt__agree_carry(mt__comm *c, const mt__call *call, int status, mt__winner *who,
                    int64_t *values, int nvalues, mt__payload *p);

/* The combining rules (combine.c): b[i] = a[i] op b[i] for n elements of dtype (op
 * MT_SUM and MT_MEAN sum); the statistics' quads; a rank's quad for a value (present:
 * the rank has the key as a number); the same for the frame's triples. */
void mt__combine_reduce(const void *a, void *b, size_t n, int dtype, int op);
void mt__combine_stats(const double *a, double *b, size_t keys);
void mt__combine_triples(const double *a, double *b, size_t keys);
/* (inline: every report fills one per key on every rank) */
static inline void mt__stats_fill(double *quad, bool present, double v)
{
    bool ok = present && isfinite(v);
    quad[0] = ok ? v : INFINITY;
    quad[1] = ok ? v : -INFINITY;
    quad[2] = ok ? v : 0;
    quad[3] = ok ? 1 : 0;
}
static inline void mt__triple_fill(double *t, bool present, double v)
{
    bool ok = present && isfinite(v);
    t[0] = ok ? v : INFINITY;
    t[1] = ok ? v : -INFINITY;
    t[2] = ok ? v : NAN;
}
/* Collective over c: the statistics' quads (keys of them) combined over ranks into rank
 * 0's quads (one MPI_Reduce; other ranks' quads are left as they were). Called only
 * after an OK agreement on the keys. */
int mt__reduce_stats(mt__comm *c, double *quads, size_t keys);

/*
 * The agreement of a set-up step over any communicator (collective over comm), for steps
 * before a mt__comm exists: local work that can fail on one rank (an allocation) comes
 * first, then this, and only then the set-up's own collectives (MPI_Comm_dup...), so no
 * rank enters them alone. Returns status on a failing rank, MT_EPEER ("rank N failed: ...")
 * on the others, 0 when every rank passed 0.
 */
int mt__agree_setup(MPI_Comm comm, int status);

/*
 * The exit agreement a rank makes when it leaves a training function: it repeats the
 * agreement until every rank has reached its exit too, answering the collectives that
 * other ranks are still in with this rank's status (so they fail with MT_EPEER or
 * MT_EMISMATCH instead of hanging). Returns the final agreed code; on error the winning
 * rank in *who and its message in mt_last_error.
 */
int mt__agree_exit(mt__comm *c, int kind, int status, mt__winner *who);


/* Typed collectives (see mpitrain.h for the contracts). */
int mt__allreduce(mt__comm *c, void *buf, size_t count, mt_dtype t, mt_op op);
int mt__broadcast(mt__comm *c, void *buf, size_t count, mt_dtype t, int root);
int mt__allgather(mt__comm *c, const void *send, void *recv, size_t count, mt_dtype t);
/* The same with the array's shape agreed too (ndim 0 to 8 dimensions, count their product;
 * ndim 0 is one element): the _nd calls of mpitrain.h. */
int mt__allreduce_nd(mt__comm *c, void *buf, int ndim, const size_t *dims, mt_dtype t,
                     mt_op op);
int mt__broadcast_nd(mt__comm *c, void *buf, int ndim, const size_t *dims, mt_dtype t,
                     int root);
int mt__allgather_nd(mt__comm *c, const void *send, void *recv, int ndim, const size_t *dims,
                     mt_dtype t);
int mt__barrier(mt__comm *c);
/* Test hook: split data collectives into chunks of n elements (0 = INT_MAX). */
void mt__set_chunk_elems(size_t n);
/* Test hook: the largest allreduce (bytes) whose data travels in its agreement's message
 * (default and at most MT__AGREE_PAYLOAD; 0: always a separate data step). Every rank
 * must set the same. */
void mt__set_fold_bytes(size_t n);

/* Where this rank sits (collective over c). */
typedef struct {
    int local_rank, local_size;  /* among the ranks of this node */
    int node_rank, num_nodes;    /* nodes ordered by their lowest rank */
} mt__topology;
int mt__topology_get(mt__comm *c, mt__topology *out);
/* The same, also handing out the node's communicator (ranks ordered as in c; the
 * caller frees it) in *node, or MPI_COMM_NULL on an error. */
int mt__topology_node(mt__comm *c, mt__topology *out, MPI_Comm *node);

/* Where this rank waits, for the stall watchdog (position.c): in the data movement of the
 * call last agreed, or for what it started (the runtime waiting for its checkpoint
 * commit's thread). A thread that called mt__watch_quiet moves data on a communicator of
 * its own while this rank goes on (that commit thread): its waits are not where this rank
 * is, and are not recorded. */
void mt__watch_data(void);
void mt__watch_leave(void);
void mt__watch_quiet(void);

/* Byte movement inside an agreed collective (stream.c). */
int mt__gather_bytes(mt__comm *c, const void *send, size_t len, char **all, size_t **lens);
int mt__bcast_bytes(mt__comm *c, void *buf, size_t len, int root);
int mt__stream_send(mt__comm *c, int to, const void *data, size_t len, size_t chunk);
/* One piece of a stream (at most INT_MAX bytes) started, and its wait (off the CPU after a
 * short spin, as mt__stream_send waits): the sender works on while the piece moves. */
int mt__stream_isend(mt__comm *c, int to, const void *data, size_t len, MPI_Request *r);
int mt__stream_wait(mt__comm *c, MPI_Request *r);
/* Rank 0 tells every other rank it is done (mt__stream_done); the others wait for that
 * without holding a CPU (mt__stream_await), so they do not spin while rank 0 writes. */
int mt__stream_done(mt__comm *c);
int mt__stream_await(mt__comm *c);
/* Receives len bytes from `from` in pieces of at most chunk bytes, alternately into buf[0]
 * and buf[1] (chunk bytes each; the same buffer twice for one), calling consume for each
 * piece: a consumer may go on using one piece while the next arrives in the other buffer,
 * as long as it is done with a buffer when its consume call for the piece after returns.
 * After consume fails, drains the rest (alternating the same way). */
int mt__stream_recv(mt__comm *c, int from, size_t len, void *const buf[2], size_t chunk,
                    int (*consume)(const void *piece, size_t n, size_t offset, void *arg),
                    void *arg);

/* Gradient fusion (the rest of its API is public). o may be NULL (defaults). */
int mt__fusion_create_opts(mt__comm *c, const mt_fusion_options *o, mt_fusion **out);
int mt__fusion_create(mt__comm *c, size_t bucket_bytes, mt_fusion **out);
/* The communicator f was made on is gone (its fit returned): from now on f's calls are
 * MT_EINVAL; mt_fusion_destroy still frees it. */
void mt__fusion_orphan(mt_fusion *f);
/* Test hooks: split bucket reductions into chunks of n floats; count buckets. */
void mt__fusion_set_chunk(size_t n);
int mt__fusion_buckets(const mt_fusion *f);
/* Test hook: buckets that pack into a buffer (the others are reduced in place). */
int mt__fusion_packed_buckets(const mt_fusion *f);
/* Test hook: reductions go through the node's shared-memory segment (fusion_shm.c). */
bool mt__fusion_shared(const mt_fusion *f);
/* Test hook: buckets reduced straight from the blocks of mt_fusion_alloc. */
int mt__fusion_block_buckets(const mt_fusion *f);

#endif
