/*
 * mpitrain-info -- print where every rank of a job sits: world and local rank, node rank,
 * and the CPUs it may use. A quick check of a launch line (binding, mapping, node count)
 * before a long job: `mpirun -np 4 --map-by slot:PE=2 --bind-to core mpitrain-info`.
 */
#include <mpitrain.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *out)
{
    fprintf(out,
            "usage: mpirun -np N mpitrain-info [OPTIONS]\n"
            "\n"
            "Prints one line per rank (world rank, local rank, node rank, CPUs) and checks the\n"
            "launch against the options below, like a training job would.\n\n");
    mt_config_usage(out);
}

static int report(mt_context *c, void *arg)
{
    int n = mt_world_size(c);
    int row[5] = {mt_world_rank(c), mt_local_rank(c), mt_local_world_size(c), mt_node_rank(c),
                  mt_num_cpus(c)};
    int *all = calloc((size_t)n * 5, sizeof *all);
    if (!all)
        return MT_ENOMEM;
    int rc = mt_allgather(c, row, all, 5, MT_I32);
    if (rc == MT_OK && mt_world_rank(c) == 0) {
        printf("experiment %s: %d rank%s\n", mt_experiment_name(c), n, n == 1 ? "" : "s");
        for (int r = 0; r < n; r++)
            printf("rank %d/%d: local %d/%d node %d cpus %d\n", all[r * 5], n, all[r * 5 + 1],
                   all[r * 5 + 2], all[r * 5 + 3], all[r * 5 + 4]);
        fflush(stdout);
    }
    free(all);
    return rc;
}

int main(int argc, char **argv)
{
    /* a diagnostic: its run directory is replaced every time */
    mt_trainer_config cfg = {.run = {.name = "mpitrain-info", .overwrite = true}};
    int rc = mt_init(&argc, &argv);
    if (rc) {
        fprintf(stderr, "mpitrain-info: %s\n", mt_last_error());
        return 1;
    }
    rc = mt_config_from_args(&cfg, &argc, &argv);
    bool help = argc > 1 && !strcmp(argv[1], "--help");
    int world_rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    if (rc && world_rank == 0)
        fprintf(stderr, "mpitrain-info: %s\n", mt_last_error());
    if (!rc && !help && argc > 1) {
        if (world_rank == 0)
            fprintf(stderr, "mpitrain-info: unknown option '%s' (see --help)\n", argv[1]);
        rc = MT_EINVAL;
    }
    if (help && world_rank == 0)
        usage(stdout);
    if (!rc && !help) {
        mt_trainer *t = NULL;
        mt_result *res = NULL;
        rc = mt_trainer_create(&t, report, NULL, &cfg);
        if (!rc)
            rc = mt_trainer_fit(t, &res);
        if (rc && world_rank == 0)
            fprintf(stderr, "mpitrain-info: %s\n",
                    mt_result_error(res) ? mt_result_error(res) : mt_last_error());
        mt_result_free(&res);
        mt_trainer_destroy(&t);
    }
    mt_finalize();
    return rc ? 1 : 0;
}
