/*
 * comm.c -- the workers' communicator: a private duplicate with MPI_ERRORS_RETURN, so MPI
 * failures reach the library as codes instead of aborting, and library traffic never
 * matches the application's.
 */
#include "collectives.h"

#include <stdlib.h>

int mt__comm_create(mt__comm **out, MPI_Comm parent)
{
    int rc = MT_OK;
    *out = NULL;
    mt__comm *c = calloc(1, sizeof *c);
    MT__CHECK(c, MT_ENOMEM, fail, "out of memory allocating a communicator");
    c->comm = MPI_COMM_NULL;
    MT__MPI(MPI_Comm_dup(parent, &c->comm), fail);
    MT__MPI(MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN), fail);
    MT__MPI(MPI_Comm_rank(c->comm, &c->rank), fail);
    MT__MPI(MPI_Comm_size(c->comm, &c->size), fail);
    *out = c;
    return MT_OK;
fail:
    mt__comm_destroy(&c);
    return rc;
}

void mt__comm_destroy(mt__comm **cp)
{
    if (!cp || !*cp)
        return;
    mt__comm *c = *cp;
    if (c->comm != MPI_COMM_NULL)
        MPI_Comm_free(&c->comm);
    free(c);
    *cp = NULL;
}
