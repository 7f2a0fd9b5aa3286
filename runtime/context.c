/*
 * context.c -- the worker's context, one per fit: world and local ranks, node rank, the
 * CPUs of its affinity mask, and the private communicator every mt_ collective uses. The
 * current context is per thread, so mt_get_context() works from deep inside training code
 * without passing it around. What the layers above hang on a context (shards,
 * checkpoint buffers) they release themselves, before the fit destroys it; the
 * process-wide job (mt_init, spawn mode, mt_finalize) is job.c.
 */
#include "runtime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local mt_context *current;

int mt__context_create(mt_context **out, MPI_Comm world)
{
    int rc = MT_OK;
    *out = NULL;
    mt__comm *comm = NULL;
    rc = mt__comm_create(&comm, world); /* collective: before anything that can fail alone */
    if (rc)
        return rc;
    mt_context *c = calloc(1, sizeof *c);
    bool room = false;
    if (!c)
        rc = mt__error(MT_ENOMEM, "out of memory allocating a context");
    else if (!(rc = mt__live_reserve()))
        room = true;
    mt__call call;
    mt__call_init(&call, MT__CALL_INTERNAL, 0, 0, 0);
    if ((rc = mt__agree(comm, &call, rc, NULL))) {
        if (room)
            mt__live_unreserve();
        free(c);
        mt__comm_destroy(&comm);
        return rc;
    }
    c->comm = comm;
    c->world_rank = c->comm->rank;
    c->world_size = c->comm->size;
    rc = mt__topology_get(c->comm, &c->topo);
    if (rc) {
        mt__live_unreserve();
        goto fail;
    }
    c->num_cpus = mt__affinity_cpus(NULL, 0);
    mt__live_add_reserved(c, MT__LIVE_CONTEXT); /* reserved before the agreement */
    *out = c;
    return MT_OK;
fail:
    mt__context_destroy(&c);
    return rc;
}

void mt__context_destroy(mt_context **cp)
{
    if (!cp || !*cp)
        return;
    mt_context *c = *cp;
    mt__live_remove(c); /* from now on the public calls refuse it */
    if (current == c)
        current = NULL;
    for (int i = 0; i < c->nfusions; i++) /* the ones the program still holds */
        if (mt__live(c->fusions[i], MT__LIVE_FUSION)) {
            mt__fusion_orphan(c->fusions[i]);
            mt__live_remove(c->fusions[i]);
        }
    free(c->fusions);
    mt__spread_free(&c->spread);
    mt__comm_destroy(&c->comm);
    free(c->name);
    free(c->run_dir);
    free(c);
    *cp = NULL;
}

void mt__context_set_current(mt_context *c)
{
    current = c;
}

mt_context *mt_get_context(void)
{
    return current;
}

bool mt__ctx_ok(const mt_context *c, const char *fn)
{
    if (c && mt__live(c, MT__LIVE_CONTEXT))
        return true;
    mt__error(MT_EINVAL, "%s: %s", fn,
              c ? "not a live context: a context belongs to the fit running it and ends when "
                  "fit returns (keep none past fit; mt_get_context gives the current one)"
                : "context is NULL");
    return false;
}

#define GET(fn, what, none) return mt__ctx_ok(c, #fn) ? (what) : (none)
int mt_world_size(const mt_context *c) { GET(mt_world_size, c->world_size, 0); }
int mt_world_rank(const mt_context *c) { GET(mt_world_rank, c->world_rank, -1); }
int mt_local_rank(const mt_context *c) { GET(mt_local_rank, c->topo.local_rank, -1); }
int mt_local_world_size(const mt_context *c) { GET(mt_local_world_size, c->topo.local_size, 0); }
int mt_node_rank(const mt_context *c) { GET(mt_node_rank, c->topo.node_rank, -1); }
int mt_num_cpus(const mt_context *c) { GET(mt_num_cpus, c->num_cpus, 0); }
int mt_attempt(const mt_context *c) { GET(mt_attempt, c->attempt, -1); }
const char *mt_experiment_name(const mt_context *c) { GET(mt_experiment_name, c->name, NULL); }
const char *mt_run_dir(const mt_context *c) { GET(mt_run_dir, c->run_dir, NULL); }
MPI_Comm mt_comm(const mt_context *c) { GET(mt_comm, c->comm->comm, MPI_COMM_NULL); }
#undef GET

/* ------------------------------------------------ collectives on a context */

#define NEED_CTX(fn)                                                          \
    if (!mt__ctx_ok(c, fn))                                                   \
        return MT_EINVAL;

int mt_allreduce(mt_context *c, void *buf, size_t count, mt_dtype t, mt_op op)
{
    NEED_CTX("mt_allreduce");
    return mt__allreduce(c->comm, buf, count, t, op);
}

int mt_broadcast(mt_context *c, void *buf, size_t count, mt_dtype t, int root)
{
    NEED_CTX("mt_broadcast");
    return mt__broadcast(c->comm, buf, count, t, root);
}

int mt_allgather(mt_context *c, const void *send, void *recv, size_t count, mt_dtype t)
{
    NEED_CTX("mt_allgather");
    return mt__allgather(c->comm, send, recv, count, t);
}

int mt_allreduce_nd(mt_context *c, void *buf, int ndim, const size_t *dims, mt_dtype t,
                    mt_op op)
{
    NEED_CTX("mt_allreduce_nd");
    return mt__allreduce_nd(c->comm, buf, ndim, dims, t, op);
}

int mt_broadcast_nd(mt_context *c, void *buf, int ndim, const size_t *dims, mt_dtype t,
                    int root)
{
    NEED_CTX("mt_broadcast_nd");
    return mt__broadcast_nd(c->comm, buf, ndim, dims, t, root);
}

int mt_allgather_nd(mt_context *c, const void *send, void *recv, int ndim, const size_t *dims,
                    mt_dtype t)
{
    NEED_CTX("mt_allgather_nd");
    return mt__allgather_nd(c->comm, send, recv, ndim, dims, t);
}

int mt_barrier(mt_context *c)
{
    NEED_CTX("mt_barrier");
    return mt__barrier(c->comm);
}

int mt_fusion_create(mt_context *c, size_t bucket_bytes, mt_fusion **out)
{
    mt_fusion_options o = {.bucket_bytes = bucket_bytes};
    return mt_fusion_create_opts(c, &o, out);
}

int mt_fusion_create_opts(mt_context *c, const mt_fusion_options *o, mt_fusion **out)
{
    NEED_CTX("mt_fusion_create");
    /* the context's room for it first, agreed: no rank may skip the collective creation */
    int rc = MT_OK;
    bool room = false;
    if (MT__GROW(c->fusions, c->fusions_cap, (size_t)c->nfusions + 1))
        rc = mt__error(MT_ENOMEM, "out of memory creating a fusion");
    else
        room = (rc = mt__live_reserve()) == MT_OK;
    mt__call call;
    mt__call_init(&call, MT__CALL_INTERNAL, 7, 0, 0);
    if (!(rc = mt__agree(c->comm, &call, rc, NULL)))
        rc = mt__fusion_create_opts(c->comm, o, out);
    if (!rc) {
        mt__live_add_reserved(*out, MT__LIVE_FUSION);
        c->fusions[c->nfusions++] = *out;
    } else if (room)
        mt__live_unreserve();
    return rc;
}
