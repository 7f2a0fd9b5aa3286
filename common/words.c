/*
 * words.c -- the words of the fusion's algorithms and compressions, from the one table
 * in common.h (MT__FUSION_ALGO_MAP, MT__COMPRESSION_MAP), so the knobs, the messages and
 * the programs' flags spell them one way; and the 64-bit hash the signatures use.
 */
#include "common.h"

#define MT__WORD(w) w,
static const char *const algo_words[] = {MT__FUSION_ALGO_MAP(MT__WORD)};
static const char *const compression_words[] = {MT__COMPRESSION_MAP(MT__WORD)};
_Static_assert(sizeof algo_words / sizeof *algo_words == MT_FUSION_HIER + 1,
               "one word per mt_fusion_algo");
_Static_assert(sizeof compression_words / sizeof *compression_words == MT_COMPRESS_BF16 + 1,
               "one word per mt_compression");

const char *mt_fusion_algo_word(mt_fusion_algo algo)
{
    return (unsigned)algo <= MT_FUSION_HIER ? algo_words[algo] : NULL;
}

const char *mt_compression_word(mt_compression compression)
{
    return (unsigned)compression <= MT_COMPRESS_BF16 ? compression_words[compression] : NULL;
}

uint64_t mt__sig_mix(uint64_t h, uint64_t v)
{
    /* FNV-1a over the 8 bytes of v. */
    if (h == 0)
        h = 1469598103934665603ULL;
    for (int i = 0; i < 8; i++) {
        h ^= (v >> (8 * i)) & 0xff;
        h *= 1099511628211ULL;
    }
    return h;
}
