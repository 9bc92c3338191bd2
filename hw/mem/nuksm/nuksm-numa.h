/*
 * nuksm: the VM's NUMA layout for the agent, the home nodes it answers,
 * and where merged pages live relative to them (nuksm-numa.c).  Main
 * loop (BQL) only.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef HW_MEM_NUKSM_NUMA_H
#define HW_MEM_NUKSM_NUMA_H

#include "nuksm.h"

/* After each handshake: TOPOLOGY, the guest's layout. */
void nuksm_numa_send_topology(Nuksm *s);
/* HOME: keep the home nodes; new ones offer every page again. */
void nuksm_numa_handle_home(Nuksm *s, const NuksmMsgHome *h);
/* Merged pages on their guest node's home node, and elsewhere. */
void nuksm_numa_locality(Nuksm *s, uint64_t *local, uint64_t *remote);
NuksmHomeNodeList *nuksm_numa_home_list(Nuksm *s);

#endif /* HW_MEM_NUKSM_NUMA_H */
