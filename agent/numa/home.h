/*
 * nuksmd home nodes: the host node each guest NUMA node of a VM should
 * find its memory on, derived from where its vCPU threads may and do run.
 *
 * A VM sends TOPOLOGY (its guest nodes, their memory backends' host-nodes
 * and policy, and the Linux thread id of every vCPU); the agent answers
 * HOME and re-evaluates every HOME_PERIOD_MS, so that `taskset`, `virsh
 * vcpupin`, `virsh numatune --live` or a scheduler moving an unpinned VM
 * are followed; a VM the scan budget has resting, its pace times less
 * often (budget.h), so that resting VMs cost what one costs.  It looks
 * at the vCPU threads (vcpus.h), and the rule (policy_home(), policy.h)
 * decides.  A home that moves starts re-placement (relocate.h).  The
 * nodes the agent places on are 0..N-1 (topology.h).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_HOME_H
#define NUKSMD_HOME_H

#include "agent.h"

#define HOME_PERIOD_MS      1000

/* Start and stop the periodic re-evaluation. */
void home_start(NuksmAgent *agent);
void home_stop(NuksmAgent *agent);

/* Free what placement keeps of a VM that is leaving. */
void home_client_destroy(ClientHome *home);

/* TOPOLOGY from a VM: record it and send its first HOME. */
void home_handle_topology(NuksmAgent *agent, NuksmClient *client,
                          uint32_t seq, const void *payload);

#endif /* NUKSMD_HOME_H */
