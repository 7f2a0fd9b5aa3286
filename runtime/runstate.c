/*
 * runstate.c -- the run's state, run.json: status, attempts, failures, kept checkpoints
 * and their metrics, the latest; read back and checked on resume (a damaged or hostile
 * file is a clear error, never a path outside the run), written by rank 0 through
 * jansson and replaced atomically (mt__write_atomic).
 */
#include "runtime.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void mt__run_free(mt__rundir *r)
{
    if (!r)
        return;
    mt__run_reap_wait(r);
    for (int i = 0; i < r->nkept; i++)
        mt_metrics_free(&r->kept[i].metrics);
    free(r->kept);
    mt__run_close_logs(r);
    free(r->dir);
    memset(r, 0, sizeof *r);
}

json_t *mt__run_to_json(const mt__rundir *r)
{
    json_t *kept = json_array();
    for (int i = 0; kept && i < r->nkept; i++) {
        const mt__kept *k = &r->kept[i];
        /* out of memory: no run.json at all rather than one that forgets a checkpoint */
        if (json_array_append_new(kept, json_pack("{s:s, s:I, s:I, s:o}", "name", k->name,
                                                  "index", (json_int_t)k->index,
                                                  "training_iteration", (json_int_t)k->iteration,
                                                  "metrics", mt__metrics_to_json(k->metrics)))) {
            json_decref(kept);
            return NULL;
        }
    }
    return json_pack("{s:s?, s:s, s:i, s:i, s:I, s:I, s:f, s:o, s:s?}", "run_id",
                     r->run_id[0] ? r->run_id : NULL, "status", r->status,
                     "attempts", r->attempts, "failures", r->failures, "next_checkpoint_index",
                     (json_int_t)r->next_index, "training_iteration", (json_int_t)r->iteration,
                     "time_total_s", r->time_total, "checkpoints", kept, "latest",
                     r->latest >= 0 ? r->kept[r->latest].name : NULL);
}

void mt__run_new_id(mt__rundir *r)
{
    unsigned char b[16] = {0};
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    ssize_t got = fd >= 0 ? read(fd, b, sizeof b) : -1;
    if (fd >= 0)
        close(fd);
    if (got != (ssize_t)sizeof b) { /* no urandom: the clock, the process, the folder */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t x = (uint64_t)ts.tv_sec * 1000000007u ^ (uint64_t)ts.tv_nsec ^
                     (uint64_t)getpid() << 40 ^ (r->dir ? mt__crc32(0, r->dir, strlen(r->dir)) : 0);
        for (int i = 0; i < 16; i++) {
            x = x * 6364136223846793005u + 1442695040888963407u;
            b[i] = (unsigned char)(x >> 56);
        }
    }
    for (int i = 0; i < 16; i++)
        snprintf(r->run_id + 2 * i, 3, "%02x", b[i]);
}


int mt__run_save(const mt__rundir *r)
{
    json_t *j = mt__run_to_json(r);
    char *text = mt__json_dumps(j, JSON_INDENT(2));
    json_decref(j);
    if (!text)
        return mt__error(MT_ENOMEM, "out of memory writing run.json");
    int rc = mt__write_atomic(r->dir, "run.json", text);
    free(text);
    return rc;
}

/* A checkpoint entry's name is a folder of this run directory that may be opened, resumed
 * from and deleted: only the names commits make (checkpoint_ and at least six digits)
 * are accepted, so "../victim" in a damaged or hostile run.json is a corrupt file, not
 * a path outside the run. */
static bool stored_name_ok(const char *name)
{
    size_t n = strlen(name);
    if (n < 17 || n >= sizeof ((mt__kept *)0)->name || strncmp(name, "checkpoint_", 11))
        return false;
    for (const char *p = name + 11; *p; p++)
        if (*p < '0' || *p > '9')
            return false;
    return true;
}

int mt__run_from_json(mt__rundir *r, const json_t *j, const char *where)
{
    const char *status = NULL, *latest = NULL, *id = NULL;
    json_t *kept = NULL, *latest_j = NULL;
    json_int_t next = 0, iter = 0;
    double total = 0;
    json_error_t err;
    mt__json_watch();
    if (json_unpack_ex((json_t *)j, &err, 0, "{s?s, s:s, s:i, s:i, s:I, s:I, s:F, s:o, s?o}",
                       "run_id", &id, "status", &status, "attempts", &r->attempts,
                       "failures", &r->failures,
                       "next_checkpoint_index", &next, "training_iteration", &iter,
                       "time_total_s", &total, "checkpoints", &kept, "latest", &latest_j) != 0 ||
        !json_is_array(kept) || mt__json_oom(NULL))
        return mt__json_oom(&err) ? mt__error(MT_ENOMEM, "out of memory reading %s", where)
                                  : mt__error(MT_EFORMAT, "%s: not a run state file (%s)", where,
                                              err.text);
    latest = json_is_string(latest_j) ? json_string_value(latest_j) : NULL;
    static const char *statuses[] = {"running", "finished", "failed", "preempted", NULL};
    int known = 0;
    while (statuses[known] && strcmp(statuses[known], status))
        known++;
    if (!statuses[known] || r->attempts < 0 || r->failures < 0 || next < 0 || iter < 0)
        return mt__error(MT_EFORMAT, "%s: corrupt run state (status \"%.32s\", attempts %d, "
                         "failures %d, next_checkpoint_index %lld, training_iteration %lld)",
                         where, status, r->attempts, r->failures, (long long)next,
                         (long long)iter);
    if (latest_j && !json_is_null(latest_j) && (!latest || !stored_name_ok(latest)))
        return mt__error(MT_EFORMAT, "%s: corrupt run state: \"latest\" is not a checkpoint "
                                     "folder name", where);
    /* an older run.json has no identity (its checkpoints neither): "" until it gets one */
    size_t idlen = id ? strspn(id, "0123456789abcdef") : 0;
    if (id && (idlen != 32 || id[idlen]))
        return mt__error(MT_EFORMAT, "%s: corrupt run state: run_id \"%.40s\" is not 32 hex "
                         "digits", where, id);
    snprintf(r->run_id, sizeof r->run_id, "%s", id ? id : "");
    snprintf(r->status, sizeof r->status, "%s", status);
    r->next_index = next;
    r->iteration = iter;
    r->time_total = total;
    r->latest = -1;
    size_t n = json_array_size(kept);
    r->kept = calloc(n ? n : 1, sizeof *r->kept);
    r->kept_cap = r->kept ? (n ? n : 1) : 0;
    if (!r->kept)
        return mt__error(MT_ENOMEM, "out of memory reading %s", where);
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(kept, i), *m = NULL;
        const char *name = NULL;
        json_int_t index = 0, it = 0;
        if (json_unpack(e, "{s:s, s:I, s:I, s:o}", "name", &name, "index", &index,
                        "training_iteration", &it, "metrics", &m) != 0 ||
            mt__json_oom(NULL))
            return mt__json_oom(NULL)
                       ? mt__error(MT_ENOMEM, "out of memory reading %s", where)
                       : mt__error(MT_EFORMAT, "%s: checkpoint entry %zu is malformed", where, i);
        bool dup = false;
        for (int d = 0; d < r->nkept && !dup; d++)
            dup = !strcmp(r->kept[d].name, name);
        if (!stored_name_ok(name) || dup || index < 0)
            return mt__error(MT_EFORMAT, "%s: checkpoint entry %zu: %s \"%.64s\" (a checkpoint "
                             "is a folder named checkpoint_NNNNNN inside the run directory, "
                             "listed once); nothing outside the run is read or deleted", where,
                             i, dup ? "listed twice:" : "not a checkpoint folder name", name);
        mt__kept *k = &r->kept[r->nkept++];
        snprintf(k->name, sizeof k->name, "%s", name);
        k->index = index;
        k->iteration = it;
        if (!(k->metrics = mt_metrics_new()) || mt__metrics_from_json(k->metrics, m))
            return mt__error(MT_ENOMEM, "out of memory reading %s", where);
        if (latest && !strcmp(latest, name))
            r->latest = r->nkept - 1;
    }
    return MT_OK;
}

int mt__run_load(mt__rundir *r, const char *dir)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/run.json", dir);
    int rc = mt__run_check(path); /* a link in its place is named, never read */
    if (rc != MT_OK && rc != MT_ENOTFOUND)
        return rc;
    json_error_t err;
    mt__json_watch();
    json_t *j = json_load_file(path, 0, &err);
    if ((j || access(path, F_OK) == 0) && mt__json_oom(j ? NULL : &err)) {
        json_decref(j); /* even a parse that succeeded may lack a key */
        return mt__error(MT_ENOMEM, "out of memory reading %s", path);
    }
    if (!j)
        return access(path, F_OK) == 0
                   ? mt__error(MT_EFORMAT, "%s: corrupt (line %d: %s)", path, err.line, err.text)
                   : mt__error(MT_ENOTFOUND, "%s: no such file (not a run directory?)", path);
    rc = mt__run_from_json(r, j, path);
    json_decref(j);
    if (!rc && !(r->dir = mt__strdup(dir)))
        rc = MT_ENOMEM;
    return rc;
}
