/*
 * nuksmd placement: which node's store holds a new merged page.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_PLACEMENT_H
#define NUKSMD_PLACEMENT_H

#include "agent.h"

/*
 * The node for a slot that @a's page and @b's page will share, under the
 * agent's policy.  Every policy places on node 0 for now.
 */
uint32_t placement_choose_node(NuksmAgent *agent, const NuksmClient *a,
                               const NuksmClient *b);

#endif /* NUKSMD_PLACEMENT_H */
