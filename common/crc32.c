/*
 * crc32.c -- CRC-32 (the gzip/zlib polynomial, zlib's conventions: start from 0, feed
 * pieces in order) at memory speed, for checkpoint arrays.
 *
 * Why not zlib's crc32: every byte of a checkpoint is summed on its way to disk and back,
 * and zlib 1.2's table-driven loop runs at 1.1-1.7 GB/s here, slower than the disk
 * (measured: a 512 MiB share took 0.35-0.49 s, as long as writing it). On x86-64 with
 * PCLMULQDQ (every x86-64 CPU since 2010) this folds 64 bytes per step with carry-less
 * multiplication, the method of Gopal, Ozturk et al., "Fast CRC Computation for Generic
 * Polynomials Using PCLMULQDQ Instruction" (Intel, 2009), with the constants of its
 * bit-reflected form for this polynomial. The result is the same number zlib gives, so
 * files written before stay valid and zlib's crc32_combine still joins sums of pieces;
 * tests/test_unit.c compares the two on every length to 1 KiB, at every alignment.
 * The CPU is asked once (GCC's __builtin_cpu_supports); elsewhere zlib does the work.
 */
#include "common.h"

#include <stdint.h>
#include <zlib.h>

/* zlib's crc32 on any length (its length type is 32-bit on some builds: feed 1 GiB at a
 * time) */
static uint32_t crc32_zlib(uint32_t crc, const unsigned char *p, size_t len)
{
    uLong c = crc;
    while (len > 0) {
        size_t n = len < ((size_t)1 << 30) ? len : (size_t)1 << 30;
        c = crc32(c, p, (uInt)n);
        p += n, len -= n;
    }
    return (uint32_t)c;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* The register (not zlib's inverted value) after `len` bytes, len >= 64 and a multiple of
 * 16. */
__attribute__((target("pclmul,sse4.1"))) static uint32_t fold(uint32_t reg,
                                                               const unsigned char *p,
                                                               size_t len)
{
    /* the paper's constants for this polynomial, bit-reflected: folding 512 and 128 bits
     * forward, 64 to 32, and Barrett's (P and its quotient) */
    const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596, 0x0154442bd4);
    const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009e, 0x01751997d0);
    const __m128i k5 = _mm_set_epi64x(0, 0x0163cd6124);
    const __m128i poly = _mm_set_epi64x(0x01f7011641, 0x01db710641);
    const __m128i low32 = _mm_setr_epi32(~0, 0, ~0, 0);
    __m128i x1 = _mm_loadu_si128((const __m128i *)(const void *)(p + 0));
    __m128i x2 = _mm_loadu_si128((const __m128i *)(const void *)(p + 16));
    __m128i x3 = _mm_loadu_si128((const __m128i *)(const void *)(p + 32));
    __m128i x4 = _mm_loadu_si128((const __m128i *)(const void *)(p + 48));
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)reg));
    p += 64, len -= 64;
    /* four lanes, each folded 512 bits forward per step */
    while (len >= 64) {
        __m128i y1 = _mm_clmulepi64_si128(x1, k1k2, 0x00);
        __m128i y2 = _mm_clmulepi64_si128(x2, k1k2, 0x00);
        __m128i y3 = _mm_clmulepi64_si128(x3, k1k2, 0x00);
        __m128i y4 = _mm_clmulepi64_si128(x4, k1k2, 0x00);
        x1 = _mm_clmulepi64_si128(x1, k1k2, 0x11);
        x2 = _mm_clmulepi64_si128(x2, k1k2, 0x11);
        x3 = _mm_clmulepi64_si128(x3, k1k2, 0x11);
        x4 = _mm_clmulepi64_si128(x4, k1k2, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, y1),
                           _mm_loadu_si128((const __m128i *)(const void *)(p + 0)));
        x2 = _mm_xor_si128(_mm_xor_si128(x2, y2),
                           _mm_loadu_si128((const __m128i *)(const void *)(p + 16)));
        x3 = _mm_xor_si128(_mm_xor_si128(x3, y3),
                           _mm_loadu_si128((const __m128i *)(const void *)(p + 32)));
        x4 = _mm_xor_si128(_mm_xor_si128(x4, y4),
                           _mm_loadu_si128((const __m128i *)(const void *)(p + 48)));
        p += 64, len -= 64;
    }
    /* the four lanes into one, then the 16-byte blocks left, 128 bits forward each */
    __m128i next[3] = {x2, x3, x4};
    for (int i = 0; i < 3; i++) {
        __m128i y = _mm_clmulepi64_si128(x1, k3k4, 0x00);
        x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x11), y), next[i]);
    }
    for (; len >= 16; p += 16, len -= 16) {
        __m128i y = _mm_clmulepi64_si128(x1, k3k4, 0x00);
        x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x11), y),
                           _mm_loadu_si128((const __m128i *)(const void *)p));
    }
    /* 128 bits to 64, then Barrett's reduction to 32 */
    __m128i y = _mm_clmulepi64_si128(x1, k3k4, 0x10);
    x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), y);
    y = _mm_srli_si128(x1, 4);
    x1 = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(x1, low32), k5, 0x00), y);
    y = _mm_clmulepi64_si128(_mm_and_si128(x1, low32), poly, 0x10);
    y = _mm_clmulepi64_si128(_mm_and_si128(y, low32), poly, 0x00);
    return (uint32_t)_mm_extract_epi32(_mm_xor_si128(x1, y), 1);
}

static int have_pclmul = -1; /* -1: not asked yet (the answer is the same in every thread) */

static bool pclmul(void)
{
    int h = __atomic_load_n(&have_pclmul, __ATOMIC_RELAXED);
    if (h < 0) {
        __builtin_cpu_init();
        h = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
        __atomic_store_n(&have_pclmul, h, __ATOMIC_RELAXED);
    }
    return h;
}
#endif

uint32_t mt__crc32(uint32_t crc, const void *data, size_t len)
{
    const unsigned char *p = data;
#if defined(__x86_64__) && defined(__GNUC__)
    if (len >= 64 && pclmul()) {
        size_t n = len & ~(size_t)15;
        crc = ~fold(~crc, p, n);
        p += n, len -= n;
    }
#endif
    return crc32_zlib(crc, p, len);
}
