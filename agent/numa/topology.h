/*
 * nuksmd view of the host's NUMA topology: how many nodes merged pages
 * are placed on and which node each CPU belongs to.
 *
 * With --fake-numa N the host's CPUs are split into N logical nodes of
 * consecutive CPUs (CPU c is in node c * N / CPUs), so that placement can
 * be exercised and tested on a one-node host: decisions and statistics
 * then use the logical nodes, and the store is not bound to real ones.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_TOPOLOGY_H
#define NUKSMD_TOPOLOGY_H

#include <sched.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct Topology {
    uint32_t nr_nodes;       /* 1..NUKSM_MAX_NODES */
    bool fake;               /* logical nodes (--fake-numa) */
    uint32_t nr_cpus;        /* CPUs with a node, 0..CPU_SETSIZE */
    uint8_t cpu_node[CPU_SETSIZE];
} Topology;

/*
 * @fake_nodes logical nodes if non-zero, else the host's configured
 * nodes (1 without NUMA support), capped at NUKSM_MAX_NODES.
 */
void topology_init(Topology *t, uint32_t fake_nodes);

/* The CPUs of @node. */
uint32_t topology_node_cpus(const Topology *t, uint32_t node);

/* The CPUs of @node, into @cpus. */
void topology_node_cpu_set(const Topology *t, uint32_t node, cpu_set_t *cpus);

/*
 * The host memory nodes of @node, as a bitmap: @node itself, or with
 * logical nodes the real nodes its CPUs are on.
 */
uint64_t topology_node_mems(const Topology *t, uint32_t node);

/*
 * The free memory of @node, in pages; UINT64_MAX where it is not known
 * (logical nodes, no NUMA support).
 */
uint64_t topology_node_free_pages(const Topology *t, uint32_t node);

/* Bitmap of the nodes whose CPUs @cpus contains. */
uint64_t topology_nodes_of(const Topology *t, const cpu_set_t *cpus);

/* The node of @cpu, 0 for a CPU the topology does not know. */
static inline uint32_t topology_cpu_node(const Topology *t, uint32_t cpu)
{
    return cpu < t->nr_cpus ? t->cpu_node[cpu] : 0;
}

#endif /* NUKSMD_TOPOLOGY_H */
