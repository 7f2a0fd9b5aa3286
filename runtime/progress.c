/*
 * progress.c -- progress.csv: result.json's rows as CSV (RFC 4180), one column per key
 * ever reported; when a new key appears the file is rewritten from result.json under the
 * wider header (temporary file, rename), otherwise each row is appended whole. Numbers
 * are written by mt__fmt_double (common/fmt.c), as in result.json (rows.c says what it
 * measured against jansson), so both files hold the same text for the same value.
 */
#include "runtime.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* One CSV field per RFC 4180: quoted when it holds the separator, a quote, CR or LF (keys
 * and string values alike, or every later column shifts). */
static void csv_field(FILE *f, const char *s)
{
    if (!strpbrk(s, ",\"\r\n")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static void csv_value(FILE *f, json_t *v)
{
    if (!v)
        return;
    if (json_is_string(v)) {
        csv_field(f, json_string_value(v));
    } else if (json_is_integer(v))
        fprintf(f, "%lld", (long long)json_integer_value(v));
    else if (json_is_real(v)) {
        char b[32];
        fwrite(b, 1, (size_t)mt__fmt_double(b, json_real_value(v)), f);
    }
    else if (json_is_boolean(v))
        fputs(json_is_true(v) ? "true" : "false", f);
}

static void csv_row(FILE *f, const mt__rundir *r, json_t *row)
{
    for (int i = 0; i < r->ncsv; i++) {
        if (i)
            fputc(',', f);
        csv_value(f, json_object_get(row, r->csv_keys[i]));
    }
    fputc('\n', f);
}

static int add_keys(mt__rundir *r, json_t *row, bool *grew)
{
    const char *key;
    json_t *v;
    json_object_foreach(row, key, v)
    {
        bool have = false;
        for (int i = 0; i < r->ncsv && !have; i++)
            have = !strcmp(r->csv_keys[i], key);
        if (have || json_is_object(v))
            continue;
        if (MT__GROW(r->csv_keys, r->csv_cap, (size_t)r->ncsv + 1))
            return mt__error(MT_ENOMEM, "out of memory for progress.csv");
        if (!(r->csv_keys[r->ncsv] = mt__strdup(key)))
            return MT_ENOMEM;
        r->ncsv++;
        *grew = true;
    }
    return MT_OK;
}

int mt__csv_learn(mt__rundir *r)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/result.json", r->dir);
    int rc = MT_OK;
    FILE *in = mt__run_fopen(path, "r", &rc);
    if (!in)
        return rc == MT_ENOTFOUND ? MT_OK : rc;
    char *line = NULL;
    size_t cap = 0;
    bool grew = false, oom = false;
    while (!oom && !rc && getline(&line, &cap, in) > 0) {
        json_t *row = mt__json_parse_line(line, &oom);
        if (row)
            rc = add_keys(r, row, &grew);
        json_decref(row);
    }
    free(line);
    fclose(in);
    if (oom || rc)
        return rc ? rc : mt__error(MT_ENOMEM, "out of memory reading %s", path);
    return MT_OK;
}

int mt__csv_rewrite(mt__rundir *r)
{
    char path[4096], tmp[4096];
    snprintf(path, sizeof path, "%s/result.json", r->dir);
    snprintf(tmp, sizeof tmp, "%s/.progress.csv.tmp", r->dir);
    int rc = MT_OK;
    FILE *in = mt__run_fopen(path, "r", &rc);
    if (!in)
        return rc == MT_ENOTFOUND ? mt__error(MT_EIO, "cannot read %s: it is gone", path) : rc;
    if (unlink(tmp) != 0 && errno != ENOENT) /* a leftover (or a link): the name only */
        rc = mt__error(MT_EIO, "cannot remove %s: %s", tmp, strerror(errno));
    FILE *out = rc ? NULL : mt__run_fopen(tmp, "x", &rc);
    if (!out) {
        fclose(in);
        return rc;
    }
    for (int i = 0; i < r->ncsv; i++) {
        if (i)
            fputc(',', out);
        csv_field(out, r->csv_keys[i]);
    }
    fputc('\n', out);
    char *line = NULL;
    size_t cap = 0;
    bool oom = false;
    while (!oom && getline(&line, &cap, in) > 0) {
        json_t *row = mt__json_parse_line(line, &oom);
        if (row)
            csv_row(out, r, row);
        json_decref(row);
    }
    free(line);
    fclose(in);
    int bad = fflush(out) != 0 || ferror(out) || fsync(fileno(out)) != 0, e = errno;
    if (fclose(out) != 0 && !bad)
        bad = 1, e = errno;
    if (oom) {
        unlink(tmp);
        return mt__error(MT_ENOMEM, "out of memory rewriting %s/progress.csv", r->dir);
    }
    if (bad) {
        unlink(tmp);
        return mt__error(MT_EIO, "cannot write %s: %s", tmp, strerror(e));
    }
    snprintf(path, sizeof path, "%s/progress.csv", r->dir);
    if (r->csv)
        fclose(r->csv);
    r->csv = NULL;
    if ((rc = mt__run_check(path)) != MT_OK && rc != MT_ENOTFOUND) {
        unlink(tmp); /* a link where progress.csv goes: named, left alone */
        return rc;
    }
    if (rename(tmp, path) != 0) {
        e = errno;
        unlink(tmp);
        return mt__error(MT_EIO, "cannot replace %s: %s", path, strerror(e));
    }
    r->csv = mt__run_fopen(path, "a", &rc);
    return r->csv ? MT_OK : rc;
}

int mt__csv_append(mt__rundir *r, json_t *row)
{
    bool grew = false;
    int rc = add_keys(r, row, &grew);
    if (rc)
        return rc;
    if (grew)
        return mt__csv_rewrite(r); /* includes this row */
    char *line = NULL;
    size_t n = 0;
    FILE *m = open_memstream(&line, &n);
    if (m) {
        csv_row(m, r, row);
        if (fclose(m) != 0) {
            free(line);
            line = NULL;
        }
    }
    rc = line ? mt__append_whole(r->csv, r->dir, "progress.csv", line, n)
              : mt__error(MT_ENOMEM, "out of memory writing progress.csv");
    free(line);
    return rc;
}

void mt__csv_close(mt__rundir *r)
{
    for (int i = 0; i < r->ncsv; i++)
        free(r->csv_keys[i]);
    free(r->csv_keys);
    r->csv_keys = NULL;
    r->ncsv = 0;
    r->csv_cap = 0;
    if (r->csv)
        fclose(r->csv);
    r->csv = NULL;
}
