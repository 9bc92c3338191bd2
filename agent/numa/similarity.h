/*
 * nuksmd similarity of VMs (AdaptMD-S): how much of their memory two VMs
 * of one merge domain hold alike, from their content sketches
 * (core/sketch.h), beside the exact figure the ledger gives once their
 * pages merged; and each VM's sketch, for fleets to compare VMs across
 * hosts.  GET_SIMILARITY and GET_SKETCH answer administrators only: they
 * name every tenant's VMs.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_SIMILARITY_H
#define NUKSMD_SIMILARITY_H

#include "agent.h"

void similarity_handle_get(NuksmAgent *agent, NuksmClient *client,
                           uint32_t seq, const void *payload);

/*
 * The export of each of @vms's sketches (NuksmClient *; a GArray each,
 * sketch_export()), in the same order: to compare many pairs.
 */
GPtrArray *similarity_exports(GPtrArray *vms);

/* GET_SKETCH: one VM's sketch, as sketch_export() gives it. */
void similarity_handle_get_sketch(NuksmAgent *agent, NuksmClient *client,
                                  uint32_t seq, const void *payload);

#endif
