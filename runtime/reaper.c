/*
 * reaper.c -- removing the checkpoints retention dropped without holding up training: each
 * folder is renamed to .NAME.drop at once, then a thread removes them; the next drop and
 * mt__run_free wait for it. A crash leaves .drop folders that the next start removes.
 */
#include "runtime.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char **paths;
    int n;
} reap_job;

static void *reap_main(void *arg)
{
    reap_job *j = arg;
    for (int i = 0; i < j->n; i++) {
        if (mt__rmtree(j->paths[i]))
            fprintf(stderr, "mpitrain: warning: %s (the next start removes it)\n", mt_last_error());
        free(j->paths[i]);
    }
    free(j->paths);
    free(j);
    return NULL;
}

void mt__run_reap_wait(mt__rundir *r)
{
    if (r->reaping) {
        pthread_join(r->reaper, NULL);
        r->reaping = false;
    }
}

int mt__run_drop(mt__rundir *r, const char *const *names, int n)
{
    mt__run_reap_wait(r);
    if (n == 0)
        return MT_OK;
    reap_job *j = calloc(1, sizeof *j);
    if (j)
        j->paths = calloc((size_t)n, sizeof *j->paths);
    int rc = j && j->paths ? MT_OK : mt__error(MT_ENOMEM, "out of memory dropping checkpoints");
    for (int i = 0; i < n && !rc; i++) {
        char from[4096], to[4096];
        snprintf(from, sizeof from, "%s/%s", r->dir, names[i]);
        snprintf(to, sizeof to, "%s/.%s.drop", r->dir, names[i]);
        mt__rmtree(to); /* a leftover of its own name, or a link: the name only */
        if (rename(from, to) != 0 && errno != ENOENT)
            rc = mt__error(MT_EIO, "cannot remove %s: %s", from, strerror(errno));
        else if (!(j->paths[j->n++] = mt__strdup(to)))
            rc = mt__error(MT_ENOMEM, "out of memory dropping checkpoints");
    }
    if (!rc && pthread_create(&r->reaper, NULL, reap_main, j) == 0) {
        r->reaping = true;
        return MT_OK;
    }
    for (int i = 0; j && j->paths && i < j->n; i++) { /* no thread: remove them here */
        if (j->paths[i] && !rc)
            rc = mt__rmtree(j->paths[i]);
        free(j->paths[i]);
    }
    if (j)
        free(j->paths);
    free(j);
    return rc;
}
