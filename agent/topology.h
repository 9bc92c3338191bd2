/*
 * nuksmd view of the host's NUMA topology.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_TOPOLOGY_H
#define NUKSMD_TOPOLOGY_H

#include <stdint.h>

/*
 * Number of NUMA nodes to place merged pages on: @fake_nodes if non-zero,
 * else the host's configured nodes (1 without NUMA support), capped at
 * NUKSM_MAX_NODES.
 */
uint32_t topology_nr_nodes(uint32_t fake_nodes);

#endif /* NUKSMD_TOPOLOGY_H */
