/*
 * bench_report.c -- the report and checkpoint suites of mpitrain-bench.
 *   report:     mt_report latency with 8 numeric metrics, against raw MPI of the same
 *               values in the same run: an MPI_Gather of the bytes mt_report once
 *               gathered, an MPI_Reduce of the values, and the floor of the same work (the
 *               reduce, rank 0's row write, the status shared).
 *   checkpoint: commit throughput of a sharded checkpoint (16 MiB to 1 GiB over all ranks)
 *               against one process writing and fsyncing the same bytes, and how much rank
 *               0's peak resident memory grows during the commit; then, in a fit with
 *               asynchronous commits, the training stall of a 256 MiB checkpoint (64 MiB
 *               in a quick run) against
 *               the synchronous commit of the same bytes measured above, and a training
 *               loop's samples/s with a checkpoint every epoch against the same loop
 *               without checkpoints.
 *
 * The raw baseline is what a program would do without mpitrain, made as strong as the
 * commit's own conditions: the same number of bytes (rank 0's part, once per rank), into a
 * new file in the run directory (the same file system as the checkpoints), in 8 MiB
 * writes, then fsync; timed from open to the end of fsync. The commit and the raw write
 * take turns going first, so neither always finds the other's writeback still running or
 * the page cache warmer, and the figure is the median of each pair's ratio (raw, commit,
 * commit, raw, ...), printed with its spread (the lowest and highest pair): the disk's
 * speed drifts between pairs far more than within one (the raw baseline alone moved from
 * 538 to 1,304 MB/s for 1 GiB between runs), so a median of the two sides taken apart
 * could pair a fast raw write with a slow commit.
 */
#include "bench.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* What a program without mpitrain must do at the least to keep the same row with the same
 * rule (a write failure on rank 0 is every rank's error): the statistics reduced to rank 0,
 * the row appended to a file by rank 0, and its status shared (one int). */
static void raw_floor(const bench *b, const double *vals, double *out, int fd, const char *row,
                      size_t len)
{
    MPI_Reduce(vals, out, 8, MPI_DOUBLE, MPI_SUM, 0, b->raw);
    int status = 0;
    if (b->rank == 0 && write(fd, row, len) != (ssize_t)len)
        status = -1;
    MPI_Allreduce(MPI_IN_PLACE, &status, 1, MPI_INT, MPI_MIN, b->raw);
}

int bench_report(bench *b)
{
    int n = b->quick ? 300 : 2000, rc = MT_OK;
    double *mt = calloc((size_t)n, sizeof *mt), *raw = calloc((size_t)n, sizeof *raw);
    double *red = calloc((size_t)n, sizeof *red), *flo = calloc((size_t)n, sizeof *flo);
    double *all = calloc((size_t)n, sizeof *all);
    mt_metrics *m = mt_metrics_new();
    const char *keys[8] = {"loss", "acc", "lr", "grad_norm", "samples_per_s", "data_s",
                           "compute_s", "comm_s"};
    char payload[8 * 8 + 8 * 16], *gathered = b->rank == 0 ? malloc(sizeof payload * (size_t)b->size) : NULL;
    memset(payload, 1, sizeof payload);
    double vals[8], sums[8];
    /* a row as long as mt_report's (measured: about 330 bytes), into a file beside the run */
    char row[336], path[4200];
    memset(row, 'x', sizeof row - 1);
    row[sizeof row - 1] = '\n';
    snprintf(path, sizeof path, "%s/.mpitrain-bench-rows-%d.json", mt_run_dir(b->ctx),
             (int)getpid());
    int fd = b->rank == 0 ? open(path, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_NOFOLLOW |
                                 O_CLOEXEC, 0644) : -1;
    if (b->rank == 0 && fd < 0) {
        fprintf(stderr, "mpitrain-bench: cannot create %s: %s (no figure without the raw "
                        "baseline)\n", path, strerror(errno));
        rc = MT_EIO;
    }
    if (!mt || !raw || !red || !flo || !all || !m)
        rc = MT_ENOMEM;
    rc = bench_agree(b, rc);
    for (int i = 0; i < n && !rc; i++) {
        for (int k = 0; k < 8; k++) {
            vals[k] = i * 0.001 + k;
            mt_metrics_set_f64(m, keys[k], vals[k]);
        }
        /* the five take turns going first, so none always meets the machine just after
         * another */
        for (int j = 0; j < 5 && !rc; j++) {
            MPI_Barrier(b->raw);
            double t0 = bench_now();
            switch ((i + j) % 5) {
            case 0:
                rc = mt_report(b->ctx, m, NULL);
                mt[i] = bench_now() - t0;
                break;
            case 1:
                MPI_Gather(payload, sizeof payload, MPI_BYTE, gathered, sizeof payload,
                           MPI_BYTE, 0, b->raw);
                raw[i] = bench_now() - t0;
                break;
            case 2:
                MPI_Reduce(vals, sums, 8, MPI_DOUBLE, MPI_SUM, 0, b->raw);
                red[i] = bench_now() - t0;
                break;
            case 3:
                raw_floor(b, vals, sums, fd, row, sizeof row);
                flo[i] = bench_now() - t0;
                break;
            case 4: /* the least exchange after which every rank knows (a mismatch, a
                       failure: mt_report's rule), of the same values */
                MPI_Allreduce(vals, sums, 8, MPI_DOUBLE, MPI_SUM, b->raw);
                all[i] = bench_now() - t0;
                break;
            }
        }
    }
    if (fd >= 0) {
        close(fd);
        unlink(path);
    }
    if (!rc) {
        double mt_max, raw_max, red_max, flo_max, all_max;
        bench_over_ranks(b, bench_median(mt, n), NULL, NULL, &mt_max);
        bench_over_ranks(b, bench_median(raw, n), NULL, NULL, &raw_max);
        bench_over_ranks(b, bench_median(red, n), NULL, NULL, &red_max);
        bench_over_ranks(b, bench_median(flo, n), NULL, NULL, &flo_max);
        bench_over_ranks(b, bench_median(all, n), NULL, NULL, &all_max);
        bench_say(b, "each: the median over reports, the slowest rank's; raw_reduce: one "
                     "MPI_Reduce of the 8 values; raw_floor: that reduce, rank 0 appending "
                     "a %zu-byte row with write(2), and an MPI_Allreduce of its status (the "
                     "least a program keeping the same row with the same rule does); "
                     "raw_allreduce: one MPI_Allreduce of the 8 values (the least exchange "
                     "after which every rank knows the outcome, as mt_report's rule asks)\n",
                  sizeof row);
        bench_say(b, "%6s %8s %13s %14s %14s %13s %17s %10s %10s %14s\n", "ranks", "reports",
                  "mt_report_us", "raw_gather_us", "raw_reduce_us", "raw_floor_us",
                  "raw_allreduce_us", "vs_reduce", "vs_floor", "vs_allreduce");
        bench_say(b, "%6d %8d %13.2f %14.2f %14.2f %13.2f %17.2f %9.2fx %9.2fx %13.2fx\n",
                  b->size, n, mt_max * 1e6, raw_max * 1e6, red_max * 1e6, flo_max * 1e6,
                  all_max * 1e6, mt_max / red_max, mt_max / flo_max, mt_max / all_max);
        bool met = mt_max * 1e6 <= b->report_budget_us;
        bool ratio_met = mt_max <= 1.5 * red_max;
        char rule[64];
        snprintf(rule, sizeof rule, "mt_report_median_us <= %g at 2 ranks", b->report_budget_us);
        if (b->size == 2) {
            bench_say(b, "budget: mt_report <= %g us median at 2 ranks: %.1f us (%s)\n",
                      b->report_budget_us, mt_max * 1e6, bench_verdict(b, met));
            bench_say(b, "ratio: mt_report <= 1.5x a raw MPI_Reduce of the same values at 2 "
                         "ranks: %.2fx (%s); against the floor of the same work: %.2fx; a raw "
                         "MPI_Allreduce of them is itself %.2fx the reduce, and mt_report "
                         "%.2fx the allreduce\n",
                      mt_max / red_max, ratio_met ? "met" : "not met", mt_max / flo_max,
                      all_max / red_max, mt_max / all_max);
        }
        bench_json(b, "report", "\"reports\": %d, \"metrics\": 8, \"mt_report_median_us\": %.3f, "
                   "\"raw_gather_median_us\": %.3f, \"raw_reduce_median_us\": %.3f, "
                   "\"raw_floor_median_us\": %.3f, \"raw_allreduce_median_us\": %.3f, "
                   "\"ratio_vs_reduce\": %.3f, \"ratio_vs_floor\": %.3f, "
                   "\"ratio_vs_allreduce\": %.3f%s", n, mt_max * 1e6, raw_max * 1e6,
                   red_max * 1e6, flo_max * 1e6, all_max * 1e6, mt_max / red_max,
                   mt_max / flo_max, mt_max / all_max,
                   bench_budget(b, b->size == 2, met, rule));
    }
    mt_metrics_free(&m);
    free(mt);
    free(raw);
    free(red);
    free(flo);
    free(all);
    free(gathered);
    return rc;
}

static long long peak_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long long v = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6))
            v = atoll(line + 6);
    if (f)
        fclose(f);
    return v;
}

/* Rank 0 writes its part `copies` times into a new file in the run directory (created
 * new, never through a link) and fsyncs it; seconds in *t (0 on the other ranks). Every
 * write is checked: a failed one (a full disk) is MT_EIO naming the file and the reason,
 * on every rank (collective), and no figure is made of it. */
static int raw_write(const bench *b, const unsigned char *part, size_t len, int copies,
                     double *t)
{
    *t = 0;
    int rc = MT_OK;
    if (b->rank == 0) {
        char path[4200];
        snprintf(path, sizeof path, "%s/.mpitrain-bench-raw-%d.bin", mt_run_dir(b->ctx),
                 (int)getpid());
        size_t chunk = (size_t)8 << 20;
        double t0 = bench_now();
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644), e = 0;
        if (fd < 0)
            e = errno;
        for (int k = 0; !e && k < copies; k++)
            for (size_t off = 0; !e && off < len;) {
                size_t n = len - off < chunk ? len - off : chunk;
                ssize_t w = write(fd, part + off, n);
                if (w < 0 && errno == EINTR)
                    continue;
                if (w <= 0)
                    e = w < 0 ? errno : EIO;
                else
                    off += (size_t)w;
            }
        if (!e && fsync(fd) != 0)
            e = errno;
        if (fd >= 0 && close(fd) != 0 && !e)
            e = errno;
        *t = bench_now() - t0;
        if (fd >= 0)
            unlink(path);
        if (e) {
            fprintf(stderr, "mpitrain-bench: the raw baseline's write to %s failed: %s (no "
                            "figure without it)\n", path, strerror(e));
            rc = MT_EIO;
        }
    }
    return bench_agree(b, rc);
}

/* One timed sharded commit of part (rows of 4096 bytes); the slowest rank's seconds, and
 * how much rank 0's peak resident memory grew. */
static int timed_commit(bench *b, const unsigned char *part, size_t len, double *t,
                        long long *grew)
{
    mt_checkpoint *ck = mt_checkpoint_new();
    mt_checkpoint_put(ck, "blob", MT_U8, 2, (size_t[]){len / 4096, 4096}, part, MT_SHARDED);
    mt_metrics *m = mt_metrics_new();
    long long before = peak_kib();
    MPI_Barrier(b->raw);
    double t0 = bench_now();
    int rc = mt_report(b->ctx, m, ck);
    double mine = bench_now() - t0;
    long long after = peak_kib();
    bench_over_ranks(b, mine, NULL, NULL, t);
    if (after - before > *grew)
        *grew = after - before;
    mt_metrics_free(&m);
    mt_checkpoint_free(&ck);
    return rc;
}

static const size_t ck_sizes[] = {16, 64, 256, 1024}; /* MiB */

int bench_checkpoint_sizes(const bench *b, size_t *out, int max)
{
    int n = 0;
    for (int s = 0; s < (b->quick ? 3 : 4) && n < max; s++)
        out[n++] = ck_sizes[s] << 20;
    return n;
}

int bench_checkpoint(bench *b)
{
    const size_t *sizes = ck_sizes;
    int nsizes = b->quick ? 3 : 4, rc = MT_OK, measured = 0;
    bench_say(b, "%6s %8s %5s %10s %10s %7s %13s %16s\n", "ranks", "MiB", "reps", "raw_MBps",
              "mt_MBps", "ratio", "ratio_spread", "rank0_grew_MiB");
    double worst = 1e9;
    for (int s = 0; s < nsizes && !rc; s++) {
        if (!bench_size_wanted(b, sizes[s] << 20))
            continue;
        size_t bytes = sizes[s] << 20, mine = bytes / (size_t)b->size / 4096 * 4096;
        unsigned char *part = malloc(mine ? mine : 1);
        if (!part) {
            rc = MT_ENOMEM;
            break;
        }
        memset(part, (int)s + 1, mine);
        /* small commits take tens of ms, where one slow fsync moves a median of 3 */
        int reps = b->quick ? 2 : sizes[s] <= 64 ? 7 : 3;
        double tm[7], tr[7];
        long long grew = 0;
        for (int r = 0; r < reps && !rc; r++) {
            double w = 0, mine_w = 0;
            if (r % 2) /* every other turn, the raw write goes first */
                rc = raw_write(b, part, mine, b->size, &mine_w);
            if (!rc)
                rc = timed_commit(b, part, mine, &tm[r], &grew);
            if (!rc && r % 2 == 0)
                rc = raw_write(b, part, mine, b->size, &mine_w);
            if (!rc)
                bench_over_ranks(b, mine_w, NULL, NULL, &w);
            tr[r] = w;
        }
        free(part);
        if (rc)
            break;
        measured++;
        /* the ratio of each pair (a raw write and the commit next to it, in turn first),
         * and their median: the disk's drift between pairs does not decide it */
        double ratio[7], lo = 1e9, hi = 0;
        for (int r = 0; r < reps; r++) {
            ratio[r] = tm[r] > 0 ? tr[r] / tm[r] : 0;
            lo = ratio[r] < lo ? ratio[r] : lo;
            hi = ratio[r] > hi ? ratio[r] : hi;
        }
        double total = (double)(mine * (size_t)b->size);
        double gm = total / bench_median(tm, reps) / 1e6, gr = total / bench_median(tr, reps) / 1e6;
        double q = bench_median(ratio, reps);
        if (q < worst)
            worst = q;
        if (bytes == b->ck_async_bytes)
            b->ck_sync_s = bench_median(tm, reps);
        bench_say(b, "%6d %8zu %5d %10.0f %10.0f %7.2f %6.2f-%-6.2f %16lld\n", b->size, sizes[s],
                  reps, gr, gm, q, lo, hi, grew >> 10);
        bench_json(b, "checkpoint", "\"bytes\": %.0f, \"reps\": %d, \"raw_MBps\": %.1f, "
                   "\"mt_MBps\": %.1f, \"ratio\": %.4f, \"ratio_min\": %.4f, \"ratio_max\": %.4f, "
                   "\"rank0_peak_growth_MiB\": %lld%s", total, reps, gr, gm, q, lo, hi, grew >> 10,
                   bench_budget(b, true, q >= 0.7, "ratio >= 0.7 at every size up to 1 GiB"));
    }
    if (!rc && !measured) /* no figure and no verdict without a measurement */
        bench_say(b, "nothing measured: no size of --sizes is one of this suite's\n");
    else if (!rc)
        bench_say(b, "budget: commit >= 0.7x raw write+fsync at every size: worst %.2fx (%s); "
                     "rank 0 holds <= 64 MiB of the others' data at a time\n",
                  worst, bench_verdict(b, worst >= 0.7));
    return rc;
}

/* ------------------------------------------------------------ asynchronous commits */

/* One step of the synthetic training loop: work on this rank's share of the model (a pass
 * over `work` floats) and an average of `grad` floats over the ranks, as a data-parallel
 * step does. */
static int train_step(bench *b, float *work, size_t nwork, float *grad, size_t ngrad)
{
    for (int pass = 0; pass < 4; pass++)
        for (size_t i = 0; i < nwork; i++)
            work[i] = work[i] * 0.999f + 0.001f * (float)(i & 7);
    for (size_t i = 0; i < ngrad; i++)
        grad[i] = work[i % nwork];
    return mt_allreduce(b->ctx, grad, ngrad, MT_F32, MT_MEAN);
}

/* This process's CPU seconds so far, every thread's (the commit's thread included). */
static double cpu_s(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + 1e-6 * (double)u.ru_utime.tv_usec +
           (double)u.ru_stime.tv_sec + 1e-6 * (double)u.ru_stime.tv_usec;
}

/* `epochs` epochs of `steps` steps, each epoch ending with a report, with a checkpoint of
 * `part` (this rank's rows) when ck: *sps, samples (steps x 64 a rank) per second, over
 * ranks' slowest, timed until the last report returns (a commit still in flight then
 * overlaps the next epoch of a longer run); *cpu, the CPU seconds the loop took over all
 * ranks, that last commit included. */
static int train_loop(bench *b, int epochs, int steps, bool ck, unsigned char *part,
                      size_t len, float *work, size_t nwork, float *grad, size_t ngrad,
                      double *sps, double *cpu)
{
    int rc = mt_checkpoint_wait(b->ctx);
    MPI_Barrier(b->raw);
    double t0 = bench_now(), c0 = cpu_s();
    for (int e = 0; e < epochs && !rc; e++) {
        for (int s = 0; s < steps && !rc; s++)
            rc = train_step(b, work, nwork, grad, ngrad);
        mt_checkpoint *c = ck ? mt_checkpoint_new() : NULL;
        if (c)
            mt_checkpoint_put(c, "model", MT_U8, 2, (size_t[]){len / 4096, 4096}, part,
                              MT_SHARDED);
        mt_metrics *m = mt_metrics_new();
        mt_metrics_set_i64(m, "epoch", e);
        if (!rc)
            rc = mt_report(b->ctx, m, c);
        mt_metrics_free(&m);
        mt_checkpoint_free(&c);
        part[e % len] ^= 1; /* the model moved on */
    }
    double t = bench_now() - t0, slowest = 0, mean = 0;
    if (!rc)
        rc = mt_checkpoint_wait(b->ctx); /* its CPU is the loop's; its time is not */
    bench_over_ranks(b, t, NULL, NULL, &slowest);
    bench_over_ranks(b, cpu_s() - c0, NULL, &mean, NULL);
    *sps = slowest > 0 ? (double)epochs * steps * 64 / slowest : 0;
    *cpu = mean * b->size;
    return rc;
}

int bench_checkpoint_async(mt_context *ctx, void *arg)
{
    bench *b = arg;
    b->ctx = ctx;
    b->rank = mt_world_rank(ctx);
    b->size = mt_world_size(ctx);
    MPI_Comm_dup(mt_comm(ctx), &b->raw);
    size_t bytes = b->ck_async_bytes, len = bytes / (size_t)b->size / 4096 * 4096;
    size_t nwork = (size_t)1 << 20, ngrad = (size_t)1 << 16; /* 4 MiB of work, 256 KiB */
    unsigned char *part = malloc(len ? len : 1);
    float *work = calloc(nwork, sizeof *work), *grad = calloc(ngrad, sizeof *grad);
    int rc = bench_agree(b, part && work && grad ? MT_OK : MT_ENOMEM);
    if (!rc)
        memset(part, 7, len);
    /* the stall: mt_report with the checkpoint, until it returns (staged); then the whole
     * commit, until mt_checkpoint_wait returns. The first commit of a fit also touches the
     * staging block's pages (kept for the next ones): shown apart, not in the median. */
    int reps = b->quick ? 1 : 5;
    double stall[6], whole[6];
    for (int r = 0; r <= reps && !rc; r++) {
        mt_checkpoint *c = mt_checkpoint_new();
        mt_checkpoint_put(c, "model", MT_U8, 2, (size_t[]){len / 4096, 4096}, part, MT_SHARDED);
        mt_metrics *m = mt_metrics_new();
        MPI_Barrier(b->raw);
        double t0 = bench_now();
        rc = mt_report(ctx, m, c);
        double t1 = bench_now();
        if (!rc)
            rc = mt_checkpoint_wait(ctx);
        double t2 = bench_now();
        bench_over_ranks(b, t1 - t0, NULL, NULL, &stall[r]);
        bench_over_ranks(b, t2 - t0, NULL, NULL, &whole[r]);
        mt_metrics_free(&m);
        mt_checkpoint_free(&c);
    }
    /* the floor of any staging: every rank at once copying its part into memory already
     * touched (as the kept staging block is), the slowest rank, median of the same reps */
    static volatile unsigned char sink;
    double copy[6] = {0}, copy_s = 0;
    unsigned char *into = !rc ? malloc(len ? len : 1) : NULL;
    if (!rc && into) {
        memset(into, 0, len);
        for (int r = 0; r < reps; r++) {
            MPI_Barrier(b->raw);
            double t0 = bench_now();
            memcpy(into, part, len);
            bench_over_ranks(b, bench_now() - t0, NULL, NULL, &copy[r]);
            sink ^= into[len ? len - 1 : 0]; /* the copy is read: never elided */
        }
        copy_s = bench_median(copy, reps);
    }
    free(into);
    double first = stall[0], whole_s = 0;
    if (!rc) {
        double st = bench_median(stall + 1, reps), wh = bench_median(whole + 1, reps);
        whole_s = wh;
        double q = b->ck_sync_s > 0 ? st / b->ck_sync_s : 0;
        double floor_q = b->ck_sync_s > 0 ? copy_s / b->ck_sync_s : 0;
        bool applies = b->ck_sync_s > 0;
        bench_say(b, "\n%6s %8s %5s %14s %14s %14s %15s %12s %12s %12s\n", "ranks", "MiB", "reps",
                  "first_stall_ms", "async_stall_ms", "async_whole_ms", "sync_commit_ms",
                  "stall/sync", "memcpy_ms", "memcpy/sync");
        bench_say(b, "%6d %8zu %5d %14.1f %14.1f %14.1f %15.1f %12.3f %12.1f %12.3f\n", b->size,
                  bytes >> 20, reps, first * 1e3, st * 1e3, wh * 1e3, b->ck_sync_s * 1e3, q,
                  copy_s * 1e3, floor_q);
        bench_json(b, "checkpoint_async", "\"bytes\": %zu, \"reps\": %d, \"first_stall_ms\": "
                   "%.3f, \"stall_ms\": %.3f, \"whole_ms\": %.3f, \"sync_commit_ms\": %.3f, "
                   "\"stall_ratio\": %.4f, \"memcpy_ms\": %.3f, \"memcpy_ratio\": %.4f%s", bytes,
                   reps, first * 1e3, st * 1e3, wh * 1e3, b->ck_sync_s * 1e3, q, copy_s * 1e3,
                   floor_q, bench_budget(b, applies, q <= 0.15, "stall_ratio <= 0.15"));
        if (applies)
            bench_say(b, "budget: asynchronous checkpoint stall <= 0.15x the synchronous "
                         "commit: %.3fx (%s); the floor of any staging copy in the same run "
                         "(a memcpy of each rank's %.0f MiB, every rank at once): %.3fx, the "
                         "stall %.2fx of it\n", q, bench_verdict(b, q <= 0.15),
                  (double)len / (1 << 20), floor_q, copy_s > 0 ? st / copy_s : 0);
    }
    /* the loop: an epoch long enough to hold the commit (twice the whole asynchronous
     * commit just measured, and at least 4 s; 1 s in a quick run), its steps calibrated
     * here. Pairs of loops, one without checkpoints and one with a checkpoint every
     * epoch, taking turns going first; the figure is the median of the pairs' ratios
     * (as the commit's figure is), so the machine's drift between pairs does not decide
     * it. The last commit of a loop with checkpoints is waited for outside its time (in
     * a longer run it overlaps the next epoch, as every other one did here). */
    double one = 0;
    if (!rc) {
        MPI_Barrier(b->raw);
        double t0 = bench_now();
        for (int s = 0; s < 20 && !rc; s++)
            rc = train_step(b, work, nwork, grad, ngrad);
        bench_over_ranks(b, (bench_now() - t0) / 20, NULL, NULL, &one);
    }
    double epoch_s = b->quick ? 1.0 : 2 * whole_s > 4.0 ? 2 * whole_s : 4.0;
    int epochs = b->quick ? 2 : 3, steps = one > 0 ? (int)(epoch_s / one) + 1 : 1;
    int pairs = b->quick ? 1 : 3;
    double plain[3] = {0}, with[3] = {0}, ratio[3] = {0}, lo = 1e9, hi = 0;
    double cpu_plain[3] = {0}, cpu_with[3] = {0}, limit[3] = {0};
    for (int k = 0; k < pairs && !rc; k++) {
        for (int turn = 0; turn < 2 && !rc; turn++) {
            bool ck = (turn + k) % 2 == 1; /* plain first in even pairs */
            rc = train_loop(b, epochs, steps, ck, part, len, work, nwork, grad, ngrad,
                            ck ? &with[k] : &plain[k], ck ? &cpu_with[k] : &cpu_plain[k]);
        }
        ratio[k] = plain[k] > 0 ? with[k] / plain[k] : 0;
        /* the same samples for more CPU: where the ranks keep every core busy, as here,
         * the most the loop with checkpoints can reach */
        limit[k] = cpu_with[k] > 0 ? cpu_plain[k] / cpu_with[k] : 0;
        lo = ratio[k] < lo ? ratio[k] : lo;
        hi = ratio[k] > hi ? ratio[k] : hi;
    }
    if (!rc)
        rc = mt_checkpoint_wait(ctx);
    if (!rc) {
        double q = bench_median(ratio, pairs), base = bench_median(plain, pairs);
        double ckm = bench_median(with, pairs), lim = bench_median(limit, pairs);
        double cp = bench_median(cpu_plain, pairs), cw = bench_median(cpu_with, pairs);
        bench_say(b, "\n%6s %8s %6s %7s %7s %12s %12s %8s %13s %10s %10s %9s\n", "ranks", "MiB",
                  "pairs", "epochs", "steps", "plain_sps", "ckpt_sps", "ratio", "ratio_spread",
                  "plain_cpu_s", "ckpt_cpu_s", "cpu_limit");
        bench_say(b, "%6d %8zu %6d %7d %7d %12.0f %12.0f %8.3f %6.3f-%-6.3f %10.2f %10.2f %9.3f\n",
                  b->size, bytes >> 20, pairs, epochs, steps, base, ckm, q, lo, hi, cp, cw, lim);
        bench_say(b, "cpu_limit: the CPU seconds of the loop without checkpoints over those of "
                     "the loop with them (all ranks, the commits' threads included): the most "
                     "the ratio can reach while the ranks keep every core busy\n");
        bench_json(b, "checkpoint_async_loop", "\"bytes\": %zu, \"pairs\": %d, \"epochs\": %d, "
                   "\"steps_per_epoch\": %d, \"epoch_s\": %.2f, \"plain_sps\": %.1f, "
                   "\"ckpt_sps\": %.1f, \"ratio\": %.4f, \"ratio_min\": %.4f, \"ratio_max\": %.4f, "
                   "\"plain_cpu_s\": %.3f, \"ckpt_cpu_s\": %.3f, \"cpu_limit\": %.4f%s",
                   bytes, pairs, epochs, steps, epoch_s, base, ckm, q, lo, hi, cp, cw, lim,
                   bench_budget(b, true, q >= 0.95, "ratio >= 0.95"));
        bench_say(b, "budget: samples/s with an asynchronous checkpoint every epoch (of about "
                     "%.0f s) >= 0.95x without: %.3fx (%s)\n", epoch_s, q,
                  bench_verdict(b, q >= 0.95));
    }
    free(part), free(work), free(grad);
    MPI_Comm_free(&b->raw);
    return rc;
}
