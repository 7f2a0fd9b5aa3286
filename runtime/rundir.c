/*
 * rundir.c -- the run directory, written by rank 0 only:
 *   run.json      state (status, attempts, failures, kept checkpoints and their metrics,
 *                 latest), replaced atomically: temp file, fsync, rename, fsync folder
 *   params.json   the effective configuration
 *   result.json   one JSON line per report, flushed before mt_report returns
 *   progress.csv  the same rows; rewritten with a wider header when a new key appears
 *   error.txt     on failure (removed when a later attempt ends without one)
 *   run.lock      the owner: one job at a time (below)
 *
 * Ownership: rank 0 takes an exclusive flock(2) on run.lock before it reads or writes
 * anything else in the folder and holds it until fit ends; the lock file names the holder
 * (host, pid, Slurm job, start time) so a second job with the same storage_path and name
 * is refused with that name instead of sharing the folder. The kernel drops the lock
 * when the holder dies however it dies (SIGKILL included), so a crashed job never blocks
 * its rerun. Across nodes this works only where the file system gives flock(2) cluster-
 * wide meaning: local disks, NFSv4 (and NFSv3 with a lock manager), Lustre mounted with
 * -o flock (not -o localflock, which locks per node only), GPFS. Where locks are not
 * supported at all (ENOLCK, EOPNOTSUPP) the run goes on with a warning, unprotected.
 *
 * Every write that fails removes its temporary file and names the file and the system's
 * reason (strerror: "No space left on device").
 */
#include "runtime.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int mt__mkdirs(const char *path)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                return mt__error(MT_EIO, "cannot create %s: %s", buf, strerror(errno));
            *p = '/';
        }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST)
        return mt__error(MT_EIO, "cannot create %s: %s", buf, strerror(errno));
    if (access(buf, W_OK) != 0)
        return mt__error(MT_EIO, "%s is not writable: %s", buf, strerror(errno));
    return MT_OK;
}

int mt__fsync_dir(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY);
    int bad = fd < 0 || fsync(fd) != 0;
    if (fd >= 0)
        close(fd);
    return bad ? mt__error(MT_EIO, "fsync of folder %s failed: %s", path, strerror(errno)) : MT_OK;
}

int mt__rmtree(const char *path)
{
    /* a symbolic link is removed, never followed: a link in a run directory must not
     * take the files it points at with it */
    struct stat top;
    DIR *d = lstat(path, &top) == 0 && S_ISDIR(top.st_mode) ? opendir(path) : NULL;
    if (!d)
        return unlink(path) == 0 || errno == ENOENT
                   ? MT_OK
                   : mt__error(MT_EIO, "cannot remove %s: %s", path, strerror(errno));
    struct dirent *e;
    int rc = MT_OK;
    while ((e = readdir(d)) && !rc) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char sub[4096];
        snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
        struct stat st;
        if (lstat(sub, &st) == 0 && S_ISDIR(st.st_mode))
            rc = mt__rmtree(sub);
        else if (unlink(sub) != 0)
            rc = mt__error(MT_EIO, "cannot remove %s: %s", sub, strerror(errno));
    }
    closedir(d);
    if (!rc && rmdir(path) != 0)
        rc = mt__error(MT_EIO, "cannot remove %s: %s", path, strerror(errno));
    return rc;
}

int mt__write_atomic(const char *dir, const char *name, const char *text)
{
    char tmp[4096], final[4096];
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp", dir, name);
    snprintf(final, sizeof final, "%s/%s", dir, name);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return mt__error(MT_EIO, "cannot write %s: %s", tmp, strerror(errno));
    int rc = MT_OK;
    size_t len = strlen(text), done = 0;
    while (done < len && !rc) {
        ssize_t n = write(fd, text + done, len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            rc = mt__error(MT_EIO, "write to %s failed: %s", tmp,
                           n < 0 ? strerror(errno) : "no progress");
        else
            done += (size_t)n;
    }
    if (!rc && fsync(fd) != 0)
        rc = mt__error(MT_EIO, "fsync of %s failed: %s", tmp, strerror(errno));
    if (close(fd) != 0 && !rc)
        rc = mt__error(MT_EIO, "close of %s failed: %s", tmp, strerror(errno));
    if (!rc && rename(tmp, final) != 0)
        rc = mt__error(MT_EIO, "rename %s to %s failed: %s", tmp, final, strerror(errno));
    if (rc) { /* the old file stays as it was; no temporary is left behind */
        unlink(tmp);
        return rc;
    }
    return mt__fsync_dir(dir);
}

/* ------------------------------------------------------------ ownership (run.lock) */

/* The holder's line: pid, host, Slurm job when there is one, start time. */
static void holder_line(char *b, size_t n)
{
    char host[256] = "?", when[64] = "?", job[96] = "";
    gethostname(host, sizeof host - 1);
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm))
        strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm);
    const char *sj = getenv("SLURM_JOB_ID"), *st = getenv("SLURM_STEP_ID");
    if (sj && *sj)
        snprintf(job, sizeof job, ", Slurm job %s%s%s", sj, st && *st ? " step " : "",
                 st && *st ? st : "");
    snprintf(b, n, "pid %d on host %s%s, started %s\n", (int)getpid(), host, job, when);
}

int mt__run_lock(const char *dir, int *fd_out)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/run.lock", dir);
    *fd_out = -1;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return mt__error(MT_EIO, "cannot open %s: %s", path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        if (e == ENOLCK || e == EOPNOTSUPP || e == ENOSYS) {
            fprintf(stderr, "mpitrain: warning: cannot lock %s: %s; this file system does not "
                    "support flock, so a second job with the same name would not be refused\n",
                    path, strerror(e));
            close(fd);
            return MT_OK;
        }
        char holder[512] = "";
        ssize_t n = e == EWOULDBLOCK ? pread(fd, holder, sizeof holder - 1, 0) : -1;
        close(fd);
        if (e != EWOULDBLOCK)
            return mt__error(MT_EIO, "cannot lock %s: %s", path, strerror(e));
        holder[n > 0 ? n : 0] = '\0';
        holder[strcspn(holder, "\n")] = '\0';
        return mt__error(MT_EINVAL, "%s is in use by another job (%s): a run directory has one "
                         "owner at a time; wait for that job to end, or choose another --name",
                         dir, holder[0] ? holder : "it has not written its name yet");
    }
    char line[512];
    holder_line(line, sizeof line);
    size_t len = strlen(line);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, line, len, 0) != (ssize_t)len) {
        int e = errno;
        close(fd);
        return mt__error(MT_EIO, "cannot write %s: %s", path, strerror(e));
    }
    *fd_out = fd;
    return MT_OK;
}

void mt__run_unlock(int *fd)
{
    if (*fd >= 0)
        close(*fd); /* the kernel drops the flock with the last descriptor */
    *fd = -1;
}

/* Everything in dir but run.lock (overwrite: the folder stays locked while it empties). */
int mt__run_clear(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return mt__error(MT_EIO, "cannot read %s: %s", dir, strerror(errno));
    struct dirent *e;
    int rc = MT_OK;
    while ((e = readdir(d)) && !rc) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || !strcmp(e->d_name, "run.lock"))
            continue;
        char sub[4096];
        snprintf(sub, sizeof sub, "%s/%s", dir, e->d_name);
        rc = mt__rmtree(sub);
    }
    closedir(d);
    return rc;
}

/* ------------------------------------------------------------ run.json */

void mt__run_close_logs(mt__rundir *r)
{
    for (int i = 0; i < r->ncsv; i++)
        free(r->csv_keys[i]);
    free(r->csv_keys);
    r->csv_keys = NULL;
    r->ncsv = 0;
    if (r->result)
        fclose(r->result);
    if (r->csv)
        fclose(r->csv);
    r->result = r->csv = NULL;
}

void mt__run_free(mt__rundir *r)
{
    if (!r)
        return;
    mt__run_reap_wait(r);
    for (int i = 0; i < r->nkept; i++)
        mt_metrics_free(&r->kept[i].metrics);
    free(r->kept);
    mt__run_close_logs(r);
    free(r->dir);
    memset(r, 0, sizeof *r);
}

json_t *mt__run_to_json(const mt__rundir *r)
{
    json_t *kept = json_array();
    for (int i = 0; kept && i < r->nkept; i++) {
        const mt__kept *k = &r->kept[i];
        /* out of memory: no run.json at all rather than one that forgets a checkpoint */
        if (json_array_append_new(kept, json_pack("{s:s, s:I, s:I, s:o}", "name", k->name,
                                                  "index", (json_int_t)k->index,
                                                  "training_iteration", (json_int_t)k->iteration,
                                                  "metrics", mt__metrics_to_json(k->metrics)))) {
            json_decref(kept);
            return NULL;
        }
    }
    return json_pack("{s:s, s:i, s:i, s:I, s:I, s:f, s:o, s:s?}", "status", r->status,
                     "attempts", r->attempts, "failures", r->failures, "next_checkpoint_index",
                     (json_int_t)r->next_index, "training_iteration", (json_int_t)r->iteration,
                     "time_total_s", r->time_total, "checkpoints", kept, "latest",
                     r->latest >= 0 ? r->kept[r->latest].name : NULL);
}

/* jansson reports an allocation that failed while parsing as a syntax error, or not at
 * all: its allocations go through json_alloc (chained to the allocator in place), which
 * notes a failure for this thread. */
static json_malloc_t json_next_malloc;
static _Thread_local bool json_failed;
static pthread_once_t json_once = PTHREAD_ONCE_INIT;

static void *json_alloc(size_t n)
{
    void *p = json_next_malloc(n);
    if (!p)
        json_failed = true;
    return p;
}

static void json_hook(void)
{
    json_free_t next_free;
    json_get_alloc_funcs(&json_next_malloc, &next_free);
    json_set_alloc_funcs(json_alloc, next_free);
}

void mt__json_watch(void)
{
    pthread_once(&json_once, json_hook);
    json_failed = false;
}

bool mt__json_oom(const json_error_t *e)
{
    return json_failed || (e && json_error_code(e) == json_error_out_of_memory);
}

char *mt__json_dumps(const json_t *j, size_t flags)
{
    char *text = j ? json_dumps(j, flags) : NULL;
    json_t *back = text ? json_loads(text, 0, NULL) : NULL;
    if (text && !json_equal((json_t *)j, back)) {
        free(text);
        text = NULL;
    }
    json_decref(back);
    return text;
}

int mt__run_save(const mt__rundir *r)
{
    json_t *j = mt__run_to_json(r);
    char *text = mt__json_dumps(j, JSON_INDENT(2));
    json_decref(j);
    if (!text)
        return mt__error(MT_ENOMEM, "out of memory writing run.json");
    int rc = mt__write_atomic(r->dir, "run.json", text);
    free(text);
    return rc;
}

/* A checkpoint entry's name is a folder of this run directory that may be opened, resumed
 * from and deleted: only the names commits make (checkpoint_ and at least six digits)
 * are accepted, so "../victim" in a damaged or hostile run.json is a corrupt file, not
 * a path outside the run. */
static bool stored_name_ok(const char *name)
{
    size_t n = strlen(name);
    if (n < 17 || n >= sizeof ((mt__kept *)0)->name || strncmp(name, "checkpoint_", 11))
        return false;
    for (const char *p = name + 11; *p; p++)
        if (*p < '0' || *p > '9')
            return false;
    return true;
}

int mt__run_from_json(mt__rundir *r, const json_t *j, const char *where)
{
    const char *status = NULL, *latest = NULL;
    json_t *kept = NULL, *latest_j = NULL;
    json_int_t next = 0, iter = 0;
    double total = 0;
    json_error_t err;
    mt__json_watch();
    if (json_unpack_ex((json_t *)j, &err, 0, "{s:s, s:i, s:i, s:I, s:I, s:F, s:o, s?o}",
                       "status", &status, "attempts", &r->attempts, "failures", &r->failures,
                       "next_checkpoint_index", &next, "training_iteration", &iter,
                       "time_total_s", &total, "checkpoints", &kept, "latest", &latest_j) != 0 ||
        !json_is_array(kept) || mt__json_oom(NULL))
        return mt__json_oom(&err) ? mt__error(MT_ENOMEM, "out of memory reading %s", where)
                                  : mt__error(MT_EFORMAT, "%s: not a run state file (%s)", where,
                                              err.text);
    latest = json_is_string(latest_j) ? json_string_value(latest_j) : NULL;
    static const char *statuses[] = {"running", "finished", "failed", "preempted", NULL};
    int known = 0;
    while (statuses[known] && strcmp(statuses[known], status))
        known++;
    if (!statuses[known] || r->attempts < 0 || r->failures < 0 || next < 0 || iter < 0)
        return mt__error(MT_EFORMAT, "%s: corrupt run state (status \"%.32s\", attempts %d, "
                         "failures %d, next_checkpoint_index %lld, training_iteration %lld)",
                         where, status, r->attempts, r->failures, (long long)next,
                         (long long)iter);
    if (latest_j && !json_is_null(latest_j) && (!latest || !stored_name_ok(latest)))
        return mt__error(MT_EFORMAT, "%s: corrupt run state: \"latest\" is not a checkpoint "
                                     "folder name", where);
    snprintf(r->status, sizeof r->status, "%s", status);
    r->next_index = next;
    r->iteration = iter;
    r->time_total = total;
    r->latest = -1;
    size_t n = json_array_size(kept);
    r->kept = calloc(n ? n : 1, sizeof *r->kept);
    if (!r->kept)
        return mt__error(MT_ENOMEM, "out of memory reading %s", where);
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(kept, i), *m = NULL;
        const char *name = NULL;
        json_int_t index = 0, it = 0;
        if (json_unpack(e, "{s:s, s:I, s:I, s:o}", "name", &name, "index", &index,
                        "training_iteration", &it, "metrics", &m) != 0 ||
            mt__json_oom(NULL))
            return mt__json_oom(NULL)
                       ? mt__error(MT_ENOMEM, "out of memory reading %s", where)
                       : mt__error(MT_EFORMAT, "%s: checkpoint entry %zu is malformed", where, i);
        bool dup = false;
        for (int d = 0; d < r->nkept && !dup; d++)
            dup = !strcmp(r->kept[d].name, name);
        if (!stored_name_ok(name) || dup || index < 0)
            return mt__error(MT_EFORMAT, "%s: checkpoint entry %zu: %s \"%.64s\" (a checkpoint "
                             "is a folder named checkpoint_NNNNNN inside the run directory, "
                             "listed once); nothing outside the run is read or deleted", where,
                             i, dup ? "listed twice:" : "not a checkpoint folder name", name);
        mt__kept *k = &r->kept[r->nkept++];
        snprintf(k->name, sizeof k->name, "%s", name);
        k->index = index;
        k->iteration = it;
        if (!(k->metrics = mt_metrics_new()) || mt__metrics_from_json(k->metrics, m))
            return mt__error(MT_ENOMEM, "out of memory reading %s", where);
        if (latest && !strcmp(latest, name))
            r->latest = r->nkept - 1;
    }
    return MT_OK;
}

int mt__run_load(mt__rundir *r, const char *dir)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/run.json", dir);
    json_error_t err;
    mt__json_watch();
    json_t *j = json_load_file(path, 0, &err);
    if ((j || access(path, F_OK) == 0) && mt__json_oom(j ? NULL : &err)) {
        json_decref(j); /* even a parse that succeeded may lack a key */
        return mt__error(MT_ENOMEM, "out of memory reading %s", path);
    }
    if (!j)
        return access(path, F_OK) == 0
                   ? mt__error(MT_EFORMAT, "%s: corrupt (line %d: %s)", path, err.line, err.text)
                   : mt__error(MT_ENOTFOUND, "%s: no such file (not a run directory?)", path);
    int rc = mt__run_from_json(r, j, path);
    json_decref(j);
    if (!rc && !(r->dir = mt__strdup(dir)))
        rc = MT_ENOMEM;
    return rc;
}

/* ------------------------------------------------------------ result.json, progress.csv */

/* A report line is written on every mt_report: jansson's dump formats reals with
 * printf("%.17g"), half a microsecond each, so rows are serialised here with
 * mt__fmt_double (same values on reading, shorter text). */
typedef struct {
    char *p;
    size_t n, cap;
    bool oom;
} text;

static void put(text *t, const char *s, size_t n)
{
    if (t->oom)
        return;
    if (t->n + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 512;
        while (cap < t->n + n + 1)
            cap *= 2;
        char *p = realloc(t->p, cap);
        if (!p) {
            t->oom = true;
            return;
        }
        t->p = p;
        t->cap = cap;
    }
    memcpy(t->p + t->n, s, n);
    t->n += n;
    t->p[t->n] = '\0';
}

static void put_string(text *t, const char *s)
{
    put(t, "\"", 1);
    const char *run = s;
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch >= 0x20 && ch != '"' && ch != '\\')
            continue;
        put(t, run, (size_t)(s - run));
        char esc[8];
        switch (ch) {
        case '"': put(t, "\\\"", 2); break;
        case '\\': put(t, "\\\\", 2); break;
        case '\n': put(t, "\\n", 2); break;
        case '\t': put(t, "\\t", 2); break;
        case '\r': put(t, "\\r", 2); break;
        default:
            snprintf(esc, sizeof esc, "\\u%04x", ch);
            put(t, esc, 6);
        }
        run = s + 1;
    }
    put(t, run, (size_t)(s - run));
    put(t, "\"", 1);
}

static void put_i64(text *t, long long v)
{
    char b[24], *e = b + sizeof b, *p = e;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do
        *--p = (char)('0' + u % 10);
    while (u /= 10);
    if (v < 0)
        *--p = '-';
    put(t, p, (size_t)(e - p));
}

static void put_json(text *t, json_t *v)
{
    char b[32];
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *key;
        json_t *x;
        bool first = true;
        put(t, "{", 1);
        json_object_foreach(v, key, x)
        {
            if (!first)
                put(t, ",", 1);
            first = false;
            put_string(t, key);
            put(t, ":", 1);
            put_json(t, x);
        }
        put(t, "}", 1);
        break;
    }
    case JSON_ARRAY:
        put(t, "[", 1);
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i)
                put(t, ",", 1);
            put_json(t, json_array_get(v, i));
        }
        put(t, "]", 1);
        break;
    case JSON_STRING: put_string(t, json_string_value(v)); break;
    case JSON_INTEGER: put_i64(t, (long long)json_integer_value(v)); break;
    case JSON_REAL: put(t, b, (size_t)mt__fmt_double(b, json_real_value(v))); break;
    case JSON_TRUE: put(t, "true", 4); break;
    case JSON_FALSE: put(t, "false", 5); break;
    default: put(t, "null", 4); break;
    }
}

/* One CSV field per RFC 4180: quoted when it holds the separator, a quote, CR or LF (keys
 * and string values alike, or every later column shifts). */
static void csv_field(FILE *f, const char *s)
{
    if (!strpbrk(s, ",\"\r\n")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static void csv_value(FILE *f, json_t *v)
{
    if (!v)
        return;
    if (json_is_string(v)) {
        csv_field(f, json_string_value(v));
    } else if (json_is_integer(v))
        fprintf(f, "%lld", (long long)json_integer_value(v));
    else if (json_is_real(v)) {
        char b[32];
        fwrite(b, 1, (size_t)mt__fmt_double(b, json_real_value(v)), f);
    }
    else if (json_is_boolean(v))
        fputs(json_is_true(v) ? "true" : "false", f);
}

static void csv_row(FILE *f, const mt__rundir *r, json_t *row)
{
    for (int i = 0; i < r->ncsv; i++) {
        if (i)
            fputc(',', f);
        csv_value(f, json_object_get(row, r->csv_keys[i]));
    }
    fputc('\n', f);
}

static int add_keys(mt__rundir *r, json_t *row, bool *grew)
{
    const char *key;
    json_t *v;
    json_object_foreach(row, key, v)
    {
        bool have = false;
        for (int i = 0; i < r->ncsv && !have; i++)
            have = !strcmp(r->csv_keys[i], key);
        if (have || json_is_object(v))
            continue;
        char **k = realloc(r->csv_keys, (size_t)(r->ncsv + 1) * sizeof *k);
        if (!k)
            return mt__error(MT_ENOMEM, "out of memory for progress.csv");
        r->csv_keys = k;
        if (!(r->csv_keys[r->ncsv] = mt__strdup(key)))
            return MT_ENOMEM;
        r->ncsv++;
        *grew = true;
    }
    return MT_OK;
}

/* A result.json line; NULL for a line that is not JSON (skipped by the readers), and
 * *oom set when parsing it ran out of memory (never skipped: a row would go missing). */
static json_t *load_row(const char *line, bool *oom)
{
    json_error_t err;
    mt__json_watch();
    json_t *row = json_loads(line, 0, &err);
    if (mt__json_oom(row ? NULL : &err)) { /* even a parse that succeeded may lack a key */
        *oom = true;
        json_decref(row);
        row = NULL;
    }
    return row;
}

json_t *mt__run_read_rows(const char *dir, int *rc)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/result.json", dir);
    *rc = MT_OK;
    json_t *rows = json_array();
    if (!rows) {
        *rc = mt__error(MT_ENOMEM, "out of memory reading %s", path);
        return NULL;
    }
    FILE *in = fopen(path, "r");
    if (!in) {
        if (errno != ENOENT) {
            *rc = mt__error(MT_EIO, "cannot read %s: %s", path, strerror(errno));
            json_decref(rows);
            rows = NULL;
        }
        return rows;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    bool oom = false;
    while (!oom && (n = getline(&line, &cap, in)) > 0) {
        if (line[n - 1] != '\n')
            break; /* a last line a crash cut short: not a row */
        json_t *row = load_row(line, &oom);
        if (row && json_is_object(row)) {
            json_object_del(row, "per_rank");
            oom = json_array_append(rows, row) != 0;
        }
        json_decref(row);
    }
    bool bad = ferror(in);
    free(line);
    fclose(in);
    if (oom || bad) {
        *rc = oom ? mt__error(MT_ENOMEM, "out of memory reading %s", path)
                  : mt__error(MT_EIO, "cannot read %s", path);
        json_decref(rows);
        return NULL;
    }
    return rows;
}

/* progress.csv again from result.json, under the current header (temp file, rename). */
static int rewrite_csv(mt__rundir *r)
{
    char path[4096], tmp[4096];
    snprintf(path, sizeof path, "%s/result.json", r->dir);
    snprintf(tmp, sizeof tmp, "%s/.progress.csv.tmp", r->dir);
    FILE *in = fopen(path, "r");
    if (!in)
        return mt__error(MT_EIO, "cannot read %s: %s", path, strerror(errno));
    FILE *out = fopen(tmp, "w");
    if (!out) {
        int e = errno;
        fclose(in);
        return mt__error(MT_EIO, "cannot write %s: %s", tmp, strerror(e));
    }
    for (int i = 0; i < r->ncsv; i++) {
        if (i)
            fputc(',', out);
        csv_field(out, r->csv_keys[i]);
    }
    fputc('\n', out);
    char *line = NULL;
    size_t cap = 0;
    bool oom = false;
    while (!oom && getline(&line, &cap, in) > 0) {
        json_t *row = load_row(line, &oom);
        if (row)
            csv_row(out, r, row);
        json_decref(row);
    }
    free(line);
    fclose(in);
    int bad = fflush(out) != 0 || ferror(out) || fsync(fileno(out)) != 0, e = errno;
    if (fclose(out) != 0 && !bad)
        bad = 1, e = errno;
    if (oom) {
        unlink(tmp);
        return mt__error(MT_ENOMEM, "out of memory rewriting %s/progress.csv", r->dir);
    }
    if (bad) {
        unlink(tmp);
        return mt__error(MT_EIO, "cannot write %s: %s", tmp, strerror(e));
    }
    snprintf(path, sizeof path, "%s/progress.csv", r->dir);
    if (r->csv)
        fclose(r->csv);
    r->csv = NULL;
    if (rename(tmp, path) != 0) {
        e = errno;
        unlink(tmp);
        return mt__error(MT_EIO, "cannot replace %s: %s", path, strerror(e));
    }
    r->csv = fopen(path, "a");
    return r->csv ? MT_OK : mt__error(MT_EIO, "cannot append to %s: %s", path, strerror(errno));
}

/* Learn the CSV header of an existing run from its result.json (on resume). */
int mt__run_open_logs(mt__rundir *r)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/result.json", r->dir);
    FILE *in = fopen(path, "r");
    if (in) {
        char *line = NULL;
        size_t cap = 0;
        bool grew = false, oom = false;
        int rc = MT_OK;
        while (!oom && !rc && getline(&line, &cap, in) > 0) {
            json_t *row = load_row(line, &oom);
            if (row)
                rc = add_keys(r, row, &grew);
            json_decref(row);
        }
        free(line);
        fclose(in);
        if (oom || rc)
            return rc ? rc : mt__error(MT_ENOMEM, "out of memory reading %s", path);
    }
    r->result = fopen(path, "a");
    if (!r->result)
        return mt__error(MT_EIO, "cannot write %s: %s", path, strerror(errno));
    return rewrite_csv(r);
}

/* Append n bytes to the log f (named name) whole or not at all: a failed write is cut
 * back, so the next append does not land on a partial line. */
static int append_all(const mt__rundir *r, FILE *f, const char *name, const char *p, size_t n)
{
    int fd = fileno(f);
    off_t start = lseek(fd, 0, SEEK_END);
    size_t done = 0;
    int e = start < 0 ? errno : 0;
    while (!e && done < n) {
        ssize_t w = write(fd, p + done, n - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            e = w < 0 ? errno : EIO;
        else
            done += (size_t)w;
    }
    if (!e)
        return MT_OK;
    if (start >= 0 && ftruncate(fd, start) != 0)
        fprintf(stderr, "mpitrain: warning: %s/%s: cannot cut a partial row back: %s (the next "
                "start cuts it)\n", r->dir, name, strerror(errno));
    return mt__error(MT_EIO, "%s/%s: write failed: %s", r->dir, name, strerror(e));
}

int mt__run_append(mt__rundir *r, json_t *row)
{
    text t = {0};
    put_json(&t, row);
    put(&t, "\n", 1);
    if (t.oom) {
        free(t.p);
        return mt__error(MT_ENOMEM, "out of memory writing result.json");
    }
    int rc = append_all(r, r->result, "result.json", t.p, t.n);
    free(t.p);
    if (rc)
        return rc;
    bool grew = false;
    rc = add_keys(r, row, &grew);
    if (rc)
        return rc;
    if (grew)
        return rewrite_csv(r); /* includes this row */
    char *line = NULL;
    size_t n = 0;
    FILE *m = open_memstream(&line, &n);
    if (m) {
        csv_row(m, r, row);
        if (fclose(m) != 0) {
            free(line);
            line = NULL;
        }
    }
    rc = line ? append_all(r, r->csv, "progress.csv", line, n)
              : mt__error(MT_ENOMEM, "out of memory writing progress.csv");
    free(line);
    return rc;
}

/* Cut a last line that a crash left without its newline; its length in *cut. */
static int cut_torn_tail(const char *path, off_t *cut)
{
    *cut = 0;
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? MT_OK : mt__error(MT_EIO, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    int rc = fstat(fd, &st) == 0 ? MT_OK : mt__error(MT_EIO, "cannot stat %s: %s", path, strerror(errno));
    off_t end = rc ? 0 : st.st_size, keep = 0;
    char buf[4096];
    bool found = false;
    /* backwards from the end to the last newline */
    for (off_t pos = end; !rc && !found && pos > 0;) {
        size_t n = pos < (off_t)sizeof buf ? (size_t)pos : sizeof buf;
        pos -= (off_t)n;
        ssize_t got = pread(fd, buf, n, pos);
        if (got != (ssize_t)n) {
            rc = mt__error(MT_EIO, "cannot read %s: %s", path, got < 0 ? strerror(errno) : "short read");
            break;
        }
        for (size_t i = n; i-- > 0;)
            if (buf[i] == '\n') {
                keep = pos + (off_t)i + 1;
                found = true;
                break;
            }
    }
    if (!rc && keep < end) {
        if (ftruncate(fd, keep) != 0 || fsync(fd) != 0)
            rc = mt__error(MT_EIO, "cannot cut the torn last line of %s: %s", path, strerror(errno));
        else
            *cut = end - keep;
    }
    close(fd);
    return rc;
}

int mt__run_repair_logs(mt__rundir *r, int64_t *last_iteration)
{
    const char *files[] = {"result.json", "progress.csv", "result.superseded.json"};
    *last_iteration = -1;
    for (int i = 0; i < 3; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", r->dir, files[i]);
        off_t cut = 0;
        int rc = cut_torn_tail(path, &cut);
        if (rc)
            return rc;
        if (cut)
            printf("mpitrain: %s: cut a torn last line (%lld bytes without a newline: a crash "
                   "in the middle of a write)\n", path, (long long)cut);
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/result.json", r->dir);
    FILE *in = fopen(path, "r");
    if (!in)
        return errno == ENOENT ? MT_OK : mt__error(MT_EIO, "cannot read %s: %s", path, strerror(errno));
    *last_iteration = 0;
    char *line = NULL;
    size_t cap = 0;
    bool oom = false;
    while (!oom && getline(&line, &cap, in) > 0) {
        json_t *row = load_row(line, &oom); /* a row lost to memory is not a row skipped */
        json_t *it = row ? json_object_get(row, "training_iteration") : NULL;
        if (json_is_integer(it) && json_integer_value(it) > *last_iteration)
            *last_iteration = json_integer_value(it);
        /* an attempt that crashed never saved its time in run.json: its rows did */
        json_t *total = row ? json_object_get(row, "time_total_s") : NULL;
        if (json_is_number(total) && json_number_value(total) > r->time_total &&
            isfinite(json_number_value(total)))
            r->time_total = json_number_value(total);
        json_decref(row);
    }
    free(line);
    fclose(in);
    return oom ? mt__error(MT_ENOMEM, "out of memory reading %s", path) : MT_OK;
}

/* Move result.json rows past `iteration` (work a resumed run will redo) to
 * result.superseded.json, so each iteration appears once in result.json and nothing
 * reported is deleted. */
int mt__run_supersede(mt__rundir *r, int64_t iteration)
{
    char path[4096], tmp[4096], old[4096];
    snprintf(path, sizeof path, "%s/result.json", r->dir);
    snprintf(tmp, sizeof tmp, "%s/.result.json.tmp", r->dir);
    snprintf(old, sizeof old, "%s/result.superseded.json", r->dir);
    FILE *in = fopen(path, "r");
    if (!in)
        return MT_OK;
    FILE *keep = fopen(tmp, "w"), *gone = NULL;
    char *line = NULL;
    size_t cap = 0;
    int moved = 0;
    int rc = keep ? MT_OK : mt__error(MT_EIO, "cannot write %s: %s", tmp, strerror(errno));
    bool oom = false;
    while (!rc && getline(&line, &cap, in) > 0) {
        json_t *row = load_row(line, &oom);
        json_int_t it = row ? json_integer_value(json_object_get(row, "training_iteration")) : 0;
        json_decref(row);
        if (oom) {
            rc = mt__error(MT_ENOMEM, "out of memory reading %s", path);
            break;
        }
        if (it <= iteration) {
            fputs(line, keep);
            continue;
        }
        if (!gone && !(gone = fopen(old, "a")))
            rc = mt__error(MT_EIO, "cannot write %s: %s", old, strerror(errno));
        else {
            fputs(line, gone);
            moved++;
        }
    }
    free(line);
    fclose(in);
    if (gone && (fflush(gone) != 0 || ferror(gone) || fsync(fileno(gone)) != 0) && !rc)
        rc = mt__error(MT_EIO, "cannot write %s: %s", old, strerror(errno));
    if (gone)
        fclose(gone);
    if (keep && (fflush(keep) != 0 || ferror(keep) || fsync(fileno(keep)) != 0) && !rc)
        rc = mt__error(MT_EIO, "cannot write %s: %s", tmp, strerror(errno));
    if (keep)
        fclose(keep);
    if (!rc && rename(tmp, path) != 0)
        rc = mt__error(MT_EIO, "cannot replace %s: %s", path, strerror(errno));
    if (rc) { /* result.json stays as it was */
        unlink(tmp);
        return rc;
    }
    if (moved)
        printf("mpitrain: %d report%s after iteration %lld moved to %s (the resumed run redoes "
               "them)\n", moved, moved == 1 ? "" : "s", (long long)iteration, old);
    return rc;
}

/* Remove what a crash left behind: .checkpoint_*.tmp folders, .drop folders half removed,
 * checkpoint folders numbered at or past next_checkpoint_index (published, but run.json
 * never recorded them), and the temporary files of run.json, params.json, error.txt, result.json and
 * progress.csv (.NAME.tmp). Only the owner calls this (under run.lock). */
void mt__run_remove_leftovers(const mt__rundir *r)
{
    DIR *d = opendir(r->dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        size_t n = strlen(e->d_name);
        bool tmp = n > 4 && !strcmp(e->d_name + n - 4, ".tmp");
        bool drop = n > 5 && !strcmp(e->d_name + n - 5, ".drop");
        bool ck = !strncmp(e->d_name, ".checkpoint_", 12);
        long long index = -1;
        char rest = 0;
        /* a folder renamed into place whose run.json update then failed: never recorded,
         * and in the way of the next commit of that number */
        if (sscanf(e->d_name, "checkpoint_%6lld%c", &index, &rest) == 1 && index >= r->next_index) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", r->dir, e->d_name);
            printf("mpitrain: removing %s, a checkpoint run.json never recorded (its commit "
                   "did not finish)\n", path);
            if (mt__rmtree(path))
                fprintf(stderr, "mpitrain: warning: %s\n", mt_last_error());
            continue;
        }
        if (e->d_name[0] != '.' || !(tmp || (ck && drop)))
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", r->dir, e->d_name);
        printf("mpitrain: removing %s, %s\n", path,
               !ck ? "a temporary file a crash left behind"
               : tmp ? "a checkpoint a crash left unfinished" : "a checkpoint retention dropped");
        if (mt__rmtree(path))
            fprintf(stderr, "mpitrain: warning: %s\n", mt_last_error());
    }
    if (d)
        closedir(d);
}

typedef struct {
    char **paths;
    int n;
} reap_job;

static void *reap_main(void *arg)
{
    reap_job *j = arg;
    for (int i = 0; i < j->n; i++) {
        if (mt__rmtree(j->paths[i]))
            fprintf(stderr, "mpitrain: warning: %s (the next start removes it)\n", mt_last_error());
        free(j->paths[i]);
    }
    free(j->paths);
    free(j);
    return NULL;
}

void mt__run_reap_wait(mt__rundir *r)
{
    if (r->reaping) {
        pthread_join(r->reaper, NULL);
        r->reaping = false;
    }
}

int mt__run_drop(mt__rundir *r, const char *const *names, int n)
{
    mt__run_reap_wait(r);
    if (n == 0)
        return MT_OK;
    reap_job *j = calloc(1, sizeof *j);
    if (j)
        j->paths = calloc((size_t)n, sizeof *j->paths);
    int rc = j && j->paths ? MT_OK : mt__error(MT_ENOMEM, "out of memory dropping checkpoints");
    for (int i = 0; i < n && !rc; i++) {
        char from[4096], to[4096];
        snprintf(from, sizeof from, "%s/%s", r->dir, names[i]);
        snprintf(to, sizeof to, "%s/.%s.drop", r->dir, names[i]);
        if (rename(from, to) != 0 && errno != ENOENT)
            rc = mt__error(MT_EIO, "cannot remove %s: %s", from, strerror(errno));
        else if (!(j->paths[j->n++] = mt__strdup(to)))
            rc = mt__error(MT_ENOMEM, "out of memory dropping checkpoints");
    }
    if (!rc && pthread_create(&r->reaper, NULL, reap_main, j) == 0) {
        r->reaping = true;
        return MT_OK;
    }
    for (int i = 0; j && j->paths && i < j->n; i++) { /* no thread: remove them here */
        if (j->paths[i] && !rc)
            rc = mt__rmtree(j->paths[i]);
        free(j->paths[i]);
    }
    if (j)
        free(j->paths);
    free(j);
    return rc;
}
