/*
 * rows.c -- result.json: one JSON line per report, appended whole (then progress.csv
 * follows, progress.c) by rank 0's row writer (rowlog.c) or, for a report with a
 * checkpoint, before mt_report returns; read back as the run's
 * history; on resume a torn last line is cut and rows a resumed run redoes move to
 * result.superseded.json.
 *
 * The lines are serialised here, not by jansson's dump, which formats every real with
 * printf("%.17g") (about half a microsecond each; a row has dozens). Measured with
 * mpitrain-bench --suite report (8 metrics, 2 ranks, budget 25 us median): 27.8 to
 * 28.8 us a report with json_dumps(JSON_COMPACT | JSON_REAL_PRECISION(17)) against 17.9
 * to 18.9 us with this writer and mt__fmt_double (the same values on reading, shorter
 * text). Everything else in the run directory (run.json, params.json) is written by
 * jansson; rows are read back with it too.
 */
#include "runtime.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The line being written; oom once an allocation failed (no line is written then). */
typedef struct {
    char *p;
    size_t n, cap;
    bool oom;
} text;

static void put(text *t, const char *s, size_t n)
{
    if (t->oom || (t->oom = MT__GROW(t->p, t->cap, t->n + n + 1) != MT_OK))
        return;
    memcpy(t->p + t->n, s, n);
    t->n += n;
    t->p[t->n] = '\0';
}

static void put_string(text *t, const char *s)
{
    put(t, "\"", 1);
    const char *run = s;
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch >= 0x20 && ch != '"' && ch != '\\')
            continue;
        put(t, run, (size_t)(s - run));
        char esc[8];
        switch (ch) {
        case '"': put(t, "\\\"", 2); break;
        case '\\': put(t, "\\\\", 2); break;
        case '\n': put(t, "\\n", 2); break;
        case '\t': put(t, "\\t", 2); break;
        case '\r': put(t, "\\r", 2); break;
        default:
            snprintf(esc, sizeof esc, "\\u%04x", ch);
            put(t, esc, 6);
        }
        run = s + 1;
    }
    put(t, run, (size_t)(s - run));
    put(t, "\"", 1);
}

static void put_i64(text *t, long long v)
{
    char b[24], *e = b + sizeof b, *p = e;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do
        *--p = (char)('0' + u % 10);
    while (u /= 10);
    if (v < 0)
        *--p = '-';
    put(t, p, (size_t)(e - p));
}

static void put_json(text *t, json_t *v)
{
    char b[32];
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *key;
        json_t *x;
        bool first = true;
        put(t, "{", 1);
        json_object_foreach(v, key, x)
        {
            if (!first)
                put(t, ",", 1);
            first = false;
            put_string(t, key);
            put(t, ":", 1);
            put_json(t, x);
        }
        put(t, "}", 1);
        break;
    }
    case JSON_ARRAY:
        put(t, "[", 1);
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i)
                put(t, ",", 1);
            put_json(t, json_array_get(v, i));
        }
        put(t, "]", 1);
        break;
    case JSON_STRING: put_string(t, json_string_value(v)); break;
    case JSON_INTEGER: put_i64(t, (long long)json_integer_value(v)); break;
    case JSON_REAL: put(t, b, (size_t)mt__fmt_double(b, json_real_value(v))); break;
    case JSON_TRUE: put(t, "true", 4); break;
    case JSON_FALSE: put(t, "false", 5); break;
    default: put(t, "null", 4); break;
    }
}

json_t *mt__run_read_rows(const char *dir, int *rc)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/result.json", dir);
    *rc = MT_OK;
    json_t *rows = json_array();
    if (!rows) {
        *rc = mt__error(MT_ENOMEM, "out of memory reading %s", path);
        return NULL;
    }
    int e = MT_OK;
    FILE *in = mt__run_fopen(path, "r", &e);
    if (!in) {
        if (e != MT_ENOTFOUND) { /* a link in its place too: named, never read */
            *rc = e;
            json_decref(rows);
            rows = NULL;
        }
        return rows;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    bool oom = false;
    for (json_int_t number = 1; !oom && (n = getline(&line, &cap, in)) > 0; number++) {
        /* a last line a crash cut short, or a line that is no JSON object: not a row, but
         * its line number in its place, so that whoever reads the rows says so */
        json_t *row = line[n - 1] == '\n' ? mt__json_parse_line(line, &oom) : NULL;
        if (row && json_is_object(row)) {
            json_object_del(row, "per_rank");
            oom = json_array_append(rows, row) != 0;
        } else if (!oom)
            oom = json_array_append_new(rows, json_integer(number)) != 0;
        json_decref(row);
    }
    bool bad = ferror(in);
    free(line);
    fclose(in);
    if (oom || bad) {
        *rc = oom ? mt__error(MT_ENOMEM, "out of memory reading %s", path)
                  : mt__error(MT_EIO, "cannot read %s", path);
        json_decref(rows);
        return NULL;
    }
    return rows;
}


/* Learn the CSV header of an existing run from its result.json (on resume). */
int mt__run_open_logs(mt__rundir *r)
{
    int rc = mt__csv_learn(r);
    if (rc)
        return rc;
    char path[4096];
    snprintf(path, sizeof path, "%s/result.json", r->dir);
    r->result = mt__run_fopen(path, "a", &rc);
    if (!r->result)
        return rc;
    return mt__csv_rewrite(r);
}

void mt__run_close_logs(mt__rundir *r)
{
    mt__rows_stop(r);
    mt__csv_close(r);
    if (r->result)
        fclose(r->result);
    r->result = NULL;
}

int mt__run_append(mt__rundir *r, json_t *row)
{
    text t = {0};
    t.oom = MT__GROW(t.p, t.cap, 512) != MT_OK; /* a row's usual size in one allocation */
    put_json(&t, row);
    put(&t, "\n", 1);
    if (t.oom) {
        free(t.p);
        return mt__error(MT_ENOMEM, "out of memory writing result.json");
    }
    int rc = mt__append_whole(r->result, r->dir, "result.json", t.p, t.n);
    free(t.p);
    if (rc)
        return rc;
    return mt__csv_append(r, row);
}

int mt__run_repair_logs(mt__rundir *r, int64_t *last_iteration)
{
    const char *files[] = {"result.json", "progress.csv", "result.superseded.json"};
    *last_iteration = -1;
    for (int i = 0; i < 3; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", r->dir, files[i]);
        off_t cut = 0;
        int rc = mt__cut_torn_tail(path, &cut);
        if (rc)
            return rc;
        if (cut)
            printf("mpitrain: %s: cut a torn last line (%lld bytes without a newline: a crash "
                   "in the middle of a write)\n", path, (long long)cut);
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/result.json", r->dir);
    int e = MT_OK;
    FILE *in = mt__run_fopen(path, "r", &e);
    if (!in)
        return e == MT_ENOTFOUND ? MT_OK : e;
    *last_iteration = 0;
    char *line = NULL;
    size_t cap = 0;
    bool oom = false;
    while (!oom && getline(&line, &cap, in) > 0) {
        json_t *row = mt__json_parse_line(line, &oom); /* a row lost to memory is not a row skipped */
        json_t *it = row ? json_object_get(row, "training_iteration") : NULL;
        if (json_is_integer(it) && json_integer_value(it) > *last_iteration)
            *last_iteration = json_integer_value(it);
        /* an attempt that crashed never saved its time in run.json: its rows did */
        json_t *total = row ? json_object_get(row, "time_total_s") : NULL;
        if (json_is_number(total) && json_number_value(total) > r->time_total &&
            isfinite(json_number_value(total)))
            r->time_total = json_number_value(total);
        json_decref(row);
    }
    free(line);
    fclose(in);
    return oom ? mt__error(MT_ENOMEM, "out of memory reading %s", path) : MT_OK;
}


/* Move result.json rows past `iteration` (work a resumed run will redo) to
 * result.superseded.json, so each iteration appears once in result.json and nothing
 * reported is deleted. */
int mt__run_supersede(mt__rundir *r, int64_t iteration)
{
    char path[4096], tmp[4096], old[4096];
    snprintf(path, sizeof path, "%s/result.json", r->dir);
    snprintf(tmp, sizeof tmp, "%s/.result.json.tmp", r->dir);
    snprintf(old, sizeof old, "%s/result.superseded.json", r->dir);
    int rc = MT_OK;
    FILE *in = mt__run_fopen(path, "r", &rc);
    if (!in)
        return rc == MT_ENOTFOUND ? MT_OK : rc;
    if (unlink(tmp) != 0 && errno != ENOENT) /* a leftover (or a link): the name only */
        rc = mt__error(MT_EIO, "cannot remove %s: %s", tmp, strerror(errno));
    FILE *keep = rc ? NULL : mt__run_fopen(tmp, "x", &rc), *gone = NULL;
    char *line = NULL;
    size_t cap = 0;
    int moved = 0;
    bool oom = false;
    while (!rc && getline(&line, &cap, in) > 0) {
        json_t *row = mt__json_parse_line(line, &oom);
        json_int_t it = row ? json_integer_value(json_object_get(row, "training_iteration")) : 0;
        json_decref(row);
        if (oom) {
            rc = mt__error(MT_ENOMEM, "out of memory reading %s", path);
            break;
        }
        if (it <= iteration) {
            fputs(line, keep);
            continue;
        }
        if (!gone && !(gone = mt__run_fopen(old, "a", &rc)))
            break;
        else {
            fputs(line, gone);
            moved++;
        }
    }
    free(line);
    fclose(in);
    if (gone && (fflush(gone) != 0 || ferror(gone) || fsync(fileno(gone)) != 0) && !rc)
        rc = mt__error(MT_EIO, "cannot write %s: %s", old, strerror(errno));
    if (gone)
        fclose(gone);
    if (keep && (fflush(keep) != 0 || ferror(keep) || fsync(fileno(keep)) != 0) && !rc)
        rc = mt__error(MT_EIO, "cannot write %s: %s", tmp, strerror(errno));
    if (keep)
        fclose(keep);
    if (!rc && (rc = mt__run_check(path)) == MT_ENOTFOUND)
        rc = MT_OK;
    if (!rc && rename(tmp, path) != 0)
        rc = mt__error(MT_EIO, "cannot replace %s: %s", path, strerror(errno));
    if (rc) { /* result.json stays as it was */
        unlink(tmp);
        return rc;
    }
    if (moved)
        printf("mpitrain: %d report%s after iteration %lld moved to %s (the resumed run redoes "
               "them)\n", moved, moved == 1 ? "" : "s", (long long)iteration, old);
    return rc;
}

