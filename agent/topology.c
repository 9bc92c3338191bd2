/*
 * nuksmd view of the host's NUMA topology.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <numa.h>

#include "log.h"
#include "nuksm-proto.h"
#include "topology.h"

uint32_t topology_nr_nodes(uint32_t fake_nodes)
{
    int nodes;

    if (fake_nodes) {
        return fake_nodes;
    }
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
