/*
 * dtype.c -- element types and reduction ops: sizes, names and conversions, shared by
 * every layer.
 *
 * mt__convert follows HDF5's conversion of native types (H5Tconv.c, hard conversions
 * with the default exception handling), which the data path also gets when HDF5 converts
 * a column as it reads it: out-of-range values saturate instead of the plain C cast's
 * undefined behaviour (a float beyond an integer's range) or wrap-around (int64 to u8).
 * tests/test_io.c compares every pair of dtypes with H5Tconvert on the edge values.
 */
#include "common.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

size_t mt_dtype_size(mt_dtype t)
{
    switch (t) {
    case MT_U8: return 1;
    case MT_I32: return 4;
    case MT_I64: return 8;
    case MT_F32: return 4;
    case MT_F64: return 8;
    }
    return 0;
}

const char *mt__dtype_name(int t)
{
    switch ((mt_dtype)t) {
    case MT_U8: return "u8";
    case MT_I32: return "i32";
    case MT_I64: return "i64";
    case MT_F32: return "f32";
    case MT_F64: return "f64";
    }
    return "bad-dtype";
}

const char *mt__op_name(int op)
{
    switch ((mt_op)op) {
    case MT_SUM: return "sum";
    case MT_MEAN: return "mean";
    case MT_MIN: return "min";
    case MT_MAX: return "max";
    }
    return "bad-op";
}


/* to an integer type from an integer one: every source value fits int64_t */
#define INT_FROM_INT(TO, LO, HI, FROM)                                        \
    do {                                                                      \
        TO *d_ = dst;                                                         \
        const FROM *s_ = src;                                                 \
        for (size_t i_ = 0; i_ < n; i_++) {                                   \
            int64_t v_ = s_[i_];                                              \
            d_[i_] = v_ < (LO) ? (LO) : v_ > (HI) ? (HI) : (TO)v_;            \
        }                                                                     \
    } while (0)

/* to an integer type from a floating one: NaN is 0, beyond the limits saturates, the
 * rest truncates toward zero. (double)HI may round up to HI + 1 (int64: 2^63), so the
 * upper test is >=: every value below it truncates to at most HI. */
#define INT_FROM_FLOAT(TO, LO, HI, FROM)                                      \
    do {                                                                      \
        TO *d_ = dst;                                                         \
        const FROM *s_ = src;                                                 \
        for (size_t i_ = 0; i_ < n; i_++) {                                   \
            double v_ = s_[i_];                                               \
            d_[i_] = v_ != v_ ? 0                                             \
                     : v_ <= (double)(LO) ? (LO)                              \
                     : v_ >= (double)(HI) ? (HI)                              \
                                          : (TO)v_;                           \
        }                                                                     \
    } while (0)

#define TO_INT(TO, LO, HI)                                                    \
    switch (from) {                                                           \
    case MT_U8: INT_FROM_INT(TO, LO, HI, uint8_t); break;                     \
    case MT_I32: INT_FROM_INT(TO, LO, HI, int32_t); break;                    \
    case MT_I64: INT_FROM_INT(TO, LO, HI, int64_t); break;                    \
    case MT_F32: INT_FROM_FLOAT(TO, LO, HI, float); break;                    \
    case MT_F64: INT_FROM_FLOAT(TO, LO, HI, double); break;                   \
    }

/* to a floating type: integers round to nearest; float to double is exact */
#define CAST(TO, FROM)                                                        \
    do {                                                                      \
        TO *d_ = dst;                                                         \
        const FROM *s_ = src;                                                 \
        for (size_t i_ = 0; i_ < n; i_++)                                     \
            d_[i_] = (TO)s_[i_];                                              \
    } while (0)

void mt__convert(void *dst, mt_dtype to, const void *src, mt_dtype from, size_t n)
{
    if (to == from) {
        memcpy(dst, src, n * mt_dtype_size(to));
        return;
    }
    switch (to) {
    case MT_U8: TO_INT(uint8_t, 0, UINT8_MAX); break;
    case MT_I32: TO_INT(int32_t, INT32_MIN, INT32_MAX); break;
    case MT_I64: TO_INT(int64_t, INT64_MIN, INT64_MAX); break;
    case MT_F32:
        switch (from) {
        case MT_U8: CAST(float, uint8_t); break;
        case MT_I32: CAST(float, int32_t); break;
        case MT_I64: CAST(float, int64_t); break;
        case MT_F32: break;
        case MT_F64: {
            /* beyond float's range: +-inf (HDF5's rule; the C cast is undefined there) */
            float *d = dst;
            const double *s = src;
            for (size_t i = 0; i < n; i++)
                d[i] = s[i] > FLT_MAX ? INFINITY : s[i] < -FLT_MAX ? -INFINITY : (float)s[i];
            break;
        }
        }
        break;
    case MT_F64:
        switch (from) {
        case MT_U8: CAST(double, uint8_t); break;
        case MT_I32: CAST(double, int32_t); break;
        case MT_I64: CAST(double, int64_t); break;
        case MT_F32: CAST(double, float); break;
        case MT_F64: break;
        }
        break;
    }
}
