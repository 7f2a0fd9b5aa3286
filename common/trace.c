/*
 * trace.c -- the per-rank timeline (trace.h): spans kept in per-thread buffers and written
 * as Chrome trace events to <run_dir>/trace/rank_<R>.json.
 *
 * Why it is built this way:
 * - The training thread, the fusion thread and the watchdog record at the same time, so
 *   each thread owns a buffer (found through a thread-local pointer) guarded by its own
 *   mutex, which only that thread takes on the hot path: no lock is shared between
 *   threads while recording. Buffers sit in one list (taken only when a thread first
 *   records, or when it ends) and are never freed: a thread that read the flag just before
 *   mt__trace_stop may still write into its buffer, and that must stay valid memory.
 * - A full buffer, or the buffer of a thread that ends, is appended to the file under the
 *   file's mutex; mt__trace_stop drains the rest. The file is streamed, so a rank that dies
 *   leaves a trace that Perfetto still reads (the format allows a missing closing "]}").
 * - Every rank writes its own file: the one exception to "only rank 0 writes the run
 *   directory", since the trace is a diagnostic of each rank and must not cost a gather.
 * - Timestamps are CLOCK_REALTIME microseconds, so files of one run line up when opened
 *   together (as far as the nodes' clocks agree).
 * - Each span records its self time (its duration less its children's) so a summary can
 *   add up time per category without counting an agreement inside a collective twice.
 */
#include "common.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CAP 1024   /* events per thread before the buffer goes to the file */
#define MAX_DEPTH 32

atomic_int mt__trace_on;

typedef struct {
    const char *cat, *name;
    int64_t ts, dur, self, arg;
} event;

typedef struct tbuf {
    struct tbuf *next;
    pthread_mutex_t mu;
    bool owned;     /* a live thread points at it */
    bool train;     /* the training thread: its gaps are "compute" */
    unsigned gen;   /* the session its state belongs to */
    int tid;
    const char *name;
    int n, depth;
    int64_t child[MAX_DEPTH]; /* children's time per open span */
    int64_t last_end;         /* end of the last top-level span (training thread) */
    event ev[CAP];
} tbuf;

static pthread_mutex_t list_mu = PTHREAD_MUTEX_INITIALIZER;
static tbuf *buffers;
static int next_tid = 1;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static pthread_key_t key;

static pthread_mutex_t file_mu = PTHREAD_MUTEX_INITIALIZER;
static FILE *file;
static char path[4096];
static int rank;
static bool first_event;
static unsigned gen; /* changes at each start: older spans and buffer states are stale */

static _Thread_local tbuf *mine;
static _Thread_local const char *my_name;

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void put_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

/* Call with file_mu held. */
static void sep(void)
{
    fputs(first_event ? "\n" : ",\n", file);
    first_event = false;
}

static void write_thread_name(const tbuf *b)
{
    char def[32];
    snprintf(def, sizeof def, "thread %d", b->tid);
    sep();
    fprintf(file, "{\"name\":\"thread_name\",\"ph\":\"M\",\"ts\":0,\"pid\":%d,\"tid\":%d,\"args\":{\"name\":",
            rank, b->tid);
    put_string(file, b->name ? b->name : def);
    fputs("}}", file);
}

/* Append b's events to the file and empty b (b->mu held). */
static void flush(tbuf *b, bool name_it)
{
    pthread_mutex_lock(&file_mu);
    if (file && b->gen == gen) {
        for (int i = 0; i < b->n; i++) {
            const event *e = &b->ev[i];
            sep();
            fprintf(file, "{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%lld,\"dur\":%lld,"
                    "\"pid\":%d,\"tid\":%d,\"args\":{\"self_us\":%lld",
                    e->name, e->cat, (long long)e->ts, (long long)e->dur, rank, b->tid,
                    (long long)e->self);
            if (e->arg >= 0)
                fprintf(file, ",\"arg\":%lld", (long long)e->arg);
            fputs("}}", file);
        }
        if (name_it)
            write_thread_name(b);
    }
    pthread_mutex_unlock(&file_mu);
    b->n = 0;
}

/* A thread ends: its events go to the file and its buffer to the next thread. */
static void thread_gone(void *p)
{
    tbuf *b = p;
    pthread_mutex_lock(&b->mu);
    if (b->gen == gen)
        flush(b, true);
    b->n = 0;
    b->gen = gen - 1; /* written: mt__trace_stop must not name it again */
    pthread_mutex_unlock(&b->mu);
    pthread_mutex_lock(&list_mu);
    b->owned = false;
    pthread_mutex_unlock(&list_mu);
}

static void make_key(void)
{
    pthread_key_create(&key, thread_gone);
}

/* Reset b for this session (b->mu held). */
static void renew(tbuf *b)
{
    if (b->gen == gen)
        return;
    b->gen = gen;
    b->n = b->depth = 0;
    b->last_end = 0;
    b->train = false;
}

/* The calling thread's buffer, claimed or made on its first event; NULL out of memory. */
static tbuf *my_buffer(void)
{
    if (mine)
        return mine;
    pthread_once(&key_once, make_key);
    pthread_mutex_lock(&list_mu);
    tbuf *b = buffers;
    while (b && b->owned)
        b = b->next;
    if (!b && (b = calloc(1, sizeof *b))) {
        pthread_mutex_init(&b->mu, NULL);
        b->next = buffers;
        buffers = b;
    }
    if (b) {
        b->owned = true;
        b->tid = next_tid++; /* a new thread is a new track, even in a reused buffer */
        b->name = my_name;
        b->gen = gen - 1; /* renewed on first use */
    }
    pthread_mutex_unlock(&list_mu);
    if (b) {
        pthread_setspecific(key, b);
        mine = b;
    }
    return b;
}

void mt__trace_thread(const char *name)
{
    my_name = name;
    if (mine) {
        pthread_mutex_lock(&mine->mu);
        mine->name = name;
        pthread_mutex_unlock(&mine->mu);
    }
}

static void record(tbuf *b, const char *cat, const char *name, int64_t ts, int64_t dur,
                   int64_t self, int64_t arg)
{
    if (b->n == CAP)
        flush(b, false);
    b->ev[b->n++] = (event){.cat = cat, .name = name, .ts = ts, .dur = dur, .self = self,
                            .arg = arg};
}

mt__trace_span mt__trace_begin_(const char *cat, const char *name, int64_t arg)
{
    mt__trace_span s = {0};
    tbuf *b = my_buffer();
    if (!b)
        return s;
    pthread_mutex_lock(&b->mu);
    renew(b);
    int64_t t = now_us();
    if (b->depth == 0 && b->train && b->last_end > 0 && t > b->last_end)
        record(b, "compute", "compute", b->last_end, t - b->last_end, t - b->last_end, -1);
    if (b->depth < MAX_DEPTH)
        b->child[b->depth] = 0;
    b->depth++;
    s = (mt__trace_span){.t0 = t, .gen = b->gen, .cat = cat, .name = name, .arg = arg};
    pthread_mutex_unlock(&b->mu);
    return s;
}

void mt__trace_end_(mt__trace_span *s)
{
    tbuf *b = mine;
    if (!b)
        return;
    pthread_mutex_lock(&b->mu);
    if (s->gen == b->gen && b->depth > 0) {
        int64_t t = now_us(), dur = t - s->t0;
        if (dur < 0)
            dur = 0; /* the wall clock stepped back */
        b->depth--;
        int64_t self = b->depth < MAX_DEPTH ? dur - b->child[b->depth] : dur;
        if (b->depth > 0 && b->depth - 1 < MAX_DEPTH)
            b->child[b->depth - 1] += dur;
        record(b, s->cat, s->name, s->t0, dur, self < 0 ? 0 : self, s->arg);
        if (b->depth == 0)
            b->last_end = t;
    }
    pthread_mutex_unlock(&b->mu);
}

static int make_dir(const char *dir)
{
    if (mkdir(dir, 0777) == 0 || errno == EEXIST)
        return 0;
    return -1;
}

/* A run started again under its name (a resume) keeps the trace of the attempt before as
 * rank_<R>.<k>.json, k = 1, 2, ...: the attempt that failed is the one worth reading. */
static void keep_earlier(const char *dir, int r)
{
    char old[4200];
    if (access(path, F_OK) != 0)
        return;
    for (int k = 1; k < 100000; k++) {
        snprintf(old, sizeof old, "%s/rank_%d.%d.json", dir, r, k);
        if (access(old, F_OK) != 0) {
            if (rename(path, old) != 0)
                fprintf(stderr, "mpitrain: rank %d: cannot keep the earlier trace %s as %s: %s\n",
                        r, path, old, strerror(errno));
            return;
        }
    }
}

void mt__trace_start(bool want, const char *run_dir, int r)
{
    const char *env = getenv("MT_TRACE");
    if (!want && !(env && *env && strcmp(env, "0") != 0))
        return;
    if (atomic_load(&mt__trace_on))
        mt__trace_stop();
    char dir[4096], host[256] = "";
    snprintf(dir, sizeof dir, "%s/trace", run_dir);
    if (gethostname(host, sizeof host - 1) != 0)
        snprintf(host, sizeof host, "unknown");
    pthread_mutex_lock(&file_mu);
    snprintf(path, sizeof path, "%s/rank_%d.json", dir, r);
    keep_earlier(dir, r);
    const char *bad = make_dir(dir) != 0 ? dir : !(file = fopen(path, "w")) ? path : NULL;
    if (bad) {
        fprintf(stderr, "mpitrain: rank %d: tracing off: cannot create %s: %s\n", r, bad,
                strerror(errno));
        path[0] = '\0';
        pthread_mutex_unlock(&file_mu);
        return;
    }
    rank = r;
    gen++;
    first_event = true;
    fprintf(file, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"rank\":%d,\"host\":", r);
    put_string(file, host);
    fputs(",\"clock\":\"CLOCK_REALTIME microseconds\"},\n\"traceEvents\":[", file);
    char label[300];
    snprintf(label, sizeof label, "rank %d (%s)", r, host);
    sep();
    fprintf(file, "{\"name\":\"process_name\",\"ph\":\"M\",\"ts\":0,\"pid\":%d,\"tid\":0,\"args\":{\"name\":",
            r);
    put_string(file, label);
    fputs(",\"host\":", file);
    put_string(file, host);
    fprintf(file, ",\"rank\":%d}}", r);
    sep();
    fprintf(file, "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"ts\":0,\"pid\":%d,\"tid\":0,"
            "\"args\":{\"sort_index\":%d}}", r, r);
    pthread_mutex_unlock(&file_mu);
    tbuf *b = my_buffer();
    if (b) {
        pthread_mutex_lock(&b->mu);
        renew(b);
        b->train = true;
        if (!b->name)
            b->name = "train";
        b->last_end = now_us(); /* the user's code from here to the first call is compute */
        pthread_mutex_unlock(&b->mu);
    }
    atomic_store(&mt__trace_on, 1);
}

void mt__trace_stop(void)
{
    if (!atomic_load(&mt__trace_on))
        return;
    atomic_store(&mt__trace_on, 0);
    pthread_mutex_lock(&list_mu);
    for (tbuf *b = buffers; b; b = b->next) {
        pthread_mutex_lock(&b->mu);
        if (b->gen == gen)
            flush(b, true);
        b->gen = gen - 1; /* stale: a late event is dropped */
        pthread_mutex_unlock(&b->mu);
    }
    pthread_mutex_unlock(&list_mu);
    pthread_mutex_lock(&file_mu);
    if (file) {
        fputs("\n]}\n", file);
        if (fclose(file) != 0)
            fprintf(stderr, "mpitrain: rank %d: writing %s: %s\n", rank, path, strerror(errno));
        file = NULL;
    }
    path[0] = '\0';
    pthread_mutex_unlock(&file_mu);
}

const char *mt__trace_path(void)
{
    return path[0] ? path : NULL;
}

/* One rank's file whole in *buf (owned), or -1. */
static long read_whole(const char *name, char **buf)
{
    *buf = NULL;
    FILE *f = fopen(name, "rb");
    long n = -1;
    if (f && fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (*buf = malloc((size_t)n + 1)) && fread(*buf, 1, (size_t)n, f) == (size_t)n)
        (*buf)[n] = '\0';
    else {
        free(*buf);
        *buf = NULL;
        n = -1;
    }
    if (f)
        fclose(f);
    return n;
}

int mt__trace_merge(const char *run_dir, int nranks)
{
    char dir[4096], src[4200], tmp[4200], dst[4200];
    snprintf(dir, sizeof dir, "%s/trace", run_dir);
    snprintf(tmp, sizeof tmp, "%s/.job.json.tmp", dir);
    snprintf(dst, sizeof dst, "%s/job.json", dir);
    FILE *out = fopen(tmp, "w");
    if (!out) {
        fprintf(stderr, "mpitrain: cannot write the job's timeline %s: %s\n", tmp,
                strerror(errno));
        return -1;
    }
    fprintf(out, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"ranks\":%d,"
                 "\"clock\":\"CLOCK_REALTIME microseconds\"},\n\"traceEvents\":[", nranks);
    bool first = true;
    for (int r = 0; r < nranks; r++) {
        char *text = NULL;
        snprintf(src, sizeof src, "%s/rank_%d.json", dir, r);
        const char *from = read_whole(src, &text) < 0 ? NULL : strstr(text, "\"traceEvents\":[");
        const char *end = from ? strstr(from, "\n]}") : NULL; /* absent: the file was cut */
        if (!end)
            fprintf(stderr, "mpitrain: the job's timeline %s leaves out rank %d: %s is %s\n",
                    dst, r, src, text ? "cut short" : "missing");
        else {
            from += strlen("\"traceEvents\":[");
            if (end > from) { /* its events, each after "\n" or ",\n" */
                if (!first)
                    fputc(',', out);
                fwrite(from, 1, (size_t)(end - from), out);
                first = false;
            }
        }
        free(text);
    }
    fputs("\n]}\n", out);
    /* an earlier fit's (the run resumed) stays as job.<k>.json, as its rank files do */
    for (int k = 1; access(dst, F_OK) == 0 && k < 100000; k++) {
        snprintf(src, sizeof src, "%s/job.%d.json", dir, k);
        if (access(src, F_OK) != 0 && rename(dst, src) != 0)
            break;
    }
    if (fclose(out) != 0 || rename(tmp, dst) != 0) {
        fprintf(stderr, "mpitrain: cannot write the job's timeline %s: %s\n", dst,
                strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}
