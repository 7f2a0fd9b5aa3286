/*
 * result.c -- mt_result: what fit returns on every rank, and what mt_result_load rebuilds
 * from a run directory. Both come from the same three JSON documents (run.json, the last
 * line of result.json, params.json), so a result is the same wherever it is built.
 */
#include "runtime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    return json_pack(
        "{s:{s:i, s:i}, s:{s:s?, s:s, s:i, s:{s:i, s:s?, s:s, s:i, s:b}, s:{s:i, s:f, s:f}},"
        " s:{s:o, s:I}}",
        "scaling", "num_workers", world_size, "cpus_per_worker", cfg->scaling.cpus_per_worker,
        "run", "name", r->name, "storage_path", r->storage_path, "verbose", r->verbose,
        "checkpoint", "num_to_keep", r->checkpoint.num_to_keep, "score_attribute",
        r->checkpoint.score_attribute, "score_order",
        r->checkpoint.score_order == MT_ORDER_MIN ? "min" : "max", "frequency",
        r->checkpoint.frequency, "at_end", r->checkpoint.at_end, "failure", "max_failures",
        r->failure.max_failures, "stall_warn_s", r->failure.stall_warn_s, "stall_timeout_s",
        r->failure.stall_timeout_s, "data", "datasets_to_split", split, "memory_limit",
        (json_int_t)cfg->data.memory_limit);
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
    free(r);
    *rp = NULL;
}

int mt__result_build(const char *dir, const json_t *run_json, const json_t *last_row,
                     const json_t *params, const char *error, bool open_files, mt_result **out)
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
    mt__rundir run = {0};
    if (!rc && run_json)
        rc = mt__run_from_json(&run, run_json, "run.json");
    r->attempts = run.attempts;
    r->preempted = !rc && run_json && !strcmp(run.status, "preempted");
    mt_checkpoint_config cfg = {0};
    const char *attr = NULL, *order = NULL;
    if (params)
        json_unpack((json_t *)params, "{s:{s:{s?s, s?s}}}", "run", "checkpoint",
                    "score_attribute", &attr, "score_order", &order);
    cfg.score_attribute = attr;
    cfg.score_order = order && !strcmp(order, "min") ? MT_ORDER_MIN : MT_ORDER_MAX;
    int *rank = calloc((size_t)(run.nkept ? run.nkept : 1), sizeof *rank);
    r->best = calloc((size_t)(run.nkept ? run.nkept : 1), sizeof *r->best);
    if (!rc && (!rank || !r->best))
        rc = mt__error(MT_ENOMEM, "out of memory building a result");
    if (!rc)
        mt__rank_kept(run.kept, run.nkept, &cfg, rank);
    for (int i = 0; !rc && i < run.nkept; i++) {
        const mt__kept *k = &run.kept[rank[i]];
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, k->name);
        best_entry *b = &r->best[r->nbest];
        /* its arrays are listed when the folder is readable here (rank 0's storage) */
        if (!open_files || mt__checkpoint_open_stored(path, &b->ck) != MT_OK) {
            b->ck = mt_checkpoint_new();
            if (b->ck)
                b->ck->path = mt__strdup(path);
        }
        b->metrics = mt_metrics_new();
        if (!b->ck || !b->ck->path || !b->metrics || mt__metrics_copy(b->metrics, k->metrics)) {
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

static json_t *last_line(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    char *line = NULL, *last = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, f)) > 0) {
        if (line[n - 1] != '\n')
            break; /* a last line a crash cut short: the one before is the last row */
        free(last);
        last = strdup(line);
    }
    free(line);
    fclose(f);
    json_t *j = last ? json_loads(last, 0, NULL) : NULL;
    free(last);
    if (j)
        json_object_del(j, "per_rank");
    return j;
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
    json_t *run = json_load_file(path, 0, &err);
    if (!run) {
        FILE *f = fopen(path, "r");
        if (f)
            fclose(f);
        return f ? mt__error(MT_EFORMAT, "%s: corrupt (line %d: %s)", path, err.line, err.text)
                 : mt__error(MT_ENOTFOUND, "%s is not a run directory (no run.json)", dir);
    }
    snprintf(path, sizeof path, "%s/params.json", dir);
    json_t *params = json_load_file(path, 0, &err);
    snprintf(path, sizeof path, "%s/result.json", dir);
    json_t *row = last_line(path);
    snprintf(path, sizeof path, "%s/error.txt", dir);
    char error[4096] = "";
    FILE *f = fopen(path, "r");
    if (f) {
        size_t n = fread(error, 1, sizeof error - 1, f);
        error[n] = '\0';
        while (n && error[n - 1] == '\n')
            error[--n] = '\0';
        fclose(f);
    }
    const char *status = json_string_value(json_object_get(run, "status"));
    bool failed = status && !strcmp(status, "failed");
    int rc = mt__result_build(dir, run, row, params, failed && *error ? error : NULL, true, out);
    json_decref(run);
    json_decref(params);
    json_decref(row);
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
