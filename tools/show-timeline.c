/*
 * show-timeline.c -- mpitrain-show --timeline: where each rank's step time went, read from
 * the per-rank trace files a run writes with --trace (RUN/trace/rank_<R>.json).
 *
 * The training thread's spans carry their self time (args.self_us: their duration less
 * their children's), so adding self time per category counts an agreement inside a
 * collective once. The training thread is the one named "train"; its "compute" spans are
 * the user's code between library calls. A step is a fusion wait when the run used a
 * fusion (one per optimiser step), else a report.
 */
#include "show-timeline.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* the summary's rows, in this order; anything else is "other" */
static const char *const cats[] = {"compute", "data", "collective", "agree", "fusion",
                                   "fusion_wait", "report", "checkpoint", "other"};
static const char *const labels[] = {"compute", "data loading", "collectives", "agreements",
                                     "fusion buckets", "fusion wait", "report",
                                     "checkpoint commit", "other"};
#define NCATS (sizeof cats / sizeof cats[0])

static size_t cat_index(const char *cat)
{
    for (size_t i = 0; i + 1 < NCATS; i++)
        if (cat && !strcmp(cat, cats[i]))
            return i;
    return NCATS - 1;
}

static int by_number(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* The training thread's tid: the thread named "train", else the one with compute spans. */
static json_int_t train_tid(json_t *events)
{
    size_t i;
    json_t *e;
    json_int_t any = -1;
    json_array_foreach(events, i, e) {
        const char *ph = json_string_value(json_object_get(e, "ph"));
        const char *name = json_string_value(json_object_get(e, "name"));
        const char *cat = json_string_value(json_object_get(e, "cat"));
        json_int_t tid = json_integer_value(json_object_get(e, "tid"));
        if (ph && name && !strcmp(ph, "M") && !strcmp(name, "thread_name")) {
            const char *t = json_string_value(json_object_get(json_object_get(e, "args"), "name"));
            if (t && !strcmp(t, "train"))
                return tid;
        }
        if (cat && !strcmp(cat, "compute"))
            any = tid;
    }
    return any;
}

static int summarise(const char *path, int rank, FILE *out)
{
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    json_t *events = json_object_get(root, "traceEvents");
    if (!json_is_array(events)) {
        fprintf(stderr, "mpitrain-show: %s: %s (line %d)\n", path,
                root ? "no traceEvents array" : jerr.text, jerr.line);
        json_decref(root);
        return 1;
    }
    json_int_t tid = train_tid(events);
    double self[NCATS] = {0}, background = 0;
    long waits = 0, reports = 0, buckets = 0;
    int64_t first = INT64_MAX, last = 0;
    size_t i;
    json_t *e;
    json_array_foreach(events, i, e) {
        const char *ph = json_string_value(json_object_get(e, "ph"));
        if (!ph || strcmp(ph, "X"))
            continue;
        const char *cat = json_string_value(json_object_get(e, "cat"));
        int64_t ts = json_integer_value(json_object_get(e, "ts"));
        int64_t dur = json_integer_value(json_object_get(e, "dur"));
        json_t *s = json_object_get(json_object_get(e, "args"), "self_us");
        double us = (double)(json_is_integer(s) ? json_integer_value(s) : dur);
        if (json_integer_value(json_object_get(e, "tid")) != tid) {
            if (cat && !strcmp(cat, "fusion")) {
                background += us;
                buckets++;
            }
            continue;
        }
        self[cat_index(cat)] += us;
        waits += cat && !strcmp(cat, "fusion_wait");
        reports += cat && !strcmp(cat, "report");
        if (ts < first)
            first = ts;
        if (ts + dur > last)
            last = ts + dur;
    }
    const char *host = json_string_value(json_object_get(json_object_get(root, "otherData"), "host"));
    long steps = waits ? waits : reports;
    double total = 0;
    for (size_t k = 0; k < NCATS; k++)
        total += self[k];
    fprintf(out, "rank %d (%s): %.3f s on the training thread, %ld report%s, %ld step%s (%s)\n",
            rank, host ? host : "?", first < last ? (double)(last - first) / 1e6 : 0.0, reports,
            reports == 1 ? "" : "s", steps, steps == 1 ? "" : "s",
            waits ? "fusion waits" : "reports");
    fprintf(out, "  %-18s %10s %14s %7s\n", "", "total s", "per step ms", "share");
    for (size_t k = 0; k < NCATS; k++) {
        if (self[k] == 0 && k == NCATS - 1)
            continue;
        fprintf(out, "  %-18s %10.3f %14.3f %6.1f%%\n", labels[k], self[k] / 1e6,
                steps ? self[k] / 1e3 / (double)steps : 0.0, total > 0 ? 100 * self[k] / total : 0.0);
    }
    if (buckets)
        fprintf(out, "  fusion thread: %ld bucket%s reduced in %.3f s (overlaps the above)\n",
                buckets, buckets == 1 ? "" : "s", background / 1e6);
    json_decref(root);
    return 0;
}

int timeline_summary(const char *run_dir, FILE *out)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/trace", run_dir);
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "mpitrain-show: %s: no trace (run with --trace or MT_TRACE=1): %s\n", dir,
                strerror(errno));
        return 1;
    }
    int *ranks = NULL, n = 0, cap = 0, rc = 0;
    struct dirent *ent;
    while ((ent = readdir(d))) {
        int r, used = 0;
        if (sscanf(ent->d_name, "rank_%d.json%n", &r, &used) != 1 || used == 0 ||
            ent->d_name[used] != '\0' || r < 0)
            continue;
        if (n == cap) {
            int *grown = realloc(ranks, (size_t)(cap = cap ? 2 * cap : 16) * sizeof *ranks);
            if (!grown) {
                fprintf(stderr, "mpitrain-show: out of memory listing %s\n", dir);
                rc = 1;
                break;
            }
            ranks = grown;
        }
        ranks[n++] = r;
    }
    closedir(d);
    if (!rc && n == 0) {
        fprintf(stderr, "mpitrain-show: %s: no rank_<R>.json files\n", dir);
        rc = 1;
    }
    if (!rc) {
        qsort(ranks, (size_t)n, sizeof *ranks, by_number);
        fprintf(out, "timeline   %s (%d rank%s; open the files in https://ui.perfetto.dev)\n", dir,
                n, n == 1 ? "" : "s");
        for (int i = 0; i < n; i++) {
            char path[4200];
            snprintf(path, sizeof path, "%s/rank_%d.json", dir, ranks[i]);
            if (summarise(path, ranks[i], out))
                rc = 1;
        }
    }
    free(ranks);
    return rc;
}
