/*
 * topology.c -- where each rank sits: local rank and size among the ranks of its node,
 * and the node's rank among nodes ordered by their lowest world rank.
 *
 * A node is found by MPI_Comm_split_type(MPI_COMM_TYPE_SHARED), or, when the test-only
 * environment variable MT_NODE_KEY is set on any rank, by equal keys (ranks without it use
 * their processor name), so one machine can pretend to be several nodes.
 */
#include "collectives.h"

#include <stdlib.h>
#include <string.h>

#define KEY_LEN 256

/* all: size * KEY_LEN bytes, allocated (and agreed) by the caller */
static int leader_by_key(mt__comm *c, char *all, int *leader)
{
    int rc = MT_OK;
    char mine[KEY_LEN] = {0};
    const char *env = getenv("MT_NODE_KEY");
    size_t klen = env ? strlen(env) : 0;
    if (klen >= KEY_LEN) { /* a key longer than the slot: a prefix and a hash of the whole,
                             so two keys that differ only past the slot stay different */
        uint64_t h = 1469598103934665603ULL;
        for (size_t i = 0; i < klen; i++)
            h = (h ^ (unsigned char)env[i]) * 1099511628211ULL;
        snprintf(mine, sizeof mine, "%.200s#%016llx", env, (unsigned long long)h);
    } else if (klen)
        snprintf(mine, sizeof mine, "%s", env);
    else {
        int len = 0;
        MPI_Get_processor_name(mine, &len);
    }
    MT__MPI(MPI_Allgather(mine, KEY_LEN, MPI_CHAR, all, KEY_LEN, MPI_CHAR, c->comm), out);
    for (int r = 0; r < c->size; r++)
        if (strncmp(all + (size_t)r * KEY_LEN, mine, KEY_LEN) == 0) {
            *leader = r;
            break;
        }
out:
    return rc;
}

static int leader_by_shared_memory(mt__comm *c, int *leader)
{
    int rc = MT_OK;
    MPI_Comm node = MPI_COMM_NULL;
    int e = mt__test_mpi("topology-split-type-mpi", c->rank,
                         MPI_Comm_split_type(c->comm, MPI_COMM_TYPE_SHARED, c->rank,
                                             MPI_INFO_NULL, &node));
    if (e != MPI_SUCCESS)
        rc = mt__mpi_error(e, "MPI_Comm_split_type (node)");
    *leader = c->rank;
    /* the node's ranks all take part in this, whatever the split said here */
    if (node != MPI_COMM_NULL &&
        (e = MPI_Allreduce(MPI_IN_PLACE, leader, 1, MPI_INT, MPI_MIN, node)) != MPI_SUCCESS &&
        !rc)
        rc = mt__mpi_error(e, "MPI_Allreduce (node leader)");
    if (node != MPI_COMM_NULL)
        MPI_Comm_free(&node);
    return rc;
}

int mt__topology_get(mt__comm *c, mt__topology *out)
{
    return mt__topology_node(c, out, NULL);
}

int mt__topology_node(mt__comm *c, mt__topology *out, MPI_Comm *node_out)
{
    int rc = MT_OK;
    MPI_Comm node = MPI_COMM_NULL;
    /* what can fail on one rank alone comes first, and is agreed with whether any rank
     * has MT_NODE_KEY, before the first collective of the step */
    int *leaders = calloc((size_t)c->size, sizeof *leaders);
    char *keys = calloc((size_t)c->size, KEY_LEN);
    if (!leaders || !keys || mt__test_fail("topology-alloc", c->rank))
        rc = mt__error(MT_ENOMEM, "rank %d: out of memory gathering node keys and leaders",
                       c->rank);
    int64_t any_key = getenv("MT_NODE_KEY") != NULL;
    mt__call call;
    mt__call_init(&call, MT__CALL_INTERNAL, 4, 0, 0);
    if ((rc = mt__agree_max(c, &call, rc, NULL, &any_key, 1)))
        goto out;
    /* An MPI error on one rank alone must not make it skip the collectives the others
     * enter next: every rank enters each of them whatever happened before, and the step
     * ends in one agreement. */
    int leader = c->rank;
    rc = any_key ? leader_by_key(c, keys, &leader) : leader_by_shared_memory(c, &leader);
    int e = mt__test_mpi("topology-split-mpi", c->rank,
                         MPI_Comm_split(c->comm, leader, c->rank, &node));
    if (e != MPI_SUCCESS && !rc)
        rc = mt__mpi_error(e, "MPI_Comm_split (node)");
    if (!rc)
        MT__MPI(MPI_Comm_rank(node, &out->local_rank), agree);
    if (!rc)
        MT__MPI(MPI_Comm_size(node, &out->local_size), agree);
    e = MPI_Allgather(&leader, 1, MPI_INT, leaders, 1, MPI_INT, c->comm);
    if (e != MPI_SUCCESS && !rc)
        rc = mt__mpi_error(e, "MPI_Allgather (node leaders)");
agree:
    mt__call_init(&call, MT__CALL_INTERNAL, 20, 0, 0);
    if ((rc = mt__agree(c, &call, rc, NULL)))
        goto out;
    out->node_rank = 0;
    out->num_nodes = 0;
    for (int r = 0; r < c->size; r++) {
        if (leaders[r] != r)
            continue;
        out->num_nodes++;
        if (r < leader)
            out->node_rank++;
    }
    if (node_out) { /* handed over */
        *node_out = node;
        node = MPI_COMM_NULL;
    }
out:
    if (node != MPI_COMM_NULL)
        MPI_Comm_free(&node);
    free(leaders);
    free(keys);
    return rc;
}
