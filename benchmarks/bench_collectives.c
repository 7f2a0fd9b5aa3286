/*
 * bench_collectives.c -- the allreduce, fusion and overlap suites of mpitrain-bench. The
 * fusion suite also averages the example model's gradients with each algorithm that can
 * serve the ranks (shm or hier next to flat; fp32, fp16 and bf16 on the network) and says
 * which one auto picks.
 *
 * Each figure is the median of several repetitions; raw and mpitrain measurements
 * alternate within a repetition so drift in the machine affects both alike.
 */
#include "bench.h"

#include "../tools/mlp.h"

#include <stdlib.h>
#include <string.h>

/* Seconds per call of fn, median over reps, each rep `iters` calls after a barrier. */
typedef void (*op_fn)(bench *b, void *arg);

static double time_op(bench *b, op_fn fn, void *arg, int iters)
{
    MPI_Barrier(b->raw);
    double t0 = bench_now();
    for (int i = 0; i < iters; i++)
        fn(b, arg);
    return (bench_now() - t0) / iters;
}

typedef struct {
    float *buf;
    size_t count;
    int rc;
} ar_arg;

static void raw_allreduce(bench *b, void *arg)
{
    ar_arg *a = arg;
    MPI_Allreduce(MPI_IN_PLACE, a->buf, (int)a->count, MPI_FLOAT, MPI_SUM, b->raw);
}

static void mt_allreduce_op(bench *b, void *arg)
{
    ar_arg *a = arg;
    int rc = mt_allreduce(b->ctx, a->buf, a->count, MT_F32, MT_SUM);
    if (rc && !a->rc)
        a->rc = rc;
}

int bench_allreduce_sizes(const bench *b, size_t *out, int max)
{
    size_t max_bytes = b->quick ? (size_t)4 << 20 : (size_t)64 << 20, step = b->quick ? 4 : 2;
    int n = 0;
    for (size_t bytes = 4; bytes <= max_bytes && n < max; bytes *= step)
        out[n++] = bytes;
    return n;
}

/* Every rank's a->count floats hold rank + 1 + i % 7; after a sum over the ranks each must
 * be size * (size + 1) / 2 + size * (i % 7), exactly (small integers in fp32). Collective:
 * the number of wrong values over all ranks (nccl-tests' #wrong), -1 for an error. */
static long long check_allreduce(bench *b, ar_arg *a)
{
    for (size_t i = 0; i < a->count; i++)
        a->buf[i] = (float)(b->rank + 1 + (int)(i % 7));
    int rc = mt_allreduce(b->ctx, a->buf, a->count, MT_F32, MT_SUM);
    long long wrong = 0;
    for (size_t i = 0; !rc && i < a->count; i++)
        wrong += a->buf[i] != (float)(b->size * (b->size + 1) / 2 + b->size * (int)(i % 7));
    if (rc)
        wrong = -1;
    long long all[2] = {wrong, -wrong}; /* the sum of wrong values, and any error */
    MPI_Allreduce(MPI_IN_PLACE, all, 2, MPI_LONG_LONG, MPI_MAX, b->raw);
    if (all[1] > 0) /* some rank's mt_allreduce failed */
        return -1;
    MPI_Allreduce(&wrong, &all[0], 1, MPI_LONG_LONG, MPI_SUM, b->raw);
    memset(a->buf, 0, a->count * sizeof(float));
    return all[0];
}

int bench_allreduce(bench *b)
{
    size_t max_bytes = b->quick ? (size_t)4 << 20 : (size_t)64 << 20;
    int reps = b->quick ? 3 : 9;
    float *buf = calloc(max_bytes / sizeof(float), sizeof(float));
    if (!buf)
        return MT_ENOMEM;
    bench_say(b, "each time: the median of %d repetitions of N calls (N: the iters column), "
                 "per call, averaged over the ranks (max_us: the slowest rank); ratio: the "
                 "median of the repetitions' ratios (each repetition times both, in turn "
                 "first), with the lowest and highest; wrong: values that differ from the "
                 "exact sum, over all ranks\n", reps);
    bench_say(b, "%10s %6s %10s %10s %10s %7s %13s %10s %11s %11s %6s\n", "bytes", "iters",
              "raw_us", "mt_us", "mt_max_us", "ratio", "ratio_spread", "extra_us", "algbw_GBps",
              "busbw_GBps", "wrong");
    double worst_big = 0, small = 0;
    int measured = 0;
    ar_arg a = {.buf = buf};
    size_t step = b->quick ? 4 : 2;
    for (size_t bytes = 4; bytes <= max_bytes; bytes *= step) {
        if (!bench_size_wanted(b, bytes))
            continue;
        measured++;
        a.count = bytes / sizeof(float);
        size_t target = b->quick ? (size_t)32 << 20 : (size_t)256 << 20;
        int iters = (int)(target / bytes);
        iters = iters > 10000 ? 10000 : iters < 5 ? 5 : iters; /* a repetition of at least a few ms */
        if (b->quick && iters > 200)
            iters = 200;
        time_op(b, raw_allreduce, &a, iters / 10 + 1); /* warm-up */
        time_op(b, mt_allreduce_op, &a, iters / 10 + 1);
        double raw[9], mt[9], ratios[9], lo = 1e9, hi = 0;
        for (int r = 0; r < reps; r++) { /* which goes first alternates, so neither always
                                              meets the machine just after the other */
            if (r % 2)
                mt[r] = time_op(b, mt_allreduce_op, &a, iters);
            raw[r] = time_op(b, raw_allreduce, &a, iters);
            if (!(r % 2))
                mt[r] = time_op(b, mt_allreduce_op, &a, iters);
        }
        /* each repetition's ratio of the ranks' averages: the machine's drift between
         * repetitions does not decide it */
        for (int r = 0; r < reps; r++) {
            double raw_r, mt_r;
            bench_over_ranks(b, raw[r], NULL, &raw_r, NULL);
            bench_over_ranks(b, mt[r], NULL, &mt_r, NULL);
            ratios[r] = raw_r > 0 ? mt_r / raw_r : 0;
            lo = ratios[r] < lo ? ratios[r] : lo;
            hi = ratios[r] > hi ? ratios[r] : hi;
        }
        double raw_t = bench_median(raw, reps), mt_t = bench_median(mt, reps);
        double raw_avg, mt_avg, mt_max;
        bench_over_ranks(b, raw_t, NULL, &raw_avg, NULL);
        bench_over_ranks(b, mt_t, NULL, &mt_avg, &mt_max);
        double ratio = bench_median(ratios, reps);
        double algbw = (double)bytes / mt_avg / 1e9;
        double busbw = algbw * 2.0 * (b->size - 1) / b->size;
        if (bytes >= 65536 && ratio > worst_big)
            worst_big = ratio;
        long long wrong = check_allreduce(b, &a);
        if (wrong < 0 && !a.rc)
            a.rc = MT_EMPI;
        bench_say(b, "%10zu %6d %10.2f %10.2f %10.2f %7.3f %6.3f-%-6.3f %10.2f %11.3f %11.3f "
                  "%6lld\n", bytes, iters, raw_avg * 1e6, mt_avg * 1e6, mt_max * 1e6, ratio, lo,
                  hi, (mt_avg - raw_avg) * 1e6, algbw, busbw, wrong);
        bench_json(b, "allreduce",
                   "\"bytes\": %zu, \"iters\": %d, \"raw_us\": %.3f, \"mt_us\": %.3f, "
                   "\"mt_max_us\": %.3f, \"ratio\": %.4f, \"ratio_min\": %.4f, "
                   "\"ratio_max\": %.4f, \"algbw_GBps\": %.4f, \"busbw_GBps\": %.4f, "
                   "\"reps\": %d, \"wrong\": %lld%s", bytes, iters, raw_avg * 1e6, mt_avg * 1e6,
                   mt_max * 1e6, ratio, lo, hi, algbw, busbw, reps, wrong,
                   bytes == 4 ? bench_budget(b, b->size == 2, ratio <= 1.3,
                                             "ratio <= 1.3 at 4 B and 2 ranks")
                              : bench_budget(b, bytes >= 65536 && b->size > 1, ratio <= 1.05,
                                             "ratio <= 1.05 at >= 64 KiB"));
        if (bytes == 4)
            small = ratio;
    }
    if (!measured) /* no figure and no verdict without a measurement */
        bench_say(b, "nothing measured: no size of --sizes is one of this suite's\n");
    if (small > 0 && b->size == 2) /* the agreement's frame carries the data: one exchange */
        bench_say(b, "budget: mt_allreduce <= 1.3x raw at 4 B and 2 ranks: %.3fx (%s)\n", small,
                  bench_verdict(b, small <= 1.3));
    if (worst_big > 0 && b->size > 1)
        bench_say(b, "budget: mt_allreduce <= 1.05x raw at >= 64 KiB: worst %.3fx (%s)\n",
                  worst_big, bench_verdict(b, worst_big <= 1.05));
    free(buf);
    return a.rc;
}

typedef struct {
    float **t;
    float *one;           /* all tensors' bytes in one buffer, for the floor */
    int n;
    size_t count;
    mt_fusion *f;
    int rc;
} fusion_arg;

static void raw_per_tensor(bench *b, void *arg)
{
    fusion_arg *a = arg;
    for (int i = 0; i < a->n; i++)
        MPI_Allreduce(MPI_IN_PLACE, a->t[i], (int)a->count, MPI_FLOAT, MPI_SUM, b->raw);
}

/* One MPI_Allreduce of all the tensors' bytes at once: what the per-tensor calls would
 * cost with perfect packing and no other overhead (mt_fusion's shared-memory path can
 * beat it). */
static void raw_one_call(bench *b, void *arg)
{
    fusion_arg *a = arg;
    MPI_Allreduce(MPI_IN_PLACE, a->one, (int)(a->count * (size_t)a->n), MPI_FLOAT, MPI_SUM,
                  b->raw);
}

/* One step: tensors [0, n) ready, then the wait; the first error kept in *first. */
static void fusion_step(mt_fusion *f, int n, int *first)
{
    for (int i = 0; i < n; i++) {
        int rc = mt_fusion_ready(f, i);
        if (rc && !*first)
            *first = rc;
    }
    int rc = mt_fusion_wait(f);
    if (rc && !*first)
        *first = rc;
}

static void fused(bench *b, void *arg)
{
    fusion_arg *a = arg;
    fusion_step(a->f, a->n, &a->rc);
}

/* ------------------------------------------------ the model's gradients, per algorithm */

typedef struct {
    mt_fusion *f;
    float *one;           /* raw: the same bytes, one MPI_Allreduce */
    size_t count;
    int rc;
} model_arg;

static void model_step(bench *b, void *arg)
{
    model_arg *a = arg;
    fusion_step(a->f, 2 * NL, &a->rc); /* the six tensors, in the order backward gives them */
}

static void model_raw(bench *b, void *arg)
{
    model_arg *a = arg;
    MPI_Allreduce(MPI_IN_PLACE, a->one, (int)a->count, MPI_FLOAT, MPI_SUM, b->raw);
}

/* A fusion as the trainer makes it: the gradients in one block from mt_fusion_alloc,
 * each layer's weights and biases a tensor, last layer first; its first step done. */
static int model_fusion(bench *b, mt_fusion_options o, model_arg *a)
{
    float *g = NULL;
    int rc = mt_fusion_create_opts(b->ctx, &o, &a->f);
    if (!rc)
        rc = mt_fusion_alloc(a->f, a->count, &g);
    size_t off = 0;
    for (int l = NL - 1; l >= 0 && !rc; l--) {
        size_t sizes[2] = {mlp_wsize(l), (size_t)mlp_sizes[l + 1]};
        for (int k = 0; k < 2 && !rc; k++, off += sizes[k - 1])
            if (mt_fusion_add(a->f, g + off, sizes[k]) < 0)
                rc = MT_EINVAL;
    }
    for (size_t i = 0; !rc && i < a->count; i++)
        g[i] = (float)((i * 2654435761u + (unsigned)b->rank) % 1000) * 1e-4f;
    if (!rc)
        model_step(b, a); /* the registration check (auto: its timing) */
    return rc ? rc : a->rc;
}

/* The model's gradients (the example MLP's, 0.94 MB) averaged by each algorithm that can
 * serve these ranks, in fp32 and with fp16 and bf16 on the network, next to one raw
 * MPI_Allreduce of the same bytes; which algorithm auto picks; across nodes the issue's
 * budget fp16 <= 0.6x of fp32 for auto's algorithm. */
static int fusion_model(bench *b)
{
    int nodes = mt_node_rank(b->ctx) + 1, reps = b->quick ? 3 : 5, iters = b->quick ? 10 : 30;
    MPI_Allreduce(MPI_IN_PLACE, &nodes, 1, MPI_INT, MPI_MAX, b->raw);
    model_arg a = {.count = mlp_grad_count()};
    if (!(a.one = calloc(a.count, sizeof(float))))
        return MT_ENOMEM;
    /* auto's pick first, as the trainer would get it */
    int rc = model_fusion(b, (mt_fusion_options){0}, &a);
    char picked[16] = "";
    if (!rc)
        snprintf(picked, sizeof picked, "%s", mt_fusion_algo_name(a.f));
    mt_fusion_destroy(&a.f);
    const mt_fusion_algo algos[] = {MT_FUSION_FLAT, nodes > 1 ? MT_FUSION_HIER : MT_FUSION_SHM};
    double t[2][3] = {{0}}, raw[8];
    bench_say(b, "model gradients, %zu floats in one block (%d node%s): auto picks %s\n",
              a.count, nodes, nodes > 1 ? "s" : "", picked);
    bench_say(b, "%6s %6s %10s %10s %10s %12s\n", "algo", "wire", "avg_us", "raw_us",
              "vs_raw", "vs_flat_fp32");
    for (int i = 0; i < 2 && !rc; i++)
        for (int k = 0; k < 3 && !rc; k++) {
            if (algos[i] == MT_FUSION_SHM && k > 0)
                continue; /* nothing on a network to compress */
            rc = model_fusion(b, (mt_fusion_options){.algo = algos[i],
                                                     .compression = (mt_compression)k}, &a);
            double fu[8];
            for (int r = 0; r < reps && !rc; r++) { /* raw and fused alternate */
                if (r % 2)
                    fu[r] = time_op(b, model_step, &a, iters);
                raw[r] = time_op(b, model_raw, &a, iters);
                if (!(r % 2))
                    fu[r] = time_op(b, model_step, &a, iters);
            }
            mt_fusion_destroy(&a.f);
            rc = rc ? rc : a.rc;
            if (rc)
                break;
            double fu_avg, raw_avg;
            bench_over_ranks(b, bench_median(fu, reps), NULL, &fu_avg, NULL);
            bench_over_ranks(b, bench_median(raw, reps), NULL, &raw_avg, NULL);
            t[i][k] = fu_avg;
            /* the wire's format: uncompressed, it carries fp32 */
            const char *algo = mt_fusion_algo_word(algos[i]);
            const char *wire = k ? mt_compression_word((mt_compression)k) : "fp32";
            bench_say(b, "%6s %6s %10.1f %10.1f %9.2fx %11.2fx\n", algo, wire,
                      fu_avg * 1e6, raw_avg * 1e6, fu_avg / raw_avg, fu_avg / t[0][0]);
            bench_json(b, "fusion_model", "\"floats\": %zu, \"nodes\": %d, \"algo\": \"%s\", "
                       "\"wire\": \"%s\", \"avg_us\": %.3f, \"raw_us\": %.3f, "
                       "\"vs_flat_fp32\": %.4f, \"auto_picks\": \"%s\"", a.count, nodes,
                       algo, wire, fu_avg * 1e6, raw_avg * 1e6, fu_avg / t[0][0],
                       picked);
        }
    if (!rc && nodes > 1) {
        int i = !strcmp(picked, "hier");
        double x = t[i][1] / t[i][0], other = t[!i][0];
        bench_say(b, "across nodes: hier / flat (fp32) %.2fx, auto picked %s (the faster: %s); "
                     "budget fp16 <= 0.6x of fp32 (%s): %.2fx (%s)\n", t[1][0] / t[0][0],
                  picked, t[i][0] <= other ? "yes" : "no", mt_fusion_algo_word(algos[i]), x,
                  bench_verdict(b, x <= 0.6));
        bench_json(b, "fusion_model", "\"nodes\": %d, \"auto_picks\": \"%s\", "
                   "\"hier_vs_flat\": %.4f, \"fp16_vs_fp32\": %.4f%s", nodes, picked,
                   t[1][0] / t[0][0], x, bench_budget(b, true, x <= 0.6, "fp16_vs_fp32 <= 0.6"));
    }
    free(a.one);
    return rc;
}

int bench_fusion(bench *b)
{
    size_t sizes[] = {1024, 4096, 16384, 65536};
    int nsizes = b->quick ? 2 : 4, reps = b->quick ? 3 : 5, rc = MT_OK;
    bench_say(b, "%10s %8s %12s %12s %9s %14s %9s\n", "tensor_B", "tensors", "separate_us",
              "fused_us", "speedup", "one_call_us", "one_call_x");
    for (int s = 0; s < nsizes && !rc; s++) {
        size_t count = (b->quick && s == 1 ? sizes[2] : sizes[s]) / sizeof(float);
        fusion_arg a = {.n = 256, .count = count};
        a.t = calloc(256, sizeof *a.t);
        for (int i = 0; i < 256; i++)
            a.t[i] = calloc(count, sizeof(float));
        a.one = calloc(count * 256, sizeof(float));
        rc = mt_fusion_create(b->ctx, 0, &a.f);
        for (int i = 0; i < 256 && !rc; i++)
            if (mt_fusion_add(a.f, a.t[i], count) < 0)
                rc = MT_EINVAL;
        int iters = count * 4 <= 4096 ? 40 : 10;
        if (!rc) {
            fused(b, &a); /* registration check + warm-up */
            raw_per_tensor(b, &a);
            raw_one_call(b, &a);
            double raw[8], fu[8], one[8];
            for (int r = 0; r < reps; r++) {
                raw[r] = time_op(b, raw_per_tensor, &a, iters);
                fu[r] = time_op(b, fused, &a, iters);
                one[r] = time_op(b, raw_one_call, &a, iters);
            }
            double raw_avg, fu_avg, one_avg;
            bench_over_ranks(b, bench_median(raw, reps), NULL, &raw_avg, NULL);
            bench_over_ranks(b, bench_median(fu, reps), NULL, &fu_avg, NULL);
            bench_over_ranks(b, bench_median(one, reps), NULL, &one_avg, NULL);
            bench_say(b, "%10zu %8d %12.1f %12.1f %8.1fx %14.1f %8.1fx\n", count * 4, 256,
                      raw_avg * 1e6, fu_avg * 1e6, raw_avg / fu_avg, one_avg * 1e6,
                      raw_avg / one_avg);
            bench_json(b, "fusion", "\"tensor_bytes\": %zu, \"tensors\": 256, "
                       "\"separate_us\": %.3f, \"fused_us\": %.3f, \"speedup\": %.3f, "
                       "\"one_call_us\": %.3f, \"one_call_speedup\": %.3f%s",
                       count * 4, raw_avg * 1e6, fu_avg * 1e6, raw_avg / fu_avg,
                       one_avg * 1e6, raw_avg / one_avg,
                       bench_budget(b, s == 0 && b->size > 1,
                                    raw_avg / fu_avg >= 10 || fu_avg <= one_avg,
                                    "speedup >= 10, or fused_us <= one_call_us"));
            if (s == 0 && b->size > 1)
                bench_say(b, "budget: fused >= 10x faster at 256 x 1 KiB, or no slower than one "
                             "MPI_Allreduce of all the bytes: %.1fx, one call %.1fx (%s)\n",
                          raw_avg / fu_avg, raw_avg / one_avg,
                          bench_verdict(b, raw_avg / fu_avg >= 10 || fu_avg <= one_avg));
            rc = a.rc;
        }
        mt_fusion_destroy(&a.f);
        for (int i = 0; i < 256; i++)
            free(a.t[i]);
        free(a.t);
        free(a.one);
    }
    return rc ? rc : b->size > 1 ? fusion_model(b) : MT_OK;
}

/* One layer's backward: touch every element a few times. */
static void compute(float *t, size_t n, int passes)
{
    for (int p = 0; p < passes; p++)
        for (size_t i = 0; i < n; i++)
            t[i] = t[i] * 0.999f + 0.001f;
}

/* The overlap suite. Each repetition times one step both ways, in turns: serial (the
 * compute of every layer, then mt_fusion_wait reduces all of them: the compute alone and
 * the reduction alone) and overlapped (each layer marked ready once computed, so its
 * bucket is reduced by the fusion's thread while the next layer is computed: the compute
 * under that competing thread, then what is left to wait for). The fraction of the
 * reduction hidden is 1 - exposed wait / reduction alone: at most 100%, since a wait is
 * never negative. (It used to be (serial - overlapped) / reduction, which passes 100%
 * whenever the overlapped step beats the compute alone timed in another step: noise, a
 * median of differences taken as a difference of medians, or a compute that ran faster
 * beside the waking thread; and at 1 rank, with nothing to reduce, it was noise over
 * noise.) The compute's slow-down beside the thread and the step's gain are printed too,
 * with the ideal overlapped step: max(compute + the last layer's reduction, the first
 * layer's compute + all of the reduction), the last bucket being reduced by the wait. */
int bench_overlap(bench *b)
{
    int layers = 8, passes = 6, reps = b->quick ? 3 : 9, rc = MT_OK;
    size_t count = b->quick ? (size_t)1 << 19 : (size_t)1 << 21; /* 2 or 8 MiB a layer */
    float **t = calloc((size_t)layers, sizeof *t);
    int ok = t != NULL;
    for (int l = 0; ok && l < layers; l++)
        ok = (t[l] = calloc(count, sizeof(float))) != NULL;
    rc = bench_agree(b, ok ? MT_OK : MT_ENOMEM);
    mt_fusion *f = NULL;
    if (!rc)
        rc = mt_fusion_create(b->ctx, count * sizeof(float), &f); /* a bucket per layer */
    for (int l = 0; l < layers && !rc; l++)
        mt_fusion_add(f, t[l], count); /* a failed add: reported by the first wait */
    if (!rc)
        rc = mt_fusion_wait(f); /* registration, and pages touched */
    double k[16], c[16], s[16], ko[16], w[16], o[16];
    for (int r = 0; r < reps && !rc; r++) {
        for (int turn = 0; turn < 2 && !rc; turn++) {
            bool overlap = (turn + r) % 2; /* which goes first alternates */
            MPI_Barrier(b->raw);
            double t0 = bench_now();
            for (int l = 0; l < layers; l++) {
                compute(t[l], count, passes);
                if (overlap)
                    mt_fusion_ready(f, l); /* an error: the wait's, on every rank */
            }
            double t1 = bench_now();
            rc = mt_fusion_wait(f);
            double t2 = bench_now();
            if (overlap)
                ko[r] = t1 - t0, w[r] = t2 - t1, o[r] = t2 - t0;
            else
                k[r] = t1 - t0, c[r] = t2 - t1, s[r] = t2 - t0;
        }
    }
    if (!rc) {
        double km, cm, sm, kom, wm, om;
        bench_over_ranks(b, bench_median(k, reps), NULL, &km, NULL);
        bench_over_ranks(b, bench_median(c, reps), NULL, &cm, NULL);
        bench_over_ranks(b, bench_median(s, reps), NULL, &sm, NULL);
        bench_over_ranks(b, bench_median(ko, reps), NULL, &kom, NULL);
        bench_over_ranks(b, bench_median(w, reps), NULL, &wm, NULL);
        bench_over_ranks(b, bench_median(o, reps), NULL, &om, NULL);
        double per = cm / layers, ideal = km + per > km / layers + cm ? km + per : km / layers + cm;
        bench_say(b, "%d layers x %zu floats, medians: compute %.1f ms, then the reduction %.1f ms: "
                     "serial step %.1f ms\n", layers, count, km * 1e3, cm * 1e3, sm * 1e3);
        bench_say(b, "overlapped step %.1f ms: compute beside the fusion's thread %.1f ms (%.2fx "
                     "alone), then waited %.1f ms; ideal %.1f ms\n", om * 1e3, kom * 1e3,
                  km > 0 ? kom / km : 0, wm * 1e3, ideal * 1e3);
        if (b->size > 1 && cm > 0)
            bench_say(b, "hidden: %.0f%% of the reduction (the ideal step hides %.0f%%: the last "
                         "layer's is the wait's); the step %.0f%% shorter than serial\n",
                      (1 - wm / cm) * 100, (1 - (ideal - km) / cm) * 100, (1 - om / sm) * 100);
        else
            bench_say(b, "hidden: nothing to hide (%d rank: no reduction)\n", b->size);
        char hidden[32] = "null";
        if (b->size > 1 && cm > 0)
            snprintf(hidden, sizeof hidden, "%.4f", 1 - wm / cm);
        bench_json(b, "overlap", "\"layers\": %d, \"floats_per_layer\": %zu, "
                   "\"compute_ms\": %.3f, \"reduce_ms\": %.3f, \"serial_ms\": %.3f, "
                   "\"overlapped_ms\": %.3f, \"overlapped_compute_ms\": %.3f, "
                   "\"exposed_ms\": %.3f, \"ideal_ms\": %.3f, \"hidden_fraction\": %s",
                   layers, count, km * 1e3, cm * 1e3, sm * 1e3, om * 1e3, kom * 1e3, wm * 1e3,
                   ideal * 1e3, hidden);
    }
    mt_fusion_destroy(&f);
    for (int l = 0; t && l < layers; l++)
        free(t[l]);
    free(t);
    return rc;
}
