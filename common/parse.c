/*
 * parse.c -- the one strict reader of numbers and names that come from outside the
 * program: command-line flags, the environment, config files, run.json.
 *
 * strtol and friends accept what a user did not mean ("-1" as 2^64-1 for strtoull,
 * "4294967297" cast to int as 1, "12abc" as 12, " 7" with a blank), and atoi cannot even
 * say it failed. Every number from outside goes through here instead: the whole string,
 * base 10, inside a stated range, else MT_EINVAL naming the flag or variable and the text.
 *
 * Names become path components (run name, checkpoint array and file names) or keys that
 * other tools print: one check, used on input and again when a name is read back from a
 * file, so a name that could escape its folder never reaches the file system.
 */
#include "common.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The text shown in a message: control characters would garble the terminal. */
static void printable(char *out, size_t len, const char *s)
{
    size_t n = 0;
    for (; *s && n + 5 < len; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch < 0x20 || ch == 0x7f)
            n += (size_t)snprintf(out + n, len - n, "\\x%02x", ch);
        else
            out[n++] = (char)ch;
    }
    if (*s && n + 4 <= len)
        memcpy(out + n, "...", 4), n += 3;
    out[n < len ? n : len - 1] = '\0';
}

static int bad_number(const char *what, const char *s, const char *rule)
{
    char shown[96];
    printable(shown, sizeof shown, s ? s : "(null)");
    return mt__error(MT_EINVAL, "%s: '%s' is not %s", what, shown, rule);
}

/* Digits only, after an optional '-' when `sign`: no blanks, no '+', no base prefix. */
static bool plain_integer(const char *s, bool sign)
{
    if (sign && *s == '-')
        s++;
    if (!*s)
        return false;
    for (; *s; s++)
        if (*s < '0' || *s > '9')
            return false;
    return true;
}

int mt__parse_i64(const char *what, const char *s, int64_t min, int64_t max, int64_t *out)
{
    char rule[96];
    snprintf(rule, sizeof rule, "an integer from %lld to %lld", (long long)min, (long long)max);
    if (!s || !plain_integer(s, true))
        return bad_number(what, s, rule);
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < min || v > max)
        return bad_number(what, s, rule);
    *out = (int64_t)v;
    return MT_OK;
}

int mt__parse_u64(const char *what, const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    char rule[96];
    snprintf(rule, sizeof rule, "a whole number from %llu to %llu", (unsigned long long)min,
             (unsigned long long)max);
    if (!s || !plain_integer(s, false))
        return bad_number(what, s, rule);
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v < min || v > max)
        return bad_number(what, s, rule);
    *out = (uint64_t)v;
    return MT_OK;
}

int mt__parse_int(const char *what, const char *s, int min, int max, int *out)
{
    int64_t v;
    int rc = mt__parse_i64(what, s, min, max, &v);
    if (!rc)
        *out = (int)v;
    return rc;
}

int mt__parse_size(const char *what, const char *s, size_t min, size_t max, size_t *out)
{
    uint64_t v;
    int rc = mt__parse_u64(what, s, min, max, &v);
    if (!rc)
        *out = (size_t)v;
    return rc;
}

int mt__parse_f64(const char *what, const char *s, double min, double max, double *out)
{
    char rule[96];
    snprintf(rule, sizeof rule, "a number from %g to %g", min, max);
    if (!s || !*s || strchr(" \t\n\v\f\r", *s))
        return bad_number(what, s, rule);
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (*end || errno == ERANGE || !isfinite(v) || v < min || v > max)
        return bad_number(what, s, rule);
    *out = v;
    return MT_OK;
}

/* An environment variable: unset or empty leaves *out alone (the default) and is MT_OK;
 * anything else must parse. */
int mt__env_i64(const char *var, int64_t min, int64_t max, int64_t *out)
{
    const char *s = getenv(var);
    return s && *s ? mt__parse_i64(var, s, min, max, out) : MT_OK;
}

int mt__env_u64(const char *var, uint64_t min, uint64_t max, uint64_t *out)
{
    const char *s = getenv(var);
    return s && *s ? mt__parse_u64(var, s, min, max, out) : MT_OK;
}

int mt__env_f64(const char *var, double min, double max, double *out)
{
    const char *s = getenv(var);
    return s && *s ? mt__parse_f64(var, s, min, max, out) : MT_OK;
}

int mt__env_bool(const char *var, bool *out)
{
    const char *s = getenv(var);
    if (!s || !*s)
        return MT_OK;
    if (strcmp(s, "0") && strcmp(s, "1"))
        return bad_number(var, s, "0 or 1");
    *out = s[0] == '1';
    return MT_OK;
}

int mt__env_word(const char *var, const char *words, int *out)
{
    const char *s = getenv(var);
    if (!s || !*s)
        return MT_OK;
    size_t n = strlen(s);
    int i = 0;
    for (const char *w = words; w; w = strchr(w, '|') ? strchr(w, '|') + 1 : NULL, i++)
        if (!strncmp(w, s, n) && (w[n] == '|' || !w[n])) {
            *out = i;
            return MT_OK;
        }
    char rule[128] = "one of ";
    size_t k = strlen(rule);
    for (const char *w = words; *w && k + 3 < sizeof rule; w++)
        if (*w == '|') {
            rule[k++] = ',';
            rule[k++] = ' ';
        } else
            rule[k++] = *w;
    rule[k] = '\0';
    return bad_number(var, s, rule);
}

int mt__check_text(const char *field, const char *text, size_t max)
{
    if (!text)
        return mt__error(MT_EINVAL, "%s must be given (got NULL)", field);
    char shown[96];
    printable(shown, sizeof shown, text);
    size_t len = strlen(text);
    if (len == 0)
        return mt__error(MT_EINVAL, "%s must not be empty", field);
    if (len > max)
        return mt__error(MT_EINVAL, "%s must be at most %zu bytes (got %zu)", field, max, len);
    for (const char *p = text; *p; p++) {
        unsigned char ch = (unsigned char)*p;
        if (ch < 0x20 || ch == 0x7f)
            return mt__error(MT_EINVAL, "%s must not contain control characters such as "
                                        "newlines (got \"%s\", byte 0x%02x at %zu)", field,
                             shown, ch, (size_t)(p - text));
    }
    return MT_OK;
}

int mt__check_name(const char *field, const char *name, size_t max)
{
    int rc = mt__check_text(field, name, max); /* given, not empty, short, no control bytes */
    if (rc)
        return rc;
    if (!strcmp(name, ".") || !strcmp(name, ".."))
        return mt__error(MT_EINVAL, "%s must not be \"%s\" (it would name a folder outside "
                                    "its own)", field, name);
    if (strchr(name, '/')) {
        char shown[96];
        printable(shown, sizeof shown, name);
        return mt__error(MT_EINVAL, "%s must not contain '/' (got \"%s\")", field, shown);
    }
    return MT_OK;
}


/* ------------------------------------------------------------ environment knobs */

const mt__env_knob mt__env_knobs[] = {
    {"MT_CHECKPOINT_ASYNC", MT__KNOB_BOOL, 0, 1, NULL},
    {"MT_CHECKPOINT_BUFFER", MT__KNOB_BYTES, 8, (uint64_t)1 << 36, NULL},
    {"MT_CHECKPOINT_STAGING", MT__KNOB_BYTES, 1, (uint64_t)1 << 40, NULL},
    {"MT_FUSION_ALGO", MT__KNOB_WORD, 0, 0, MT__FUSION_ALGO_WORDS},
    {"MT_FUSION_BYTES", MT__KNOB_BYTES, 1, (uint64_t)1 << 34, NULL},
    {"MT_FUSION_COMPRESS", MT__KNOB_WORD, 0, 0, MT__FUSION_COMPRESS_WORDS},
    {"MT_FUSION_SHM", MT__KNOB_BOOL, 0, 1, NULL},
    {"MT_FUSION_SLEEP", MT__KNOB_BOOL, 0, 1, NULL},
    {"MT_IO_COLLECTIVE", MT__KNOB_BOOL, 0, 1, NULL},
    {"MT_IO_READAHEAD", MT__KNOB_BOOL, 0, 1, NULL},
    {"MT_TEST_COMMIT_PAUSE", MT__KNOB_SECONDS, 0, 3600, NULL},
    {"MT_TEST_COMMIT_PAUSE_AT", MT__KNOB_BYTES, 0, (uint64_t)1 << 40, NULL},
    {NULL, 0, 0, 0, NULL},
};

static const mt__env_knob *knob(const char *name)
{
    for (const mt__env_knob *k = mt__env_knobs; k->name; k++)
        if (!strcmp(k->name, name))
            return k;
    return NULL;
}

/* The value where it is used: fit has refused a bad one already, so here a bad value
 * (only possible outside fit) gives the default and leaves mt_last_error alone. */
uint64_t mt__env_knob_u64(const char *name, uint64_t dflt)
{
    const mt__env_knob *k = knob(name);
    const char *s = getenv(name);
    uint64_t v = dflt;
    if (!k || !s || !*s || !plain_integer(s, false))
        return dflt;
    errno = 0;
    char *end;
    unsigned long long x = strtoull(s, &end, 10);
    if (!errno && !*end && x >= k->min && x <= k->max)
        v = (uint64_t)x;
    return v;
}

double mt__env_knob_f64(const char *name, double dflt)
{
    const mt__env_knob *k = knob(name);
    const char *s = getenv(name);
    if (!k || !s || !*s || strchr(" \t\n\v\f\r", *s))
        return dflt;
    errno = 0;
    char *end;
    double x = strtod(s, &end);
    return *end || errno || !isfinite(x) || x < (double)k->min || x > (double)k->max ? dflt : x;
}

bool mt__env_knob_bool(const char *name, bool dflt)
{
    const char *s = getenv(name);
    return s && !strcmp(s, "1") ? true : s && !strcmp(s, "0") ? false : dflt;
}
