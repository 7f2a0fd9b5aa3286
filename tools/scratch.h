/*
 * scratch.h -- a private temporary folder for a diagnostic program's run directory and
 * files (mpitrain-info, mpitrain-bench), so that they leave nothing behind unless asked.
 */
#ifndef MT_TOOLS_SCRATCH_H
#define MT_TOOLS_SCRATCH_H

#include <stdbool.h>
#include <stddef.h>

/* Job rank 0 makes BASE/PROG.XXXXXX (mkdtemp) and writes its path to path; with share,
 * every rank of MPI_COMM_WORLD learns it (collective over MPI_COMM_WORLD), else the other
 * ranks get "" (they write nothing there). 0, or -1 with the reason printed by rank 0 (with
 * share, on every rank: -1 everywhere). */
int scratch_make(const char *base, const char *prog, bool share, char *path, size_t len);
/* Job rank 0: remove path and everything in it (no-op for "" and on other ranks); the
 * program's own folder only. */
void scratch_remove(const char *path);

#endif
