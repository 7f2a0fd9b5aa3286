/*
 * fusion_auto.c -- auto's timing contest: across nodes with more than one rank on some,
 * flat and hier are both timed at the registration check on scratch buckets of the
 * fusion's own bucket sizes, and hier runs only when it was faster (mpitrain.h states the
 * rule). The slowest rank's median counts, so every rank makes the same choice.
 */
#include "fusion_backend.h"

#include <stdlib.h>

typedef mt__ftensor tensor;
typedef mt__fbucket bucket;

enum { TIME_ROUNDS = 5, TIME_CAP = 16 << 20 /* floats timed at most: 64 MiB */ };

static double median(double *v, int n)
{
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
            double x = v[j];
            v[j] = v[j - 1];
            v[j - 1] = x;
        }
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Collective: seconds for backend be to reduce the scratch buckets once, from a barrier
 * (every bucket's tensor is st). */
static double round_of(MPI_Comm data, const mt__fusion_backend *be, void *state,
                       const bucket *sb, const tensor *st, int n, int *rc)
{
    int e = MPI_Barrier(data);
    if (e != MPI_SUCCESS && !*rc)
        *rc = mt__mpi_error(e, "MPI_Barrier (fusion timing)");
    double t0 = MPI_Wtime();
    for (int i = 0; i < n; i++)
        if ((e = be->reduce(state, &sb[i], st)) && !*rc)
            *rc = e;
    return MPI_Wtime() - t0;
}

/* Collective over comm and data, at the registration check under auto with two
 * candidates: each reduces scratch buckets of the sizes of the fusion's b[0..nb) (the first
 * TIME_CAP floats of them; in a shared block when the real ones lie in blocks), one
 * round to warm up, then TIME_ROUNDS rounds, alternating which goes first; the slowest
 * rank's median counts, so *hier_wins is the same on every rank (hier only when faster).
 * An error anywhere is agreed: every rank returns it. */
int mt__fusion_time(mt__comm *comm, MPI_Comm data, const mt__fbucket *b, int nb,
                    const mt__fusion_backend *hier, void *hier_state,
                    const mt__fusion_backend *flat, void *flat_state, bool *hier_wins)
{
    int rc = MT_OK, n = 0, rank = comm->rank;
    size_t total = 0, most = 0;
    bool shared = false;
    for (; n < nb && total < TIME_CAP; n++) {
        size_t m = b[n].elems < TIME_CAP - total ? b[n].elems : TIME_CAP - total;
        total += m;
        most = m > most ? m : most;
        shared |= b[n].shared;
    }
    bucket *sb = calloc((size_t)n + 1, sizeof *sb);
    if (!sb || mt__test_fail("fusion-timing", rank))
        rc = mt__error(MT_ENOMEM, "rank %d: out of memory timing the fusion's algorithms",
                       rank);
    mt__fblock k = {0}; /* the scratch: collective over the node whatever failed here */
    int e = most ? mt__fblock_new(shared ? hier : NULL, hier_state, rank, most, false, &k)
                 : MT_OK;
    rc = rc ? rc : e;
    mt__call call;
    mt__call_init(&call, MT__CALL_INTERNAL, 9, 0, 0);
    if ((rc = mt__agree(comm, &call, rc, NULL)))
        goto out;
    float *own = k.base ? k.base + (size_t)k.me * k.stride : NULL;
    tensor st = {.ptr = own, .count = most, .blk = k.map ? &k : NULL}; /* every bucket's */
    size_t left = total;
    for (int i = 0; i < n; i++) {
        size_t m = b[i].elems < left ? b[i].elems : left;
        left -= m;
        sb[i] = (bucket){.n = 1, .elems = m, .base = m ? own : NULL, .adjacent = m > 0,
                         .shared = b[i].shared && k.map};
    }
    double flat_s[TIME_ROUNDS], hier_s[TIME_ROUNDS], t[2];
    for (int r = -1; r < TIME_ROUNDS; r++) {
        if (r % 2 == 0) /* r = -1 warms up */
            t[0] = round_of(data, flat, flat_state, sb, &st, n, &rc);
        t[1] = round_of(data, hier, hier_state, sb, &st, n, &rc);
        if (r % 2 != 0)
            t[0] = round_of(data, flat, flat_state, sb, &st, n, &rc);
        if (r >= 0)
            flat_s[r] = t[0], hier_s[r] = t[1];
    }
    t[0] = median(flat_s, TIME_ROUNDS);
    t[1] = median(hier_s, TIME_ROUNDS);
    MT__MPI(MPI_Allreduce(MPI_IN_PLACE, t, 2, MPI_DOUBLE, MPI_MAX, data), agree);
agree:
    mt__call_init(&call, MT__CALL_INTERNAL, 10, 0, 0);
    if ((rc = mt__agree(comm, &call, rc, NULL)))
        goto out;
    *hier_wins = t[1] < t[0]; /* the same doubles on every rank */
out:
    mt__fblock_release(&k);
    free(sb);
    return rc;
}
