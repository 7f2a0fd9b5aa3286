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
#include <stdio.h>
#include <sys/types.h>

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
/* Two failures in one: the last error's text becomes first's, then "and <that text>" on
 * a line of its own (first: a copy of an earlier error's text). */
void mt__error_after(const char *first);
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

/* Room for at least `need` elements of `size` bytes in the array *arr (a pointer to the
 * array's pointer) of capacity *cap, growing the capacity geometrically (doubling, from
 * 8), so n appends cost O(n). MT_ENOMEM (not recorded: the caller names what it was
 * storing) when out of memory or when the size overflows; *arr and *cap are unchanged
 * then. MT__GROW(p, cap, need) for a typed pointer p. */
int mt__grow(void *arr, size_t *cap, size_t need, size_t size);
#define MT__GROW(p, cap, need) mt__grow(&(p), &(cap), (need), sizeof *(p))

/* The pieces [off, off + n) of [0, total) in order, each at most chunk (> 0) long: the one
 * loop of every transfer made in pieces (MPI counts are int, buffers are bounded).
 *     MT__CHUNKS(off, n, count, chunk) MPI_Bcast(p + off, (int)n, ...);
 * total and chunk are evaluated at every step. */
#define MT__CHUNKS(off, n, total, chunk)                                                   \
    for (size_t off = 0, n = mt__chunk_len(0, (total), (chunk)); off < (total);            \
         off += n, n = mt__chunk_len(off, (total), (chunk)))
static inline size_t mt__chunk_len(size_t off, size_t total, size_t chunk)
{
    return total - off < chunk ? total - off : chunk;
}

/* CRC-32 of len bytes after crc (start from 0), the number zlib's crc32 gives, at memory
 * speed (ISA-L, crc32.c). Thread-safe. */
uint32_t mt__crc32(uint32_t crc, const void *data, size_t len);

/* File-system helpers (files.c); each failure records MT_EIO naming the file and the
 * system's reason. mt__mkdirs: the folder and its parents, and it must be writable.
 * mt__rmtree: a file or folder tree, a link removed and never followed; gone already is
 * fine. mt__write_atomic: dir/name holds text, or keeps its old content (temporary file,
 * fsync, rename, fsync of dir). */
int mt__mkdirs(const char *path);
int mt__fsync_dir(const char *path);
int mt__rmtree(const char *path);
int mt__write_atomic(const char *dir, const char *name, const char *text);
/* Append n bytes to the log f (dir/name, for messages) whole or not at all: a failed write
 * is cut back, so the next append does not land on a partial line. */
int mt__append_whole(FILE *f, const char *dir, const char *name, const char *p, size_t n);
/* Cut a last line that a crash left without its newline; its length in *cut (0 when the
 * file ends in a newline or does not exist). */
int mt__cut_torn_tail(const char *path, off_t *cut);

/* Files of a run directory (files.c): never opened through a symbolic link, only a regular
 * file with one name (a hard link's other name may be anything outside the run), never a
 * FIFO or device (an open that would block). mt__run_open: open(2) with those checks and
 * O_NOFOLLOW | O_CLOEXEC added; with O_CREAT it creates only (O_EXCL: a file already
 * there, link or not, is EEXIST, so nothing the library did not create is truncated;
 * remove a leftover of the library's own first); the descriptor, or a negative MT_E*
 * code recorded naming the file (MT_ENOTFOUND when it does not exist and O_CREAT is not
 * given). mt__run_fopen: the same as a stdio stream; mode "r", "a" (an existing file or
 * a new one), "x" (a new file, for writing). mt__run_check: path is absent (MT_ENOTFOUND,
 * not recorded) or a regular file of one name (MT_OK), else the error naming it. */
int mt__run_open(const char *path, int flags, mode_t mode);
FILE *mt__run_fopen(const char *path, const char *mode, int *rc);
int mt__run_check(const char *path);

const char *mt__dtype_name(int dtype);
const char *mt__op_name(int op);
/* Convert n elements from one dtype to another in memory, by HDF5's rule for its native
 * types, so a column converted here and one HDF5 converted as it read are the same:
 * integers saturate at the target's limits, a floating value truncates toward zero and
 * saturates (NaN becomes 0), a double beyond float's range becomes +-inf. */
void mt__convert(void *dst, mt_dtype to, const void *src, mt_dtype from, size_t n);

/* x as text that strtod reads back to x: the shortest of 15 or 17 significant digits,
 * always with a '.' or an exponent; "nan"/"inf" for those. Returns the length. */
int mt__fmt_double(char out[32], double x);

/* Wall-clock seconds (monotonic). */
double mt__now(void);

/* ------------------------------------------------------------ input from outside
 * (parse.c) Every number from a flag, the environment or a file: the whole string in
 * base 10 (no blanks, no '+', no "0x"; '-' only for signed), inside [min, max]; else
 * MT_EINVAL naming `what` (the flag or variable) and the text. *out changes only on
 * success. */
int mt__parse_i64(const char *what, const char *s, int64_t min, int64_t max, int64_t *out);
int mt__parse_u64(const char *what, const char *s, uint64_t min, uint64_t max, uint64_t *out);
int mt__parse_int(const char *what, const char *s, int min, int max, int *out);
int mt__parse_size(const char *what, const char *s, size_t min, size_t max, size_t *out);
int mt__parse_f64(const char *what, const char *s, double min, double max, double *out);
/* The environment variable `var`: unset or empty leaves *out (the default) and is MT_OK;
 * a value that does not parse is MT_EINVAL naming the variable, never ignored. */
int mt__env_i64(const char *var, int64_t min, int64_t max, int64_t *out);
int mt__env_u64(const char *var, uint64_t min, uint64_t max, uint64_t *out);
int mt__env_f64(const char *var, double min, double max, double *out);
int mt__env_bool(const char *var, bool *out); /* "0" or "1" */
/* The one table of the fusion's algorithm and compression words, in mt_fusion_algo's and
 * mt_compression's order: the knobs MT_FUSION_ALGO and MT_FUSION_COMPRESS, the messages,
 * mt_fusion_algo_word and mt_compression_word (the trainer's flags, the benchmark) all
 * read it. */
#define MT__FUSION_ALGO_MAP(XX) XX("auto") XX("flat") XX("shm") XX("hier")
#define MT__COMPRESSION_MAP(XX) XX("none") XX("fp16") XX("bf16")

/* Mix v into a 64-bit hash (MurmurHash3's finaliser; h 0 starts one): the signatures of
 * collective calls, checkpoints, data options and fusion registrations. */
uint64_t mt__sig_mix(uint64_t h, uint64_t v);

/* One of the '|'-separated words (its index in *out): "MT_FUSION_ALGO: 'x' is not one of
 * auto, flat, shm, hier" otherwise. */
int mt__env_word(const char *var, const char *words, int *out);

/* The environment knobs (MT_CHECKPOINT_BUFFER, MT_FUSION_BYTES, ...): one table of names
 * and bounds. mt__env_validate (runtime, at the start of fit) refuses bad values with
 * one error listing them; where a knob is used, mt__env_knob_* gives its value, or the
 * default when unset or bad. */
enum { MT__KNOB_BYTES = 1, MT__KNOB_BOOL, MT__KNOB_SECONDS, MT__KNOB_WORD };
typedef struct {
    const char *name;
    int kind;
    uint64_t min, max;
    const char *words;    /* MT__KNOB_WORD: the values, '|'-separated, in enum order */
} mt__env_knob;
/* The words of MT_FUSION_ALGO and MT_FUSION_COMPRESS, '|'-separated, from the one table
 * (MT__FUSION_ALGO_MAP, words.c). */
#define MT__BAR_WORD(w) "|" w
#define MT__FUSION_ALGO_WORDS (MT__FUSION_ALGO_MAP(MT__BAR_WORD) + 1)
#define MT__FUSION_COMPRESS_WORDS (MT__COMPRESSION_MAP(MT__BAR_WORD) + 1)
extern const mt__env_knob mt__env_knobs[]; /* ends with a NULL name */
uint64_t mt__env_knob_u64(const char *name, uint64_t dflt);
double mt__env_knob_f64(const char *name, double dflt);
bool mt__env_knob_bool(const char *name, bool dflt);

/* A name that becomes a path component or a key (run name, checkpoint array or file
 * name, metric or metadata key): 1 to max bytes, not "." or "..", no '/', no control
 * characters (newlines, tabs, escapes). MT_EINVAL naming `field` otherwise. Used on input
 * and again on names read back from files. */
int mt__check_name(const char *field, const char *name, size_t max);
/* The same for text that never becomes a path (metric keys): '/' allowed. */
int mt__check_text(const char *field, const char *text, size_t max);

/* ------------------------------------------------------------ processes (proc.c)
 * A pid and its start time (clock ticks after boot, field 22 of /proc/PID/stat) name one
 * process for the life of the machine; a pid alone may be reused. */
/* State letter and start time of process pid; -1 (errno set) when /proc cannot say. */
int mt__process_stat(int pid, char *state, uint64_t *start);
/* Process pid's command name (/proc/PID/comm, at most 15 bytes) in name; "" if unreadable. */
void mt__process_name(int pid, char *name, size_t len);
/* Process pid's start time, 0 if unreadable. */
uint64_t mt__process_start(int pid);
/* Process pid started at start has exited (a zombie counts) or its pid is another's. */
bool mt__process_gone(int pid, uint64_t start);
/* Process pid started at start is stopped (SIGSTOP, or by a tracer). */
bool mt__process_stopped(int pid, uint64_t start);
/* This process's pid namespace (the inode of /proc/self/ns/pid), 0 if unreadable. */
uint64_t mt__pid_space(void);

/* ------------------------------------------------------------ shared memory (shm.c)
 * Every POSIX shared-memory segment of the library is made by mt__shm_create, whose name
 * tells who made it, so that the segments killed jobs leave behind can be found and
 * removed (mt__shm_reap, once per process from mt_init; mt_stale_shm). */
#define MT__SHM_DIR "/dev/shm"
#define MT__SHM_NAME_LEN 96
/* Local. A new segment of KIND ("spawn", "watch" or "fusion": the kinds mt__shm_reap
 * knows), created O_EXCL, mode 0600: its name (at most MT__SHM_NAME_LEN bytes, '/'
 * first) in name, the descriptor returned, or -1 with errno. The name is recorded as this
 * process's until mt__shm_unlink removes it. */
int mt__shm_create(const char *kind, char *name, size_t len);
/* Local. shm_unlink(name), and it is no longer recorded as this process's. */
void mt__shm_unlink(const char *name);
/* Local. Removes every name this process created and still holds: it ends the job. */
void mt__shm_unlink_own(void);
/* Local. Calls fn (if not NULL) for each segment in dir whose creator is gone (see shm.c
 * for what counts), having removed it first if `remove`. Returns how many, or -1 (errno)
 * when dir cannot be read; a dir that does not exist has none. */
int mt__shm_reap(const char *dir, bool remove, mt_stale_fn fn, void *arg);
/* Local. mt__shm_reap of /dev/shm, removing, the first time a process calls it. */
void mt__shm_reap_once(void);

/* ------------------------------------------------------------ live handles (live.c)
 * Handles given out and not yet taken back, by value (the memory behind a pointer is
 * never read): public entry points check a context, shard, batch or checkpoint is live
 * before using it, so one kept past fit or freed is MT_EINVAL instead of a use after
 * free. */
enum { MT__LIVE_CONTEXT = 1, MT__LIVE_SHARD, MT__LIVE_BATCH, MT__LIVE_CHECKPOINT,
       MT__LIVE_FUSION };
int mt__live_add(const void *p, int kind);
/* For handles made collectively: reserve (may fail: agree on it), then add (cannot fail)
 * or unreserve. */
int mt__live_reserve(void);
void mt__live_add_reserved(const void *p, int kind);
void mt__live_unreserve(void);
void mt__live_remove(const void *p);
bool mt__live(const void *p, int kind);

#endif
