/*
 * nuksmd co-location plan (AdaptMD-S): which VMs to move to which node,
 * so that VMs that hold similar memory share a node and their pages
 * merge there, with no remote access.  Pure: the caller gives the VMs,
 * the nodes' room and the similarities (sketch.h); the plan says what
 * to move, what each move gains, and why any other move is refused.
 *
 * Groups.  Two VMs of one merge domain are similar when their
 * similarity reaches the threshold (AdaptMD: 40%); a group is the VMs
 * joined by similar pairs, closed transitively.  A group whose VMs sit
 * on one node needs nothing.
 *
 * Target.  A group goes to the node that already holds most of its
 * memory, so that the least memory moves, among the nodes with room for
 * the VMs that would come (free memory for their pages, and CPUs for
 * their vCPUs times the allowed overcommit); on a tie, the node that
 * moves fewer VMs, then the lower node.  A VM its operator pinned to
 * its node (vCPUs or memory bound to it) never moves: its node is the
 * group's target, and a group pinned to two nodes goes to the one that
 * holds more of it, the other pinned VMs refused.
 *
 * Gain.  A VM that moves gains the pages it holds alike with the
 * group's VMs already on the target, at least the most it holds alike
 * with any one of them; that is what merges there, locally, and what
 * no longer is read remotely.  A move that gains fewer than
 * min_gain_pages is refused and takes no room.
 *
 * Merge domains.  Each merge domain is planned by itself, within its
 * room: all of each node's room while its VMs are the only ones, else
 * its share (domain_room_pct) of each node's free memory and of its
 * vCPU slots, less the vCPUs of its own VMs there.  Everything the plan
 * weighs of a VM is the VM's claim (its memory, vCPUs, pins, digests),
 * so one domain's claims never change another domain's plan.
 *
 * Within a domain, groups are planned in order of their memory, largest
 * first, each planned move taking its room from the target and giving
 * it back to the node it leaves.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_COLOCATE_H
#define NUKSMD_COLOCATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <glib.h>

#include "nuksm-proto.h"

typedef struct ColocateVm {
    uint32_t id;             /* the caller's: carried into moves */
    uint16_t domain;         /* merge domain */
    uint32_t node;           /* where its vCPUs and memory are now */
    uint64_t pages;          /* its memory */
    uint32_t vcpus;
    bool pinned;             /* by its operator, to @node */
} ColocateVm;

typedef struct ColocateNode {
    uint64_t free_pages;     /* UINT64_MAX: not known, no limit */
    uint32_t cpus;
    uint64_t vcpus;          /* of the VMs on it now */
} ColocateNode;

typedef struct ColocatePair {
    uint32_t a, b;           /* indices of the VMs */
    uint32_t similarity_pm;  /* sketch_similarity_pm() */
    uint64_t alike_a;        /* a's pages whose content b holds */
    uint64_t alike_b;
} ColocatePair;

typedef struct ColocateParams {
    uint32_t threshold_pm;   /* similar from this similarity on */
    uint64_t min_gain_pages; /* a move must gain at least this many */
    uint32_t vcpus_per_cpu;  /* a node takes this many vCPUs per CPU at */
                             /* most; 0: no limit */
    uint32_t domain_room_pct;    /* each merge domain's share of a node's */
                                 /* room, while there are several */
} ColocateParams;

/* Which planned moves nuksmd may carry out (--colocate-apply). */
typedef enum ColocateApply {
    COLOCATE_APPLY_NONE,     /* none: the plan is only shown */
    COLOCATE_APPLY_LIBVIRT,  /* libvirt domains', through libvirt */
    COLOCATE_APPLY_ALL,      /* and other QEMUs', by nuksmd itself */
    COLOCATE_APPLY__MAX,
} ColocateApply;

typedef struct ColocateMove {
    uint32_t vm;             /* index of the VM */
    uint32_t group;          /* groups are numbered from 0 */
    uint32_t from, to;       /* @to: its group's target */
    uint64_t gain_pages;
    NuksmPlanVerdictId verdict;
} ColocateMove;

/*
 * The plan for @vms on @nodes: a ColocateMove for every VM of a group
 * that is not on its group's target, planned or refused, in the order
 * they were decided; the number of groups in *@nr_groups.  @nodes is
 * updated with the planned moves.
 */
GArray *colocate_plan(const ColocateVm *vms, size_t nr_vms,
                      ColocateNode *nodes, uint32_t nr_nodes,
                      const ColocatePair *pairs, size_t nr_pairs,
                      const ColocateParams *params, uint32_t *nr_groups);

/*
 * The adaptive scheme's choice (AdaptMD §III-D, Fig. 9) for merge domain
 * @domain, from @moves, the plan colocate_plan() made for @vms:
 * colocate (AdaptMD-S) while a move of one of its VMs is planned;
 * hot-local (AdaptMD-H) while some of its similar VMs sit apart and
 * none may move; global while none sit apart.
 */
NuksmSchemeId colocate_scheme(const GArray *moves, const ColocateVm *vms,
                              uint16_t domain);

/*
 * Does a VM whose home node @home came from @source count as pinned there
 * by its operator?  vCPUs pinned to one node, or memory a cpuset binds,
 * do, unless they hold it on @colocated_to, the node a planned move took
 * it to (NUKSM_MAX_NODES: none): those pins are nuksm's own.  A memory
 * backend bound to nodes always does; a home from where it ran, never.
 */
bool colocate_pinned_by_operator(NuksmHomeSourceId source, uint32_t home,
                                 uint32_t colocated_to);

#endif
