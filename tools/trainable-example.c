/*
 * trainable-example -- a training job written as a trainable (setup, step, save, load,
 * cleanup) instead of a training function: linear regression on synthetic data,
 * full-batch gradient descent, gradients averaged over the ranks with mt_allreduce.
 *
 *   mpirun -np 2 ./trainable-example --iterations 50
 *
 * The callbacks hold no resume, retry or preemption logic: the trainer calls load with
 * the latest checkpoint when the run resumes (same --name) or retries (--max-failures),
 * and saves one whenever --checkpoint-frequency or a stop request (SIGTERM/SIGUSR1) asks.
 * The model counts its own iterations and reports the count; a run that was killed,
 * retried or preempted reaches the same weights as one that was not (same ranks, seed).
 * Uses only <mpitrain.h> and libmpitrain.
 *
 * Exit status: 0 done, 1 failed, 75 preempted (rerun to resume), 76 stalled, 2 usage.
 */
#include <mpitrain.h>

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    /* options */
    int64_t rows, iterations, fail_iteration;
    int features, steps, delay_ms, fail_rank;
    double lr, target_loss;
    uint64_t seed;
    /* state: setup builds it, cleanup frees it, save and load carry w and done */
    double *x, *y;   /* this rank's rows: rows x features, rows */
    double *w;       /* features weights, then the bias */
    double *g;       /* gradient (features + 1), then the loss */
    int64_t done;    /* iterations this model has been trained for */
} model;

/* splitmix64: the same data on a rank for a given seed, world size and rank */
static uint64_t next_u64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static double uniform(uint64_t *s) /* in [-1, 1) */
{
    return (double)(next_u64(s) >> 11) * 0x1.0p-52 - 1.0;
}

static double true_weight(int k, int features)
{
    return k == features ? 1.0 : (k % 2 ? -0.5 : 0.5) * (k + 1); /* the last one: bias */
}

/* ------------------------------------------------------------ the trainable */

static void cleanup(mt_context *ctx, void *user)
{
    (void)ctx;
    model *m = user;
    free(m->x), free(m->y), free(m->w), free(m->g);
    m->x = m->y = m->w = m->g = NULL;
}

static int setup(mt_context *ctx, void *user)
{
    model *m = user;
    size_t n = (size_t)m->rows, d = (size_t)m->features;
    m->x = malloc(n * d * sizeof *m->x);
    m->y = malloc(n * sizeof *m->y);
    m->w = calloc(d + 1, sizeof *m->w); /* every attempt starts from zero weights */
    m->g = calloc(d + 2, sizeof *m->g);
    m->done = 0;
    if (!m->x || !m->y || !m->w || !m->g) {
        fprintf(stderr, "trainable-example: rank %d: out of memory for %" PRId64 " rows\n",
                mt_world_rank(ctx), m->rows);
        return MT_ENOMEM; /* cleanup frees what was allocated */
    }
    uint64_t s = m->seed * 1000003u + (uint64_t)mt_world_rank(ctx);
    for (size_t i = 0; i < n; i++) {
        double y = true_weight((int)d, (int)d);
        for (size_t k = 0; k < d; k++) {
            m->x[i * d + k] = uniform(&s);
            y += m->x[i * d + k] * true_weight((int)k, (int)d);
        }
        m->y[i] = y + 0.01 * uniform(&s);
    }
    return MT_OK;
}

static int step(mt_context *ctx, void *user, mt_metrics *out)
{
    model *m = user;
    size_t n = (size_t)m->rows, d = (size_t)m->features;
    int rc = MT_OK;
    for (int s = 0; s < m->steps && !rc; s++) {
        memset(m->g, 0, (d + 2) * sizeof *m->g);
        for (size_t i = 0; i < n; i++) {
            const double *xi = m->x + i * d;
            double r = m->w[d] - m->y[i];
            for (size_t k = 0; k < d; k++)
                r += xi[k] * m->w[k];
            for (size_t k = 0; k < d; k++)
                m->g[k] += 2 * r * xi[k] / (double)n;
            m->g[d] += 2 * r / (double)n;
            m->g[d + 1] += r * r / (double)n;
        }
        rc = mt_allreduce(ctx, m->g, d + 2, MT_F64, MT_MEAN); /* every rank: the same step */
        for (size_t k = 0; k <= d && !rc; k++)
            m->w[k] -= m->lr * m->g[k];
    }
    if (rc)
        return rc;
    m->done++;
    if (mt_world_rank(ctx) == m->fail_rank && m->done == m->fail_iteration &&
        mt_attempt(ctx) == 0) {
        fprintf(stderr, "trainable-example: rank %d: injected failure in iteration %" PRId64
                        "\n", m->fail_rank, m->done);
        return MT_EIO;
    }
    double err = 0;
    for (size_t k = 0; k <= d; k++)
        err += (m->w[k] - true_weight((int)k, (int)d)) * (m->w[k] - true_weight((int)k, (int)d));
    double loss = m->g[d + 1];
    mt_metrics_set_f64(out, "loss", loss);
    mt_metrics_set_f64(out, "weight_error", sqrt(err));
    mt_metrics_set_i64(out, "model_iterations", m->done);
    if (m->delay_ms > 0) {
        struct timespec ts = {m->delay_ms / 1000, (long)(m->delay_ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
            ; /* a stop request arrives as a signal: the next report handles it */
    }
    return loss < m->target_loss ? MT_STEP_DONE : MT_OK;
}

static int save(mt_context *ctx, void *user, mt_checkpoint *ck)
{
    (void)ctx;
    model *m = user;
    size_t nw = (size_t)m->features + 1, one = 1;
    int rc = mt_checkpoint_put(ck, "w", MT_F64, 1, &nw, m->w, MT_REPLICATED);
    if (!rc)
        rc = mt_checkpoint_put(ck, "done", MT_I64, 1, &one, &m->done, MT_REPLICATED);
    if (!rc)
        rc = mt_checkpoint_set_meta(ck, "model", "linear-regression");
    return rc;
}

static int load(mt_context *ctx, void *user, const mt_checkpoint *ck)
{
    model *m = user;
    int nd = 0;
    size_t dims[8];
    int rc = mt_checkpoint_dims(ck, "w", &nd, dims);
    if (!rc && (nd != 1 || dims[0] != (size_t)m->features + 1)) {
        if (mt_world_rank(ctx) == 0)
            fprintf(stderr, "trainable-example: %s holds %zu weights; this run has "
                            "--features %d (%d weights)\n", mt_checkpoint_path(ck),
                    nd == 1 ? dims[0] - 1 : 0, m->features, m->features);
        rc = MT_EINVAL;
    }
    if (!rc)
        rc = mt_checkpoint_get(ck, "w", MT_F64, m->w, (size_t)m->features + 1);
    if (!rc)
        rc = mt_checkpoint_get(ck, "done", MT_I64, &m->done, 1);
    if (!rc && mt_world_rank(ctx) == 0)
        printf("trainable-example: resumed from %s (%" PRId64 " iterations done)\n",
               mt_checkpoint_path(ck), m->done);
    return rc;
}

/* ------------------------------------------------------------ options */

static const mt_trainer_config default_config = {
    .run = {.name = "linear-regression", .checkpoint = {.frequency = 1, .num_to_keep = 2}}};

static void usage(FILE *out)
{
    fprintf(out,
        "usage: mpirun -np N trainable-example [OPTIONS]   or   trainable-example --num-workers N\n"
        "\n"
        "Linear regression on synthetic data (each rank makes its own rows), written as a\n"
        "trainable: the trainer calls setup, step, save, load and cleanup, and so resumes,\n"
        "retries and stops for preemption on its own.\n"
        "\n"
        "  --iterations N          iterations of the run (max_iterations); default 50\n"
        "  --steps-per-iteration K gradient steps per iteration; default 10\n"
        "  --rows N                rows per rank; default 1000\n"
        "  --features D            default 8\n"
        "  --lr X                  learning rate; default 0.05\n"
        "  --target-loss X         stop early (MT_STEP_DONE) once the loss is below X; default 0\n"
        "  --seed N                data seed; default 1\n"
        "  --step-delay-ms MS      pause after each iteration (to watch or interrupt a run)\n"
        "  --fail-rank R --fail-iteration I   tests: rank R's step fails in iteration I of\n"
        "                          the first attempt\n"
        "  --help                  this text\n"
        "\n"
        "Exit status: 0 done, 1 failed, 75 preempted (rerun to resume), 76 stalled, 2 usage.\n\n");
    mt_config_help(out, &default_config); /* the library's options, with this program's defaults */
}

/* The options that take a number: where the value goes and its range. */
typedef struct {
    const char *name;
    bool whole;
    double min, max;
} option;
static const option opts[] = {
    {"--iterations", true, 1, 1e12},        {"--steps-per-iteration", true, 1, 1e9},
    {"--rows", true, 1, 1e8},               {"--features", true, 1, 1e6},
    {"--lr", false, 1e-12, 1e6},            {"--target-loss", false, 0, 1e30},
    {"--seed", true, 0, 9e15},              {"--step-delay-ms", true, 0, 3600000},
    {"--fail-rank", true, -1, 1e9},         {"--fail-iteration", true, -1, 1e12},
};

static void set(model *m, size_t k, double v)
{
    switch (k) {
    case 0: m->iterations = (int64_t)v; break;
    case 1: m->steps = (int)v; break;
    case 2: m->rows = (int64_t)v; break;
    case 3: m->features = (int)v; break;
    case 4: m->lr = v; break;
    case 5: m->target_loss = v; break;
    case 6: m->seed = (uint64_t)v; break;
    case 7: m->delay_ms = (int)v; break;
    case 8: m->fail_rank = (int)v; break;
    case 9: m->fail_iteration = (int64_t)v; break;
    }
}

/* Every option after mt_config_from_args took its own; anything else is refused. */
static int parse(int argc, char **argv, model *m, int rank)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        size_t k = 0, n = sizeof opts / sizeof *opts;
        while (k < n && strcmp(a, opts[k].name))
            k++;
        const char *why = NULL;
        double x = 0;
        if (k == n)
            why = "unknown option (see --help)";
        else if (!v)
            why = "needs a value";
        else {
            char *end = NULL;
            errno = 0;
            x = opts[k].whole ? (double)strtoll(v, &end, 10) : strtod(v, &end);
            if (!*v || *end || errno || !isfinite(x))
                why = opts[k].whole ? "is not an integer" : "is not a number";
            else if (x < opts[k].min || x > opts[k].max)
                why = "is out of range";
        }
        if (why) {
            if (rank == 0 && k < n && v)
                fprintf(stderr, "trainable-example: option %s: '%s' %s (%s from %g to %g)\n",
                        a, v, why, opts[k].whole ? "an integer" : "a number", opts[k].min,
                        opts[k].max);
            else if (rank == 0)
                fprintf(stderr, "trainable-example: option '%s': %s\n", a, why);
            return -1;
        }
        set(m, k, x);
        i++;
    }
    return 0;
}

int main(int argc, char **argv)
{
    int rc = mt_init(&argc, &argv);
    if (rc) {
        fprintf(stderr, "trainable-example: %s\n", mt_last_error());
        return 1;
    }
    int rank = mt_job_rank();
    mt_trainer_config cfg = default_config;
    rc = mt_config_from_args(&cfg, &argc, &argv);
    if (rc) {
        if (rank == 0)
            fprintf(stderr, "trainable-example: %s\n", mt_last_error());
        mt_finalize();
        return 2;
    }
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            if (rank == 0)
                usage(stdout);
            mt_finalize();
            return 0;
        }
    model m = {.iterations = 50, .steps = 10, .rows = 1000, .features = 8, .lr = 0.05,
               .seed = 1, .fail_rank = -1, .fail_iteration = -1};
    if (parse(argc, argv, &m, rank)) {
        mt_finalize();
        return 2;
    }
    mt_trainable tr = {.setup = setup, .step = step, .save = save, .load = load,
                       .cleanup = cleanup, .max_iterations = m.iterations};
    mt_trainer *t = NULL;
    mt_result *res = NULL;
    rc = mt_trainer_create_trainable(&t, &tr, &m, &cfg);
    if (!rc)
        rc = mt_trainer_fit(t, &res);
    if (rank == 0) {
        const mt_metrics *last = res ? mt_result_metrics(res) : NULL;
        double loss = 0, err = 0;
        int64_t it = 0;
        if (rc == MT_ESTOP)
            printf("trainable-example: preempted after a checkpoint; run the same command "
                   "again to resume (%s)\n", mt_result_path(res));
        else if (rc)
            fprintf(stderr, "trainable-example: failed: %s\n",
                    res && mt_result_error(res) ? mt_result_error(res) : mt_last_error());
        else if (!last)
            printf("trainable-example: done: nothing was left to train (%s)\n",
                   mt_result_path(res));
        else {
            mt_metrics_get_f64(last, "loss", &loss);
            mt_metrics_get_f64(last, "weight_error", &err);
            mt_metrics_get_i64(last, "training_iteration", &it);
            printf("trainable-example: done: %" PRId64 " iterations, loss %.6g, weight error "
                   "%.6g; run directory %s\n", it, loss, err, mt_result_path(res));
        }
    }
    mt_result_free(&res);
    mt_trainer_destroy(&t);
    mt_finalize();
    return rc == MT_OK ? 0 : rc == MT_ESTOP ? MT_EXIT_PREEMPTED : MT_EXIT_FAILED;
}
