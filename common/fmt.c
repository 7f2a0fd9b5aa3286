/*
 * fmt.c -- doubles to text that reads back to the same double, fast.
 *
 * printf("%.17g") converts through multi-precision arithmetic and costs about half a
 * microsecond a number; a report line has dozens. Here, for |x| from about 1e-11 to
 * 1e43, x is scaled by an exact power of ten in long double (64-bit significand, so the
 * product is within 2^-64 of exact):
 * - 15 significant digits first: the candidate D (< 2^53) is accepted only if D * 10^e,
 *   one correctly rounded IEEE operation on exact operands (Clinger's fast path), gives
 *   x back, which is exactly what strtod computes. Trailing zeros go, so 0.1 prints "0.1".
 * - else 17 digits, rounded from the scaled value unless its fraction is within 0.01 of a
 *   half (where the 2^-64 error could tip the rounding); 17 correctly rounded digits
 *   always read back.
 * Anything else (the rest of the range, near-halves) goes to snprintf("%.17g"). The text
 * always has a '.' or an exponent, so JSON readers see a real, not an integer.
 */
#include "common.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static const long double pow10l_tab[28] = {
    1e0L,  1e1L,  1e2L,  1e3L,  1e4L,  1e5L,  1e6L,  1e7L,  1e8L,  1e9L,
    1e10L, 1e11L, 1e12L, 1e13L, 1e14L, 1e15L, 1e16L, 1e17L, 1e18L, 1e19L,
    1e20L, 1e21L, 1e22L, 1e23L, 1e24L, 1e25L, 1e26L, 1e27L};
static const double pow10_tab[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                     1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                     1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* x * 10^k in long double, |k| <= 27 */
static long double scale(double x, int k)
{
    return k >= 0 ? (long double)x * pow10l_tab[k] : (long double)x / pow10l_tab[-k];
}

/* Writes digits (an integer of `nd` digits) with decimal exponent `e10` of the leading
 * digit, in %g style; returns the length. */
static int emit(char *out, bool neg, uint64_t digits, int nd, int e10)
{
    char d[24];
    for (int i = nd - 1; i >= 0; i--) {
        d[i] = (char)('0' + digits % 10);
        digits /= 10;
    }
    while (nd > 1 && d[nd - 1] == '0')
        nd--;
    char *p = out;
    if (neg)
        *p++ = '-';
    if (e10 >= -5 && e10 < 17) {
        if (e10 < 0) {
            *p++ = '0';
            *p++ = '.';
            for (int i = -1; i > e10; i--)
                *p++ = '0';
            memcpy(p, d, (size_t)nd);
            p += nd;
        } else {
            int intd = e10 + 1;
            for (int i = 0; i < intd; i++)
                *p++ = i < nd ? d[i] : '0';
            *p++ = '.';
            if (nd > intd) {
                memcpy(p, d + intd, (size_t)(nd - intd));
                p += nd - intd;
            } else
                *p++ = '0';
        }
    } else {
        *p++ = d[0];
        *p++ = '.';
        if (nd > 1) {
            memcpy(p, d + 1, (size_t)(nd - 1));
            p += nd - 1;
        } else
            *p++ = '0';
        p += sprintf(p, "e%c%02d", e10 < 0 ? '-' : '+', e10 < 0 ? -e10 : e10);
    }
    *p = '\0';
    return (int)(p - out);
}

static int slow(char *out, double x)
{
    int n = snprintf(out, 32, "%.17g", x);
    if (!strpbrk(out, ".eEn")) { /* "nan"/"inf" keep their text; integers get ".0" */
        out[n++] = '.';
        out[n++] = '0';
        out[n] = '\0';
    }
    return n;
}

int mt__fmt_double(char out[32], double x)
{
    if (x == 0)
        return (int)strlen(strcpy(out, signbit(x) ? "-0.0" : "0.0"));
    if (!isfinite(x))
        return slow(out, x);
    bool neg = x < 0;
    double a = neg ? -x : x;
    int e10 = (int)floor(log10(a)); /* may be off by one; fixed below */
    /* 15 digits: D in [1e14, 1e15) */
    int k = 14 - e10;
    if (k < -26 || k > 24) /* room for the +-1 fix and the 17-digit k + 2 */
        return slow(out, x);
    long double y = scale(a, k);
    if (y >= 1e15L) {
        k--, e10++;
        y = scale(a, k);
    } else if (y < 1e14L) {
        k++, e10--;
        y = scale(a, k);
    }
    if (y < 1e14L || y >= 1e15L)
        return slow(out, x);
    uint64_t d15 = (uint64_t)llroundl(y);
    if (d15 >= 1000000000000000ULL) { /* rounded up to 10^15 */
        d15 /= 10;
        k--, e10++;
    }
    /* Clinger: d15 < 2^53 is exact, 10^|k| (<= 22) is exact: one rounding, as strtod */
    if (k >= -22 && k <= 22) {
        double back = k >= 0 ? (double)d15 / pow10_tab[k] : (double)d15 * pow10_tab[-k];
        if (back == a)
            return emit(out, neg, d15, 15, e10);
    }
    /* 17 digits: D in [1e16, 1e17) */
    k += 2;
    y = scale(a, k);
    long double fl = floorl(y), frac = y - fl;
    if (fabsl(frac - 0.5L) < 0.01L)
        return slow(out, x);
    uint64_t d17 = (uint64_t)fl + (frac > 0.5L);
    if (d17 >= 100000000000000000ULL) {
        d17 /= 10;
        e10++;
    }
    return emit(out, neg, d17, 17, e10);
}
