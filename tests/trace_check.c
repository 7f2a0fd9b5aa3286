/*
 * trace_check FILE RANK [CATEGORY...]: FILE is a valid Chrome trace-event file as a rank
 * writes it with --trace (common/trace.c), for tests/timeline.sh. Checks: a JSON object
 * with displayTimeUnit and a traceEvents array; every event has a string name and ph, an
 * integer ts >= 0, pid == RANK and an integer tid; every "X" event has a string cat, an
 * integer dur >= 0 and 0 <= args.self_us <= dur; the "X" events of each thread nest (none
 * overlaps another partly), as spans opened and closed in call order must; a process_name
 * event names "rank RANK (host)" and carries the host; every thread with events is named,
 * once;
 * each CATEGORY appears. Prints every problem; exit 0 when there is none.
 */
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int problems;

#define BAD(...)                                                                        \
    do {                                                                                \
        fprintf(stderr, "trace_check: %s: ", file);                                     \
        fprintf(stderr, __VA_ARGS__);                                                   \
        fputc('\n', stderr);                                                            \
        problems++;                                                                     \
    } while (0)

typedef struct {
    json_int_t tid, ts, end;
} span;

static int by_start(const void *a, const void *b)
{
    const span *x = a, *y = b;
    if (x->tid != y->tid)
        return (x->tid > y->tid) - (x->tid < y->tid);
    if (x->ts != y->ts)
        return (x->ts > y->ts) - (x->ts < y->ts);
    return (x->end < y->end) - (x->end > y->end); /* the outer span first */
}

/* Spans of one thread, sorted by start: each must end inside the spans still open. */
static void check_nesting(const char *file, span *s, size_t n)
{
    qsort(s, n, sizeof *s, by_start);
    json_int_t open_end[256];
    int depth = 0;
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && s[i].tid != s[i - 1].tid)
            depth = 0;
        while (depth > 0 && open_end[depth - 1] <= s[i].ts)
            depth--;
        if (depth > 0 && s[i].end > open_end[depth - 1]) {
            BAD("tid %lld: span [%lld, %lld] overlaps its parent ending at %lld",
                (long long)s[i].tid, (long long)s[i].ts, (long long)s[i].end,
                (long long)open_end[depth - 1]);
            continue;
        }
        if (depth < 256)
            open_end[depth++] = s[i].end;
    }
}

static bool in_list(const json_int_t *v, size_t n, json_int_t x)
{
    for (size_t i = 0; i < n; i++)
        if (v[i] == x)
            return true;
    return false;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: trace_check FILE RANK [CATEGORY...]\n");
        return 2;
    }
    const char *file = argv[1];
    long rank = strtol(argv[2], NULL, 10);
    json_error_t err;
    json_t *root = json_load_file(file, 0, &err);
    if (!json_is_object(root)) {
        fprintf(stderr, "trace_check: %s: not a JSON object: %s (line %d)\n", file,
                root ? "" : err.text, err.line);
        json_decref(root);
        return 1;
    }
    if (!json_is_string(json_object_get(root, "displayTimeUnit")))
        BAD("no displayTimeUnit");
    json_t *events = json_object_get(root, "traceEvents");
    if (!json_is_array(events)) {
        BAD("no traceEvents array");
        json_decref(root);
        return 1;
    }
    size_t n = json_array_size(events), nspans = 0, nused = 0, nnamed = 0;
    span *spans = calloc(n + 1, sizeof *spans);
    json_int_t *used = calloc(n + 1, sizeof *used), *named = calloc(n + 1, sizeof *named);
    int *seen = calloc((size_t)argc, sizeof *seen);
    bool process_named = false;
    if (!spans || !used || !named || !seen) {
        fprintf(stderr, "trace_check: out of memory\n");
        return 1;
    }
    size_t i;
    json_t *e;
    json_array_foreach(events, i, e) {
        const char *name = json_string_value(json_object_get(e, "name"));
        const char *ph = json_string_value(json_object_get(e, "ph"));
        json_t *ts = json_object_get(e, "ts"), *pid = json_object_get(e, "pid");
        json_t *tid = json_object_get(e, "tid"), *args = json_object_get(e, "args");
        if (!name || !ph || !json_is_integer(ts) || json_integer_value(ts) < 0 ||
            !json_is_integer(pid) || !json_is_integer(tid)) {
            BAD("event %zu lacks a name, ph, ts >= 0, pid or tid", i);
            continue;
        }
        if (json_integer_value(pid) != rank)
            BAD("event %zu: pid %lld is not the rank %ld", i,
                (long long)json_integer_value(pid), rank);
        if (!strcmp(ph, "M")) {
            const char *label = json_string_value(json_object_get(args, "name"));
            if (!strcmp(name, "process_name")) {
                char want[64];
                snprintf(want, sizeof want, "rank %ld (", rank);
                const char *host = json_string_value(json_object_get(args, "host"));
                if (!label || strncmp(label, want, strlen(want)) || !host || !*host ||
                    !strstr(label, host))
                    BAD("process_name '%s' does not read \"rank %ld (host)\"",
                        label ? label : "", rank);
                process_named = true;
            } else if (!strcmp(name, "thread_name")) {
                if (!label || !*label)
                    BAD("event %zu: thread_name without a name", i);
                if (in_list(named, nnamed, json_integer_value(tid)))
                    BAD("thread %lld is named twice", (long long)json_integer_value(tid));
                named[nnamed++] = json_integer_value(tid);
            }
            continue;
        }
        if (strcmp(ph, "X")) {
            BAD("event %zu: phase '%s' (the tracer writes only X and M)", i, ph);
            continue;
        }
        const char *cat = json_string_value(json_object_get(e, "cat"));
        json_t *dur = json_object_get(e, "dur"), *self = json_object_get(args, "self_us");
        if (!cat || !json_is_integer(dur) || json_integer_value(dur) < 0) {
            BAD("event %zu (%s): no cat or no dur >= 0", i, name);
            continue;
        }
        if (!json_is_integer(self) || json_integer_value(self) < 0 ||
            json_integer_value(self) > json_integer_value(dur))
            BAD("event %zu (%s): args.self_us is not in [0, dur]", i, name);
        for (int k = 3; k < argc; k++)
            seen[k] |= !strcmp(cat, argv[k]);
        if (!in_list(used, nused, json_integer_value(tid)))
            used[nused++] = json_integer_value(tid);
        spans[nspans++] = (span){json_integer_value(tid), json_integer_value(ts),
                                 json_integer_value(ts) + json_integer_value(dur)};
    }
    if (!process_named)
        BAD("no process_name metadata event");
    for (size_t k = 0; k < nused; k++)
        if (!in_list(named, nnamed, used[k]))
            BAD("thread %lld has events but no thread_name", (long long)used[k]);
    for (int k = 3; k < argc; k++)
        if (!seen[k])
            BAD("no event of category '%s'", argv[k]);
    check_nesting(file, spans, nspans);
    free(spans);
    free(used);
    free(named);
    free(seen);
    json_decref(root);
    if (!problems)
        printf("trace_check: %s: %zu events, %zu spans, rank %ld: ok\n", file, n, nspans, rank);
    return problems ? 1 : 0;
}
