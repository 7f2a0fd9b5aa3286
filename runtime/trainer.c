/*
 * trainer.c -- mt_trainer_fit: check the config on every rank, build each worker's
 * context, run the training function, and give every rank the same result.
 *
 * Every step that can fail on one rank ends in an agreement, so all ranks leave fit
 * together: a bad config or a missing CPU on rank 2 is an error on every rank, and a
 * training function that returns early on one rank is answered by the exit agreement
 * while the others are still in their collectives.
 */
#include "runtime.h"
#include "../collectives/watchdog.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct mt_trainer {
    mt_train_fn fn;
    void *arg;
    mt_trainer_config cfg; /* strings below are owned copies */
    char *name, *storage_path, *score_attribute;
    char **split;
    mt__dataset_spec *specs;
    int nspecs;
};

struct mt_result {
    char *error;
    char *path;
    int attempts;
};

static char **copy_names(const char *const *names)
{
    size_t n = 0;
    while (names[n])
        n++;
    char **out = calloc(n + 1, sizeof *out);
    if (!out)
        return NULL;
    for (size_t i = 0; i < n; i++)
        if (!(out[i] = mt__strdup(names[i]))) {
            for (size_t j = 0; j < i; j++)
                free(out[j]);
            free(out);
            return NULL;
        }
    return out;
}

int mt_trainer_create(mt_trainer **out, mt_train_fn fn, void *arg, const mt_trainer_config *cfg)
{
    int rc = MT_OK;
    if (!out)
        return mt__error(MT_EINVAL, "mt_trainer_create: out is NULL");
    *out = NULL;
    if (!fn)
        return mt__error(MT_EINVAL, "mt_trainer_create: training function is NULL");
    mt_trainer *t = calloc(1, sizeof *t);
    MT__CHECK(t, MT_ENOMEM, fail, "out of memory allocating a trainer");
    t->fn = fn;
    t->arg = arg;
    if (cfg)
        t->cfg = *cfg;
    mt_config_defaults(&t->cfg);
    const mt_trainer_config *c = &t->cfg;
    MT__CHECK(!c->run.name || (t->name = mt__strdup(c->run.name)), MT_ENOMEM, fail, "%s",
              mt_last_error());
    MT__CHECK((t->storage_path = mt__strdup(c->run.storage_path)), MT_ENOMEM, fail, "%s",
              mt_last_error());
    MT__CHECK(!c->run.checkpoint.score_attribute ||
                  (t->score_attribute = mt__strdup(c->run.checkpoint.score_attribute)),
              MT_ENOMEM, fail, "%s", mt_last_error());
    MT__CHECK(!c->data.datasets_to_split || (t->split = copy_names(c->data.datasets_to_split)),
              MT_ENOMEM, fail, "out of memory copying data.datasets_to_split");
    t->cfg.run.name = t->name;
    t->cfg.run.storage_path = t->storage_path;
    t->cfg.run.checkpoint.score_attribute = t->score_attribute;
    t->cfg.data.datasets_to_split = (const char *const *)t->split;
    *out = t;
    return MT_OK;
fail:
    mt_trainer_destroy(&t);
    return rc;
}

void mt_trainer_destroy(mt_trainer **tp)
{
    if (!tp || !*tp)
        return;
    mt_trainer *t = *tp;
    free(t->name);
    free(t->storage_path);
    free(t->score_attribute);
    if (t->split)
        for (size_t i = 0; t->split[i]; i++)
            free(t->split[i]);
    free(t->split);
    for (int i = 0; i < t->nspecs; i++) {
        free(t->specs[i].name);
        free(t->specs[i].file);
        free(t->specs[i].group);
    }
    free(t->specs);
    free(t);
    *tp = NULL;
}

int mt_trainer_add_dataset(mt_trainer *t, const char *name, const char *h5_file,
                           const char *h5_group)
{
    if (!t || !name || !*name || !h5_file || !*h5_file || !h5_group || !*h5_group)
        return mt__error(MT_EINVAL, "mt_trainer_add_dataset: trainer, name, file and group "
                                    "must be given");
    for (int i = 0; i < t->nspecs; i++)
        if (!strcmp(t->specs[i].name, name))
            return mt__error(MT_EINVAL, "mt_trainer_add_dataset: dataset '%s' is already "
                                        "registered (%s:%s)", name, t->specs[i].file,
                             t->specs[i].group);
    mt__dataset_spec *grown = realloc(t->specs, (size_t)(t->nspecs + 1) * sizeof *grown);
    if (!grown)
        return mt__error(MT_ENOMEM, "out of memory registering dataset %s", name);
    t->specs = grown;
    mt__dataset_spec *d = &t->specs[t->nspecs];
    d->name = mt__strdup(name);
    d->file = mt__strdup(h5_file);
    d->group = mt__strdup(h5_group);
    if (!d->name || !d->file || !d->group) {
        free(d->name);
        free(d->file);
        free(d->group);
        return mt__error(MT_ENOMEM, "out of memory registering dataset %s", name);
    }
    t->nspecs++;
    return MT_OK;
}

/* Local checks before training: config, worker count, CPUs. */
static int check_setup(const mt_trainer *t, const mt_context *ctx)
{
    int rc = mt_config_validate(&t->cfg);
    if (rc)
        return rc;
    int want = t->cfg.scaling.num_workers;
    if (want != 0 && want != ctx->world_size)
        return mt__error(MT_EINVAL,
                         "scaling.num_workers is %d but this job has %d ranks: start it with "
                         "mpirun -np %d (or leave num_workers at 0 to use the job's ranks)",
                         want, ctx->world_size, want);
    int need = t->cfg.scaling.cpus_per_worker;
    if (need > 0) {
        char list[256];
        int have = mt__affinity_cpus(list, sizeof list);
        if (have < need)
            return mt__error(MT_EINVAL,
                             "scaling.cpus_per_worker is %d but rank %d may use %d CPU%s "
                             "(affinity mask: %s); launch with Open MPI as "
                             "`mpirun --map-by slot:PE=%d --bind-to core ...` (Slurm: "
                             "srun --cpus-per-task=%d)",
                             need, ctx->world_rank, have, have == 1 ? "" : "s", list, need, need);
    }
    return MT_OK;
}

/* Rank 0's name (given or timestamped) for every rank. */
static int agree_name(const mt_trainer *t, mt_context *ctx)
{
    char name[MT__NAME_MAX + 1] = {0};
    if (ctx->world_rank == 0) {
        if (t->name)
            snprintf(name, sizeof name, "%s", t->name);
        else {
            time_t now = time(NULL);
            struct tm tm;
            localtime_r(&now, &tm);
            strftime(name, sizeof name, "mt_%Y-%m-%d_%H-%M-%S", &tm);
        }
    }
    int rc = mt__broadcast(ctx->comm, name, sizeof name, MT_U8, 0);
    if (rc)
        return rc;
    name[MT__NAME_MAX] = '\0';
    size_t len = strlen(t->storage_path) + strlen(name) + 2;
    ctx->name = mt__strdup(name);
    ctx->run_dir = malloc(len);
    if (!ctx->name || !ctx->run_dir)
        return mt__error(MT_ENOMEM, "out of memory naming the run");
    snprintf(ctx->run_dir, len, "%s/%s", t->storage_path, name);
    return MT_OK;
}

static mt_result *result_new(const mt_context *ctx, int rc, const mt__winner *who, int attempts)
{
    mt_result *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->attempts = attempts;
    if (ctx && ctx->run_dir)
        r->path = mt__strdup(ctx->run_dir);
    if (rc) {
        /* the same text on every rank: the winner's words */
        char buf[MT__MSG_LEN + 64];
        if (who->rank >= 0)
            snprintf(buf, sizeof buf, "rank %d failed: %s", who->rank, who->msg);
        else
            snprintf(buf, sizeof buf, "%s", who->msg[0] ? who->msg : mt_last_error());
        r->error = mt__strdup(buf);
    }
    return r;
}

int mt_trainer_fit(mt_trainer *t, mt_result **out)
{
    int rc, init = 0;
    mt__winner who = {.rank = -1};
    mt_context *ctx = NULL;
    if (out)
        *out = NULL;
    if (!t)
        return mt__error(MT_EINVAL, "mt_trainer_fit: trainer is NULL");
    MPI_Initialized(&init);
    if (!init)
        return mt__error(MT_EINVAL, "mt_trainer_fit: MPI is not initialised; call mt_init first");
    rc = mt__context_create(&ctx, MPI_COMM_WORLD);
    if (rc)
        return rc; /* an MPI failure in MPI_Comm_dup: nothing to agree on */
    mt__call begin;
    mt__call_init(&begin, MT__CALL_FIT_BEGIN, 0, 0, 0);
    ctx->verbose = t->cfg.run.verbose;
    ctx->data = t->cfg.data;
    ctx->specs = t->specs;
    ctx->nspecs = t->nspecs;
    rc = mt__agree(ctx->comm, &begin, check_setup(t, ctx), &who);
    if (!rc)
        rc = agree_name(t, ctx);
    int attempts = 0;
    mt__watchdog *dog = NULL;
    if (!rc) {
        const mt_failure_config *f = &t->cfg.run.failure;
        rc = mt__watchdog_start(&dog, ctx->comm, f->stall_warn_s, f->stall_timeout_s,
                                t->cfg.run.verbose);
    }
    if (!rc) {
        attempts = 1;
        mt__context_set_current(ctx);
        int fn_rc = t->fn(ctx, t->arg);
        mt__context_set_current(NULL);
        if (fn_rc > 0)
            fn_rc = mt__error(MT_EINVAL, "the training function returned %d (expected 0 or a "
                                         "negative MT_E* code)", fn_rc);
        rc = mt__agree_exit(ctx->comm, MT__CALL_FIT_END, fn_rc, &who);
    }
    mt__watchdog_stop(&dog);
    if (rc && who.rank >= 0)
        rc = who.code; /* the same code on every rank: the winning rank's */
    if (out) {
        *out = result_new(ctx, rc, &who, attempts);
        if (!*out && !rc)
            rc = mt__error(MT_ENOMEM, "out of memory building the result");
    }
    mt__context_destroy(&ctx);
    return rc;
}

const char *mt_result_error(const mt_result *r) { return r ? r->error : NULL; }
const char *mt_result_path(const mt_result *r) { return r ? r->path : NULL; }
int mt_result_attempts(const mt_result *r) { return r ? r->attempts : 0; }

void mt_result_free(mt_result **rp)
{
    if (!rp || !*rp)
        return;
    free((*rp)->error);
    free((*rp)->path);
    free(*rp);
    *rp = NULL;
}
