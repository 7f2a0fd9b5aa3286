/*
 * common.h -- internal helpers shared by every layer: error recording and the
 * MT__CHECK / MT__MPI macros. Not installed.
 *
 * Errors are recorded per thread (mt_last_error) at the place they happen; the code
 * travels up as the return value. A function that records an error returns its code.
 */
#ifndef MT_COMMON_H
#define MT_COMMON_H

#include "mpitrain.h"
#include "trace.h"

#include <stdarg.h>

#define MT__MSG_LEN 2048

#if defined(__GNUC__)
#define MT__PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define MT__PRINTF(a, b)
#endif

/* Record a detailed message for code in this thread; returns code. */
int mt__error(int code, const char *fmt, ...) MT__PRINTF(2, 3);
int mt__verror(int code, const char *fmt, va_list ap);
/* Append "\n" + text to the current message (for lists of problems). */
void mt__error_append(const char *fmt, ...) MT__PRINTF(1, 2);
/* Replace the message verbatim. */
void mt__error_set_text(const char *text);
void mt__error_clear(void);

/* Requires a local `int rc` and a label; records the error and jumps. */
#define MT__CHECK(cond, code, label, ...)                                     \
    do {                                                                      \
        if (!(cond)) {                                                        \
            rc = mt__error((code), __VA_ARGS__);                              \
            goto label;                                                       \
        }                                                                     \
    } while (0)

/* Turns an MPI error into MT_EMPI with MPI's own text; requires `int rc` and a label. */
#define MT__MPI(call, label)                                                  \
    do {                                                                      \
        int mt__e = (call);                                                   \
        if (mt__e != MPI_SUCCESS) {                                           \
            rc = mt__mpi_error(mt__e, #call);                                 \
            goto label;                                                       \
        }                                                                     \
    } while (0)

int mt__mpi_error(int mpi_code, const char *what);

/* strdup that records MT_ENOMEM; NULL in gives NULL out. */
char *mt__strdup(const char *s);

const char *mt__dtype_name(int dtype);
const char *mt__op_name(int op);

/* x as text that strtod reads back to x: the shortest of 15 or 17 significant digits,
 * always with a '.' or an exponent; "nan"/"inf" for those. Returns the length. */
int mt__fmt_double(char out[32], double x);

/* Wall-clock seconds (monotonic). */
double mt__now(void);

#endif
