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
    /* v added to h, then MurmurHash3's 64-bit finaliser: two multiplications a word where
     * FNV-1a over its 8 bytes took eight in a chain (every collective call hashes four
     * words, so a small mt_allreduce paid for it) */
    if (h == 0)
        h = 1469598103934665603ULL;
    uint64_t x = (h ^ (h >> 29)) + v * 0x9E3779B97F4A7C15ULL;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}
