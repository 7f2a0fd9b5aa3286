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

static int leader_by_key(mt__comm *c, int *leader)
{
    int rc = MT_OK;
    char mine[KEY_LEN] = {0};
    const char *env = getenv("MT_NODE_KEY");
    if (env && *env)
        snprintf(mine, sizeof mine, "%s", env);
    else {
        int len = 0;
        MPI_Get_processor_name(mine, &len);
    }
    char *all = calloc((size_t)c->size, KEY_LEN);
    MT__CHECK(all, MT_ENOMEM, out, "out of memory gathering node keys");
    MT__MPI(MPI_Allgather(mine, KEY_LEN, MPI_CHAR, all, KEY_LEN, MPI_CHAR, c->comm), out);
    for (int r = 0; r < c->size; r++)
        if (strncmp(all + (size_t)r * KEY_LEN, mine, KEY_LEN) == 0) {
            *leader = r;
            break;
        }
out:
    free(all);
    return rc;
}

static int leader_by_shared_memory(mt__comm *c, int *leader)
{
    int rc = MT_OK;
    MPI_Comm node = MPI_COMM_NULL;
    MT__MPI(MPI_Comm_split_type(c->comm, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &node),
            out);
    *leader = c->rank;
    MT__MPI(MPI_Allreduce(MPI_IN_PLACE, leader, 1, MPI_INT, MPI_MIN, node), out);
out:
    if (node != MPI_COMM_NULL)
        MPI_Comm_free(&node);
    return rc;
}

int mt__topology_get(mt__comm *c, mt__topology *out)
{
    int rc = MT_OK;
    MPI_Comm node = MPI_COMM_NULL;
    /* allocated first, and whether every rank has it carried by the first reduction: a
     * rank out of memory must not skip the collectives below alone */
    int *leaders = calloc((size_t)c->size, sizeof *leaders);
    int flags[2] = {getenv("MT_NODE_KEY") != NULL, leaders == NULL}; /* any key, any OOM */
    MT__MPI(MPI_Allreduce(MPI_IN_PLACE, flags, 2, MPI_INT, MPI_MAX, c->comm), out);
    int any_key = flags[0];
    if (flags[1]) {
        rc = !leaders ? mt__error(MT_ENOMEM, "out of memory gathering node leaders")
                      : mt__error(MT_EPEER, "another rank ran out of memory gathering node "
                                            "leaders");
        goto out;
    }
    int leader = c->rank;
    rc = any_key ? leader_by_key(c, &leader) : leader_by_shared_memory(c, &leader);
    if (rc)
        goto out;
    MT__MPI(MPI_Comm_split(c->comm, leader, c->rank, &node), out);
    MT__MPI(MPI_Comm_rank(node, &out->local_rank), out);
    MT__MPI(MPI_Comm_size(node, &out->local_size), out);
    MT__MPI(MPI_Allgather(&leader, 1, MPI_INT, leaders, 1, MPI_INT, c->comm), out);
    out->node_rank = 0;
    out->num_nodes = 0;
    for (int r = 0; r < c->size; r++) {
        if (leaders[r] != r)
            continue;
        out->num_nodes++;
        if (r < leader)
            out->node_rank++;
    }
out:
    if (node != MPI_COMM_NULL)
        MPI_Comm_free(&node);
    free(leaders);
    return rc;
}
