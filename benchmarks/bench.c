/*
 * mpitrain-bench -- the benchmark suite. Every figure is printed next to a raw baseline
 * measured in the same run (raw MPI, raw pread/write), with the ratio, so results are
 * comparable across machines. Runs inside mt_trainer_fit, as training code does.
 */
#include "bench.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    const char *name;
    int (*run)(bench *b);
    const char *what;
} suite;

static const suite suites[] = {
    {"allreduce", bench_allreduce, "mt_allreduce vs MPI_Allreduce, 4 B to 64 MiB (OSU-style)"},
    {"fusion", bench_fusion, "256 tensors averaged with mt_fusion vs one MPI_Allreduce each"},
    {"overlap", bench_overlap, "backward compute with mt_fusion_ready vs compute then reduce"},
    {"shard", bench_shard, "dataset shard read through parallel HDF5 vs raw pread, warm cache"},
    {"report", bench_report, "mt_report with 8 numeric metrics vs raw MPI_Gather of the same bytes"},
    {"checkpoint", bench_checkpoint, "sharded checkpoint commit vs one process write+fsync"},
    {"train", bench_train, "MLP training steps (global batch 128): per-rank samples/s vs one rank"},
};
#define NSUITES (int)(sizeof suites / sizeof *suites)

double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double bench_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void bench_over_ranks(const bench *b, double x, double *mn, double *avg, double *mx)
{
    double lo = x, hi = x, sum = x;
    MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_DOUBLE, MPI_MIN, b->raw);
    MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_DOUBLE, MPI_MAX, b->raw);
    MPI_Allreduce(MPI_IN_PLACE, &sum, 1, MPI_DOUBLE, MPI_SUM, b->raw);
    if (mn) *mn = lo;
    if (mx) *mx = hi;
    if (avg) *avg = sum / b->size;
}

void bench_json(const bench *b, const char *suite_name, const char *fmt, ...)
{
    if (b->rank != 0 || !b->json)
        return;
    fprintf(b->json, "{\"suite\": \"%s\", \"ranks\": %d, ", suite_name, b->size);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(b->json, fmt, ap);
    va_end(ap);
    fprintf(b->json, "}\n");
    fflush(b->json);
}

void bench_say(const bench *b, const char *fmt, ...)
{
    if (b->rank != 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fflush(stdout);
}

static void usage(FILE *out)
{
    fprintf(out, "usage: mpirun -np N mpitrain-bench [--suite NAME[,NAME...]] [--quick] "
                 "[--json FILE] [--tmpdir DIR] [mpitrain options]\n\n"
                 "Suites (default: all):\n");
    for (int i = 0; i < NSUITES; i++)
        fprintf(out, "  %-10s %s\n", suites[i].name, suites[i].what);
    fprintf(out, "\n  --quick      fewer sizes and repetitions (under two minutes on 2 cores)\n"
                 "  --json FILE  also write one JSON line per figure to FILE (rank 0)\n"
                 "  --tmpdir DIR where I/O suites write (default: $TMPDIR or /tmp)\n\n");
    mt_config_usage(out);
}

typedef struct {
    bench *b;
    bool selected[NSUITES];
} plan;

static int run_suites(mt_context *ctx, void *arg)
{
    plan *p = arg;
    bench *b = p->b;
    b->ctx = ctx;
    b->rank = mt_world_rank(ctx);
    b->size = mt_world_size(ctx);
    MPI_Comm_dup(mt_comm(ctx), &b->raw);
    int rc = MT_OK;
    for (int i = 0; i < NSUITES && rc == MT_OK; i++) {
        if (!p->selected[i])
            continue;
        bench_say(b, "\n== %s: %s (%d ranks)\n", suites[i].name, suites[i].what, b->size);
        rc = suites[i].run(b);
    }
    MPI_Comm_free(&b->raw);
    return rc;
}

static int select_suites(plan *p, const char *list)
{
    char *copy = strdup(list), *save = NULL;
    int rc = 0;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int found = -1;
        for (int i = 0; i < NSUITES; i++)
            if (!strcmp(suites[i].name, tok))
                found = i;
        if (found < 0) {
            fprintf(stderr, "mpitrain-bench: unknown suite '%s' (see --help)\n", tok);
            rc = -1;
        } else
            p->selected[found] = true;
    }
    free(copy);
    return rc;
}

int main(int argc, char **argv)
{
    mt_init(&argc, &argv);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    mt_trainer_config cfg = {.run = {.name = "mpitrain-bench", .verbose = MT_VERBOSE_SILENT,
                                     .overwrite = true, .checkpoint.num_to_keep = 1}};
    int rc = mt_config_from_args(&cfg, &argc, &argv);
    bench b = {.tmpdir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp"};
    plan p = {.b = &b};
    const char *json = NULL, *only = NULL;
    bool help = false;
    for (int i = 1; i < argc && !rc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h"))
            help = true;
        else if (!strcmp(a, "--quick"))
            b.quick = true;
        else if (!strcmp(a, "--json") && i + 1 < argc)
            json = argv[++i];
        else if (!strncmp(a, "--json=", 7))
            json = a + 7;
        else if (!strcmp(a, "--suite") && i + 1 < argc)
            only = argv[++i];
        else if (!strncmp(a, "--suite=", 8))
            only = a + 8;
        else if (!strcmp(a, "--tmpdir") && i + 1 < argc)
            b.tmpdir = argv[++i];
        else {
            if (rank == 0)
                fprintf(stderr, "mpitrain-bench: unknown option '%s' (see --help)\n", a);
            rc = MT_EINVAL;
        }
    }
    if (rc && rank == 0 && mt_last_error()[0])
        fprintf(stderr, "mpitrain-bench: %s\n", mt_last_error());
    if (!rc && help) {
        if (rank == 0)
            usage(stdout);
        mt_finalize();
        return 0;
    }
    if (!rc && only && select_suites(&p, only))
        rc = MT_EINVAL;
    if (!only)
        for (int i = 0; i < NSUITES; i++)
            p.selected[i] = true;
    if (!rc && json && rank == 0 && !(b.json = fopen(json, "w"))) {
        fprintf(stderr, "mpitrain-bench: cannot write %s\n", json);
        rc = MT_EIO;
    }
    /* the shard suite streams each rank's part in windows: a quarter of it in memory */
    int world = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    cfg.data.memory_limit = (b.quick ? (size_t)256 << 20 : (size_t)1 << 30) / (size_t)world / 4;
    /* every rank must learn about a problem rank 0 found alone */
    MPI_Allreduce(MPI_IN_PLACE, &rc, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!rc) {
        mt_trainer *t = NULL;
        mt_result *res = NULL;
        rc = mt_trainer_create(&t, run_suites, &p, &cfg);
        char shard_file[1024];
        snprintf(shard_file, sizeof shard_file, "%s/mpitrain-bench-shard-%lld.h5", b.tmpdir,
                 (long long)((b.quick ? (size_t)256 << 20 : (size_t)1 << 30) / 4096));
        static const char *names[] = {"bench-independent", "bench-collective",
                                      "bench-shuffle"};
        for (size_t i = 0; i < sizeof names / sizeof *names && !rc; i++)
            rc = mt_trainer_add_dataset(t, names[i], shard_file, "/train");
        if (!rc)
            rc = mt_trainer_fit(t, &res);
        if (rc && rank == 0)
            fprintf(stderr, "mpitrain-bench: %s\n", res ? mt_result_error(res) : mt_last_error());
        mt_result_free(&res);
        mt_trainer_destroy(&t);
    }
    if (b.json)
        fclose(b.json);
    mt_finalize();
    return rc ? 1 : 0;
}
