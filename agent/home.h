/*
 * nuksmd home nodes: the host node each guest NUMA node of a VM should
 * find its memory on, derived from where its vCPU threads may and do run.
 *
 * A VM sends TOPOLOGY (its guest nodes, their memory backends' host-nodes
 * and policy, and the Linux thread id of every vCPU); the agent answers
 * HOME and re-evaluates every HOME_PERIOD_MS, so that `taskset`, `virsh
 * vcpupin`, `virsh numatune --live` or a scheduler moving an unpinned VM
 * are followed.  For each guest node, in order:
 *
 *   pinned   its vCPUs may only run on CPUs of one node: that node
 *   backend  its memory backend is bound to (or prefers) host nodes: the
 *            lowest of them
 *   memory   its vCPUs may only allocate memory on some of the nodes the
 *            agent places on, not all (their cpuset's mems, as `virsh
 *            numatune --nodeset` or libvirt's <numatune> set them; the
 *            kernel shows them as Mems_allowed_list in
 *            /proc/PID/task/TID/status): the lowest of them.  Never with
 *            --fake-numa: logical nodes split the CPUs, not the memory, so
 *            the real memory nodes a cpuset allows say nothing about them
 *   running  where most of its vCPUs ran last, once that has held for
 *            HOME_RUNNING_STREAK evaluations (a scheduler's migrations
 *            must not make merged pages follow every hop)
 *   default  node 0
 *
 * A guest node without vCPUs (memory only) goes by all the VM's vCPUs.
 * The vCPUs of a guest node count together: pinned looks at the union of
 * the nodes they may run on, memory at the union of those they may
 * allocate on (a status that does not parse counts as every node).
 * The nodes the agent places on are 0..N-1 (agent/topology.h).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_HOME_H
#define NUKSMD_HOME_H

#include "agent.h"

#define HOME_PERIOD_MS      1000
#define HOME_RUNNING_STREAK 3

/* Start and stop the periodic re-evaluation. */
void home_start(NuksmAgent *agent);
void home_stop(NuksmAgent *agent);

/* TOPOLOGY from a VM: record it and send its first HOME. */
void home_handle_topology(NuksmAgent *agent, NuksmClient *client,
                          uint32_t seq, const void *payload);

/*
 * The memory source, pure so that unit tests reach it.
 *
 * home_parse_nodes: the nodes of a Linux node list as the kernel prints
 * Mems_allowed_list ("0", "0-1", "0,2-3", "" for none; white space around
 * it is ignored) into *@nodes.  False, and *@nodes untouched, for anything
 * else: a malformed list, a reversed range, a node above 63.
 *
 * home_memory_node: the home the memory source gives vCPUs allowed memory
 * on @allowed when the agent places on @placed: the lowest node of
 * @allowed if it is a non-empty strict subset of @placed, else -1 (the
 * source does not apply).
 */
bool home_parse_nodes(const char *list, uint64_t *nodes);
int home_memory_node(uint64_t allowed, uint64_t placed);

#endif /* NUKSMD_HOME_H */
