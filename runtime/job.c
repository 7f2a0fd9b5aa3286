/*
 * job.c -- the process-wide job: mt_init and mt_finalize, the job's world and its size,
 * spawn mode, this process's CPUs, and whether a fit is running. Each fit's own context
 * is context.c.
 */
#include "runtime.h"
#include "../collectives/watchdog.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static bool we_initialised_mpi;
/* Spawn mode: a program started without a launcher whose num_workers is N > 1 starts
 * N-1 copies of itself (same executable, same arguments) with MPI_Comm_spawn; parent and
 * children merge into one intracommunicator, the job's world from then on. No launcher
 * ends such a job when one of its processes dies, so every rank watches the others from
 * before the spawn to the end of mt_finalize (the lifeline, collectives/lifeline.c). */
static MPI_Comm job_world = MPI_COMM_NULL; /* merged; NULL = MPI_COMM_WORLD */
static MPI_Comm family = MPI_COMM_NULL;    /* the parent/children intercommunicator */
static char **saved_argv;
static int saved_argc;
static bool launched; /* started by a launcher (mpirun, srun), not as a singleton */

MPI_Comm mt__world(void)
{
    return job_world != MPI_COMM_NULL ? job_world : MPI_COMM_WORLD;
}

/* MPI may be asked: initialised and not finalised yet. */
static bool mpi_up(void)
{
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    return init && !fin;
}

int mt_job_rank(void)
{
    int r = 0;
    if (mpi_up())
        MPI_Comm_rank(mt__world(), &r);
    return r;
}

int mt_job_size(void)
{
    int n = 1;
    if (mpi_up())
        MPI_Comm_size(mt__world(), &n);
    return n;
}

int mt_init(int *argc, char ***argv)
{
    int rc = MT_OK, init = 0, provided = 0, fin = 0;
    MPI_Finalized(&fin);
    if (fin)
        return mt__error(MT_EINVAL, "mt_init: MPI was finalised already (after mt_finalize "
                                    "it cannot start again in this process)");
    /* the shared memory of jobs killed outright on this machine (common/shm.c) */
    mt__shm_reap_once();
    /* what a launcher leaves in the environment (read before MPI_Init adds its own) */
    launched = getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK") ||
               getenv("PMI_RANK") || getenv("SLURM_STEP_ID");
    /* a spawned child joins the lifeline before anything that waits for its peers */
    if (getenv("MT_SPAWN_BOARD")) {
        const char *wr = getenv("OMPI_COMM_WORLD_RANK"); /* test only: the rank - 1 */
        wr = wr ? wr : getenv("PMI_RANK");                /* (MPICH's launcher) */
        int r = wr ? atoi(wr) + 1 : -1;
        mt__test_stop("stop-init", r);
        if ((rc = mt__lifeline_join()))
            goto out;
        mt__test_die("die-init", r);
    }
    MT__MPI(MPI_Initialized(&init), out);
    if (!init) {
        MT__MPI(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided), out);
        we_initialised_mpi = true;
    }
    if (argc && argv && *argv && !saved_argv) { /* before options are taken out of argv */
        saved_argv = calloc((size_t)*argc + 1, sizeof *saved_argv);
        for (int i = 0; saved_argv && i < *argc; i++)
            saved_argv[i] = (*argv)[i];
        saved_argc = saved_argv ? *argc : 0;
    }
    MPI_Comm parent = MPI_COMM_NULL;
    MT__MPI(MPI_Comm_get_parent(&parent), out);
    if (parent != MPI_COMM_NULL && job_world == MPI_COMM_NULL) {
        family = parent;
        int r = 0;
        MPI_Comm_rank(MPI_COMM_WORLD, &r);
        mt__test_die("die-merge", r + 1);
        MPI_Comm_set_errhandler(family, MPI_ERRORS_RETURN); /* mt_finalize: errors return */
        MT__MPI(MPI_Intercomm_merge(parent, 1, &job_world), out);
        MPI_Comm_rank(job_world, &r);
        mt__lifeline_merged(r);
    }
out:
    return rc;
}

int mt__spawn(int workers, double timeout_s)
{
    int rc = MT_OK, size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    mt__lifeline_timeout(timeout_s); /* the spawned ranks' too */
    if (workers <= 1 || size != 1 || job_world != MPI_COMM_NULL || launched)
        return MT_OK; /* under a launcher, a wrong count is fit's error to report */
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return mt__error(MT_EIO, "spawn mode: cannot find this program's path");
    exe[n] = '\0';
    /* the children get our arguments; the options mt_config_from_args removed (e.g.
     * --num-workers) come back through the environment of the spawn */
    char env[128];
    if ((rc = mt__lifeline_create(workers, timeout_s, env, sizeof env)))
        return rc;
    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "map_by", "slot:oversubscribe");
    MPI_Info_set(info, "env", env); /* the lifeline's name */
    int *errs = calloc((size_t)workers, sizeof *errs);
    char **args = saved_argc > 1 ? saved_argv + 1 : MPI_ARGV_NULL;
    /* a child that dies before it joins fails the spawn: returned (MPI_COMM_SELF's
     * handler would abort this process with Open MPI's error class, 17), so that the
     * lifeline's verdict, MT_EXIT_LOST, is the job's status */
    MPI_Errhandler was;
    MPI_Comm_get_errhandler(MPI_COMM_SELF, &was);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    int e = MPI_Comm_spawn(exe, args, workers - 1, info, 0, MPI_COMM_SELF, &family, errs);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, was);
    MPI_Errhandler_free(&was);
    MPI_Info_free(&info);
    free(errs);
    if (e != MPI_SUCCESS) {
        mt__lifeline_settle(2.0);
        mt__lifeline_leave();
        return mt__mpi_error(e, "MPI_Comm_spawn (spawn mode)");
    }
    mt__lifeline_spawned();
    MPI_Comm_set_errhandler(family, MPI_ERRORS_RETURN); /* mt_finalize: errors return */
    MT__MPI(MPI_Intercomm_merge(family, 0, &job_world), out);
    mt__lifeline_merged(0);
out:
    return rc;
}

int mt_finalize(void)
{
    int rc = MT_OK, fin = 0;
    if (mt__fit_running())
        return mt__error(MT_EINVAL, "mt_finalize: a fit is running (called from the training "
                                    "function?); finalise after fit returns");
    int me = mt_job_rank();
    mt__test_pause("slow-finalize", me); /* work of its own after fit, the others waiting */
    mt__lifeline_finalizing();
    mt__test_die("die-finalize", me);
    mt__test_stop("stop-finalize", me);
    if (job_world != MPI_COMM_NULL)
        MPI_Comm_free(&job_world);
    if (family != MPI_COMM_NULL) {
        /* waits for every rank of the other side: a dead one ends the job (lifeline).
         * Open MPI reports a peer lost here through MPI_COMM_WORLD's handler: returned,
         * so that the job ends with MT_EXIT_LOST rather than with an abort of its own. */
        MPI_Errhandler was;
        MPI_Comm_get_errhandler(MPI_COMM_WORLD, &was);
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        int e = MPI_Comm_disconnect(&family);
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, was);
        MPI_Errhandler_free(&was);
        if (e != MPI_SUCCESS) {
            mt__lifeline_check(); /* the error may be a rank's death: that ends the job */
            rc = mt__mpi_error(e, "MPI_Comm_disconnect (spawn mode)");
            family = MPI_COMM_NULL;
        }
        mt__test_die("die-disconnected", me);
    }
    free(saved_argv);
    saved_argv = NULL;
    saved_argc = 0;
    if (we_initialised_mpi) {
        MT__MPI(MPI_Finalized(&fin), out);
        if (!fin)
            MT__MPI(MPI_Finalize(), out);
        we_initialised_mpi = false;
    }
out:
    mt__lifeline_leave(); /* the peers may stop watching this rank now */
    return rc;
}

int mt__affinity_cpus(char *list, size_t list_len)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    if (list && list_len)
        list[0] = '\0';
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return 1;
    size_t used = 0;
    for (int i = 0; i < CPU_SETSIZE && list && used + 8 < list_len; i++)
        if (CPU_ISSET(i, &set))
            used += (size_t)snprintf(list + used, list_len - used, "%s%d", used ? "," : "", i);
    int n = CPU_COUNT(&set);
    return n > 0 ? n : 1;
}

/* A fit is running in this process (fit is collective over the whole job: one at a time,
 * and never from inside a training function). */
static _Atomic int fits_running;

bool mt__fit_running(void)
{
    return fits_running > 0;
}

void mt__fit_enter(void)
{
    fits_running++;
}

void mt__fit_leave(void)
{
    fits_running--;
}
