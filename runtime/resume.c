/*
 * resume.c -- where an attempt starts (rank 0): the run's own latest good checkpoint, or,
 * before it has one, the checkpoint run.resume_from_checkpoint names (a checkpoint folder,
 * or a run directory's latest); the reports after it move aside so every iteration is
 * in result.json once.
 */
#include "runtime.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

int mt__resume_open(const char *from, char *dir, size_t len, mt_checkpoint **stored)
{
    int rc = mt__checkpoint_resolve("run.resume_from_checkpoint", from, dir, len);
    char path[4096];
    snprintf(path, sizeof path, "%s/run.json", dir);
    if (!rc && access(path, F_OK) == 0) {
        mt__rundir other = {0};
        rc = mt__run_load(&other, dir);
        if (!rc && other.latest < 0)
            rc = mt__error(MT_EFORMAT, "run.resume_from_checkpoint: %s is a run directory "
                           "with no checkpoint yet (give a checkpoint_NNNNNN folder)", from);
        else if (!rc && strlen(dir) + strlen(other.kept[other.latest].name) + 2 > len)
            rc = mt__error(MT_EINVAL, "run.resume_from_checkpoint: %s: the path is too long",
                           from);
        else if (!rc)
            snprintf(dir + strlen(dir), len - strlen(dir), "/%s",
                     other.kept[other.latest].name);
        else if (rc != MT_ENOMEM)
            rc = mt__error(MT_EFORMAT, "run.resume_from_checkpoint: %s is a run directory "
                           "whose run.json cannot be read: %s", from, mt_last_error());
        mt__run_free(&other);
    }
    if (!rc) {
        rc = mt__checkpoint_open_stored(dir, stored);
        if (rc && rc != MT_ENOMEM)
            rc = mt__error(MT_EFORMAT, "run.resume_from_checkpoint: %s is not a checkpoint: "
                           "%s", from, mt_last_error());
    }
    return rc;
}

/* Rank 0: the latest good checkpoint (or none) becomes where this attempt starts; reports
 * after it move aside; *out is the JSON the other ranks need. An error instead of a start
 * without the checkpoint it names, with the reports it redoes kept, or when result.json
 * cannot be brought in line (appending to it would duplicate rows). */
int mt__resume_point(mt__rundir *run, const mt_run_config *cfg, json_t **out)
{
    *out = NULL;
    int64_t last_row = -1;
    int rc = mt__run_repair_logs(run, &last_row);
    if (rc)
        return rc;
    int k = -1;
    rc = mt__checkpoint_pick_valid(run, last_row < 0 ? INT64_MAX : last_row, &k);
    if (rc)
        return rc;
    int64_t iteration = k >= 0 ? run->kept[k].iteration : 0;
    json_t *ck = json_null();
    /* no checkpoint of its own yet: the one run.resume_from_checkpoint names */
    const char *from = k < 0 ? cfg->resume_from_checkpoint : NULL;
    if (k >= 0 || from) {
        char dir[4096];
        mt_checkpoint *stored = NULL;
        char *text = NULL;
        if (from)
            rc = mt__resume_open(from, dir, sizeof dir, &stored);
        else {
            snprintf(dir, sizeof dir, "%s/%s", run->dir, run->kept[k].name);
            rc = mt__checkpoint_open_stored(dir, &stored);
        }
        if (!rc && !(text = mt__checkpoint_describe(stored)))
            rc = mt__error(MT_ENOMEM, "out of memory describing %s", dir);
        ck = text ? json_string(text) : NULL;
        free(text);
        mt_checkpoint_free(&stored);
        if (!rc && !ck)
            rc = mt__error(MT_ENOMEM, "out of memory describing %s", dir);
    }
    if (!rc)
        rc = mt__run_supersede(run, iteration);
    if (!rc)
        run->iteration = iteration;
    if (!rc && !(*out = json_pack("{s:i, s:I, s:f, s:O, s:b}", "attempt", run->attempts - 1,
                                  "iteration", (json_int_t)iteration, "time_total",
                                  run->time_total, "checkpoint", ck, "foreign", from != NULL)))
        rc = mt__error(MT_ENOMEM, "out of memory resuming %s", run->dir);
    json_decref(ck);
    return rc;
}
