/*
 * trace.h -- the timeline of a step: spans written per rank in the Chrome trace-event
 * format (Perfetto, chrome://tracing). Not installed.
 *
 * An instrumentation point is one line at the top of a function or block:
 *
 *     MT__TRACE("collective", "allreduce");
 *
 * which opens a span that closes by itself when the block is left, whatever the return
 * path (a cleanup attribute), so no error path can leave a span open. With tracing off the
 * cost is one relaxed load of a global flag and a predictable branch: no clock is read and
 * nothing is stored. The flag changes only in mt__trace_start / mt__trace_stop.
 *
 * Categories: "data", "compute" (the training thread's time between two library calls),
 * "collective", "agree", "fusion" (a bucket on the fusion thread), "fusion_wait",
 * "report", "checkpoint". cat and name must be string literals (they are kept, not copied).
 */
#ifndef MT_TRACE_H
#define MT_TRACE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

extern atomic_int mt__trace_on;

typedef struct {
    int64_t t0; /* 0: this span is not recorded */
    unsigned gen;
    const char *cat, *name;
    int64_t arg;
} mt__trace_span;

/* Local. Starts tracing this process when want is true or MT_TRACE is set (and not "0"):
 * events go to <run_dir>/trace/rank_<rank>.json, which this rank creates itself. The calling
 * thread is the training thread (its gaps between library calls are "compute"). Tracing is
 * diagnostic: a failure to open the file is a warning on stderr and the run goes on
 * untraced. */
void mt__trace_start(bool want, const char *run_dir, int rank);
/* Local. Writes what the threads still hold and closes the file; no-op when not tracing. */
void mt__trace_stop(void);
/* Local, rank 0, once every rank's mt__trace_stop has returned: <run_dir>/trace/job.json,
 * every rank's events of this fit in one file (each rank its own pid), as Horovod's
 * timeline is one file (an earlier fit's stays as job.<k>.json); a rank file missing or
 * cut short is left out with a warning. */
int mt__trace_merge(const char *run_dir, int nranks);
/* Local. Names the calling thread in traces ("fusion"); name must be a literal. Cheap
 * with tracing off (a thread-local store). */
void mt__trace_thread(const char *name);
/* The path of the file being written, or NULL (for tests). */
const char *mt__trace_path(void);

mt__trace_span mt__trace_begin_(const char *cat, const char *name, int64_t arg);
void mt__trace_end_(mt__trace_span *s);

static inline mt__trace_span mt__trace_begin(const char *cat, const char *name, int64_t arg)
{
    if (__builtin_expect(atomic_load_explicit(&mt__trace_on, memory_order_relaxed), 0))
        return mt__trace_begin_(cat, name, arg);
    return (mt__trace_span){0};
}

static inline void mt__trace_end(mt__trace_span *s)
{
    if (__builtin_expect(s->t0 != 0, 0))
        mt__trace_end_(s);
}

#define MT__TRACE_CAT2(a, b) a##b
#define MT__TRACE_CAT(a, b) MT__TRACE_CAT2(a, b)
#if defined(__GNUC__)
/* A span from here to the end of the enclosing block; arg is shown in the event's args. */
#define MT__TRACE_ARG(cat, name, arg)                                                   \
    mt__trace_span MT__TRACE_CAT(mt__span_, __LINE__)                                  \
        __attribute__((cleanup(mt__trace_end), unused)) =                              \
            mt__trace_begin((cat), (name), (int64_t)(arg))
#else
#define MT__TRACE_ARG(cat, name, arg) ((void)0)
#endif
#define MT__TRACE(cat, name) MT__TRACE_ARG(cat, name, -1)

#endif
