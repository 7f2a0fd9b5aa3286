/*
 * environ.c -- the environment variables that libraries written for torchrun and for
 * thread pools read, set before each attempt's training function runs.
 *
 * The rank variables always take the context's values: a RANK left in the environment by
 * an outer launcher or a shell would be wrong on every rank but one. The thread-count
 * variables are the user's to choose: one that is set is left alone, unless it still holds
 * the value this file put there (then it follows the context, e.g. a later fit).
 */
#include "runtime.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const thread_vars[] = {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                          "MKL_NUM_THREADS"};
static char ours[sizeof thread_vars / sizeof *thread_vars][16]; /* what we set, "" = none */

static void put(const char *name, int value, char *remember, size_t len)
{
    char text[16];
    snprintf(text, sizeof text, "%d", value);
    const char *now = getenv(name);
    if (now && !strcmp(now, text)) { /* each attempt sets the same values: no churn */
        if (remember)
            snprintf(remember, len, "%s", text);
        return;
    }
    if (setenv(name, text, 1) != 0) /* ENOMEM only: the names are valid */
        fprintf(stderr, "mpitrain: warning: cannot set %s=%s: %s\n", name, text,
                strerror(errno));
    else if (remember)
        snprintf(remember, len, "%s", text);
}

void mt__export_env(const mt_context *c)
{
    put("RANK", mt_world_rank(c), NULL, 0);
    put("WORLD_SIZE", mt_world_size(c), NULL, 0);
    put("LOCAL_RANK", mt_local_rank(c), NULL, 0);
    put("LOCAL_WORLD_SIZE", mt_local_world_size(c), NULL, 0);
    put("NODE_RANK", mt_node_rank(c), NULL, 0);
    put("GROUP_RANK", mt_node_rank(c), NULL, 0); /* torchrun's name for the node rank */
    for (size_t i = 0; i < sizeof thread_vars / sizeof *thread_vars; i++) {
        const char *now = getenv(thread_vars[i]);
        if (now && !(ours[i][0] && !strcmp(now, ours[i])))
            continue; /* the user's (an empty value too) */
        put(thread_vars[i], mt_num_cpus(c), ours[i], sizeof ours[i]);
    }
}
