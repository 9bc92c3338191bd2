/*
 * nuksm: PRUNE, every merged page unmerged on the agent's request
 * (nuksmctl prune), at a bounded rate.
 *
 * The scanner thread runs it, between passes.  Each merged page is
 * written in place, a write of what it holds (an atomic add of zero),
 * which the kernel serves as it serves a guest's write: a private copy
 * of the same content, the page's sharing broken (the fault threads
 * lift write tracking's protection first, as for a guest).  The guest
 * sees nothing: a vCPU writing the page meanwhile writes the copy or
 * the page before it, and the atomic add keeps its write either way.
 * The pages are then told to the agent (UNMERGED, PRUNED) and offered
 * again at the next pass, which the agent holds back until merging
 * works again (SET_RUN).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef HW_MEM_NUKSM_PRUNE_H
#define HW_MEM_NUKSM_PRUNE_H

#include "nuksm.h"

/*
 * Unmerge every merged page of @s, at most @rate pages per second, for
 * connection @epoch, with @pagemap_fd (/proc/self/pagemap).  Returns
 * false if it stopped short: the object quits, stops or restarts.
 * Called by the scanner thread without locks.
 */
bool nuksm_prune_run(Nuksm *s, uint32_t rate, uint32_t epoch,
                     int pagemap_fd);

#endif /* HW_MEM_NUKSM_PRUNE_H */
