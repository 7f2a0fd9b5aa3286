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
/* Collective over MPI_COMM_WORLD: the name of a diagnostic program's kept run when the
 * user gave a storage path but no name: PROG_YYYY-MM-DD_HH-MM-SS (local time, as the
 * trainer's mt_<date>_<time>), with -2, -3 ... appended while storage_path holds that
 * name already, so running the program again never meets its last run (a name the user
 * gives is refused when it exists). Rank 0's name, on every rank. */
void scratch_run_name(const char *prog, const char *storage_path, char *name, size_t len);
/* Collective over MPI_COMM_WORLD: job rank 0's choices, on every rank (one broadcast).
 * A program's choices between collective paths (a temporary folder or the user's
 * storage path, a new run's name or the user's) come from options and the environment,
 * which mpirun may give each rank differently: every rank takes rank 0's, so all enter
 * the same collectives. */
void scratch_agree(bool *keep, bool *new_name);
/* Job rank 0: remove path and everything in it (no-op for "" and on other ranks); the
 * program's own folder only. */
void scratch_remove(const char *path);

#endif
