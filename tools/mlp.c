/*
 * mlp.c -- the example model: a multilayer perceptron (784-256-128-10, ReLU, softmax
 * cross-entropy) with SGD, momentum and weight decay, on CBLAS. Shared by the trainer and
 * the benchmark's train suite. The backward pass hands each layer's gradients to an
 * mt_fusion as soon as they are computed, last layer first, so their averaging overlaps
 * the layers still to come. The first layer's weight gradient is 85% of the bytes and
 * comes last: backward computes it in row blocks (rows are contiguous), each its own
 * bucket, handed over when done; only the last block (with the first layer's biases,
 * next to it in memory) waits for mt_fusion_wait. Every tensor lies where the one
 * registered before it ends, so the fusion reduces all of them in place.
 */
#include "mlp.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

const int mlp_sizes[NL + 1] = {784, 256, 128, 10};

size_t mlp_wsize(int l) { return (size_t)mlp_sizes[l + 1] * (size_t)mlp_sizes[l]; }

/* ------------------------------------------------------------ model */

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static float rng_normal(uint64_t *s)
{
    double u1 = ((double)(rng_next(s) >> 11) + 1.0) / 9007199254740993.0;
    double u2 = (double)(rng_next(s) >> 11) / 9007199254740992.0;
    return (float)(sqrt(-2 * log(u1)) * cos(2 * M_PI * u2));
}

bool mlp_overlap(const mt_context *c)
{
    (void)c;
    const char *e = getenv("MT_OVERLAP");
    return e && !strcmp(e, "1");
}

size_t mlp_grad_count(void)
{
    size_t total = 0;
    for (int l = 0; l < NL; l++)
        total += mlp_wsize(l) + (size_t)mlp_sizes[l + 1];
    return total;
}

void mlp_use_grad(model *m, float *grad)
{
    m->grad = grad;
    float *g = grad;
    for (int l = NL - 1; l >= 0; l--) {
        m->gw[l] = g;
        g += mlp_wsize(l);
        m->gb[l] = g;
        g += mlp_sizes[l + 1];
    }
}

int mlp_init(model *m, uint64_t seed, float *grad)
{
    memset(m, 0, sizeof *m);
    uint64_t s = seed * 7919 + 1;
    /* all gradients in one block, in the order they are registered with mt_fusion (last
     * layer first, weights then biases), so the fusion reduces them in place; a block
     * from mt_fusion_alloc lies in the node's shared segment, where they are averaged
     * straight from every rank's block */
    if (!grad && !(grad = m->own_grad = calloc(mlp_grad_count(), sizeof(float))))
        return MT_ENOMEM;
    mlp_use_grad(m, grad);
    for (int l = 0; l < NL; l++) {
        size_t n = mlp_wsize(l), o = (size_t)mlp_sizes[l + 1];
        m->w[l] = malloc(n * sizeof(float));
        m->vw[l] = calloc(n, sizeof(float));
        m->b[l] = calloc(o, sizeof(float));
        m->vb[l] = calloc(o, sizeof(float));
        if (!m->w[l] || !m->vw[l] || !m->b[l] || !m->vb[l])
            return MT_ENOMEM;
        float scale = sqrtf(2.0f / (float)mlp_sizes[l]); /* He initialisation */
        for (size_t i = 0; i < n; i++)
            m->w[l][i] = rng_normal(&s) * scale;
    }
    return MT_OK;
}

int mlp_reserve(model *m, size_t rows)
{
    if (rows <= m->cap)
        return MT_OK;
    for (int l = 0; l <= NL; l++) {
        free(m->act[l]);
        free(m->delta[l]);
        m->act[l] = malloc(rows * (size_t)mlp_sizes[l] * sizeof(float));
        m->delta[l] = malloc(rows * (size_t)mlp_sizes[l] * sizeof(float));
        if (!m->act[l] || !m->delta[l])
            return MT_ENOMEM;
    }
    m->cap = rows;
    return MT_OK;
}

void mlp_free(model *m)
{
    for (int l = 0; l < NL; l++) {
        free(m->w[l]), free(m->vw[l]);
        free(m->b[l]), free(m->vb[l]);
    }
    free(m->own_grad);
    for (int l = 0; l <= NL; l++)
        free(m->act[l]), free(m->delta[l]);
}

/* act[0] is filled; computes act[1..NL] (the last as softmax probabilities). */
void mlp_forward(model *m, int n)
{
    for (int l = 0; l < NL; l++) {
        int in = mlp_sizes[l], out = mlp_sizes[l + 1];
        float *y = m->act[l + 1];
        for (int r = 0; r < n; r++)
            memcpy(y + (size_t)r * out, m->b[l], (size_t)out * sizeof(float));
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, out, in, 1.0f, m->act[l], in,
                    m->w[l], in, 1.0f, y, out);
        if (l < NL - 1) {
            for (size_t i = 0; i < (size_t)n * out; i++)
                y[i] = y[i] > 0 ? y[i] : 0;
        } else {
            for (int r = 0; r < n; r++) {
                float *p = y + (size_t)r * out, mx = p[0], sum = 0;
                for (int k = 1; k < out; k++)
                    mx = p[k] > mx ? p[k] : mx;
                for (int k = 0; k < out; k++)
                    sum += (p[k] = expf(p[k] - mx));
                for (int k = 0; k < out; k++)
                    p[k] /= sum;
            }
        }
    }
}

/* m->w0_blocks as used (mlp_register refuses one out of range) */
static int w0_blocks(const model *m)
{
    int b = m->w0_blocks ? m->w0_blocks : MLP_W0_BLOCKS;
    return b < 1 ? 1 : b > MLP_MAX_BLOCKS ? MLP_MAX_BLOCKS : b;
}

/* First row of block j of the first layer's weight gradient (j = blocks: the end). */
static int block_row(const model *m, int j)
{
    return (int)((long)mlp_sizes[1] * j / w0_blocks(m));
}

int mlp_register(model *m, mt_fusion *f, int *idx)
{
    int nb = w0_blocks(m), k = 0;
    if (m->w0_blocks < 0 || m->w0_blocks > MLP_MAX_BLOCKS)
        return MT_EINVAL;
    for (int l = NL - 1; l > 0; l--) {
        idx[k++] = mt_fusion_add(f, m->gw[l], mlp_wsize(l));
        idx[k++] = mt_fusion_add(f, m->gb[l], (size_t)mlp_sizes[l + 1]);
    }
    for (int j = 0; j < nb; j++) {
        size_t r0 = (size_t)block_row(m, j), r1 = (size_t)block_row(m, j + 1);
        idx[k++] = mt_fusion_add(f, m->gw[0] + r0 * (size_t)mlp_sizes[0],
                                 (r1 - r0) * (size_t)mlp_sizes[0]);
    }
    idx[k++] = mt_fusion_add(f, m->gb[0], (size_t)mlp_sizes[1]);
    return MT_OK;
}

int mlp_tensors(const model *m)
{
    return 2 * (NL - 1) + w0_blocks(m) + 1;
}

size_t mlp_bucket_bytes(const model *m)
{
    /* the widest row block with the first layer's biases: no two blocks fit in one bucket,
     * and the later layers' weights, larger, get a bucket each (their biases then go with
     * the next tensor, which is ready later anyway) */
    int nb = w0_blocks(m);
    size_t rows = (size_t)(mlp_sizes[1] + nb - 1) / (size_t)nb;
    return (rows * (size_t)mlp_sizes[0] + (size_t)mlp_sizes[1]) * sizeof(float);
}

size_t mlp_tail_floats(const model *m)
{
    int nb = w0_blocks(m);
    size_t rows = (size_t)(block_row(m, nb) - block_row(m, nb - 1));
    return rows * (size_t)mlp_sizes[0] + (size_t)mlp_sizes[1];
}

/* Rows [r0, r1) of layer l's weight gradient: delta[l+1]^T (rows r0..r1) x act[l]. */
static void weight_rows(model *m, int n, int l, int r0, int r1)
{
    int in = mlp_sizes[l], o = mlp_sizes[l + 1];
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1 - r0, in, n, 1.0f,
                m->delta[l + 1] + r0, o, m->act[l], in, 0.0f, m->gw[l] + (size_t)r0 * in, in);
}

static void bias_grad(model *m, int n, int l)
{
    int o = mlp_sizes[l + 1];
    for (int k = 0; k < o; k++) {
        float s = 0;
        for (int r = 0; r < n; r++)
            s += m->delta[l + 1][(size_t)r * o + k];
        m->gb[l][k] = s;
    }
}

/* Mean cross-entropy of the batch; gradients into gw/gb, each tensor marked ready as soon
 * as it is done (the last layer first, the first layer's row blocks last). */
double mlp_backward(model *m, int n, const uint8_t *labels, mt_fusion *f, const int *idx)
{
    int out = mlp_sizes[NL];
    double loss = 0;
    float *d = m->delta[NL];
    for (int r = 0; r < n; r++) {
        const float *p = m->act[NL] + (size_t)r * out;
        loss -= log(fmax(p[labels[r]], 1e-12));
        for (int k = 0; k < out; k++)
            d[(size_t)r * out + k] = (p[k] - (k == labels[r])) / (float)n;
    }
    int k = 0; /* the next tensor id, in mlp_register's order */
    for (int l = NL - 1; l > 0; l--) {
        int in = mlp_sizes[l], o = mlp_sizes[l + 1];
        weight_rows(m, n, l, 0, o);
        bias_grad(m, n, l);
        if (f) {
            mt_fusion_ready(f, idx[k++]);
            mt_fusion_ready(f, idx[k++]);
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, in, o, 1.0f, m->delta[l + 1],
                    o, m->w[l], in, 0.0f, m->delta[l], in);
        for (size_t i = 0; i < (size_t)n * in; i++)
            if (m->act[l][i] <= 0)
                m->delta[l][i] = 0;
    }
    int nb = w0_blocks(m);
    for (int j = 0; j < nb; j++) {
        weight_rows(m, n, 0, block_row(m, j), block_row(m, j + 1));
        if (j == nb - 1)
            bias_grad(m, n, 0); /* in the last block's bucket */
        if (f)
            mt_fusion_ready(f, idx[k++]);
    }
    if (f)
        mt_fusion_ready(f, idx[k++]);
    return loss / n;
}

void mlp_sgd(model *m, double lr_now, double momentum, double weight_decay)
{
    float lr = (float)lr_now, mu = (float)momentum, wd = (float)weight_decay;
    for (int l = 0; l < NL; l++) {
        for (size_t i = 0; i < mlp_wsize(l); i++) {
            m->vw[l][i] = mu * m->vw[l][i] + m->gw[l][i] + wd * m->w[l][i];
            m->w[l][i] -= lr * m->vw[l][i];
        }
        for (int k = 0; k < mlp_sizes[l + 1]; k++) {
            m->vb[l][k] = mu * m->vb[l][k] + m->gb[l][k];
            m->b[l][k] -= lr * m->vb[l][k];
        }
    }
}

