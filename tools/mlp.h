/*
 * mlp.h -- the example model (see mlp.c).
 */
#ifndef MT_TOOLS_MLP_H
#define MT_TOOLS_MLP_H

#include <mpitrain.h>

#define NL 3
extern const int mlp_sizes[NL + 1];

/* The first layer's weight gradient (256 x 784 floats, 85% of the bytes) is produced
 * last; backward computes it in row blocks, each handed to the fusion when done, so that
 * only the last block is left for mt_fusion_wait. */
#define MLP_W0_BLOCKS 8         /* the default number of row blocks */
#define MLP_MAX_BLOCKS 64
/* Tensors mlp_register adds at most: each later layer's weights and biases, the first
 * layer's row blocks and its biases. */
#define MLP_TENSORS (2 * (NL - 1) + MLP_MAX_BLOCKS + 1)

typedef struct {
    float *w[NL], *b[NL];       /* weights (out x in), biases */
    float *gw[NL], *gb[NL];     /* gradients: pointers into grad */
    float *grad;                /* one block: gw[2], gb[2], gw[1], gb[1], gw[0], gb[0] */
    float *own_grad;            /* mlp_init's own block (NULL: given one, e.g. a fusion's) */
    float *vw[NL], *vb[NL];     /* momentum buffers */
    float *act[NL + 1], *delta[NL + 1];
    size_t cap;                 /* rows the activation buffers hold */
    int w0_blocks;              /* row blocks of gw[0], 1 to MLP_MAX_BLOCKS; 0 = MLP_W0_BLOCKS
                                   (set before mlp_register) */
} model;

size_t mlp_wsize(int l);
/* Floats of all the gradients (the size of the block mlp_init takes). */
size_t mlp_grad_count(void);
/* grad: mlp_grad_count() zeroed floats that the model uses for its gradients and does not
 * free (e.g. from mt_fusion_alloc), or NULL: its own. */
int mlp_init(model *m, uint64_t seed, float *grad);
/* The gradients from now on in grad (mlp_grad_count() floats, the caller's: the model
 * keeps freeing only its own block): e.g. one fusion's block per way of averaging them.
 * Register with a fusion after this call, not before. */
void mlp_use_grad(model *m, float *grad);
/* Activation buffers for batches of up to rows rows. */
int mlp_reserve(model *m, size_t rows);
void mlp_free(model *m);
/* act[0] holds the batch; computes act[1..NL] (the last as softmax probabilities). */
void mlp_forward(model *m, int n);
/* Local: adds the gradients to f in the order backward produces them, which is also their
 * order in m->grad: each later layer's weights and biases (last layer first), the first
 * layer's row blocks, its biases; idx (MLP_TENSORS entries) receives the ids for
 * mlp_backward. MT_EINVAL (nothing added) when m->w0_blocks is out of range, the same on
 * every rank. An add that fails on one rank (out of memory) is not returned: the fusion
 * keeps it and its first mt_fusion_ready or mt_fusion_wait reports it on every rank, so
 * no rank leaves training alone. */
int mlp_register(model *m, mt_fusion *f, int *idx);
/* How many tensors mlp_register adds. */
int mlp_tensors(const model *m);
/* A fusion bucket size that gives each layer's gradients, and each row block of the
 * first layer's (the last one with the biases), a bucket: pass it to mt_fusion_create. */
size_t mlp_bucket_bytes(const model *m);
/* Floats in the last of those buckets: what becomes ready only when backward ends (the
 * last row block and the first layer's biases). */
size_t mlp_tail_floats(const model *m);
/* Local: whether averaging should overlap the backward pass (a bucket per layer and per
 * row block, handed over as backward produces them), the rule the trainer and the train
 * suite follow: only when MT_OVERLAP=1. By default one bucket, averaged in mt_fusion_wait
 * after backward, because that measured faster on every layout: on one node the average
 * is memory work on the cores that compute (train suite, 2 ranks: 0.94-0.96x of the
 * no-communication rate against 0.84-0.86x with the row blocks), and across emulated nodes
 * whose ranks share a CPU with their fusion thread, row blocks ran at 0.43x-0.55x of one
 * bucket after backward (benchmarks/cluster_bench.sh, 2x1 and 2x2 on three link
 * profiles; docs/benchmarks.md). Where a rank has cores to spare for its fusion thread
 * and a slow link, overlap can win: measure with the train suite, which runs both. */
bool mlp_overlap(const mt_context *c);
/* Mean cross-entropy; gradients into gw/gb, each tensor marked ready in f (ids from
 * mlp_register) as soon as it is computed; f NULL: none is (no averaging, or all of it
 * in mt_fusion_wait). */
double mlp_backward(model *m, int n, const uint8_t *labels, mt_fusion *f, const int *idx);
void mlp_sgd(model *m, double lr, double momentum, double weight_decay);

#endif
