/*
 * nuksmd placement.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "placement.h"

uint32_t placement_choose_node(NuksmAgent *agent, const NuksmClient *a,
                               const NuksmClient *b)
{
    return 0;
}
