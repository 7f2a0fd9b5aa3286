/*
 * bench.h -- shared pieces of mpitrain-bench: timing, statistics over ranks, output as a
 * human table on stdout (rank 0) and JSON lines to --json FILE.
 */
#ifndef MT_BENCH_H
#define MT_BENCH_H

#include <mpitrain.h>

#include <stdbool.h>
#include <stdio.h>

typedef struct {
    mt_context *ctx;
    MPI_Comm raw;      /* a duplicate for raw MPI baselines */
    int rank, size;
    bool quick;
    FILE *json;        /* rank 0 only; may be NULL */
    const char *json_path; /* --json FILE, for messages */
    int json_errno;        /* the first failed write to it (0: none): a non-zero exit */
    const char *tmpdir; /* this run's private folder, removed at exit */
    char date[32], host[256]; /* rank 0's, for every JSON line */
    double report_budget_us;  /* the report suite's budget (25; --budget-report-us) */
    int budgets_missed;       /* figures with a budget that missed it */
    char budget_json[256];    /* bench_budget's answer */
    size_t sizes[16];         /* --sizes: the only byte counts the allreduce and checkpoint */
    int nsizes;               /* suites measure (0: all of theirs) */
    double ck_sync_s;         /* the checkpoint suite's commit of ck_async_bytes (median s) */
    size_t ck_async_bytes;    /* what the asynchronous part commits (0: not measured) */
} bench;

double bench_now(void);
/* Median of n values (sorts v). */
double bench_median(double *v, int n);
/* Collective: min, mean and max over ranks of x. */
void bench_over_ranks(const bench *b, double x, double *mn, double *avg, double *mx);
/* Rank 0: one JSON line, fields given as a printf format of "key": value pairs; a failed
 * write is kept in b->json_errno (the program then exits with an error). */
void bench_json(bench *b, const char *suite, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A figure's budget: when it applies, counts a miss and returns the JSON fields to append to
 * the figure's line (", \"budget\": RULE, \"budget_met\": true|false"); else "". Every
 * rank calls it with the same (rank-averaged) values. */
const char *bench_budget(bench *b, bool applies, bool met, const char *rule);
/* The printed verdict on a budget: "met" or "NOT met" in a full run; a quick run (few
 * repetitions, one noisy sample) says it is no verdict when it misses. */
const char *bench_verdict(const bench *b, bool met);
/* Collective: rc from every rank, the lowest (most negative) code if any failed, so that
 * a local failure (an allocation) stops every rank before the next collective. */
int bench_agree(const bench *b, int rc);
/* Whether a suite with sizes measures this one (--sizes; without it, every size). */
bool bench_size_wanted(const bench *b, size_t bytes);
/* Rank 0: printf to stdout. */
void bench_say(const bench *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The byte counts a suite measures in b's mode (quick or full), for --sizes to pick from:
 * up to max of them in out; how many. */
int bench_allreduce_sizes(const bench *b, size_t *out, int max);
int bench_checkpoint_sizes(const bench *b, size_t *out, int max);

int bench_allreduce(bench *b);
int bench_fusion(bench *b);
int bench_overlap(bench *b);
int bench_shard(bench *b);
int bench_report(bench *b);
int bench_checkpoint(bench *b);
/* The checkpoint suite's asynchronous part, in a fit of its own with
 * run.checkpoint.async_commit on (mpitrain-bench runs it after the first fit). */
int bench_checkpoint_async(mt_context *ctx, void *arg);
int bench_train(bench *b);

#endif
