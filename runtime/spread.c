/*
 * spread.c -- the per-rank statistics of a report (result.json's "per_rank": min, mean,
 * max and the ranks' count of each numeric metric rank 0 reported), made by a reduction
 * over fixed-layout arrays instead of a gather of every rank's metrics: O(log N) steps
 * and O(metrics) bytes at rank 0, whatever the number of ranks.
 *
 * The layout is rank 0's numeric keys, in its order. Every rank keeps the layout agreed
 * at the report where it last changed (the cache, as Horovod's response cache keeps a
 * negotiated response), and where its own metrics have each key (the map), with a copy
 * of the keys that map was made for (names, order and whether each is a number). At each
 * report every rank compares its own keys with that copy (a length and a memcmp a key: a
 * hash of them, one mixing step a byte, cost 0.31 us of a 1.1 us report), or only the
 * metrics' keys_id when they are the metrics it last found them in, the keys unchanged:
 *  - a rank whose keys differ from the copy makes its map again (local: the layout is
 *    unchanged, only where this rank finds each key moved);
 *  - when rank 0's keys differ, the layout itself changed: rank 0 says so in the
 *    report's opening agreement (its length), and every rank, having learnt it there,
 *    receives the new layout from rank 0 (one broadcast) before any statistic moves.
 * So a change of keys on any rank is seen at the report it happens in, and a report
 * whose keys did not change costs no step of its own: when the layout has at most 8 keys
 * the statistics travel in the opening agreement's message itself (its payload, combined
 * by the agreement's operation only between ranks in the same call), otherwise in one
 * MPI_Reduce to rank 0 after it. Up to 6 keys the frame carries the whole statistics
 * (quads, counts included). 7 and 8 keys travel as {min, max, sum}, the ranks' count then
 * being the world's size; a key some rank lacks (or has as a nonfinite value) makes its
 * sum NaN there, and every rank, holding the same combined frame, then makes the
 * MPI_Reduce of the whole statistics too: such a report with gaps costs the step that
 * every report of 7 or 8 keys cost before.
 *
 * The numbers are the ones the gather gave: a rank counts for a key when it has that key
 * as a number and the value is finite (NaN and the infinities are no JSON number); a key
 * no rank has a finite value for has no entry. Only rank 0's metrics make the row itself
 * (strings included), as before: other ranks' strings never reached the row.
 */
#include "runtime.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void mt__spread_free(mt__spread *s)
{
    free(s->block);
    free(s->seen);
    memset(s, 0, sizeof *s);
}

/* Whether m's keys are the ones s->seen holds: per metric, its kind (1 a number, 2 a
 * string), its name's length (2 bytes, as a key is at most 255) and its name, then a 0
 * after the last. Never true without a copy. */
static bool same_keys(mt__spread *s, const mt_metrics *m)
{
    const unsigned char *p = (const unsigned char *)s->seen;
    if (!p)
        return false;
    if (m && m->keys_id == s->seen_id) /* the same metrics, its keys unchanged since */
        return true;
    for (int i = 0; m && i < m->n; i++) {
        const mt__metric *e = &m->e[i];
        if (p[0] != (e->type == MT__METRIC_STR ? 2 : 1)) /* the copy's end (0) included */
            return false;
        size_t l = (size_t)p[1] | (size_t)p[2] << 8;
        if (l != e->klen || memcmp(p + 3, e->key, l))
            return false;
        p += 3 + l;
    }
    if (*p)
        return false;
    s->seen_id = m ? m->keys_id : 0;
    return true;
}

/* s->seen made for m; on no memory, none (every report then remakes the map, or on rank
 * 0 sends the layout again: slower, never wrong). */
static void keep_keys(mt__spread *s, const mt_metrics *m)
{
    size_t n = 1;
    for (int i = 0; m && i < m->n; i++)
        n += 3 + m->e[i].klen;
    free(s->seen);
    s->seen_id = m ? m->keys_id : 0;
    unsigned char *p = (unsigned char *)(s->seen = malloc(n));
    for (int i = 0; p && m && i < m->n; i++) {
        const mt__metric *e = &m->e[i];
        p[0] = e->type == MT__METRIC_STR ? 2 : 1;
        p[1] = (unsigned char)(e->klen & 0xff);
        p[2] = (unsigned char)(e->klen >> 8);
        memcpy(p + 3, e->key, e->klen);
        p += 3 + e->klen;
    }
    if (p)
        *p = 0;
}

static bool numeric(const mt__metric *e)
{
    return e->type == MT__METRIC_F64 || e->type == MT__METRIC_I64;
}

/* Where this rank's metrics have each key of the layout (-1: not as a number). */
static void make_map(mt__spread *s, const mt_metrics *m)
{
    for (int k = 0; k < s->nkeys; k++) {
        s->map[k] = -1;
        for (int i = 0; m && i < m->n; i++)
            if (numeric(&m->e[i]) && !strcmp(m->e[i].key, s->key[k])) {
                s->map[k] = i;
                break;
            }
    }
    keep_keys(s, m);
}

/* This rank's statistics: quads for the reduce, or (triples) the frame's payload; with m
 * NULL, every key absent. */
static void fill(mt__spread *s, const mt_metrics *m, double *triples)
{
    for (int k = 0; k < s->nkeys; k++) {
        const mt__metric *e = m && s->map[k] >= 0 ? &m->e[s->map[k]] : NULL;
        double v = !e ? 0 : e->type == MT__METRIC_F64 ? e->f : (double)e->i;
        if (triples)
            mt__triple_fill(triples + 3 * k, e != NULL, v);
        else
            mt__stats_fill(s->quads + 4 * k, e != NULL, v);
    }
}

/* Rank 0: its numeric keys, each followed by '\0', then one more '\0' (so the length of
 * a layout without keys is still 1: a length of 0 says "unchanged"). */
static size_t layout_len(const mt_metrics *m)
{
    size_t n = 1;
    for (int i = 0; m && i < m->n; i++)
        if (numeric(&m->e[i]))
            n += strlen(m->e[i].key) + 1;
    return n;
}

static void layout_write(const mt_metrics *m, char *out)
{
    for (int i = 0; m && i < m->n; i++)
        if (numeric(&m->e[i])) {
            size_t l = strlen(m->e[i].key) + 1;
            memcpy(out, m->e[i].key, l);
            out += l;
        }
    *out = '\0';
}

void mt__spread_open(mt_context *c, const mt_metrics *m, mt__spread_step *st)
{
    mt__spread *s = &c->spread;
    /* not the triples: read only once filled (192 bytes cleared at every report) */
    st->layout_len = 0;
    st->fold = st->ready = false;
    st->payload = (mt__payload){0};
    if (c->world_size < 2)
        return;
    bool changed = !s->valid || !same_keys(s, m);
    if (changed && c->world_rank == 0) /* rank 0's keys are the layout: a new one */
        st->layout_len = (int64_t)layout_len(m);
    else if (changed && s->valid) /* only where this rank finds the keys moved */
        make_map(s, m);
    /* every rank has the same nkeys, so the same kind of payload */
    bool quads = (size_t)s->nkeys * 4 * sizeof(double) <= MT__AGREE_PAYLOAD;
    st->fold = s->valid && s->nkeys > 0 &&
               (size_t)s->nkeys * 3 * sizeof(double) <= sizeof st->triples;
    /* with rank 0's keys changed, its old map may not fit its new metrics: nothing is read,
     * and the result is dropped (every rank learns that the layout changed) */
    if (st->fold)
        fill(s, st->layout_len ? NULL : m, quads ? NULL : st->triples);
    st->payload = (mt__payload){.kind = quads ? MT__PAY_STATS : MT__PAY_TRIPLES,
                                .count = (size_t)s->nkeys,
                                .buf = quads ? (void *)s->quads : (void *)st->triples};
}

/* Every rank, after an OK agreement that carried the statistics (the same on every
 * rank): quads are whole; of triples, false when some key's sum is not finite (a rank
 * lacked it, or the sum left the range), otherwise rank 0's quads made from them, every
 * rank counted. */
static bool folded_whole(mt_context *c, const mt__spread_step *st)
{
    mt__spread *s = &c->spread;
    if (st->payload.kind != MT__PAY_TRIPLES)
        return true;
    for (int k = 0; k < s->nkeys; k++)
        if (!isfinite(st->triples[3 * k + 2]))
            return false;
    for (int k = 0; c->world_rank == 0 && k < s->nkeys; k++) {
        memcpy(s->quads + 4 * k, st->triples + 3 * k, 3 * sizeof(double));
        s->quads[4 * k + 3] = c->world_size;
    }
    return true;
}

/* Every rank, after the opening agreement said rank 0's keys changed (len bytes of
 * layout): room for it agreed, rank 0's layout broadcast, the map made. On any failure
 * every rank's cache is dropped alike (the next report sends the layout again). */
static int new_layout(mt_context *c, const mt_metrics *m, size_t len)
{
    mt__spread *s = &c->spread;
    mt__spread_free(s);
    size_t most = len / 2 + 1; /* every key is at least one byte and its '\0' */
    size_t bytes = len + most * (sizeof(char *) + sizeof(int) + 4 * sizeof(double));
    char *block = len < ((size_t)1 << 40) ? malloc(bytes) : NULL;
    int rc = block ? MT_OK : mt__error(MT_ENOMEM, "out of memory for a report's %zu-byte "
                                                  "key list", len);
    mt__call call;
    mt__call_init(&call, MT__CALL_REPORT, len, 1, 0);
    if ((rc = mt__agree(c->comm, &call, rc, NULL))) {
        free(block);
        return rc;
    }
    s->quads = (double *)block;
    s->key = (const char **)(block + most * 4 * sizeof(double));
    s->map = (int *)(block + most * (4 * sizeof(double) + sizeof(char *)));
    char *text = block + most * (4 * sizeof(double) + sizeof(char *) + sizeof(int));
    if (c->world_rank == 0)
        layout_write(m, text);
    if ((rc = mt__bcast_bytes(c->comm, text, len, 0))) {
        free(block);
        return rc;
    }
    text[len - 1] = '\0'; /* whatever came, never read past it */
    s->block = block;
    for (char *p = text; *p && s->nkeys < (int)most; p += strlen(p) + 1)
        s->key[s->nkeys++] = p;
    s->valid = true;
    make_map(s, m);
    return MT_OK;
}

int mt__spread_finish(mt_context *c, const mt_metrics *m, mt__spread_step *st, int64_t len)
{
    mt__spread *s = &c->spread;
    if (c->world_size < 2)
        return MT_OK;
    int rc = MT_OK;
    if (len > 0) {
        if ((rc = new_layout(c, m, (size_t)len)))
            return rc;
        st->fold = false;
    } else if (!s->valid) /* cannot be: rank 0 sends a layout whenever it has none */
        return mt__error(MT_EINVAL, "report statistics: no key layout");
    if (st->fold && !folded_whole(c, st))
        st->fold = false;
    if (!st->fold && s->nkeys > 0) {
        fill(s, m, NULL);
        rc = mt__reduce_stats(c->comm, s->quads, (size_t)s->nkeys);
    }
    st->ready = rc == MT_OK;
    return rc;
}

int mt__spread_put(json_t *row, const char *const *keys, const double *quads, int nkeys,
                   int verbose)
{
    json_t *spread = json_object();
    bool ok = spread != NULL;
    for (int k = 0; ok && k < nkeys; k++) {
        const double *q = quads + 4 * k;
        if (q[3] < 1)
            continue;
        int n = (int)q[3];
        ok = json_object_set_new(spread, keys[k],
                                 json_pack("{s:f, s:f, s:f, s:i}", "min", q[0], "mean",
                                           q[2] / n, "max", q[1], "ranks", n)) == 0;
        if (verbose >= 2)
            printf("mpitrain:   %-24s min %-12.6g mean %-12.6g max %-12.6g (%d ranks)\n",
                   keys[k], q[0], q[2] / n, q[1], n);
    }
    if (ok && json_object_size(spread))
        ok = json_object_set_new(row, "per_rank", spread) == 0;
    else
        json_decref(spread);
    return ok ? MT_OK : mt__error(MT_ENOMEM, "out of memory building a report");
}

int mt__spread_json(mt_context *c, const mt__spread_step *st, json_t *row)
{
    const mt__spread *s = &c->spread;
    if (c->world_size < 2 || !st->ready)
        return MT_OK;
    return mt__spread_put(row, s->key, s->quads, s->nkeys, c->verbose);
}
