/*
 * mpitrain-show -- what a run directory says: status, attempts and failures, the kept
 * checkpoints (best first, with their scores), the last metrics; --plot draws learning
 * curves (metrics against training_iteration) with gnuplot: one panel per metric with its
 * name on the y axis, the per-rank min-max band where the run recorded one, the kept
 * checkpoints, the best one and the points where the run resumed marked.
 */
#include <mpitrain.h>
#include "show-timeline.h"

#include <jansson.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_METRICS 16

/* Kept checkpoints listed without --all (a run keeping every one has thousands). */
#define SHOWN_CHECKPOINTS 10

static void usage(FILE *out)
{
    fprintf(out,
        "usage: mpitrain-show RUN_DIR [--all] [--plot FILE.png [--metric KEY]... [--log]] [--timeline]\n"
        "\n"
        "Prints a run's status, attempts and failures, its kept checkpoints (best first by\n"
        "the run's checkpoint score attribute) and its last reported metrics. Of many kept\n"
        "checkpoints it lists the first %d and the latest, and says how many it left out.\n"
        "\n"
        "  --all            list every kept checkpoint\n"
        "  --plot FILE.png  draw the learning curves with gnuplot (Debian package gnuplot-nox)\n"
        "                   (one panel per metric; the per-rank min-max band where the run\n"
        "                   recorded one; kept checkpoints as dots, the best as a star,\n"
        "                   where the run resumed as a circle)\n"
        "  --metric KEY     a metric to draw (repeat; default: every numeric metric of the\n"
        "                   first report that changes over the run, except the automatic\n"
        "                   time keys)\n"
        "  --log            a logarithmic y axis for every metric whose values are all > 0\n"
        "  --timeline       where each rank's step time went (needs a run made with --trace)\n"
        "  --help           this text\n", SHOWN_CHECKPOINTS);
}

/* Text from the run directory on the terminal: control characters (escape sequences,
 * line breaks) shown as '?'. */
static void put_text(const char *s, int width)
{
    int n = 0;
    for (; *s; s++, n++)
        putchar((unsigned char)*s < 0x20 || *s == 0x7f ? '?' : *s);
    for (; n < width; n++)
        putchar(' ');
}

/* Seconds since the epoch as a UTC date, with milliseconds. */
static const char *date_text(double t, char *buf, size_t len)
{
    time_t s = (time_t)floor(t);
    struct tm tm;
    if (!isfinite(t) || !gmtime_r(&s, &tm)) {
        snprintf(buf, len, "%g", t);
        return buf;
    }
    size_t n = strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm);
    snprintf(buf + n, len - n, ".%03d UTC", (int)((t - floor(t)) * 1000));
    return buf;
}

/* A number as people read it: no exponent between 1e-4 and 1e12, 6 significant digits. */
static const char *number_text(double d)
{
    static _Thread_local char buf[64];
    double a = fabs(d);
    if (a == 0 || !isfinite(d) || a < 1e-4 || a >= 1e12)
        snprintf(buf, sizeof buf, "%.6g", d);
    else {
        int decimals = 5 - (int)floor(log10(a)); /* 6 significant digits */
        snprintf(buf, sizeof buf, "%.*f", decimals < 0 ? 0 : decimals, d);
        if (strchr(buf, '.')) { /* no trailing zeros */
            char *e = buf + strlen(buf) - 1;
            while (*e == '0')
                *e-- = '\0';
            if (*e == '.')
                *e = '\0';
        }
    }
    return buf;
}

static void print_metrics(const mt_metrics *m, const char *indent)
{
    for (size_t i = 0; i < mt_metrics_count(m); i++) {
        const char *k = mt_metrics_key(m, i), *s = mt_metrics_get_str(m, k);
        double d;
        int64_t v;
        printf("%s", indent);
        put_text(k, 22);
        if (s) {
            putchar(' ');
            put_text(s, 0);
            putchar('\n');
        } else if (!strcmp(k, "timestamp") && mt_metrics_get_f64(m, k, &d) == MT_OK) {
            char date[64];
            printf(" %s\n", date_text(d, date, sizeof date));
        } else if (mt_metrics_get_f64(m, k, &d) == MT_OK && mt_metrics_get_i64(m, k, &v) == MT_OK &&
                 (double)v == d)
            printf(" %lld\n", (long long)v);
        else if (mt_metrics_get_f64(m, k, &d) == MT_OK)
            printf(" %s\n", number_text(d));
        else
            putchar('\n');
    }
}

static bool automatic(const char *k)
{
    return !strcmp(k, "training_iteration") || !strcmp(k, "iterations_since_restore") ||
           !strcmp(k, "timestamp") || !strcmp(k, "time_this_iter_s") ||
           !strcmp(k, "time_total_s");
}

/* A row where the run resumed: the first report of an attempt that did not start at the
 * beginning (iterations_since_restore 1, training_iteration > 1). */
static bool resumed_at(json_t *row)
{
    return json_integer_value(json_object_get(row, "iterations_since_restore")) == 1 &&
           json_integer_value(json_object_get(row, "training_iteration")) > 1;
}

/* Text as a gnuplot single-quoted string. Inside single quotes gnuplot expands nothing
 * (no backquote commands, no @macros, no backslash escapes); the only special character
 * is the quote itself, written twice. A line break would end the command (and a
 * backslash before it would join the next line), so control characters are shown as
 * '?': names from a run directory reach gnuplot as data, never as commands. */
static void gp_string(FILE *gp, const char *s)
{
    fputc('\'', gp);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '\'')
            fputs("''", gp);
        else if (ch < 0x20 || ch == 0x7f)
            fputc('?', gp);
        else
            fputc(ch, gp);
    }
    fputc('\'', gp);
}

/* gnuplot started directly (fork and exec, no shell), reading its script from a pipe;
 * its output goes to /dev/null. */
static FILE *gp_start(pid_t *pid)
{
    int fds[2];
    if (pipe(fds) != 0)
        return NULL;
    *pid = fork();
    if (*pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return NULL;
    }
    if (*pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(fds[0], STDIN_FILENO);
        if (null >= 0) {
            dup2(null, STDOUT_FILENO);
            dup2(null, STDERR_FILENO);
        }
        close(fds[0]);
        close(fds[1]);
        execlp("gnuplot", "gnuplot", (char *)NULL);
        _exit(127);
    }
    close(fds[0]);
    FILE *gp = fdopen(fds[1], "w");
    if (!gp) {
        close(fds[1]);
        waitpid(*pid, NULL, 0);
    }
    return gp;
}

/* 0 when gnuplot read the whole script and exited with status 0. */
static int gp_finish(FILE *gp, pid_t pid)
{
    int bad = fclose(gp) != 0, status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    return bad || !WIFEXITED(status) || WEXITSTATUS(status) != 0;
}

static bool has_control(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return true;
    return false;
}

/* What --plot marks and how. */
typedef struct {
    const char **wanted;  /* --metric keys; none: the varying numeric keys of the first row */
    int nwanted;
    bool log;             /* --log */
    const int64_t *kept;  /* iterations of the kept checkpoints */
    int nkept;
    int64_t best;         /* the best checkpoint's iteration (-1: no score attribute) */
} plot_opts;

/* 0 none, 1 a kept checkpoint, 2 the best one. */
static int mark_of(const plot_opts *o, int64_t it)
{
    if (it == o->best)
        return 2;
    for (int i = 0; i < o->nkept; i++)
        if (o->kept[i] == it)
            return 1;
    return 0;
}

/* A per-rank statistic of key in a row ("per_rank": {key: {"min":..,"max":..}}). */
static json_t *per_rank(json_t *row, const char *key, const char *stat)
{
    return json_object_get(json_object_get(json_object_get(row, "per_rank"), key), stat);
}

static void put_number(FILE *out, json_t *v)
{
    if (json_is_number(v) && isfinite(json_number_value(v)))
        fprintf(out, " %.10g", json_number_value(v));
    else
        fprintf(out, " NaN");
}

static int plot(const char *dir, const char *png, const plot_opts *o)
{
    if (has_control(png)) {
        fprintf(stderr, "mpitrain-show: --plot: the file name contains control characters\n");
        return 1;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/result.json", dir);
    FILE *in = fopen(path, "r");
    if (!in) {
        fprintf(stderr, "mpitrain-show: %s: no reports to plot (%s)\n", path, strerror(errno));
        return 1;
    }
    /* the rows once, kept; the keys they hold */
    json_t *rows = json_array(), *seen = json_object();
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, in) > 0) {
        json_t *row = json_loads(line, 0, NULL);
        if (!json_is_object(row)) {
            json_decref(row);
            continue;
        }
        const char *k;
        json_t *v;
        json_object_foreach(row, k, v)
            if (json_is_number(v) && !automatic(k)) {
                json_t *range = json_object_get(seen, k);
                double x = json_number_value(v);
                if (!range) /* [first value, changes] */
                    json_object_set_new(seen, k, json_pack("[f, b]", x, 0));
                else if (x != json_real_value(json_array_get(range, 0)))
                    json_array_set_new(range, 1, json_true());
            }
        json_array_append_new(rows, row);
    }
    free(line);
    fclose(in);
    const char *keys[MAX_METRICS];
    int nk = 0, rc = 0;
    for (int i = 0; i < o->nwanted && nk < MAX_METRICS; i++) {
        if (!json_object_get(seen, o->wanted[i])) {
            fprintf(stderr, "mpitrain-show: --metric %s: no report of %s has a number of that "
                    "name; its numeric metrics:", o->wanted[i], path);
            const char *k;
            json_t *v;
            json_object_foreach(seen, k, v)
                fprintf(stderr, " %s", k);
            fputc('\n', stderr);
            rc = 1;
        }
        keys[nk++] = o->wanted[i];
    }
    int constant = 0;
    if (!o->nwanted && json_array_size(rows)) { /* the first row's keys that change */
        const char *k;
        json_t *v;
        json_object_foreach(json_array_get(rows, 0), k, v) {
            json_t *range = json_object_get(seen, k);
            if (!range || nk >= MAX_METRICS)
                continue;
            if (!json_is_true(json_array_get(range, 1)))
                constant++;
            else
                keys[nk++] = k;
        }
    }
    char data[] = "/tmp/mpitrain-show-XXXXXX";
    int fd = rc ? -1 : mkstemp(data);
    FILE *out = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!rc && !out) {
        if (fd >= 0) {
            close(fd);
            unlink(data);
        }
        fprintf(stderr, "mpitrain-show: cannot write a temporary file: %s\n", strerror(errno));
        rc = 1;
    }
    /* columns: iteration, mark, resumed here (0/1), then per key: value, per-rank min,
     * per-rank max */
    bool band[MAX_METRICS] = {false}, positive[MAX_METRICS];
    for (int i = 0; i < nk; i++)
        positive[i] = true;
    size_t r;
    json_t *row;
    int resumes = 0;
    json_array_foreach(rows, r, row) {
        if (rc)
            break;
        int64_t it = json_integer_value(json_object_get(row, "training_iteration"));
        resumes += resumed_at(row);
        fprintf(out, "%lld %d %d", (long long)it, mark_of(o, it), resumed_at(row));
        for (int i = 0; i < nk; i++) {
            json_t *v = json_object_get(row, keys[i]), *mn = per_rank(row, keys[i], "min"),
                   *mx = per_rank(row, keys[i], "max");
            put_number(out, v);
            put_number(out, mn);
            put_number(out, mx);
            if (json_is_number(mn) && json_is_number(mx) &&
                json_number_value(mx) > json_number_value(mn))
                band[i] = true;
            if (json_is_number(v) && !(json_number_value(v) > 0))
                positive[i] = false;
        }
        fputc('\n', out);
    }
    size_t nrows = json_array_size(rows);
    if (out && fclose(out) != 0 && !rc) {
        fprintf(stderr, "mpitrain-show: cannot write %s\n", data);
        rc = 1;
    }
    if (!rc && (!nrows || !nk)) {
        fprintf(stderr, "mpitrain-show: %s has no numeric metrics to plot%s\n", path,
                constant ? " (every one is constant: name it with --metric)" : "");
        rc = 1;
    }
    if (!rc) {
        pid_t pid;
        void (*old)(int) = signal(SIGPIPE, SIG_IGN); /* gnuplot may stop reading early */
        FILE *gp = gp_start(&pid);
        if (!gp) {
            fprintf(stderr, "mpitrain-show: cannot run gnuplot (install gnuplot-nox): %s\n",
                    strerror(errno));
            rc = 1;
        } else {
            int cols = nk < 3 ? nk : 3, rows_p = (nk + cols - 1) / cols;
            fprintf(gp, "set terminal pngcairo size %d,%d noenhanced\nset output ", 420 * cols,
                    320 * rows_p);
            gp_string(gp, png);
            fprintf(gp, "\nset multiplot layout %d,%d title ", rows_p, cols);
            gp_string(gp, dir);
            fprintf(gp, "\nset grid\nset xlabel 'training_iteration'\nset key bottom right "
                        "font ',8'\n");
            for (int i = 0; i < nk; i++) {
                int v = 4 + 3 * i;
                fprintf(gp, "set title ");
                gp_string(gp, keys[i]);
                fprintf(gp, "\nset ylabel ");
                gp_string(gp, keys[i]);
                fprintf(gp, "\n%s\nplot ", o->log && positive[i] ? "set logscale y"
                                                                  : "unset logscale y");
                if (band[i])
                    fprintf(gp, "'%s' using 1:%d:%d with filledcurves fs transparent solid "
                                "0.25 noborder title 'ranks min-max', ", data, v + 1, v + 2);
                fprintf(gp, "'%s' using 1:%d with linespoints pt 7 ps 0.4 notitle", data, v);
                if (o->nkept)
                    fprintf(gp, ", '%s' using 1:($2 >= 1 ? $%d : 1/0) with points pt 7 ps 1.2 "
                                "title 'kept checkpoint'", data, v);
                if (o->best >= 0)
                    fprintf(gp, ", '%s' using 1:($2 == 2 ? $%d : 1/0) with points pt 3 ps 2.5 "
                                "title 'best checkpoint'", data, v);
                if (resumes)
                    fprintf(gp, ", '%s' using 1:($3 == 1 ? $%d : 1/0) with points pt 6 ps 2.5 "
                                "title 'resumed here'", data, v);
                fputc('\n', gp);
            }
            fprintf(gp, "unset multiplot\n");
            rc = gp_finish(gp, pid);
            if (rc || access(png, R_OK) != 0) {
                fprintf(stderr, "mpitrain-show: gnuplot could not draw %s\n", png);
                rc = 1;
            } else
                printf("mpitrain-show: wrote %s (%d metrics over %zu reports%s)\n", png, nk,
                       nrows, constant ? "; constant ones left out" : "");
        }
        signal(SIGPIPE, old);
    }
    if (fd >= 0)
        unlink(data);
    json_decref(rows);
    json_decref(seen);
    return rc;
}

int main(int argc, char **argv)
{
    const char *dir = NULL, *png = NULL, *wanted[MAX_METRICS];
    int nwanted = 0;
    bool timeline = false, log = false, all = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--plot") && i + 1 < argc)
            png = argv[++i];
        else if (!strcmp(argv[i], "--timeline"))
            timeline = true;
        else if (!strcmp(argv[i], "--log"))
            log = true;
        else if (!strcmp(argv[i], "--all"))
            all = true;
        else if (!strcmp(argv[i], "--metric") && i + 1 < argc && nwanted < MAX_METRICS)
            wanted[nwanted++] = argv[++i];
        else if (argv[i][0] == '-' || dir) {
            fprintf(stderr, "mpitrain-show: unexpected argument '%s' (see --help)\n", argv[i]);
            return 2;
        } else
            dir = argv[i];
    }
    if (!dir) {
        usage(stderr);
        return 2;
    }
    if (timeline)
        return timeline_summary(dir, stdout);
    mt_result *r = NULL;
    if (mt_result_load(dir, &r) != MT_OK) {
        fprintf(stderr, "mpitrain-show: %s\n", mt_last_error());
        return 1;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/run.json", dir);
    json_t *run = json_load_file(path, 0, NULL);
    printf("run        %s\n", dir);
    printf("status     %s\n", json_string_value(json_object_get(run, "status")));
    printf("attempts   %d (failures %lld)\n", mt_result_attempts(r),
           (long long)json_integer_value(json_object_get(run, "failures")));
    if (mt_result_error(r))
        printf("error      %s\n", mt_result_error(r));
    /* where attempts after the first took over: the rows with iterations_since_restore 1 */
    int nresumed = 0;
    for (size_t i = 0; i < mt_result_num_rows(r); i++) {
        const mt_metrics *row = mt_result_row(r, i);
        int64_t it = 0, since = 0;
        if (mt_metrics_get_i64(row, "iterations_since_restore", &since) == MT_OK && since == 1 &&
            mt_metrics_get_i64(row, "training_iteration", &it) == MT_OK && it > 1)
            printf("%s %lld", nresumed++ ? "," : "resumed    at iteration", (long long)it);
    }
    if (nresumed)
        putchar('\n');
    snprintf(path, sizeof path, "%s/params.json", dir);
    json_t *params = json_load_file(path, 0, NULL);
    json_t *ckcfg = json_object_get(json_object_get(params, "run"), "checkpoint");
    const char *attr = json_string_value(json_object_get(ckcfg, "score_attribute"));
    const char *order = json_string_value(json_object_get(ckcfg, "score_order"));
    bool lower = order && !strcmp(order, "min");
    printf("checkpoints (%zu kept, %s%s%s)\n", mt_result_num_best(r),
           attr ? "best first by " : "newest first", attr ? attr : "",
           attr ? (lower ? ", lower is better" : ", higher is better") : "");
    size_t left_out = 0;
    for (size_t i = 0; i < mt_result_num_best(r); i++) {
        const mt_metrics *m = NULL;
        const mt_checkpoint *ck = mt_result_best(r, i, &m);
        if (!all && i >= SHOWN_CHECKPOINTS && ck != mt_result_checkpoint(r)) {
            left_out++;
            continue;
        }
        double score = NAN;
        int64_t it = 0;
        mt_metrics_get_i64(m, "training_iteration", &it);
        if (attr)
            mt_metrics_get_f64(m, attr, &score);
        const char *name = strrchr(mt_checkpoint_path(ck), '/');
        printf("  %-20s iteration %-5lld", name ? name + 1 : mt_checkpoint_path(ck), (long long)it);
        if (attr)
            printf(" %s %s", attr, number_text(score));
        printf("%s\n", ck == mt_result_checkpoint(r) ? "  (latest)" : "");
    }
    if (left_out)
        printf("  ... %zu more not listed (--all lists every one)\n", left_out);
    if (mt_result_metrics(r)) {
        printf("last metrics\n");
        print_metrics(mt_result_metrics(r), "  ");
    }
    int64_t kept[256];
    plot_opts po = {.wanted = wanted, .nwanted = nwanted, .log = log, .kept = kept, .best = -1};
    for (size_t i = 0; i < mt_result_num_best(r) && po.nkept < 256; i++) {
        const mt_metrics *m = NULL;
        mt_result_best(r, i, &m);
        int64_t it = -1;
        if (mt_metrics_get_i64(m, "training_iteration", &it) == MT_OK) {
            kept[po.nkept++] = it;
            if (i == 0 && attr)
                po.best = it;
        }
    }
    json_decref(run);
    json_decref(params);
    mt_result_free(&r);
    return png ? plot(dir, png, &po) : 0;
}
