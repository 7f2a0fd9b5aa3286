/*
 * mpitrain-run -- a supervisor for training jobs:
 *
 *   mpitrain-run [--max-failures N] -- mpirun -np 8 ./trainer --name exp1
 *
 * Runs the command (exec, no shell) and runs it again when it crashes or fails, up to N
 * times; each rerun resumes from the run's latest checkpoint because the command names the
 * same run. It does not rerun after success, after the preempted status (75: the job was
 * asked to stop and checkpointed; the batch system requeues it), or after it forwarded
 * SIGTERM or SIGINT itself. SIGINT, SIGUSR1 and SIGUSR2 are forwarded to the command; the
 * first SIGTERM goes on as SIGUSR1 (checkpoint and stop), a second one as SIGTERM. Its own
 * exit status is the command's last one.
 */
#include <mpitrain.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t child_pid, stop_asked, last_signal, terms;

/* The first SIGTERM is passed on as SIGUSR1: mpirun forwards SIGUSR1 to every rank and
 * leaves them running, so the job checkpoints and stops at its next report, while mpirun
 * answers SIGTERM by killing the job. A second SIGTERM is passed on as is. */
static void forward(int sig)
{
    last_signal = sig;
    if (sig == SIGTERM || sig == SIGINT)
        stop_asked = 1;
    int to = sig == SIGTERM && terms++ == 0 ? SIGUSR1 : sig;
    if (child_pid > 0)
        kill((pid_t)child_pid, to);
}

static void usage(FILE *out)
{
    fprintf(out,
        "usage: mpitrain-run [--max-failures N] [--quiet] -- COMMAND [ARGS...]\n"
        "\n"
        "Runs COMMAND (an mpirun or srun line) and reruns it when it dies or fails, up to N\n"
        "times (default 3; -1 = no limit). A rerun of the same training command resumes\n"
        "from the run's latest checkpoint. Stops after success, after exit status %d\n"
        "(preempted: checkpointed and stopped on request; requeue the job), or when it was\n"
        "sent SIGTERM or SIGINT. Forwards SIGINT, SIGUSR1 and SIGUSR2 to COMMAND; the first\n"
        "SIGTERM is forwarded as SIGUSR1 (the job checkpoints and stops with status %d),\n"
        "a second SIGTERM as SIGTERM (mpirun then kills the job).\n"
        "Exit status: COMMAND's last; %d means a collective stalled past its timeout, %d\n"
        "that a rank died and the job ended itself (spawn mode has no launcher to do it).\n",
        MT_EXIT_PREEMPTED, MT_EXIT_PREEMPTED, MT_EXIT_STALLED, MT_EXIT_LOST);
}

static void describe(int status, char *buf, size_t len)
{
    if (WIFEXITED(status)) {
        int code = WEXITSTATUS(status);
        snprintf(buf, len, "exited with status %d%s", code,
                 code == MT_EXIT_STALLED ? " (stalled: a collective waited past its timeout)"
                 : code == MT_EXIT_LOST ? " (a rank died; the job ended itself)"
                 : code == MT_EXIT_PREEMPTED ? " (preempted)" : "");
    } else if (WIFSIGNALED(status))
        snprintf(buf, len, "was killed by signal %d (%s)", WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
    else
        snprintf(buf, len, "stopped (status %d)", status);
}

int main(int argc, char **argv)
{
    int max_failures = 3, first = -1;
    bool quiet = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--")) {
            first = i + 1;
            break;
        }
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--quiet")) {
            quiet = true;
            continue;
        }
        const char *v = NULL;
        if (!strcmp(argv[i], "--max-failures") && i + 1 < argc)
            v = argv[++i];
        else if (!strncmp(argv[i], "--max-failures=", 15))
            v = argv[i] + 15;
        char *end = NULL;
        long n = v ? strtol(v, &end, 10) : 0;
        if (!v || !*v || *end || n < -1) {
            fprintf(stderr, "mpitrain-run: %s: expected --max-failures N (N >= -1) or -- "
                            "COMMAND (see --help)\n", argv[i]);
            return 2;
        }
        max_failures = (int)n;
    }
    if (first < 0 || first >= argc) {
        fprintf(stderr, "mpitrain-run: no command given after -- (see --help)\n");
        return 2;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = forward;
    sigemptyset(&sa.sa_mask);
    int sigs[] = {SIGTERM, SIGINT, SIGUSR1, SIGUSR2};
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++)
        sigaction(sigs[i], &sa, NULL);
    int failures = 0, status = 0;
    for (int attempt = 1;; attempt++) {
        pid_t pid = fork();
        if (pid < 0) {
            fprintf(stderr, "mpitrain-run: fork: %s\n", strerror(errno));
            return 1;
        }
        if (pid == 0) {
            for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++)
                signal(sigs[i], SIG_DFL);
            execvp(argv[first], argv + first);
            fprintf(stderr, "mpitrain-run: cannot run %s: %s\n", argv[first], strerror(errno));
            _exit(127);
        }
        child_pid = pid;
        if (stop_asked) /* a signal that came before the child existed */
            kill(pid, SIGTERM);
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
            ;
        child_pid = 0;
        char what[256];
        describe(status, what, sizeof what);
        bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        bool preempted = WIFEXITED(status) && WEXITSTATUS(status) == MT_EXIT_PREEMPTED;
        if (ok) {
            if (!quiet)
                fprintf(stderr, "mpitrain-run: attempt %d finished successfully\n", attempt);
            return 0;
        }
        if (!preempted && stop_asked && ok) {
            fprintf(stderr, "mpitrain-run: attempt %d finished before the stop request took "
                            "effect\n", attempt);
            return 0;
        }
        if (preempted) {
            fprintf(stderr, "mpitrain-run: attempt %d was preempted after a checkpoint; not "
                            "rerunning (requeue the job to resume); exit %d\n", attempt,
                    MT_EXIT_PREEMPTED);
            return MT_EXIT_PREEMPTED;
        }
        if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
            fprintf(stderr, "mpitrain-run: the command could not be started; not rerunning\n");
            return 127;
        }
        if (stop_asked) {
            fprintf(stderr, "mpitrain-run: attempt %d %s after it was sent %s; not rerunning\n",
                    attempt, what, strsignal(last_signal));
            break;
        }
        failures++;
        if (max_failures != -1 && failures > max_failures) {
            fprintf(stderr, "mpitrain-run: attempt %d %s; failures exhausted (%d of %d allowed); "
                            "giving up\n", attempt, what, failures - 1, max_failures);
            break;
        }
        char allowed[32] = "unlimited";
        if (max_failures != -1)
            snprintf(allowed, sizeof allowed, "%d", max_failures);
        fprintf(stderr, "mpitrain-run: attempt %d %s; rerunning (failure %d of %s allowed), the "
                        "run resumes from its latest checkpoint\n", attempt, what, failures,
                allowed);
    }
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}
