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
    const char *tmpdir;
} bench;

double bench_now(void);
/* Median of n values (sorts v). */
double bench_median(double *v, int n);
/* Collective: min, mean and max over ranks of x. */
void bench_over_ranks(const bench *b, double x, double *mn, double *avg, double *mx);
/* Rank 0: one JSON line, fields given as a printf format of "key": value pairs. */
void bench_json(const bench *b, const char *suite, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Rank 0: printf to stdout. */
void bench_say(const bench *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

int bench_allreduce(bench *b);
int bench_fusion(bench *b);
int bench_overlap(bench *b);
int bench_shard(bench *b);
int bench_report(bench *b);
int bench_checkpoint(bench *b);
int bench_train(bench *b);

#endif
