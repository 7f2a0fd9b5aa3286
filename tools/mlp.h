/*
 * mlp.h -- the example model (see mlp.c).
 */
#ifndef MT_TOOLS_MLP_H
#define MT_TOOLS_MLP_H

#include <mpitrain.h>

#define NL 3
extern const int mlp_sizes[NL + 1];

typedef struct {
    float *w[NL], *b[NL];       /* weights (out x in), biases */
    float *gw[NL], *gb[NL];     /* gradients: pointers into grad */
    float *grad;                /* one block: gw[2], gb[2], gw[1], gb[1], gw[0], gb[0] */
    bool owns_grad;             /* grad is mlp_init's (else the caller's, e.g. a fusion's) */
    float *vw[NL], *vb[NL];     /* momentum buffers */
    float *act[NL + 1], *delta[NL + 1];
    size_t cap;                 /* rows the activation buffers hold */
} model;

size_t mlp_wsize(int l);
/* Floats of all the gradients (the size of the block mlp_init takes). */
size_t mlp_grad_count(void);
/* grad: mlp_grad_count() zeroed floats that the model uses for its gradients and does not
 * free (e.g. from mt_fusion_alloc), or NULL: its own. */
int mlp_init(model *m, uint64_t seed, float *grad);
/* Activation buffers for batches of up to rows rows. */
int mlp_reserve(model *m, size_t rows);
void mlp_free(model *m);
/* act[0] holds the batch; computes act[1..NL] (the last as softmax probabilities). */
void mlp_forward(model *m, int n);
/* Mean cross-entropy; gradients into gw/gb, each announced to f (tensor ids in idx:
 * idx[2l] the weights, idx[2l+1] the biases of layer l); f may be NULL. */
double mlp_backward(model *m, int n, const uint8_t *labels, mt_fusion *f, const int *idx);
void mlp_sgd(model *m, double lr, double momentum, double weight_decay);

#endif
