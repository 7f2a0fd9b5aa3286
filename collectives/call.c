/*
 * call.c -- what a collective call is, as the agreement and the stall watchdog see it:
 * its kind, the arguments that must match across ranks, their signature, and the text
 * that names it in messages ("allreduce(count=4, f64, sum)"). Both agree.c and
 * watchdog.c use it; it uses neither.
 */
#include "collectives.h"

#include <stdio.h>

const char *mt__call_name(int kind)
{
    switch (kind) {
#define XX(name, text)                                                        \
    case MT__CALL_##name:                                                     \
        return text;
        MT__CALL_MAP(XX)
#undef XX
    }
    return "none";
}

void mt__call_init(mt__call *call, int kind, uint64_t n, int64_t x, int64_t y)
{
    call->kind = kind;
    call->n = n;
    call->x = x;
    call->y = y;
    call->ndim = 0;
    call->sig = mt__sig_mix(mt__sig_mix(mt__sig_mix(mt__sig_mix(0, (uint64_t)kind), n),
                                        (uint64_t)x), (uint64_t)y);
}

void mt__call_shape(mt__call *call, int ndim, const size_t *dims)
{
    if (ndim < 2 || ndim > MT__CALL_MAX_DIMS)
        return; /* 0-d and 1-d: the plain call; more than 8: refused by the caller */
    call->ndim = ndim;
    call->sig = mt__sig_mix(call->sig, (uint64_t)ndim);
    for (int d = 0; d < ndim; d++) {
        call->dims[d] = dims[d];
        call->sig = mt__sig_mix(call->sig, dims[d]);
    }
}

/* ", shape=(2, 3)" for a call with a shape, else "". */
static void shape_text(const mt__call *c, char *buf, size_t len)
{
    buf[0] = '\0';
    if (c->ndim < 2)
        return;
    size_t at = (size_t)snprintf(buf, len, ", shape=(");
    for (int d = 0; d < c->ndim && at < len; d++)
        at += (size_t)snprintf(buf + at, len - at, "%s%llu", d ? ", " : "",
                               (unsigned long long)c->dims[d]);
    if (at < len)
        snprintf(buf + at, len - at, ")");
}

void mt__call_describe(const mt__call *c, char *buf, size_t len)
{
    unsigned long long n = c->n;
    char shape[96];
    shape_text(c, shape, sizeof shape);
    switch (c->kind) {
    case MT__CALL_ALLREDUCE:
        snprintf(buf, len, "allreduce(count=%llu, %s, %s%s)", n, mt__dtype_name((int)c->x),
                 mt__op_name((int)c->y), shape);
        break;
    case MT__CALL_BROADCAST:
        snprintf(buf, len, "broadcast(count=%llu, %s, root=%lld%s)", n,
                 mt__dtype_name((int)c->x), (long long)c->y, shape);
        break;
    case MT__CALL_ALLGATHER:
        snprintf(buf, len, "allgather(count=%llu, %s%s)", n, mt__dtype_name((int)c->x), shape);
        break;
    case MT__CALL_FUSION_CREATE: {
        const char *a = mt_fusion_algo_word((mt_fusion_algo)c->x);
        const char *k = mt_compression_word((mt_compression)c->y);
        snprintf(buf, len, "fusion-create(algo=%s, compression=%s)", a ? a : "?", k ? k : "?");
        break;
    }
    case MT__CALL_FUSION_ALLOC:
        snprintf(buf, len, "fusion-alloc(floats=%llu)", n);
        break;
    case MT__CALL_FUSION_CHECK:
        snprintf(buf, len, "fusion-check(tensors=%lld, floats=%llu, buckets=%lld)",
                 (long long)c->x, n, (long long)c->y);
        break;
    case MT__CALL_FUSION_WAIT:
        snprintf(buf, len, "fusion-wait(tensors=%lld)", (long long)c->x);
        break;
    case MT__CALL_FUSION_DESTROY:
        snprintf(buf, len, "fusion-destroy(tensors=%lld)", (long long)c->x);
        break;
    case MT__CALL_EPOCH:
        snprintf(buf, len, "begin-epoch(epoch=%lld, batch_size=%lld, batches=%llu)",
                 (long long)c->x, (long long)c->y, n);
        break;
    case MT__CALL_TEST:
        snprintf(buf, len, "test(%llu)", n);
        break;
    default:
        snprintf(buf, len, "%s", mt__call_name(c->kind));
    }
}
