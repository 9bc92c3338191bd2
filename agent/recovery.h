/*
 * nuksmd crash recovery.  The store files outlive the agent, and so do
 * the VMs' mappings of them.  A new agent takes every page it finds in
 * the store as an orphan; VMs that reconnect send RESTORE for the pages
 * they still map, which makes them slots again with their generation and
 * references.  Once the grace period is over, the orphans nobody restored
 * are punched out.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_RECOVERY_H
#define NUKSMD_RECOVERY_H

#include "agent.h"

/* Claim the store's pages as orphans; free them @grace seconds later. */
void recovery_start(NuksmAgent *agent, uint32_t grace);

void recovery_stop(NuksmAgent *agent);

void recovery_handle_restore(NuksmAgent *agent, NuksmClient *client,
                             uint32_t seq, const void *payload);

#endif /* NUKSMD_RECOVERY_H */
