/*
 * nuksmd placement policy (policy.h).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <glib.h>

#include "policy.h"

/* Fixed, not random: the same contents place the same way every run. */
#define PRIORITY_SEED 0x6e756b736d707269ull

bool policy_page_hot(uint8_t idle, uint32_t cold_windows)
{
    return idle < cold_windows;
}

bool policy_may_map(NuksmPolicyId policy, const PolicyOwner *o,
                    uint32_t node)
{
    if (node == o->home) {
        return true;
    }
    switch (policy) {
    case NUKSM_POLICY_ID_LOCAL:
        return false;
    case NUKSM_POLICY_ID_ADAPTIVE:
        return !o->hot;
    default:
        return true;
    }
}

bool policy_may_share(NuksmPolicyId policy, const PolicyOwner *a,
                      const PolicyOwner *b)
{
    return policy_may_map(policy, a, b->home) &&
           policy_may_map(policy, b, a->home);
}

uint32_t policy_emptier(const PolicyLoad *load, uint32_t x, uint32_t y)
{
    return load->copies[y] < load->copies[x] ? y : x;
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

static bool owner_before(const PolicyOwner *x, const PolicyOwner *y)
{
    return x->home != y->home ? x->home < y->home : x->client < y->client;
}

/*
 * A uniform draw in [0, 1) with 53 bits, from the content alone, against
 * the owners in a fixed order, each with its share of [0, 1).
 */
size_t policy_priority_pick(const PolicyOwner *o, size_t n, uint64_t digest)
{
    double draw = (mix64(digest ^ PRIORITY_SEED) >> 11) * 0x1.0p-53;
    double total = 0, below = 0;
    bool *taken = g_newa(bool, n);
    size_t pick = 0;

    for (size_t i = 0; i < n; i++) {
        total += o[i].priority;
        taken[i] = false;
    }
    for (size_t k = 0; k < n; k++) {
        size_t first = n;

        for (size_t i = 0; i < n; i++) {
            if (!taken[i] && (first == n || owner_before(&o[i], &o[first]))) {
                first = i;
            }
        }
        taken[first] = true;
        pick = first;
        below += o[first].priority;
        if (draw * total < below) {
            break;
        }
    }
    return pick;
}

/* fair, a copy hot for both owners: the node that has had fewer, in turn. */
static uint32_t next_hot_turn(PolicyLoad *load, uint32_t x, uint32_t y)
{
    uint32_t node = load->hot_turns[y] < load->hot_turns[x] ? y : x;

    load->hot_turns[node]++;
    return node;
}

uint32_t policy_new_copy(NuksmPolicyId policy, PolicyLoad *load,
                         const PolicyOwner *a, const PolicyOwner *b,
                         uint64_t digest, uint32_t *hot_owner)
{
    *hot_owner = 0;
    if (a->home == b->home) {
        return a->home;
    }
    switch (policy) {
    case NUKSM_POLICY_ID_KSM_ORDER:
        return a->client >= b->client ? a->home : b->home;
    case NUKSM_POLICY_ID_FAIR:
        if (a->hot != b->hot) {
            const PolicyOwner *owner = a->hot ? a : b;

            *hot_owner = owner->client;
            return owner->home;
        }
        if (a->hot) {
            return next_hot_turn(load, a->home, b->home);
        }
        return policy_emptier(load, a->home, b->home);
    case NUKSM_POLICY_ID_PRIORITY: {
        const PolicyOwner owners[2] = { *a, *b };

        return owners[policy_priority_pick(owners, 2, digest)].home;
    }
    case NUKSM_POLICY_ID_ADAPTIVE:
        return policy_emptier(load, a->home, b->home);
    case NUKSM_POLICY_ID_GLOBAL:
    case NUKSM_POLICY_ID_LOCAL:    /* never across nodes */
    default:
        return a->home;
    }
}

bool policy_moves_copies(NuksmPolicyId policy)
{
    return policy != NUKSM_POLICY_ID_GLOBAL &&
           policy != NUKSM_POLICY_ID_ADAPTIVE;
}

/* fair: with its hot owner if that one still maps it, else see above. */
static uint32_t fair_relocate_node(const PolicyLoad *load, uint32_t node,
                                   const PolicyOwner *o, size_t n,
                                   uint32_t hot_owner)
{
    uint32_t best = node;

    for (size_t i = 0; i < n; i++) {
        if (hot_owner && o[i].client == hot_owner) {
            return o[i].home;
        }
    }
    for (size_t i = 0; i < n; i++) {
        best = policy_emptier(load, best, o[i].home);
    }
    return load->copies[node] > load->copies[best] + 1 ? best : node;
}

uint32_t policy_relocate_node(NuksmPolicyId policy, const PolicyLoad *load,
                              uint32_t node, const PolicyOwner *o, size_t n,
                              uint32_t hot_owner, uint64_t digest)
{
    size_t last = 0;

    switch (policy) {
    case NUKSM_POLICY_ID_KSM_ORDER:
        for (size_t i = 1; i < n; i++) {
            if (o[i].client > o[last].client) {
                last = i;
            }
        }
        return o[last].home;
    case NUKSM_POLICY_ID_PRIORITY:
        return o[policy_priority_pick(o, n, digest)].home;
    case NUKSM_POLICY_ID_FAIR:
        return fair_relocate_node(load, node, o, n, hot_owner);
    default:
        return node;
    }
}

int policy_memory_node(uint64_t allowed, uint64_t placed)
{
    if (!allowed || (allowed & ~placed) || allowed == placed) {
        return -1;
    }
    return __builtin_ctzll(allowed);
}

static uint32_t lowest_node(uint64_t nodes)
{
    return __builtin_ctzll(nodes);
}

/* The home node @h's sources give, into h->source; h->node is the last. */
static uint32_t home_source(const PolicyHomeView *v, PolicyHome *h)
{
    uint64_t all_nodes = v->nr_nodes == 64 ? UINT64_MAX :
                         (1ull << v->nr_nodes) - 1;
    uint64_t backend = v->backend_nodes & all_nodes;
    const PolicyVcpus *c = &v->vcpus;
    uint32_t best = 0;
    int memory;

    if (c->count && c->allowed && !(c->allowed & (c->allowed - 1))) {
        h->source = NUKSM_HOME_PINNED;
        return lowest_node(c->allowed);
    }
    if (backend && v->backend_binds) {
        h->source = NUKSM_HOME_BACKEND;
        return lowest_node(backend);
    }
    memory = policy_memory_node(c->mems, all_nodes);
    if (memory >= 0) {
        h->source = NUKSM_HOME_MEMORY;
        return memory;
    }
    for (uint32_t n = 1; n < v->nr_nodes; n++) {
        if (c->running[n] > c->running[best]) {
            best = n;
        }
    }
    if (!c->running[best]) {
        h->source = NUKSM_HOME_DEFAULT;
        return 0;
    }
    h->source = NUKSM_HOME_RUNNING;
    return best;
}

void policy_home(const PolicyHomeView *v, PolicyHome *h)
{
    bool was_running = h->source == NUKSM_HOME_RUNNING;
    uint32_t node = home_source(v, h);

    if (h->source == NUKSM_HOME_RUNNING) {
        if (was_running && node != h->node &&
            ++h->streak < POLICY_HOME_RUNNING_STREAK) {
            return;
        }
        h->streak = 0;
    }
    h->node = node;
}
