/*
 * nuksmd view of the host's NUMA topology.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <numa.h>
#include <unistd.h>

#include "log.h"
#include "nuksm-proto.h"
#include "topology.h"

static uint32_t host_nodes(void)
{
    int nodes;

    if (numa_available() < 0) {
        log_info("no NUMA support on this host, using 1 node");
        return 1;
    }
    nodes = numa_num_configured_nodes();
    if (nodes < 1) {
        return 1;
    }
    if ((unsigned)nodes > NUKSM_MAX_NODES) {
        log_warning("host has %d NUMA nodes, using the first %u",
                    nodes, NUKSM_MAX_NODES);
        return NUKSM_MAX_NODES;
    }
    return nodes;
}

void topology_init(Topology *t, uint32_t fake_nodes)
{
    long cpus = sysconf(_SC_NPROCESSORS_CONF);

    t->fake = fake_nodes != 0;
    t->nr_nodes = t->fake ? fake_nodes : host_nodes();
    t->nr_cpus = cpus < 1 ? 1 : cpus > CPU_SETSIZE ? CPU_SETSIZE : cpus;
    for (uint32_t c = 0; c < t->nr_cpus; c++) {
        int node = 0;

        if (t->fake) {
            node = (uint64_t)c * t->nr_nodes / t->nr_cpus;
        } else if (t->nr_nodes > 1) {
            node = numa_node_of_cpu(c);
        }
        t->cpu_node[c] = node >= 0 && (uint32_t)node < t->nr_nodes ? node : 0;
    }
}

uint32_t topology_node_cpus(const Topology *t, uint32_t node)
{
    uint32_t cpus = 0;

    for (uint32_t c = 0; c < t->nr_cpus; c++) {
        cpus += t->cpu_node[c] == node;
    }
    return cpus;
}

void topology_node_cpu_set(const Topology *t, uint32_t node, cpu_set_t *cpus)
{
    CPU_ZERO(cpus);
    for (uint32_t c = 0; c < t->nr_cpus; c++) {
        if (t->cpu_node[c] == node) {
            CPU_SET(c, cpus);
        }
    }
}

uint64_t topology_node_mems(const Topology *t, uint32_t node)
{
    uint64_t mems = 0;

    if (!t->fake) {
        return 1ull << node;
    }
    for (uint32_t c = 0; c < t->nr_cpus; c++) {
        int real = numa_available() < 0 ? 0 : numa_node_of_cpu(c);

        if (t->cpu_node[c] == node && real >= 0 && real < 64) {
            mems |= 1ull << real;
        }
    }
    return mems;
}

uint64_t topology_node_free_pages(const Topology *t, uint32_t node)
{
    long long free_bytes = 0;

    if (t->fake || numa_available() < 0 ||
        numa_node_size64(node, &free_bytes) < 0 || free_bytes < 0) {
        return UINT64_MAX;
    }
    return (uint64_t)free_bytes / NUKSM_PAGE_SIZE;
}

uint64_t topology_nodes_of(const Topology *t, const cpu_set_t *cpus)
{
    uint64_t nodes = 0;

    for (uint32_t c = 0; c < t->nr_cpus; c++) {
        if (CPU_ISSET(c, cpus)) {
            nodes |= 1ull << t->cpu_node[c];
        }
    }
    return nodes;
}
