/*
 * nuksmd placement: which pages may share a copy, and on which node the
 * copy lives, under the agent's policy (see NuksmPolicyId):
 *
 *   global     across nodes; the copy stays on the node of the page that
 *              completed the match
 *   ksm-order  across nodes; like kernel KSM, which keeps the page its
 *              scan reached last and scans VMs in the order they
 *              registered: the copy lives on the later VM's node
 *   local      only pages of one home node share a copy (KSM's
 *              merge_across_nodes=0)
 *   fair       nuKSM §4.1 for K nodes: a hot page's owner gets the copy;
 *              copies hot for two owners alternate between their nodes;
 *              cold copies go to the emptier of the owners' nodes
 *   priority   nuKSM §4.2: owner i gets the copy with probability
 *              priority_i / sum of priorities, drawn from a hash of the
 *              content (mix64 of the digest): the same contents and
 *              priorities place the same way in every run
 *   adaptive   AdaptMD-H: hot pages share only within their node, cold
 *              pages across nodes, placed as fair places cold ones
 *
 * A page is hot when the guest wrote it in one of the last
 * --cold-windows hotness windows of its VM (see nuksm-hot.c in QEMU).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_PLACEMENT_H
#define NUKSMD_PLACEMENT_H

#include "agent.h"

typedef struct PlacementPage {
    const NuksmClient *client;
    uint32_t home;           /* home node of the page's guest node */
    bool hot;
} PlacementPage;

/* May @p map a copy that lives on @node? */
bool placement_may_map(const NuksmAgent *agent, const PlacementPage *p,
                       uint32_t node);

/* May @a and @b share one copy? */
bool placement_may_share(const NuksmAgent *agent, const PlacementPage *a,
                         const PlacementPage *b);

/*
 * Which of @n pages sharing content @digest gets the copy under the
 * priority policy: a draw from the content against their owners'
 * priorities, owners taken by home node, then client id.  Returns an
 * index into @p.
 */
size_t placement_priority_pick(const PlacementPage *p, size_t n,
                               uint64_t digest);

/*
 * The node of a new copy of content @digest for @a, the page completing
 * the match, and @b, the page seen before; they may share one.  When the
 * copy goes where it does because it is hot for one owner only (fair),
 * *@hot_owner is that owner's client id, else 0.
 */
uint32_t placement_choose_node(NuksmAgent *agent, const PlacementPage *a,
                               const PlacementPage *b, uint64_t digest,
                               uint32_t *hot_owner);

#endif /* NUKSMD_PLACEMENT_H */
