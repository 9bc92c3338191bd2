/*
 * nuksmd mappers: the processes that may map the store, that is every
 * VM that joined an agent of this state directory and still runs.  Only
 * they received a store descriptor, so only they (QEMU never passes it
 * on) can map slots over guest RAM.  Kept in <state-dir>/mappers, one
 * "pid starttime" line each, so that a restarted agent knows whose
 * mappings to look at (mapwatch.h) before those VMs come back.  A pid
 * names the same process only while its start time (/proc/<pid>/stat)
 * matches.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_MAPPERS_H
#define NUKSMD_MAPPERS_H

#include <stdbool.h>
#include <sys/types.h>

#include <glib.h>

typedef struct Mappers {
    char *path;              /* <state-dir>/mappers */
    GHashTable *procs;       /* pid -> start time (guint64 *) */
    guint prune_at;          /* drop the exited when procs has this many */
} Mappers;

/* Load the list in @dir, keeping the processes that still run. */
void mappers_open(Mappers *m, const char *dir);
void mappers_close(Mappers *m);

/*
 * Process @pid received the store: add it.  False if it is gone.  The
 * list is pruned of exited processes whenever it doubled.
 */
bool mappers_add(Mappers *m, pid_t pid);

/* Drop the processes that exited; the pids of those that run, sorted. */
GArray *mappers_live(Mappers *m);

#endif /* NUKSMD_MAPPERS_H */
