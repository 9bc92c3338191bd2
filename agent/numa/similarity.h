/*
 * nuksmd similarity of VMs (AdaptMD-S): how much of their memory two VMs
 * of one merge domain hold alike, from their content sketches
 * (core/sketch.h), beside the exact figure the ledger gives once their
 * pages merged.  GET_SIMILARITY answers administrators only: the matrix
 * names every tenant's VMs.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_SIMILARITY_H
#define NUKSMD_SIMILARITY_H

#include "agent.h"

void similarity_handle_get(NuksmAgent *agent, NuksmClient *client,
                           uint32_t seq, const void *payload);

#endif
