/*
 * programs.c -- the public helpers for training programs (mpitrain.h, "for programs"):
 * strict numbers for their own options and the IDX importer, through the library's own
 * parsers and importer, so a program needs no internal header.
 */
#include "runtime.h"

int mt_parse_i64(const char *what, const char *text, int64_t min, int64_t max, int64_t *out)
{
    if (!what || !text || !out)
        return mt__error(MT_EINVAL, "mt_parse_i64: NULL argument");
    return mt__parse_i64(what, text, min, max, out);
}

int mt_parse_u64(const char *what, const char *text, uint64_t min, uint64_t max, uint64_t *out)
{
    if (!what || !text || !out)
        return mt__error(MT_EINVAL, "mt_parse_u64: NULL argument");
    return mt__parse_u64(what, text, min, max, out);
}

int mt_parse_f64(const char *what, const char *text, double min, double max, double *out)
{
    if (!what || !text || !out)
        return mt__error(MT_EINVAL, "mt_parse_f64: NULL argument");
    return mt__parse_f64(what, text, min, max, out);
}

int mt_import_idx(const char *images, const char *labels, const char *out_file,
                  const char *group)
{
    if (!images || !out_file || !group)
        return mt__error(MT_EINVAL, "mt_import_idx: NULL argument");
    return mt__import_idx(images, labels, out_file, group, NULL);
}
