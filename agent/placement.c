/*
 * nuksmd placement.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "placement.h"

/* Fixed, not random: the same contents place the same way every run. */
#define PRIORITY_SEED 0x6e756b736d707269ull

bool placement_may_map(const NuksmAgent *agent, const PlacementPage *p,
                       uint32_t node)
{
    if (node == p->home) {
        return true;
    }
    switch (agent->policy) {
    case NUKSM_POLICY_ID_LOCAL:
        return false;
    case NUKSM_POLICY_ID_ADAPTIVE:
        return !p->hot;
    default:
        return true;
    }
}

bool placement_may_share(const NuksmAgent *agent, const PlacementPage *a,
                         const PlacementPage *b)
{
    return placement_may_map(agent, a, b->home) &&
           placement_may_map(agent, b, a->home);
}

/* splitmix64's finaliser: a well-mixed 64-bit hash of @x. */
static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* The owner's node with fewer store pages: keeps nodes balanced. */
static uint32_t emptier(const NuksmAgent *agent, uint32_t x, uint32_t y)
{
    return agent->slots[y].nr_used < agent->slots[x].nr_used ? y : x;
}

/* Copies hot for both owners: the node that has had fewer, in turn. */
static uint32_t next_hot_turn(NuksmAgent *agent, uint32_t x, uint32_t y)
{
    uint32_t node = agent->hot_shared[y] < agent->hot_shared[x] ? y : x;

    agent->hot_shared[node]++;
    return node;
}

static bool owner_before(const PlacementPage *x, const PlacementPage *y)
{
    return x->home != y->home ? x->home < y->home :
           x->client->id < y->client->id;
}

/*
 * A uniform draw in [0, 1) with 53 bits, from the content alone, against
 * the owners in a fixed order: which page completed the match (a matter
 * of timing) does not change the outcome.
 */
size_t placement_priority_pick(const PlacementPage *p, size_t n,
                               uint64_t digest)
{
    double draw = (mix64(digest ^ PRIORITY_SEED) >> 11) * 0x1.0p-53;
    double total = 0, below = 0;
    bool *taken = g_newa(bool, n);
    size_t pick = 0;

    for (size_t i = 0; i < n; i++) {
        total += p[i].client->priority;
        taken[i] = false;
    }
    /* Owners in order, each with its share of [0, 1). */
    for (size_t k = 0; k < n; k++) {
        size_t first = n;

        for (size_t i = 0; i < n; i++) {
            if (!taken[i] && (first == n || owner_before(&p[i], &p[first]))) {
                first = i;
            }
        }
        taken[first] = true;
        pick = first;
        below += p[first].client->priority;
        if (draw * total < below) {
            break;
        }
    }
    return pick;
}

uint32_t placement_choose_node(NuksmAgent *agent, const PlacementPage *a,
                               const PlacementPage *b, uint64_t digest,
                               uint32_t *hot_owner)
{
    *hot_owner = 0;
    if (a->home == b->home) {
        return a->home;
    }
    switch (agent->policy) {
    case NUKSM_POLICY_ID_KSM_ORDER:
        return a->client->id >= b->client->id ? a->home : b->home;
    case NUKSM_POLICY_ID_FAIR:
        if (a->hot != b->hot) {
            const PlacementPage *owner = a->hot ? a : b;

            *hot_owner = owner->client->id;
            return owner->home;
        }
        if (a->hot) {
            return next_hot_turn(agent, a->home, b->home);
        }
        return emptier(agent, a->home, b->home);
    case NUKSM_POLICY_ID_PRIORITY: {
        const PlacementPage pages[2] = { *a, *b };

        return pages[placement_priority_pick(pages, 2, digest)].home;
    }
    case NUKSM_POLICY_ID_ADAPTIVE:
        return emptier(agent, a->home, b->home);
    case NUKSM_POLICY_ID_GLOBAL:
    case NUKSM_POLICY_ID_LOCAL:    /* never across nodes */
    default:
        return a->home;
    }
}
