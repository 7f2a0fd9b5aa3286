/*
 * bench_train.c -- the train suite: training steps of the example MLP (forward, backward
 * with each layer's gradients handed to mt_fusion, averaging, SGD) on synthetic batches,
 * with the global batch fixed at 128. Per-rank samples/s at N ranks against one rank
 * training alone (the other ranks wait at a barrier meanwhile), measured in the same run.
 */
#include "bench.h"

#include "../tools/mlp.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>

static void fill(model *m, uint8_t *labels, int n, unsigned seed)
{
    for (size_t i = 0; i < (size_t)n * 784; i++)
        m->act[0][i] = (float)((i * 2654435761u + seed) % 256) / 255.0f;
    for (int r = 0; r < n; r++)
        labels[r] = (uint8_t)((r * 7 + seed) % 10);
}

static double steps(model *m, uint8_t *labels, int n, int count, mt_fusion *f, const int *idx,
                    int *rc)
{
    double t0 = bench_now();
    for (int s = 0; s < count && !*rc; s++) {
        fill(m, labels, n, (unsigned)s);
        mlp_forward(m, n);
        mlp_backward(m, n, labels, f, idx);
        if (f)
            *rc = mt_fusion_wait(f);
        mlp_sgd(m, 0.01, 0.9, 5e-4);
    }
    return bench_now() - t0;
}

int bench_train(bench *b)
{
    openblas_set_num_threads(1);
    int count = b->quick ? 100 : 400, rc = MT_OK, n = 128 / b->size > 0 ? 128 / b->size : 1;
    model m;
    memset(&m, 0, sizeof m);
    uint8_t labels[128];
    /* the gradients in the fusion's memory, as the trainer has them */
    mt_fusion *f = NULL;
    float *grad = NULL;
    rc = mt_fusion_create(b->ctx, 0, &f);
    if (!rc)
        rc = mt_fusion_alloc(f, mlp_grad_count(), &grad);
    if (!rc)
        rc = mlp_init(&m, 1, grad);
    if (!rc)
        rc = mlp_reserve(&m, 128);
    double alone = 0;
    if (!rc && b->rank == 0) {
        steps(&m, labels, 128, count / 10, NULL, NULL, &rc); /* warm-up */
        alone = 128.0 * count / steps(&m, labels, 128, count, NULL, NULL, &rc);
    }
    MPI_Barrier(b->raw);
    int idx[2 * NL];
    for (int l = NL - 1; l >= 0 && !rc; l--) {
        idx[2 * l] = mt_fusion_add(f, m.gw[l], mlp_wsize(l));
        idx[2 * l + 1] = mt_fusion_add(f, m.gb[l], (size_t)mlp_sizes[l + 1]);
    }
    if (!rc) {
        steps(&m, labels, n, count / 10, f, idx, &rc);
        MPI_Barrier(b->raw);
        double t = steps(&m, labels, n, count, f, idx, &rc), per_rank = n * count / t, mn, avg;
        bench_over_ranks(b, per_rank, &mn, &avg, NULL);
        /* the same steps on every rank at once with no communication at all: what the
         * machine gives each rank when all of them compute (shared caches and memory
         * bandwidth, this batch size), the most any gradient exchange could leave */
        MPI_Barrier(b->raw);
        double tb = steps(&m, labels, n, count, NULL, NULL, &rc), busy;
        bench_over_ranks(b, n * count / tb, NULL, &busy, NULL);
        MPI_Bcast(&alone, 1, MPI_DOUBLE, 0, b->raw);
        bench_say(b, "%6s %14s %18s %22s %7s %22s %9s\n", "ranks", "batch/rank", "alone_samples_s",
                  "per_rank_samples_s", "ratio", "no_comm_samples_s", "ceiling");
        bench_say(b, "%6d %14d %18.0f %22.0f %7.2f %22.0f %9.2f\n", b->size, n, alone, avg,
                  avg / alone, busy, busy / alone);
        if (b->size == 2)
            bench_say(b, "budget: per-rank samples/s at 2 ranks >= 0.95x of the no-communication "
                         "ceiling: %.2fx (%s); %.2fx of 1 rank, the ceiling %.2fx of 1 rank\n",
                      avg / busy, avg / busy >= 0.95 ? "met" : "NOT met", avg / alone,
                      busy / alone);
        bench_json(b, "train", "\"global_batch\": 128, \"batch_per_rank\": %d, "
                   "\"alone_samples_per_s\": %.1f, \"per_rank_samples_per_s\": %.1f, "
                   "\"min_rank_samples_per_s\": %.1f, \"ratio\": %.4f, "
                   "\"no_comm_samples_per_s\": %.1f, \"ceiling\": %.4f, \"vs_ceiling\": %.4f%s",
                   n, alone, avg, mn, avg / alone, busy, busy / alone, avg / busy,
                   bench_budget(b, b->size == 2, avg / busy >= 0.95, "vs_ceiling >= 0.95 at 2 ranks"));
    }
    mlp_free(&m);
    mt_fusion_destroy(&f); /* after the model: it frees the gradients' block */
    return rc;
}
