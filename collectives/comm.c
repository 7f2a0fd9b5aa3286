/*
 * comm.c -- the workers' communicator: a private duplicate with MPI_ERRORS_RETURN, so MPI
 * failures reach the library as codes instead of aborting, and library traffic never
 * matches the application's. Creating one is agreed before and after MPI_Comm_dup, so a
 * rank that fails to allocate or to duplicate fails every rank's creation.
 */
#include "collectives.h"

#include <stdlib.h>

int mt__comm_create(mt__comm **out, MPI_Comm parent)
{
    int rc = MT_OK, rank = 0;
    *out = NULL;
    MPI_Comm_rank(parent, &rank);
    mt__comm *c = mt__test_fail("comm-alloc", rank) ? NULL : calloc(1, sizeof *c);
    if (!c)
        rc = mt__error(MT_ENOMEM, "rank %d: out of memory allocating a communicator", rank);
    else
        c->comm = MPI_COMM_NULL;
    /* no rank may enter MPI_Comm_dup while another has given up */
    if ((rc = mt__agree_setup(parent, rc)))
        goto fail;
    MT__MPI(MPI_Comm_dup(parent, &c->comm), agree);
    MT__MPI(MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN), agree);
    MT__MPI(MPI_Comm_rank(c->comm, &c->rank), agree);
    MT__MPI(MPI_Comm_size(c->comm, &c->size), agree);
agree: /* a communicator that one rank lacks is no communicator */
    if ((rc = mt__agree_setup(parent, rc)))
        goto fail;
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
