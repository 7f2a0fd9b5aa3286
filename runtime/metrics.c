/*
 * metrics.c -- mt_metrics: typed key/value pairs (f64, i64, string) in insertion order,
 * and their compact encoding for the trip to rank 0 and their JSON form.
 *
 * The keys mt_report adds to every row (training_iteration, timestamp, ...) are reserved:
 * a user metric of that name would silently replace them in result.json, so the public
 * setters refuse them and mt_report refuses metrics that carry them; the library itself
 * sets them through mt__metrics_put.
 */
#include "runtime.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define KEY_MAX 255
#define NONFINITE "nonfinite_metrics" /* below, at the JSON form */

/* keys_id's source: each number is given once, to one metrics' key set */
static atomic_uint_fast64_t last_keys_id;

static void new_keys(mt_metrics *m)
{
    m->keys_id = atomic_fetch_add_explicit(&last_keys_id, 1, memory_order_relaxed) + 1;
}

mt_metrics *mt_metrics_new(void)
{
    mt_metrics *m = calloc(1, sizeof *m);
    if (!m)
        mt__error(MT_ENOMEM, "out of memory creating metrics");
    else
        new_keys(m);
    return m;
}

void mt__metrics_clear(mt_metrics *m)
{
    for (int i = 0; i < m->n; i++) {
        free(m->e[i].key);
        free(m->e[i].s);
    }
    m->n = 0;
    new_keys(m);
}

void mt_metrics_free(mt_metrics **mp)
{
    if (!mp || !*mp)
        return;
    mt__metrics_clear(*mp);
    free((*mp)->e);
    free(*mp);
    *mp = NULL;
}

static const char *const reserved[] = {"training_iteration", "iterations_since_restore",
                                       "timestamp", "time_this_iter_s", "time_total_s",
                                       "checkpoint_dir_name", "per_rank", NONFINITE, NULL};

bool mt__metrics_reserved(const char *key)
{
    /* every report checks each of its keys: the first byte first (8 strcmp calls a key
     * were about 40 ns) */
    for (int i = 0; key && reserved[i]; i++)
        if (key[0] == reserved[i][0] && !strcmp(key, reserved[i]))
            return true;
    return false;
}

static int reserved_error(const char *key)
{
    return mt__error(MT_EINVAL, "metric key \"%s\" is reserved: mt_report sets it on every row "
                     "(reserved: training_iteration, iterations_since_restore, timestamp, "
                     "time_this_iter_s, time_total_s, "
                     "checkpoint_dir_name, per_rank, nonfinite_metrics)", key);
}

int mt__metrics_check_user(const mt_metrics *m)
{
    if (!m || !m->reserved_seen) /* the public setters refuse reserved keys */
        return MT_OK;
    for (int i = 0; i < m->n; i++)
        if (mt__metrics_reserved(m->e[i].key))
            return reserved_error(m->e[i].key);
    return MT_OK;
}

/* check_key's rule, without recording an error. */
static bool key_ok(const char *key)
{
    size_t n = key ? strlen(key) : 0;
    if (n == 0 || n > KEY_MAX)
        return false;
    for (const unsigned char *p = (const unsigned char *)key; *p; p++)
        if (*p < 0x20 || *p == 0x7f)
            return false;
    return true;
}

static int check_key(const char *key)
{
    if (!key || !*key)
        return mt__error(MT_EINVAL, "metric key must not be empty");
    size_t n = strlen(key);
    if (n > KEY_MAX)
        return mt__error(MT_EINVAL, "metric key is %zu bytes; at most %d are allowed", n, KEY_MAX);
    for (const unsigned char *p = (const unsigned char *)key; *p; p++)
        if (*p < 0x20 || *p == 0x7f)
            return mt__error(MT_EINVAL, "metric key \"%s\" has a control character at byte %d",
                             key, (int)((const char *)p - key));
    return MT_OK;
}

static mt__metric *slot(mt_metrics *m, const char *key, bool user, int *rc)
{
    if (!m) {
        *rc = mt__error(MT_EINVAL, "metrics is NULL");
        return NULL;
    }
    if ((*rc = check_key(key)))
        return NULL;
    if (user && mt__metrics_reserved(key)) {
        *rc = reserved_error(key);
        return NULL;
    }
    for (int i = 0; i < m->n; i++)
        if (!strcmp(m->e[i].key, key)) {
            free(m->e[i].s);
            m->e[i].s = NULL;
            return &m->e[i];
        }
    if (MT__GROW(m->e, m->cap, (size_t)m->n + 1)) {
        *rc = mt__error(MT_ENOMEM, "out of memory adding metric %s", key);
        return NULL;
    }
    mt__metric *e = &m->e[m->n];
    memset(e, 0, sizeof *e);
    if (!(e->key = mt__strdup(key))) {
        *rc = MT_ENOMEM;
        return NULL;
    }
    e->klen = strlen(key);
    m->n++;
    new_keys(m);
    if (!user && mt__metrics_reserved(key))
        m->reserved_seen = true;
    return e;
}

int mt__metrics_put(mt_metrics *m, const char *key, int type, double f, int64_t i,
                    const char *str, bool user)
{
    if (type == MT__METRIC_STR && !str)
        return mt__error(MT_EINVAL, "metric %s: string value is NULL", key ? key : "(null)");
    char *copy = type == MT__METRIC_STR ? mt__strdup(str) : NULL;
    if (type == MT__METRIC_STR && !copy)
        return MT_ENOMEM;
    int rc;
    mt__metric *e = slot(m, key, user, &rc);
    if (!e) {
        free(copy);
        return rc;
    }
    if (e->type && (e->type == MT__METRIC_STR) != (type == MT__METRIC_STR))
        new_keys(m); /* a number became a string, or back: another key set */
    *e = (mt__metric){.key = e->key, .klen = e->klen, .type = type, .f = f, .i = i, .s = copy};
    return MT_OK;
}

int mt_metrics_set_f64(mt_metrics *m, const char *key, double v)
{
    return mt__metrics_put(m, key, MT__METRIC_F64, v, 0, NULL, true);
}

int mt_metrics_set_i64(mt_metrics *m, const char *key, int64_t v)
{
    return mt__metrics_put(m, key, MT__METRIC_I64, 0, v, NULL, true);
}

int mt_metrics_set_str(mt_metrics *m, const char *key, const char *v)
{
    return mt__metrics_put(m, key, MT__METRIC_STR, 0, 0, v, true);
}

const mt__metric *mt__metrics_find(const mt_metrics *m, const char *key)
{
    for (int i = 0; m && key && i < m->n; i++)
        if (!strcmp(m->e[i].key, key))
            return &m->e[i];
    return NULL;
}

/* The getters' common part: a numeric metric, or MT_EINVAL / MT_ENOTFOUND. */
static int numeric(const mt_metrics *m, const char *key, const void *out, const char *fn,
                   const mt__metric **e)
{
    if (!m || !key || !out)
        return mt__error(MT_EINVAL, "%s: %s is NULL", fn, !m ? "metrics" : !key ? "key" : "out");
    *e = mt__metrics_find(m, key);
    if (!*e || (*e)->type == MT__METRIC_STR)
        return mt__error(MT_ENOTFOUND, "no numeric metric %s", key);
    return MT_OK;
}

int mt_metrics_get_f64(const mt_metrics *m, const char *key, double *out)
{
    const mt__metric *e = NULL;
    int rc = numeric(m, key, out, "mt_metrics_get_f64", &e);
    if (!rc)
        *out = e->type == MT__METRIC_F64 ? e->f : (double)e->i;
    return rc;
}

int mt_metrics_get_i64(const mt_metrics *m, const char *key, int64_t *out)
{
    const mt__metric *e = NULL;
    int rc = numeric(m, key, out, "mt_metrics_get_i64", &e);
    if (!rc)
        *out = e->type == MT__METRIC_I64 ? e->i : (int64_t)e->f;
    return rc;
}

const char *mt_metrics_get_str(const mt_metrics *m, const char *key)
{
    if (!m || !key) {
        mt__error(MT_EINVAL, "mt_metrics_get_str: %s is NULL", !m ? "metrics" : "key");
        return NULL;
    }
    const mt__metric *e = mt__metrics_find(m, key);
    return e && e->type == MT__METRIC_STR ? e->s : NULL;
}

mt_metric_type mt_metrics_type(const mt_metrics *m, const char *key)
{
    const mt__metric *e = m && key ? mt__metrics_find(m, key) : NULL;
    if (!e)
        return MT_METRIC_NONE;
    return e->type == MT__METRIC_STR ? MT_METRIC_STR
         : e->type == MT__METRIC_I64 ? MT_METRIC_I64 : MT_METRIC_F64;
}

size_t mt_metrics_count(const mt_metrics *m)
{
    return m ? (size_t)m->n : 0;
}

const char *mt_metrics_key(const mt_metrics *m, size_t i)
{
    return m && i < (size_t)m->n ? m->e[i].key : NULL;
}

int mt__metrics_copy(mt_metrics *dst, const mt_metrics *src)
{
    int rc = MT_OK;
    for (int i = 0; src && i < src->n && !rc; i++) {
        const mt__metric *e = &src->e[i];
        rc = mt__metrics_put(dst, e->key, e->type, e->f, e->i, e->s, false);
    }
    return rc;
}

/* ------------------------------------------------------------ encoding */

/* [type u8][key len u16][key][value: 8 bytes | u32 len + bytes] ... */
size_t mt__metrics_encoded_len(const mt_metrics *m)
{
    size_t n = 0;
    for (int i = 0; m && i < m->n; i++)
        n += 3 + m->e[i].klen + (m->e[i].type == MT__METRIC_STR ? 4 + strlen(m->e[i].s) : 8);
    return n;
}

void mt__metrics_encode_to(const mt_metrics *m, char *p)
{
    for (int i = 0; m && i < m->n; i++) {
        const mt__metric *e = &m->e[i];
        uint16_t kl = (uint16_t)e->klen;
        *p++ = (char)e->type;
        memcpy(p, &kl, 2), p += 2;
        memcpy(p, e->key, kl), p += kl;
        if (e->type == MT__METRIC_STR) {
            uint32_t sl = (uint32_t)strlen(e->s);
            memcpy(p, &sl, 4), p += 4;
            memcpy(p, e->s, sl), p += sl;
        } else if (e->type == MT__METRIC_F64)
            memcpy(p, &e->f, 8), p += 8;
        else
            memcpy(p, &e->i, 8), p += 8;
    }
}

void mt__metrics_encode_values(const mt_metrics *m, char *p)
{
    for (int i = 0; i < m->n; i++) {
        const mt__metric *e = &m->e[i];
        *p = (char)e->type; /* an integer may have become a float: the same key set */
        p += 3 + e->klen;
        memcpy(p, e->type == MT__METRIC_F64 ? (const void *)&e->f : (const void *)&e->i, 8);
        p += 8;
    }
}

int mt__metrics_encode(const mt_metrics *m, char **out, size_t *len)
{
    size_t n = mt__metrics_encoded_len(m);
    char *b = malloc(n ? n : 1);
    if (!b)
        return mt__error(MT_ENOMEM, "out of memory encoding metrics");
    mt__metrics_encode_to(m, b);
    *out = b;
    *len = n;
    return MT_OK;
}

int mt__metrics_decode(mt_metrics *m, const char *b, size_t len)
{
    const char *p = b, *end = b + len;
    int rc = MT_OK;
    char key[KEY_MAX + 1];
    while (p < end && !rc) {
        int type = *p++;
        uint16_t kl;
        if (end - p < 2)
            return mt__error(MT_EFORMAT, "corrupt metrics message");
        memcpy(&kl, p, 2), p += 2;
        if (kl > KEY_MAX || end - p < kl)
            return mt__error(MT_EFORMAT, "corrupt metrics message");
        memcpy(key, p, kl), p += kl;
        key[kl] = '\0';
        if (type == MT__METRIC_STR) {
            uint32_t sl;
            if (end - p < 4)
                return mt__error(MT_EFORMAT, "corrupt metrics message");
            memcpy(&sl, p, 4), p += 4;
            if ((size_t)(end - p) < sl)
                return mt__error(MT_EFORMAT, "corrupt metrics message");
            char *s = malloc(sl + 1);
            if (!s)
                return mt__error(MT_ENOMEM, "out of memory decoding metrics");
            memcpy(s, p, sl), p += sl;
            s[sl] = '\0';
            rc = mt_metrics_set_str(m, key, s);
            free(s);
        } else {
            if (end - p < 8)
                return mt__error(MT_EFORMAT, "corrupt metrics message");
            if (type == MT__METRIC_F64) {
                double v;
                memcpy(&v, p, 8);
                rc = mt_metrics_set_f64(m, key, v);
            } else {
                int64_t v;
                memcpy(&v, p, 8);
                rc = mt_metrics_set_i64(m, key, v);
            }
            p += 8;
        }
    }
    return rc;
}

/* ------------------------------------------------------------ JSON */

/* NaN and the infinities are no JSON number: such a double is written as the string
 * "NaN", "Infinity" or "-Infinity" (what a reader of the file expects) and its key is
 * listed in the object's "nonfinite_metrics" ({"loss": true}), so that a string metric
 * that spells one of them stays a string when read back (a type a row does not list is
 * the type its JSON value has). */

json_t *mt__metrics_to_json(const mt_metrics *m)
{
    json_t *o = json_object(), *nonfinite = NULL;
    for (int i = 0; o && m && i < m->n; i++) {
        const mt__metric *e = &m->e[i];
        bool odd = e->type == MT__METRIC_F64 && !isfinite(e->f);
        json_t *v = e->type == MT__METRIC_STR ? json_string(e->s)
                    : e->type == MT__METRIC_I64 ? json_integer(e->i)
                    : !odd ? json_real(e->f)
                           : json_string(isnan(e->f) ? "NaN" : e->f > 0 ? "Infinity" : "-Infinity");
        if (odd && !nonfinite && (!(nonfinite = json_object()) ||
                                  json_object_set_new(o, NONFINITE, nonfinite)))
            v = (json_decref(v), NULL);
        /* out of memory: no row with keys (or a key's type) missing */
        if (json_object_set_new(o, e->key, v) ||
            (odd && json_object_set_new(nonfinite, e->key, json_true()))) {
            json_decref(o);
            return NULL;
        }
    }
    return o;
}

int mt__metrics_from_json(mt_metrics *m, const json_t *o)
{
    const char *key;
    json_t *v, *nonfinite = json_object_get(o, NONFINITE);
    int rc = MT_OK;
    json_object_foreach((json_t *)o, key, v)
    {
        if (rc)
            break;
        /* a hand-edited file's key no metric can have, the types' list: passed over */
        if (!key_ok(key) || !strcmp(key, NONFINITE))
            continue;
        /* rows and run.json carry the automatic keys: not a user's setting */
        if (json_is_integer(v))
            rc = mt__metrics_put(m, key, MT__METRIC_I64, 0, json_integer_value(v), NULL, false);
        else if (json_is_real(v))
            rc = mt__metrics_put(m, key, MT__METRIC_F64, json_real_value(v), 0, NULL, false);
        else if (json_is_string(v)) {
            /* a double only where the row lists it, and spelled as written: any other
             * string ("NaN" reported as a string, "nan", "1e5", " 1") stays a string */
            const char *s = json_string_value(v);
            bool listed = json_is_true(json_object_get(nonfinite, key));
            if (listed && !strcmp(s, "NaN"))
                rc = mt__metrics_put(m, key, MT__METRIC_F64, NAN, 0, NULL, false);
            else if (listed && (!strcmp(s, "Infinity") || !strcmp(s, "-Infinity")))
                rc = mt__metrics_put(m, key, MT__METRIC_F64, s[0] == '-' ? -INFINITY : INFINITY,
                                     0, NULL, false);
            else
                rc = mt__metrics_put(m, key, MT__METRIC_STR, 0, 0, s, false);
        }
    }
    return rc;
}
