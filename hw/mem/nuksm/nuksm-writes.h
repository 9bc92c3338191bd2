/*
 * nuksm: the fault threads, which lift the write protection of tracked
 * pages a guest writes and map back merged pages a guest reads while
 * read sampling had dropped them (nuksm-writes.c).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef HW_MEM_NUKSM_WRITES_H
#define HW_MEM_NUKSM_WRITES_H

#include "nuksm.h"

typedef struct NuksmWrites NuksmWrites;

/*
 * Serve the faults of @uffd, which the caller keeps open until
 * nuksm_writes_stop() returned.  NULL if the threads could not be
 * started.  Called without page_lock, or with it: the threads take it
 * per write fault.
 */
NuksmWrites *nuksm_writes_start(Nuksm *s, int uffd);
/* Called without page_lock, which a thread may be waiting for. */
void nuksm_writes_stop(NuksmWrites *w);

#endif /* HW_MEM_NUKSM_WRITES_H */
