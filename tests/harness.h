/*
 * harness.h -- the CUnit harness for single-process and MPI suites, and what their tests
 * share: a storage folder of the job's own, configs and fits, assertions that print both
 * values.
 *
 * A suite file lists its tests once, in a NULL-terminated mt_test table, and calls
 * mt_test_main (mt_test_main_with for fixtures). The program runs every test, or those
 * named in its first argument (NAME[,NAME...]). In MPI mode every rank runs the same
 * tests; the failure count is summed over ranks, every rank's failed assertions are
 * printed with its rank, rank 0 prints the CUnit summary, and every rank exits with the
 * same status.
 */
#ifndef MT_TEST_HARNESS_H
#define MT_TEST_HARNESS_H

#include <CUnit/CUnit.h>
#include <mpitrain.h>
#include <stdbool.h>

#include "../collectives/collectives.h"

typedef struct {
    const char *name;
    void (*fn)(void);
} mt_test;

int mt_test_main(int argc, char **argv, const char *suite, const mt_test *tests, bool mpi);
/* The same with fixtures: before runs once MPI is up and mt_test_storage() exists, after
 * once the tests are done, before both go; either may be NULL. */
int mt_test_main_with(int argc, char **argv, const char *suite, const mt_test *tests, bool mpi,
                      void (*before)(void), void (*after)(void));

/* A storage_path of this test job's own (MPI suites: the same on every rank), removed at
 * the end. */
const char *mt_test_storage(void);
/* <mt_test_storage()>/<name>: a suite's own files (fixtures) beside its runs; four static
 * buffers used in turn, so a call may take up to four. */
const char *mt_test_path(const char *name);
/* A trainer config for a run of that name in mt_test_storage(), silent. */
mt_trainer_config mt_test_config(const char *name);
/* One fit of fn with cfg: its code; the result in *out (owned) when out is not NULL. */
int mt_test_fit(mt_trainer_config cfg, mt_train_fn fn, void *arg, mt_result **out);
/* One fit of the trainer *t, which it then destroys: its code; the result in *out (owned)
 * when out is not NULL. */
int mt_test_fit_trainer(mt_trainer **t, mt_result **out);
/* A dataset the trainer gets before fit: its name, HDF5 file and group. */
typedef struct {
    const char *name, *file, *group;
} mt_test_dataset;
/* One fit of fn with cfg and the nsets datasets: its code; the result's error text ("" when
 * none) in err[len] when err is not NULL. */
int mt_test_fit_datasets(mt_trainer_config cfg, mt_train_fn fn, void *arg,
                         const mt_test_dataset *sets, int nsets, char *err, size_t len);
/* <mt_test_storage()>/<name>/<file> (a static buffer: one at a time). */
const char *mt_test_run_file(const char *name, const char *file);

/* A line of /proc/self/status in KiB ("VmRSS", "VmHWM"); -1 when it cannot be read. */
long mt_test_status_kib(const char *field);
/* MPI suites: this process's rank and the job's size (0 and 1 in a single-process suite). */
int mt_test_rank(void);
int mt_test_size(void);

/* Where the ranks of MPI_COMM_WORLD really sit, from their host names (gethostname), an
 * oracle independent of the library's topology: this rank's index among the ranks of its
 * host, their number, the host's index among hosts ordered by their lowest rank, and the
 * number of hosts. Collective. */
typedef struct {
    int local_rank, local_size, node_rank, num_nodes;
} mt_test_layout;
mt_test_layout mt_test_host_layout(void);

/* Assertions that print both expressions and both values. */
#define MT_ASSERT_INT_EQ(a, b)                                                \
    do {                                                                      \
        long long mt_a_ = (long long)(a), mt_b_ = (long long)(b);              \
        char mt_m_[512];                                                      \
        snprintf(mt_m_, sizeof mt_m_, "%s == %s (%lld vs %lld) [rank %d]", #a, #b, mt_a_, \
                 mt_b_, mt_test_rank());                                      \
        CU_assertImplementation(mt_a_ == mt_b_, __LINE__, mt_m_, __FILE__, "", CU_FALSE); \
    } while (0)

#define MT_ASSERT_STR_CONTAINS(hay, needle)                                   \
    do {                                                                      \
        const char *mt_h_ = (hay), *mt_n_ = (needle);                         \
        char mt_m_[2048];                                                     \
        snprintf(mt_m_, sizeof mt_m_, "%s contains \"%s\" (got \"%.700s\") [rank %d]", #hay, \
                 mt_n_, mt_h_ ? mt_h_ : "(null)", mt_test_rank());            \
        CU_assertImplementation(mt_h_ && strstr(mt_h_, mt_n_) != NULL, __LINE__, mt_m_, \
                                __FILE__, "", CU_FALSE);                      \
    } while (0)

#define MT_ASSERT_STR_EQ(a, b)                                                \
    do {                                                                      \
        const char *mt_a_ = (a), *mt_b_ = (b);                                \
        char mt_m_[2048];                                                     \
        snprintf(mt_m_, sizeof mt_m_, "%s == %s (\"%.400s\" vs \"%.400s\") [rank %d]", #a, #b, \
                 mt_a_ ? mt_a_ : "(null)", mt_b_ ? mt_b_ : "(null)", mt_test_rank()); \
        CU_assertImplementation(mt_a_ && mt_b_ && !strcmp(mt_a_, mt_b_), __LINE__, mt_m_, \
                                __FILE__, "", CU_FALSE);                      \
    } while (0)

/* Removes a test folder and everything in it (rank-local; no shell). */
void mt_test_rmtree(const char *dir);

#endif
