/*
 * bench_train.c -- the train suite: training steps of the example MLP (forward, backward
 * with its gradients handed to mt_fusion, averaging, SGD) on synthetic batches, with the
 * global batch fixed at 128. Per-rank samples/s at N ranks against one rank training
 * alone (the other ranks wait at a barrier meanwhile), all measured in the same run, in
 * three ways of averaging:
 *   serial   one bucket, reduced in mt_fusion_wait after the backward pass (no overlap);
 *   layers   a bucket per layer, each handed over when backward has produced it;
 *   blocks   the trainer's way with MT_OVERLAP=1 (by default it runs serial: mlp_overlap):
 *            the first layer's weight gradient (85% of the bytes, and
 *            produced last) in MLP_W0_BLOCKS row blocks, a bucket each, so only the last
 *            block is left for the wait.
 * Each is put next to its ideal bound. With K the compute of a step (forward, backward,
 * SGD: every rank computing at once, no communication), C_all the averaging of all the
 * gradients alone and C_tail the averaging of what only becomes ready when backward ends
 * (the last bucket, alone), a step cannot be shorter than
 *   serial:          K + C_all
 *   layers, blocks:  max(K + C_tail, forward + C_all + SGD)
 * (no gradient is ready before the forward pass ends, and SGD needs all of them). The
 * averaging goes the way the environment says (MT_FUSION_ALGO, MT_FUSION_COMPRESS, read
 * by the fusion); the JSON line names both as given. The raw MPI_Allreduce of the same
 * bytes is printed beside the fusion's averaging.
 */
#include "bench.h"

#include "../tools/mlp.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    double pre, sgd; /* seconds, summed over the steps: the batch and forward; SGD */
} phases;

static void fill(model *m, uint8_t *labels, int n, unsigned seed)
{
    for (size_t i = 0; i < (size_t)n * 784; i++)
        m->act[0][i] = (float)((i * 2654435761u + seed) % 256) / 255.0f;
    for (int r = 0; r < n; r++)
        labels[r] = (uint8_t)((r * 7 + seed) % 10);
}

/* count steps; f NULL: no averaging; ready: backward marks tensors ready as it goes (else
 * all is averaged in the wait). Seconds; the phases' times are added to ph if given. */
static double steps(model *m, uint8_t *labels, int n, int count, mt_fusion *f, bool ready,
                    const int *idx, phases *ph, int *rc)
{
    double t0 = bench_now();
    for (int s = 0; s < count && !*rc; s++) {
        double a = bench_now();
        fill(m, labels, n, (unsigned)s);
        mlp_forward(m, n);
        double b = bench_now();
        mlp_backward(m, n, labels, ready ? f : NULL, idx);
        if (f)
            *rc = mt_fusion_wait(f);
        double c = bench_now();
        mlp_sgd(m, 0.01, 0.9, 5e-4);
        if (ph) {
            ph->pre += b - a;
            ph->sgd += bench_now() - c;
        }
    }
    return bench_now() - t0;
}

/* Seconds of one averaging of a fusion whose nt tensors (ids idx) are all ready at once,
 * or of one raw MPI_Allreduce of count floats at buf (f NULL); the median of reps. */
static double averaging(bench *b, mt_fusion *f, const int *idx, int nt, float *buf,
                        size_t count, int reps, int *rc)
{
    double t[16];
    for (int r = 0; r < reps && !*rc; r++) {
        MPI_Barrier(b->raw);
        double t0 = bench_now();
        if (f) {
            for (int i = 0; i < nt; i++)
                mt_fusion_ready(f, idx[i]);
            *rc = mt_fusion_wait(f);
        } else
            MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, b->raw);
        t[r] = bench_now() - t0;
    }
    return *rc ? 0 : bench_median(t, reps);
}

typedef struct {
    const char *name;
    int w0_blocks;        /* the model's row blocks (1: the first layer in one piece) */
    bool buckets;         /* mlp_bucket_bytes (else the default, one bucket for all) */
    bool ready;           /* backward marks tensors ready */
} variant;

static const variant variants[] = {
    {"serial", 1, false, false},
    {"layers", 1, true, true},
    {"blocks", MLP_W0_BLOCKS, true, true},
};
#define NVARIANTS (int)(sizeof variants / sizeof *variants)
#define MAX_ROUNDS 8

/* One variant: its fusions and what each round measured (this rank). */
typedef struct {
    const variant *v;
    mt_fusion *f;         /* the model's gradients, bucketed as v says */
    float *grad;          /* the model's gradients while this variant runs: f's block */
    int idx[MLP_TENSORS];
    mt_fusion *tail;      /* the last bucket alone, as the wait reduces it (NULL: serial,
                             where the last bucket is all of it) */
    float *tail_buf;      /* tail's block */
    int tail_id;
    size_t tail_floats;
    double rate[MAX_ROUNDS], no_comm[MAX_ROUNDS]; /* samples/s */
    double k[MAX_ROUNDS], pre[MAX_ROUNDS], sgd[MAX_ROUNDS]; /* seconds a step, no averaging */
    double c_all[MAX_ROUNDS], c_tail[MAX_ROUNDS];
} run;

/* Over ranks, from this rank's medians over the rounds. */
typedef struct {
    double per_rank, min_rank; /* samples/s, averaged over ranks and the slowest rank */
    double no_comm;            /* samples/s, all ranks computing, no averaging */
    double k, pre, sgd;        /* seconds per step with no averaging (slowest rank): all,
                                  the batch and forward, SGD */
    double c_all, c_tail;      /* seconds (slowest rank): all the gradients, the tail */
    size_t tail_bytes;
    double ideal_step;         /* the bound, seconds */
} result;

/* Collective: run r's fusion, bucketed as its variant says (before the model exists: the
 * bucket size depends only on the variant). */
static int create(bench *b, model *m, run *r)
{
    m->w0_blocks = r->v->w0_blocks;
    int rc = mt_fusion_create(b->ctx, r->v->buckets ? mlp_bucket_bytes(m) : 0, &r->f);
    if (!rc) /* the gradients in the fusion's memory, as the trainer has them */
        rc = mt_fusion_alloc(r->f, mlp_grad_count(), &r->grad);
    return rc;
}

/* Collective: the model's gradients in run r's fusion, and the fusion of its last bucket
 * alone (every rank alike; an error on one rank is agreed). */
static int setup(bench *b, model *m, run *r)
{
    const variant *v = r->v;
    m->w0_blocks = v->w0_blocks;
    mlp_use_grad(m, r->grad);
    int rc = mlp_register(m, r->f, r->idx);
    r->tail_floats = v->buckets ? mlp_tail_floats(m) : mlp_grad_count();
    if (rc || !v->buckets)
        return rc;
    rc = mt_fusion_create(b->ctx, r->tail_floats * sizeof(float), &r->tail);
    if (!rc) /* in the fusion's memory too, as the trainer's last bucket is */
        rc = mt_fusion_alloc(r->tail, r->tail_floats, &r->tail_buf);
    if (!rc) /* a failed add is reported by the fusion's first use, on every rank */
        r->tail_id = mt_fusion_add(r->tail, r->tail_buf, r->tail_floats);
    return rc;
}

/* One round of run r: `count` steps with averaging, the same steps on every rank at once
 * with none (what the machine gives each rank when all of them compute: shared caches and
 * memory bandwidth, this batch size; the most any gradient exchange could leave), and the
 * averaging alone of all the gradients and of the tail. */
static int round_of(bench *b, model *m, uint8_t *labels, int n, int count, run *r, int i)
{
    int rc = MT_OK, reps = 3;
    m->w0_blocks = r->v->w0_blocks;
    mlp_use_grad(m, r->grad);
    MPI_Barrier(b->raw);
    r->rate[i] = n * count / steps(m, labels, n, count, r->f, r->v->ready, r->idx, NULL, &rc);
    phases ph = {0, 0};
    MPI_Barrier(b->raw);
    double t = steps(m, labels, n, count, NULL, false, NULL, &ph, &rc);
    r->no_comm[i] = n * count / t;
    r->k[i] = t / count;
    r->pre[i] = ph.pre / count;
    r->sgd[i] = ph.sgd / count;
    if (!rc)
        r->c_all[i] = averaging(b, r->f, r->idx, mlp_tensors(m), NULL, 0, reps, &rc);
    r->c_tail[i] = r->c_all[i];
    if (!rc && r->tail)
        r->c_tail[i] = averaging(b, r->tail, &r->tail_id, 1, NULL, 0, reps, &rc);
    return rc;
}

static void summarise(bench *b, run *r, int rounds, result *out)
{
    bench_over_ranks(b, bench_median(r->rate, rounds), &out->min_rank, &out->per_rank, NULL);
    bench_over_ranks(b, bench_median(r->no_comm, rounds), NULL, &out->no_comm, NULL);
    bench_over_ranks(b, bench_median(r->k, rounds), NULL, NULL, &out->k);
    bench_over_ranks(b, bench_median(r->pre, rounds), NULL, NULL, &out->pre);
    bench_over_ranks(b, bench_median(r->sgd, rounds), NULL, NULL, &out->sgd);
    bench_over_ranks(b, bench_median(r->c_all, rounds), NULL, NULL, &out->c_all);
    bench_over_ranks(b, bench_median(r->c_tail, rounds), NULL, NULL, &out->c_tail);
    out->tail_bytes = r->tail_floats * sizeof(float);
    double tail_first = out->k + out->c_tail, all_first = out->pre + out->c_all + out->sgd;
    out->ideal_step = !r->v->ready ? out->k + out->c_all
                      : tail_first > all_first ? tail_first : all_first;
}

static const char *env_or(const char *name, const char *dflt)
{
    const char *v = getenv(name);
    return v && *v ? v : dflt;
}

/* The variant the trainer runs (mlp_overlap): serial, or row blocks with MT_OVERLAP=1. */
static int trainer_way(bench *b)
{
    return mlp_overlap(b->ctx) ? NVARIANTS - 1 : 0;
}

static void print(bench *b, int n, double alone, const result *res, double raw_t)
{
    const result *d = &res[trainer_way(b)];
    double avg = d->per_rank, busy = d->no_comm;
    size_t gb = mlp_grad_count() * sizeof(float);
    bench_say(b, "%6s %14s %18s %22s %7s %22s %9s\n", "ranks", "batch/rank", "alone_samples_s",
              "per_rank_samples_s", "ratio", "no_comm_samples_s", "ceiling");
    bench_say(b, "%6d %14d %18.0f %22.0f %7.2f %22.0f %9.2f\n", b->size, n, alone, avg,
              avg / alone, busy, busy / alone);
    bench_say(b, "averaging %s, compression %s: the model's %zu B as the trainer buckets them "
                 "(%s) %.3f ms, one raw MPI_Allreduce of the same bytes %.3f ms\n",
              env_or("MT_FUSION_ALGO", "auto"), env_or("MT_FUSION_COMPRESS", "none"), gb,
              variants[trainer_way(b)].name, d->c_all * 1e3, raw_t * 1e3);
    bench_say(b, "%8s %9s %11s %10s %10s %11s %10s %18s %9s %9s\n", "variant", "step_ms",
              "compute_ms", "C_all_ms", "tail_B", "C_tail_ms", "ideal_ms", "per_rank_samples_s",
              "vs_alone", "vs_ideal");
    for (int v = 0; v < NVARIANTS; v++) {
        const result *r = &res[v];
        bench_say(b, "%8s %9.3f %11.3f %10.3f %10zu %11.3f %10.3f %18.0f %9.2f %9.2f\n",
                  variants[v].name, n / r->per_rank * 1e3, r->k * 1e3, r->c_all * 1e3,
                  r->tail_bytes, r->c_tail * 1e3, r->ideal_step * 1e3, r->per_rank,
                  r->per_rank / alone, r->per_rank * r->ideal_step / n);
    }
    bench_say(b, "ideal step: serial K + C_all; overlapped max(K + C_tail, batch and forward "
                 "%.3f ms + C_all + SGD %.3f ms); K: compute, every rank at once\n",
              d->pre * 1e3, d->sgd * 1e3);
    if (b->size == 2)
        bench_say(b, "budget: per-rank samples/s at 2 ranks, the trainer's way (%s), >= 0.95x of "
                     "the no-communication ceiling: %.2fx (%s); %.2fx of 1 rank, the ceiling "
                     "%.2fx of 1 rank\n", variants[trainer_way(b)].name,
                  avg / busy, bench_verdict(b, avg / busy >= 0.95), avg / alone,
                  busy / alone);
}

/* The suite's JSON line: the figures of the trainer's way (trainer_way names it) under
 * the names they always had, then the serial and per-layer variants' with their names in
 * front, and the row blocks' samples/s. */
static void json(bench *b, int n, double alone, const result *res, double raw_t)
{
    const result *d = &res[trainer_way(b)], *s = &res[0], *l = &res[1], *k = &res[2];
    double avg = d->per_rank, busy = d->no_comm;
    bench_json(b, "train", "\"global_batch\": 128, \"batch_per_rank\": %d, "
               "\"alone_samples_per_s\": %.1f, \"per_rank_samples_per_s\": %.1f, "
               "\"min_rank_samples_per_s\": %.1f, \"ratio\": %.4f, "
               "\"no_comm_samples_per_s\": %.1f, \"ceiling\": %.4f, \"vs_ceiling\": %.4f, "
               "\"fusion_algo\": \"%s\", \"compression\": \"%s\", \"w0_blocks\": %d, "
               "\"grad_bytes\": %zu, \"raw_allreduce_ms\": %.4f, \"compute_ms\": %.4f, "
               "\"pre_ms\": %.4f, \"sgd_ms\": %.4f, \"avg_ms\": %.4f, \"tail_bytes\": %zu, "
               "\"tail_ms\": %.4f, \"ideal_samples_per_s\": %.1f, \"vs_ideal\": %.4f, "
               "\"serial_samples_per_s\": %.1f, \"serial_avg_ms\": %.4f, "
               "\"serial_ideal_samples_per_s\": %.1f, \"layers_samples_per_s\": %.1f, "
               "\"layers_avg_ms\": %.4f, \"layers_tail_bytes\": %zu, \"layers_tail_ms\": %.4f, "
               "\"layers_ideal_samples_per_s\": %.1f, \"blocks_samples_per_s\": %.1f, "
               "\"blocks_ideal_samples_per_s\": %.1f, \"trainer_way\": \"%s\"%s",
               n, alone, avg, d->min_rank, avg / alone, busy, busy / alone, avg / busy,
               env_or("MT_FUSION_ALGO", "auto"), env_or("MT_FUSION_COMPRESS", "none"),
               MLP_W0_BLOCKS, mlp_grad_count() * sizeof(float), raw_t * 1e3, d->k * 1e3,
               d->pre * 1e3, d->sgd * 1e3, d->c_all * 1e3, d->tail_bytes, d->c_tail * 1e3,
               n / d->ideal_step, avg * d->ideal_step / n, s->per_rank, s->c_all * 1e3,
               n / s->ideal_step, l->per_rank, l->c_all * 1e3, l->tail_bytes, l->c_tail * 1e3,
               n / l->ideal_step, k->per_rank, n / k->ideal_step, variants[trainer_way(b)].name,
               bench_budget(b, b->size == 2, avg / busy >= 0.95, "vs_ceiling >= 0.95 at 2 ranks"));
}

int bench_train(bench *b)
{
    openblas_set_num_threads(1);
    int rounds = b->quick ? 3 : MAX_ROUNDS, count = b->quick ? 10 : 50, rc = MT_OK;
    int n = 128 / b->size > 0 ? 128 / b->size : 1;
    model m;
    memset(&m, 0, sizeof m);
    uint8_t labels[128];
    run runs[NVARIANTS] = {{0}};
    for (int v = 0; v < NVARIANTS; v++)
        runs[v].v = &variants[v];
    /* the fusions first, then the model (whose gradients the trainer's way could hold) */
    for (int v = 0; v < NVARIANTS && !rc; v++)
        rc = create(b, &m, &runs[v]);
    if (!rc)
        rc = mlp_init(&m, 1, NULL);
    if (!rc)
        rc = mlp_reserve(&m, 128);
    rc = bench_agree(b, rc);
    for (int v = 0; v < NVARIANTS && !rc; v++)
        rc = setup(b, &m, &runs[v]);
    size_t gf = mlp_grad_count();
    float *raw = rc ? NULL : calloc(gf, sizeof(float));
    if (!rc)
        rc = bench_agree(b, raw ? MT_OK : MT_ENOMEM);
    for (int v = 0; v < NVARIANTS && !rc; v++) { /* warm-up, and the registration checks */
        m.w0_blocks = variants[v].w0_blocks;
        mlp_use_grad(&m, runs[v].grad);
        steps(&m, labels, n, count / 2, runs[v].f, variants[v].ready, runs[v].idx, NULL, &rc);
        if (!rc && runs[v].tail)
            averaging(b, runs[v].tail, &runs[v].tail_id, 1, NULL, 0, 1, &rc);
    }
    /* the variants, a lone rank and the raw baseline take turns, round after round, so
     * that the machine's drift meets all of them alike */
    double alone[MAX_ROUNDS], raw_t[MAX_ROUNDS];
    for (int i = 0; i < rounds && !rc; i++) {
        m.w0_blocks = 0; /* the trainer's model, as one rank alone computes it */
        alone[i] = 0;
        if (b->rank == 0)
            alone[i] = 128.0 * count / steps(&m, labels, 128, count, NULL, false, NULL, NULL, &rc);
        MPI_Barrier(b->raw);
        for (int v = 0; v < NVARIANTS && !rc; v++)
            rc = round_of(b, &m, labels, n, count, &runs[v], i);
        if (!rc)
            raw_t[i] = averaging(b, NULL, NULL, 0, raw, gf, 3, &rc);
    }
    free(raw);
    if (!rc) {
        result res[NVARIANTS];
        for (int v = 0; v < NVARIANTS; v++)
            summarise(b, &runs[v], rounds, &res[v]);
        double a = b->rank == 0 ? bench_median(alone, rounds) : 0, rt;
        MPI_Bcast(&a, 1, MPI_DOUBLE, 0, b->raw);
        bench_over_ranks(b, bench_median(raw_t, rounds), NULL, NULL, &rt);
        print(b, n, a, res, rt);
        json(b, n, a, res, rt);
    }
    mlp_free(&m); /* before the fusions, which may own memory it uses */
    for (int v = 0; v < NVARIANTS; v++) {
        mt_fusion_destroy(&runs[v].f);
        mt_fusion_destroy(&runs[v].tail);
    }
    return rc;
}
