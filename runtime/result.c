/*
 * result.c -- mt_result: what fit returns on every rank, and what mt_result_load rebuilds
 * from a run directory. Both come from the same three JSON documents (run.json, the last
 * line of result.json, params.json), so a result is the same wherever it is built.
 */
#include "runtime.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    mt_checkpoint *ck;
    mt_metrics *metrics;
} best_entry;

struct mt_result {
    char *error;
    bool preempted; /* run.json's status: mt_result_error says so */
    char *path;
    int attempts;
    mt_metrics *metrics;
    mt_checkpoint *latest;  /* borrowed from best[] */
    best_entry *best;
    size_t nbest;
    mt_metrics **rows;      /* result.json, in order */
    size_t nrows;
    char **columns;         /* every key of any row, in order of first appearance */
    size_t ncolumns, columns_cap;
    size_t *unreadable;     /* line numbers of result.json's lines that are no row */
    size_t nunreadable;
};

json_t *mt__params_json(const mt_trainer_config *cfg, int world_size)
{
    const mt_run_config *r = &cfg->run;
    json_t *split = json_null();
    if (cfg->data.datasets_to_split) {
        split = json_array();
        for (size_t i = 0; cfg->data.datasets_to_split[i]; i++)
            json_array_append_new(split, json_string(cfg->data.datasets_to_split[i]));
    }
    json_t *j = json_pack(
        "{s:{s:i, s:i}, s:{s:s?, s:s, s:i, s:{s:i, s:s?, s:s, s:i, s:b, s:b, s:I},"
        " s:{s:i, s:f, s:f}},"
        " s:{s:o, s:I}}",
        "scaling", "num_workers", world_size, "cpus_per_worker", cfg->scaling.cpus_per_worker,
        "run", "name", r->name, "storage_path", r->storage_path, "verbose", r->verbose,
        "checkpoint", "num_to_keep", r->checkpoint.num_to_keep, "score_attribute",
        r->checkpoint.score_attribute, "score_order",
        r->checkpoint.score_order == MT_ORDER_MIN ? "min" : "max", "frequency",
        r->checkpoint.frequency, "at_end", r->checkpoint.at_end, "async_commit",
        r->checkpoint.async_commit, "staging_bytes", (json_int_t)r->checkpoint.staging_bytes,
        "failure", "max_failures",
        r->failure.max_failures, "stall_warn_s", r->failure.stall_warn_s, "stall_timeout_s",
        r->failure.stall_timeout_s, "data", "datasets_to_split", split, "memory_limit",
        (json_int_t)cfg->data.memory_limit);
    if (j && r->resume_from_checkpoint &&
        json_object_set_new(json_object_get(j, "run"), "resume_from_checkpoint",
                            json_string(r->resume_from_checkpoint))) {
        json_decref(j); /* never a params.json with a setting missing */
        j = NULL;
    }
    return j;
}

void mt_result_free(mt_result **rp)
{
    if (!rp || !*rp)
        return;
    mt_result *r = *rp;
    free(r->error);
    free(r->path);
    mt_metrics_free(&r->metrics);
    for (size_t i = 0; i < r->nbest; i++) {
        mt_checkpoint_free(&r->best[i].ck);
        mt_metrics_free(&r->best[i].metrics);
    }
    free(r->best);
    for (size_t i = 0; i < r->nrows; i++)
        mt_metrics_free(&r->rows[i]);
    free(r->rows);
    for (size_t i = 0; i < r->ncolumns; i++)
        free(r->columns[i]);
    free(r->columns);
    free(r->unreadable);
    free(r);
    *rp = NULL;
}

static int add_column(mt_result *r, const char *key)
{
    for (size_t i = 0; i < r->ncolumns; i++)
        if (!strcmp(r->columns[i], key))
            return MT_OK;
    if (MT__GROW(r->columns, r->columns_cap, r->ncolumns + 1))
        return mt__error(MT_ENOMEM, "out of memory building a result");
    if (!(r->columns[r->ncolumns] = mt__strdup(key)))
        return MT_ENOMEM;
    r->ncolumns++;
    return MT_OK;
}

/* The history: one mt_metrics per row of `rows` (a JSON array of result.json rows, and
 * the line numbers of lines that are none, mt__run_read_rows); those lines are counted,
 * and said on stderr when `say`. */
static int build_rows(mt_result *r, const json_t *rows, bool say)
{
    size_t n = json_array_size(rows);
    if (n && (!(r->rows = calloc(n, sizeof *r->rows)) ||
              !(r->unreadable = calloc(n, sizeof *r->unreadable))))
        return mt__error(MT_ENOMEM, "out of memory building a result");
    int rc = MT_OK;
    for (size_t i = 0; i < n && !rc; i++) {
        const json_t *row = json_array_get(rows, i);
        if (json_is_integer(row)) {
            r->unreadable[r->nunreadable++] = (size_t)json_integer_value(row);
            continue;
        }
        mt_metrics *m = mt_metrics_new();
        if (!m)
            return mt__error(MT_ENOMEM, "out of memory building a result");
        r->rows[r->nrows++] = m;
        rc = json_is_object(row) ? mt__metrics_from_json(m, row) : MT_OK;
        for (int k = 0; !rc && k < m->n; k++)
            rc = add_column(r, m->e[k].key);
    }
    if (!rc && say && r->nunreadable) {
        char lines[256] = "";
        size_t used = 0;
        for (size_t i = 0; i < r->nunreadable && used < sizeof lines - 24; i++)
            used += (size_t)snprintf(lines + used, sizeof lines - used, "%s%zu", i ? ", " : "",
                                     r->unreadable[i]);
        if (used >= sizeof lines - 24)
            snprintf(lines + used, sizeof lines - used, ", ...");
        fprintf(stderr, "mpitrain: warning: %s/result.json: %zu line%s could not be read as a "
                "row and %s not in the result (line%s %s): damaged, or cut short by a crash\n",
                r->path ? r->path : "?", r->nunreadable, r->nunreadable == 1 ? "" : "s",
                r->nunreadable == 1 ? "is" : "are", r->nunreadable == 1 ? "" : "s", lines);
    }
    return rc;
}

/* A kept checkpoint of the result: from its description (every rank of a fit), else
 * opened (mt_result_load, where the run's storage is), else its path only. */
static int kept_checkpoint(const char *path, const json_t *described, bool open_files,
                           mt_checkpoint **out)
{
    const char *text = json_string_value(described);
    *out = NULL;
    if (text) {
        int rc = mt__checkpoint_from_description(text, out);
        if (rc != MT_EFORMAT)
            return rc;
    }
    /* its arrays are listed when the folder is readable here */
    int rc = open_files ? mt__checkpoint_open_stored(path, out) : MT_EINVAL;
    if (rc == MT_OK || rc == MT_ENOMEM) /* never a result quietly missing what it could hold */
        return rc;
    return mt__checkpoint_path_only(path, out)
               ? mt__error(MT_ENOMEM, "out of memory building a result")
               : MT_OK;
}

int mt__result_build(const char *dir, const json_t *run_json, const json_t *last_row,
                     const json_t *rows, const json_t *described, const json_t *params,
                     const char *error, bool open_files, mt_result **out)
{
    *out = NULL;
    mt_result *r = calloc(1, sizeof *r);
    if (!r)
        return mt__error(MT_ENOMEM, "out of memory building a result");
    int rc = MT_OK;
    r->path = mt__strdup(dir);
    if (error)
        r->error = mt__strdup(error);
    if (last_row && (r->metrics = mt_metrics_new()))
        rc = mt__metrics_from_json(r->metrics, last_row);
    if ((error && !r->error) || (last_row && !r->metrics)) /* never a result missing them */
        rc = mt__error(MT_ENOMEM, "out of memory building a result");
    if (!rc)
        rc = build_rows(r, rows, open_files);
    mt__rundir run = {0};
    if (!rc && run_json)
        rc = mt__run_from_json(&run, run_json, "run.json");
    r->attempts = run.attempts;
    r->preempted = !rc && run_json && !strcmp(run.status, "preempted");
    mt_checkpoint_config cfg = {0};
    const char *attr = NULL, *order = NULL;
    mt__json_watch();
    if (params)
        json_unpack((json_t *)params, "{s:{s:{s?s, s?s}}}", "run", "checkpoint",
                    "score_attribute", &attr, "score_order", &order);
    if (!rc && mt__json_oom(NULL)) /* not the run's ordering: the wrong best */
        rc = mt__error(MT_ENOMEM, "out of memory building a result");
    cfg.score_attribute = attr;
    cfg.score_order = order && !strcmp(order, "min") ? MT_ORDER_MIN : MT_ORDER_MAX;
    int *rank = calloc((size_t)(run.nkept ? run.nkept : 1), sizeof *rank);
    r->best = calloc((size_t)(run.nkept ? run.nkept : 1), sizeof *r->best);
    if (!rc && (!rank || !r->best))
        rc = mt__error(MT_ENOMEM, "out of memory building a result");
    if (!rc)
        rc = mt__rank_kept(run.kept, run.nkept, &cfg, rank);
    for (int i = 0; !rc && i < run.nkept; i++) {
        const mt__kept *k = &run.kept[rank[i]];
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, k->name);
        best_entry *b = &r->best[r->nbest];
        rc = kept_checkpoint(path, json_object_get(described, k->name), open_files, &b->ck);
        if (rc)
            break;
        b->metrics = mt_metrics_new();
        if (!b->ck || !mt_checkpoint_path(b->ck) || !b->metrics ||
            mt__metrics_copy(b->metrics, k->metrics)) {
            rc = mt__error(MT_ENOMEM, "out of memory building a result");
            mt_checkpoint_free(&b->ck);
            mt_metrics_free(&b->metrics);
            break;
        }
        if (rank[i] == run.latest)
            r->latest = b->ck;
        r->nbest++;
    }
    free(rank);
    mt__run_free(&run);
    if (rc || !r->path) {
        mt_result_free(&r);
        return rc ? rc : MT_ENOMEM;
    }
    *out = r;
    return MT_OK;
}

/* A JSON file in *out: MT_ENOTFOUND when absent, MT_EFORMAT when not JSON (err says
 * where), MT_ENOMEM (recorded) when reading it ran out of memory, MT_EIO (recorded) when
 * a link or anything but a file is in its place. */
static int load_json(const char *path, json_t **out, json_error_t *err)
{
    *out = NULL;
    int rc = mt__run_check(path); /* a link in a run file's place: named, never read */
    if (rc != MT_OK && rc != MT_ENOTFOUND)
        return rc;
    mt__json_watch();
    *out = json_load_file(path, 0, err);
    bool exists = *out || access(path, F_OK) == 0;
    if (exists && mt__json_oom(*out ? NULL : err)) { /* even a parse that succeeded may lack a key */
        json_decref(*out);
        *out = NULL;
        return mt__error(MT_ENOMEM, "out of memory reading %s", path);
    }
    return *out ? MT_OK : exists ? MT_EFORMAT : MT_ENOTFOUND;
}

int mt_result_load(const char *dir, mt_result **out)
{
    if (!dir || !out)
        return mt__error(MT_EINVAL, "mt_result_load: NULL argument");
    *out = NULL;
    if (strlen(dir) > MT__DIR_MAX) /* paths under it would be cut short */
        return mt__error(MT_EINVAL, "mt_result_load: the run directory's path is %zu bytes "
                                    "(at most %d)", strlen(dir), MT__DIR_MAX);
    char path[4096];
    snprintf(path, sizeof path, "%s/run.json", dir);
    json_error_t err;
    json_t *run = NULL, *params = NULL;
    int rc = load_json(path, &run, &err);
    if (rc)
        return rc == MT_ENOMEM || rc == MT_EIO ? rc
               : rc == MT_EFORMAT ? mt__error(MT_EFORMAT, "%s: corrupt (line %d: %s)", path,
                                              err.line, err.text)
                                  : mt__error(MT_ENOTFOUND, "%s is not a run directory (no "
                                                            "run.json)", dir);
    snprintf(path, sizeof path, "%s/params.json", dir);
    rc = load_json(path, &params, &err); /* missing or corrupt: the default ordering */
    if (rc == MT_ENOMEM || rc == MT_EIO) {
        json_decref(run);
        return rc;
    }
    rc = MT_OK;
    json_t *rows = mt__run_read_rows(dir, &rc);
    json_t *row = NULL; /* the last row (a line number stands for a line that is none) */
    for (size_t i = json_array_size(rows); !row && i-- > 0;)
        row = json_is_object(json_array_get(rows, i)) ? json_array_get(rows, i) : NULL;
    if (rc) {
        json_decref(run);
        json_decref(params);
        return rc;
    }
    snprintf(path, sizeof path, "%s/error.txt", dir);
    char error[4096] = "";
    FILE *f = mt__run_fopen(path, "r", &rc);
    if (!f && rc != MT_ENOTFOUND) {
        json_decref(run), json_decref(params), json_decref(rows);
        return rc;
    }
    if (f) {
        size_t n = fread(error, 1, sizeof error - 1, f);
        error[n] = '\0';
        while (n && error[n - 1] == '\n')
            error[--n] = '\0';
        fclose(f);
    }
    const char *status = json_string_value(json_object_get(run, "status"));
    bool failed = status && !strcmp(status, "failed");
    rc = mt__result_build(dir, run, row, rows, NULL, params, failed && *error ? error : NULL,
                          true, out);
    json_decref(run);
    json_decref(params);
    json_decref(rows);
    return rc;
}

const char *mt_result_error(const mt_result *r)
{
    if (r && !r->error && r->preempted)
        return "preempted: a stop request (SIGTERM or SIGUSR1) ended the run after a "
               "checkpoint; run it again with the same --storage-path and --name to resume";
    return r ? r->error : NULL;
}
const char *mt_result_path(const mt_result *r) { return r ? r->path : NULL; }
int mt_result_attempts(const mt_result *r) { return r ? r->attempts : 0; }
const mt_metrics *mt_result_metrics(const mt_result *r) { return r ? r->metrics : NULL; }
const mt_checkpoint *mt_result_checkpoint(const mt_result *r) { return r ? r->latest : NULL; }
size_t mt_result_num_best(const mt_result *r) { return r ? r->nbest : 0; }

const mt_checkpoint *mt_result_best(const mt_result *r, size_t i, const mt_metrics **metrics)
{
    if (!r || i >= r->nbest)
        return NULL;
    if (metrics)
        *metrics = r->best[i].metrics;
    return r->best[i].ck;
}

int mt_result_best_checkpoint(const mt_result *r, const char *metric, mt_order mode,
                              const mt_checkpoint **ck, const mt_metrics **metrics)
{
    if (ck)
        *ck = NULL;
    if (metrics)
        *metrics = NULL;
    if (!r || !metric || !ck)
        return mt__error(MT_EINVAL, "mt_result_best_checkpoint: %s is NULL",
                         !r ? "result" : !metric ? "metric" : "ck");
    if (mode != MT_ORDER_MAX && mode != MT_ORDER_MIN)
        return mt__error(MT_EINVAL, "mt_result_best_checkpoint: mode must be MT_ORDER_MAX or "
                                    "MT_ORDER_MIN (got %d)", (int)mode);
    if (!r->nbest)
        return mt__error(MT_ENOTFOUND, "mt_result_best_checkpoint: %s keeps no checkpoint",
                         r->path);
    long best = -1;
    int64_t best_index = -1;
    double best_v = 0;
    for (size_t i = 0; i < r->nbest; i++) {
        int64_t index = 0;
        const char *path = mt_checkpoint_path(r->best[i].ck);
        const char *name = path ? strrchr(path, '/') : NULL;
        if (name)
            sscanf(name, "/checkpoint_%" SCNd64, &index);
        const mt__metric *e = mt__metrics_find(r->best[i].metrics, metric);
        if (!e || e->type == MT__METRIC_STR)
            continue;
        double v = e->type == MT__METRIC_F64 ? e->f : (double)e->i;
        if (isnan(v))
            continue;
        bool better = best < 0 || (mode == MT_ORDER_MAX ? v > best_v : v < best_v) ||
                      (v == best_v && index > best_index);
        if (better)
            best = (long)i, best_v = v, best_index = index;
    }
    if (best < 0) {
        char keys[1024] = "";
        size_t n = 0;
        for (size_t i = 0; i < r->nbest && n < sizeof keys; i++)
            for (int k = 0; k < r->best[i].metrics->n && n < sizeof keys; k++) {
                const char *key = r->best[i].metrics->e[k].key;
                bool seen = false; /* in an earlier checkpoint's report */
                for (size_t j = 0; j < i && !seen; j++)
                    seen = mt__metrics_find(r->best[j].metrics, key) != NULL;
                if (!seen)
                    n += (size_t)snprintf(keys + n, sizeof keys - n, "%s%s", n ? ", " : "", key);
            }
        return mt__error(MT_ENOTFOUND, "mt_result_best_checkpoint: no kept checkpoint of %s "
                         "was reported with a numeric \"%s\" (its reports have: %s)", r->path,
                         metric, keys);
    }
    *ck = r->best[best].ck;
    if (metrics)
        *metrics = r->best[best].metrics;
    return MT_OK;
}

size_t mt_result_num_rows(const mt_result *r) { return r ? r->nrows : 0; }

size_t mt_result_unreadable_rows(const mt_result *r, size_t *lines, size_t max)
{
    for (size_t i = 0; r && lines && i < r->nunreadable && i < max; i++)
        lines[i] = r->unreadable[i];
    return r ? r->nunreadable : 0;
}
size_t mt_result_num_columns(const mt_result *r) { return r ? r->ncolumns : 0; }

const mt_metrics *mt_result_row(const mt_result *r, size_t i)
{
    if (!r || i >= r->nrows) {
        mt__error(MT_EINVAL, "mt_result_row: %s", !r ? "result is NULL" : "row index out of range");
        return NULL;
    }
    return r->rows[i];
}

const char *mt_result_column(const mt_result *r, size_t i)
{
    if (!r || i >= r->ncolumns) {
        mt__error(MT_EINVAL, "mt_result_column: %s",
                  !r ? "result is NULL" : "column index out of range");
        return NULL;
    }
    return r->columns[i];
}
