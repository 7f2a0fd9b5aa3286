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
 *
 * After a node is lost, a rerun on the same hosts would fail again. With --hostfile FILE
 * (re-read before every attempt: whoever manages the hosts edits it) or --host-discovery
 * CMD (run before every attempt; prints the hosts that answer, as Horovod's elastic mode
 * asks its discovery script), each attempt gets a hostfile of the hosts usable now, through
 * OMPI_MCA_orte_default_hostfile (and MT_HOSTFILE): an mpirun without -np then starts one
 * rank per slot there, and the run resumes from its checkpoint at the new world size.
 *
 * A node whose link goes down answers nothing, and mpirun learns it only from TCP
 * keepalives on its connection to that node's daemon: until then it waits for that daemon
 * to end the job (Open MPI's defaults, 300 s + 9 x 20 s, let a job whose ranks have all
 * left hang for minutes). So the command gets Open MPI's oob_tcp_keepalive_time, _intvl
 * and _probes (KEEPALIVE below: a lost node is declared lost about 16 s after its link
 * went quiet) unless the user set them, in the environment or in an MCA parameter file.
 */
#include <mpitrain.h>

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t child_pid, stop_asked, last_signal, terms;
static char hosts_path[PATH_MAX]; /* this run's hostfile for the attempts, removed at exit */

static void remove_hosts_file(void)
{
    if (hosts_path[0])
        unlink(hosts_path);
}

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

/* The hosts for the next attempt, from a hostfile or a discovery command's output: lines
 * "HOST", "HOST slots=N" or "HOST:N"; blank lines and '#' comments are skipped. Writes them
 * as an Open MPI hostfile to *path (created once, rewritten each time) and into desc.
 * Returns the number of hosts, or -1 after printing why. */
static int usable_hosts(const char *file, const char *discover, char *desc, size_t desc_len)
{
    FILE *in = discover ? popen(discover, "r") : fopen(file, "r");
    if (!in) {
        fprintf(stderr, "mpitrain-run: %s %s: %s\n", discover ? "cannot run" : "cannot read",
                discover ? discover : file, strerror(errno));
        return -1;
    }
    char *path = hosts_path;
    if (!path[0]) {
        snprintf(path, PATH_MAX, "%s/mpitrain-run-hosts.XXXXXX",
                 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
        int fd = mkstemp(path);
        if (fd < 0) {
            fprintf(stderr, "mpitrain-run: cannot create %s: %s\n", path, strerror(errno));
            path[0] = '\0';
            discover ? pclose(in) : fclose(in);
            return -1;
        }
        close(fd);
        atexit(remove_hosts_file);
    }
    FILE *outf = fopen(path, "w");
    int n = 0;
    size_t used = 0;
    desc[0] = '\0';
    char line[1024];
    while (outf && fgets(line, sizeof line, in)) {
        char host[256], rest[768] = "";
        long slots = 1;
        if (sscanf(line, " %255[^ \t\n:#] %767[^\n]", host, rest) < 1)
            continue;
        char *colon = strchr(line, ':'), *eq = strstr(rest, "slots=");
        if (colon && !strchr(host, ':'))
            slots = strtol(colon + 1, NULL, 10);
        else if (eq)
            slots = strtol(eq + 6, NULL, 10);
        if (slots < 1) {
            fprintf(stderr, "mpitrain-run: %s: host %s: slots must be >= 1; line ignored\n",
                    discover ? discover : file, host);
            continue;
        }
        fprintf(outf, "%s slots=%ld\n", host, slots);
        int w = snprintf(desc + used, desc_len - used, "%s%s (%ld slot%s)", n ? ", " : "", host,
                         slots, slots == 1 ? "" : "s");
        if (w > 0 && (size_t)w < desc_len - used)
            used += (size_t)w;
        n++;
    }
    int status = discover ? pclose(in) : (fclose(in), 0);
    if (!outf || fclose(outf) != 0) {
        fprintf(stderr, "mpitrain-run: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    if (discover && status != 0) {
        fprintf(stderr, "mpitrain-run: host discovery '%s' failed (status %d)\n", discover,
                WIFEXITED(status) ? WEXITSTATUS(status) : status);
        return -1;
    }
    if (n == 0)
        fprintf(stderr, "mpitrain-run: %s names no host\n", discover ? discover : file);
    return n ? n : -1;
}

/* Open MPI's TCP keepalive settings for the daemons' connections, and their values here. */
static const char *const KEEPALIVE[][2] = {
    {"oob_tcp_keepalive_time", "10"},
    {"oob_tcp_keepalive_intvl", "2"},
    {"oob_tcp_keepalive_probes", "3"},
};

/* True when the MCA parameter file at path names a keepalive setting. */
static bool file_sets_keepalive(const char *path)
{
    FILE *f = path && *path ? fopen(path, "r") : NULL;
    char line[1024];
    bool found = false;
    while (f && !found && fgets(line, sizeof line, f)) {
        const char *p = line + strspn(line, " \t");
        found = *p != '#' && strstr(p, "oob_tcp_keepalive_") != NULL;
    }
    if (f)
        fclose(f);
    return found;
}

/* The keepalive settings for the command's mpirun, each unless the user set any of them:
 * in the environment (OMPI_MCA_...), or in the MCA parameter files Open MPI reads
 * (~/.openmpi/mca-params.conf, those OMPI_MCA_mca_base_param_files names, the system's);
 * a --mca on mpirun's command line wins over the environment anyway. */
static void set_keepalive(void)
{
    char name[128], path[PATH_MAX];
    for (size_t i = 0; i < sizeof KEEPALIVE / sizeof *KEEPALIVE; i++) {
        snprintf(name, sizeof name, "OMPI_MCA_%s", KEEPALIVE[i][0]);
        if (getenv(name))
            return;
    }
    const char *home = getenv("HOME");
    snprintf(path, sizeof path, "%s/.openmpi/mca-params.conf", home ? home : "");
    if ((home && file_sets_keepalive(path)) ||
        file_sets_keepalive("/etc/openmpi/openmpi-mca-params.conf"))
        return;
    const char *files = getenv("OMPI_MCA_mca_base_param_files");
    for (const char *p = files; p && *p;) {
        size_t n = strcspn(p, ":");
        snprintf(path, sizeof path, "%.*s", (int)(n < sizeof path ? n : sizeof path - 1), p);
        if (file_sets_keepalive(path))
            return;
        p += n + (p[n] == ':');
    }
    for (size_t i = 0; i < sizeof KEEPALIVE / sizeof *KEEPALIVE; i++) {
        snprintf(name, sizeof name, "OMPI_MCA_%s", KEEPALIVE[i][0]);
        setenv(name, KEEPALIVE[i][1], 0);
    }
}

static void usage(FILE *out)
{
    fprintf(out,
        "usage: mpitrain-run [--max-failures N] [--hostfile FILE | --host-discovery CMD]\n"
        "                    [--quiet] -- COMMAND [ARGS...]\n"
        "\n"
        "Runs COMMAND (an mpirun or srun line) and reruns it when it dies or fails, up to N\n"
        "times (default 3; -1 = no limit). A rerun of the same training command resumes\n"
        "from the run's latest checkpoint. Stops after success, after exit status %d\n"
        "(preempted: checkpointed and stopped on request; requeue the job), or when it was\n"
        "sent SIGTERM or SIGINT. Forwards SIGINT, SIGUSR1 and SIGUSR2 to COMMAND; the first\n"
        "SIGTERM is forwarded as SIGUSR1 (the job checkpoints and stops with status %d),\n"
        "a second SIGTERM as SIGTERM (mpirun then kills the job).\n"
        "--hostfile FILE, --host-discovery CMD: before every attempt, read FILE or run CMD\n"
        "(sh -c) for the hosts that are usable now, one a line: HOST, HOST slots=N or\n"
        "HOST:N; the attempt runs on those (OMPI_MCA_orte_default_hostfile and MT_HOSTFILE\n"
        "name a hostfile of them; give mpirun no -np and it starts one rank per slot), so\n"
        "after a node is lost the job restarts on the nodes that answer and resumes at the\n"
        "smaller world size.\n"
        "Open MPI's TCP keepalives for mpirun's daemons are set (OMPI_MCA_oob_tcp_keepalive_\n"
        "time=10, _intvl=2, _probes=3) unless set already, in the environment or an MCA\n"
        "parameter file: a node whose link goes down is then declared lost in about 16 s.\n"
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
    const char *hostfile = NULL, *discover = NULL;
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
        const char **opt = !strcmp(argv[i], "--hostfile") ? &hostfile
                           : !strcmp(argv[i], "--host-discovery") ? &discover : NULL;
        if (opt && i + 1 < argc) {
            *opt = argv[++i];
            continue;
        }
        const char *v = NULL;
        if (!strcmp(argv[i], "--max-failures") && i + 1 < argc)
            v = argv[++i];
        else if (!strncmp(argv[i], "--max-failures=", 15))
            v = argv[i] + 15;
        char *end = NULL;
        errno = 0;
        long n = v && (*v == '-' || (*v >= '0' && *v <= '9')) ? strtol(v, &end, 10) : -2;
        if (!v || !*v || !end || *end || errno || n < -1 || n > INT_MAX) {
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
    if (hostfile && discover) {
        fprintf(stderr, "mpitrain-run: --hostfile and --host-discovery exclude each other\n");
        return 2;
    }
    set_keepalive();
    char hosts[4096] = "", last_hosts[4096] = "";
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = forward;
    sigemptyset(&sa.sa_mask);
    int sigs[] = {SIGTERM, SIGINT, SIGUSR1, SIGUSR2};
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++)
        sigaction(sigs[i], &sa, NULL);
    int failures = 0, status = 0;
    for (int attempt = 1;; attempt++) {
        if ((hostfile || discover)
            && usable_hosts(hostfile, discover, hosts, sizeof hosts) < 0) {
            fprintf(stderr, "mpitrain-run: attempt %d: no usable host; not %s\n", attempt,
                    attempt == 1 ? "starting" : "rerunning");
            status = attempt == 1 ? 1 << 8 : status;
            break;
        }
        if (hosts_path[0]) {
            if (strcmp(hosts, last_hosts))
                fprintf(stderr, "mpitrain-run: attempt %d on %s\n", attempt, hosts);
            snprintf(last_hosts, sizeof last_hosts, "%s", hosts);
            setenv("OMPI_MCA_orte_default_hostfile", hosts_path, 1);
            setenv("MT_HOSTFILE", hosts_path, 1);
        }
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
