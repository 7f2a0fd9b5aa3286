/*
 * mpitrain-info -- print where every rank of a job sits: world and local rank, node rank,
 * the number and list of CPUs it may use, and its host name. A quick check of a launch line (binding, mapping, node count)
 * before a long job: `mpirun -np 4 --map-by slot:PE=2 --bind-to core mpitrain-info`.
 * With --stale-shm, what the next job's start would remove from /dev/shm (no MPI at all).
 */
#include <mpitrain.h>

#include "scratch.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The library's options this program takes: the launch checks, and where to keep a run. */
static const char *const lib_options[] = {"num-workers", "cpus-per-worker", "name",
                                          "storage-path", NULL};

static void usage(FILE *out)
{
    fprintf(out,
            "usage: mpirun -np N mpitrain-info [OPTIONS]     or     mpitrain-info --num-workers N\n"
            "\n"
            "Prints one line per rank (world rank, local rank, node rank, number of CPUs, host\n"
            "name, CPU list) and checks the launch against --num-workers and --cpus-per-worker,\n"
            "like a training job would. It runs as a job of its own, whose run directory goes to\n"
            "a temporary folder removed at exit; with --name or --storage-path (or MT_NAME,\n"
            "MT_STORAGE_PATH) it is kept there instead, as a new run: a name that exists is\n"
            "refused, and that run is left as it was.\n\n"
            "  --help                               this text\n"
            "  --stale-shm                          (alone, no launcher) list the shared memory in\n"
            "                                       /dev/shm that jobs killed outright left\n"
            "                                       behind, which the next job to start on this\n"
            "                                       machine removes; removes nothing itself\n");
    const mt_trainer_config shown = {.run = {.name = "mpitrain-info_<date>_<time>",
                                             .storage_path = "a temporary folder, removed at exit"}};
    mt_config_help_only(out, &shown, lib_options);
}

/* "0-3,6" from this process's affinity mask */
static void cpu_list(char *out, size_t len)
{
    cpu_set_t set;
    size_t used = 0;
    out[0] = '\0';
    if (sched_getaffinity(0, sizeof set, &set) != 0) {
        snprintf(out, len, "?");
        return;
    }
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (!CPU_ISSET(cpu, &set))
            continue;
        int last = cpu;
        while (last + 1 < CPU_SETSIZE && CPU_ISSET(last + 1, &set))
            last++;
        int n = last > cpu ? snprintf(out + used, len - used, "%s%d-%d", used ? "," : "", cpu, last)
                           : snprintf(out + used, len - used, "%s%d", used ? "," : "", cpu);
        if (n < 0 || (size_t)n >= len - used)
            break;
        used += (size_t)n;
        cpu = last;
    }
}

enum { TEXT = 256 };
typedef struct {
    int nums[5]; /* world rank, local rank, local world size, node rank, CPUs */
    char host[TEXT], cpus[TEXT];
} row;

static int report(mt_context *c, void *arg)
{
    int n = mt_world_size(c);
    row mine = {{mt_world_rank(c), mt_local_rank(c), mt_local_world_size(c), mt_node_rank(c),
                 mt_num_cpus(c)}, {0}, {0}};
    if (gethostname(mine.host, sizeof mine.host - 1) != 0)
        snprintf(mine.host, sizeof mine.host, "?");
    cpu_list(mine.cpus, sizeof mine.cpus);
    row *all = calloc((size_t)n, sizeof *all);
    if (!all)
        return MT_ENOMEM;
    int rc = mt_allgather(c, &mine, all, sizeof mine, MT_U8);
    if (rc == MT_OK && mt_world_rank(c) == 0) {
        printf("experiment %s: %d rank%s\n", mt_experiment_name(c), n, n == 1 ? "" : "s");
        for (int r = 0; r < n; r++)
            printf("rank %d/%d: local %d/%d node %d cpus %d host %s cpu-list %s\n",
                   all[r].nums[0], n, all[r].nums[1], all[r].nums[2], all[r].nums[3],
                   all[r].nums[4], all[r].host, all[r].cpus);
        fflush(stdout);
    }
    free(all);
    return rc;
}

static void print_stale(const char *path, const char *why, void *arg)
{
    (void)arg;
    printf("%s: %s\n", path, why);
}

/* --stale-shm: before mt_init, which would remove what this lists */
static int stale_shm(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "mpitrain-info: --stale-shm takes no other argument (see --help)\n");
        return MT_EXIT_USAGE;
    }
    (void)argv;
    int n = mt_stale_shm(false, print_stale, NULL);
    if (n < 0) {
        fprintf(stderr, "mpitrain-info: %s\n", mt_last_error());
        return 1;
    }
    if (n == 0)
        printf("no stale shared memory in /dev/shm\n");
    else
        printf("%d stale segment%s in /dev/shm: the next job to start on this machine "
               "removes %s\n", n, n == 1 ? "" : "s", n == 1 ? "it" : "them");
    return 0;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--stale-shm"))
            return stale_shm(argc, argv);
    /* a diagnostic: it never changes a run that exists (a job's own name given to check its
     * launch line is refused, naming the run, and the run stays as it was) */
    static const char default_name[] = "mpitrain-info";
    mt_trainer_config cfg = {.run = {.name = default_name, .refuse_existing = true}};
    int rc = mt_init(&argc, &argv);
    if (rc) {
        fprintf(stderr, "mpitrain-info: %s\n", mt_last_error());
        return 1;
    }
    rc = mt_config_from_args_only(&cfg, &argc, &argv, lib_options);
    /* a name or a storage path (option or environment) asks for the run to be kept */
    bool asked = cfg.run.storage_path || cfg.run.name != default_name;
    bool help = !rc && mt_args_help(argc, argv);
    if (!rc && !help)
        rc = mt_args_rest(argc, argv);
    int rank = mt_job_rank();
    if (rc && rank == 0)
        fprintf(stderr, "mpitrain-info: %s\n", mt_last_error());
    if (help && rank == 0)
        usage(stdout);
    if (rc || help) {
        mt_finalize();
        return rc ? MT_EXIT_USAGE : 0;
    }
    char tmp[4096] = "", name[256];
    /* rank 0's choices, on every rank: each path below is collective */
    bool new_name = asked && cfg.run.name == default_name;
    scratch_agree(&asked, &new_name);
    if (new_name) { /* a storage path only: a new run there */
        scratch_run_name("mpitrain-info", cfg.run.storage_path, name, sizeof name);
        cfg.run.name = name;
    }
    if (!asked) { /* collective over MPI_COMM_WORLD: every rank learns a failure */
        if (scratch_make(getenv("TMPDIR"), "mpitrain-info", true, tmp, sizeof tmp))
            rc = MT_EIO;
        cfg.run.storage_path = tmp[0] ? tmp : "(rank 0's temporary folder)";
        cfg.run.verbose = MT_VERBOSE_SILENT; /* no line naming a folder that is gone */
    }
    mt_trainer *t = NULL;
    mt_result *res = NULL;
    if (!rc)
        rc = mt_trainer_create(&t, report, NULL, &cfg);
    if (!rc)
        rc = mt_trainer_fit(t, &res);
    if (rc && rank == 0)
        fprintf(stderr, "mpitrain-info: %s\n",
                mt_result_error(res) ? mt_result_error(res) : mt_last_error());
    mt_result_free(&res);
    mt_trainer_destroy(&t);
    scratch_remove(tmp);
    mt_finalize();
    return rc ? 1 : 0;
}
