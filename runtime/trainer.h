/*
 * trainer.h -- what runtime/trainer.c (create, fit and its attempts) and
 * runtime/trainer_run.c (the run directory of a fit: made, refused, locked, resumed) share:
 * the trainer's layout and the run directory's steps. Private to runtime/.
 */
#ifndef MT_RUNTIME_TRAINER_H
#define MT_RUNTIME_TRAINER_H

#include "runtime.h"

struct mt_trainer {
    mt_train_fn fn;
    void *arg;
    void (*free_arg)(void *); /* an arg the trainer owns (mt_trainer_create_trainable) */
    mt_trainer_config cfg; /* strings below are owned copies */
    char *name, *storage_path, *score_attribute, *resume_from;
    char **split;
    mt__dataset_spec *specs;
    int nspecs;
    size_t specs_cap;
    bool fitting;          /* inside mt_trainer_fit: the trainer must not change or go */
};

/* Rank 0: the run directory's state for an attempt (counted, its start, logs reopened). */
int mt__trainer_begin_attempt(const mt_trainer *t, mt__rundir *run, json_t **info);
/* Collective: the run directory made or taken over, checked, its state shared. */
int mt__trainer_prepare_run(const mt_trainer *t, mt_context *ctx, mt__rundir *run, json_t **info);
/* Collective: the run's lock taken on rank 0, agreed. */
int mt__trainer_lock_run(mt_context *ctx, int *lock_fd);
/* Collective: every rank's local status, agreed. */
int mt__trainer_agreed(mt_context *ctx, int status);
/* Collective: rank 0's JSON to every rank. */
int mt__trainer_share_json(mt_context *ctx, json_t **j);
/* Collective: the attempt's starting point (checkpoint, iteration) from rank 0's info. */
int mt__trainer_apply_resume(mt_context *ctx, json_t *info);

#endif
