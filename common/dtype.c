/*
 * dtype.c -- element types and reduction ops: sizes and names, shared by every layer.
 */
#include "common.h"

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

