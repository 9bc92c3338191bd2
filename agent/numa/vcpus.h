/*
 * nuksmd vCPU threads: what the kernel shows of where a VM's vCPU
 * threads may run, may allocate memory and last ran, for the home
 * decision (policy_home(), policy.h).  Every read of /proc and of CPU
 * affinity the agent makes for NUMA placement is here.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_VCPUS_H
#define NUKSMD_VCPUS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "topology.h"

/* What the kernel shows of one vCPU thread now. */
typedef struct VcpuSeen {
    uint64_t allowed;        /* nodes it may run on; 0: not known */
    /*
     * Nodes it may allocate memory on: its cpuset's mems, which the
     * kernel shows as Mems_allowed_list in /proc/PID/task/TID/status (all
     * 64 if that does not parse).  0: not known, or logical nodes
     * (--fake-numa), which split the CPUs, not the memory, so that the
     * real memory nodes a cpuset allows say nothing about them.
     */
    uint64_t mems;
    int node;                /* node it ran on last; -1: not known */
} VcpuSeen;

/* Look at thread @tid of @pid, a vCPU, with @topo's nodes. */
void vcpus_observe(const Topology *topo, pid_t pid, uint32_t tid,
                   VcpuSeen *seen);

/* Is @tid a thread of process @pid? */
bool vcpus_own_thread(pid_t pid, uint32_t tid);

/*
 * The nodes of a Linux node list as the kernel prints Mems_allowed_list
 * ("0", "0-1", "0,2-3", "" for none; white space around it is ignored)
 * into *@nodes.  False, and *@nodes untouched, for anything else: a
 * malformed list, a reversed range, a node above 63.
 */
bool vcpus_parse_nodes(const char *list, uint64_t *nodes);

#endif /* NUKSMD_VCPUS_H */
