/*
 * nuksmd co-location (AdaptMD-S): the plan that would bring similar VMs
 * onto one node, from the VMs as they are now.  GET_PLAN answers
 * administrators only, like GET_SIMILARITY: the plan names every
 * tenant's VMs.
 *
 * The VMs weighed are those with one guest node and a TOPOLOGY: where
 * they are is their home node; their memory, the RAM their TOPOLOGY
 * reports; their vCPUs, its threads.  One whose home comes from its
 * operator (vCPUs pinned to one node, a bound memory backend, cpuset
 * mems) is pinned there, unless --colocate-pins=move lets the plan move
 * it.  Each node's room is its free memory
 * (libnuma; not known on logical nodes: no limit) and its CPUs.  The
 * similarities are the sketches' (similarity.h); the thresholds,
 * --colocate-threshold, --colocate-min-gain and
 * --colocate-vcpus-per-cpu.
 *
 * Every COLOCATION_PERIOD_S it looks again, to keep each VM's most
 * similar VM of its domain (its twin) and its planned move, if any, for
 * LIST_VMS, and to tell each VM whose twin or move changed
 * (COLOCATION, which query-nuksm shows), with the adaptive scheme's
 * choice for its merge domain (colocate_scheme()); past
 * COLOCATION_VMS_PER_PERIOD VMs, one period for each that many VMs or
 * part of it.  A look exports each VM's sketch once and compares
 * every two VMs of a domain by a merge of their exports (core/sketch.h),
 * only when their sketches changed: some 80 ms of CPU for 100 VMs of one
 * domain.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_COLOCATION_H
#define NUKSMD_COLOCATION_H

#include "agent.h"

/* Seconds between two looks for LIST_VMS. */
#define COLOCATION_PERIOD_S 10
/*
 * With more VMs than this, looks come one period apart for each this
 * many VMs or part of it: a plan weighs every pair of VMs
 * (colocate_plan()), and an idle host's cost must grow no faster than
 * its VMs.
 */
#define COLOCATION_VMS_PER_PERIOD 32

void colocation_handle_get_plan(NuksmAgent *agent, NuksmClient *client,
                                uint32_t seq, const void *payload);

/*
 * What a fresh look plans for @vm: into *@move (its verdict, its
 * target), false if it is in no group that needs a move.
 */
bool colocation_move_of(NuksmAgent *agent, const NuksmClient *vm,
                        ColocateMove *move);

void colocation_start(NuksmAgent *agent);
void colocation_stop(NuksmAgent *agent);

#endif
