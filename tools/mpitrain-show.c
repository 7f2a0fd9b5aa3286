/*
 * mpitrain-show -- what a run directory says: status, attempts and failures, the kept
 * checkpoints (best first, with their scores), the last metrics; --plot draws learning
 * curves (metrics against training_iteration) with gnuplot.
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
#include <unistd.h>

#define MAX_METRICS 16

static void usage(FILE *out)
{
    fprintf(out,
        "usage: mpitrain-show RUN_DIR [--plot FILE.png] [--metric KEY]... [--timeline]\n"
        "\n"
        "Prints a run's status, attempts and failures, its kept checkpoints (best first by\n"
        "the run's checkpoint score attribute) and its last reported metrics.\n"
        "\n"
        "  --plot FILE.png  draw the learning curves with gnuplot (Debian package gnuplot-nox)\n"
        "  --metric KEY     a metric to draw (repeat; default: every numeric metric except the\n"
        "                   automatic time keys)\n"
        "  --timeline       where each rank's step time went (needs a run made with --trace)\n"
        "  --help           this text\n");
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
        } else if (mt_metrics_get_f64(m, k, &d) == MT_OK && mt_metrics_get_i64(m, k, &v) == MT_OK &&
                 (double)v == d)
            printf(" %lld\n", (long long)v);
        else if (mt_metrics_get_f64(m, k, &d) == MT_OK)
            printf(" %.6g\n", d);
        else
            putchar('\n');
    }
}

static bool automatic(const char *k)
{
    return !strcmp(k, "training_iteration") || !strcmp(k, "timestamp") ||
           !strcmp(k, "time_this_iter_s") || !strcmp(k, "time_total_s");
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

static int plot(const char *dir, const char *png, const char **wanted, int nwanted)
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
    const char *keys[MAX_METRICS];
    int nk = 0;
    for (int i = 0; i < nwanted && nk < MAX_METRICS; i++)
        keys[nk++] = wanted[i];
    char data[] = "/tmp/mpitrain-show-XXXXXX";
    int fd = mkstemp(data);
    FILE *out = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!out) {
        fclose(in);
        if (fd >= 0) {
            close(fd);
            unlink(data);
        }
        fprintf(stderr, "mpitrain-show: cannot write a temporary file: %s\n", strerror(errno));
        return 1;
    }
    char *line = NULL;
    size_t cap = 0;
    json_t *first = NULL;
    int rows = 0;
    while (getline(&line, &cap, in) > 0) {
        json_t *row = json_loads(line, 0, NULL);
        if (!json_is_object(row)) {
            json_decref(row);
            continue;
        }
        if (!first && !nwanted) { /* default: the numeric keys of the first row */
            first = row;
            const char *k;
            json_t *v;
            json_object_foreach(row, k, v)
                if (json_is_number(v) && !automatic(k) && nk < MAX_METRICS)
                    keys[nk++] = k; /* borrowed from `first`, kept until the end */
        }
        fprintf(out, "%lld", (long long)json_integer_value(json_object_get(row, "training_iteration")));
        for (int i = 0; i < nk; i++) {
            json_t *v = json_object_get(row, keys[i]);
            if (json_is_number(v) && isfinite(json_number_value(v)))
                fprintf(out, " %.10g", json_number_value(v));
            else
                fprintf(out, " NaN");
        }
        fputc('\n', out);
        rows++;
        if (row != first)
            json_decref(row);
    }
    free(line);
    fclose(in);
    int rc = fclose(out) != 0;
    if (rc)
        fprintf(stderr, "mpitrain-show: cannot write %s\n", data);
    else if (!rows || !nk) {
        fprintf(stderr, "mpitrain-show: %s has no numeric metrics to plot\n", path);
        rc = 1;
    } else {
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
            fprintf(gp, "\nset grid\nset xlabel 'training_iteration'\n");
            for (int i = 0; i < nk; i++) {
                fprintf(gp, "set title ");
                gp_string(gp, keys[i]);
                fprintf(gp, "\nplot '%s' using 1:%d with linespoints notitle\n", data, i + 2);
            }
            fprintf(gp, "unset multiplot\n");
            rc = gp_finish(gp, pid);
            if (rc || access(png, R_OK) != 0) {
                fprintf(stderr, "mpitrain-show: gnuplot could not draw %s\n", png);
                rc = 1;
            } else
                printf("mpitrain-show: wrote %s (%d metrics over %d reports)\n", png, nk, rows);
        }
        signal(SIGPIPE, old);
    }
    unlink(data);
    json_decref(first);
    return rc;
}

int main(int argc, char **argv)
{
    const char *dir = NULL, *png = NULL, *wanted[MAX_METRICS];
    int nwanted = 0;
    bool timeline = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--plot") && i + 1 < argc)
            png = argv[++i];
        else if (!strcmp(argv[i], "--timeline"))
            timeline = true;
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
    snprintf(path, sizeof path, "%s/params.json", dir);
    json_t *params = json_load_file(path, 0, NULL);
    json_t *ckcfg = json_object_get(json_object_get(params, "run"), "checkpoint");
    const char *attr = json_string_value(json_object_get(ckcfg, "score_attribute"));
    const char *order = json_string_value(json_object_get(ckcfg, "score_order"));
    bool lower = order && !strcmp(order, "min");
    printf("checkpoints (%zu kept, %s%s%s)\n", mt_result_num_best(r),
           attr ? "best first by " : "newest first", attr ? attr : "",
           attr ? (lower ? ", lower is better" : ", higher is better") : "");
    for (size_t i = 0; i < mt_result_num_best(r); i++) {
        const mt_metrics *m = NULL;
        const mt_checkpoint *ck = mt_result_best(r, i, &m);
        double score = NAN;
        int64_t it = 0;
        mt_metrics_get_i64(m, "training_iteration", &it);
        if (attr)
            mt_metrics_get_f64(m, attr, &score);
        const char *name = strrchr(mt_checkpoint_path(ck), '/');
        printf("  %-20s iteration %-5lld", name ? name + 1 : mt_checkpoint_path(ck), (long long)it);
        if (attr)
            printf(" %s %.6g", attr, score);
        printf("%s\n", ck == mt_result_checkpoint(r) ? "  (latest)" : "");
    }
    if (mt_result_metrics(r)) {
        printf("last metrics\n");
        print_metrics(mt_result_metrics(r), "  ");
    }
    json_decref(run);
    json_decref(params);
    mt_result_free(&r);
    return png ? plot(dir, png, wanted, nwanted) : 0;
}
