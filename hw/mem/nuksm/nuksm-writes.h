/*
 * nuksm: the write-fault thread, which lifts the write protection of
 * tracked pages a guest writes (nuksm-writes.c).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef HW_MEM_NUKSM_WRITES_H
#define HW_MEM_NUKSM_WRITES_H

#include "nuksm.h"

typedef struct NuksmWrites NuksmWrites;

/*
 * Serve the write faults of @uffd, which the caller keeps open until
 * nuksm_writes_stop() returned.  NULL if no thread could be started.
 * Called without page_lock, or with it: the thread takes it per fault.
 */
NuksmWrites *nuksm_writes_start(Nuksm *s, int uffd);
/* Called without page_lock, which the thread may be waiting for. */
void nuksm_writes_stop(NuksmWrites *w);

#endif /* HW_MEM_NUKSM_WRITES_H */
