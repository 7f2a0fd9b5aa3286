/*
 * retention.c -- which checkpoints to keep, as Ray Train's checkpoint manager decides:
 * num_to_keep 0 keeps all; without a score attribute the newest K stay; with one, the best
 * K by score (max or min) stay, plus the latest. Ties go to the newer checkpoint; NaN and
 * a missing score rank worst in either order. The latest is never dropped on arrival, but
 * can be once a newer one arrives.
 */
#include "runtime.h"

#include <math.h>
#include <stdlib.h>

typedef struct {
    int i;
    bool has;
    double score;
    int64_t index;
} ranked;

static const mt_checkpoint_config *order_cfg;

/* Best first. */
static int better(const void *pa, const void *pb)
{
    const ranked *a = pa, *b = pb;
    if (order_cfg->score_attribute) {
        if (a->has != b->has)
            return a->has ? -1 : 1;
        if (a->has && a->score != b->score) {
            bool a_first = order_cfg->score_order == MT_ORDER_MIN ? a->score < b->score
                                                                   : a->score > b->score;
            return a_first ? -1 : 1;
        }
    }
    return a->index > b->index ? -1 : a->index < b->index; /* newer first */
}

int mt__rank_kept(const mt__kept *kept, int n, const mt_checkpoint_config *cfg, int *order)
{
    ranked *r = calloc((size_t)(n ? n : 1), sizeof *r);
    if (!r) /* never an order that is not the run's */
        return mt__error(MT_ENOMEM, "out of memory ranking checkpoints");
    for (int i = 0; i < n; i++) {
        order[i] = i;
        r[i].i = i;
        r[i].index = kept[i].index;
        r[i].has = cfg->score_attribute &&
                   mt_metrics_get_f64(kept[i].metrics, cfg->score_attribute, &r[i].score) == MT_OK &&
                   !isnan(r[i].score);
    }
    order_cfg = cfg;
    qsort(r, (size_t)n, sizeof *r, better);
    for (int i = 0; i < n; i++)
        order[i] = r[i].i;
    free(r);
    return MT_OK;
}

int mt__retention(const mt__kept *kept, int n, int latest, const mt_checkpoint_config *cfg,
                  bool *drop)
{
    for (int i = 0; i < n; i++)
        drop[i] = false;
    if (cfg->num_to_keep <= 0 || n <= cfg->num_to_keep)
        return MT_OK;
    ranked *r = calloc((size_t)n, sizeof *r);
    if (!r) /* keeping everything is the safe failure; the caller says so */
        return mt__error(MT_ENOMEM, "out of memory applying retention (nothing deleted)");
    for (int i = 0; i < n; i++) {
        r[i].i = i;
        r[i].index = kept[i].index;
        if (cfg->score_attribute &&
            mt_metrics_get_f64(kept[i].metrics, cfg->score_attribute, &r[i].score) == MT_OK &&
            !isnan(r[i].score))
            r[i].has = true;
    }
    order_cfg = cfg;
    qsort(r, (size_t)n, sizeof *r, better);
    for (int k = cfg->num_to_keep; k < n; k++)
        if (r[k].i != latest)
            drop[r[k].i] = true;
    free(r);
    return MT_OK;
}
