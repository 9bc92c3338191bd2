/*
 * nuksmd placement policy (policy.h).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <stdlib.h>

#include <glib.h>

#include "policy.h"

/* Fixed, not random: the same contents place the same way every run. */
#define PRIORITY_SEED 0x6e756b736d707269ull

bool policy_page_hot(uint8_t written_idle, uint8_t read_idle,
                     uint32_t cold_windows)
{
    return MIN(written_idle, read_idle) < cold_windows;
}

bool policy_page_warm(uint8_t written_idle, uint8_t read_idle,
                      uint32_t cold_windows)
{
    return policy_page_hot(written_idle, read_idle,
                           MIN(cold_windows * POLICY_WARM_FACTOR,
                               NUKSM_IDLE_NEVER));
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
    case NUKSM_POLICY_ID_AUTO:
        return !o->warm;
    default:
        return true;
    }
}

bool policy_may_share(NuksmPolicyId policy, const PolicyOwner *a,
                      const PolicyOwner *b)
{
    bool a_there = policy_may_map(policy, a, b->home);
    bool b_there = policy_may_map(policy, b, a->home);

    /* auto: a copy on the warm page's node, if the other may map it. */
    if (policy == NUKSM_POLICY_ID_AUTO) {
        return a_there || b_there;
    }
    return a_there && b_there;
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

/* Owners in the draw's fixed order: by home node, then client id. */
static int compare_owners(const void *x, const void *y, void *owners)
{
    const PolicyOwner *o = owners;
    const PolicyOwner *a = &o[*(const size_t *)x];
    const PolicyOwner *b = &o[*(const size_t *)y];

    if (a->home != b->home) {
        return a->home < b->home ? -1 : 1;
    }
    return a->client < b->client ? -1 : a->client > b->client;
}

/* Most copies have this many owners or fewer. */
#define FEW_OWNERS 16

/*
 * Sorts @order (indexes into @o) in the draw's order: for a few owners
 * by insertion, with no call into the allocator.
 */
static void sort_owners(size_t *order, size_t m, const PolicyOwner *o)
{
    if (m > FEW_OWNERS) {
        qsort_r(order, m, sizeof(*order), compare_owners, (void *)o);
        return;
    }
    for (size_t i = 1; i < m; i++) {
        size_t x = order[i], j = i;

        for (; j > 0 && compare_owners(&order[j - 1], &x, (void *)o) > 0;
             j--) {
            order[j] = order[j - 1];
        }
        order[j] = x;
    }
}

static bool any_warm(const PolicyOwner *o, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (o[i].warm) {
            return true;
        }
    }
    return false;
}

static double weight(const PolicyOwner *o, bool equal)
{
    return equal ? 1 : o->priority;
}

/*
 * A uniform draw in [0, 1) with 53 bits, from the content alone, against
 * the owners taken in a fixed order (home node, then client id), each
 * with its share of [0, 1): its priority, or 1 each if @equal.  With
 * @warm_first, only the warm owners draw if any is warm.  An index into @o
 * (n >= 1).  Sorted once, not scanned for the next owner each time: the
 * pages of a copy may be many thousands.
 */
static size_t draw_owner(const PolicyOwner *o, size_t n, uint64_t digest,
                         bool warm_first, bool equal)
{
    double draw = (mix64(digest ^ PRIORITY_SEED) >> 11) * 0x1.0p-53;
    bool warm_only = warm_first && any_warm(o, n);
    /* No allocation per merge for a copy of a few owners. */
    size_t few[FEW_OWNERS];
    size_t *order = n > G_N_ELEMENTS(few) ? g_new(size_t, n) : few;
    double total = 0, below = 0;
    size_t m = 0, pick;

    for (size_t i = 0; i < n; i++) {
        if (!warm_only || o[i].warm) {
            order[m++] = i;
            total += weight(&o[i], equal);
        }
    }
    sort_owners(order, m, o);
    pick = order[m - 1];
    for (size_t k = 0; k < m; k++) {
        below += weight(&o[order[k]], equal);
        if (draw * total < below) {
            pick = order[k];
            break;
        }
    }
    if (order != few) {
        g_free(order);
    }
    return pick;
}

size_t policy_priority_pick(const PolicyOwner *o, size_t n, uint64_t digest)
{
    return draw_owner(o, n, digest, false, false);
}

uint32_t policy_new_copy(NuksmPolicyId policy, const PolicyLoad *load,
                         const PolicyOwner *a, const PolicyOwner *b,
                         uint64_t digest)
{
    const PolicyOwner owners[2] = { *a, *b };

    if (a->home == b->home) {
        return a->home;
    }
    switch (policy) {
    case NUKSM_POLICY_ID_KSM_ORDER:
        return a->client >= b->client ? a->home : b->home;
    case NUKSM_POLICY_ID_FAIR:
        if (any_warm(owners, 2)) {
            return owners[draw_owner(owners, 2, digest, true, true)].home;
        }
        return policy_emptier(load, a->home, b->home);
    case NUKSM_POLICY_ID_PRIORITY:
        return owners[draw_owner(owners, 2, digest, true, false)].home;
    case NUKSM_POLICY_ID_ADAPTIVE:
        return policy_emptier(load, a->home, b->home);
    case NUKSM_POLICY_ID_AUTO:
        if (!policy_may_map(policy, a, b->home)) {
            return a->home;
        }
        if (!policy_may_map(policy, b, a->home)) {
            return b->home;
        }
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

bool policy_moves_by_hotness(NuksmPolicyId policy)
{
    return policy == NUKSM_POLICY_ID_FAIR ||
           policy == NUKSM_POLICY_ID_PRIORITY ||
           policy == NUKSM_POLICY_ID_AUTO;
}

bool policy_moves_pages(NuksmPolicyId policy)
{
    return policy == NUKSM_POLICY_ID_LOCAL ||
           policy == NUKSM_POLICY_ID_AUTO;
}

uint32_t policy_relocate_page(NuksmPolicyId policy, const PolicyOwner *o,
                              uint32_t node, bool owner_there)
{
    if (!policy_may_map(policy, o, node)) {
        return o->home;
    }
    /* auto: a copy no owner is at home with is remote for all of them. */
    return policy == NUKSM_POLICY_ID_AUTO && !owner_there ? o->home : node;
}

/*
 * fair: the draw among the warm owners if any; else, idle, towards the
 * emptiest owner's node when the nodes are unbalanced.
 */
static uint32_t fair_relocate_node(const PolicyLoad *load, uint32_t node,
                                   const PolicyOwner *o, size_t n,
                                   uint64_t digest)
{
    uint32_t best = node;

    if (any_warm(o, n)) {
        return o[draw_owner(o, n, digest, true, true)].home;
    }
    for (size_t i = 0; i < n; i++) {
        best = policy_emptier(load, best, o[i].home);
    }
    return load->copies[node] > load->copies[best] + 1 ? best : node;
}

uint32_t policy_relocate_node(NuksmPolicyId policy, const PolicyLoad *load,
                              uint32_t node, const PolicyOwner *o, size_t n,
                              uint64_t digest)
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
        return o[draw_owner(o, n, digest, true, false)].home;
    case NUKSM_POLICY_ID_FAIR:
        return fair_relocate_node(load, node, o, n, digest);
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
