/*
 * jsonl_check FILE [SUITE...]: every line of FILE is a JSON object, and each SUITE named
 * appears in some line's "suite" field. With SUITEs named (the benchmark's --json output;
 * a run's result.json is checked with none), each line also carries date (UTC, ISO 8601),
 * host, version, ranks and mode (quick or full); a figure with a budget has "budget" (its
 * rule: clauses "KEY <= X" or "KEY >= X", X a number or another key, joined by ", or ")
 * and a boolean "budget_met" that agrees with the line's figures; and at 2 ranks every
 * figure docs/design.md gives a budget for has one (shard, report, checkpoints up to 1 GiB,
 * the asynchronous checkpoint's stall and loop, train, allreduce at 4 B and from 64 KiB, fusion at
 * 1 KiB tensors). Timings are never judged, only
 * the fields and their agreement.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The figure should have a budget (2 ranks only: the budgets are stated for 2 ranks). */
static int wants_budget(const char *suite, json_t *j)
{
    if (json_integer_value(json_object_get(j, "ranks")) != 2)
        return -1; /* not judged */
    if (!strcmp(suite, "shard") || !strcmp(suite, "report") || !strcmp(suite, "train") ||
        !strcmp(suite, "checkpoint_async") || !strcmp(suite, "checkpoint_async_loop"))
        return 1; /* the asynchronous checkpoint's stall and training loop (issue 27) */
    if (!strcmp(suite, "checkpoint")) /* every commit up to 1 GiB (issue 14) */
        return json_number_value(json_object_get(j, "bytes")) <= (double)(1 << 30);
    if (!strcmp(suite, "allreduce")) { /* 4 B (issue 27: the data in the agreement) too */
        json_int_t bytes = json_integer_value(json_object_get(j, "bytes"));
        return bytes >= 65536 || bytes == 4;
    }
    if (!strcmp(suite, "fusion"))
        return json_integer_value(json_object_get(j, "tensor_bytes")) == 1024;
    return 0;
}

/* Problems with one line's common fields and budget, printed; their number. */
static int check_fields(const char *file, int n, const char *suite, json_t *j)
{
    int bad = 0;
    const char *date = json_string_value(json_object_get(j, "date"));
    const char *host = json_string_value(json_object_get(j, "host"));
    const char *version = json_string_value(json_object_get(j, "version"));
    const char *mode = json_string_value(json_object_get(j, "mode"));
    int y, mo, d, h, mi, sec;
    char z = 0;
    if (!date || strlen(date) != 20 ||
        sscanf(date, "%4d-%2d-%2dT%2d:%2d:%2d%c", &y, &mo, &d, &h, &mi, &sec, &z) != 7 || z != 'Z')
        fprintf(stderr, "jsonl_check: %s:%d: no ISO 8601 UTC \"date\"\n", file, n), bad++;
    if (!host || !*host || !version || !*version)
        fprintf(stderr, "jsonl_check: %s:%d: no \"host\" or \"version\"\n", file, n), bad++;
    if (!json_is_integer(json_object_get(j, "ranks")) ||
        json_integer_value(json_object_get(j, "ranks")) < 1)
        fprintf(stderr, "jsonl_check: %s:%d: no \"ranks\"\n", file, n), bad++;
    if (!mode || (strcmp(mode, "quick") && strcmp(mode, "full")))
        fprintf(stderr, "jsonl_check: %s:%d: \"mode\" is not quick or full\n", file, n), bad++;
    json_t *met = json_object_get(j, "budget_met");
    const char *rule = json_string_value(json_object_get(j, "budget"));
    int want = suite ? wants_budget(suite, j) : -1;
    if ((met != NULL) != (rule != NULL) || (met && !json_is_boolean(met)))
        fprintf(stderr, "jsonl_check: %s:%d: \"budget\" and a boolean \"budget_met\" go "
                "together\n", file, n), bad++;
    else if (want >= 0 && want != (met != NULL))
        fprintf(stderr, "jsonl_check: %s:%d: %s figure %s a budget\n", file, n, suite,
                want ? "without" : "with"), bad++;
    if (rule && met) {
        /* "CLAUSE[, or CLAUSE]... [at ...]", CLAUSE = "KEY <=|>= NUMBER|KEY" */
        int any = 0, parsed = 1, near = 0;
        char text[256];
        snprintf(text, sizeof text, "%s", rule);
        for (char *c = text, *next; c && parsed; c = next) {
            next = strstr(c, ", or ");
            if (next) {
                *next = '\0';
                next += 5;
            }
            char key[64], op[3], rhs[64];
            double x, lim;
            json_t *v = NULL, *w = NULL;
            if (sscanf(c, "%63s %2s %63s", key, op, rhs) != 3 || (strcmp(op, "<=") && strcmp(op, ">=")) ||
                !json_is_number(v = json_object_get(j, key))) {
                parsed = 0;
                break;
            }
            char *end;
            lim = strtod(rhs, &end);
            if (*end) { /* another key of the line */
                if (!json_is_number(w = json_object_get(j, rhs))) {
                    parsed = 0;
                    break;
                }
                lim = json_number_value(w);
            }
            x = json_number_value(v);
            any |= !strcmp(op, "<=") ? x <= lim : x >= lim;
            /* printed with a few decimals: a value at the limit itself is not judged */
            near |= fabs(x - lim) <= 1e-3 * (fabs(lim) + 1e-9);
        }
        if (!parsed)
            fprintf(stderr, "jsonl_check: %s:%d: budget rule '%s' names no figure of the line\n",
                    file, n, rule), bad++;
        else if (!near && any != json_is_true(met))
            fprintf(stderr, "jsonl_check: %s:%d: budget_met %s disagrees with '%s'\n", file, n,
                    json_is_true(met) ? "true" : "false", rule), bad++;
    }
    return bad;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: jsonl_check FILE [SUITE...]\n");
        return 2;
    }
    FILE *f = fopen(argv[1], "r");
    if (!f) {
        fprintf(stderr, "jsonl_check: cannot read %s\n", argv[1]);
        return 1;
    }
    char *line = NULL;
    size_t cap = 0;
    int n = 0, bad = 0, *seen = calloc((size_t)argc, sizeof *seen);
    while (getline(&line, &cap, f) > 0) {
        n++;
        json_error_t err;
        json_t *j = json_loads(line, 0, &err);
        if (!json_is_object(j)) {
            fprintf(stderr, "jsonl_check: %s:%d: not a JSON object: %s\n", argv[1], n, err.text);
            bad++;
        }
        const char *suite = json_string_value(json_object_get(j, "suite"));
        if (json_is_object(j) && argc > 2) /* the benchmark's lines: their fields too */
            bad += check_fields(argv[1], n, suite, j);
        for (int i = 2; suite && i < argc; i++)
            seen[i] |= !strcmp(suite, argv[i]);
        json_decref(j);
    }
    free(line);
    fclose(f);
    for (int i = 2; i < argc; i++)
        if (!seen[i]) {
            fprintf(stderr, "jsonl_check: %s: no line of suite %s\n", argv[1], argv[i]);
            bad++;
        }
    free(seen);
    printf("jsonl_check: %s: %d lines%s\n", argv[1], n, bad ? ", INVALID" : ", valid");
    return bad || !n;
}
