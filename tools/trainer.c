/*
 * trainer -- the example job: a data-parallel MLP classifier (784-256-128-10, ReLU,
 * softmax cross-entropy, SGD with momentum and weight decay) on Fashion-MNIST.
 *
 *   mpirun -np 2 ./trainer                 # or: ./trainer --num-workers 2
 *
 * Each rank reads its shard of /train through parallel HDF5, computes gradients with
 * OpenBLAS, and averages them with mt_fusion: the buckets of the last layers start while
 * the first layers' backward pass still runs. After each epoch the test set (split across
 * ranks) is scored, the counts combined with mt_allreduce, and one mt_report carries the
 * metrics and, as --checkpoint-frequency says, a checkpoint of weights, momentum buffers
 * and the epoch. A resumed run continues from the checkpoint's epoch and, at the same
 * world size and seed, reaches the same final weights as an uninterrupted run.
 *
 * Exit status: 0 done, 1 failed, 75 preempted (rerun to resume), 76 stalled (the job
 * aborted), 2 bad usage.
 */
#include <mpitrain.h>

#include "mlp.h"

#include <cblas.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    const char *data;
    double lr, momentum, weight_decay;
    int epochs, batch, threads, steps;
    uint64_t seed;
    int fail_rank, fail_epoch; /* fault injection for tests: return an error there */
    mt_fusion_options fusion;  /* --fusion-compression, --fusion-algo */
} options;

/* Cosine decay of the learning rate over the epochs. */
static double lr_at(const options *o, int epoch)
{
    return o->lr * 0.5 * (1 + cos(M_PI * epoch / o->epochs));
}

/* ------------------------------------------------------------ checkpoints */

static const char *pname(const char *kind, int l)
{
    static char buf[8][16];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s%d", kind, l);
    return buf[k];
}

static mt_checkpoint *save(model *m, int64_t *epoch)
{
    mt_checkpoint *ck = mt_checkpoint_new();
    for (int l = 0; ck && l < NL; l++) {
        size_t wd[2] = {(size_t)mlp_sizes[l + 1], (size_t)mlp_sizes[l]}, bd[1] = {(size_t)mlp_sizes[l + 1]};
        mt_checkpoint_put(ck, pname("w", l), MT_F32, 2, wd, m->w[l], MT_REPLICATED);
        mt_checkpoint_put(ck, pname("b", l), MT_F32, 1, bd, m->b[l], MT_REPLICATED);
        mt_checkpoint_put(ck, pname("vw", l), MT_F32, 2, wd, m->vw[l], MT_REPLICATED);
        mt_checkpoint_put(ck, pname("vb", l), MT_F32, 1, bd, m->vb[l], MT_REPLICATED);
    }
    if (ck)
        mt_checkpoint_put(ck, "epoch", MT_I64, 1, (size_t[]){1}, epoch, MT_REPLICATED);
    if (ck)
        mt_checkpoint_set_meta(ck, "model", "mlp-784-256-128-10");
    return ck;
}

static int restore(const mt_checkpoint *ck, model *m, int64_t *epoch)
{
    int rc = MT_OK;
    for (int l = 0; l < NL && !rc; l++) {
        size_t o = (size_t)mlp_sizes[l + 1];
        rc = mt_checkpoint_get(ck, pname("w", l), MT_F32, m->w[l], mlp_wsize(l));
        if (!rc)
            rc = mt_checkpoint_get(ck, pname("b", l), MT_F32, m->b[l], o);
        if (!rc)
            rc = mt_checkpoint_get(ck, pname("vw", l), MT_F32, m->vw[l], mlp_wsize(l));
        if (!rc)
            rc = mt_checkpoint_get(ck, pname("vb", l), MT_F32, m->vb[l], o);
    }
    if (!rc)
        rc = mt_checkpoint_get(ck, "epoch", MT_I64, epoch, 1);
    return rc;
}

/* ------------------------------------------------------------ training */

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return mt_set_error(MT_EINVAL, msg);
}

static const char *dtype_name(mt_dtype t)
{
    return t == MT_U8 ? "uint8" : t == MT_I32 ? "int32" : t == MT_I64 ? "int64"
           : t == MT_F32 ? "float32" : t == MT_F64 ? "float64" : "another type";
}

/* The columns the model reads, checked before any batch is (the same verdict on every
 * rank: the shape and dtype are the file's): x N x 28 x 28 (or N x 784) uint8, y N integer
 * labels. */
static int check_columns(mt_shard *s, const char *file, const char *group)
{
    int nd = 0;
    size_t d[8];
    mt_dtype t;
    int rc = mt_shard_column_shape(s, "x", &nd, d, &t);
    size_t per = 1;
    for (int i = 1; !rc && i < nd; i++)
        per *= d[i];
    if (!rc && (nd < 2 || per != 784 || t != MT_U8))
        return fail("%s:%s/x: the model reads rows of 28 x 28 = 784 uint8 "
                            "pixels (N x 28 x 28 or N x 784 uint8), and x is %s with %zu "
                            "values a row", file, group, dtype_name(t), nd < 2 ? (size_t)1 : per);
    if (!rc)
        rc = mt_shard_column_shape(s, "y", &nd, d, &t);
    if (!rc && (nd != 1 || (t != MT_U8 && t != MT_I32 && t != MT_I64)))
        return fail("%s:%s/y: labels are one integer a row (N of uint8, "
                            "int32 or int64, 0 to 9), and y is %s of %d dimension%s", file,
                            group, dtype_name(t), nd, nd == 1 ? "" : "s");
    if (!rc && t != MT_U8) /* read whole, so that a label out of range is seen, not cut */
        rc = mt_shard_set_column_dtype(s, "y", MT_I64);
    return rc;
}

/* The batch's labels as bytes, each checked (read as int64: a stored label out of range
 * is seen, not saturated into one). */
static uint8_t *labels_buf;
static size_t labels_cap;

static const uint8_t *batch_labels(const mt_batch *b, size_t n)
{
    const int64_t *y = mt_batch_column(b, "y", MT_I64);
    if (!y)
        return NULL;
    if (n > labels_cap) {
        uint8_t *grown = realloc(labels_buf, n);
        if (!grown)
            return NULL;
        labels_buf = grown;
        labels_cap = n;
    }
    for (size_t r = 0; r < n; r++) {
        if (y[r] < 0 || y[r] > 9) {
            fail("dataset column y: label %lld in a batch's row %zu (labels are 0 to 9)",
                 (long long)y[r], r);
            return NULL;
        }
        labels_buf[r] = (uint8_t)y[r];
    }
    return labels_buf;
}

static int load_batch(model *m, const mt_batch *b, const uint8_t **labels)
{
    int n = (int)mt_batch_rows(b);
    const uint8_t *x = mt_batch_column(b, "x", MT_U8);
    *labels = batch_labels(b, (size_t)n);
    if (!x || !*labels || mlp_reserve(m, (size_t)n))
        return -1;
    for (size_t i = 0; i < (size_t)n * 784; i++)
        m->act[0][i] = (float)x[i] * (1.0f / 255.0f);
    return n;
}

static int evaluate(mt_context *c, model *m, mt_shard *test, double *acc)
{
    mt_iter_options o = {.batch_size = 500};
    int rc = mt_shard_begin_epoch(test, 0, &o);
    const mt_batch *b;
    int64_t counts[2] = {0, 0}; /* correct, seen */
    int got = 0;
    while (!rc && (got = mt_shard_next(test, &b)) == 1) {
        const uint8_t *y;
        int n = load_batch(m, b, &y);
        if (n < 0)
            return MT_EINVAL;
        mlp_forward(m, n);
        for (int r = 0; r < n; r++) {
            const float *p = m->act[NL] + (size_t)r * 10;
            int best = 0;
            for (int k = 1; k < 10; k++)
                best = p[k] > p[best] ? k : best;
            counts[0] += best == y[r];
        }
        counts[1] += n;
    }
    if (!rc && got < 0)
        rc = got;
    if (!rc)
        rc = mt_allreduce(c, counts, 2, MT_I64, MT_SUM);
    *acc = counts[1] ? (double)counts[0] / (double)counts[1] : 0;
    return rc;
}

typedef struct {
    options o;
    double final_acc, best_acc;
    int epochs_run;
} job;

static int train(mt_context *c, void *arg)
{
    job *j = arg;
    const options *o = &j->o;
    int rank = mt_world_rank(c), P = mt_world_size(c);
    openblas_set_num_threads(o->threads > 0 ? o->threads : mt_num_cpus(c));
    mt_shard *tr = NULL, *te = NULL;
    int rc = mt_get_dataset_shard(c, "train", &tr);
    if (!rc)
        rc = mt_get_dataset_shard(c, "test", &te);
    if (!rc)
        rc = check_columns(tr, o->data, "/train");
    if (!rc)
        rc = check_columns(te, o->data, "/test");
    if (!rc && mt_shard_rows(tr) < o->batch)
        rc = fail("%s:/train: %lld rows a rank, fewer than one batch of %d "
                          "(an epoch would train nothing): give a smaller --batch-size",
                          o->data, (long long)mt_shard_rows(tr), o->batch);
    if (rc)
        return rc;
    /* the fusion first: the model's gradients live in its memory (the node's shared
     * segment on one node, where they are averaged without a copy) */
    mt_fusion *f = NULL;
    float *grad = NULL;
    model m;
    memset(&m, 0, sizeof m);
    /* one bucket, averaged in the wait after backward; with MT_OVERLAP=1 a bucket per
     * layer and per row block of the first layer (mlp.h), so that averaging overlaps the
     * backward pass (mlp_overlap says why it is not the default); MT_FUSION_BYTES, when
     * set, decides the size instead */
    bool overlap = mlp_overlap(c);
    mt_fusion_options fo = o->fusion;
    if (!getenv("MT_FUSION_BYTES"))
        fo.bucket_bytes = overlap ? mlp_bucket_bytes(&m) : 0;
    rc = mt_fusion_create_opts(c, &fo, &f);
    if (!rc)
        rc = mt_fusion_alloc(f, mlp_grad_count(), &grad);
    if (!rc)
        rc = mlp_init(&m, o->seed, grad);
    int64_t epoch = -1;
    const mt_checkpoint *ck = mt_get_checkpoint(c);
    if (!rc && ck) {
        rc = restore(ck, &m, &epoch);
        if (!rc && rank == 0)
            printf("trainer: resumed from %s (epoch %lld done)\n", mt_checkpoint_path(ck),
                   (long long)epoch + 1);
    }
    int idx[MLP_TENSORS];
    if (!rc)
        rc = mlp_register(&m, f, idx);
    mt_set_total_iterations(c, o->epochs);
    mt_iter_options it = {.batch_size = (size_t)o->batch, .shuffle = true, .seed = o->seed,
                          .drop_last = true};
    for (int e = (int)epoch + 1; e < o->epochs && !rc; e++) {
        double t_data = 0, t_comp = 0, t_comm = 0, loss_sum = 0, t0 = MPI_Wtime(), t;
        int64_t samples = 0, steps = 0;
        rc = mt_shard_begin_epoch(tr, e, &it);
        const mt_batch *b;
        int got = 0;
        for (;;) {
            t = MPI_Wtime();
            if (rc || (got = mt_shard_next(tr, &b)) != 1)
                break;
            if (o->steps > 0 && steps >= o->steps)
                continue; /* --steps-per-epoch: drain the epoch without training */
            const uint8_t *y;
            int n = load_batch(&m, b, &y);
            t_data += MPI_Wtime() - t;
            if (n < 0) {
                rc = MT_EINVAL;
                break;
            }
            t = MPI_Wtime();
            mlp_forward(&m, n);
            loss_sum += mlp_backward(&m, n, y, overlap ? f : NULL, idx);
            double tc = MPI_Wtime();
            t_comp += tc - t;
            rc = mt_fusion_wait(f);
            t_comm += MPI_Wtime() - tc;
            t = MPI_Wtime();
            mlp_sgd(&m, lr_at(o, e), o->momentum, o->weight_decay);
            t_comp += MPI_Wtime() - t;
            samples += n;
            steps++;
        }
        if (!rc && got < 0)
            rc = got;
        if (!rc && e == o->fail_epoch && rank == o->fail_rank && mt_attempt(c) == 0)
            rc = MT_EIO, fprintf(stderr, "trainer: rank %d: injected failure in epoch %d\n", rank, e);
        double secs = MPI_Wtime() - t0, acc = 0;
        if (!rc)
            rc = evaluate(c, &m, te, &acc);
        if (rc)
            break;
        double loss = steps ? loss_sum / (double)steps : 0;
        mt_metrics *mm = mt_metrics_new();
        mt_metrics_set_i64(mm, "epoch", e);
        mt_metrics_set_f64(mm, "train_loss", loss);
        mt_metrics_set_f64(mm, "test_acc", acc);
        mt_metrics_set_f64(mm, "lr", lr_at(o, e));
        mt_metrics_set_f64(mm, "samples_per_s", (double)samples / secs);
        mt_metrics_set_f64(mm, "time_compute_s", t_comp);
        mt_metrics_set_f64(mm, "time_comm_s", t_comm);
        mt_metrics_set_f64(mm, "time_data_s", t_data);
        mt_metrics_set_i64(mm, "world_size", P);
        mt_metrics_set_str(mm, "fusion_algo", mt_fusion_algo_name(f));
        mt_metrics_set_str(mm, "fusion_compression", mt_fusion_compression_name(f));
        int64_t ep = e;
        mt_checkpoint *save_ck = mt_should_checkpoint(c) ? save(&m, &ep) : NULL;
        rc = mt_report(c, mm, save_ck);
        mt_checkpoint_free(&save_ck);
        mt_metrics_free(&mm);
        j->final_acc = acc;
        j->best_acc = fmax(j->best_acc, acc);
        j->epochs_run++;
    }
    mlp_free(&m);
    free(labels_buf);
    labels_buf = NULL;
    labels_cap = 0;
    mt_fusion_destroy(&f); /* after the model: it frees the gradients' block */
    return rc;
}

/* ------------------------------------------------------------ data and options */

/* The example's defaults: the help prints these, main starts from them. */
static const options default_options = {.lr = 0.05, .momentum = 0.9, .weight_decay = 5e-4,
                                         .epochs = 10, .threads = 1, .seed = 1,
                                         .fail_rank = -1, .fail_epoch = -1};
static const mt_trainer_config default_config = {
    .run = {.name = "fashion-mnist",
            .checkpoint = {.frequency = 1, .num_to_keep = 2, .score_attribute = "test_acc"}}};

static void usage(FILE *out)
{
    const options *d = &default_options;
    fprintf(out,
        "usage: mpirun -np N trainer [OPTIONS]     or     trainer --num-workers N [OPTIONS]\n"
        "\n"
        "Trains a 784-256-128-10 MLP on Fashion-MNIST, data-parallel over the job's ranks.\n"
        "\n"
        "  --data FILE.h5          dataset file with /train and /test groups (x: N x 28 x 28\n"
        "                          uint8, y: N uint8); default: the Fashion-MNIST file made from\n"
        "                          the Debian package dataset-fashion-mnist on first use\n"
        "                          ($MT_DATA_DIR or ~/.cache/mpitrain/fashion-mnist.h5)\n");
    fprintf(out,
        "  --epochs N              default %d\n"
        "  --batch-size N          per rank; default 128 / ranks (a constant global batch)\n"
        "  --lr X                  peak learning rate (cosine decay over the epochs), default %g\n"
        "  --momentum X            default %g\n"
        "  --weight-decay X        default %g\n"
        "  --seed N                default %llu (initial weights and shuffling)\n"
        "  --threads N             OpenBLAS threads per rank; 0 = the rank's CPUs; default %d\n"
        "  --steps-per-epoch N     train on N batches per epoch only (quick runs); default: all\n"
        "  --fusion-compression none|fp16|bf16\n"
        "                          gradients on the network as 16-bit floats, averaged in\n"
        "                          fp32; default none ($MT_FUSION_COMPRESS if set)\n"
        "  --fusion-algo auto|flat|shm|hier\n"
        "                          how gradients are averaged; default auto ($MT_FUSION_ALGO\n"
        "                          if set): shm on one node, else flat or hier, whichever\n"
        "                          measured faster (each report's fusion_algo says which ran)\n"
        "  --fail-rank R --fail-epoch E   tests: rank R fails in epoch E of the first attempt\n"
        "  --help                  this text\n"
        "\n"
        "Exit status: 0 done, 1 failed, 75 preempted (rerun to resume), 76 stalled, 2 usage.\n\n",
        d->epochs, d->lr, d->momentum, d->weight_decay, (unsigned long long)d->seed, d->threads);
    mt_config_help(out, &default_config);
}

static const char *compression_at(int i) { return mt_compression_word((mt_compression)i); }
static const char *algo_at(int i) { return mt_fusion_algo_word((mt_fusion_algo)i); }

/* v as the index of one of the library's words (0), or -2 when it is none of them (rank 0
 * says so). */
static int word(const char *name, const char *v, const char *(*words)(int), int *out,
                int rank)
{
    for (int i = 0; words(i); i++)
        if (!strcmp(v, words(i))) {
            *out = i;
            return 0;
        }
    if (rank == 0) {
        fprintf(stderr, "trainer: %s: '%s' is not one of", name, v);
        for (int i = 0; words(i); i++)
            fprintf(stderr, "%s %s", i ? "," : "", words(i));
        fprintf(stderr, "\n");
    }
    return -2;
}

/* Every number through the library's strict parser: the whole text, in range (so
 * `--epochs 4294967297` is an error, not 1). */
static int parse(int argc, char **argv, options *o, int rank)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int e = 1; /* 1: not a number option */
        int64_t n = 0;
        int compression = o->fusion.compression, algo = o->fusion.algo;
#define INT(name, field, lo, hi)                                              \
        if (e == 1 && !strcmp(a, name))                                       \
            e = v ? (mt_parse_i64(name, v, lo, hi, &n) ? -1 : (o->field = (int)n, 0)) : 2;
#define REAL(name, field, lo, hi)                                             \
        if (e == 1 && !strcmp(a, name))                                       \
            e = v ? (mt_parse_f64(name, v, lo, hi, &o->field) ? -1 : 0) : 2;
        INT("--epochs", epochs, 1, 1000000)
        INT("--batch-size", batch, 0, INT_MAX)
        REAL("--lr", lr, 1e-12, 1e6)
        REAL("--momentum", momentum, 0, 1)
        REAL("--weight-decay", weight_decay, 0, 1e6)
        INT("--threads", threads, 0, 4096)
        INT("--steps-per-epoch", steps, 0, INT_MAX)
        INT("--fail-rank", fail_rank, -1, INT_MAX)
        INT("--fail-epoch", fail_epoch, -1, INT_MAX)
        if (e == 1 && !strcmp(a, "--seed"))
            e = v ? (mt_parse_u64("--seed", v, 0, UINT64_MAX, &o->seed) ? -1 : 0) : 2;
#undef INT
#undef REAL
        if (e == 1 && !strcmp(a, "--data"))
            e = v ? (o->data = v, 0) : 2;
        if (e == 1 && !strcmp(a, "--fusion-compression"))
            e = v ? word(a, v, compression_at, &compression, rank) : 2;
        if (e == 1 && !strcmp(a, "--fusion-algo"))
            e = v ? word(a, v, algo_at, &algo, rank) : 2;
        if (e == 0) {
            o->fusion.compression = (mt_compression)compression;
            o->fusion.algo = (mt_fusion_algo)algo;
            i++;
            continue;
        }
        if (rank == 0 && e != -2) { /* -2: said already */
            if (e == 2)
                fprintf(stderr, "trainer: option %s needs a value\n", a);
            else if (e == 1)
                fprintf(stderr, "trainer: unknown option '%s' (see --help)\n", a);
            else
                fprintf(stderr, "trainer: %s\n", mt_last_error());
        }
        return -1;
    }
    return 0;
}

/* mkdir -p: each component of path (MT_EIO naming the one that cannot be made). */
static int mkdirs(const char *path)
{
    char p[4096];
    if (snprintf(p, sizeof p, "%s", path) >= (int)sizeof p)
        return MT_EINVAL;
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s != '\0')
            continue;
        char c = *s;
        *s = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST) {
            fprintf(stderr, "trainer: cannot make %s: %s\n", p, strerror(errno));
            return MT_EIO;
        }
        *s = c;
        if (!c)
            return MT_OK;
    }
}

/* The default dataset: made once from the Debian package's IDX files by rank 0. */
static int default_data(char *path, size_t len, int rank)
{
    const char *dir = getenv("MT_DATA_DIR"), *home = getenv("HOME");
    char d[3072];
    int n = dir && *dir ? snprintf(d, sizeof d, "%s", dir)
                        : snprintf(d, sizeof d, "%s/.cache/mpitrain", home && *home ? home : "/tmp");
    if (n < 0 || (size_t)n >= sizeof d) { /* cut short it would be another folder */
        if (rank == 0)
            fprintf(stderr, "trainer: %s is too long for a path (%d bytes)\n",
                    dir && *dir ? "MT_DATA_DIR" : "HOME", n);
        return MT_EINVAL;
    }
    snprintf(path, len, "%s/fashion-mnist.h5", d);
    int rc = MT_OK;
    if (rank == 0 && access(path, R_OK) != 0) {
        rc = mkdirs(d); /* not through a shell: the folder name is data */
        char tmp[4200];
        snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
        const char *src = "/usr/share/datasets/fashion-mnist";
        char img[512], lab[512];
        const char *parts[2][3] = {{"/train", "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"},
                                   {"/test", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"}};
        for (int i = 0; i < 2 && !rc; i++) {
            snprintf(img, sizeof img, "%s/%s", src, parts[i][1]);
            snprintf(lab, sizeof lab, "%s/%s", src, parts[i][2]);
            rc = mt_import_idx(img, lab, tmp, parts[i][0]);
        }
        if (!rc && rename(tmp, path) != 0)
            rc = MT_EIO;
        if (rc) {
            unlink(tmp);
            fprintf(stderr, "trainer: cannot make %s from %s (install the Debian package "
                            "dataset-fashion-mnist, or give --data): %s\n", path, src,
                    mt_last_error());
        } else
            printf("trainer: made %s from %s\n", path, src);
    }
    return rc;
}

int main(int argc, char **argv)
{
    int rc = mt_init(&argc, &argv);
    if (rc) {
        fprintf(stderr, "trainer: %s\n", mt_last_error());
        return 1;
    }
    int rank = mt_job_rank(), world = mt_job_size();
    mt_trainer_config cfg = default_config;
    rc = mt_config_from_args(&cfg, &argc, &argv);
    if (rc) {
        if (rank == 0)
            fprintf(stderr, "trainer: %s\n", mt_last_error());
        mt_finalize();
        return 2;
    }
    if (mt_args_help(argc, argv)) {
        if (rank == 0)
            usage(stdout);
        mt_finalize();
        return 0;
    }
    job j = {.o = default_options};
    if (parse(argc, argv, &j.o, rank)) {
        mt_finalize();
        return 2;
    }
    int workers = cfg.scaling.num_workers > 0 ? cfg.scaling.num_workers : world;
    if (!j.o.batch)
        j.o.batch = 128 / workers > 0 ? 128 / workers : 1;
    char data[4096];
    if (!j.o.data) {
        int e = default_data(data, sizeof data, rank);
        MPI_Allreduce(MPI_IN_PLACE, &e, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        if (e) {
            mt_finalize();
            return 1;
        }
        j.o.data = data;
    }
    mt_trainer *t = NULL;
    mt_result *res = NULL;
    rc = mt_trainer_create(&t, train, &j, &cfg);
    if (!rc)
        rc = mt_trainer_add_dataset(t, "train", j.o.data, "/train");
    if (!rc)
        rc = mt_trainer_add_dataset(t, "test", j.o.data, "/test");
    if (!rc)
        rc = mt_trainer_fit(t, &res);
    if (rank == 0 && res) {
        if (rc == MT_ESTOP)
            printf("trainer: preempted after a checkpoint; run the same command again to "
                   "resume (%s)\n", mt_result_path(res));
        else if (rc)
            fprintf(stderr, "trainer: failed: %s\n", mt_result_error(res) ? mt_result_error(res)
                                                                          : mt_last_error());
        else {
            const mt_metrics *last = mt_result_metrics(res);
            double acc = 0;
            mt_metrics_get_f64(last, "test_acc", &acc);
            const mt_metrics *bm = NULL;
            const mt_checkpoint *best = mt_result_best(res, 0, &bm);
            double best_acc = 0;
            mt_metrics_get_f64(bm, "test_acc", &best_acc);
            printf("trainer: done: final test accuracy %.4f, best %.4f (%s); run directory %s\n",
                   acc, best_acc, best ? mt_checkpoint_path(best) : "no checkpoint",
                   mt_result_path(res));
        }
    } else if (rc && rank == 0 && !res)
        fprintf(stderr, "trainer: %s\n", mt_last_error());
    mt_result_free(&res);
    mt_trainer_destroy(&t);
    mt_finalize();
    return rc == MT_OK ? 0 : rc == MT_ESTOP ? MT_EXIT_PREEMPTED : 1;
}
