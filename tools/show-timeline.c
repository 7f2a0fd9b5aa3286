/*
 * show-timeline.c -- mpitrain-show --timeline: where each rank's step time went, read from
 * the per-rank trace files a run writes with --trace (RUN/trace/rank_<R>.json).
 *
 * The training thread's spans carry their self time (args.self_us: their duration less
 * their children's), so adding self time per category counts an agreement inside a
 * collective once. The training thread is the one named "train"; its "compute" spans are
 * the user's code between library calls. A step is a fusion wait when the run used a
 * fusion (one per optimiser step), else a report.
 *
 * The files are input, possibly damaged: every number is checked before arithmetic (a
 * span's ts and dur whole and >= 0, their sum representable, self_us within dur), a
 * damaged span is counted, left out and named with its file, and files are named as
 * found in the folder (rank_007.json, not a name rebuilt from its number).
 */
#include "show-timeline.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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

/* A rank file as found: its rank and its name in the folder (rank_007.json stays that). */
typedef struct {
    long rank;
    char name[64];
} rank_file;

static int by_number(const void *a, const void *b)
{
    const rank_file *x = a, *y = b;
    return x->rank != y->rank ? (x->rank > y->rank) - (x->rank < y->rank)
                              : strcmp(x->name, y->name);
}

/* "rank_<digits>.json": the rank in *r (at most 9 digits' worth, no sign, no overflow). */
static bool rank_name(const char *name, long *r)
{
    if (strncmp(name, "rank_", 5) != 0)
        return false;
    const char *p = name + 5;
    long v = 0;
    int digits = 0;
    for (; *p >= '0' && *p <= '9'; p++, digits++) {
        if (v > (INT32_MAX - (*p - '0')) / 10)
            return false; /* a rank no job has: not a rank file */
        v = v * 10 + (*p - '0');
    }
    if (!digits || strcmp(p, ".json") != 0)
        return false;
    *r = v;
    return true;
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

static int summarise(const char *path, long rank, FILE *out)
{
    struct stat st; /* a FIFO would block the read, a link leads out of the run */
    int serr = lstat(path, &st) != 0 ? errno : 0;
    if (serr || !S_ISREG(st.st_mode)) {
        fprintf(stderr, "mpitrain-show: %s: %s: passed over\n", path,
                serr ? strerror(serr) : S_ISLNK(st.st_mode) ? "a symbolic link, not followed"
                                  : "not a regular file (a FIFO, a device or a folder)");
        return 1;
    }
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
    int64_t first = INT64_MAX, last = INT64_MIN;
    size_t i, damaged = 0, first_damaged = 0;
    json_t *e;
    json_array_foreach(events, i, e) {
        const char *ph = json_string_value(json_object_get(e, "ph"));
        if (!ph || strcmp(ph, "X"))
            continue;
        const char *cat = json_string_value(json_object_get(e, "cat"));
        json_t *ts_j = json_object_get(e, "ts"), *dur_j = json_object_get(e, "dur");
        json_t *s = json_object_get(json_object_get(e, "args"), "self_us");
        int64_t ts = json_integer_value(ts_j), dur = json_integer_value(dur_j), end = 0;
        /* a span's numbers are microseconds the tracer wrote: whole, not negative, its end
         * representable, its self time within it; anything else is a damaged event,
         * counted and left out (checked arithmetic: no overflow on hostile numbers) */
        if (!json_is_integer(ts_j) || !json_is_integer(dur_j) || ts < 0 || dur < 0 ||
            __builtin_add_overflow(ts, dur, &end) ||
            (s && (!json_is_integer(s) || json_integer_value(s) < 0 ||
                   json_integer_value(s) > dur))) {
            if (!damaged++)
                first_damaged = i;
            continue;
        }
        double us = (double)(s ? json_integer_value(s) : dur);
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
        if (end > last)
            last = end;
    }
    const char *host = json_string_value(json_object_get(json_object_get(root, "otherData"), "host"));
    long steps = waits ? waits : reports;
    double total = 0;
    for (size_t k = 0; k < NCATS; k++)
        total += self[k];
    int64_t span = 0; /* both within [0, INT64_MAX]: last - first cannot overflow */
    if (first < last)
        span = last - first;
    fprintf(out, "rank %ld (%s): %.3f s on the training thread, %ld report%s, %ld step%s (%s)\n",
            rank, host ? host : "?", (double)span / 1e6, reports,
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
    if (damaged)
        fprintf(stderr, "mpitrain-show: %s: %zu damaged span%s left out (the first is event %zu: "
                "ts, dur or self_us not whole microseconds from 0, or past the clock's range)\n",
                path, damaged, damaged == 1 ? "" : "s", first_damaged);
    return damaged ? 1 : 0;
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
    rank_file *ranks = NULL;
    int n = 0, cap = 0, rc = 0;
    bool misnamed = false; /* said, and the summary fails, after the others are shown */
    struct dirent *ent;
    while ((ent = readdir(d))) {
        long r = 0;
        size_t len = strlen(ent->d_name);
        if (len >= sizeof ranks->name || !rank_name(ent->d_name, &r)) {
            /* rank_<R>.<k>.json is an earlier attempt's; a name like a rank file's that
             * is none (a rank past any job's) is said, as found */
            const char *dot = strchr(ent->d_name + 5 > ent->d_name + len ? ent->d_name
                                                                          : ent->d_name + 5, '.');
            bool earlier = dot && strchr(dot + 1, '.');
            if (!strncmp(ent->d_name, "rank_", 5) && len > 10 &&
                !strcmp(ent->d_name + len - 5, ".json") && !earlier) {
                fprintf(stderr, "mpitrain-show: %s/%s: not a rank's trace file (the rank is not "
                        "a number from 0 to %d): passed over\n", dir, ent->d_name, INT32_MAX);
                misnamed = true;
            }
            continue;
        }
        if (n == cap) {
            if (cap > INT32_MAX / 4) {
                rc = 1;
                break;
            }
            rank_file *grown = realloc(ranks, (size_t)(cap = cap ? 2 * cap : 16) * sizeof *ranks);
            if (!grown) {
                fprintf(stderr, "mpitrain-show: out of memory listing %s\n", dir);
                rc = 1;
                break;
            }
            ranks = grown;
        }
        ranks[n].rank = r;
        snprintf(ranks[n].name, sizeof ranks[n].name, "%s", ent->d_name);
        n++;
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
            char path[4200]; /* the name as found: rank_007.json is named so, not rank_7 */
            snprintf(path, sizeof path, "%s/%s", dir, ranks[i].name);
            if (summarise(path, ranks[i].rank, out))
                rc = 1;
        }
    }
    free(ranks);
    return rc || misnamed;
}
