/*
 * report.c -- mt_report: one opening agreement (which also carries the per-rank
 * statistics when their layout is cached and small, spread.c), the statistics' reduction
 * to rank 0 otherwise, and then:
 *  - without a checkpoint, nothing more on any rank: rank 0 queues its row for its writer
 *    thread (rowlog.c), which appends it to result.json and progress.csv; a row that
 *    cannot be written is every rank's error at a later report (at the next checkpointing
 *    one or the attempt's end at the latest), so no closing step is needed;
 *  - with one, every queued row written first, the commit, rank 0's row written here,
 *    and one closing agreement so that a write failure on rank 0 is every rank's error at
 *    this report.
 * No rank's metrics are gathered: rank 0's make the row, the others' only reach it
 * through the statistics.
 *
 * The opening agreement also carries stop requests (SIGTERM/SIGUSR1 on any rank): from
 * then on mt_should_checkpoint is true on every rank, and the report that commits the
 * next checkpoint returns MT_ESTOP.
 */
#include "runtime.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

bool mt_should_checkpoint(const mt_context *c)
{
    if (!mt__ctx_ok(c, "mt_should_checkpoint"))
        return false;
    if (c->stop)
        return true;
    const mt_checkpoint_config *k = &c->cfg->run.checkpoint;
    int64_t next = c->iteration + 1;
    if (k->frequency > 0 && next % k->frequency == 0)
        return true;
    return k->at_end && c->total_iterations > 0 && next == c->total_iterations;
}

void mt_set_total_iterations(mt_context *c, int64_t n)
{
    if (mt__ctx_ok(c, "mt_set_total_iterations"))
        c->total_iterations = n;
}

/* Rank 0: the row for result.json (its own metrics, and the spread over ranks). */
static json_t *build_row(mt_context *c, const mt_metrics *m, const mt__spread_step *st,
                         mt_metrics *row)
{
    json_t *j = !mt__metrics_copy(row, m) ? mt__metrics_to_json(row) : NULL;
    if (j && mt__spread_json(c, st, j)) {
        json_decref(j);
        j = NULL;
    }
    return j;
}

/* The automatic values of the report at `now` (mt__now). The timestamp is `now` plus the
 * wall clock's lead on it, read again once a second: a step of the wall clock shows within
 * a second, and a report reads one clock, not two (a read is about 21 ns here, of a
 * report of 0.5 us). */
static mt__row_auto auto_values(mt_context *c, int64_t iteration, double now)
{
    if (c->wall_read == 0 || now - c->wall_read >= 1.0 || now < c->wall_read) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        c->wall_minus_mono = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec - now;
        c->wall_read = now;
    }
    /* Ray's name: 1 on the first report of each attempt, so a row where it is 1 and
     * training_iteration is not is where a run resumed (mpitrain-show marks those) */
    return (mt__row_auto){.iteration = iteration, .since_restore = c->reports + 1,
                          .stamp = now + c->wall_minus_mono,
                          .this_iter = now - c->last_report,
                          .total = c->time_before + now - c->start};
}

/* Every rank: the report counted. */
static void counted(mt_context *c, int64_t iteration, double now)
{
    c->iteration = iteration;
    c->reports++;
    c->last_report = now;
    if (c->world_rank == 0)
        c->run->iteration = iteration;
}

/* Rank 0, at the run's first report: run.checkpoint.score_attribute must be one of the
 * keys reported (Ray's rule), or no checkpoint could ever be ranked by it. An automatic
 * key (training_iteration, time_total_s, ...) counts as reported. */
static int check_score_attribute(mt_context *c, const mt_metrics *m)
{
    const char *attr = c->cfg->run.checkpoint.score_attribute;
    if (!attr || c->world_rank != 0 || c->iteration != 0 || mt__metrics_find(m, attr) ||
        (mt__metrics_reserved(attr) && strcmp(attr, "per_rank")))
        return MT_OK;
    char keys[1024] = "";
    size_t n = 0;
    for (int i = 0; m && i < m->n && n < sizeof keys; i++)
        n += (size_t)snprintf(keys + n, sizeof keys - n, "%s%s", i ? ", " : "", m->e[i].key);
    c->no_retry = true;
    return mt__error(MT_EINVAL, "run.checkpoint.score_attribute \"%s\" is not a key of the "
                     "first report (reported: %s%s)", attr, n ? keys : "no keys",
                     n ? ", and the automatic training_iteration, timestamp, time_this_iter_s, "
                         "time_total_s" : "");
}

int mt_report(mt_context *c, const mt_metrics *m, const mt_checkpoint *ck)
{
    MT__TRACE("report", "report");
    if (!mt__ctx_ok(c, "mt_report"))
        return MT_EINVAL;
    /* an asynchronous commit in flight: a report with a checkpoint waits for it, and a
     * failed one is this report's error on every rank (checkpoint_async.c); so is a row
     * rank 0's writer could not write, and a checkpointing report waits for every row
     * queued before it (rowlog.c) */
    int status = mt__checkpoint_settle(c, ck != NULL);
    if (!status) /* a report that fails commits nothing: the wait can be the next one's */
        status = mt__rows_settle(c, ck != NULL);
    mt__row_slot slot = {0};
    if (!status && !ck && c->world_rank == 0)
        status = mt__rows_reserve(c, m, &slot);
    /* a reserved key would replace an automatic one in the row: every rank's error */
    if (!status && (status = mt__metrics_check_user(m)))
        c->no_retry = true;
    if (!status)
        status = check_score_attribute(c, m);
    /* a checkpoint read back (restored, opened by path, a result's) holds no arrays of its
     * own: committing it would publish an empty checkpoint as the latest */
    if (!status && ck && mt__live(ck, MT__LIVE_CHECKPOINT) && mt_checkpoint_path(ck)) {
        c->no_retry = true;
        status = mt__error(MT_EINVAL, "mt_report: the checkpoint is a stored one (%s), not one "
                           "being built: report a new checkpoint (mt_checkpoint_new) with "
                           "its arrays copied in", mt_checkpoint_path(ck));
    }
    if (!status && ck && !mt__live(ck, MT__LIVE_CHECKPOINT)) /* one rank's: agreed below */
        status = mt__error(MT_EINVAL, "mt_report: the checkpoint was freed already");
    mt__spread_step st;
    mt__spread_open(c, m, &st);
    int64_t shared[2] = {mt__stop_signalled(), st.layout_len}; /* stop request, rank 0's keys */
    mt__call call;
    mt__call_init(&call, MT__CALL_REPORT, 0, ck != NULL, 0);
    /* rank 0's clocks for its row, read before the agreement at every report (so each
     * time_this_iter_s spans one report's start to the next's): with ranks that start the
     * report together, rank 0 (more to do before it) still waits there for the others.
     * The other ranks keep no row: their clock is read after it. */
    bool row_now = c->world_rank == 0;
    double now = row_now ? mt__now() : 0;
    mt__row_auto a = row_now ? auto_values(c, c->iteration + 1, now) : (mt__row_auto){0};
    int rc = mt__agree_carry(c->comm, &call, status, NULL, shared, 2,
                             st.fold ? &st.payload : NULL);
    int64_t stop = shared[0];
    if (rc) {
        mt__rows_release(&slot);
        return rc;
    }
    if (stop && !c->stop && c->world_rank == 0 && c->verbose >= 1)
        printf("mpitrain: stop requested (SIGTERM/SIGUSR1): the next checkpoint ends the run\n");
    c->stop = c->stop || stop;
    if ((rc = mt__spread_finish(c, m, &st, shared[1]))) {
        mt__rows_release(&slot);
        return rc;
    }
    if (!row_now)
        now = mt__now();
    int64_t iteration = c->iteration + 1;
    if (!ck) { /* the opening agreement was the report: rank 0's writer makes the row */
        if (c->world_rank == 0)
            mt__rows_queue(c, &slot, m, &a, st.ready ? c->spread.quads : NULL,
                           st.ready ? c->spread.nkeys : 0);
        counted(c, iteration, now);
        return MT_OK;
    }
    mt_metrics *row = c->world_rank == 0 ? mt_metrics_new() : NULL;
    json_t *j = row ? build_row(c, m, &st, row) : NULL;
    if (c->world_rank == 0 && (!row || !j))
        status = mt__error(MT_ENOMEM, "out of memory building a report");
    char ckname[64] = "";
    if (row && j && !status) { /* the kept copy carries the automatic keys too */
        json_t *scratch = json_object();
        status = scratch ? mt__row_add_auto(row, scratch, &a, NULL)
                         : mt__error(MT_ENOMEM, "out of memory building a report");
        json_decref(scratch);
    }
    bool agreed = false;
    int e = mt__checkpoint_commit(c, ck, c->run, row, iteration, ckname, sizeof ckname, &agreed);
    if (agreed && e) { /* every rank knows already */
        mt_metrics_free(&row);
        json_decref(j);
        return e;
    }
    if (!status)
        status = e;
    if (c->world_rank == 0 && !status) {
        status = mt__row_add_auto(row, j, &a, ckname);
        if (!status)
            status = mt__run_append(c->run, j);
        if (c->verbose >= 1)
            mt__row_print(row, iteration, ckname);
    }
    json_decref(j);
    mt__call done;
    mt__call_init(&done, MT__CALL_REPORT_DONE, 0, 1, 0);
    rc = mt__agree(c->comm, &done, status, NULL);
    if (!rc) {
        counted(c, iteration, now);
        if (c->world_rank == 0) {
            mt_metrics_free(&c->last_metrics);
            c->last_metrics = row;
            row = NULL;
        }
        if (c->stop) {
            c->stopped_after_ckpt = true;
            rc = mt__error(MT_ESTOP, "stopped after %s for a stop request (preemption); rerun "
                                     "to resume", ckname[0] ? ckname : "the checkpoint");
        }
    }
    mt_metrics_free(&row);
    return rc;
}
