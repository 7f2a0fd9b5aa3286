/*
 * test_unit.c -- single-process tests: the error table, per-thread messages, config
 * defaults, validation and the command line, the growable array, the judgement of
 * leftover shared memory.
 */
#include "harness.h"

#include "../runtime/runtime.h"
#include "../collectives/watchdog.h"

#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static void test_error_table(void)
{
    int codes[] = {MT_EINVAL, MT_ENOMEM, MT_EIO, MT_ENOTFOUND, MT_EFORMAT,
                   MT_EMPI, MT_EPEER, MT_EMISMATCH, MT_ESTOP};
    for (size_t i = 0; i < sizeof codes / sizeof *codes; i++) {
        CU_ASSERT(codes[i] < 0);
        CU_ASSERT_STRING_NOT_EQUAL(mt_strerror(codes[i]), "unknown error");
        CU_ASSERT_NSTRING_EQUAL(mt_err_name(codes[i]), "MT_E", 4);
        for (size_t j = 0; j < i; j++)
            CU_ASSERT(codes[i] != codes[j]);
    }
    MT_ASSERT_STR_EQ(mt_err_name(MT_EPEER), "MT_EPEER");
    MT_ASSERT_STR_EQ(mt_strerror(MT_OK), "success");
    MT_ASSERT_STR_EQ(mt_strerror(-999), "unknown error");
    MT_ASSERT_STR_EQ(mt_err_name(-999), "MT_UNKNOWN");
}

static void *set_error_in_thread(void *arg)
{
    mt__error(MT_EIO, "thread message");
    return (void *)(mt_last_error()[0] == 't' ? arg : NULL);
}

static void test_last_error_per_thread(void)
{
    MT_ASSERT_INT_EQ(mt__error(MT_EINVAL, "main %d", 42), MT_EINVAL);
    pthread_t th;
    void *ret = NULL;
    int marker;
    CU_ASSERT_EQUAL_FATAL(pthread_create(&th, NULL, set_error_in_thread, &marker), 0);
    pthread_join(th, &ret);
    CU_ASSERT_PTR_EQUAL(ret, &marker);
    MT_ASSERT_STR_EQ(mt_last_error(), "main 42");
    mt__error_append("second %s", "line");
    MT_ASSERT_STR_EQ(mt_last_error(), "main 42\nsecond line");
}

static void test_config_defaults(void)
{
    mt_trainer_config cfg = {0};
    mt_config_defaults(&cfg);
    CU_ASSERT_PTR_NULL(cfg.run.name);
    MT_ASSERT_STR_CONTAINS(cfg.run.storage_path, "/mpitrain_results");
    MT_ASSERT_INT_EQ(cfg.run.verbose, 1);
    CU_ASSERT_DOUBLE_EQUAL(cfg.run.failure.stall_warn_s, 60.0, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(cfg.run.failure.stall_timeout_s, 600.0, 1e-12);
    MT_ASSERT_INT_EQ(cfg.data.memory_limit, (size_t)1 << 30);
    MT_ASSERT_INT_EQ(cfg.run.checkpoint.num_to_keep, 0);
    MT_ASSERT_INT_EQ(cfg.run.failure.max_failures, 0);
    CU_ASSERT_FALSE(cfg.run.checkpoint.async_commit);
    MT_ASSERT_INT_EQ(cfg.run.checkpoint.staging_bytes, (size_t)1 << 30);
    /* the environment decides what was left at zero, never what was set */
    setenv("MT_CHECKPOINT_ASYNC", "1", 1);
    setenv("MT_CHECKPOINT_STAGING", "1048576", 1);
    mt_trainer_config env = {0}, own = {.run.checkpoint.staging_bytes = 4096};
    mt_config_defaults(&env);
    mt_config_defaults(&own);
    unsetenv("MT_CHECKPOINT_ASYNC");
    unsetenv("MT_CHECKPOINT_STAGING");
    CU_ASSERT_TRUE(env.run.checkpoint.async_commit);
    MT_ASSERT_INT_EQ(env.run.checkpoint.staging_bytes, 1048576);
    MT_ASSERT_INT_EQ(own.run.checkpoint.staging_bytes, 4096);
    /* set fields are kept */
    mt_trainer_config set = {.run = {.storage_path = "/x", .verbose = 2,
                                     .failure = {.stall_warn_s = 1, .stall_timeout_s = 2}}};
    mt_config_defaults(&set);
    MT_ASSERT_STR_EQ(set.run.storage_path, "/x");
    MT_ASSERT_INT_EQ(set.run.verbose, 2);
    CU_ASSERT_DOUBLE_EQUAL(set.run.failure.stall_timeout_s, 2.0, 1e-12);
    MT_ASSERT_INT_EQ(mt_config_validate(&set), MT_OK);
    MT_ASSERT_INT_EQ(mt_config_validate(&(mt_trainer_config){0}), MT_OK);
}

static void test_config_validate_lists_every_problem(void)
{
    const char *split[] = {"train", "", NULL};
    mt_trainer_config cfg = {
        .scaling = {.num_workers = -1, .cpus_per_worker = -3},
        .run = {.name = "a/b", .verbose = 7,
                .checkpoint = {.num_to_keep = -2, .score_attribute = "", .score_order = 5,
                               .frequency = -1, .staging_bytes = (size_t)1 << 41},
                .failure = {.max_failures = -5, .stall_warn_s = 30, .stall_timeout_s = 10}},
        .data = {.datasets_to_split = split},
    };
    MT_ASSERT_INT_EQ(mt_config_validate(&cfg), MT_EINVAL);
    const char *m = mt_last_error();
    MT_ASSERT_STR_CONTAINS(m, "scaling.num_workers must be >= 0 (got -1)");
    MT_ASSERT_STR_CONTAINS(m, "scaling.cpus_per_worker must be >= 0 (got -3)");
    MT_ASSERT_STR_CONTAINS(m, "run.name must not contain '/' (got \"a/b\")");
    MT_ASSERT_STR_CONTAINS(m, "run.verbose must be -1 (silent), 0 (default), 1 or 2 (got 7)");
    MT_ASSERT_STR_CONTAINS(m, "run.checkpoint.num_to_keep must be >= 0 (got -2)");
    MT_ASSERT_STR_CONTAINS(m, "run.checkpoint.score_attribute must not be empty");
    MT_ASSERT_STR_CONTAINS(m, "run.checkpoint.score_order must be MT_ORDER_MAX or MT_ORDER_MIN (got 5)");
    MT_ASSERT_STR_CONTAINS(m, "run.checkpoint.frequency must be >= 0 (got -1)");
    MT_ASSERT_STR_CONTAINS(m, "run.checkpoint.staging_bytes must be at most 1 TiB (got 2199023255552)");
    MT_ASSERT_STR_CONTAINS(m, "run.failure.max_failures must be >= -1 (got -5)");
    MT_ASSERT_STR_CONTAINS(m, "run.failure.stall_timeout_s must be >= run.failure.stall_warn_s (got 10 < 30)");
    MT_ASSERT_STR_CONTAINS(m, "data.datasets_to_split[1] must not be empty");
    int lines = 1;
    for (const char *p = m; *p; p++)
        lines += *p == '\n';
    MT_ASSERT_INT_EQ(lines, 12);
}

static void test_config_validate_single_fields(void)
{
    char longname[MT__NAME_MAX + 2];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    struct { mt_trainer_config cfg; const char *msg; } cases[] = {
        {{.run.name = ""}, "run.name must not be empty"},
        {{.run.name = ".."}, "run.name must not be \"..\""},
        {{.run.name = longname}, "run.name must be at most 200 bytes (got 201)"},
        {{.run.storage_path = ""}, "run.storage_path must not be empty"},
        {{.run.failure.stall_warn_s = -1}, "run.failure.stall_warn_s must be a finite number of seconds >= 0 (got -1)"},
        {{.run.failure.stall_timeout_s = 1.0 / 0.0}, "run.failure.stall_timeout_s must be a finite"},
        {{.run.verbose = -2}, "run.verbose must be"},
        {{.run.failure = {.stall_warn_s = 1e300, .stall_timeout_s = 1e300}}, "run.failure.stall_warn_s must be at most 1e9 seconds (got 1e+300)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        MT_ASSERT_INT_EQ(mt_config_validate(&cases[i].cfg), MT_EINVAL);
        MT_ASSERT_STR_CONTAINS(mt_last_error(), cases[i].msg);
    }
    mt_trainer_config ok = {.run = {.name = "fine", .failure.max_failures = -1,
                                    .checkpoint.score_order = MT_ORDER_MIN}};
    MT_ASSERT_INT_EQ(mt_config_validate(&ok), MT_OK);
    MT_ASSERT_INT_EQ(mt_config_validate(NULL), MT_EINVAL);
}

static int run_args(mt_trainer_config *cfg, char **args, int *argc_out, char ***argv_out)
{
    int argc = 0;
    while (args[argc])
        argc++;
    int rc = mt_config_from_args(cfg, &argc, &args);
    *argc_out = argc;
    *argv_out = args;
    return rc;
}

static void test_config_from_args_all_options(void)
{
    char *args[] = {"prog", "--name", "exp", "--storage-path=/tmp/s", "--num-workers", "4",
                    "--cpus-per-worker=2", "--max-failures", "-1", "--num-to-keep", "3",
                    "--checkpoint-score-attribute", "val/acc", "--checkpoint-score-order=min",
                    "--checkpoint-frequency", "5", "--checkpoint-at-end", "--checkpoint-async",
                    "--checkpoint-staging=268435456", "--overwrite", "--stall-warn", "1.5",
                    "--stall-timeout=9", "--verbose", "2", "--lr", "0.1", "data.h5", NULL};
    mt_trainer_config cfg = {0};
    int argc;
    char **argv;
    MT_ASSERT_INT_EQ(run_args(&cfg, args, &argc, &argv), MT_OK);
    MT_ASSERT_STR_EQ(cfg.run.name, "exp");
    MT_ASSERT_STR_EQ(cfg.run.storage_path, "/tmp/s");
    MT_ASSERT_INT_EQ(cfg.scaling.num_workers, 4);
    MT_ASSERT_INT_EQ(cfg.scaling.cpus_per_worker, 2);
    MT_ASSERT_INT_EQ(cfg.run.failure.max_failures, -1);
    MT_ASSERT_INT_EQ(cfg.run.checkpoint.num_to_keep, 3);
    MT_ASSERT_STR_EQ(cfg.run.checkpoint.score_attribute, "val/acc");
    MT_ASSERT_INT_EQ(cfg.run.checkpoint.score_order, MT_ORDER_MIN);
    MT_ASSERT_INT_EQ(cfg.run.checkpoint.frequency, 5);
    CU_ASSERT_TRUE(cfg.run.checkpoint.at_end);
    CU_ASSERT_TRUE(cfg.run.checkpoint.async_commit);
    MT_ASSERT_INT_EQ(cfg.run.checkpoint.staging_bytes, (size_t)256 << 20);
    CU_ASSERT_TRUE(cfg.run.overwrite);
    CU_ASSERT_DOUBLE_EQUAL(cfg.run.failure.stall_warn_s, 1.5, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(cfg.run.failure.stall_timeout_s, 9.0, 1e-12);
    MT_ASSERT_INT_EQ(cfg.run.verbose, 2);
    /* the program's own options stay, in order */
    MT_ASSERT_INT_EQ(argc, 4);
    MT_ASSERT_STR_EQ(argv[0], "prog");
    MT_ASSERT_STR_EQ(argv[1], "--lr");
    MT_ASSERT_STR_EQ(argv[2], "0.1");
    MT_ASSERT_STR_EQ(argv[3], "data.h5");
    CU_ASSERT_PTR_NULL(argv[4]);
}

static void test_config_from_args_errors(void)
{
    struct { char *opt[3]; const char *msg; } cases[] = {
        {{"--num-workers=abc"}, "option --num-workers: 'abc' is not an integer"},
        {{"--checkpoint-score-order=up"}, "option --checkpoint-score-order: 'up' is not max or min"},
        {{"--stall-warn", "soon"}, "option --stall-warn: 'soon' is not a number of seconds"},
        {{"--verbose", "3"}, "option --verbose: '3' is not 0, 1 or 2"},
        {{"--num-to-keep", "99999999999"}, "option --num-to-keep: '99999999999' is not an integer"},
        {{"--checkpoint-at-end=yes"}, "option --checkpoint-at-end takes no value"},
        {{"--checkpoint-async=1"}, "option --checkpoint-async takes no value"},
        {{"--checkpoint-staging", "0"}, "option --checkpoint-staging"},
        {{"--checkpoint-staging", "1G"}, "option --checkpoint-staging"},
        {{"--name"}, "option --name needs a value"},
        {{"--name", "--"}, "option --name needs a value"}, /* "--" is the program's */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *args[5] = {"prog", cases[i].opt[0], cases[i].opt[1], NULL, NULL};
        mt_trainer_config cfg = {0};
        int argc;
        char **argv;
        MT_ASSERT_INT_EQ(run_args(&cfg, args, &argc, &argv), MT_EINVAL);
        MT_ASSERT_STR_CONTAINS(mt_last_error(), cases[i].msg);
    }
    /* every problem is listed */
    char *args[] = {"prog", "--num-workers=x", "--max-failures=y", NULL};
    mt_trainer_config cfg = {0};
    int argc;
    char **argv;
    MT_ASSERT_INT_EQ(run_args(&cfg, args, &argc, &argv), MT_EINVAL);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "--num-workers");
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "--max-failures");
    MT_ASSERT_INT_EQ(mt_config_from_args(NULL, &argc, &argv), MT_EINVAL);
}

static void test_config_precedence(void)
{
    /* struct < environment < command line */
    setenv("MT_NAME", "from-env", 1);
    setenv("MT_STORAGE_PATH", "/env/path", 1);
    mt_trainer_config cfg = {.run = {.name = "from-struct", .storage_path = "/struct"}};
    char *args[] = {"prog", "--name", "from-cli", NULL};
    int argc;
    char **argv;
    MT_ASSERT_INT_EQ(run_args(&cfg, args, &argc, &argv), MT_OK);
    MT_ASSERT_STR_EQ(cfg.run.name, "from-cli");
    MT_ASSERT_STR_EQ(cfg.run.storage_path, "/env/path");
    unsetenv("MT_NAME");
    unsetenv("MT_STORAGE_PATH");
    mt_trainer_config kept = {.run = {.name = "from-struct"}};
    char *none[] = {"prog", NULL};
    MT_ASSERT_INT_EQ(run_args(&kept, none, &argc, &argv), MT_OK);
    MT_ASSERT_STR_EQ(kept.run.name, "from-struct");
    MT_ASSERT_INT_EQ(argc, 1);
}

static void test_config_help_and_separator(void)
{
    char *args[] = {"prog", "--help", "--", "--name", "x", NULL};
    mt_trainer_config cfg = {0};
    int argc;
    char **argv;
    MT_ASSERT_INT_EQ(run_args(&cfg, args, &argc, &argv), MT_OK);
    /* --help stays for the program; after "--" nothing is taken */
    MT_ASSERT_INT_EQ(argc, 5);
    MT_ASSERT_STR_EQ(argv[1], "--help");
    MT_ASSERT_STR_EQ(argv[3], "--name");
    CU_ASSERT_PTR_NULL(cfg.run.name);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    mt_config_usage(f);
    fclose(f);
    MT_ASSERT_STR_CONTAINS(buf, "--checkpoint-score-order max|min");
    MT_ASSERT_STR_CONTAINS(buf, "--stall-timeout SECONDS");
    free(buf);
    /* --verbose 0 means silent */
    char *quiet[] = {"prog", "--verbose=0", NULL};
    MT_ASSERT_INT_EQ(run_args(&cfg, quiet, &argc, &argv), MT_OK);
    MT_ASSERT_INT_EQ(cfg.run.verbose, MT_VERBOSE_SILENT);
}

/* What mt_config_from_args leaves: --help found before "--", a program's own option taken
 * (both forms, the last wins, none without a value), the rest refused by name. */
static void test_args_leftovers(void)
{
    char *args[] = {"prog", "--epochs", "4", "--epoch=5", "x", "--epochs=6", "--", "--help", NULL};
    int argc = 8;
    char **argv = args;
    CU_ASSERT_FALSE(mt_args_help(argc, argv)); /* after "--": the program's data */
    const char *v = NULL;
    MT_ASSERT_INT_EQ(mt_args_take(&argc, argv, "--epochs", &v), MT_OK);
    MT_ASSERT_STR_EQ(v, "6");
    MT_ASSERT_INT_EQ(argc, 5);
    MT_ASSERT_STR_EQ(argv[1], "--epoch=5");
    MT_ASSERT_STR_EQ(argv[2], "x");
    MT_ASSERT_STR_EQ(argv[3], "--");
    CU_ASSERT_PTR_NULL(argv[5]);
    MT_ASSERT_INT_EQ(mt_args_rest(argc, argv), MT_EINVAL);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "unknown option '--epoch=5' (see --help)\n"
                                            "unexpected argument 'x' (see --help)\n"
                                            "unexpected argument '--help' after '--'");
    char *alone[] = {"prog", "--", NULL};
    MT_ASSERT_INT_EQ(mt_args_rest(2, alone), MT_OK);
    MT_ASSERT_INT_EQ(mt_args_rest(1, alone), MT_OK);
    char *missing[] = {"prog", "-h", "--epochs", NULL};
    argc = 3;
    argv = missing;
    CU_ASSERT_TRUE(mt_args_help(argc, argv));
    MT_ASSERT_INT_EQ(mt_args_take(&argc, argv, "--epochs", &v), MT_EINVAL);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "option --epochs needs a value");
    CU_ASSERT_PTR_NULL(v);
    MT_ASSERT_INT_EQ(argc, 2);
    MT_ASSERT_INT_EQ(mt_args_take(&argc, argv, "epochs", &v), MT_EINVAL);
    MT_ASSERT_INT_EQ(mt_args_take(NULL, argv, "--epochs", &v), MT_EINVAL);
}

/* A program taking some of the library's options: the others are left (and refused), the
 * environment applies only with its option; the help lists only those, with the program's
 * defaults where it set them and the library's elsewhere. */
static void test_config_only_and_help(void)
{
    setenv("MT_NAME", "from-env", 1);
    static const char *const names[] = {"storage-path", "trace", NULL};
    char *args[] = {"prog", "--storage-path", "/s", "--trace", "--num-to-keep", "3", NULL};
    int argc = 6;
    char **argv = args;
    mt_trainer_config cfg = {.run.name = "prog-run"};
    MT_ASSERT_INT_EQ(mt_config_from_args_only(&cfg, &argc, &argv, names), MT_OK);
    unsetenv("MT_NAME");
    MT_ASSERT_STR_EQ(cfg.run.name, "prog-run");
    MT_ASSERT_STR_EQ(cfg.run.storage_path, "/s");
    CU_ASSERT_TRUE(cfg.run.trace);
    MT_ASSERT_INT_EQ(cfg.run.checkpoint.num_to_keep, 0);
    MT_ASSERT_INT_EQ(argc, 3);
    MT_ASSERT_INT_EQ(mt_args_rest(argc, argv), MT_EINVAL);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "unknown option '--num-to-keep'");
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    mt_config_help_only(f, NULL, names);
    fclose(f);
    MT_ASSERT_STR_CONTAINS(buf, "--storage-path TEXT");
    MT_ASSERT_STR_CONTAINS(buf, "(default: ~/mpitrain_results)");
    CU_ASSERT(strstr(buf, "--num-to-keep") == NULL && strstr(buf, "--help") == NULL);
    free(buf);
    mt_trainer_config d = {.run = {.name = "fashion-mnist", .verbose = MT_VERBOSE_SILENT,
                                   .failure.stall_warn_s = 2.5,
                                   .checkpoint = {.num_to_keep = 2, .score_attribute = "test_acc",
                                                  .score_order = MT_ORDER_MIN, .at_end = true}}};
    f = open_memstream(&buf, &len);
    mt_config_help(f, &d);
    fclose(f);
    const char *want[] = {"(default: fashion-mnist)", "checkpoints to keep, 0 = all (default: 2)",
                          "(default: test_acc)", "max or min (default: min)",
                          "training ends (default: on)", "warning (default: 2.5)",
                          "per-rank detail (default: 0)", "aborts (default: 600)",
                          "--help                               print this help\n"};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        MT_ASSERT_STR_CONTAINS(buf, want[i]);
    free(buf);
}

/* The public helpers for programs: strict numbers, and the IDX importer (a tiny file pair
 * written here: 2 images of 2 x 3 bytes, 2 labels). */
static void test_program_helpers(void)
{
    int64_t i = 7;
    uint64_t u = 7;
    double d = 7;
    MT_ASSERT_INT_EQ(mt_parse_i64("--epochs", "12", 1, 100, &i), MT_OK);
    MT_ASSERT_INT_EQ((int)i, 12);
    MT_ASSERT_INT_EQ(mt_parse_i64("--epochs", "4294967297", 1, 1000000, &i), MT_EINVAL);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "--epochs: '4294967297' is not an integer from 1 to 1000000");
    MT_ASSERT_INT_EQ((int)i, 12);
    MT_ASSERT_INT_EQ(mt_parse_u64("--seed", "-1", 0, UINT64_MAX, &u), MT_EINVAL);
    MT_ASSERT_INT_EQ(mt_parse_u64("--seed", "18446744073709551615", 0, UINT64_MAX, &u), MT_OK);
    CU_ASSERT(u == UINT64_MAX);
    MT_ASSERT_INT_EQ(mt_parse_f64("--lr", "nan", 0, 1, &d), MT_EINVAL);
    MT_ASSERT_INT_EQ(mt_parse_f64("--lr", "5e-2", 0, 1, &d), MT_OK);
    CU_ASSERT_DOUBLE_EQUAL(d, 0.05, 1e-15);
    MT_ASSERT_INT_EQ(mt_parse_f64("--lr", "0.5x", 0, 1, &d), MT_EINVAL);
    MT_ASSERT_INT_EQ(mt_parse_i64(NULL, "1", 0, 1, &i), MT_EINVAL);

    char dir[] = "/tmp/mpitrain-unit-idx-XXXXXX", img[64], lab[64], h5[64];
    CU_ASSERT_FATAL(mkdtemp(dir) != NULL);
    snprintf(img, sizeof img, "%s/img", dir);
    snprintf(lab, sizeof lab, "%s/lab", dir);
    snprintf(h5, sizeof h5, "%s/d.h5", dir);
    const unsigned char images[] = {0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 3,
                                    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    const unsigned char labels[] = {0, 0, 8, 1, 0, 0, 0, 2, 4, 5};
    FILE *f = fopen(img, "wb");
    CU_ASSERT(f && fwrite(images, 1, sizeof images, f) == sizeof images);
    fclose(f);
    f = fopen(lab, "wb");
    CU_ASSERT(f && fwrite(labels, 1, sizeof labels, f) == sizeof labels);
    fclose(f);
    MT_ASSERT_INT_EQ(mt_import_idx(img, lab, h5, "/train"), MT_OK);
    CU_ASSERT(access(h5, R_OK) == 0);
    MT_ASSERT_INT_EQ(mt_import_idx(img, lab, h5, "/train") != MT_OK, 1); /* the group exists */
    const unsigned char three[] = {0, 0, 8, 1, 0, 0, 0, 3, 1, 2, 3};
    f = fopen(lab, "wb");
    CU_ASSERT(f && fwrite(three, 1, sizeof three, f) == sizeof three);
    fclose(f);
    MT_ASSERT_INT_EQ(mt_import_idx(img, lab, h5, "/test"), MT_EFORMAT); /* 2 images, 3 labels */
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "has 2 rows but");
    MT_ASSERT_INT_EQ(mt_import_idx(NULL, lab, h5, "/x"), MT_EINVAL);
    unlink(img);
    unlink(lab);
    unlink(h5);
    rmdir(dir);
}

static int never_called(mt_context *c, void *arg) { return MT_OK; }

static void test_trainer_outside_mpi(void)
{
    CU_ASSERT_PTR_NULL(mt_get_context());
    mt_trainer *t = NULL;
    MT_ASSERT_INT_EQ(mt_trainer_create(&t, NULL, NULL, NULL), MT_EINVAL);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "training function is NULL");
    MT_ASSERT_INT_EQ(mt_trainer_create(&t, never_called, NULL, NULL), MT_OK);
    mt_result *r = (mt_result *)&r;
    MT_ASSERT_INT_EQ(mt_trainer_fit(t, &r), MT_EINVAL);
    CU_ASSERT_PTR_NULL(r);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "call mt_init first");
    mt_trainer_destroy(&t);
    CU_ASSERT_PTR_NULL(t);
    mt_trainer_destroy(&t); /* NULL-safe */
    mt_result_free(&r);
    /* a NULL context answers without crashing */
    MT_ASSERT_INT_EQ(mt_world_size(NULL), 0);
    MT_ASSERT_INT_EQ(mt_allreduce(NULL, NULL, 0, MT_F64, MT_SUM), MT_EINVAL);
}

/* ------------------------------------------------------------ metrics */

/* mt_set_error: a binding's own message becomes the last error; a long one keeps its end */
static void test_set_error(void)
{
    MT_ASSERT_INT_EQ(mt_set_error(MT_EINVAL, "Traceback: ValueError: bad"), MT_EINVAL);
    MT_ASSERT_STR_EQ(mt_last_error(), "Traceback: ValueError: bad");
    MT_ASSERT_INT_EQ(mt_set_error(MT_EIO, NULL), MT_EIO);
    MT_ASSERT_STR_EQ(mt_last_error(), "");
    char big[5000];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    memcpy(big + sizeof big - 6, "END\n!", 5);
    mt_set_error(MT_EINVAL, big);
    MT_ASSERT_INT_EQ(strlen(mt_last_error()), MT__MSG_LEN - 1);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "aEND\n!");
    mt_request_stop(); /* outside a fit: nothing to stop, no crash */
}

static void test_metrics(void)
{
    mt_metrics *m = mt_metrics_new();
    MT_ASSERT_INT_EQ(mt_metrics_set_f64(m, "loss", 0.5), MT_OK);
    MT_ASSERT_INT_EQ(mt_metrics_set_i64(m, "step", 7), MT_OK);
    MT_ASSERT_INT_EQ(mt_metrics_set_str(m, "val/name", "x"), MT_OK);
    MT_ASSERT_INT_EQ(mt_metrics_set_f64(m, "loss", 0.25), MT_OK); /* replaces */
    MT_ASSERT_INT_EQ(mt_metrics_count(m), 3);
    MT_ASSERT_STR_EQ(mt_metrics_key(m, 2), "val/name");
    double d;
    int64_t i;
    MT_ASSERT_INT_EQ(mt_metrics_get_f64(m, "loss", &d), MT_OK);
    CU_ASSERT_DOUBLE_EQUAL(d, 0.25, 0);
    MT_ASSERT_INT_EQ(mt_metrics_get_i64(m, "loss", &i), MT_OK); /* numeric either way */
    MT_ASSERT_INT_EQ(mt_metrics_get_f64(m, "step", &d), MT_OK);
    CU_ASSERT_DOUBLE_EQUAL(d, 7, 0);
    MT_ASSERT_INT_EQ(mt_metrics_get_f64(m, "val/name", &d), MT_ENOTFOUND);
    MT_ASSERT_INT_EQ(mt_metrics_get_f64(m, "absent", &d), MT_ENOTFOUND);
    CU_ASSERT_PTR_NULL(mt_metrics_get_str(m, "loss"));
    MT_ASSERT_STR_EQ(mt_metrics_get_str(m, "val/name"), "x");
    MT_ASSERT_INT_EQ(mt_metrics_set_str(m, "s", NULL), MT_EINVAL);
    MT_ASSERT_INT_EQ(mt_metrics_set_f64(NULL, "a", 1), MT_EINVAL);
    /* the type each key holds, for bindings that give numbers back as int or float */
    MT_ASSERT_INT_EQ(mt_metrics_type(m, "loss"), MT_METRIC_F64);
    MT_ASSERT_INT_EQ(mt_metrics_type(m, "step"), MT_METRIC_I64);
    MT_ASSERT_INT_EQ(mt_metrics_type(m, "val/name"), MT_METRIC_STR);
    MT_ASSERT_INT_EQ(mt_metrics_type(m, "absent"), MT_METRIC_NONE);
    MT_ASSERT_INT_EQ(mt_metrics_type(NULL, "loss"), MT_METRIC_NONE);
    MT_ASSERT_INT_EQ(mt_metrics_type(m, NULL), MT_METRIC_NONE);
    /* the wire encoding and the JSON form round-trip */
    char *enc;
    size_t len;
    MT_ASSERT_INT_EQ(mt__metrics_encode(m, &enc, &len), MT_OK);
    mt_metrics *back = mt_metrics_new();
    MT_ASSERT_INT_EQ(mt__metrics_decode(back, enc, len), MT_OK);
    MT_ASSERT_INT_EQ(mt__metrics_decode(back, enc, len - 1), MT_EFORMAT);
    free(enc);
    MT_ASSERT_INT_EQ(mt_metrics_get_i64(back, "step", &i), MT_OK);
    MT_ASSERT_INT_EQ(i, 7);
    mt_metrics_set_f64(back, "nan", NAN);
    json_t *j = mt__metrics_to_json(back);
    mt_metrics *again = mt_metrics_new();
    MT_ASSERT_INT_EQ(mt__metrics_from_json(again, j), MT_OK);
    MT_ASSERT_INT_EQ(mt_metrics_get_f64(again, "nan", &d), MT_OK);
    CU_ASSERT(isnan(d));
    MT_ASSERT_STR_EQ(mt_metrics_get_str(again, "val/name"), "x");
    json_decref(j);
    mt_metrics_free(&again);
    mt_metrics_free(&back);
    mt_metrics_free(&m);
    CU_ASSERT_PTR_NULL(m);
    mt_metrics_free(&m);
}

/* ------------------------------------------------------------ retention */

/* Checkpoints arrive one by one with these scores (NAN = the attribute is missing when
 * `missing` has a 1 there); returns the surviving indices as "0,3,4". */
static void arrive(const double *scores, const int *missing, int n, mt_checkpoint_config cfg,
                   char *out, size_t len)
{
    mt__kept kept[32];
    int nk = 0;
    for (int i = 0; i < n; i++) {
        kept[nk] = (mt__kept){.index = i, .metrics = mt_metrics_new()};
        if (!missing || !missing[i])
            mt_metrics_set_f64(kept[nk].metrics, cfg.score_attribute ? cfg.score_attribute : "s",
                               scores[i]);
        int latest = nk++;
        bool drop[32];
        mt__retention(kept, nk, latest, &cfg, drop);
        int w = 0;
        for (int k = 0; k < nk; k++) {
            if (drop[k])
                mt_metrics_free(&kept[k].metrics);
            else
                kept[w++] = kept[k];
        }
        nk = w;
    }
    size_t o = 0;
    out[0] = '\0';
    for (int k = 0; k < nk; k++) {
        o += (size_t)snprintf(out + o, len - o, "%s%lld", k ? "," : "", (long long)kept[k].index);
        mt_metrics_free(&kept[k].metrics);
    }
}

static void test_retention_vectors(void)
{
    char got[128];
    double s[] = {0.1, 0.9, 0.5, 0.3, 0.2};
    arrive(s, NULL, 5, (mt_checkpoint_config){0}, got, sizeof got);
    MT_ASSERT_STR_EQ(got, "0,1,2,3,4");                       /* keep all */
    arrive(s, NULL, 5, (mt_checkpoint_config){.num_to_keep = 2}, got, sizeof got);
    MT_ASSERT_STR_EQ(got, "3,4");                             /* newest K */
    mt_checkpoint_config best = {.num_to_keep = 2, .score_attribute = "acc"};
    arrive(s, NULL, 5, best, got, sizeof got);
    MT_ASSERT_STR_EQ(got, "1,2,4");                           /* best 2 by max + latest */
    best.score_order = MT_ORDER_MIN;
    arrive(s, NULL, 5, best, got, sizeof got);
    MT_ASSERT_STR_EQ(got, "0,4");                             /* best 2 by min (0.1, 0.2=latest) */
    /* the latest is dropped once a newer one arrives and it is not among the best */
    double drop_latest[] = {0.9, 0.8, 0.1, 0.7};
    best.score_order = MT_ORDER_MAX;
    arrive(drop_latest, NULL, 3, best, got, sizeof got);
    MT_ASSERT_STR_EQ(got, "0,1,2");
    arrive(drop_latest, NULL, 4, best, got, sizeof got);
    MT_ASSERT_STR_EQ(got, "0,1,3");
    /* ties go to the newer */
    double ties[] = {0.5, 0.5, 0.5, 0.1};
    arrive(ties, NULL, 4, (mt_checkpoint_config){.num_to_keep = 2, .score_attribute = "acc"},
           got, sizeof got);
    MT_ASSERT_STR_EQ(got, "1,2,3");
    /* NaN and a missing attribute rank worst, in either order */
    double nan[] = {NAN, 0.2, 0.3, 0.4};
    int missing[] = {0, 0, 0, 1};
    arrive(nan, missing, 4, (mt_checkpoint_config){.num_to_keep = 2, .score_attribute = "acc"},
           got, sizeof got);
    MT_ASSERT_STR_EQ(got, "1,2,3");
    arrive(nan, missing, 4, (mt_checkpoint_config){.num_to_keep = 2, .score_attribute = "acc",
                                                   .score_order = MT_ORDER_MIN}, got, sizeof got);
    MT_ASSERT_STR_EQ(got, "1,2,3");
    /* nested key */
    arrive(s, NULL, 5, (mt_checkpoint_config){.num_to_keep = 1, .score_attribute = "val/acc"},
           got, sizeof got);
    MT_ASSERT_STR_EQ(got, "1,4");
}

/* Metric types survive the JSON round trip (result.json rows, run.json's kept metrics):
 * a string stays a string whatever it spells, a NaN or infinite double stays a double;
 * a string that spells a number never ranks as one (retention and best checkpoint). */
static void test_metric_types_round_trip(void)
{
    static const char *const spelled[] = {"NaN", "nan", "Infinity", "-Infinity", "-inf",
                                          "inf", "1e5", "0x10", " 1", "1", "-0", NULL};
    mt_metrics *m = mt_metrics_new();
    char key[32];
    for (int i = 0; spelled[i]; i++) {
        snprintf(key, sizeof key, "s%d", i);
        MT_ASSERT_INT_EQ(mt_metrics_set_str(m, key, spelled[i]), MT_OK);
    }
    mt_metrics_set_f64(m, "nan", NAN);
    mt_metrics_set_f64(m, "inf", INFINITY);
    mt_metrics_set_f64(m, "ninf", -INFINITY);
    mt_metrics_set_f64(m, "one", 1.0);
    mt_metrics_set_i64(m, "int", 16);
    json_t *j = mt__metrics_to_json(m);
    /* the file says which strings are doubles: only those three */
    json_t *listed = json_object_get(j, "nonfinite_metrics");
    MT_ASSERT_INT_EQ((int)json_object_size(listed), 3);
    MT_ASSERT_STR_EQ(json_string_value(json_object_get(j, "nan")), "NaN");
    /* through the text, as a file holds it */
    char *text = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    j = json_loads(text, 0, NULL);
    free(text);
    mt_metrics *back = mt_metrics_new();
    MT_ASSERT_INT_EQ(mt__metrics_from_json(back, j), MT_OK);
    json_decref(j);
    double d = 0;
    for (int i = 0; spelled[i]; i++) {
        snprintf(key, sizeof key, "s%d", i);
        MT_ASSERT_STR_EQ(mt_metrics_get_str(back, key), spelled[i]);
        MT_ASSERT_INT_EQ(mt_metrics_get_f64(back, key, &d), MT_ENOTFOUND);
    }
    MT_ASSERT_INT_EQ(mt_metrics_get_f64(back, "nan", &d), MT_OK);
    CU_ASSERT(isnan(d));
    MT_ASSERT_INT_EQ(mt_metrics_get_f64(back, "inf", &d), MT_OK);
    CU_ASSERT(isinf(d) && d > 0);
    MT_ASSERT_INT_EQ(mt_metrics_get_f64(back, "ninf", &d), MT_OK);
    CU_ASSERT(isinf(d) && d < 0);
    int64_t i64 = 0;
    MT_ASSERT_INT_EQ(mt_metrics_get_i64(back, "int", &i64), MT_OK);
    MT_ASSERT_INT_EQ((int)i64, 16);
    CU_ASSERT_PTR_NULL(mt_metrics_get_str(back, "nonfinite_metrics")); /* not a metric */
    MT_ASSERT_INT_EQ(mt_metrics_get_f64(back, "nonfinite_metrics", &d), MT_ENOTFOUND);
    /* an older file's bare "NaN" string (no list): a string, never a number that ranks */
    j = json_pack("{s:s, s:f}", "acc", "Infinity", "loss", 0.5);
    mt_metrics *old = mt_metrics_new();
    MT_ASSERT_INT_EQ(mt__metrics_from_json(old, j), MT_OK);
    json_decref(j);
    MT_ASSERT_STR_EQ(mt_metrics_get_str(old, "acc"), "Infinity");
    /* a user's key cannot be the list's */
    MT_ASSERT_INT_EQ(mt_metrics_set_f64(m, "nonfinite_metrics", 1), MT_EINVAL);
    /* ranking after the round trip: the string "Infinity" never beats 0.9 */
    mt__kept kept[2] = {{.name = "checkpoint_000000", .index = 0},
                        {.name = "checkpoint_000001", .index = 1}};
    kept[0].metrics = mt_metrics_new();
    kept[1].metrics = mt_metrics_new();
    mt_metrics_set_f64(kept[0].metrics, "acc", 0.9);
    mt_metrics_set_str(kept[1].metrics, "acc", "Infinity");
    for (int k = 0; k < 2; k++) {
        json_t *kj = mt__metrics_to_json(kept[k].metrics);
        mt__metrics_clear(kept[k].metrics);
        MT_ASSERT_INT_EQ(mt__metrics_from_json(kept[k].metrics, kj), MT_OK);
        json_decref(kj);
    }
    int order[2] = {-1, -1};
    mt_checkpoint_config cfg = {.num_to_keep = 1, .score_attribute = "acc"};
    MT_ASSERT_INT_EQ(mt__rank_kept(kept, 2, &cfg, order), MT_OK);
    MT_ASSERT_INT_EQ(order[0], 0);
    bool drop[2];
    MT_ASSERT_INT_EQ(mt__retention(kept, 2, 1, &cfg, drop), MT_OK);
    CU_ASSERT(!drop[0] && !drop[1]); /* the best (0.9) and the latest both stay */
    for (int k = 0; k < 2; k++)
        mt_metrics_free(&kept[k].metrics);
    mt_metrics_free(&old);
    mt_metrics_free(&back);
    mt_metrics_free(&m);
}

/* mt__fmt_double: every text reads back to the same double (strtod), has a '.' or an
 * exponent, is never longer than %.17g, and is the short form where one exists. */
static void check_fmt(double x, int *bad)
{
    char s[32], ref[40];
    int n = mt__fmt_double(s, x);
    double back = strtod(s, NULL);
    bool same = isnan(x) ? isnan(back) : memcmp(&back, &x, sizeof x) == 0;
    int rn = snprintf(ref, sizeof ref, "%.17g", x);
    if (!same || n != (int)strlen(s) || !strpbrk(s, ".en") || n > rn + 2) {
        if (*bad < 5)
            fprintf(stderr, "fmt: %a printed as '%s' (%%.17g: %s)\n", x, s, ref);
        ++*bad;
    }
}

/* Every combining rule gives the same bits whichever side each value comes from (two ranks
 * combine in opposite orders): -0 and +0 in a minimum or maximum, NaNs of other signs in a
 * sum, in the typed payload and in the statistics. */
static uint64_t bits64(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

/* A record of +0s and one of -0s (its count 1, for quads) combined both ways by combine:
 * the same bits, the minimum -0 and the maximum +0. */
static void combine_zeros_both_ways(void (*combine)(const double *, double *, size_t), int w)
{
    double pos[4] = {0.0, 0.0, 0.0, 1}, neg[4] = {-0.0, -0.0, -0.0, 1}, pn[4], np_[4];
    memcpy(pn, neg, sizeof pn);
    combine(pos, pn, 1);
    memcpy(np_, pos, sizeof np_);
    combine(neg, np_, 1);
    for (int i = 0; i < w; i++)
        CU_ASSERT_EQUAL(bits64(pn[i]), bits64(np_[i]));
    CU_ASSERT(signbit(pn[0]) && !signbit(pn[1]));
}

static void test_combine_same_bits_either_side(void)
{
    const double vals[][2] = {{-0.0, 0.0}, {0.0, -0.0}, {-NAN, NAN}, {NAN, 1.0}, {1.0, 2.0}};
    const int ops[] = {MT_MIN, MT_MAX, MT_SUM};
    for (size_t v = 0; v < sizeof vals / sizeof *vals; v++)
        for (size_t o = 0; o < sizeof ops / sizeof *ops; o++) {
            double a = vals[v][0], b = vals[v][1], ab = b, ba = a; /* inout = in combined */
            mt__combine_reduce(&a, &ab, 1, MT_F64, ops[o]);
            mt__combine_reduce(&b, &ba, 1, MT_F64, ops[o]);
            CU_ASSERT_EQUAL(bits64(ab), bits64(ba));
            float fa = (float)a, fb = (float)b, fab = fb, fba = fa;
            mt__combine_reduce(&fa, &fab, 1, MT_F32, ops[o]);
            mt__combine_reduce(&fb, &fba, 1, MT_F32, ops[o]);
            CU_ASSERT_EQUAL(memcmp(&fab, &fba, sizeof fab), 0);
        }
    double z = 0.0, nz = -0.0, lo = z, hi = nz;
    mt__combine_reduce(&nz, &lo, 1, MT_F64, MT_MIN);
    mt__combine_reduce(&z, &hi, 1, MT_F64, MT_MAX);
    CU_ASSERT(lo == 0 && signbit(lo)); /* the minimum of -0 and +0 is -0 */
    CU_ASSERT(hi == 0 && !signbit(hi)); /* their maximum +0 */
    /* statistics {min, max, sum, n} and triples {min, max, sum} of -0 and +0 */
    combine_zeros_both_ways(mt__combine_stats, 4);
    combine_zeros_both_ways(mt__combine_triples, 3);
}

static void test_format_doubles(void)
{
    struct { double x; const char *want; } exact[] = {
        {0.1, "0.1"}, {1.5, "1.5"}, {3.0, "3.0"}, {100.0, "100.0"}, {-2.25, "-2.25"},
        {1234567.0, "1234567.0"}, {0.30000000000000004, "0.30000000000000004"},
        {1e20, "1.0e+20"}, {1e-7, "1.0e-07"}, {0.001, "0.001"}, {0.0, "0.0"},
        {-0.0, "-0.0"}, {1.0 / 3, "0.33333333333333331"}, {123456789012345678.0, "1.2345678901234568e+17"},
    };
    for (size_t i = 0; i < sizeof exact / sizeof exact[0]; i++) {
        char s[32];
        mt__fmt_double(s, exact[i].x);
        MT_ASSERT_STR_EQ(s, exact[i].want);
    }
    int bad = 0;
    double specials[] = {NAN, INFINITY, -INFINITY, 5e-324, 2.2250738585072014e-308, 1.7976931348623157e308,
                         1e-11, 1e43, 9.999999999999999e14, 1e15, 999999999999999.9, 0.5, 1e22, 1e23};
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++)
        check_fmt(specials[i], &bad);
    uint64_t z = 42;
    for (int i = 0; i < 300000; i++) {
        z = z * 6364136223846793005ULL + 1442695040888963407ULL;
        uint64_t bits = z ^ (z >> 29);
        double x;
        memcpy(&x, &bits, sizeof x);
        check_fmt(x, &bad);                                       /* any bit pattern */
        check_fmt(ldexp((double)(bits >> 11), -53) * pow(10, (int)(bits % 40) - 12), &bad);
        check_fmt((double)i * 0.001 + (double)(bits % 9), &bad); /* metric-like */
    }
    MT_ASSERT_INT_EQ(bad, 0);
}


/* ------------------------------------------------------------ input from outside */

/* One strict reader for every number from a flag or the environment: the whole text,
 * base 10, in range; the error names the flag and the text. */
static void test_strict_numbers(void)
{
    uint64_t u = 7;
    const char *bad_u[] = {"-1", "", " 5", "5 ", "+5", "0x10", "12abc", "1e3",
                           "18446744073709551616", "99999999999999999999999", "5\n"};
    for (size_t i = 0; i < sizeof bad_u / sizeof *bad_u; i++) {
        MT_ASSERT_INT_EQ(mt__parse_u64("MT_X", bad_u[i], 0, UINT64_MAX, &u), MT_EINVAL);
        MT_ASSERT_STR_CONTAINS(mt_last_error(), "MT_X: '");
        MT_ASSERT_INT_EQ(u, 7); /* unchanged on error */
    }
    MT_ASSERT_INT_EQ(mt__parse_u64("MT_X", "18446744073709551615", 0, UINT64_MAX, &u), MT_OK);
    CU_ASSERT(u == UINT64_MAX);
    MT_ASSERT_INT_EQ(mt__parse_u64("MT_X", "5", 6, 9, &u), MT_EINVAL);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "MT_X: '5' is not a whole number from 6 to 9");
    int v = 3;
    MT_ASSERT_INT_EQ(mt__parse_int("--epochs", "4294967297", 1, INT_MAX, &v), MT_EINVAL);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "--epochs: '4294967297' is not an integer");
    MT_ASSERT_INT_EQ(v, 3);
    MT_ASSERT_INT_EQ(mt__parse_int("--fail-rank", "-1", -1, 5, &v), MT_OK);
    MT_ASSERT_INT_EQ(v, -1);
    double d = 0;
    const char *bad_d[] = {"", "nan", "inf", "1e400", " 1", "1x", "-5"};
    for (size_t i = 0; i < sizeof bad_d / sizeof *bad_d; i++)
        MT_ASSERT_INT_EQ(mt__parse_f64("--lr", bad_d[i], 0, 1e9, &d), MT_EINVAL);
    MT_ASSERT_INT_EQ(mt__parse_f64("--lr", "0.25", 0, 1e9, &d), MT_OK);
    CU_ASSERT_DOUBLE_EQUAL(d, 0.25, 0);
    /* control characters in the shown text are escaped */
    MT_ASSERT_INT_EQ(mt__parse_u64("MT_X", "1\n2", 0, 9, &u), MT_EINVAL);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "'1\\x0a2'");
}

/* Bad environment knobs are one error at the start of fit, naming each variable and its
 * value; none is ignored or misread (-1 as 2^64-1). */
static void test_env_knobs_strict(void)
{
    MT_ASSERT_INT_EQ(mt__env_validate(), MT_OK);
    setenv("MT_FUSION_BYTES", "-1", 1);
    setenv("MT_CHECKPOINT_BUFFER", "lots", 1);
    setenv("MT_CHECKPOINT_ASYNC", "on", 1);
    setenv("MT_CHECKPOINT_STAGING", "0", 1);
    setenv("MT_IO_READAHEAD", "yes", 1);
    setenv("MT_IO_COLLECTIVE", "2", 1);
    setenv("MT_FUSION_SHM", "off", 1);
    setenv("MT_FUSION_SLEEP", "sometimes", 1);
    setenv("MT_TEST_COMMIT_PAUSE", "1e999", 1);
    setenv("MT_FUSION_ALGO", "fastest", 1);
    setenv("MT_FUSION_COMPRESS", "fp8", 1);
    MT_ASSERT_INT_EQ(mt__env_validate(), MT_EINVAL);
    const char *m = mt_last_error();
    MT_ASSERT_STR_CONTAINS(m, "MT_FUSION_ALGO: 'fastest' is not one of auto, flat, shm, hier");
    MT_ASSERT_STR_CONTAINS(m, "MT_FUSION_COMPRESS: 'fp8' is not one of none, fp16, bf16");
    MT_ASSERT_STR_CONTAINS(m, "MT_FUSION_BYTES: '-1'");
    MT_ASSERT_STR_CONTAINS(m, "MT_CHECKPOINT_BUFFER: 'lots'");
    MT_ASSERT_STR_CONTAINS(m, "MT_CHECKPOINT_ASYNC: 'on' is not 0 or 1");
    MT_ASSERT_STR_CONTAINS(m, "MT_CHECKPOINT_STAGING: '0'");
    MT_ASSERT_STR_CONTAINS(m, "MT_IO_READAHEAD: 'yes' is not 0 or 1");
    MT_ASSERT_STR_CONTAINS(m, "MT_IO_COLLECTIVE: '2'");
    MT_ASSERT_STR_CONTAINS(m, "MT_FUSION_SHM: 'off'");
    MT_ASSERT_STR_CONTAINS(m, "MT_FUSION_SLEEP: 'sometimes' is not 0 or 1");
    MT_ASSERT_STR_CONTAINS(m, "MT_TEST_COMMIT_PAUSE: '1e999'");
    /* where used, a bad value gives the default */
    CU_ASSERT(mt__env_knob_u64("MT_CHECKPOINT_BUFFER", 123) == 123);
    setenv("MT_CHECKPOINT_BUFFER", "18446744073709551615", 1);
    MT_ASSERT_INT_EQ(mt__env_validate(), MT_EINVAL);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "MT_CHECKPOINT_BUFFER: '18446744073709551615'");
    CU_ASSERT(mt__env_knob_u64("MT_CHECKPOINT_BUFFER", 123) == 123);
    setenv("MT_CHECKPOINT_BUFFER", "1048576", 1);
    CU_ASSERT(mt__env_knob_u64("MT_CHECKPOINT_BUFFER", 123) == 1048576);
    const char *names[] = {"MT_FUSION_BYTES", "MT_CHECKPOINT_BUFFER", "MT_CHECKPOINT_ASYNC",
                           "MT_CHECKPOINT_STAGING", "MT_IO_READAHEAD",
                           "MT_IO_COLLECTIVE", "MT_FUSION_SHM", "MT_FUSION_SLEEP",
                           "MT_TEST_COMMIT_PAUSE", "MT_FUSION_COMPRESS"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        unsetenv(names[i]);
    /* a word knob is the whole word: no prefix, no case folding */
    const char *words[] = {"au", "autox", "Flat", " hier", "shm "};
    for (size_t i = 0; i < sizeof words / sizeof *words; i++) {
        setenv("MT_FUSION_ALGO", words[i], 1);
        MT_ASSERT_INT_EQ(mt__env_validate(), MT_EINVAL);
    }
    setenv("MT_FUSION_ALGO", "hier", 1);
    MT_ASSERT_INT_EQ(mt__env_validate(), MT_OK);
    int w = -1;
    MT_ASSERT_INT_EQ(mt__env_word("MT_FUSION_ALGO", MT__FUSION_ALGO_WORDS, &w), MT_OK);
    MT_ASSERT_INT_EQ(w, MT_FUSION_HIER);
    unsetenv("MT_FUSION_ALGO");
    MT_ASSERT_INT_EQ(mt__env_validate(), MT_OK);
}

/* Names that become paths: refused on input with the field named. */
static void test_names_from_users(void)
{
    const char *bad[] = {"", ".", "..", "a/b", "../victim", "/abs", "line\nbreak", "tab\there",
                         "esc\x1b[31m", "del\x7f"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        MT_ASSERT_INT_EQ(mt__check_name("run.name", bad[i], 200), MT_EINVAL);
        MT_ASSERT_STR_CONTAINS(mt_last_error(), "run.name must");
    }
    MT_ASSERT_INT_EQ(mt__check_name("x", "checkpoint_000001", 200), MT_OK);
    MT_ASSERT_INT_EQ(mt__check_name("x", "..hidden", 200), MT_OK);
    MT_ASSERT_INT_EQ(mt__check_text("metric key", "val/acc", 200), MT_OK);
    MT_ASSERT_INT_EQ(mt__check_text("metric key", "a\nb", 200), MT_EINVAL);
    /* through the config */
    mt_trainer_config cfg = {.run = {.name = "run\nname"}};
    MT_ASSERT_INT_EQ(mt_config_validate(&cfg), MT_EINVAL);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "run.name must not contain control characters");
    mt_trainer_config cfg2 = {.run = {.name = "ok", .storage_path = "/tmp/x\ny"}};
    MT_ASSERT_INT_EQ(mt_config_validate(&cfg2), MT_EINVAL);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "run.storage_path must not contain control");
    /* the env names a run too */
    setenv("MT_NAME", "a/../../b", 1);
    mt_trainer_config cfg3 = {0};
    char *args[] = {"prog", NULL};
    int argc = 1;
    char **argv = args;
    MT_ASSERT_INT_EQ(mt_config_from_args(&cfg3, &argc, &argv), MT_OK);
    unsetenv("MT_NAME");
    MT_ASSERT_INT_EQ(mt_config_validate(&cfg3), MT_EINVAL);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "run.name must not contain '/'");
}



/* Sizes a caller gives that would overflow: a checkpoint shape whose bytes wrap size_t, a
 * storage path so long that paths under it would be cut short into other paths. */
static void test_sizes_that_overflow(void)
{
    mt_checkpoint *ck = mt_checkpoint_new();
    float x[4] = {0};
    size_t dims[3] = {(size_t)1 << 33, (size_t)1 << 33, 4};
    MT_ASSERT_INT_EQ(mt_checkpoint_put(ck, "x", MT_F32, 3, dims, x, MT_REPLICATED), MT_EINVAL);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "the shape's bytes do not fit");
    size_t wrap[2] = {(size_t)1 << 62, 4}; /* 2^64 elements: wraps to 0 */
    MT_ASSERT_INT_EQ(mt_checkpoint_put(ck, "y", MT_U8, 2, wrap, NULL, MT_REPLICATED), MT_EINVAL);
    size_t ok[1] = {4};
    MT_ASSERT_INT_EQ(mt_checkpoint_put(ck, "x", MT_F32, 1, ok, x, MT_REPLICATED), MT_OK);
    char bad_name[] = "a\nb";
    MT_ASSERT_INT_EQ(mt_checkpoint_put(ck, bad_name, MT_F32, 1, ok, x, MT_REPLICATED), MT_EINVAL);
    MT_ASSERT_INT_EQ(mt_checkpoint_set_meta(ck, "k\x1b[2J", "v"), MT_EINVAL);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "control characters");
    mt_checkpoint_free(&ck);
    char *longpath = malloc(4000);
    memset(longpath, 'p', 3999);
    longpath[0] = '/';
    longpath[3999] = '\0';
    mt_trainer_config cfg = {.run = {.name = "x", .storage_path = longpath}};
    MT_ASSERT_INT_EQ(mt_config_validate(&cfg), MT_EINVAL);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "run.storage_path must be at most 3500 bytes");
    mt_result *r = NULL;
    MT_ASSERT_INT_EQ(mt_result_load(longpath, &r), MT_EINVAL);
    CU_ASSERT_PTR_NULL(r);
    free(longpath);
}

/* mt__grow (MT__GROW): capacity doubles (from 8) and the contents stay; a size that
 * overflows is MT_ENOMEM with the array and its capacity unchanged. */
/* The live-handle table and each thread's last hit: a handle taken back, or recorded
 * again as another kind, is no longer found as it was, even right after a hit. */
static void test_live_handles(void)
{
    static char a, b;
    CU_ASSERT(!mt__live(&a, MT__LIVE_CONTEXT));
    MT_ASSERT_INT_EQ(mt__live_add(&a, MT__LIVE_CONTEXT), MT_OK);
    MT_ASSERT_INT_EQ(mt__live_add(&b, MT__LIVE_BATCH), MT_OK);
    CU_ASSERT(mt__live(&a, MT__LIVE_CONTEXT));
    CU_ASSERT(mt__live(&a, MT__LIVE_CONTEXT)); /* the thread's last hit */
    CU_ASSERT(!mt__live(&a, MT__LIVE_SHARD));
    mt__live_remove(&b); /* another kind taken back: a is still found */
    CU_ASSERT(mt__live(&a, MT__LIVE_CONTEXT));
    CU_ASSERT(!mt__live(&b, MT__LIVE_BATCH));
    mt__live_remove(&a);
    CU_ASSERT(!mt__live(&a, MT__LIVE_CONTEXT));
    MT_ASSERT_INT_EQ(mt__live_add(&a, MT__LIVE_CONTEXT), MT_OK);
    CU_ASSERT(mt__live(&a, MT__LIVE_CONTEXT));
    MT_ASSERT_INT_EQ(mt__live_add(&a, MT__LIVE_CHECKPOINT), MT_OK); /* the kind changed */
    CU_ASSERT(!mt__live(&a, MT__LIVE_CONTEXT));
    CU_ASSERT(mt__live(&a, MT__LIVE_CHECKPOINT));
    mt__live_remove(&a);
    CU_ASSERT(!mt__live(&a, MT__LIVE_CHECKPOINT));
}

static void test_growable_array(void)
{
    int *a = NULL;
    size_t cap = 0, reallocs = 0;
    for (int i = 0; i < 1000; i++) {
        size_t before = cap;
        MT_ASSERT_INT_EQ(MT__GROW(a, cap, (size_t)i + 1), MT_OK);
        reallocs += cap != before;
        a[i] = i;
    }
    CU_ASSERT_EQUAL(cap, 1024);
    CU_ASSERT_EQUAL(reallocs, 8); /* 8, 16, ..., 1024 */
    bool same = true;
    for (int i = 0; i < 1000; i++)
        same = same && a[i] == i;
    CU_ASSERT(same);
    MT_ASSERT_INT_EQ(MT__GROW(a, cap, 1000), MT_OK); /* room already */
    CU_ASSERT_EQUAL(cap, 1024);
    int *kept = a;
    MT_ASSERT_INT_EQ(mt__grow(&a, &cap, SIZE_MAX / 2, 16), MT_ENOMEM); /* bytes overflow */
    CU_ASSERT_PTR_EQUAL(a, kept);
    CU_ASSERT_EQUAL(cap, 1024);
    CU_ASSERT_EQUAL(a[999], 999);
    free(a);
    char *z = NULL; /* zero-size elements: still a valid pointer */
    size_t zcap = 0;
    MT_ASSERT_INT_EQ(mt__grow(&z, &zcap, 100, 0), MT_OK);
    CU_ASSERT_PTR_NOT_NULL(z);
    MT_ASSERT_INT_EQ(mt__grow(&z, &zcap, 1000, 0), MT_OK);
    CU_ASSERT_PTR_NOT_NULL(z);
    free(z);
}

/* After mt_finalize MPI cannot be used again: fit, mt_init and the job queries answer
 * without calling into MPI (fit aborted inside MPI). Runs last: MPI is gone after it. */
static int count_calls(mt_context *c, void *arg)
{
    (*(int *)arg)++;
    return MT_OK;
}

static void test_calls_after_finalize(void)
{
    MT_ASSERT_INT_EQ(mt_init(NULL, NULL), MT_OK);
    MT_ASSERT_INT_EQ(mt_job_size(), 1);
    MT_ASSERT_INT_EQ(mt_finalize(), MT_OK);
    int calls = 0;
    mt_trainer *t = NULL;
    MT_ASSERT_INT_EQ(mt_trainer_create(&t, count_calls, &calls, NULL), MT_OK);
    mt_result *r = NULL;
    MT_ASSERT_INT_EQ(mt_trainer_fit(t, &r), MT_EINVAL);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "MPI was finalised");
    CU_ASSERT_PTR_NULL(r);
    MT_ASSERT_INT_EQ(calls, 0);
    mt_trainer_destroy(&t);
    MT_ASSERT_INT_EQ(mt_init(NULL, NULL), MT_EINVAL);
    MT_ASSERT_STR_CONTAINS(mt_last_error(), "finalised already");
    MT_ASSERT_INT_EQ(mt_job_rank(), 0);
    MT_ASSERT_INT_EQ(mt_job_size(), 1);
}

/* ------------------------------------------------------------ stale shared memory */

typedef struct {
    char seen[16][256];
    int n;
} stale_seen;

static void note_stale(const char *path, const char *why, void *arg)
{
    stale_seen *s = arg;
    if (s->n < 16)
        snprintf(s->seen[s->n++], sizeof s->seen[0], "%s: %s", strrchr(path, '/') + 1, why);
}

/* The line of s for segment name, or "" */
static const char *stale_line(const stale_seen *s, const char *name)
{
    for (int i = 0; i < s->n; i++)
        if (!strncmp(s->seen[i], name, strlen(name)) && s->seen[i][strlen(name)] == ':')
            return s->seen[i];
    return "";
}

static void plant(const char *dir, const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    CU_ASSERT_FATAL(f != NULL);
    fclose(f);
}

static bool planted(const char *dir, const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

/* Segments whose creator is gone (dead pid, zombie, pid reused by a process started at
 * another time; the older names without start time and namespace when no process has
 * the pid in any namespace, judged from the first pid namespace only) are listed and
 * removed; every other one is kept: a live creator, an older name whose pid a process
 * (a zombie too) has, another pid namespace, another user, names not of the library's
 * form. */
static void test_stale_shm(void)
{
    char dir[256];
    snprintf(dir, sizeof dir, "%s/mpitrain-unit-shm-XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    CU_ASSERT_FATAL(mkdtemp(dir) != NULL);
    int me = (int)getpid();
    unsigned long long start = mt__process_start(me), space = mt__pid_space();
    CU_ASSERT_FATAL(start != 0 && space != 0);
    pid_t dead = fork();
    CU_ASSERT_FATAL(dead >= 0);
    if (dead == 0)
        _exit(0);
    waitpid(dead, NULL, 0);
    pid_t zombie = fork(); /* exits, not waited for until the end */
    CU_ASSERT_FATAL(zombie >= 0);
    if (zombie == 0)
        _exit(0);
    for (int i = 0; i < 1000; i++) { /* until it is a zombie */
        char st = 0;
        uint64_t t;
        if (mt__process_stat(zombie, &st, &t) == 0 && st == 'Z')
            break;
        usleep(1000);
    }
    unsigned long long zstart = mt__process_start(zombie);
    /* the older names (no start time, no namespace) are judged only where every process
     * of the machine can be seen: a process of the first pid namespace */
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    int first = 0;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "NSpid:", 6))
            first = strchr(line + 7, '\t') == NULL && strchr(line + 7, ' ') == NULL;
    if (f)
        fclose(f);
    enum { GONE = 5, KEPT = 11 };
    char gone[GONE][128], kept[KEPT][128];
    snprintf(gone[0], sizeof gone[0], "mpitrain-spawn-%d-%llu-%llu-0", (int)dead, start, space);
    snprintf(gone[1], sizeof gone[1], "mpitrain-watch-%d-%llu-%llu-3", me, start + 1, space);
    snprintf(gone[2], sizeof gone[2], "mpitrain-fusion-%d-%llu-%llu-1", (int)zombie, zstart,
             space);
    snprintf(gone[3], sizeof gone[3], "mpitrain-spawn-%d-0", (int)dead); /* older name */
    snprintf(gone[4], sizeof gone[4], "mpitrain-spawn-%d-%llu-0-2", (int)dead, start);
    int ngone = first ? 5 : 3;
    snprintf(kept[0], sizeof kept[0], "mpitrain-fusion-%d-%llu-%llu-0", me, start, space);
    snprintf(kept[1], sizeof kept[1], "mpitrain-spawn-%d-0", me); /* older name: pid runs */
    snprintf(kept[2], sizeof kept[2], "mpitrain-watch-%d-%llu-%llu-0", (int)dead, start,
             space + 1); /* another pid namespace */
    snprintf(kept[3], sizeof kept[3], "mpitrain-other-%d-0", (int)dead);
    snprintf(kept[4], sizeof kept[4], "mpitrain-spawn-%d-1-2", (int)dead);
    snprintf(kept[5], sizeof kept[5], "mpitrain-spawn-%d-x", (int)dead);
    snprintf(kept[6], sizeof kept[6], "mpitrain-spawn-0-0");
    snprintf(kept[7], sizeof kept[7], "mpitrain-spawn-%d-1-2-3-4-5", (int)dead);
    snprintf(kept[8], sizeof kept[8], "mpitrain-watch-%d-7", (int)zombie); /* older: a zombie
                                                                             has the pid */
    snprintf(kept[9], sizeof kept[9], "mpitrain-watch-%d-1", (int)dead); /* a folder */
    snprintf(kept[10], sizeof kept[10], "mpitrain-fusion-%d-2", (int)dead); /* another user's */
    for (int i = 0; i < GONE; i++)
        plant(dir, gone[i]);
    for (int i = 0; i < 9; i++)
        plant(dir, kept[i]);
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, kept[9]);
    CU_ASSERT(mkdir(path, 0700) == 0);
    int other_user = geteuid() == 0;
    if (other_user) {
        plant(dir, kept[10]);
        snprintf(path, sizeof path, "%s/%s", dir, kept[10]);
        CU_ASSERT(chown(path, 65534, 65534) == 0);
    }

    stale_seen s = {.n = 0};
    MT_ASSERT_INT_EQ(mt__shm_reap(dir, false, note_stale, &s), ngone);
    MT_ASSERT_INT_EQ(s.n, ngone);
    char want[256];
    snprintf(want, sizeof want, "its creator, pid %d, has exited", (int)dead);
    MT_ASSERT_STR_CONTAINS(stale_line(&s, gone[0]), want);
    snprintf(want, sizeof want, "its creator, pid %d started at tick %llu, has exited (pid %d "
             "is now a process started at tick %llu)", me, start + 1, me, start);
    MT_ASSERT_STR_CONTAINS(stale_line(&s, gone[1]), want);
    MT_ASSERT_STR_CONTAINS(stale_line(&s, gone[2]), "(a zombie)");
    snprintf(want, sizeof want, "its creator, pid %d, has exited (no process has that pid)",
             (int)dead);
    for (int i = 3; i < ngone; i++)
        MT_ASSERT_STR_CONTAINS(stale_line(&s, gone[i]), want);
    for (int i = 0; i < GONE; i++) /* listing removes nothing */
        CU_ASSERT(planted(dir, gone[i]));

    s.n = 0;
    MT_ASSERT_INT_EQ(mt__shm_reap(dir, true, note_stale, &s), ngone);
    MT_ASSERT_INT_EQ(s.n, ngone);
    for (int i = 0; i < GONE; i++) {
        MT_ASSERT_INT_EQ(planted(dir, gone[i]), i >= ngone);
        MT_ASSERT_INT_EQ(stale_line(&s, gone[i])[0] != '\0', i < ngone);
    }
    for (int i = 0; i < KEPT - 1 + other_user; i++)
        MT_ASSERT_INT_EQ(planted(dir, kept[i]), true);
    MT_ASSERT_INT_EQ(mt__shm_reap(dir, true, NULL, NULL), 0);
    waitpid(zombie, NULL, 0);

    snprintf(path, sizeof path, "%s/nowhere", dir);
    MT_ASSERT_INT_EQ(mt__shm_reap(path, true, NULL, NULL), 0); /* no folder: nothing */
    snprintf(path, sizeof path, "%s/%s", dir, kept[9]);
    rmdir(path);
    for (int i = 0; i < KEPT; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, kept[i]);
        unlink(path);
    }
    for (int i = ngone; i < GONE; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, gone[i]);
        unlink(path);
    }
    CU_ASSERT(rmdir(dir) == 0);

    /* the library's own names carry pid, start time and namespace; a process that ends
     * the job removes those it still holds */
    char name[MT__SHM_NAME_LEN], prefix[128];
    int fd = mt__shm_create("watch", name, sizeof name);
    CU_ASSERT_FATAL(fd >= 0);
    close(fd);
    snprintf(prefix, sizeof prefix, "/mpitrain-watch-%d-%llu-%llu-", me, start, space);
    MT_ASSERT_INT_EQ(strncmp(name, prefix, strlen(prefix)), 0);
    s.n = 0;
    MT_ASSERT_INT_EQ(mt__shm_reap(MT__SHM_DIR, false, note_stale, &s) >= 0, true);
    MT_ASSERT_STR_EQ(stale_line(&s, name + 1), ""); /* its creator runs: not stale */
    mt__shm_unlink_own();
    fd = shm_open(name, O_RDONLY, 0);
    MT_ASSERT_INT_EQ(fd, -1);
    if (fd >= 0) {
        close(fd);
        shm_unlink(name);
    }
    /* a process that ends the job itself (mt__end_job) leaves none of its names */
    int pipefd[2];
    CU_ASSERT_FATAL(pipe(pipefd) == 0);
    pid_t ender = fork();
    CU_ASSERT_FATAL(ender >= 0);
    if (ender == 0) {
        char mine[MT__SHM_NAME_LEN] = "";
        int f2 = mt__shm_create("fusion", mine, sizeof mine);
        if (f2 < 0 || write(pipefd[1], mine, sizeof mine) != (ssize_t)sizeof mine)
            _exit(1);
        mt__end_job(MPI_COMM_NULL, 3, NULL, 1.0);
    }
    close(pipefd[1]);
    char theirs[MT__SHM_NAME_LEN] = "";
    ssize_t got = read(pipefd[0], theirs, sizeof theirs);
    close(pipefd[0]);
    int status = 0;
    waitpid(ender, &status, 0);
    MT_ASSERT_INT_EQ(got, (ssize_t)sizeof theirs);
    MT_ASSERT_INT_EQ(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 3);
    snprintf(prefix, sizeof prefix, "/mpitrain-fusion-%d-", (int)ender);
    MT_ASSERT_INT_EQ(strncmp(theirs, prefix, strlen(prefix)), 0);
    fd = theirs[0] ? shm_open(theirs, O_RDONLY, 0) : -1;
    MT_ASSERT_INT_EQ(fd, -1);
    if (fd >= 0) {
        close(fd);
        shm_unlink(theirs);
    }
}

/* ------------------------------------------------------------ epoch plans */

/* Every row of the dataset exactly once per epoch over all ranks' windows (split: the
 * ranks' parts of the order), each rank its own count, with and without shuffling; a
 * shuffled order differs between epochs and is the same for the same seed and epoch. */
static void test_plan_covers_every_row_once(void)
{
    int64_t ns[] = {1, 7, 100, 1000, 12345};
    int64_t Bs[] = {1, 3, 64, 5000};
    for (size_t a = 0; a < 5; a++)
        for (size_t bi = 0; bi < 4; bi++)
            for (int shuffle = 0; shuffle < 2; shuffle++)
                for (int p = 1; p <= 3; p += 2) {
                    int64_t n = ns[a], B = Bs[bi], rows = n / p, W = rows > 10 ? rows / 3 : 1;
                    unsigned char *seen = calloc((size_t)n, 1);
                    int64_t total = 0;
                    for (int r = 0; r < p && rows; r++) {
                        mt__plan pl;
                        mt__plan_make(&pl, n, B, shuffle, 42, 3, r * rows, rows);
                        int64_t mine = 0;
                        for (int64_t k = 0; k * W < rows; k++) {
                            mt__run *runs = NULL;
                            int nr = 0;
                            MT_ASSERT_INT_EQ(mt__plan_runs(&pl, k * W, k * W + W, &runs, &nr, "t"),
                                             MT_OK);
                            for (int i = 0; i < nr; i++) {
                                CU_ASSERT(runs[i].start >= 0 && runs[i].start + runs[i].count <= n);
                                CU_ASSERT(i == 0 || runs[i - 1].start + runs[i - 1].count < runs[i].start);
                                for (int64_t x = runs[i].start;
                                     x < runs[i].start + runs[i].count && x < n; x++)
                                    seen[x]++;
                                mine += runs[i].count;
                            }
                            free(runs);
                        }
                        MT_ASSERT_INT_EQ(mine, rows);
                        total += mine;
                    }
                    int64_t once = 0, more = 0;
                    for (int64_t x = 0; x < n; x++)
                        once += seen[x] == 1, more += seen[x] > 1;
                    MT_ASSERT_INT_EQ(once, total);
                    MT_ASSERT_INT_EQ(more, 0);
                    free(seen);
                }
    /* the order: the same for the same seed and epoch, another for the next epoch */
    mt__plan e3, again, e4;
    mt__plan_make(&e3, 100000, 10, true, 7, 3, 0, 100000);
    mt__plan_make(&again, 100000, 10, true, 7, 3, 0, 100000);
    mt__plan_make(&e4, 100000, 10, true, 7, 4, 0, 100000);
    mt__run *r1, *r2, *r3;
    int n1, n2, n3;
    MT_ASSERT_INT_EQ(mt__plan_runs(&e3, 0, 50, &r1, &n1, "t"), MT_OK);
    MT_ASSERT_INT_EQ(mt__plan_runs(&again, 0, 50, &r2, &n2, "t"), MT_OK);
    MT_ASSERT_INT_EQ(mt__plan_runs(&e4, 0, 50, &r3, &n3, "t"), MT_OK);
    MT_ASSERT_INT_EQ(n1, n2);
    CU_ASSERT(n1 == n2 && !memcmp(r1, r2, (size_t)n1 * sizeof *r1));
    CU_ASSERT(n1 != n3 || memcmp(r1, r3, (size_t)n1 * sizeof *r1));
    free(r1), free(r2), free(r3);
}

/* A plan is a few words whatever the rows: 10^10 and 2^50 rows plan like 10^6, and a
 * window's runs are as many as its blocks (here 4 blocks of 2^18 rows: at most 5 runs). */
static void test_plan_size_is_not_in_rows(void)
{
    int64_t ns[] = {1000000, 10000000000LL, (int64_t)1 << 50, INT64_MAX / 2};
    for (size_t a = 0; a < 4; a++) {
        int64_t B = (int64_t)1 << 18, rows = ns[a] / 3;
        mt__plan pl;
        mt__plan_make(&pl, ns[a], B, true, 1, 0, rows, rows); /* rank 1 of 3 */
        CU_ASSERT(sizeof pl <= 128);
        for (int64_t k = 0; k < 3 && k * 4 * B < rows; k++) {
            mt__run *runs = NULL;
            int nr = 0;
            int64_t lo = k * 4 * B, hi = lo + 4 * B < rows ? lo + 4 * B : rows, sum = 0;
            MT_ASSERT_INT_EQ(mt__plan_runs(&pl, lo, lo + 4 * B, &runs, &nr, "t"), MT_OK);
            CU_ASSERT(nr >= 1 && nr <= 5);
            for (int i = 0; i < nr; i++) {
                CU_ASSERT(runs[i].start >= 0 && runs[i].start + runs[i].count <= ns[a]);
                sum += runs[i].count;
            }
            MT_ASSERT_INT_EQ(sum, hi - lo);
            free(runs);
        }
    }
}

static const mt_test tests[] = {
    {"format_doubles", test_format_doubles},
    {"combine_same_bits_either_side", test_combine_same_bits_either_side},
    {"plan_covers_every_row_once", test_plan_covers_every_row_once},
    {"plan_size_is_not_in_rows", test_plan_size_is_not_in_rows},
    {"metrics", test_metrics},
    {"set_error", test_set_error},
    {"retention_vectors", test_retention_vectors},
    {"metric_types_round_trip", test_metric_types_round_trip},
    {"error_table", test_error_table},
    {"last_error_per_thread", test_last_error_per_thread},
    {"config_defaults", test_config_defaults},
    {"config_validate_lists_every_problem", test_config_validate_lists_every_problem},
    {"config_validate_single_fields", test_config_validate_single_fields},
    {"config_from_args_all_options", test_config_from_args_all_options},
    {"config_from_args_errors", test_config_from_args_errors},
    {"config_precedence", test_config_precedence},
    {"config_help_and_separator", test_config_help_and_separator},
    {"args_leftovers", test_args_leftovers},
    {"config_only_and_help", test_config_only_and_help},
    {"program_helpers", test_program_helpers},
    {"trainer_outside_mpi", test_trainer_outside_mpi},
    {"strict_numbers", test_strict_numbers},
    {"env_knobs_strict", test_env_knobs_strict},
    {"names_from_users", test_names_from_users},
    {"sizes_that_overflow", test_sizes_that_overflow},
    {"growable_array", test_growable_array},
    {"live_handles", test_live_handles},
    {"stale_shm", test_stale_shm},
    {"calls_after_finalize", test_calls_after_finalize}, /* last: MPI is gone after it */
    {NULL, NULL},
};

int main(int argc, char **argv)
{
    return mt_test_main(argc, argv, "unit", tests, false);
}
