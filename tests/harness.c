/*
 * harness.c -- runs a suite's test table under CUnit, alone or on every MPI rank.
 */
#include "harness.h"

#include "../runtime/runtime.h"

#include <CUnit/Basic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int rank, size = 1;
static char storage[256];

const char *mt_test_storage(void) { return storage; }

mt_trainer_config mt_test_config(const char *name)
{
    mt_trainer_config cfg = {.run = {.storage_path = mt_test_storage(), .name = name,
                                     .verbose = MT_VERBOSE_SILENT}};
    return cfg;
}

int mt_test_fit_trainer(mt_trainer **t, mt_result **out)
{
    mt_result *r = NULL;
    int rc = mt_trainer_fit(*t, &r);
    if (out)
        *out = r;
    else
        mt_result_free(&r);
    mt_trainer_destroy(t);
    return rc;
}

/* a fit of fn with cfg and the datasets; the result in *out (owned) when out is not NULL */
static int fit(mt_trainer_config cfg, mt_train_fn fn, void *arg, const mt_test_dataset *sets,
               int nsets, mt_result **out)
{
    mt_trainer *t = NULL;
    CU_ASSERT_EQUAL_FATAL(mt_trainer_create(&t, fn, arg, &cfg), MT_OK);
    for (int i = 0; i < nsets; i++)
        MT_ASSERT_INT_EQ(mt_trainer_add_dataset(t, sets[i].name, sets[i].file, sets[i].group),
                         MT_OK);
    return mt_test_fit_trainer(&t, out);
}

int mt_test_fit(mt_trainer_config cfg, mt_train_fn fn, void *arg, mt_result **out)
{
    return fit(cfg, fn, arg, NULL, 0, out);
}

int mt_test_fit_datasets(mt_trainer_config cfg, mt_train_fn fn, void *arg,
                         const mt_test_dataset *sets, int nsets, char *err, size_t len)
{
    mt_result *r = NULL;
    int rc = fit(cfg, fn, arg, sets, nsets, &r);
    if (err)
        snprintf(err, len, "%s", mt_result_error(r) ? mt_result_error(r) : "");
    mt_result_free(&r);
    return rc;
}

const char *mt_test_path(const char *name)
{
    static char p[4][1200];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", mt_test_storage(), name);
    return p[k];
}

const char *mt_test_run_file(const char *name, const char *file)
{
    static char p[1200];
    snprintf(p, sizeof p, "%s/%s/%s", mt_test_storage(), name, file);
    return p;
}

static void make_storage(bool mpi)
{
    if (rank == 0) {
        snprintf(storage, sizeof storage, "%s/mpitrain-test-XXXXXX",
                 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
        if (!mkdtemp(storage))
            perror("mkdtemp");
    }
    if (mpi)
        MPI_Bcast(storage, sizeof storage, MPI_CHAR, 0, MPI_COMM_WORLD);
}

static void remove_storage(bool mpi)
{
    if (mpi)
        MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0 && storage[0]) {
        mt_test_rmtree(storage);
    }
}

int mt_test_rank(void) { return rank; }
int mt_test_size(void) { return size; }

/* whether rank r is the lowest rank on its host, in a table of LEN-byte host names */
static bool first_on_host(const char *all, size_t len, int r)
{
    for (int q = 0; q < r; q++)
        if (!strcmp(all + (size_t)q * len, all + (size_t)r * len))
            return false;
    return true;
}

mt_test_layout mt_test_host_layout(void)
{
    enum { LEN = 256 };
    mt_test_layout l = {0, 0, 0, 0};
    char mine[LEN] = {0};
    gethostname(mine, LEN - 1);
    char *all = calloc((size_t)size, LEN);
    if (!all)
        return l;
    MPI_Allgather(mine, LEN, MPI_CHAR, all, LEN, MPI_CHAR, MPI_COMM_WORLD);
    int leader = rank; /* the lowest rank on this host */
    for (int r = 0; r < size; r++) {
        bool here = !strcmp(all + (size_t)r * LEN, mine);
        if (here && r < leader)
            leader = r;
        l.local_rank += here && r < rank;
        l.local_size += here;
    }
    for (int r = 0; r < size; r++)
        if (first_on_host(all, LEN, r)) {
            l.num_nodes++;
            l.node_rank += r < leader;
        }
    free(all);
    return l;
}

long mt_test_status_kib(const char *field)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    size_t n = strlen(field);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, field, n) && line[n] == ':')
            v = strtol(line + n + 1, NULL, 10);
    if (f)
        fclose(f);
    return v;
}

static void print_failures(void)
{
    for (CU_pFailureRecord f = CU_get_failure_list(); f; f = f->pNext)
        fprintf(stderr, "FAIL rank %d/%d: %s: %s:%u: %s\n", rank, size,
                f->pTest ? f->pTest->pName : "?", f->strFileName ? f->strFileName : "?",
                f->uiLineNumber, f->strCondition ? f->strCondition : "?");
}

/* whether NAME is one of the comma-separated names in LIST */
static bool listed(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        if (!strncmp(p, name, n) && (p[n] == ',' || !p[n]))
            return true;
    return false;
}

int mt_test_main(int argc, char **argv, const char *suite, const mt_test *tests, bool mpi)
{
    return mt_test_main_with(argc, argv, suite, tests, mpi, NULL, NULL);
}

int mt_test_main_with(int argc, char **argv, const char *suite, const mt_test *tests, bool mpi,
                      void (*before)(void), void (*after)(void))
{
    double t_start = mt__now(), t_init = t_start;
    mt__test_arm(); /* the tests set MT_TEST_FAIL_AT between calls */
    if (mpi) {
        int irc = mt_init(&argc, &argv);
        t_init = mt__now();
        if (irc != MT_OK) {
            fprintf(stderr, "%s: MPI initialisation failed: %s\n", suite, mt_last_error());
            return 2;
        }
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        MPI_Comm_size(MPI_COMM_WORLD, &size);
    }
    make_storage(mpi);
    if (before)
        before();
    const char *only = argc > 1 ? argv[1] : NULL; /* run some tests: NAME[,NAME...] */
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    char name[128];
    snprintf(name, sizeof name, mpi ? "%s (%d ranks)" : "%s", suite, size);
    CU_pSuite s = CU_add_suite(name, NULL, NULL);
    for (const mt_test *t = tests; t->name; t++)
        if (!only || listed(only, t->name))
            CU_add_test(s, t->name, t->fn);
    CU_basic_set_mode(rank == 0 ? CU_BRM_VERBOSE : CU_BRM_SILENT);
    if (rank == 0)
        fflush(stdout);
    CU_basic_run_tests();
    unsigned long failures = CU_get_number_of_failures();
    unsigned long run = CU_get_number_of_tests_run();
    print_failures();
    fflush(stdout);
    fflush(stderr);
    if (mpi) {
        unsigned long total = failures;
        MPI_Allreduce(MPI_IN_PLACE, &total, 1, MPI_UNSIGNED_LONG, MPI_SUM, MPI_COMM_WORLD);
        if (rank == 0)
            printf("\nMPI suite %s: %lu tests at %d ranks, %lu failed assertions on all ranks\n",
                   suite, run, size, total);
        failures = total;
    }
    CU_cleanup_registry();
    if (after)
        after();
    remove_storage(mpi);
    double t_fin = mt__now();
    if (mpi)
        mt_finalize();
    if (mpi && getenv("MT_TEST_SHM")) { /* under tests/mpi_suite.sh: where a slow run's time went */
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        fprintf(stderr, "harness: rank %d: mt_init %.1f s, tests %.1f s, mt_finalize %.1f s, "
                "main left at %lld.%03ld\n", rank, t_init - t_start, t_fin - t_init,
                mt__now() - t_fin, (long long)now.tv_sec, now.tv_nsec / 1000000);
    }
    return failures ? 1 : 0;
}

void mt_test_rmtree(const char *dir)
{
    /* the library's own removal: a path never passes through a shell */
    if (mt__rmtree(dir) != MT_OK)
        fprintf(stderr, "could not remove %s: %s\n", dir, mt_last_error());
}
