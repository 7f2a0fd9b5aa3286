/*
 * mpitrain-bench -- the benchmark suite. Every figure is printed next to a raw baseline
 * measured in the same run (raw MPI, raw pread/write), with the ratio, so results are
 * comparable across machines. Runs inside mt_trainer_fit, as training code does.
 */
#ifdef HAVE_CONFIG_H
#include "config.h" /* PACKAGE_VERSION, when configure does not pass it on the command line */
#endif

#include "bench.h"
#include "../tools/scratch.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    const char *name;
    int (*run)(bench *b);
    const char *what, *quick; /* the title in full mode, and with --quick */
    int (*sizes)(const bench *b, size_t *out, int max); /* what --sizes may pick, or NULL */
} suite;

static const suite suites[] = {
    {"allreduce", bench_allreduce, "mt_allreduce vs MPI_Allreduce, 4 B to 64 MiB (x2 steps, OSU-style)",
     "mt_allreduce vs MPI_Allreduce, 4 B to 4 MiB (x4 steps, OSU-style)", bench_allreduce_sizes},
    {"fusion", bench_fusion, "256 tensors of 1, 4, 16 and 64 KiB averaged with mt_fusion vs one MPI_Allreduce each",
     "256 tensors of 1 and 16 KiB averaged with mt_fusion vs one MPI_Allreduce each", NULL},
    {"overlap", bench_overlap, "backward compute (8 layers x 8 MiB) with mt_fusion_ready vs compute then reduce",
     "backward compute (8 layers x 2 MiB) with mt_fusion_ready vs compute then reduce", NULL},
    {"shard", bench_shard, "a 1 GiB dataset's shards read through parallel HDF5 vs raw pread, warm cache",
     "a 256 MiB dataset's shards read through parallel HDF5 vs raw pread, warm cache", NULL},
    {"report", bench_report, "2000 mt_report calls with 8 numeric metrics vs raw MPI_Gather, MPI_Reduce and the floor of the same work",
     "300 mt_report calls with 8 numeric metrics vs raw MPI_Gather, MPI_Reduce and the floor of the same work", NULL},
    {"checkpoint", bench_checkpoint, "sharded checkpoint commit of 16 MiB to 1 GiB vs one process write+fsync",
     "sharded checkpoint commit of 16 to 256 MiB vs one process write+fsync", bench_checkpoint_sizes},
    {"train", bench_train, "MLP training steps (global batch 128), averaged serially, per layer and in row "
     "blocks, 8 rounds of 50: per-rank samples/s vs one rank and the ideal bound",
     "MLP training steps (global batch 128), averaged serially, per layer and in row blocks, "
     "3 rounds of 10: per-rank samples/s vs one rank and the ideal bound", NULL},
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

bool bench_size_wanted(const bench *b, size_t bytes)
{
    for (int i = 0; i < b->nsizes; i++)
        if (b->sizes[i] == bytes)
            return true;
    return b->nsizes == 0;
}

#define BENCH_MAX_SIZE ((uint64_t)1 << 30)

/* --sizes LIST: byte counts, each a whole number with an optional K, M or G (binary), at
 * most 1 GiB once the unit is applied. */
static int parse_sizes(bench *b, const char *list, int rank)
{
    char copy[512], *save = NULL;
    snprintf(copy, sizeof copy, "%s", list);
    b->nsizes = 0;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        size_t len = strlen(tok), shift = 0;
        char last = len ? tok[len - 1] : '\0', as_given[64];
        snprintf(as_given, sizeof as_given, "%s", tok);
        if (last == 'K' || last == 'M' || last == 'G') {
            shift = last == 'K' ? 10 : last == 'M' ? 20 : 30;
            tok[len - 1] = '\0';
        }
        uint64_t v = 0;
        if (mt_parse_u64("--sizes", tok, 1, (uint64_t)1 << 30, &v))
            return MT_EINVAL; /* its message is printed */
        if (v > BENCH_MAX_SIZE >> shift) { /* the bound holds after the unit, never wraps */
            if (rank == 0)
                fprintf(stderr, "mpitrain-bench: --sizes: %s is more than 1 GiB, the largest "
                                "byte count a suite measures\n", as_given);
            return MT_EINVAL;
        }
        if (b->nsizes == (int)(sizeof b->sizes / sizeof *b->sizes)) {
            b->nsizes = 0; /* too many */
            break;
        }
        b->sizes[b->nsizes++] = (size_t)(v << shift);
    }
    if (b->nsizes)
        return MT_OK;
    if (rank == 0)
        fprintf(stderr, "mpitrain-bench: --sizes '%s': 1 to %d byte counts, each a whole number "
                        "with an optional K, M or G\n", list,
                (int)(sizeof b->sizes / sizeof *b->sizes));
    return MT_EINVAL;
}

/* Every --sizes byte count is one that a selected suite measures (in this mode), or the
 * list is refused naming it and the sizes there are: a figure only where a size is
 * measured, never a run that measures nothing. */
static int check_sizes(const bench *b, const bool *selected, int rank)
{
    if (!b->nsizes)
        return MT_OK;
    size_t all[64], mine[32];
    int n = 0;
    for (int i = 0; i < NSUITES; i++) {
        if (!selected[i] || !suites[i].sizes)
            continue;
        int k = suites[i].sizes(b, mine, 32);
        for (int j = 0; j < k && n < 64; j++)
            all[n++] = mine[j];
    }
    char list[1024] = "";
    size_t used = 0;
    for (int j = 0; j < n && used < sizeof list - 32; j++) {
        size_t v = all[j];
        const char *unit = v >= (1u << 30) && !(v & ((1u << 30) - 1)) ? "G"
                           : v >= (1u << 20) && !(v & ((1u << 20) - 1)) ? "M"
                           : v >= 1024 && !(v & 1023) ? "K" : "";
        size_t shown = *unit == 'G' ? v >> 30 : *unit == 'M' ? v >> 20 : *unit == 'K' ? v >> 10 : v;
        bool seen = false;
        for (int q = 0; q < j && !seen; q++)
            seen = all[q] == v;
        if (!seen)
            used += (size_t)snprintf(list + used, sizeof list - used, "%s%zu%s", used ? "," : "",
                                     shown, unit);
    }
    for (int i = 0; i < b->nsizes; i++) {
        bool found = false;
        for (int j = 0; j < n && !found; j++)
            found = all[j] == b->sizes[i];
        if (found)
            continue;
        if (rank == 0) {
            if (!n)
                fprintf(stderr, "mpitrain-bench: --sizes applies to the allreduce and checkpoint "
                                "suites, and none of them is selected\n");
            else
                fprintf(stderr, "mpitrain-bench: --sizes: %zu bytes is no size the selected "
                                "suites measure%s (they measure %s); nothing would be measured "
                                "there\n", b->sizes[i], b->quick ? " with --quick" : "", list);
        }
        return MT_EINVAL;
    }
    return MT_OK;
}

int bench_agree(const bench *b, int rc)
{
    MPI_Allreduce(MPI_IN_PLACE, &rc, 1, MPI_INT, MPI_MIN, b->raw);
    return rc;
}

void bench_json(bench *b, const char *suite_name, const char *fmt, ...)
{
    if (b->rank != 0 || !b->json)
        return;
    fprintf(b->json, "{\"suite\": \"%s\", \"date\": \"%s\", \"host\": \"%s\", \"version\": \"%s\", "
            "\"ranks\": %d, \"mode\": \"%s\", ", suite_name, b->date, b->host, PACKAGE_VERSION,
            b->size, b->quick ? "quick" : "full");
    va_list ap;
    va_start(ap, fmt);
    int bad = vfprintf(b->json, fmt, ap) < 0;
    va_end(ap);
    bad |= fprintf(b->json, "}\n") < 0;
    bad |= fflush(b->json) != 0 || ferror(b->json);
    if (bad && !b->json_errno) /* said at exit, which then fails */
        b->json_errno = errno ? errno : EIO;
}

const char *bench_budget(bench *b, bool applies, bool met, const char *rule)
{
    b->budget_json[0] = '\0';
    if (!applies)
        return b->budget_json;
    if (!met)
        b->budgets_missed++;
    snprintf(b->budget_json, sizeof b->budget_json, ", \"budget\": \"%s\", \"budget_met\": %s",
             rule, met ? "true" : "false");
    return b->budget_json;
}

const char *bench_verdict(const bench *b, bool met)
{
    if (met)
        return "met";
    return b->quick ? "over it in this quick run (no verdict: run without --quick)" : "NOT met";
}

static int stdout_errno; /* rank 0: the first failed write of the table (0: none) */

void bench_say(const bench *b, const char *fmt, ...)
{
    if (b->rank != 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    int bad = vprintf(fmt, ap) < 0;
    va_end(ap);
    if ((fflush(stdout) != 0 || bad) && !stdout_errno) /* said at exit, which then fails */
        stdout_errno = errno ? errno : EIO;
}

/* The library's options this program takes: where to keep its run, and tracing. */
static const char *const lib_options[] = {"name", "storage-path", "trace", NULL};

#define EXIT_BUDGET_MISSED 3

static void usage(FILE *out)
{
    fprintf(out, "usage: mpirun -np N mpitrain-bench [--suite NAME[,NAME...]] [--quick] "
                 "[--json FILE] [--tmpdir DIR] [--fail-on-miss] [--sizes B,...] [OPTIONS]\n\n"
                 "Suites (default: all; full mode / --quick):\n");
    for (int i = 0; i < NSUITES; i++)
        fprintf(out, "  %-10s %s\n  %-10s %s\n", suites[i].name, suites[i].what, "",
                suites[i].quick);
    fprintf(out, "\n  --quick               fewer sizes and repetitions (under two minutes on 2 cores)\n"
                 "  --json FILE           also write one JSON line per figure to FILE (rank 0): suite,\n"
                 "                        date, host, version, ranks, mode, the figures, and\n"
                 "                        budget and budget_met where docs/design.md sets one\n"
                 "  --tmpdir DIR          where the I/O suites' files go, in a private folder removed\n"
                 "                        at exit (default: $TMPDIR or /tmp)\n"
                 "  --fail-on-miss        exit with status %d when a figure misses its budget\n"
                 "  --budget-report-us US the report suite's budget at 2 ranks (default: 25)\n"
                 "  --sizes B[,B...]      the allreduce and checkpoint suites measure only these byte\n"
                 "                        counts of theirs (K, M, G: binary; at most 1G), e.g.\n"
                 "                        4,1M,64M; a size no selected suite measures is refused\n"
                 "  --help                this text\n\n"
                 "The run directory of the benchmark job goes to the private folder too; with\n"
                 "--name or --storage-path (or MT_NAME, MT_STORAGE_PATH) it is kept there instead,\n"
                 "as a new run: a name that exists is refused, and that run is left as it was.\n\n",
            EXIT_BUDGET_MISSED);
    const mt_trainer_config shown = {.run = {.name = "mpitrain-bench_<date>_<time>",
                                             .storage_path = "the private folder, removed at exit"}};
    mt_config_help_only(out, &shown, lib_options);
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
        bench_say(b, "\n== %s: %s (%d ranks, %s)\n", suites[i].name,
                  b->quick ? suites[i].quick : suites[i].what, b->size, b->quick ? "quick" : "full");
        rc = suites[i].run(b);
    }
    MPI_Comm_free(&b->raw);
    return rc;
}

/* Rank 0: whether --json FILE would go into a run directory (its folder holds run.json or
 * run.lock): said on stderr; the file is never written there, a run's result.json least. */
static bool json_in_a_run(const char *file)
{
    char dir[4096], probe[4200];
    snprintf(dir, sizeof dir, "%s", file);
    char *slash = strrchr(dir, '/');
    if (slash)
        *(slash == dir ? slash + 1 : slash) = '\0';
    else
        snprintf(dir, sizeof dir, ".");
    for (int i = 0; i < 2; i++) {
        snprintf(probe, sizeof probe, "%s/%s", dir, i ? "run.lock" : "run.json");
        if (access(probe, F_OK) == 0) {
            fprintf(stderr, "mpitrain-bench: --json %s: %s is a run directory (it holds %s): "
                            "the benchmark never writes over a run's files; give a file "
                            "elsewhere\n", file, dir, i ? "run.lock" : "run.json");
            return true;
        }
    }
    return false;
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

/* Collective: fit *t unless rc says its set-up failed, rank 0 printing the error; then the
 * trainer and its result freed. The fit's (or set-up's) code. */
static int fit_and_free(mt_trainer **t, int rc, int rank)
{
    mt_result *res = NULL;
    if (!rc)
        rc = mt_trainer_fit(*t, &res);
    if (rc && rank == 0)
        fprintf(stderr, "mpitrain-bench: %s\n",
                res && mt_result_error(res) ? mt_result_error(res) : mt_last_error());
    mt_result_free(&res);
    mt_trainer_destroy(t);
    return rc;
}

int main(int argc, char **argv)
{
    mt_init(&argc, &argv);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    static const char default_name[] = "mpitrain-bench";
    /* never a run that exists: a name given is a new run or refused (it stays as it was) */
    mt_trainer_config cfg = {.run = {.name = default_name, .verbose = MT_VERBOSE_SILENT,
                                     .refuse_existing = true, .checkpoint.num_to_keep = 1}};
    int rc = mt_config_from_args_only(&cfg, &argc, &argv, lib_options);
    /* a name or a storage path (option or environment) asks for the run to be kept */
    bool keep_run = cfg.run.storage_path || cfg.run.name != default_name;
    const char *base = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    bench b = {.report_budget_us = 25};
    plan p = {.b = &b};
    const char *json = NULL, *only = NULL, *budget = NULL;
    bool help = !rc && mt_args_help(argc, argv), fail_on_miss = false;
    for (int i = 1; i < argc && !rc && !help; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--quick"))
            b.quick = true;
        else if (!strcmp(a, "--fail-on-miss"))
            fail_on_miss = true;
        else if (!strcmp(a, "--json") && i + 1 < argc)
            json = argv[++i];
        else if (!strncmp(a, "--json=", 7))
            json = a + 7;
        else if (!strcmp(a, "--suite") && i + 1 < argc)
            only = argv[++i];
        else if (!strncmp(a, "--suite=", 8))
            only = a + 8;
        else if (!strcmp(a, "--tmpdir") && i + 1 < argc)
            base = argv[++i];
        else if (!strcmp(a, "--budget-report-us") && i + 1 < argc)
            budget = argv[++i];
        else if (!strcmp(a, "--sizes") && i + 1 < argc)
            rc = parse_sizes(&b, argv[++i], rank);
        else {
            if (rank == 0)
                fprintf(stderr, "mpitrain-bench: unknown option '%s' (see --help)\n", a);
            rc = MT_EINVAL;
        }
    }
    if (!rc && budget) {
        char *end = NULL;
        b.report_budget_us = strtod(budget, &end);
        if (!*budget || *end || !(b.report_budget_us >= 0)) {
            if (rank == 0)
                fprintf(stderr, "mpitrain-bench: --budget-report-us: '%s' is not a number >= 0\n",
                        budget);
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
    if (!rc)
        rc = check_sizes(&b, p.selected, rank);
    b.json_path = json;
    if (!rc && json && rank == 0 && json_in_a_run(json))
        rc = MT_EINVAL; /* said: never written over a run's files */
    else if (!rc && json && rank == 0 && !(b.json = fopen(json, "w"))) {
        fprintf(stderr, "mpitrain-bench: cannot write %s: %s\n", json, strerror(errno));
        rc = MT_EIO;
    }
    /* the shard suite streams each rank's part in windows: a quarter of it in memory */
    int world = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    cfg.data.memory_limit = (b.quick ? (size_t)256 << 20 : (size_t)1 << 30) / (size_t)world / 4;
    /* every rank must learn about a problem rank 0 found alone */
    MPI_Allreduce(MPI_IN_PLACE, &rc, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (rc) {
        if (b.json)
            fclose(b.json);
        mt_finalize();
        return MT_EXIT_USAGE;
    }
    /* every file of the run in one private folder, removed at exit (collective) */
    char scratch[4096];
    /* rank 0's choices, on every rank: the paths below are collective */
    bool new_name = keep_run && cfg.run.name == default_name;
    scratch_agree(&keep_run, &new_name);
    if (scratch_make(base, "mpitrain-bench", true, scratch, sizeof scratch))
        rc = MT_EIO;
    b.tmpdir = scratch;
    if (!keep_run)
        cfg.run.storage_path = scratch;
    char name[256];
    if (new_name) { /* a storage path only: a new run there */
        scratch_run_name("mpitrain-bench", cfg.run.storage_path, name, sizeof name);
        cfg.run.name = name;
    }
    time_t now = time(NULL);
    struct tm utc;
    strftime(b.date, sizeof b.date, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &utc));
    if (gethostname(b.host, sizeof b.host - 1) != 0)
        snprintf(b.host, sizeof b.host, "?");
    for (char *h = b.host; *h; h++) /* a JSON string as printed */
        if (*h == '"' || *h == '\\' || (unsigned char)*h < 0x20)
            *h = '?';
    /* the asynchronous part's checkpoint: 256 MiB (64 MiB in a quick run), one of the sizes
     * the synchronous part measures */
    size_t async_bytes = (size_t)(b.quick ? 64 : 256) << 20;
    if (bench_size_wanted(&b, async_bytes))
        b.ck_async_bytes = async_bytes;
    if (!rc) {
        mt_trainer *t = NULL;
        rc = mt_trainer_create(&t, run_suites, &p, &cfg);
        char shard_file[4200];
        snprintf(shard_file, sizeof shard_file, "%s/mpitrain-bench-shard-%lld.h5", b.tmpdir,
                 (long long)((b.quick ? (size_t)256 << 20 : (size_t)1 << 30) / 4096));
        static const char *names[] = {"bench-independent", "bench-collective",
                                      "bench-shuffle"};
        for (size_t i = 0; i < sizeof names / sizeof *names && !rc; i++)
            rc = mt_trainer_add_dataset(t, names[i], shard_file, "/train");
        rc = fit_and_free(&t, rc, rank);
    }
    /* the checkpoint suite's asynchronous part: a fit of its own, asynchronous commits on */
    int ck_suite = 0;
    while (ck_suite < NSUITES && strcmp(suites[ck_suite].name, "checkpoint"))
        ck_suite++;
    if (!rc && ck_suite < NSUITES && p.selected[ck_suite] && b.ck_async_bytes) {
        mt_trainer *t = NULL;
        char name2[300];
        snprintf(name2, sizeof name2, "%s-async", cfg.run.name);
        mt_trainer_config cfg2 = cfg;
        cfg2.run.name = name2;
        cfg2.run.checkpoint.async_commit = true;
        bench_say(&b, "\n== checkpoint (asynchronous commits): the training stall and a "
                      "training loop (%d ranks, %s)\n", world, b.quick ? "quick" : "full");
        rc = mt_trainer_create(&t, bench_checkpoint_async, &b, &cfg2);
        rc = fit_and_free(&t, rc, rank);
    }
    scratch_remove(scratch);
    if (b.json && fclose(b.json) != 0 && !b.json_errno)
        b.json_errno = errno ? errno : EIO;
    if (b.json_errno) /* the figures asked for are not in the file: a failure */
        fprintf(stderr, "mpitrain-bench: cannot write %s: %s (its JSON lines are incomplete)\n",
                b.json_path, strerror(b.json_errno));
    /* the table on standard output is the figures too (a full disk, a closed pipe) */
    if (rank == 0 && !stdout_errno && (fflush(stdout) != 0 || ferror(stdout)))
        stdout_errno = errno ? errno : EIO;
    bool table_lost = stdout_errno != 0;
    if (table_lost)
        fprintf(stderr, "mpitrain-bench: cannot write the figures to standard output: %s\n",
                strerror(stdout_errno));
    /* rank 0's count and output decide, so every rank exits the same way */
    int missed = b.budgets_missed, lost = b.json_errno != 0 || table_lost;
    MPI_Bcast(&missed, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Bcast(&lost, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (lost && !rc)
        rc = MT_EIO;
    if (rank == 0 && missed)
        fprintf(stderr, "mpitrain-bench: %d figure%s missed %s budget%s\n", missed,
                missed == 1 ? "" : "s", missed == 1 ? "its" : "their",
                fail_on_miss ? "" : " (--fail-on-miss makes that an error)");
    mt_finalize();
    return rc ? 1 : missed && fail_on_miss ? EXIT_BUDGET_MISSED : 0;
}
