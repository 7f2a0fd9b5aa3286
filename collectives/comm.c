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
    /* the duplicate first (every rank), then whether every rank has its memory: a rank
     * out of memory must not skip the collective duplicate or return alone */
    MPI_Comm dup = MPI_COMM_NULL;
    int e = MPI_Comm_dup(parent, &dup);
    if (e != MPI_SUCCESS)
        return mt__mpi_error(e, "MPI_Comm_dup");
    mt__comm *c = calloc(1, sizeof *c);
    int mine = c != NULL, all = 0;
    if (MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN) != MPI_SUCCESS ||
        MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, dup) != MPI_SUCCESS || !all) {
        rc = !mine ? mt__error(MT_ENOMEM, "out of memory allocating a communicator")
                   : mt__error(all ? MT_EMPI : MT_EPEER, "another rank could not create the "
                                                       "communicator (out of memory)");
        free(c);
        MPI_Comm_free(&dup);
        return rc;
    }
    c->comm = dup;
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
