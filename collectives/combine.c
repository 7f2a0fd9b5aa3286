/*
 * combine.c -- the element-wise combining that MPI's built-in operations cannot do inside
 * one message: a typed reduction of a small payload carried in the agreement's own
 * message (agree.c), and the per-rank statistics of a report (min, max, sum and count of
 * each numeric metric, report.c), either in the agreement's message too or, when they do
 * not fit there, in one MPI_Reduce of their own (mt__reduce_stats).
 *
 * Every rule here is commutative and gives the same bits whichever side a value comes
 * from, so every rank of an allreduce ends with the same result: integer sums wrap (as
 * MPI_SUM does in practice, without C's signed overflow), a NaN on either side of a
 * floating-point minimum or maximum wins (a comparison alone would keep whichever side
 * the NaN was not on, and two ranks could end with different answers), the minimum of
 * -0 and +0 is -0 and their maximum +0, and a floating-point sum that is NaN is the one
 * NaN of NAN.
 *
 * Statistics are quads of doubles {min, max, sum, n} per key; a rank whose value is
 * absent or not finite contributes {+inf, -inf, 0, 0}, so the quads of the ranks that
 * have a finite value combine to their spread and their count. In the agreement's frame,
 * up to 6 keys travel as quads; 7 and 8 as triples {min, max, sum}, the count left out so
 * that they fit in its 192 bytes: there an absent value is {+inf, -inf, NaN}, and a NaN
 * sum (any NaN, or +inf + -inf from finite values past the range) comes out as the one
 * NaN of NAN, the same bits on every rank; the caller reduces the quads instead when a
 * sum is not finite (a rank lacked the key, or the sum is out of range).
 */
#include "collectives.h"
#include "position.h"

#include <math.h>
#include <pthread.h>

#define MINMAX(T, a, b, op)                                                    \
    for (size_t i = 0; i < n; i++)                                             \
        if ((a)[i] op (b)[i])                                                  \
            (b)[i] = (a)[i];

/* Of x == y (only -0 and +0 differ then), the minimum is the one with the sign bit, the
 * maximum the one without, whichever side each came from (as IEEE 754-2019's minimum and
 * maximum); a comparison alone would keep y, so ranks holding -0 and +0 on opposite sides
 * would end with different bits. */
#define FMINMAX(T, a, b, op)                                                   \
    for (size_t i = 0; i < n; i++) {                                           \
        T x = (a)[i], y = (b)[i];                                              \
        (b)[i] = isnan(x) || isnan(y) ? (T)NAN                                 \
                 : x == y             ? ((signbit(x) != 0) == (0 op 1) ? x : y)     \
                 : x op y             ? x : y;                                 \
    }

#define SUM(T, U, a, b)                                                        \
    for (size_t i = 0; i < n; i++)                                             \
        (b)[i] = (T)((U)(b)[i] + (U)(a)[i]);

/* a NaN sum is the one NaN of NAN: of two NaNs, the processor keeps the first operand's
 * sign and payload, which is each rank's own */
#define FSUM(a, b)                                                             \
    for (size_t i = 0; i < n; i++) {                                           \
        (b)[i] += (a)[i];                                                      \
        if (isnan((b)[i]))                                                     \
            (b)[i] = NAN;                                                      \
    }

void mt__combine_reduce(const void *in, void *inout, size_t n, int dtype, int op)
{
    bool sum = op == MT_SUM || op == MT_MEAN, lo = op == MT_MIN;
    switch (dtype) {
    case MT_U8: {
        const uint8_t *a = in;
        uint8_t *b = inout;
        if (sum) { SUM(uint8_t, unsigned, a, b) } else if (lo) { MINMAX(uint8_t, a, b, <) }
        else { MINMAX(uint8_t, a, b, >) }
        break;
    }
    case MT_I32: {
        const int32_t *a = in;
        int32_t *b = inout;
        if (sum) { SUM(int32_t, uint32_t, a, b) } else if (lo) { MINMAX(int32_t, a, b, <) }
        else { MINMAX(int32_t, a, b, >) }
        break;
    }
    case MT_I64: {
        const int64_t *a = in;
        int64_t *b = inout;
        if (sum) { SUM(int64_t, uint64_t, a, b) } else if (lo) { MINMAX(int64_t, a, b, <) }
        else { MINMAX(int64_t, a, b, >) }
        break;
    }
    case MT_F32: {
        const float *a = in;
        float *b = inout;
        if (sum) { FSUM(a, b) } else if (lo) { FMINMAX(float, a, b, <) }
        else { FMINMAX(float, a, b, >) }
        break;
    }
    case MT_F64: {
        const double *a = in;
        double *b = inout;
        if (sum) { FSUM(a, b) } else if (lo) { FMINMAX(double, a, b, <) }
        else { FMINMAX(double, a, b, >) }
        break;
    }
    }
}

/* The statistics' minimum and maximum of two values that are never NaN (a value not finite
 * is absent), -0 below +0 whichever side each came from (see FMINMAX). */
static double lower(double a, double b)
{
    return a < b || (a == b && signbit(a)) ? a : b;
}

static double higher(double a, double b)
{
    return a > b || (a == b && !signbit(a)) ? a : b;
}

void mt__combine_stats(const double *in, double *inout, size_t keys)
{
    for (size_t k = 0; k < keys; k++, in += 4, inout += 4) {
        inout[0] = lower(in[0], inout[0]);
        inout[1] = higher(in[1], inout[1]);
        inout[2] += in[2];
        inout[3] += in[3];
    }
}

void mt__combine_triples(const double *in, double *inout, size_t keys)
{
    for (size_t k = 0; k < keys; k++, in += 3, inout += 3) {
        inout[0] = lower(in[0], inout[0]);
        inout[1] = higher(in[1], inout[1]);
        double s = in[2] + inout[2]; /* commutative to the bit; a NaN made one NaN */
        inout[2] = isnan(s) ? NAN : s;
    }
}

/* MPI's side of the statistics: a datatype of one quad, and the operation over it. */
static MPI_Datatype quad_type = MPI_DATATYPE_NULL;
static MPI_Op stats_op = MPI_OP_NULL;
static int stats_made = MPI_SUCCESS;
static pthread_once_t stats_once = PTHREAD_ONCE_INIT;

static void stats_fn(void *in, void *inout, int *len, MPI_Datatype *type)
{
    (void)type;
    mt__combine_stats(in, inout, (size_t)*len);
}

static void make_stats(void)
{
    if ((stats_made = MPI_Type_contiguous(4, MPI_DOUBLE, &quad_type)) == MPI_SUCCESS &&
        (stats_made = MPI_Type_commit(&quad_type)) == MPI_SUCCESS)
        stats_made = MPI_Op_create(stats_fn, 1, &stats_op);
}

int mt__reduce_stats(mt__comm *c, double *quads, size_t keys)
{
    int rc = MT_OK;
    pthread_once(&stats_once, make_stats);
    if (stats_made != MPI_SUCCESS)
        return mt__mpi_error(stats_made, "MPI_Op_create (report statistics)");
    mt__watch_data();
    MT__CHUNKS(off, n, keys, (size_t)1 << 28)
        MT__MPI(MPI_Reduce(c->rank == 0 ? MPI_IN_PLACE : quads + 4 * off,
                           c->rank == 0 ? quads + 4 * off : NULL, (int)n, quad_type, stats_op,
                           0, c->comm), out);
out:
    mt__watch_leave();
    return rc;
}
