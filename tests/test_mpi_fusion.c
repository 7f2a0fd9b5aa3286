/*
 * test_mpi_fusion.c -- under mpirun at 1 to 4 ranks, and under node layouts faked with
 * MT_NODE_KEY (tests/fusion_nodes.sh) and across emulated nodes: gradient fusion with
 * uneven tensor sizes, tensors larger than a bucket, zero-size tensors, every ready order,
 * chunked reductions, registration mismatches and failures on one rank; through shared
 * memory (the default on one node), through MPI_Allreduce (flat) and hierarchically; the
 * blocks of mt_fusion_alloc reduced in place, mixed with ordinary tensors; fp16 and bf16
 * on the wire; the algorithm knobs, auto's choice, set-up failures on one rank, and the
 * sleeping wait's polls falling as a wait lasts.
 */
#include "harness.h"

#include "../collectives/fusion_backend.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

static mt__comm *comm(void)
{
    mt__comm *c = NULL;
    CU_ASSERT_EQUAL_FATAL(mt__comm_create(&c, MPI_COMM_WORLD), MT_OK);
    return c;
}

static float val(int rank, int tensor, size_t i, int step)
{
    return (float)((rank + 1) * 0.5 + tensor * 3 + (double)(i % 13) + step);
}

/* mean over ranks of val() */
static float mean_val(int size, int tensor, size_t i, int step)
{
    double s = 0;
    for (int r = 0; r < size; r++)
        s += val(r, tensor, i, step);
    return (float)(s / size);
}

typedef struct {
    int n;
    size_t *sizes;
    float **data;
    int *idx;
} tensors;

static tensors make(const size_t *sizes, int n)
{
    tensors t = {n, malloc((size_t)n * sizeof(size_t)), calloc((size_t)n, sizeof(float *)),
                 calloc((size_t)n, sizeof(int))};
    memcpy(t.sizes, sizes, (size_t)n * sizeof(size_t));
    for (int k = 0; k < n; k++)
        t.data[k] = sizes[k] ? malloc(sizes[k] * sizeof(float)) : NULL;
    return t;
}

static void fill(tensors *t, int rank, int step)
{
    for (int k = 0; k < t->n; k++)
        for (size_t i = 0; i < t->sizes[k]; i++)
            t->data[k][i] = val(rank, k, i, step);
}

/* Elements off the expected mean, plus 1 when the ranks do not hold bit-identical
 * results (a hash of every tensor's bytes compared across ranks). Collective. */
static int wrong(const tensors *t, int size, int step)
{
    int bad = 0;
    unsigned long long h = 1469598103934665603ull; /* FNV-1a */
    for (int k = 0; k < t->n; k++)
        for (size_t i = 0; i < t->sizes[k]; i++) {
            float want = mean_val(size, k, i, step), got = t->data[k][i];
            if (got < want - 1e-4f * (1 + want) || got > want + 1e-4f * (1 + want))
                bad++;
            const unsigned char *p = (const unsigned char *)&t->data[k][i];
            for (size_t j = 0; j < sizeof got; j++)
                h = (h ^ p[j]) * 1099511628211ull;
        }
    unsigned long long lo = h, hi = h;
    MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
    return bad + (lo != hi);
}

static void release(tensors *t)
{
    for (int k = 0; k < t->n; k++)
        free(t->data[k]);
    free(t->data);
    free(t->sizes);
    free(t->idx);
}

/* The nodes as the library sees them: equal MT_NODE_KEY where any rank has it (the
 * others their host name), else host names. Collective. */
typedef struct {
    int num_nodes, most; /* nodes, most ranks on one */
} nodes_t;

static nodes_t nodes(void)
{
    enum { LEN = 256 };
    int any = getenv("MT_NODE_KEY") != NULL, size = mt_test_size();
    MPI_Allreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    char mine[LEN] = {0};
    if (getenv("MT_NODE_KEY"))
        snprintf(mine, sizeof mine, "%s", getenv("MT_NODE_KEY"));
    else
        gethostname(mine, LEN - 1);
    char *all = calloc((size_t)size, LEN);
    MPI_Allgather(mine, LEN, MPI_CHAR, all, LEN, MPI_CHAR, MPI_COMM_WORLD);
    nodes_t n = {0, 0};
    for (int r = 0; r < size; r++) {
        int same = 0, first = 1;
        for (int q = 0; q < size; q++) {
            bool eq = !strcmp(all + (size_t)q * LEN, all + (size_t)r * LEN);
            same += eq;
            first &= !(eq && q < r);
        }
        n.num_nodes += first;
        n.most = same > n.most ? same : n.most;
    }
    free(all);
    return n;
}

/* What mt_fusion_algo_name says right after creation, by the rule in mpitrain.h, for
 * the options' algorithm `asked` (auto: the environment's). Collective. */
static const char *expected_algo(int size, mt_fusion_algo asked)
{
    static const char *const names[] = {"auto", "flat", "shm", "hier"};
    const char *algo = asked ? names[asked] : getenv("MT_FUSION_ALGO");
    const char *shm = getenv("MT_FUSION_SHM");
    nodes_t n = nodes();
    if (size == 1)
        return "none";
    if (algo && strcmp(algo, "auto"))
        return !strcmp(algo, "flat") ? "mpi" : algo;
    if (shm && !strcmp(shm, "0"))
        return "mpi";
    return n.num_nodes == 1 ? "shm" : n.most > 1 ? "auto" : "mpi";
}

/* Whether every rank holds the same text. Collective. */
static bool same_everywhere(const char *text)
{
    unsigned long long h = 1469598103934665603ull, lo, hi;
    for (const char *p = text ? text : ""; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    MPI_Allreduce(&h, &lo, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&h, &hi, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
    return lo == hi;
}

/* After the registration check: a decided algorithm, the same on every rank. */
static void assert_decided(const mt_fusion *f, int size, mt_fusion_algo asked)
{
    const char *name = mt_fusion_algo_name(f), *want = expected_algo(size, asked);
    if (!strcmp(want, "auto")) {
        CU_ASSERT(!strcmp(name, "mpi") || !strcmp(name, "hier"));
    } else
        MT_ASSERT_STR_EQ(name, want);
    CU_ASSERT(same_everywhere(name));
}

static mt_fusion *fusion_of(mt__comm *c, tensors *t, size_t bucket_bytes)
{
    mt_fusion *f = NULL;
    int created = mt__fusion_create(c, bucket_bytes, &f);
    if (created)
        fprintf(stderr, "mt__fusion_create: %s\n", mt_last_error());
    CU_ASSERT_EQUAL_FATAL(created, MT_OK);
    /* the algorithm the layout and the knobs call for (a silent fallback would leave
     * that path untested) */
    MT_ASSERT_STR_EQ(mt_fusion_algo_name(f), expected_algo(c->size, MT_FUSION_AUTO));
    for (int k = 0; k < t->n; k++) {
        t->idx[k] = mt_fusion_add(f, t->data[k], t->sizes[k]);
        MT_ASSERT_INT_EQ(t->idx[k], k);
    }
    return f;
}

static void test_uneven_sizes_and_big_tensors(void)
{
    mt__comm *c = comm();
    size_t sizes[] = {1, 1000, 3, 0, 5000, 7, 70000, 0, 2};
    tensors t = make(sizes, 9);
    mt_fusion *f = fusion_of(c, &t, 16384); /* 4096 floats a bucket */
    for (int step = 0; step < 3; step++) {
        fill(&t, c->rank, step);
        for (int k = 0; k < t.n; k++)
            MT_ASSERT_INT_EQ(mt_fusion_ready(f, k), MT_OK);
        MT_ASSERT_INT_EQ(mt_fusion_wait(f), MT_OK);
        MT_ASSERT_INT_EQ(wrong(&t, c->size, step), 0);
        assert_decided(f, c->size, MT_FUSION_AUTO);
    }
    /* {1,1000,3,0} {5000} {7} {70000} {0,2}: a big tensor closes its own bucket */
    MT_ASSERT_INT_EQ(mt__fusion_buckets(f), 5);
    mt_fusion_destroy(&f);
    CU_ASSERT_PTR_NULL(f);
    release(&t);
    mt__comm_destroy(&c);
}

/* Tensors cut from one allocation, registered in address order, are reduced in place;
 * registered out of order they are packed; both average correctly. */
static void block_case(mt__comm *c, bool in_order)
{
    size_t sizes[] = {100, 0, 250, 4000, 7, 60000}, total = 0;
    for (int k = 0; k < 6; k++)
        total += sizes[k];
    float *block = malloc(total * sizeof(float));
    tensors t = {6, sizes, calloc(6, sizeof(float *)), calloc(6, sizeof(int))};
    size_t off = 0;
    for (int k = 0; k < 6; k++) {
        t.data[k] = block + off;
        off += sizes[k];
    }
    if (!in_order) { /* tensors 3 and 4 swap places in memory: {4000, 7} is not end to end */
        t.data[4] = block + 350;
        t.data[3] = block + 357;
    }
    mt_fusion *f = fusion_of(c, &t, 16384); /* {100, 0, 250} {4000, 7} {60000} */
    for (int step = 0; step < 3; step++) {
        fill(&t, c->rank, step);
        for (int k = 5; k >= 0; k--)
            MT_ASSERT_INT_EQ(mt_fusion_ready(f, k), MT_OK);
        MT_ASSERT_INT_EQ(mt_fusion_wait(f), MT_OK);
        MT_ASSERT_INT_EQ(wrong(&t, c->size, step), 0);
    }
    MT_ASSERT_INT_EQ(mt__fusion_buckets(f), 3);
    /* packing happens only for MPI_Allreduce (shared memory copies from the tensors) */
    bool packs = !in_order && !strcmp(mt_fusion_algo_name(f), "mpi");
    MT_ASSERT_INT_EQ(mt__fusion_packed_buckets(f), packs ? 1 : 0);
    mt_fusion_destroy(&f);
    free(t.data);
    free(t.idx);
    free(block);
}

static void test_tensors_in_one_block(void)
{
    mt__comm *c = comm();
    block_case(c, true);
    block_case(c, false);
    mt__comm_destroy(&c);
}

static void next_permutation(int *p, int n)
{
    int i = n - 2;
    while (i >= 0 && p[i] >= p[i + 1])
        i--;
    if (i < 0) { /* wrap to the first permutation */
        for (int a = 0, b = n - 1; a < b; a++, b--) { int x = p[a]; p[a] = p[b]; p[b] = x; }
        return;
    }
    int j = n - 1;
    while (p[j] <= p[i])
        j--;
    int x = p[i]; p[i] = p[j]; p[j] = x;
    for (int a = i + 1, b = n - 1; a < b; a++, b--) { x = p[a]; p[a] = p[b]; p[b] = x; }
}

static void test_every_ready_order(void)
{
    mt__comm *c = comm();
    size_t sizes[] = {300, 700, 1200, 50};
    tensors t = make(sizes, 4);
    mt_fusion *f = fusion_of(c, &t, 4096); /* 1024 floats: buckets {300,700} {1200} {50} */
    int order[4] = {0, 1, 2, 3};
    for (int r = 0; r < c->rank; r++) /* each rank starts from a different permutation */
        next_permutation(order, 4);
    for (int step = 0; step < 24; step++) {
        fill(&t, c->rank, step);
        int marked = step % 5 == 4 ? 2 : 4; /* sometimes leave tensors to the wait */
        for (int k = 0; k < marked; k++)
            MT_ASSERT_INT_EQ(mt_fusion_ready(f, order[k]), MT_OK);
        MT_ASSERT_INT_EQ(mt_fusion_wait(f), MT_OK);
        MT_ASSERT_INT_EQ(wrong(&t, c->size, step), 0);
        next_permutation(order, 4);
    }
    mt_fusion_destroy(&f);
    release(&t);
    mt__comm_destroy(&c);
}

static void test_chunked_reductions(void)
{
    mt__comm *c = comm();
    size_t sizes[] = {1001, 10, 250};
    tensors t = make(sizes, 3);
    mt__fusion_set_chunk(97);
    mt_fusion *f = fusion_of(c, &t, 1024);
    fill(&t, c->rank, 1);
    MT_ASSERT_INT_EQ(mt_fusion_wait(f), MT_OK);
    MT_ASSERT_INT_EQ(wrong(&t, c->size, 1), 0);
    mt_fusion_destroy(&f);
    mt__fusion_set_chunk(0);
    release(&t);
    mt__comm_destroy(&c);
}

static void test_registration_mismatch(void)
{
    if (mt_test_size() < 2)
        return;
    mt__comm *c = comm();
    size_t sizes[] = {10, 20, 30};
    tensors t = make(sizes, c->rank == c->size - 1 ? 3 : 2); /* last rank has one more */
    mt_fusion *f = fusion_of(c, &t, 0);
    fill(&t, c->rank, 0);
    int rc = c->rank == 0 ? mt_fusion_ready(f, 0) : mt_fusion_wait(f);
    MT_ASSERT_INT_EQ(rc, MT_EMISMATCH);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "fusion-check(tensors=2, floats=30");
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "fusion-check(tensors=3, floats=60");
    mt_fusion_destroy(&f);
    release(&t);
    /* same count, different size */
    size_t a[] = {10, 20}, b[] = {10, 21};
    t = make(c->rank == 1 ? b : a, 2);
    f = fusion_of(c, &t, 0);
    fill(&t, c->rank, 0);
    MT_ASSERT_INT_EQ(mt_fusion_wait(f), MT_EMISMATCH);
    mt_fusion_destroy(&f);
    release(&t);
    mt__comm_destroy(&c);
}

static void test_errors_on_one_rank(void)
{
    mt__comm *c = comm();
    int victim = c->size > 1 ? 1 : 0;
    size_t sizes[] = {100, 100, 100};
    tensors t = make(sizes, 3);
    mt_fusion *f = fusion_of(c, &t, 400); /* one tensor a bucket */
    fill(&t, c->rank, 0);
    MT_ASSERT_INT_EQ(mt_fusion_ready(f, 0), MT_OK);
    if (c->rank == victim) {
        MT_ASSERT_INT_EQ(mt_fusion_ready(f, 7), MT_EINVAL);
        MT_ASSERT_STR_CONTAINS(mt_last_error(), "index 7 is not a tensor (have 3)");
        MT_ASSERT_INT_EQ(mt_fusion_ready(f, 0), MT_EINVAL);
        MT_ASSERT_STR_CONTAINS(mt_last_error(), "tensor 0 marked ready twice");
        MT_ASSERT_INT_EQ(mt_fusion_add(f, t.data[0], 1), MT_EINVAL);
        MT_ASSERT_STR_CONTAINS(mt_last_error(), "must be added before the first");
    } else {
        MT_ASSERT_INT_EQ(mt_fusion_ready(f, 1), MT_OK);
    }
    int rc = mt_fusion_wait(f);
    MT_ASSERT_INT_EQ(rc, c->rank == victim ? MT_EINVAL : MT_EPEER);
    if (c->rank != victim)
        MT_ASSERT_STR_CONTAINS(mt_last_error(), "rank 1 failed: mt_fusion_ready: index 7");
    /* the fusion is usable again: the next step is right */
    fill(&t, c->rank, 5);
    MT_ASSERT_INT_EQ(mt_fusion_wait(f), MT_OK);
    MT_ASSERT_INT_EQ(wrong(&t, c->size, 5), 0);
    mt_fusion_destroy(&f);
    release(&t);
    /* the communicator still works: nothing is left hanging on it */
    double x = 1;
    MT_ASSERT_INT_EQ(mt__allreduce(c, &x, 1, MT_F64, MT_SUM), MT_OK);
    MT_ASSERT_INT_EQ((int)x, c->size);
    mt__comm_destroy(&c);
}

/* A fusion destroyed on one rank in the middle of a step while the others wait for it
 * (the destroying rank having marked no tensor, some, or all of them ready): every rank
 * learns it at the step's agreement, the others' mt_fusion_wait with MT_EMISMATCH naming
 * both calls, the buckets any rank handed over are completed (none is left inside a
 * reduction, so the job never ends by the watchdog), the others' fusions can only be
 * destroyed, locally, and the communicator and a new fusion work. */
static void test_destroyed_mid_step(void)
{
    if (mt_test_size() < 2)
        return;
    mt__comm *c = comm();
    int victim = c->size - 1;
    size_t sizes[] = {100, 100, 100, 100};
    for (int marked = 0; marked <= 4; marked += 2) {
        tensors t = make(sizes, 4);
        mt_fusion *f = fusion_of(c, &t, 400); /* one tensor a bucket */
        fill(&t, c->rank, 0);
        MT_ASSERT_INT_EQ(mt_fusion_wait(f), MT_OK); /* registered: a step ran */
        fill(&t, c->rank, 1);
        if (c->rank == victim) {
            for (int i = 0; i < marked; i++)
                MT_ASSERT_INT_EQ(mt_fusion_ready(f, i), MT_OK);
            mt_fusion_destroy(&f);
            CU_ASSERT_PTR_NULL(f);
        } else {
            for (int i = 0; i < 3; i++) /* three buckets handed to the thread */
                MT_ASSERT_INT_EQ(mt_fusion_ready(f, i), MT_OK);
            MT_ASSERT_INT_EQ(mt_fusion_wait(f), MT_EMISMATCH);
        }
        MT_ASSERT_STR_CONTAINS(mt_last_error(), "fusion-destroy(tensors=4)");
        MT_ASSERT_STR_CONTAINS(mt_last_error(), "fusion-wait(tensors=4)");
        if (f) {
            MT_ASSERT_INT_EQ(mt_fusion_wait(f), MT_EINVAL);
            MT_ASSERT_STR_CONTAINS(mt_last_error(), "another rank destroyed this fusion");
            MT_ASSERT_INT_EQ(mt_fusion_ready(f, 0), MT_EINVAL);
            mt_fusion_destroy(&f); /* local now: the victim is not there */
        }
        double x = 1;
        MT_ASSERT_INT_EQ(mt__allreduce(c, &x, 1, MT_F64, MT_SUM), MT_OK);
        MT_ASSERT_INT_EQ((int)x, c->size);
        f = fusion_of(c, &t, 400);
        fill(&t, c->rank, 2);
        MT_ASSERT_INT_EQ(mt_fusion_wait(f), MT_OK);
        MT_ASSERT_INT_EQ(wrong(&t, c->size, 2), 0);
        /* every rank destroys it after a ready: the buckets handed over are completed */
        MT_ASSERT_INT_EQ(mt_fusion_ready(f, c->rank % 4), MT_OK);
        mt_fusion_destroy(&f);
        release(&t);
    }
    mt__comm_destroy(&c);
}

static void test_bucket_size_from_environment(void)
{
    mt__comm *c = comm();
    mt_fusion *f = NULL;
    setenv("MT_FUSION_BYTES", "lots", 1);
    /* an agreed failure: rank 0's own, the others' MT_EPEER naming it */
    MT_ASSERT_INT_EQ(mt__fusion_create(c, 0, &f), c->rank == 0 ? MT_EINVAL : MT_EPEER);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "MT_FUSION_BYTES must be a positive number of bytes (got 'lots')");
    CU_ASSERT_PTR_NULL(f);
    setenv("MT_FUSION_BYTES", "40", 1); /* 10 floats a bucket */
    size_t sizes[] = {6, 6, 6};
    tensors t = make(sizes, 3);
    f = fusion_of(c, &t, 0);
    MT_ASSERT_INT_EQ(mt__fusion_buckets(f), 3);
    unsetenv("MT_FUSION_BYTES");
    fill(&t, c->rank, 2);
    MT_ASSERT_INT_EQ(mt_fusion_wait(f), MT_OK);
    MT_ASSERT_INT_EQ(wrong(&t, c->size, 2), 0);
    mt_fusion_destroy(&f);
    release(&t);
    MT_ASSERT_INT_EQ(mt_fusion_add(NULL, NULL, 0), MT_EINVAL);
    MT_ASSERT_INT_EQ(mt_fusion_ready(NULL, 0), MT_EINVAL);
    MT_ASSERT_INT_EQ(mt_fusion_wait(NULL), MT_EINVAL);
    mt__comm_destroy(&c);
}

/* The same cases with buckets through MPI_Allreduce instead of shared memory. */
static void test_mpi_allreduce_path(void)
{
    setenv("MT_FUSION_SHM", "0", 1);
    test_tensors_in_one_block();
    test_uneven_sizes_and_big_tensors();
    test_every_ready_order();
    test_chunked_reductions();
    test_errors_on_one_rank();
    unsetenv("MT_FUSION_SHM");
}

/* ------------------------------------------------------------ blocks of mt_fusion_alloc */

/* Name after creation that shares memory: blocks there are reduced in place. */
static bool shares_memory(const mt_fusion *f)
{
    const char *n = mt_fusion_algo_name(f);
    return !strcmp(n, "shm") || !strcmp(n, "hier");
}

static mt_fusion *create_opts(mt__comm *c, mt_fusion_options o)
{
    mt_fusion *f = NULL;
    int rc = mt__fusion_create_opts(c, &o, &f);
    if (rc)
        fprintf(stderr, "mt__fusion_create_opts: %s\n", mt_last_error());
    CU_ASSERT_EQUAL_FATAL(rc, MT_OK);
    return f;
}

/* The model's way: one block for every tensor, each a slice of it, registered (and marked
 * ready) last first; `outside` tensors are ordinary memory instead. Three steps, each the
 * exact mean (integer-valued floats), the same bits on every rank; `blocks` of the
 * buckets must go straight through the blocks when the algorithm shares memory. */
static void block_steps(mt__comm *c, mt_fusion_options o, const size_t *sizes, int n,
                        const bool *outside, int blocks)
{
    mt_fusion *f = create_opts(c, o);
    size_t total = 0;
    for (int k = 0; k < n; k++)
        total += outside && outside[k] ? 0 : sizes[k];
    float *blk = NULL;
    MT_ASSERT_INT_EQ(mt_fusion_alloc(f, total, &blk), MT_OK);
    CU_ASSERT_PTR_NOT_NULL_FATAL(blk);
    MT_ASSERT_INT_EQ((uintptr_t)blk % 64, 0);
    size_t nonzero = 0;
    for (size_t i = 0; i < total; i++)
        nonzero += blk[i] != 0.0f;
    MT_ASSERT_INT_EQ(nonzero, 0);
    tensors t = {n, (size_t *)sizes, calloc((size_t)n, sizeof(float *)),
                 calloc((size_t)n, sizeof(int))};
    float **own = calloc((size_t)n, sizeof *own);
    size_t off = 0;
    for (int k = n - 1; k >= 0; k--) { /* the last tensor first in the block */
        if (outside && outside[k])
            t.data[k] = own[k] = malloc(sizes[k] * sizeof(float) + 1);
        else {
            t.data[k] = blk + off;
            off += sizes[k];
        }
    }
    for (int k = n - 1; k >= 0; k--)
        MT_ASSERT_INT_EQ(mt_fusion_add(f, t.data[k], sizes[k]), n - 1 - k);
    for (int step = 0; step < 3; step++) {
        fill(&t, c->rank, step);
        for (int k = 0; k < n; k++) /* index n-1-k is tensor k */
            MT_ASSERT_INT_EQ(mt_fusion_ready(f, n - 1 - k), MT_OK);
        MT_ASSERT_INT_EQ(mt_fusion_wait(f), MT_OK);
        MT_ASSERT_INT_EQ(wrong(&t, c->size, step), 0);
    }
    assert_decided(f, c->size, o.algo);
    MT_ASSERT_INT_EQ(mt__fusion_block_buckets(f), shares_memory(f) ? blocks : 0);
    mt_fusion_destroy(&f); /* frees blk */
    for (int k = 0; k < n; k++)
        free(own[k]);
    free(own);
    free(t.data);
    free(t.idx);
}

/* Every algorithm (auto, flat, shm where one node, hier), one block for all tensors and
 * blocks mixed with ordinary tensors, in buckets of 4096 floats: {2, 0, 900} {3500}
 * {20000} {100}, the last tensor first. */
static void test_alloc_in_place(void)
{
    mt__comm *c = comm();
    size_t sizes[] = {100, 20000, 3500, 900, 0, 2};
    int per_bucket = c->size > 1 ? 4 : 0;
    nodes_t n = nodes();
    for (int a = MT_FUSION_AUTO; a <= MT_FUSION_HIER; a++) {
        if (a == MT_FUSION_SHM && n.num_nodes > 1)
            continue;
        mt_fusion_options o = {.bucket_bytes = 16384, .algo = (mt_fusion_algo)a};
        block_steps(c, o, sizes, 6, NULL, per_bucket);
        /* {2, 0, 900} has an ordinary tensor, {100} is one: those two buckets are copied */
        bool outside[] = {true, false, false, false, false, true};
        block_steps(c, o, sizes, 6, outside, c->size > 1 ? 2 : 0);
        /* chunked: hier's result areas take the bucket in pieces of 997 floats */
        if (a == MT_FUSION_HIER) {
            mt__fusion_set_chunk(997);
            block_steps(c, o, sizes, 6, NULL, per_bucket);
            mt__fusion_set_chunk(0);
        }
    }
    mt__comm_destroy(&c);
}

/* Tensors at other offsets of their blocks on one rank: every bucket goes the copying
 * way on every rank (not an error), and the averages are still right. */
static void test_alloc_layouts_differ(void)
{
    if (mt_test_size() < 2)
        return;
    mt__comm *c = comm();
    mt_fusion *f = create_opts(c, (mt_fusion_options){.bucket_bytes = 400});
    size_t sizes[] = {50, 60};
    float *blk = NULL;
    MT_ASSERT_INT_EQ(mt_fusion_alloc(f, 200, &blk), MT_OK);
    tensors t = {2, sizes, calloc(2, sizeof(float *)), calloc(2, sizeof(int))};
    t.data[0] = blk + (c->rank == 1 ? 100 : 0);
    t.data[1] = blk + (c->rank == 1 ? 0 : 100);
    for (int k = 0; k < 2; k++)
        MT_ASSERT_INT_EQ(mt_fusion_add(f, t.data[k], sizes[k]), k);
    fill(&t, c->rank, 4);
    MT_ASSERT_INT_EQ(mt_fusion_wait(f), MT_OK);
    MT_ASSERT_INT_EQ(wrong(&t, c->size, 4), 0);
    MT_ASSERT_INT_EQ(mt__fusion_block_buckets(f), 0);
    mt_fusion_destroy(&f);
    free(t.data);
    free(t.idx);
    mt__comm_destroy(&c);
}

/* Bad calls are agreed: every rank returns, the failing one its own error; a fault on
 * one rank in the allocation (before and after its collectives) is MT_ENOMEM there and
 * MT_EPEER elsewhere; the fusion is usable afterwards. */
static void test_alloc_errors(void)
{
    mt__comm *c = comm();
    int victim = c->size > 1 ? 1 : 0;
    float *p = (float *)&p;
    MT_ASSERT_INT_EQ(mt_fusion_alloc(NULL, 10, &p), MT_EINVAL);
    mt_fusion *f = create_opts(c, (mt_fusion_options){0});
    MT_ASSERT_INT_EQ(mt_fusion_alloc(f, 0, &p), c->rank == 0 ? MT_EINVAL : MT_EPEER);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "count must be > 0");
    CU_ASSERT_PTR_NULL(p);
    MT_ASSERT_INT_EQ(mt_fusion_alloc(f, 10, c->rank == victim ? NULL : &p),
                     c->rank == victim ? MT_EINVAL : MT_EPEER);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "out is NULL");
    if (c->size > 1) {
        MT_ASSERT_INT_EQ(mt_fusion_alloc(f, c->rank == victim ? 11 : 10, &p), MT_EMISMATCH);
        MT_ASSERT_STR_CONTAINS(mt_last_error(), "fusion-alloc(floats=11)");
        MT_ASSERT_STR_CONTAINS(mt_last_error(), "fusion-alloc(floats=10)");
    }
    const char *sites[] = {"fusion-block", "fusion-block-memory"};
    for (int i = 0; i < 2; i++) {
        char spec[64];
        snprintf(spec, sizeof spec, "%s:%d", sites[i], victim);
        setenv("MT_TEST_FAIL_AT", spec, 1);
        int rc = mt_fusion_alloc(f, 1000, &p);
        unsetenv("MT_TEST_FAIL_AT");
        MT_ASSERT_INT_EQ(rc, c->rank == victim ? MT_ENOMEM : MT_EPEER);
        MT_ASSERT_STR_CONTAINS(mt_last_error(), "out of memory");
        if (c->rank != victim)
            MT_ASSERT_STR_CONTAINS(mt_last_error(), victim ? "rank 1 failed" : "rank 0");
        CU_ASSERT_PTR_NULL(p);
    }
    /* usable: a block, a tensor in it, a step */
    MT_ASSERT_INT_EQ(mt_fusion_alloc(f, 1000, &p), MT_OK);
    size_t sizes[] = {1000};
    tensors t = {1, sizes, &p, (int[]){0}};
    MT_ASSERT_INT_EQ(mt_fusion_add(f, p, 1000), 0);
    fill(&t, c->rank, 1);
    MT_ASSERT_INT_EQ(mt_fusion_wait(f), MT_OK);
    MT_ASSERT_INT_EQ(wrong(&t, c->size, 1), 0);
    /* after the registration check: too late for blocks */
    float *q = NULL;
    MT_ASSERT_INT_EQ(mt_fusion_alloc(f, 10, &q), c->rank == 0 ? MT_EINVAL : MT_EPEER);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "before the first mt_fusion_ready");
    mt_fusion_destroy(&f);
    mt__comm_destroy(&c);
}

/* ------------------------------------------------------------ compression */

static void test_wire_formats(void)
{
    struct { float f; uint16_t h; } f16[] = {
        {0.0f, 0x0000}, {-0.0f, 0x8000}, {1.0f, 0x3c00}, {-2.0f, 0xc000},
        {65504.0f, 0x7bff}, {65519.0f, 0x7bff}, {65520.0f, 0x7bff} /* RNE: inf; clamped */,
        {1e6f, 0x7bff}, {-1e6f, 0xfbff}, {FLT_MAX, 0x7bff}, {INFINITY, 0x7c00},
        {-INFINITY, 0xfc00}, {0x1p-14f, 0x0400}, {0x1p-24f, 0x0001},
        {0x1p-25f, 0x0000} /* a tie: to even */, {0x1.8p-25f, 0x0001}, {0x1p-30f, 0x0000},
        {1.0f + 0x1p-11f, 0x3c00} /* tie: even */, {1.0f + 0x3p-11f, 0x3c02} /* tie: even */,
        {1.0f + 0x1p-11f + 0x1p-20f, 0x3c01}, {0x1.ffcp-15f, 0x0400} /* rounds up to 2^-14 */,
    };
    for (size_t i = 0; i < sizeof f16 / sizeof *f16; i++)
        MT_ASSERT_INT_EQ(mt__wire_from_f32(MT_COMPRESS_FP16, f16[i].f), f16[i].h);
    struct { float f; uint16_t h; } b16[] = {
        {1.0f, 0x3f80}, {-1.0f, 0xbf80}, {1.0f + 0x1p-8f, 0x3f80} /* tie: even */,
        {1.0f + 0x3p-8f, 0x3f82}, {FLT_MAX, 0x7f7f} /* would round to inf: clamped */,
        {-FLT_MAX, 0xff7f}, {0x1.fep127f, 0x7f7f}, {INFINITY, 0x7f80}, {1e30f, 0x714a} /* 0x7149f2ca */,
        {0x1p-149f, 0x0000}, {65520.0f, 0x4780},
    };
    for (size_t i = 0; i < sizeof b16 / sizeof *b16; i++)
        MT_ASSERT_INT_EQ(mt__wire_from_f32(MT_COMPRESS_BF16, b16[i].f), b16[i].h);
    for (int k = MT_COMPRESS_FP16; k <= MT_COMPRESS_BF16; k++) {
        CU_ASSERT(isnan(mt__wire_to_f32(k, mt__wire_from_f32(k, NAN))));
        int wrong_trip = 0;
        for (uint32_t h = 0; h <= 0xffff; h++) { /* every 16-bit value decodes and comes back */
            float x = mt__wire_to_f32(k, (uint16_t)h);
            uint16_t back = mt__wire_from_f32(k, x);
            wrong_trip += isnan(x) ? !isnan(mt__wire_to_f32(k, back)) : back != h;
        }
        MT_ASSERT_INT_EQ(wrong_trip, 0);
    }
    MT_ASSERT_INT_EQ(mt__wire_to_f32(MT_COMPRESS_FP16, 0x0001) == 0x1p-24f, 1);
    MT_ASSERT_INT_EQ(mt__wire_to_f32(MT_COMPRESS_FP16, 0x7bff) == 65504.0f, 1);
    MT_ASSERT_INT_EQ(mt__wire_to_f32(MT_COMPRESS_BF16, 0x3f82) == 1.0f + 0x1p-6f, 1);
}

static float cval(int rank, int tensor, size_t i, bool exact)
{
    return (float)((rank + 1) * 0.25 + (double)(i % 7) + tensor % 3) +
           (exact ? 0.0f : 0x1p-10f * (float)(i % 5));
}

/* Compressed averages: with values every format holds exactly (and whose sums fp32 and
 * the 16-bit formats hold), the result is the fp32 mean rounded once to 16 bits, the
 * same bits on every rank; with values they do not hold, within the format's rounding
 * of the fp32 mean, and not all equal to it (the wire really carried 16 bits). Through
 * shared memory alone (shm) nothing is compressed. */
static void compressed_case(mt__comm *c, mt_fusion_algo a, mt_compression k, bool block,
                            size_t big)
{
    mt_fusion *f = create_opts(c, (mt_fusion_options){.bucket_bytes = 16384, .algo = a,
                                                      .compression = k});
    size_t sizes[] = {1000, 0, 5000, big, 3}, total = 0;
    for (int i = 0; i < 5; i++)
        total += sizes[i];
    float *blk = NULL;
    if (block)
        MT_ASSERT_INT_EQ(mt_fusion_alloc(f, total, &blk), MT_OK);
    tensors t = make(sizes, 5);
    size_t off = 0;
    for (int i = 0; block && i < 5; i++, off += sizes[i - 1]) {
        free(t.data[i]);
        t.data[i] = blk + off;
    }
    for (int i = 0; i < 5; i++)
        MT_ASSERT_INT_EQ(mt_fusion_add(f, t.data[i], sizes[i]), i);
    double tol = k == MT_COMPRESS_FP16 ? 0x1p-9 : 0x1p-6;
    for (int exact = 1; exact >= 0; exact--) {
        for (int i = 0; i < 5; i++)
            for (size_t j = 0; j < sizes[i]; j++)
                t.data[i][j] = cval(c->rank, i, j, exact);
        MT_ASSERT_INT_EQ(mt_fusion_wait(f), MT_OK);
        bool shm = !strcmp(mt_fusion_algo_name(f), "shm") || c->size == 1;
        int off_exact = 0, off_tol = 0, rounded = 0;
        unsigned long long h = 1469598103934665603ull, lo, hi;
        for (int i = 0; i < 5; i++)
            for (size_t j = 0; j < sizes[i]; j++) {
                float sum = 0; /* exact sums: the order does not matter */
                for (int r = 0; r < c->size; r++)
                    sum += cval(r, i, j, exact);
                float mean = sum * (1.0f / (float)c->size), got = t.data[i][j];
                float want = shm ? mean : mt__wire_to_f32(k, mt__wire_from_f32(k, mean));
                off_exact += exact && got != want;
                off_tol += fabs((double)got - mean) > tol * (fabs(mean) + 1);
                rounded += got != mean;
                uint32_t u;
                memcpy(&u, &got, sizeof u);
                h = (h ^ u) * 1099511628211ull;
            }
        MT_ASSERT_INT_EQ(off_exact, 0);
        MT_ASSERT_INT_EQ(off_tol, 0);
        if (!exact)
            MT_ASSERT_INT_EQ(rounded > 0, !shm);
        MPI_Allreduce(&h, &lo, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, MPI_COMM_WORLD);
        MPI_Allreduce(&h, &hi, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
        CU_ASSERT(lo == hi);
    }
    assert_decided(f, c->size, a);
    mt_fusion_destroy(&f);
    for (int i = 0; block && i < 5; i++)
        t.data[i] = NULL;
    release(&t);
}

static void test_compression(void)
{
    mt__comm *c = comm();
    nodes_t n = nodes();
    for (int a = MT_FUSION_AUTO; a <= MT_FUSION_HIER; a++)
        if (a != MT_FUSION_SHM || n.num_nodes == 1) { /* fp16 in tensors, bf16 in a block */
            compressed_case(c, (mt_fusion_algo)a, MT_COMPRESS_FP16, false, 20000);
            compressed_case(c, (mt_fusion_algo)a, MT_COMPRESS_BF16, true, 20000);
        }
    /* across nodes the exchange goes in pieces of 16384 values a rank, several in flight:
     * a bucket of 150000 */
    compressed_case(c, MT_FUSION_FLAT, MT_COMPRESS_FP16, true, 150000);
    /* a chunked network step: the 16-bit exchange in pieces */
    mt__fusion_set_chunk(997);
    compressed_case(c, MT_FUSION_FLAT, MT_COMPRESS_FP16, false, 20000);
    compressed_case(c, MT_FUSION_HIER, MT_COMPRESS_BF16, true, 20000);
    mt__fusion_set_chunk(0);
    mt__comm_destroy(&c);
}

/* ------------------------------------------------------------ the knobs and the choice */

/* MT_FUSION_ALGO forces each algorithm (the suite's cases again under each); the
 * options do the same and win over the environment. */
static void test_algo_from_environment(void)
{
    nodes_t n = nodes();
    const char *algos[] = {"flat", "shm", "hier", "auto"};
    for (int i = 0; i < 4; i++) {
        if (!strcmp(algos[i], "shm") && n.num_nodes > 1)
            continue;
        setenv("MT_FUSION_ALGO", algos[i], 1);
        test_tensors_in_one_block();
        test_uneven_sizes_and_big_tensors();
        test_chunked_reductions();
        unsetenv("MT_FUSION_ALGO");
    }
    if (mt_test_size() < 2)
        return;
    mt__comm *c = comm();
    setenv("MT_FUSION_ALGO", "hier", 1);
    mt_fusion *f = create_opts(c, (mt_fusion_options){.algo = MT_FUSION_FLAT});
    MT_ASSERT_STR_EQ(mt_fusion_algo_name(f), "mpi");
    mt_fusion_destroy(&f);
    unsetenv("MT_FUSION_ALGO");
    setenv("MT_FUSION_COMPRESS", "bf16", 1); /* a zero field takes the knob */
    size_t sizes[] = {1000};
    tensors t = make(sizes, 1);
    f = create_opts(c, (mt_fusion_options){.algo = MT_FUSION_FLAT});
    MT_ASSERT_INT_EQ(mt_fusion_add(f, t.data[0], 1000), 0);
    for (size_t j = 0; j < 1000; j++)
        t.data[0][j] = cval(c->rank, 0, j, false);
    MT_ASSERT_INT_EQ(mt_fusion_wait(f), MT_OK);
    float sum = 0;
    for (int r = 0; r < c->size; r++)
        sum += cval(r, 0, 999, false);
    float mean = sum * (1.0f / (float)c->size);
    MT_ASSERT_INT_EQ(t.data[0][999] == mt__wire_to_f32(MT_COMPRESS_BF16,
                                                       mt__wire_from_f32(MT_COMPRESS_BF16, mean)), 1);
    unsetenv("MT_FUSION_COMPRESS");
    mt_fusion_destroy(&f);
    release(&t);
    mt__comm_destroy(&c);
}

/* A bad value, or a request the layout cannot serve, is one agreed error naming it. */
static void expect_create(mt__comm *c, mt_fusion_options o, int code0, const char *text)
{
    mt_fusion *f = NULL;
    int rc = mt__fusion_create_opts(c, &o, &f);
    MT_ASSERT_INT_EQ(rc, c->rank == 0 ? code0 : MT_EPEER);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), text);
    CU_ASSERT_PTR_NULL(f);
}

static void test_bad_knobs_and_options(void)
{
    mt__comm *c = comm();
    setenv("MT_FUSION_ALGO", "fastest", 1);
    expect_create(c, (mt_fusion_options){0}, MT_EINVAL,
                  "MT_FUSION_ALGO: 'fastest' is not one of auto, flat, shm, hier");
    unsetenv("MT_FUSION_ALGO");
    setenv("MT_FUSION_COMPRESS", "fp8", 1);
    expect_create(c, (mt_fusion_options){0}, MT_EINVAL,
                  "MT_FUSION_COMPRESS: 'fp8' is not one of none, fp16, bf16");
    unsetenv("MT_FUSION_COMPRESS");
    expect_create(c, (mt_fusion_options){.algo = (mt_fusion_algo)9}, MT_EINVAL,
                  "mt_fusion_options.algo must be MT_FUSION_AUTO, _FLAT, _SHM or _HIER (got 9)");
    expect_create(c, (mt_fusion_options){.compression = (mt_compression)-1}, MT_EINVAL,
                  "mt_fusion_options.compression must be");
    if (c->size > 1) {
        setenv("MT_FUSION_SHM", "0", 1);
        expect_create(c, (mt_fusion_options){.algo = MT_FUSION_HIER}, MT_EINVAL,
                      "fusion algorithm hier needs shared memory, but MT_FUSION_SHM=0");
        unsetenv("MT_FUSION_SHM");
        if (nodes().num_nodes > 1)
            expect_create(c, (mt_fusion_options){.algo = MT_FUSION_SHM}, MT_EINVAL,
                          "fusion algorithm shm serves ranks on one node");
        /* ranks asking for different things: a mismatch, not a deadlock */
        mt_fusion *f = NULL;
        mt_fusion_options o = {.compression = c->rank == 1 ? MT_COMPRESS_FP16 : 0};
        MT_ASSERT_INT_EQ(mt__fusion_create_opts(c, &o, &f), MT_EMISMATCH);
        MT_ASSERT_STR_CONTAINS(mt_last_error(), "fusion-create(algo=auto, compression=fp16)");
        MT_ASSERT_STR_CONTAINS(mt_last_error(), "fusion-create(algo=auto, compression=none)");
        CU_ASSERT_PTR_NULL(f);
    }
    mt__comm_destroy(&c);
}

/* Set-up failing on one rank: the hierarchical backend's state, a node segment's tables
 * (MT_ENOMEM there, MT_EPEER elsewhere); a forced algorithm whose segment the system
 * refuses (MT_EIO: auto would fall back to flat, as it does here). */
static void test_setup_failures(void)
{
    if (mt_test_size() < 2)
        return;
    mt__comm *c = comm();
    struct { const char *site; mt_fusion_algo algo; int code0; const char *text; } cases[] = {
        {"fusion-hier:1", MT_FUSION_HIER, MT_EPEER, "rank 1 failed: rank 1: out of memory setting up the hierarchical"},
        {"fusion-shm-alloc:1", MT_FUSION_HIER, MT_EPEER, "rank 1 failed: rank 1: out of memory setting up the fusion's shared"},
        {"fusion-shm:1", MT_FUSION_HIER, MT_EIO, "refused a node's shared-memory segment"},
        {"fusion-wire:0", MT_FUSION_FLAT, MT_ENOMEM, "16-bit buffers"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        setenv("MT_TEST_FAIL_AT", cases[i].site, 1);
        mt_fusion *f = NULL;
        mt_fusion_options o = {.algo = cases[i].algo, .compression = MT_COMPRESS_FP16};
        int rc = mt__fusion_create_opts(c, &o, &f);
        if (!rc) { /* the wire's buffers are made at the registration check */
            float x[4] = {1, 2, 3, 4};
            MT_ASSERT_INT_EQ(mt_fusion_add(f, x, 4), 0);
            rc = mt_fusion_wait(f);
        }
        unsetenv("MT_TEST_FAIL_AT");
        bool fails = cases[i].code0 == MT_EPEER ? c->rank == 1 : c->rank == 0;
        MT_ASSERT_INT_EQ(rc, fails ? (cases[i].code0 == MT_EPEER ? MT_ENOMEM : cases[i].code0)
                                   : MT_EPEER);
        MT_ASSERT_STR_CONTAINS(mt_last_error(), fails ? cases[i].text + (cases[i].code0 == MT_EPEER ? 15 : 0)
                                                      : cases[i].text);
        mt_fusion_destroy(&f);
    }
    if (nodes().num_nodes == 1) {
        setenv("MT_TEST_FAIL_AT", "fusion-shm:1", 1);
        expect_create(c, (mt_fusion_options){.algo = MT_FUSION_SHM}, MT_EIO,
                      "the system refused the shared-memory segment");
        mt_fusion *f = create_opts(c, (mt_fusion_options){0}); /* auto: flat instead */
        MT_ASSERT_STR_EQ(mt_fusion_algo_name(f), "mpi");
        mt_fusion_destroy(&f);
        unsetenv("MT_TEST_FAIL_AT");
    }
    mt__comm_destroy(&c);
}

/* An MPI call of the creation returning an error on one rank alone (after taking part in
 * it): every rank returns the same error (MT_EMPI there, MT_EPEER naming it elsewhere)
 * with no fusion, no rank skips a collective the others enter (the next allreduce is
 * right), and a new fusion works. */
static void test_mpi_error_in_creation(void)
{
    if (mt_test_size() < 2)
        return;
    mt__comm *c = comm();
    /* the injected error's text, as this MPI library words it (Open MPI "MPI_ERR_OTHER:
     * known error not in list", MPICH "Other MPI error"), up to its first colon */
    char other[MPI_MAX_ERROR_STRING + 16], text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(MPI_ERR_OTHER, text, &len);
    text[strcspn(text, ":")] = '\0';
    snprintf(other, sizeof other, "failed: %s", text);
    const char *sites[] = {"fusion-dup-mpi", "topology-split-mpi", "topology-split-type-mpi",
                           "fusion-layout-mpi"};
    for (size_t i = 0; i < sizeof sites / sizeof *sites; i++)
        for (int victim = 0; victim < 2; victim++) {
            char spec[64];
            snprintf(spec, sizeof spec, "%s:%d", sites[i], victim);
            setenv("MT_TEST_FAIL_AT", spec, 1);
            mt_fusion *f = NULL;
            int rc = mt__fusion_create(c, 0, &f);
            unsetenv("MT_TEST_FAIL_AT");
            if (!strcmp(sites[i], "topology-split-type-mpi") && getenv("MT_NODE_KEY")) {
                MT_ASSERT_INT_EQ(rc, MT_OK); /* nodes by key: no shared-memory split */
            } else {
                MT_ASSERT_INT_EQ(rc, c->rank == victim ? MT_EMPI : MT_EPEER);
                char want[64];
                snprintf(want, sizeof want, "rank %d failed: ", victim);
                if (c->rank != victim)
                    MT_ASSERT_STR_CONTAINS(mt_last_error(), want);
                MT_ASSERT_STR_CONTAINS(mt_last_error(), other);
                CU_ASSERT_PTR_NULL(f);
            }
            mt_fusion_destroy(&f);
            double x = 1;
            MT_ASSERT_INT_EQ(mt__allreduce(c, &x, 1, MT_F64, MT_SUM), MT_OK);
            MT_ASSERT_INT_EQ((int)x, c->size);
        }
    size_t sizes[] = {100, 50};
    tensors t = make(sizes, 2);
    mt_fusion *f = fusion_of(c, &t, 0);
    fill(&t, c->rank, 4);
    MT_ASSERT_INT_EQ(mt_fusion_wait(f), MT_OK);
    MT_ASSERT_INT_EQ(wrong(&t, c->size, 4), 0);
    mt_fusion_destroy(&f);
    release(&t);
    mt__comm_destroy(&c);
}

/* Auto with two candidates (nodes, some with several ranks): timed at the registration
 * check, one choice on every rank; its scratch failing on one rank is agreed there. */
static void test_auto_choice(void)
{
    mt__comm *c = comm();
    size_t sizes[] = {3000, 100000, 7};
    tensors t = make(sizes, 3);
    mt_fusion *f = fusion_of(c, &t, 16384);
    bool candidates = !strcmp(mt_fusion_algo_name(f), "auto");
    fill(&t, c->rank, 2);
    MT_ASSERT_INT_EQ(mt_fusion_wait(f), MT_OK);
    MT_ASSERT_INT_EQ(wrong(&t, c->size, 2), 0);
    assert_decided(f, c->size, MT_FUSION_AUTO);
    mt_fusion_destroy(&f);
    if (candidates) {
        int victim = c->size - 1;
        char spec[32];
        snprintf(spec, sizeof spec, "fusion-timing:%d", victim);
        f = fusion_of(c, &t, 16384);
        setenv("MT_TEST_FAIL_AT", spec, 1);
        MT_ASSERT_INT_EQ(mt_fusion_ready(f, 0), c->rank == victim ? MT_ENOMEM : MT_EPEER);
        unsetenv("MT_TEST_FAIL_AT");
        MT_ASSERT_STR_CONTAINS(mt_last_error(), "out of memory timing the fusion's algorithms");
        fill(&t, c->rank, 3); /* the check again, and the step */
        MT_ASSERT_INT_EQ(mt_fusion_wait(f), MT_OK);
        MT_ASSERT_INT_EQ(wrong(&t, c->size, 3), 0);
        assert_decided(f, c->size, MT_FUSION_AUTO);
        mt_fusion_destroy(&f);
    }
    release(&t);
    mt__comm_destroy(&c);
}

/* The sleeping wait (MT_FUSION_SLEEP=1, the fusion thread's) of a message sent half a
 * second late: it arrives whole, and its polls fall as it lasts: at most
 * 8 ln(T / 16 us) + T / 1 ms of them and a few more for the clock's reads (about 600
 * here; a loaded machine only makes fewer). The sleeps of at most 16 us it once made
 * polled every 16 to 100 us (5,000 to 30,000 times in that half second), and four such
 * threads waiting on a slow network livelocked a virtual machine's kernel
 * (fusion_wire.c). */
static void test_sleeping_wait_backs_off(void)
{
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size < 2)
        return;
    setenv("MT_FUSION_SLEEP", "1", 1);
    mt__wire_thread_sleeps();
    unsetenv("MT_FUSION_SLEEP");
    int v = -1, tag = 4711;
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        MPI_Request r;
        MPI_Irecv(&v, 1, MPI_INT, 1, tag, MPI_COMM_WORLD, &r);
        uint64_t p0 = mt__wire_polls();
        double t0 = mt__now();
        MT_ASSERT_INT_EQ(mt__wire_wait(&r), MPI_SUCCESS);
        double waited = mt__now() - t0;
        uint64_t polls = mt__wire_polls() - p0;
        MT_ASSERT_INT_EQ(v, 42);
        double most = 8 * log(fmax(waited, 16e-6) / 16e-6) + waited / 1e-3 + 64;
        if ((double)polls > most)
            fprintf(stderr, "sleeping wait: %llu polls in %.3f s (at most %.0f)\n",
                    (unsigned long long)polls, waited, most);
        CU_ASSERT((double)polls <= most);
        CU_ASSERT(waited >= 0.4); /* it waited for the late message, not less */
    } else if (rank == 1) {
        usleep(500 * 1000);
        v = 42;
        MPI_Send(&v, 1, MPI_INT, 0, tag, MPI_COMM_WORLD);
    }
    mt__wire_thread_done(); /* back to MPI_Wait on this thread */
    prctl(PR_SET_TIMERSLACK, 0UL, 0UL, 0UL, 0UL); /* and the default timer slack */
    MPI_Barrier(MPI_COMM_WORLD);
}

/* Which wait the fusion's thread makes, on each path, with MT_FUSION_SLEEP unset (the
 * defaults measured in fusion_wire.c: flat sleeps, hier waits in MPI_Wait), 0 and 1: a wait of a
 * message already sent polls (MPI_Test, counted) when it sleeps and not when it waits in
 * MPI_Wait; a thread that is not the fusion's always waits in MPI_Wait. */
static int polls_of_a_wait(mt__wire_path path)
{
    int rank = 0, v = 7, got = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Request s, r;
    MPI_Isend(&v, 1, MPI_INT, rank, 4712, MPI_COMM_WORLD, &s);
    MPI_Irecv(&got, 1, MPI_INT, rank, 4712, MPI_COMM_WORLD, &r);
    mt__wire_set_path(path);
    uint64_t p0 = mt__wire_polls();
    MT_ASSERT_INT_EQ(mt__wire_wait(&r), MPI_SUCCESS);
    MT_ASSERT_INT_EQ(got, 7);
    MPI_Wait(&s, MPI_STATUS_IGNORE);
    return (int)(mt__wire_polls() - p0);
}

static void test_wait_by_path_and_knob(void)
{
    const char *knob[] = {NULL, "0", "1"};
    const bool sleeps[3][2] = {{true, false}, {false, false}, {true, true}};
    for (int k = 0; k < 3; k++) {
        if (knob[k])
            setenv("MT_FUSION_SLEEP", knob[k], 1);
        else
            unsetenv("MT_FUSION_SLEEP");
        mt__wire_thread_sleeps();
        for (int p = 0; p < 2; p++) {
            int polls = polls_of_a_wait(p ? MT__WIRE_HIER : MT__WIRE_FLAT);
            if ((polls > 0) != sleeps[k][p])
                fprintf(stderr, "MT_FUSION_SLEEP=%s, %s: %d polls\n", knob[k] ? knob[k] : "(unset)",
                        p ? "hier" : "flat", polls);
            CU_ASSERT((polls > 0) == sleeps[k][p]);
        }
        mt__wire_thread_done();
        MT_ASSERT_INT_EQ(polls_of_a_wait(MT__WIRE_FLAT), 0); /* not the fusion's thread */
    }
    unsetenv("MT_FUSION_SLEEP");
    mt__wire_set_path(MT__WIRE_FLAT);
    prctl(PR_SET_TIMERSLACK, 0UL, 0UL, 0UL, 0UL);
}

static const mt_test tests[] = {
    {"tensors_in_one_block", test_tensors_in_one_block},
    {"uneven_sizes_and_big_tensors", test_uneven_sizes_and_big_tensors},
    {"every_ready_order", test_every_ready_order},
    {"chunked_reductions", test_chunked_reductions},
    {"registration_mismatch", test_registration_mismatch},
    {"errors_on_one_rank", test_errors_on_one_rank},
    {"destroyed_mid_step", test_destroyed_mid_step},
    {"bucket_size_from_environment", test_bucket_size_from_environment},
    {"mpi_allreduce_path", test_mpi_allreduce_path},
    {"alloc_in_place", test_alloc_in_place},
    {"alloc_layouts_differ", test_alloc_layouts_differ},
    {"alloc_errors", test_alloc_errors},
    {"wire_formats", test_wire_formats},
    {"compression", test_compression},
    {"algo_from_environment", test_algo_from_environment},
    {"bad_knobs_and_options", test_bad_knobs_and_options},
    {"setup_failures", test_setup_failures},
    {"mpi_error_in_creation", test_mpi_error_in_creation},
    {"auto_choice", test_auto_choice},
    {"sleeping_wait_backs_off", test_sleeping_wait_backs_off},
    {"wait_by_path_and_knob", test_wait_by_path_and_knob},
    {NULL, NULL},
};

int main(int argc, char **argv)
{
    return mt_test_main(argc, argv, "mpi_fusion", tests, true);
}
