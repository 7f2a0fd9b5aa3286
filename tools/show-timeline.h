/*
 * show-timeline.h -- mpitrain-show --timeline (show-timeline.c says how it reads a run).
 */
#ifndef MT_SHOW_TIMELINE_H
#define MT_SHOW_TIMELINE_H

#include <stdio.h>

/* Prints, per rank of run_dir/trace/, the training thread's time per category, per step
 * and as a share; 0, or 1 after printing why to stderr (no trace, an unreadable file). */
int timeline_summary(const char *run_dir, FILE *out);

#endif
