/*
 * harness.h -- the CUnit harness for single-process and MPI suites.
 *
 * A suite file lists its tests once, in a NULL-terminated mt_test table, and calls
 * mt_test_main. In MPI mode every rank runs every test; the failure count is summed over
 * ranks, every rank's failed assertions are printed with its rank, rank 0 prints the
 * CUnit summary, and every rank exits with the same status.
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
/* Optional: run after MPI is up and before it goes down (fixtures). */
extern void (*mt_test_before)(void);
extern void (*mt_test_after)(void);

/* A storage_path of this test job's own (MPI suites: the same on every rank), removed at
 * the end. */
const char *mt_test_storage(void);
/* A trainer config for a run of that name in mt_test_storage(), silent. */
mt_trainer_config mt_test_config(const char *name);
/* One fit of fn with cfg: its code; the result in *out (owned) when out is not NULL. */
int mt_test_fit(mt_trainer_config cfg, mt_train_fn fn, void *arg, mt_result **out);
/* <mt_test_storage()>/<name>/<file> (a static buffer: one at a time). */
const char *mt_test_run_file(const char *name, const char *file);

/* MPI suites: this process's rank and the job's size. */
/* A line of /proc/self/status in KiB ("VmRSS", "VmHWM"); -1 when it cannot be read. */
long mt_test_status_kib(const char *field);
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
