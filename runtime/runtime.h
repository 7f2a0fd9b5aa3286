/*
 * runtime.h -- the runtime layer's internal interface: contexts, config resolution, the
 * trainer. Sits on collectives/ and io/.
 */
#ifndef MT_RUNTIME_H
#define MT_RUNTIME_H

#include "../collectives/collectives.h"
#include "../io/io.h"

#include <pthread.h>
#include <jansson.h>
#include <signal.h>

#define MT__NAME_MAX 200
/* Longest storage path or run directory: every path made under it (checkpoint folders,
 * rank folders, file names of MT__NAME_MAX bytes) stays under PATH_MAX, so no snprintf'd
 * path is ever cut short into a different one. */
#define MT__DIR_MAX 3500

typedef struct {
    char *name, *file, *group;
} mt__dataset_spec;

/* ------------------------------------------------------------ metrics */
enum { MT__METRIC_F64 = 1, MT__METRIC_I64, MT__METRIC_STR };
typedef struct {
    char *key;
    size_t klen; /* strlen(key) */
    int type;
    double f;
    int64_t i;
    char *s;
} mt__metric;
struct mt_metrics {
    mt__metric *e;
    int n;
    size_t cap;
    bool reserved_seen; /* a reserved key was ever put (only the library can): until
                           then mt__metrics_check_user has nothing to look for */
    uint64_t keys_id;   /* a number no other key set of any metrics had: a new one at
                           every change of the keys (a key added, the keys cleared, one
                           turned from a number to a string or back); never 0 */
};
const mt__metric *mt__metrics_find(const mt_metrics *m, const char *key);
/* Set a metric of `type`; user=false lets the library set the reserved automatic keys
 * (training_iteration, timestamp, ...) that the public setters refuse. */
int mt__metrics_put(mt_metrics *m, const char *key, int type, double f, int64_t i,
                    const char *str, bool user);
bool mt__metrics_reserved(const char *key);
/* MT_EINVAL naming the first reserved key in m (mt_report's check), else MT_OK. */
int mt__metrics_check_user(const mt_metrics *m);
void mt__metrics_clear(mt_metrics *m);
int mt__metrics_copy(mt_metrics *dst, const mt_metrics *src);
int mt__metrics_encode(const mt_metrics *m, char **out, size_t *len);
/* The encoding's length, and the encoding written to p (that many bytes). */
size_t mt__metrics_encoded_len(const mt_metrics *m);
void mt__metrics_encode_to(const mt_metrics *m, char *p);
/* Only the values (and numeric types) of m into p, an encoding made by
 * mt__metrics_encode_to when m had the same keys_id and no string metric. */
void mt__metrics_encode_values(const mt_metrics *m, char *p);
int mt__metrics_decode(mt_metrics *m, const char *b, size_t len);
json_t *mt__metrics_to_json(const mt_metrics *m);
/* The numbers and strings of a JSON object (a result.json row, run.json's metrics); keys
 * no metric can have (empty, over 255 bytes, control characters: a hand-edited file) and
 * other values are passed over. MT_ENOMEM when out of memory. */
int mt__metrics_from_json(mt_metrics *m, const json_t *o);

/* ------------------------------------------------------------ epoch plans (plan.c) */
/* Which rows of a dataset of n rows, in blocks of B, a rank reads in an epoch: positions
 * [base, base + rows) of the epoch's order of blocks. A few words, whatever n. */
typedef struct {
    int64_t n, B, nblocks, last_len, short_place, base, rows;
    bool shuffle;
    int half_bits;
    uint64_t key;
} mt__plan;
void mt__plan_make(mt__plan *p, int64_t n, int64_t B, bool shuffle, uint64_t seed, int epoch,
                   int64_t base, int64_t rows);
/* The file's runs holding this rank's positions [lo, hi), sorted and merged (the caller
 * frees *out); MT_ENOMEM naming the dataset. Time and memory in the blocks they span. */
int mt__plan_runs(const mt__plan *p, int64_t lo, int64_t hi, mt__run **out, int *nout,
                  const char *name);

/* ------------------------------------------------------------ per-rank statistics */
/* The layout of a report's statistics, agreed at the report where rank 0's keys last
 * changed and kept on every rank (spread.c). */
typedef struct {
    bool valid;
    int nkeys;
    const char **key;      /* rank 0's numeric keys, in its order */
    int *map;              /* key k: its index in this rank's metrics, -1 when absent */
    double *quads;         /* {min, max, sum, n} per key */
    char *seen;            /* this rank's keys that map was made for (spread.c) */
    uint64_t seen_id;      /* the keys_id of the metrics last found to have them */
    char *block;           /* owns key, map, quads and the keys' text */
} mt__spread;
/* One report's part: what the opening agreement carries, and whether the result is in. */
typedef struct {
    int64_t layout_len;    /* rank 0, when its keys changed: the new layout's length */
    bool fold;             /* the statistics travel in the opening agreement */
    bool ready;            /* rank 0's quads hold every rank's statistics */
    mt__payload payload;
    double triples[MT__AGREE_PAYLOAD / sizeof(double)]; /* 7 or 8 keys: {min, max, sum} */
} mt__spread_step;
/* Before the opening agreement (local): st's fields for it. */
void mt__spread_open(mt_context *c, const mt_metrics *m, mt__spread_step *st);
/* After an OK opening agreement (collective): len is the agreed layout length (0: the
 * layout stays); the layout sent when it changed, the statistics reduced unless they
 * came with the agreement. */
int mt__spread_finish(mt_context *c, const mt_metrics *m, mt__spread_step *st, int64_t len);
/* Rank 0: "per_rank" added to row from the statistics (nothing at 1 rank). */
int mt__spread_json(mt_context *c, const mt__spread_step *st, json_t *row);
/* The same from its parts: row's "per_rank" from nkeys keys and their quads (min, max,
 * sum, ranks), each printed at verbose >= 2. */
int mt__spread_put(json_t *row, const char *const *keys, const double *quads, int nkeys,
                   int verbose);
void mt__spread_free(mt__spread *s);

/* ------------------------------------------------------------ run directory (rank 0) */
typedef struct {
    char name[32];           /* checkpoint_000012 */
    int64_t index, iteration;
    mt_metrics *metrics;     /* reported with it */
} mt__kept;
typedef struct {
    char *dir;
    char run_id[33];         /* 32 hex digits, made with the run; "" in an older run.json */
    char status[16];         /* running, finished, failed, preempted */
    int attempts, failures;
    int64_t next_index, iteration;
    double time_total;       /* of earlier attempts */
    mt__kept *kept;
    size_t kept_cap;         /* kept's capacity (MT__GROW) */
    int nkept, latest;       /* latest: index into kept, or -1 */
    char **csv_keys;         /* progress.csv's header */
    int ncsv;
    size_t csv_cap;
    FILE *result, *csv;
    pthread_t reaper;        /* removing checkpoints retention dropped */
    bool reaping;
    struct mt__rowlog *rows; /* the row writer (rowlog.c), from the first report */
    bool rows_unthreaded;    /* its thread could not start: mt_report writes the rows */
} mt__rundir;
/* jansson helpers (json.c). mt__json_dumps: json_dumps, checked by parsing the text back:
 * out of memory, jansson's dump can leave an object key out and still return text. NULL
 * when the text is not the document. */
char *mt__json_dumps(const json_t *j, size_t flags);
/* Call mt__json_watch before a json_load*; after it failed, mt__json_oom says whether it
 * ran out of memory (rather than met bad JSON). */
void mt__json_watch(void);
bool mt__json_oom(const json_error_t *e);
/* One line of a JSON-lines file (result.json); NULL for a line that is not JSON (skipped by
 * the readers), and *oom set when parsing it ran out of memory (never skipped: a row
 * would go missing). */
json_t *mt__json_parse_line(const char *line, bool *oom);

/* run.json (runstate.c); mt__run_free also waits for the reaper and closes the logs. */
void mt__run_free(mt__rundir *r);
json_t *mt__run_to_json(const mt__rundir *r);
int mt__run_from_json(mt__rundir *r, const json_t *j, const char *where);
int mt__run_load(mt__rundir *r, const char *dir);
int mt__run_save(const mt__rundir *r);
/* A new run's identity (random, 32 hex digits) in r->run_id: every checkpoint of the run
 * carries it (metadata mt.run), so a checkpoint of another run put in its folder is told
 * apart at restore. */
void mt__run_new_id(mt__rundir *r);

/* result.json (rows.c): open (and learn progress.csv's header), close, append a row (then
 * its progress.csv row). */
int mt__run_open_logs(mt__rundir *r);
void mt__run_close_logs(mt__rundir *r);
int mt__run_append(mt__rundir *r, json_t *row);
/* dir/result.json's rows as a JSON array, in order, without per_rank; a line that is not
 * a JSON object and a torn last line (no newline) are each its line number (a JSON
 * integer, from 1) in its place: not a row, never passed over in silence (the result
 * counts them). An empty array when there is no result.json; NULL with *rc set
 * (MT_ENOMEM, MT_EIO: a link in its place too) when it cannot be read whole. */
json_t *mt__run_read_rows(const char *dir, int *rc);
int mt__run_supersede(mt__rundir *r, int64_t iteration);
/* On resume, before anything reads or appends to them: cut a torn last line (no newline)
 * of result.json, progress.csv and result.superseded.json; *last_iteration is the highest
 * training_iteration of result.json's rows (0 when it has none, -1 when there is no
 * result.json). r->time_total becomes at least the highest time_total_s of those rows (a
 * crashed attempt's time). */
int mt__run_repair_logs(mt__rundir *r, int64_t *last_iteration);

/* The row writer (rowlog.c, rank 0). A report's automatic values, taken at the report. */
typedef struct {
    int64_t iteration, since_restore;
    double stamp, this_iter, total;
} mt__row_auto;
/* Rows not written: the first failure's code and text, the iterations left out. */
typedef struct {
    int code;
    char msg[MT__MSG_LEN];
    int64_t first, last, missing;
} mt__row_failure;
/* The automatic keys put in the row's metrics m and its JSON j (ckname: the checkpoint's
 * folder, or NULL); MT_ENOMEM. */
int mt__row_add_auto(mt_metrics *m, json_t *j, const mt__row_auto *a, const char *ckname);
/* The progress line of a row (verbose >= 1). */
void mt__row_print(const mt_metrics *m, int64_t iteration, const char *ckname);
/* Rank 0, a report without a checkpoint, before its opening agreement: the writer
 * started (at the first report) and the row's record allocated with m encoded, so that
 * running out of memory is this report's error (MT_ENOMEM); slot stays empty when rows
 * are written by mt_report (the thread could not start). After the agreement: the row
 * queued with its automatic values and nkeys quads of per-rank statistics (0: none), or
 * written at once without a thread, a failure kept for mt__rows_settle (a later
 * report's); or the slot released when the report failed. */
typedef struct {
    struct mt__row_rec *r;
} mt__row_slot;
int mt__rows_reserve(mt_context *c, const mt_metrics *m, mt__row_slot *slot);
void mt__rows_queue(mt_context *c, mt__row_slot *slot, const mt_metrics *m,
                    const mt__row_auto *a, const double *quads, int nkeys);
void mt__rows_release(mt__row_slot *slot);
/* Rank 0 (a no-op elsewhere): the writer's first failure since the last call, as this
 * thread's error (MT_OK: none); with wait, once every queued row is written, and the last
 * row written becomes c->last_metrics. */
int mt__rows_settle(mt_context *c, bool wait);
/* Test only (test_mpi_report): holds rank 0's writer at two points of its next batch, so
 * that a test can place reports between them. Set 1: the writer stops after writing the
 * batch's rows, before their failure is recorded (still busy), and shows 2; set 3: it
 * records it, stops once no longer busy (its queue's lock released) and shows 4; set 0:
 * it goes on. mt__rows_test_held: the point shown. */
void mt__rows_test_hold(int stage);
int mt__rows_test_held(void);
/* The writer's thread ended, the rows still queued written first (mt__run_close_logs). */
void mt__rows_stop(mt__rundir *run);

/* progress.csv (progress.c): learn the header from result.json's rows (on resume), write
 * the whole file again from result.json under it, append one row (rewriting when the row
 * brings a new key), close it. */
int mt__csv_learn(mt__rundir *r);
int mt__csv_rewrite(mt__rundir *r);
int mt__csv_append(mt__rundir *r, json_t *row);
void mt__csv_close(mt__rundir *r);

/* The owner (rundir.c). Rank 0, before anything else in dir is read or written: an
 * exclusive flock on dir/run.lock, held until mt__run_unlock (or the process's death).
 * MT_EINVAL naming the holder when another job has it; *fd is -1 when the file system has
 * no locks (warned). */
int mt__run_lock(const char *dir, int *fd);
void mt__run_unlock(int *fd);
/* Remove everything in dir except run.lock. */
int mt__run_clear(const char *dir);
void mt__run_remove_leftovers(const mt__rundir *r);

/* The reaper (reaper.c), retention's drops: each checkpoint folder is renamed to
 * .NAME.drop at once (run.json no longer lists it), then removed by a thread while
 * training goes on; the next drop, and mt__run_free, wait for it. A crash leaves .drop
 * folders that the next start removes. */
int mt__run_drop(mt__rundir *r, const char *const *names, int n);
void mt__run_reap_wait(mt__rundir *r);

/* Retention: which kept checkpoints to delete now (Ray Train's rules; see docs/design.md).
 * Fills drop[i] for each kept entry; MT_ENOMEM (none dropped) when out of memory. */
int mt__retention(const mt__kept *kept, int n, int latest, const mt_checkpoint_config *cfg,
                  bool *drop);

/* Positions of kept entries, best first (newest first without a score attribute);
 * MT_ENOMEM when out of memory. */
int mt__rank_kept(const mt__kept *kept, int n, const mt_checkpoint_config *cfg, int *order);

/* ------------------------------------------------------------ results */
/* Build a result from run.json, the last reported row (may be NULL), the history (a JSON
 * array of result.json rows, may be NULL), descriptions of kept checkpoints (an object
 * name -> mt__checkpoint_describe text, may be NULL: then they are opened when
 * open_files, else known by path only) and params.json's checkpoint settings; error may
 * be NULL. */
int mt__result_build(const char *dir, const json_t *run_json, const json_t *last_row,
                     const json_t *rows, const json_t *described, const json_t *params,
                     const char *error, bool open_files, mt_result **out);
json_t *mt__params_json(const mt_trainer_config *cfg, int world_size);

/* ------------------------------------------------------------ checkpoints */
/* mt_checkpoint is opaque to the runtime outside checkpoint*.c (runtime/checkpoint.h):
 * one being built, or one stored on disk and read back. */
/* Rank 0 in *name; collective over c (the caller ends it with an agreement). */
int mt__checkpoint_commit(mt_context *c, const mt_checkpoint *ck, mt__rundir *run,
                          const mt_metrics *metrics, int64_t iteration, char *name, size_t len,
                          bool *agreed);
/* What every commit stamps into a checkpoint (metadata; the library's, whatever the
 * checkpoint's own holds under these keys): the run's identity, the checkpoint's folder
 * name and its training_iteration. Restore compares them with run.json's entry; a
 * checkpoint without them (written before they existed) is checked by its checksums only. */
#define MT__META_RUN "mt.run"
#define MT__META_NAME "mt.checkpoint"
#define MT__META_ITERATION "mt.iteration"
/* Rank 0: the newest kept checkpoint that opens and passes its checksums (warning about,
 * and forgetting, any that do not; the folders stay), that belongs where run.json has it
 * (its mt.run, mt.checkpoint and mt.iteration, and a trainable's mt.training_iteration,
 * where present, are this run's, this folder's and this entry's: a checkpoint copied over
 * another, or from another run, is skipped like a damaged one), and whose report row is in
 * result.json (training_iteration <= max_iteration: a crash between the commit and the
 * row leaves a checkpoint ahead of the log); its position in run->kept in *picked, or -1.
 * MT_ENOMEM (nothing forgotten) when it cannot tell. */
int mt__checkpoint_pick_valid(mt__rundir *run, int64_t max_iteration, int *picked);
/* A stored checkpoint's description as JSON text (for the trip to other ranks), and back
 * (a stored checkpoint, read locally until mt__checkpoint_restoring binds it). NULL when
 * out of memory (the caller records it) or, recorded, when ck is being built. */
char *mt__checkpoint_describe(const mt_checkpoint *ck);
int mt__checkpoint_from_description(const char *text, mt_checkpoint **out);
/* Local: the stored checkpoint in folder path (its index; files are not listed). */
int mt__checkpoint_open_stored(const char *path, mt_checkpoint **out);
/* A stored checkpoint known by its folder only (no arrays or metadata: its files could not
 * be read here); MT_ENOMEM, *out NULL, when out of memory. */
int mt__checkpoint_path_only(const char *path, mt_checkpoint **out);
/* The stored checkpoint a fit resumes from, bound to its context c: mt_checkpoint_get
 * on it is collective over c from now on (every other stored checkpoint reads locally). */
void mt__checkpoint_restoring(mt_checkpoint *ck, mt_context *c);
/* A user-given checkpoint path (field names it in errors) made absolute, symbolic links
 * resolved, into out (len bytes); MT_EINVAL when empty or too long, MT_EFORMAT naming the
 * path when it does not exist. */
int mt__checkpoint_resolve(const char *field, const char *path, char *out, size_t len);

/* ------------------------------------------------------------ stop requests */
void mt__signals_install(void);
void mt__signals_restore(void);
bool mt__stop_signalled(void);

struct mt_context {
    mt__comm *comm;
    int verbose;
    mt_data_config data;          /* borrowed from the trainer */
    const mt__dataset_spec *specs; /* borrowed from the trainer */
    int nspecs;
    mt_shard **shards;            /* opened by mt_get_dataset_shard, closed with the context */
    size_t shards_cap;
    char *ck_buf;                 /* rank 0's checkpoint staging buffer, kept across commits:
                                     fresh pages cost a fault each, on some machines more
                                     than the copy itself */
    struct mt__ck_async *ck_async; /* asynchronous commits: the thread's communicator, the
                                     staging memory, the commit in flight (checkpoint_async.c) */
    int nshards;
    int world_size, world_rank;
    mt__topology topo;
    int num_cpus;
    int attempt;
    char *name;
    char *run_dir;
    /* reporting */
    mt__rundir *run;                  /* rank 0 */
    const mt_trainer_config *cfg;  /* the trainer's */
    int64_t reports;               /* reports in this attempt */
    bool no_retry;                 /* this rank found bad input a retry would repeat */
    int64_t iteration;             /* training_iteration of the last report */
    int64_t total_iterations;      /* announced by mt_set_total_iterations (at_end) */
    double start, last_report, time_before;
    double wall_minus_mono, wall_read; /* report.c's timestamps: the wall clock's lead on
                                          mt__now(), and when it was last read */
    bool stop;                     /* a stop was requested (agreed) */
    bool stopped_after_ckpt;
    mt_checkpoint *restored;       /* the checkpoint this attempt resumed from */
    bool restored_foreign;         /* restored is run.resume_from_checkpoint's, not the run's */
    mt_metrics *last_metrics;      /* rank 0's last report, with automatic keys (rank 0) */
    mt__row_failure row_failed;    /* a row rank 0 could not queue or write (rowlog.c) */
    mt__spread spread;             /* the per-rank statistics' layout (spread.c) */
    mt_fusion **fusions;           /* made on this context: orphaned when it ends */
    int nfusions;
    size_t fusions_cap;
};

/* ---- job.c: the process-wide job */
/* The job's world: MPI_COMM_WORLD, or parent and children merged in spawn mode. */
MPI_Comm mt__world(void);
/* Spawn mode: from a singleton, start workers-1 copies of this program (collective with
 * them); a no-op under a launcher. Spawned ranks that do not all start within timeout_s
 * end the job (MT_EXIT_STALLED); a rank that dies ends it (MT_EXIT_LOST). */
int mt__spawn(int workers, double timeout_s);
/* mt_trainer_fit is running in this process; _enter and _leave bracket a fit. */
bool mt__fit_running(void);
void mt__fit_enter(void);
void mt__fit_leave(void);
/* CPUs in the calling thread's affinity mask (1 when it cannot be read). */
int mt__affinity_cpus(char *list, size_t list_len);

/* ---- resume.c (rank 0, local) */
/* run.resume_from_checkpoint (from): a checkpoint folder, or a run directory whose latest
 * checkpoint it means; dir gets the folder, *stored the checkpoint (owned). MT_EFORMAT
 * naming from when it is neither. */
int mt__resume_open(const char *from, char *dir, size_t len, mt_checkpoint **stored);
/* Where this attempt starts (the latest good checkpoint, else from), the reports after it
 * moved aside; *out the JSON the other ranks need. */
int mt__resume_point(mt__rundir *run, const mt_run_config *cfg, json_t **out);

/* ---- context.c: one fit's context */
/* Collective over world: a context with a private communicator and the topology. */
int mt__context_create(mt_context **out, MPI_Comm world);
/* What the layers above hung on c (shards, the checkpoint buffer) is theirs to release
 * first (the fit does). */
void mt__context_destroy(mt_context **c);
/* c is a context a fit is running now (contexts end when fit returns); otherwise records
 * MT_EINVAL naming fn and returns false. Never reads *c unless it is live. */
bool mt__ctx_ok(const mt_context *c, const char *fn);
/* Make c the calling thread's current context (NULL to clear). */
void mt__context_set_current(mt_context *c);

/* Close every shard the context opened (collective: HDF5 closes files collectively). */
void mt__shards_close(mt_context *c);
/* Waits for an asynchronous commit in flight first; then frees the staging buffers and
 * the commit thread's communicator (every rank, at the end of fit). */
void mt__checkpoint_release(mt_context *c);
/* Local. An asynchronous commit in flight (run.checkpoint.async_commit): with wait, waits
 * for it (the stall watchdog sees the wait), else only looks whether it ended; a commit
 * that ended in failure is returned once (its message recorded), else MT_OK. Called by
 * mt_report before its agreement (waiting when it carries a checkpoint) and at the end of
 * each attempt, so the failure becomes every rank's at that agreement. */
int mt__checkpoint_settle(mt_context *c, bool wait);

/* The command line's options (config.c): how many, and option i's name with its value in
 * cfg as text in buf (NULL for one that may differ between ranks: help, verbose, trace,
 * name). */
size_t mt__config_nfields(void);
const char *mt__config_field(const mt_trainer_config *cfg, size_t i, char *buf, size_t len);

/* Local. Every environment knob parses and is in range; MT_EINVAL listing the bad ones. */
int mt__env_validate(void);

/* $HOME/mpitrain_results (or ./mpitrain_results without HOME). */
const char *mt__default_storage_path(void);

/* ------------------------------------------------------------ trainables, environment */
/* A trainer that owns its argument: free_arg(arg) runs at mt_trainer_destroy. */
void mt__trainer_own_arg(mt_trainer *t, void (*free_arg)(void *));
/* Local. RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK, GROUP_RANK from c, and
 * the thread-count variables from mt_num_cpus unless the user set them (environ.c). */
void mt__export_env(const mt_context *c);

#endif
