/*
 * mpitrain.h -- data-parallel training on MPI ranks.
 *
 * The one public header. Every exported name starts with mt_ or MT_.
 *
 * A minimal job
 * -------------
 *
 *   #include <mpitrain.h>
 *
 *   static int train(mt_context *ctx, void *arg) {
 *       double loss = 1.0 / (1 + mt_world_rank(ctx));
 *       int rc = mt_allreduce(ctx, &loss, 1, MT_F64, MT_MEAN);   // collective
 *       if (rc) return rc;
 *       return MT_OK;
 *   }
 *
 *   int main(int argc, char **argv) {
 *       mt_init(&argc, &argv);
 *       mt_trainer_config cfg = { .run.name = "demo" };
 *       int rc = mt_config_from_args(&cfg, &argc, &argv);  // --name, --num-workers, ...
 *       if (!rc) rc = mt_args_rest(argc, argv);             // an unknown flag: refused
 *       mt_trainer *t = NULL; mt_result *res = NULL;
 *       if (!rc) rc = mt_trainer_create(&t, train, NULL, &cfg);
 *       if (!rc) rc = mt_trainer_fit(t, &res);
 *       if (rc && res) fprintf(stderr, "%s\n", mt_result_error(res));  // failed or preempted
 *       ...
 *       mt_result_free(&res); mt_trainer_destroy(&t);
 *       mt_finalize();
 *       return rc ? 1 : 0;
 *   }
 *
 * Run it with `mpirun -np 4 ./demo`.
 *
 * Conventions
 * -----------
 * - Functions return 0 (MT_OK) or a negative MT_E* code; mt_last_error() holds this
 *   thread's detailed message ("rank 1 failed: ...", "run.checkpoint.num_to_keep must
 *   be >= 0 (got -2)").
 * - Collective: every rank of the job must call it, in the same order, with matching
 *   arguments. Every rank returns the same code: the rank that failed its own error, the
 *   others MT_EPEER; ranks that called different collectives all get MT_EMISMATCH.
 *   Local: touches only the calling rank.
 * - Ownership: _new/_create give the caller an owned object; _free/_destroy(T **) take it
 *   back (NULL-safe) and set the pointer to NULL; getters return borrowed pointers valid
 *   until their owner is destroyed.
 * - Config structs: zero-initialised means "default" in every field.
 */
#ifndef MPITRAIN_H
#define MPITRAIN_H

#include <mpi.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define MT_EXTERN __attribute__((visibility("default")))
#else
#define MT_EXTERN
#endif

/* ---------------------------------------------------------------- errors */

/* XX(name, code, text): the one table of error codes. */
#define MT_ERRNO_MAP(XX)                                                      \
    XX(EINVAL, -1, "invalid argument")                                        \
    XX(ENOMEM, -2, "out of memory")                                           \
    XX(EIO, -3, "input/output error")                                         \
    XX(ENOTFOUND, -4, "not found")                                            \
    XX(EFORMAT, -5, "bad file format")                                        \
    XX(EMPI, -6, "MPI error")                                                 \
    XX(EPEER, -7, "another rank failed")                                      \
    XX(EMISMATCH, -8, "ranks called different collectives")                   \
    XX(ESTOP, -9, "the run must stop (preemption or stop request)")

typedef enum {
    MT_OK = 0,
#define MT__XX(name, code, text) MT_##name = code,
    MT_ERRNO_MAP(MT__XX)
#undef MT__XX
} mt_errno;

/* Local. Text of a code ("invalid argument"); never NULL. */
MT_EXTERN const char *mt_strerror(int code);
/* Local. Name of a code ("MT_EINVAL"); never NULL. */
MT_EXTERN const char *mt_err_name(int code);
/* Local. This thread's last detailed message; "" when none. */
MT_EXTERN const char *mt_last_error(void);
/* Local. Make message this thread's last error (what mt_last_error returns; cut at 2047
 * bytes, keeping the end) and return code: for a training function that fails for a
 * reason of its own, e.g. a binding whose function raised, so that the agreement carries
 * the text to every rank, the run's error record and mt_result_error. NULL = "". */
MT_EXTERN int mt_set_error(int code, const char *message);

/* Exit statuses of mpitrain programs (and of the job, for MT_EXIT_STALLED and
 * MT_EXIT_LOST). */
#define MT_EXIT_FAILED 1     /* training failed (retries exhausted) or bad input */
#define MT_EXIT_USAGE 2      /* a bad command line (mt_args_rest, a malformed option) */
#define MT_EXIT_PREEMPTED 75 /* stopped for preemption after a checkpoint: requeue me */
#define MT_EXIT_STALLED 76   /* a rank waited in a collective past stall_timeout_s */
#define MT_EXIT_LOST 77      /* a rank of the job died (seen by a rank on its host): rerun */

/* ---------------------------------------------------------------- configs */

typedef enum { MT_ORDER_MAX = 0, MT_ORDER_MIN } mt_order;

/* num_workers: 0 = the job's world size (under mpirun); N > 1 without a launcher starts
 *   N-1 more processes (spawn mode).
 * cpus_per_worker: 0 = no requirement; N = every rank's affinity mask must hold >= N CPUs. */
typedef struct {
    int num_workers;
    int cpus_per_worker;
} mt_scaling_config;

/* num_to_keep: 0 = keep all.  score_attribute: NULL = keep the newest.
 * score_order: MT_ORDER_MAX (default) or MT_ORDER_MIN.
 * frequency: 0 = only when the training function asks; N = every N reports.
 * at_end: false (default) = no extra checkpoint at the end.
 * async_commit: false = MT_CHECKPOINT_ASYNC (1 turns it on; default off). On: mt_report
 *   with a checkpoint returns once this rank's part is copied into staging memory; the
 *   gather to rank 0, the write, the fsync and the commit go on in a library thread (on
 *   its own communicator) while training continues. One commit at a time: the next
 *   report with a checkpoint, the end of each attempt and preemption wait for it; a
 *   failed commit is the error of the next report on every rank. Needs
 *   MPI_THREAD_MULTIPLE (without it commits stay synchronous). Every rank must agree.
 * staging_bytes: 0 = MT_CHECKPOINT_STAGING, else 1 GiB: the staging memory a rank holds
 *   for an asynchronous commit (at least MT_CHECKPOINT_BUFFER, 64 MiB: one piece); a
 *   part larger than it makes mt_report wait until the rest fits. */
typedef struct {
    int num_to_keep;
    const char *score_attribute;
    mt_order score_order;
    int frequency;
    bool at_end;
    bool async_commit;
    size_t staging_bytes;
} mt_checkpoint_config;

/* max_failures: 0 (default) = no retry; -1 = unlimited.
 * stall_warn_s: 0 = 60 s.  stall_timeout_s: 0 = 600 s (must be >= stall_warn_s). */
typedef struct {
    int max_failures;
    double stall_warn_s;
    double stall_timeout_s;
} mt_failure_config;

/* datasets_to_split: NULL-terminated names; NULL = all.  memory_limit: 0 = 1 GiB per rank. */
typedef struct {
    const char *const *datasets_to_split;
    size_t memory_limit;
} mt_data_config;

#define MT_VERBOSE_SILENT (-1)
/* name: NULL = "mt_YYYY-MM-DD_HH-MM-SS" (rank 0's clock, agreed by every rank).
 * storage_path: NULL = $HOME/mpitrain_results.
 * verbose: 0 = default (1: a line per report); MT_VERBOSE_SILENT = quiet; 2 = per-rank
 *   detail.  On the command line `--verbose 0` means quiet. */
typedef struct {
    const char *name;
    const char *storage_path;
    int verbose;
    mt_checkpoint_config checkpoint;
    mt_failure_config failure;
    /* a finished run of the same name is replaced instead of refused; never together with
     * a resume_from_checkpoint or a dataset file inside that run (MT_EINVAL before anything
     * is deleted: the folder it would clear holds what the run is to read) */
    bool overwrite;
    bool trace; /* each rank writes a timeline to <run>/trace/rank_<R>.json (also MT_TRACE=1) */
    /* A checkpoint folder (of another run, or mt_checkpoint_open's) a new run starts from:
     * mt_get_checkpoint gives it to the training function (a trainable's load) when the
     * run has no checkpoint of its own yet; once the run has committed one, its own latest
     * wins (as Ray's resume_from_checkpoint). The run's training_iteration still starts at
     * 0. NULL = none. A path that is not a checkpoint is MT_EFORMAT (MT_EINVAL when the
     * path is empty or too long) on every rank before the function runs. */
    const char *resume_from_checkpoint;
    /* A program that does not train (a diagnostic, a benchmark) sets this: a run directory
     * of this name that holds anything (a run in any state: finished, failed, preempted,
     * running) is refused with MT_EINVAL on every rank, naming it, and left exactly as it
     * was; overwrite does not apply. Not a command-line option. */
    bool refuse_existing;
} mt_run_config;

typedef struct {
    mt_scaling_config scaling;
    mt_run_config run;
    mt_data_config data;
} mt_trainer_config;

/* Local. Replace every zero ("default") field of cfg by its default value, except run.name
 * (named by the trainer, agreed across ranks). Idempotent. */
MT_EXTERN void mt_config_defaults(mt_trainer_config *cfg);

/* Local. Check every field; MT_EINVAL with every problem in mt_last_error, one per line,
 * each naming the field by its full path and the rule it breaks. */
MT_EXTERN int mt_config_validate(const mt_trainer_config *cfg);

/* Local. Apply the environment (MT_NAME, MT_STORAGE_PATH) then the command line to cfg, and
 * remove the options it used from argv. Precedence: command line > environment > values
 * already in cfg > defaults. Options (both "--opt VALUE" and "--opt=VALUE"):
 *   --name, --storage-path, --num-workers, --cpus-per-worker, --max-failures,
 *   --num-to-keep, --checkpoint-score-attribute, --checkpoint-score-order max|min,
 *   --checkpoint-frequency, --checkpoint-at-end, --checkpoint-async, --checkpoint-staging,
 *   --overwrite, --resume-from-checkpoint,
 *   --stall-warn, --stall-timeout, --verbose, --trace.
 * Everything else stays in argv, in order, for the program: its own options, --help, and
 * a "--" with what follows it (which the library does not read). A program then takes its
 * own options (mt_args_take or its own loop), answers --help (mt_args_help,
 * mt_config_help) and refuses what is left (mt_args_rest), so a misspelled flag is an
 * error, never ignored:
 *
 *   mt_trainer_config cfg = {...}, defaults = cfg;
 *   int rc = mt_config_from_args(&cfg, &argc, &argv);
 *   if (!rc && mt_args_help(argc, argv)) { mt_config_help(stdout, &defaults); exit(0); }
 *   if (!rc) rc = mt_args_take(&argc, argv, "--epochs", &epochs_text);
 *   if (!rc) rc = mt_args_rest(argc, argv);      // MT_EINVAL: "unknown option '--epoch'"
 *
 * A malformed value is MT_EINVAL naming the option. String fields point into argv or the
 * environment. */
MT_EXTERN int mt_config_from_args(mt_trainer_config *cfg, int *argc, char ***argv);

/* Local. Print the options mt_config_from_args takes, with the library's defaults. */
MT_EXTERN void mt_config_usage(FILE *out);
/* Local. The same, with the defaults the program starts from: each option whose field is
 * set in defaults (a copy of the program's config before mt_config_from_args) shows that
 * value, the others the library's default. NULL defaults = mt_config_usage. The text comes
 * from the table the parser reads, so help and parser cannot disagree. */
MT_EXTERN void mt_config_help(FILE *out, const mt_trainer_config *defaults);

/* Local. mt_config_from_args for a program that takes only some of the library's options:
 * names is a NULL-terminated list of option names without "--" ({"name", "storage-path",
 * NULL}); the others stay in argv like any unknown argument (mt_args_rest refuses them), and
 * MT_NAME / MT_STORAGE_PATH apply only with their option. NULL names = every option. */
MT_EXTERN int mt_config_from_args_only(mt_trainer_config *cfg, int *argc, char ***argv,
                                       const char *const *names);
/* Local. mt_config_help listing only the options named (as for mt_config_from_args_only). */
MT_EXTERN void mt_config_help_only(FILE *out, const mt_trainer_config *defaults,
                                   const char *const *names);

/* Local. True when argv (as mt_config_from_args left it) holds "--help" or "-h" before any
 * "--": the program prints its usage and exits with 0. */
MT_EXTERN bool mt_args_help(int argc, char *const *argv);
/* Local. Take a program's own option NAME ("--epochs") out of argv, as "NAME VALUE" or
 * "NAME=VALUE" before any "--": *value points at its text in argv (the last one given), or
 * is NULL when absent. MT_EINVAL for NAME without a value (the option is still removed). */
MT_EXTERN int mt_args_take(int *argc, char **argv, const char *name, const char **value);
/* Local. Refuse what is left: MT_OK when argv holds only argv[0] (or a lone trailing "--");
 * else MT_EINVAL, mt_last_error naming each leftover argument, one per line ("unknown
 * option '--epoch' (see --help)", "unexpected argument 'x' (see --help)"). Call it after
 * mt_config_from_args and after taking the program's own options. */
MT_EXTERN int mt_args_rest(int argc, char *const *argv);

/* ---------------------------------------------------------------- set-up */

typedef struct mt_trainer mt_trainer;
typedef struct mt_context mt_context;
typedef struct mt_result mt_result;
typedef int (*mt_train_fn)(mt_context *ctx, void *arg);

/* Collective over MPI_COMM_WORLD. Calls MPI_Init_thread unless MPI is already initialised
 * (then mt_finalize leaves MPI_Finalize to the program). */
MT_EXTERN int mt_init(int *argc, char ***argv);
/* Collective. Finalises MPI if mt_init initialised it. */
MT_EXTERN int mt_finalize(void);
/* Local. This process's rank and the job's size: MPI_COMM_WORLD's, or in spawn mode those
 * of parent and children together (the parent is rank 0; 1 rank before fit spawns). */
MT_EXTERN int mt_job_rank(void);
MT_EXTERN int mt_job_size(void);

/* Local. Shared memory that jobs killed outright (SIGKILL) on this machine left behind:
 * the segments /dev/shm/mpitrain-* of this user whose creating process has exited (its pid
 * unused, a zombie's, or reused by a process started later). Each process removes them
 * once, in mt_init; this lists them: fn (if not NULL) gets each one's path and why its
 * creator counts as gone, after its removal if `remove`. A segment whose creator runs or
 * cannot be identified (another user's, another pid namespace's) is never counted.
 * Returns how many, or MT_EIO when /dev/shm cannot be read. (mpitrain-info --stale-shm.) */
typedef void (*mt_stale_fn)(const char *path, const char *why, void *arg);
MT_EXTERN int mt_stale_shm(bool remove, mt_stale_fn fn, void *arg);

/* Local. Copies cfg (and its strings). */
MT_EXTERN int mt_trainer_create(mt_trainer **out, mt_train_fn fn, void *arg,
                                const mt_trainer_config *cfg);
/* Collective. Validates the config on every rank, runs fn on every rank with its context,
 * and gives every rank the same result (owned by the caller). One fit at a time: called
 * while a fit runs (from the training function), before mt_init or after mt_finalize, it
 * is MT_EINVAL and runs nothing. The context, its shards and batches, fusions made on it
 * and the checkpoint mt_get_checkpoint gives end when fit returns: a call with one kept
 * past fit is MT_EINVAL (or 0/NULL for getters), never a use of freed memory. MT_ESTOP
 * only when a stop request ended the run after a checkpoint: a function that returns
 * MT_ESTOP with no such stop behind it ends the run as failed, without a retry (MT_EINVAL
 * on its rank, MT_EPEER on the others). */
MT_EXTERN int mt_trainer_fit(mt_trainer *t, mt_result **out);
/* Local. Refused (the trainer is kept, mt_last_error says why) while the trainer's fit
 * runs. */
MT_EXTERN void mt_trainer_destroy(mt_trainer **t);

/* ---------------------------------------------------------------- context */

/* Local. The current worker's context inside a training function (per thread); NULL
 * outside one. The getters below are Local too (-1 / NULL for a NULL or ended context). */
MT_EXTERN mt_context *mt_get_context(void);
MT_EXTERN int mt_world_size(const mt_context *c);
MT_EXTERN int mt_world_rank(const mt_context *c);
MT_EXTERN int mt_local_rank(const mt_context *c);
MT_EXTERN int mt_local_world_size(const mt_context *c);
MT_EXTERN int mt_node_rank(const mt_context *c);
/* Local. CPUs in this rank's affinity mask. */
MT_EXTERN int mt_num_cpus(const mt_context *c);
/* Local. 0 for the first attempt, +1 per restart or resume. */
MT_EXTERN int mt_attempt(const mt_context *c);
/* Local. The run's name. */
MT_EXTERN const char *mt_experiment_name(const mt_context *c);
/* Local. <storage_path>/<name> */
MT_EXTERN const char *mt_run_dir(const mt_context *c);
/* Local. A private duplicate of the workers' communicator, errors returned
 * (MPI_ERRORS_RETURN). */
MT_EXTERN MPI_Comm mt_comm(const mt_context *c);

typedef enum { MT_U8 = 1, MT_I32, MT_I64, MT_F32, MT_F64 } mt_dtype;

/* ---------------------------------------------------------------- data
 *
 * A dataset is an HDF5 group whose member datasets ("columns") share their first
 * dimension (rows): /train/x (60000 x 28 x 28, uint8) and /train/y (60000, uint8).
 * Datasets in data.datasets_to_split (default: all) are split into equal contiguous row
 * ranges, one per rank (the remainder is dropped and counted); others are read whole by
 * every rank. Every rank gets the same number of batches per epoch.
 *
 *   mt_shard *s; mt_get_dataset_shard(ctx, "train", &s);        // collective
 *   mt_iter_options o = {.batch_size = 64, .shuffle = true, .seed = 1};
 *   for (int epoch = 0; epoch < 10; epoch++) {
 *       mt_shard_begin_epoch(s, epoch, &o);                      // collective
 *       const mt_batch *b;
 *       while ((rc = mt_shard_next(s, &b)) == 1) {
 *           const uint8_t *x = mt_batch_column(b, "x", MT_U8);   // rows x 784
 *           const float *y = mt_batch_column(b, "y", MT_F32);   // converted
 *       }
 *   }
 */
typedef struct mt_shard mt_shard;   /* owned by the context; lives until fit returns */
typedef struct mt_batch mt_batch;   /* borrowed; valid until the next mt_shard_next */

/* batch_size: 0 = 32.  shuffle: a seeded permutation per epoch, the same on every rank,
 * at block granularity over the whole dataset, plus a shuffle inside each in-memory
 * window.  drop_last: leave out the last, smaller batch. */
typedef struct {
    size_t batch_size;
    bool shuffle;
    uint64_t seed;
    bool drop_last;
} mt_iter_options;

/* Local, before fit. h5_group is the group's path in the file ("/train"). */
MT_EXTERN int mt_trainer_add_dataset(mt_trainer *t, const char *name, const char *h5_file,
                                     const char *h5_group);
/* Collective. Opens the file with MPI-IO on the workers' communicator; a missing file,
 * group or column, mismatched row counts, non-numeric columns, zero rows or more ranks
 * than rows is the same error on every rank, naming the file, group and column. */
MT_EXTERN int mt_get_dataset_shard(mt_context *c, const char *name, mt_shard **out);
/* Local. Rows this rank sees per epoch; rows dropped from the split (same on every rank). */
MT_EXTERN int64_t mt_shard_rows(const mt_shard *s);
MT_EXTERN int64_t mt_shard_dropped_rows(const mt_shard *s);
MT_EXTERN int mt_shard_num_columns(const mt_shard *s);
MT_EXTERN const char *mt_shard_column_name(const mt_shard *s, int i);
/* Local. A column's shape with dims[0] = rows per epoch on this rank; its stored dtype. */
MT_EXTERN int mt_shard_column_shape(const mt_shard *s, const char *column, int *ndim,
                                    size_t dims[8], mt_dtype *stored);
/* Local. Read `column` straight into `as` (HDF5 converts during the read; out-of-range
 * values saturate) so mt_batch_column(b, column, as) returns rows without a conversion
 * pass. Takes effect at the next mt_shard_begin_epoch; data.memory_limit counts the rows
 * in this dtype. Set it before the first epoch and keep it: the window size, and so the
 * shuffled order, follow the in-memory row size. */
MT_EXTERN int mt_shard_set_column_dtype(mt_shard *s, const char *column, mt_dtype as);
/* Collective. Starts an epoch (the batch count is agreed across ranks). */
MT_EXTERN int mt_shard_begin_epoch(mt_shard *s, int epoch, const mt_iter_options *o);
/* Local. 1 = *out is the next batch; 0 = the epoch is done; < 0 = error. */
MT_EXTERN int mt_shard_next(mt_shard *s, const mt_batch **out);
MT_EXTERN size_t mt_batch_rows(const mt_batch *b);
/* Local. The column's rows in C order (rows x row elements), converted to `as`; NULL with
 * mt_last_error() set for an unknown column. Valid until the next mt_shard_next. */
MT_EXTERN const void *mt_batch_column(const mt_batch *b, const char *column, mt_dtype as);
/* Local. Keeps the memory of every column mt_batch_column returned for b so far allocated
 * and unchanged until mt_batch_hold_free, past the next mt_shard_next, the next epoch
 * and the end of the fit: the shard reads what comes next into other memory (a binding's
 * views of a batch cannot dangle). NULL with mt_last_error() set when out of memory or b
 * is not a live batch. Holding batch k while asking for batch k+1 costs nothing; a batch
 * held longer keeps its buffers (a window of the shard's rows, or a batch's worth) until
 * it is released. */
typedef struct mt_batch_hold mt_batch_hold;
MT_EXTERN mt_batch_hold *mt_batch_hold_new(const mt_batch *b);
/* Local, any thread, any time (after the fit too). Frees the hold; *h becomes NULL. */
MT_EXTERN void mt_batch_hold_free(mt_batch_hold **h);

/* ---------------------------------------------------------------- collectives */

typedef enum { MT_SUM = 0, MT_MEAN, MT_MIN, MT_MAX } mt_op;

/* Local. Bytes per element of t; 0 for an unknown type. */
MT_EXTERN size_t mt_dtype_size(mt_dtype t);

/* Collective, in place. MT_MEAN divides by the world size (integers: truncated).
 * count may be 0; counts above INT_MAX are split into chunks. An integer sum that does
 * not fit its type has no defined result: small arrays carried in the agreement wrap,
 * and Open MPI 4.1's vectorised reduction saturates long MT_U8 arrays; sum in a type wide
 * enough (MT_I64). */
MT_EXTERN int mt_allreduce(mt_context *c, void *buf, size_t count, mt_dtype t, mt_op op);
/* Collective. root's buf is copied to every rank's buf. */
MT_EXTERN int mt_broadcast(mt_context *c, void *buf, size_t count, mt_dtype t, int root);
/* Collective. recv holds world_size * count elements, in rank order. */
MT_EXTERN int mt_allgather(mt_context *c, const void *send, void *recv, size_t count,
                           mt_dtype t);
/* Collective. The same three over an array of ndim dimensions (0 to 8; dims[0] x ... x
 * dims[ndim-1] elements, C order; ndim 0 is one element): the shape is agreed in the
 * call's one agreement, so ranks whose arrays hold as many elements in different shapes,
 * (2, 3) and (3, 2), all get MT_EMISMATCH naming both calls' shapes. A 1-d array agrees
 * with the plain call of its count. For allgather, dims is the send array's shape.
 * ndim MT_ND_FAIL: this rank cannot take part (a binding found its arguments bad): it
 * still meets the others in the call's agreement, failing it, so every rank returns (this
 * one MT_EINVAL with the message it set by mt_set_error before, the others MT_EPEER
 * quoting it) and none waits for it. */
#define MT_ND_FAIL (-1)
MT_EXTERN int mt_allreduce_nd(mt_context *c, void *buf, int ndim, const size_t *dims,
                              mt_dtype t, mt_op op);
MT_EXTERN int mt_broadcast_nd(mt_context *c, void *buf, int ndim, const size_t *dims,
                              mt_dtype t, int root);
MT_EXTERN int mt_allgather_nd(mt_context *c, const void *send, void *recv, int ndim,
                              const size_t *dims, mt_dtype t);
/* Collective. */
MT_EXTERN int mt_barrier(mt_context *c);

/* Gradient fusion: average many float tensors across ranks with few collectives.
 *
 *   mt_fusion *f; mt_fusion_create(ctx, 0, &f);          // 0 = MT_FUSION_BYTES or 25 MiB
 *   float *g; mt_fusion_alloc(f, total, &g);             // optional: the gradients' memory
 *   for each parameter, last layer first: idx = mt_fusion_add(f, grad, n);  // inside g
 *   each step: backward; after each layer's gradient: mt_fusion_ready(f, idx);
 *              mt_fusion_wait(f);                         // every tensor now averaged
 *
 * Tensors are packed into buckets in the order they were added; a bucket's reduction
 * starts as soon as all its tensors are ready (buckets start in order), so it overlaps the
 * rest of the backward pass. Tensors larger than a bucket get one of their own; zero-size
 * tensors are fine. Registration is checked across ranks at the first ready or wait call
 * (a different count or size on any rank is MT_EMISMATCH). A tensor's memory must stay
 * untouched between its ready call and the wait.
 *
 * Algorithms (mt_fusion_algo_name): "shm" when every rank is on one node (a shared-memory
 * segment, no MPI call per bucket); "mpi" (flat) MPI_Allreduce over all ranks, anywhere;
 * "hier" across nodes: a shared-memory sum within each node, an allreduce among one
 * leader per node, the result read back through shared memory. Every rank gets the same
 * bits whichever runs. MT_FUSION_AUTO's rule: one node: shm; several nodes with one rank
 * each: flat; several nodes and some with more than one rank: flat and hier are both
 * timed at the registration check (each reduces scratch buckets of the fusion's real
 * bucket sizes, the first 64 MiB of them: one round to warm up, then the median of five
 * rounds, alternating; the slowest rank's figure counts) and hier runs only when it was
 * faster; every rank gets the same choice. MT_FUSION_SHM=0 (environment) makes auto pick
 * flat. Until that check, a fusion that still has to time its candidates names itself
 * "auto"; with one rank nothing moves and the name is "none".
 *
 * Compression (MT_COMPRESS_FP16, _BF16) applies to the network step only (flat: the whole
 * reduction; hier: the leaders' allreduce; shm: none): each rank's values are rounded to
 * 16 bits (nearest even), each rank sums its segment over the ranks in fp32, in rank
 * order, multiplies by the average's factor and rounds once to 16 bits; every rank gets
 * every segment (MPI_Alltoall, MPI_Allgather), so the link carries half the bytes and
 * every rank the same bits. fp16 clamps finite values beyond +-65504 (a rank's gradient,
 * or under hier a node's sum) to +-65504, keeps inf and NaN, and rounds magnitudes below
 * 2^-24 to zero (fp16's subnormals start at 2^-24, its normals at 2^-14); bf16 keeps
 * fp32's exponent range (8 bits of mantissa), clamping only what would round past its
 * largest finite value. */
typedef struct mt_fusion mt_fusion;
typedef enum { MT_COMPRESS_NONE = 0, MT_COMPRESS_FP16, MT_COMPRESS_BF16 } mt_compression;
typedef enum { MT_FUSION_AUTO = 0, MT_FUSION_FLAT, MT_FUSION_SHM, MT_FUSION_HIER } mt_fusion_algo;
/* Zero fields take the environment's knob, else the default: bucket_bytes
 * MT_FUSION_BYTES or 25 MiB; compression MT_FUSION_COMPRESS=none|fp16|bf16 or none; algo
 * MT_FUSION_ALGO=auto|flat|shm|hier or auto. A bad knob value is MT_EINVAL naming the
 * variable and the value, on every rank. */
typedef struct {
    size_t bucket_bytes;
    mt_compression compression;
    mt_fusion_algo algo;
} mt_fusion_options;
/* Collective (a communicator duplicate; the node layout; the backend's set-up): every
 * rank passes the same compression and algorithm (after the environment), or all get
 * MT_EMISMATCH. o may be NULL (all defaults). MT_FUSION_SHM across nodes is MT_EINVAL;
 * a forced shm or hier whose shared segment the system refuses is MT_EIO, where auto
 * falls back to flat. */
MT_EXTERN int mt_fusion_create_opts(mt_context *c, const mt_fusion_options *o,
                                    mt_fusion **out);
/* Collective. mt_fusion_create_opts with only the bucket size given. */
MT_EXTERN int mt_fusion_create(mt_context *c, size_t bucket_bytes, mt_fusion **out);
/* Collective (every rank the same count > 0, else MT_EMISMATCH; an allocation failure on
 * one rank is MT_ENOMEM there and MT_EPEER elsewhere). *out gets count zeroed floats,
 * aligned to 64 bytes, owned by the fusion and freed by mt_fusion_destroy: in the node's
 * shared segment when the algorithm shares memory (shm, hier, or auto that may pick
 * hier), else ordinary memory. It registers nothing: add the tensors that lie in it
 * (e.g. one block for a model's gradients, each layer's weights and biases a tensor, last
 * layer first). Buckets whose tensors all lie in such blocks, at the same offsets on
 * every rank, are reduced straight from every rank's block: each rank sums its share of
 * the bucket over the node's blocks in rank order and writes the average into every
 * block (no copy in, no copy out). */
MT_EXTERN int mt_fusion_alloc(mt_fusion *f, size_t count, float **out);
/* Local. "shm", "mpi", "hier" (see Algorithms above; "auto" before the registration
 * check of a fusion that times its candidates, "none" with one rank); NULL for NULL. */
MT_EXTERN const char *mt_fusion_algo_name(const mt_fusion *f);
/* Local. The network step's format after the environment: "none", "fp16", "bf16"; NULL
 * for NULL. */
MT_EXTERN const char *mt_fusion_compression_name(const mt_fusion *f);
/* Local. The word that asks for an algorithm or a compression (MT_FUSION_ALGO,
 * MT_FUSION_COMPRESS, a program's flags): "auto", "flat", "shm", "hier"; "none", "fp16",
 * "bf16"; NULL out of range, so a program can list them all from 0 up. */
MT_EXTERN const char *mt_fusion_algo_word(mt_fusion_algo algo);
MT_EXTERN const char *mt_compression_word(mt_compression compression);
/* Local, but every rank adds the same tensors in the same order (checked at the first
 * ready or wait), before the first ready/wait. Returns the tensor's index (>= 0). */
MT_EXTERN int mt_fusion_add(mt_fusion *f, float *tensor, size_t count);
/* Local (the first call of all is collective: the registration check, and under auto
 * the timing of the candidates). */
MT_EXTERN int mt_fusion_ready(mt_fusion *f, int index);
/* Collective. Starts what has not started, waits, averages. An error on any rank during
 * the step is returned on every rank; the fusion stays usable: the next step starts
 * afresh (tensors to be marked ready again). */
MT_EXTERN int mt_fusion_wait(mt_fusion *f);
/* Collective once the fusion has stepped (its first mt_fusion_ready or mt_fusion_wait),
 * until its fit ends; Local before and after. A rank that destroys it while others are in
 * a step (their mt_fusion_wait) meets them at the step's agreement: they return
 * MT_EMISMATCH naming fusion-destroy, and every rank first completes the buckets any rank
 * had handed over, so nothing hangs. Frees the blocks of mt_fusion_alloc. NULL-safe. */
MT_EXTERN void mt_fusion_destroy(mt_fusion **f);

/* ---------------------------------------------------------------- metrics and report */

typedef struct mt_metrics mt_metrics;
typedef struct mt_checkpoint mt_checkpoint;

/* Local, all of them. Keys: 1 to 255 bytes, no control characters; '/' nests
 * ("val/acc"). Setting a key again replaces it. The keys mt_report adds to every row are reserved (MT_EINVAL naming
 * the key): training_iteration, iterations_since_restore (1 on an attempt's first report),
 * timestamp, time_this_iter_s, time_total_s, checkpoint_dir_name, per_rank, nonfinite_metrics
 * (a row lists there the keys of its doubles that are NaN or infinite, written as the
 * strings "NaN", "Infinity", "-Infinity"; a string metric is read back as a string,
 * whatever it spells). */
MT_EXTERN mt_metrics *mt_metrics_new(void);
MT_EXTERN void mt_metrics_free(mt_metrics **m);
MT_EXTERN int mt_metrics_set_f64(mt_metrics *m, const char *key, double v);
MT_EXTERN int mt_metrics_set_i64(mt_metrics *m, const char *key, int64_t v);
MT_EXTERN int mt_metrics_set_str(mt_metrics *m, const char *key, const char *v);
/* Local. MT_ENOTFOUND if absent (or a string); MT_EINVAL if m, key or out is NULL. */
MT_EXTERN int mt_metrics_get_f64(const mt_metrics *m, const char *key, double *out);
MT_EXTERN int mt_metrics_get_i64(const mt_metrics *m, const char *key, int64_t *out);
/* Local. NULL if absent (or not a string), or if m or key is NULL (mt_last_error says
 * which). */
MT_EXTERN const char *mt_metrics_get_str(const mt_metrics *m, const char *key);
/* Local. The number of keys, and the i-th in insertion order (NULL out of range). */
MT_EXTERN size_t mt_metrics_count(const mt_metrics *m);
/* Local. The type a key holds (MT_METRIC_NONE when absent, or m or key is NULL). */
typedef enum { MT_METRIC_NONE = 0, MT_METRIC_F64, MT_METRIC_I64, MT_METRIC_STR } mt_metric_type;
MT_EXTERN mt_metric_type mt_metrics_type(const mt_metrics *m, const char *key);
MT_EXTERN const char *mt_metrics_key(const mt_metrics *m, size_t i);

/* Collective: every rank calls it once per iteration. Every rank's metrics go to rank 0;
 * rank 0's are the run's, and the min/mean/max over ranks of each numeric key is recorded
 * too. Adds training_iteration, iterations_since_restore, timestamp, time_this_iter_s,
 * time_total_s and, with a checkpoint, checkpoint_dir_name. With ck (non-NULL on every
 * rank, or NULL on every rank; one being built: a stored one is MT_EINVAL) the checkpoint
 * is committed before it returns; with run.checkpoint.async_commit, once it is staged
 * (the commit goes on in a thread; this report first waits for the one in flight, and
 * any report returns a failed one's error on every rank). A report without a checkpoint
 * is one agreement on every rank: rank 0's thread writes its row to result.json and
 * progress.csv, in report order, and a row it cannot write (a full disk) is every rank's
 * error at a later report (the next checkpointing one at the latest) or at the end of
 * the attempt, naming the file and the iterations left out; a report with a checkpoint
 * writes every row before its own. Returns MT_ESTOP once a stop was requested
 * (SIGTERM/SIGUSR1) and a checkpoint has been committed since. Bad input found here (a
 * reserved key, a score attribute the first report lacks, a stored checkpoint) fails the
 * attempt without a retry: a retry would fail the same way. */
MT_EXTERN int mt_report(mt_context *c, const mt_metrics *m, const mt_checkpoint *ck);
/* Local, the same answer on every rank: checkpoint.frequency says this report should carry
 * a checkpoint, or a stop was requested. */
MT_EXTERN bool mt_should_checkpoint(const mt_context *c);
/* Local (call it with the same n on every rank). Announces the last training_iteration, so
 * that checkpoint.at_end makes mt_should_checkpoint true for that report. */
MT_EXTERN void mt_set_total_iterations(mt_context *c, int64_t n);
/* Local, async-signal-safe. What SIGTERM or SIGUSR1 does while a fit runs: a stop request
 * the next report shares with every rank (then mt_should_checkpoint is true, and the report
 * that commits the next checkpoint returns MT_ESTOP). For a program that takes another
 * signal or event as a stop (a binding's Ctrl-C). Ignored outside a fit. */
MT_EXTERN void mt_request_stop(void);

/* ---------------------------------------------------------------- checkpoints */

typedef enum { MT_REPLICATED = 0, MT_SHARDED } mt_layout;

/* A checkpoint is one of two kinds: one being built (mt_checkpoint_new: put, set_meta and
 * add_file, then mt_report commits it) or one stored on disk and read back
 * (mt_checkpoint_open, mt_get_checkpoint, a result's: read-only). */
/* Local. A new checkpoint being built (NULL when out of memory). */
MT_EXTERN mt_checkpoint *mt_checkpoint_new(void);
/* Local. Frees either kind and sets *ck to NULL (the one mt_get_checkpoint gives is the
 * context's: not freed by the caller). */
MT_EXTERN void mt_checkpoint_free(mt_checkpoint **ck);
/* Local. Borrows data until the report that carries the checkpoint returns (no copy).
 * MT_REPLICATED: rank 0's copy is stored. MT_SHARDED: each rank gives its rows (dims[0]
 * may differ per rank, the other dims may not); stored as one array in rank order. */
MT_EXTERN int mt_checkpoint_put(mt_checkpoint *ck, const char *name, mt_dtype t, int ndim,
                                const size_t *dims, const void *data, mt_layout layout);
/* Local. Metadata: a key (1 to 255 bytes, no control characters) holds a string, a 64-bit
 * integer or a double (stored as an HDF5 attribute of that type). Setting a key again
 * replaces its value and type. MT_EINVAL for a NULL checkpoint, key or value, a bad key,
 * or a stored (read-only) checkpoint. */
MT_EXTERN int mt_checkpoint_set_meta(mt_checkpoint *ck, const char *key, const char *value);
MT_EXTERN int mt_checkpoint_set_meta_i64(mt_checkpoint *ck, const char *key, int64_t value);
MT_EXTERN int mt_checkpoint_set_meta_f64(mt_checkpoint *ck, const char *key, double value);
/* Local. A file (any format) copied into the checkpoint as NAME; a file given on rank
 * r > 0 is carried to rank 0 over MPI and stored as rank<r>/NAME. MT_EINVAL for a NAME
 * added already, a NAME that would leave or clash inside the folder (empty, '/', leading
 * '.', checkpoint.h5, rank<N>), and a PATH that is not a readable regular file. Setting
 * a metadata key again replaces its value. */
MT_EXTERN int mt_checkpoint_add_file(mt_checkpoint *ck, const char *name, const char *path);
/* Collective over the fit's ranks. Waits until the asynchronous commit in flight
 * (run.checkpoint.async_commit), if any, has ended on every rank: MT_OK once it is
 * committed, else its failure on every rank (the failing rank's code, MT_EPEER on the
 * others; the next report does not repeat it). With synchronous commits, only the
 * agreement. For a program that must know a checkpoint is durable before it goes on
 * (the end of fit and every report with a checkpoint wait by themselves). */
MT_EXTERN int mt_checkpoint_wait(mt_context *c);
/* Local. The latest checkpoint when the run resumed, else NULL (owned by the context). */
MT_EXTERN const mt_checkpoint *mt_get_checkpoint(mt_context *c);
/* Local. A stored array's shape; for a sharded one inside fit, this rank's part. */
MT_EXTERN int mt_checkpoint_dims(const mt_checkpoint *ck, const char *name, int *ndim,
                                 size_t dims[8]);
/* Collective or Local by the checkpoint given:
 * - Collective over the fit's ranks for the checkpoint mt_get_checkpoint gives (the one
 *   the fit resumes from, passed to the trainable's load): every rank calls it for the
 *   same arrays in the same order; rank 0 reads, replicated arrays are broadcast, sharded
 *   ones give each rank its part, re-split when the world size changed.
 * - Local for every other stored checkpoint (mt_checkpoint_open, mt_result_checkpoint,
 *   mt_result_best, mt_result_best_checkpoint, inside fit or not): the whole array.
 * count is the number of elements out holds. */
MT_EXTERN int mt_checkpoint_get(const mt_checkpoint *ck, const char *name, mt_dtype t,
                                void *out, size_t count);
/* Local. A string key's value; NULL when the key is absent, holds a number (mt_last_error
 * names its type and the getter to use) or ck or key is NULL. */
MT_EXTERN const char *mt_checkpoint_get_meta(const mt_checkpoint *ck, const char *key);
/* Local. A number key's value: MT_ENOTFOUND when the key is absent; MT_EINVAL when it holds
 * another type (an integer is read with _i64, a double with _f64, a string with
 * mt_checkpoint_get_meta: no conversion), or ck, key or out is NULL. */
MT_EXTERN int mt_checkpoint_get_meta_i64(const mt_checkpoint *ck, const char *key, int64_t *out);
MT_EXTERN int mt_checkpoint_get_meta_f64(const mt_checkpoint *ck, const char *key, double *out);
/* Local. A stored array's dtype and layout (as given to mt_checkpoint_put); either pointer
 * may be NULL. MT_ENOTFOUND for a name the checkpoint lacks, MT_EINVAL for NULL ck or name
 * or a checkpoint being built. */
MT_EXTERN int mt_checkpoint_array_type(const mt_checkpoint *ck, const char *name,
                                       mt_dtype *dtype, mt_layout *layout);
/* Local. The checkpoint's folder (NULL for one being built). */
MT_EXTERN const char *mt_checkpoint_path(const mt_checkpoint *ck);

/* Local, no run and no MPI collective needed (like Ray's Checkpoint.from_directory): open
 * the checkpoint folder at path (one a run committed: checkpoint.h5 inside) and read its
 * index (arrays, metadata) and file list, every stored check compared. *out is owned
 * (mt_checkpoint_free); mt_checkpoint_get then reads a whole array on this rank.
 * MT_EINVAL for a NULL argument; MT_EFORMAT naming the path when it is not a checkpoint
 * (missing, not a folder, no checkpoint.h5, a damaged index). */
MT_EXTERN int mt_checkpoint_open(const char *path, mt_checkpoint **out);
/* Local. A stored checkpoint's arrays (in name order), metadata keys (in name order) and
 * files (those given to mt_checkpoint_add_file: rank 0's as NAME, rank r's as
 * rankR/NAME; listed by mt_checkpoint_open, the full path is mt_checkpoint_path/NAME);
 * 0 / NULL (and mt_last_error) for a checkpoint being built, an index out of range or
 * NULL. Every commit adds three keys of its own, where the checkpoint belongs: "mt.run"
 * (the run's identity, 32 hex digits, also in run.json's "run_id"), "mt.checkpoint" (its
 * folder's name) and "mt.iteration" (an integer: the training_iteration reported with it);
 * a resume checks them against run.json and skips, with a warning, a checkpoint that is
 * not the one run.json names there (a file copied over another, or from another run), as
 * it skips a damaged one. Checkpoints written before these keys existed are restored by
 * their checksums alone. */
MT_EXTERN size_t mt_checkpoint_num_arrays(const mt_checkpoint *ck);
MT_EXTERN const char *mt_checkpoint_array_name(const mt_checkpoint *ck, size_t i);
MT_EXTERN size_t mt_checkpoint_num_meta(const mt_checkpoint *ck);
MT_EXTERN const char *mt_checkpoint_meta_key(const mt_checkpoint *ck, size_t i);
MT_EXTERN size_t mt_checkpoint_num_files(const mt_checkpoint *ck);
MT_EXTERN const char *mt_checkpoint_file_name(const mt_checkpoint *ck, size_t i);

/* ---------------------------------------------------------------- result */

/* Local. NULL when the run finished; "preempted: ..." when a stop request ended it (fit
 * returned MT_ESTOP; rerun to resume); otherwise why it failed ("rank N failed: message"). */
MT_EXTERN const char *mt_result_error(const mt_result *r);
/* Local. The run directory. */
MT_EXTERN const char *mt_result_path(const mt_result *r);
/* Local. Number of attempts fit made (1 when the first succeeded). */
MT_EXTERN int mt_result_attempts(const mt_result *r);
/* Local. The last reported metrics (rank 0's, with the automatic keys); NULL if none. */
MT_EXTERN const mt_metrics *mt_result_metrics(const mt_result *r);
/* Local. The latest checkpoint; NULL if none. On every rank its path, arrays, shapes and
 * metadata are known; mt_checkpoint_get reads the files, so it works where the run's
 * storage is readable. */
MT_EXTERN const mt_checkpoint *mt_result_checkpoint(const mt_result *r);
/* Local. Kept checkpoints, best first by checkpoint.score_attribute (newest first
 * without one), with the metrics reported with each. */
MT_EXTERN size_t mt_result_num_best(const mt_result *r);
MT_EXTERN const mt_checkpoint *mt_result_best(const mt_result *r, size_t i,
                                              const mt_metrics **metrics);
/* Local. The kept checkpoint whose report has the highest (MT_ORDER_MAX) or lowest
 * (MT_ORDER_MIN) numeric value of `metric`, any reported key (automatic ones included),
 * whatever checkpoint.score_attribute says (Ray's Result.get_best_checkpoint). Ties go
 * to the newer checkpoint; reports where the value is NaN or a string are passed over.
 * *ck (and *metrics, when not NULL: the metrics reported with it) are borrowed from r.
 * MT_EINVAL for NULL r, metric or ck, or a mode that is neither; MT_ENOTFOUND when no
 * checkpoint is kept, or when no kept checkpoint's report has `metric` as a number
 * (mt_last_error names the metric and the keys that were reported). */
MT_EXTERN int mt_result_best_checkpoint(const mt_result *r, const char *metric, mt_order mode,
                                        const mt_checkpoint **ck, const mt_metrics **metrics);
/* Local. The run's metrics history (Ray's Result.metrics_dataframe): every row of
 * result.json, the stored log, in order (a resumed run's redone iterations once, as
 * redone), each with the keys reported in it, numbers and strings, the automatic keys
 * included (the per-rank spread is not a column). Columns: every key of any row, in
 * order of first appearance; a row lacks the keys it did not report. Borrowed from r;
 * NULL (and mt_last_error) for NULL r or an index out of range. */
MT_EXTERN size_t mt_result_num_rows(const mt_result *r);
/* Local. How many lines of result.json could not be read as a row (damaged, or a last
 * line a crash cut short), and their line numbers (from 1, in order) in lines[0..max)
 * when lines is not NULL; those lines are no row of the result. mt_result_load (and fit,
 * on rank 0) also say so on stderr, with the line numbers: never in silence. */
MT_EXTERN size_t mt_result_unreadable_rows(const mt_result *r, size_t *lines, size_t max);
MT_EXTERN const mt_metrics *mt_result_row(const mt_result *r, size_t i);
MT_EXTERN size_t mt_result_num_columns(const mt_result *r);
MT_EXTERN const char *mt_result_column(const mt_result *r, size_t i);
/* Local. Rebuild a result from a run directory on disk (like Result.from_path). */
MT_EXTERN int mt_result_load(const char *run_dir, mt_result **out);
MT_EXTERN void mt_result_free(mt_result **r);

/* ---------------------------------------------------------------- trainables
 *
 * A trainable is a training job given as callbacks (Ray Tune's Trainable class: setup,
 * step, save_checkpoint, load_checkpoint, cleanup) instead of one training function. The
 * trainer owns the loop, so resume, retries and preemption need no code of the user's:
 *
 *   attempt:  setup -> load (when the run resumes or retries from a checkpoint)
 *             -> step, report [, save] -> step, report [, save] -> ... -> cleanup
 *
 *   static int step(mt_context *ctx, void *user, mt_metrics *out) {
 *       model *m = user;
 *       ... one iteration (an epoch, or N batches), collectives allowed ...
 *       mt_metrics_set_f64(out, "loss", m->loss);
 *       return m->loss < 1e-6 ? MT_STEP_DONE : MT_OK;
 *   }
 *   mt_trainable tr = {.setup = setup, .step = step, .save = save, .load = load,
 *                      .cleanup = cleanup, .max_iterations = 100};
 *   mt_trainer_create_trainable(&t, &tr, &my_model, &cfg);   then mt_trainer_fit as usual
 *
 * Each iteration: step fills *out (cleared before each call); every rank learns whether
 * any rank's step returned MT_STEP_DONE; when mt_should_checkpoint says so
 * (run.checkpoint.frequency, a stop request), or this is the last iteration and
 * run.checkpoint.at_end is set, save fills a new checkpoint; then the trainer reports the
 * metrics (and the checkpoint) with mt_report. It stops after max_iterations iterations of
 * the whole run (counted across resumes and retries: a run resumed at iteration 7 of 10
 * steps 3 more times), after an iteration whose step returned MT_STEP_DONE on any rank,
 * after the checkpoint that a stop request (SIGTERM/SIGUSR1) asked for (fit returns
 * MT_ESTOP: exit with MT_EXIT_PREEMPTED), or at the first error.
 *
 * Every checkpoint the trainer saves carries the metadata "mt.training_iteration" (the
 * iteration it was reported with) and "mt.done" ("1" after the last iteration); on resume
 * the loop continues at the iteration after the checkpoint's, so no iteration is lost or
 * repeated in result.json. Checkpoints are taken only as the config says: with the
 * default run.checkpoint.frequency 0 a retry or rerun starts from the beginning unless a
 * stop request or at_end made one, so set the frequency (e.g. 1) for mid-run resumes.
 *
 * Errors: a callback returns 0 or a negative MT_E* code (step also MT_STEP_DONE); any
 * other value is MT_EINVAL. An error on one rank ends the attempt on every rank (the
 * others get MT_EPEER naming it), cleanup runs on every rank, and fit retries from the
 * latest checkpoint up to run.failure.max_failures (setup, then load again), then returns
 * the error. A failing load is agreed before any rank steps.
 */
#define MT_STEP_DONE 1 /* step's "this was the last iteration" (not an error) */

/* Callbacks; user is the pointer given to mt_trainer_create_trainable. Zero fields are
 * defaults: setup and cleanup may be NULL; step, save and load are required.
 * setup:   Collective. Runs on every rank at the start of every attempt (first run, retry,
 *          resume): build the model from scratch (`user` is the same pointer in every
 *          attempt: reset what an earlier one left there). May open dataset shards.
 * step:    Collective. One iteration; metrics into *out (the trainer reports them; step
 *          must not call mt_report). 0 = go on, MT_STEP_DONE = stop after this iteration.
 * save:    Collective (same arrays on every rank, as for mt_report). Put the state into
 *          ck (mt_checkpoint_put, _set_meta, _add_file). The arrays are borrowed, not
 *          copied, until the report that carries ck returns (right after save, before
 *          the next step): point into the model, not at save's own stack. The trainer
 *          owns ck.
 * load:    Collective. Restore the state from ck (mt_checkpoint_get is collective); ck is
 *          borrowed (the context owns it). Called after setup when the attempt starts
 *          from a checkpoint.
 * cleanup: Local, no collectives (other ranks may have left already). Runs once at the
 *          end of every attempt, however it ended (also when setup failed: it must cope
 *          with a half-built state).
 * max_iterations: 0 = until step returns MT_STEP_DONE; N = N iterations in the whole run
 *          (also announced with mt_set_total_iterations, for run.checkpoint.at_end). */
typedef struct {
    int (*setup)(mt_context *ctx, void *user);
    int (*step)(mt_context *ctx, void *user, mt_metrics *out);
    int (*save)(mt_context *ctx, void *user, mt_checkpoint *ck);
    int (*load)(mt_context *ctx, void *user, const mt_checkpoint *ck);
    void (*cleanup)(mt_context *ctx, void *user);
    int64_t max_iterations;
} mt_trainable;

/* Local. A trainer that runs the trainable tr (copied) with user (borrowed: it must
 * outlive fit) on every rank; cfg is copied as by mt_trainer_create. MT_EINVAL naming each
 * problem (tr NULL, step, save or load NULL, max_iterations < 0). Fit, datasets, the
 * result and mt_trainer_destroy work as for a training function. */
MT_EXTERN int mt_trainer_create_trainable(mt_trainer **out, const mt_trainable *tr,
                                          void *user, const mt_trainer_config *cfg);

/* Local. The training_iteration of the last report of this run, counted across attempts
 * and resumes (0 before the first): the next report is number mt_training_iteration + 1. */
MT_EXTERN int64_t mt_training_iteration(const mt_context *c);

/* ---------------------------------------------------------------- environment
 *
 * Before the training function (or a trainable's setup) runs, fit sets for code that
 * reads them, as torchrun does: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
 * NODE_RANK and GROUP_RANK (the node rank), replacing any value they had; and
 * OMP_NUM_THREADS, OPENBLAS_NUM_THREADS and MKL_NUM_THREADS to mt_num_cpus (the CPUs of
 * the rank's affinity mask), each unless the user set it. MASTER_ADDR and MASTER_PORT
 * are not set: nothing listens there; code that needs the ranks' group uses mt_comm().
 * OpenBLAS and GNU OpenMP read their variable once, when the program loads them (before
 * main): for those call openblas_set_num_threads(mt_num_cpus(ctx)) or
 * omp_set_num_threads in the training function (tools/trainer.c does); the variables
 * reach libraries loaded later, child processes, and libraries that read them at first
 * use.
 */

/* ---------------------------------------------------------------- for programs
 *
 * What a training program needs around the library, with the library's rules: its own
 * options as strict numbers, and its data in the dataset layout.
 */

/* Local. A number from a program's option: the whole text, decimal, in [min, max] ("1e3"
 * and "3.5" are numbers only for mt_parse_f64, which refuses nan and inf; mt_parse_u64
 * refuses a sign). MT_EINVAL naming what, the text and the rule ("--epochs: '4294967297'
 * is not an integer from 1 to 1000000"); *out is untouched then. */
MT_EXTERN int mt_parse_i64(const char *what, const char *text, int64_t min, int64_t max,
                           int64_t *out);
MT_EXTERN int mt_parse_u64(const char *what, const char *text, uint64_t min, uint64_t max,
                           uint64_t *out);
MT_EXTERN int mt_parse_f64(const char *what, const char *text, double min, double max,
                           double *out);

/* Local. IDX files (gzip-compressed or plain; images N x ..., labels N) written as GROUP
 * of the HDF5 file out_file in the dataset layout (columns x and y), as `mpitrain-import
 * idx` does; an existing file gets a new group, an existing group is refused. labels may be
 * NULL. MT_EFORMAT for a file whose header lies, naming it. */
MT_EXTERN int mt_import_idx(const char *images, const char *labels, const char *out_file,
                            const char *group);

#ifdef __cplusplus
}
#endif
#endif /* MPITRAIN_H */
