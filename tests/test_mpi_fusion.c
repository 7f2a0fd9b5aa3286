/*
 * test_mpi_fusion.c -- under mpirun at 1 to 4 ranks: gradient fusion with uneven tensor
 * sizes, tensors larger than a bucket, zero-size tensors, every ready order, chunked
 * reductions, registration mismatches and failures on one rank; through shared memory
 * (the default on one node) and again through MPI_Allreduce.
 */
#include "harness.h"

#include <stdlib.h>
#include <string.h>

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

static mt_fusion *fusion_of(mt__comm *c, tensors *t, size_t bucket_bytes)
{
    mt_fusion *f = NULL;
    int created = mt__fusion_create(c, bucket_bytes, &f);
    if (created)
        fprintf(stderr, "mt__fusion_create: %s\n", mt_last_error());
    CU_ASSERT_EQUAL_FATAL(created, MT_OK);
    /* every rank on one host: shared memory unless turned off (a silent fallback would
     * leave that path untested); ranks on several hosts: never */
    const char *shm = getenv("MT_FUSION_SHM");
    MT_ASSERT_INT_EQ(mt__fusion_shared(f), c->size > 1 && !(shm && !strcmp(shm, "0"))
                                               && mt_test_host_layout().num_nodes == 1);
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
    bool packs = !in_order && c->size > 1 && !mt__fusion_shared(f);
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

static const mt_test tests[] = {
    {"tensors_in_one_block", test_tensors_in_one_block},
    {"uneven_sizes_and_big_tensors", test_uneven_sizes_and_big_tensors},
    {"every_ready_order", test_every_ready_order},
    {"chunked_reductions", test_chunked_reductions},
    {"registration_mismatch", test_registration_mismatch},
    {"errors_on_one_rank", test_errors_on_one_rank},
    {"bucket_size_from_environment", test_bucket_size_from_environment},
    {"mpi_allreduce_path", test_mpi_allreduce_path},
    {NULL, NULL},
};

int main(int argc, char **argv)
{
    return mt_test_main(argc, argv, "mpi_fusion", tests, true);
}
