/*
 * nuksmd co-location plan (colocate.h).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "colocate.h"

/* A node's room as the merge domain being planned may take it. */
typedef struct Room {
    uint64_t free_pages;     /* UINT64_MAX: not known, no limit */
    uint64_t vcpus_max;      /* UINT64_MAX: no limit */
    uint64_t vcpus;          /* of the VMs it counts on the node now */
} Room;

/* What the plan knows while it works. */
typedef struct Planner {
    const ColocateVm *vms;
    ColocateNode *nodes;
    Room room[NUKSM_MAX_NODES];  /* the domain's, being planned */
    uint32_t nr_nodes;
    const ColocatePair *pairs;
    GHashTable *pair_of;     /* pair_key() -> index into pairs + 1 */
    const ColocateParams *params;
} Planner;

/* What moving a group to one node would take. */
typedef struct Landing {
    uint32_t node;
    uint64_t staying_pages;  /* the group's memory already there */
    uint64_t pages;          /* of the VMs that would move there */
    uint32_t vcpus;
    uint32_t movers;
    bool fits;
} Landing;

static uint64_t pair_key(uint32_t a, uint32_t b)
{
    return a < b ? (uint64_t)a << 32 | b : (uint64_t)b << 32 | a;
}

static uint32_t root_of(uint32_t *parent, uint32_t x)
{
    while (parent[x] != x) {
        parent[x] = parent[parent[x]];
        x = parent[x];
    }
    return x;
}

/* How many of @v's pages @u holds alike: 0 without a pair. */
static uint64_t alike(const Planner *p, uint32_t v, uint32_t u)
{
    uint64_t key = pair_key(v, u);
    guint i = GPOINTER_TO_UINT(g_hash_table_lookup(p->pair_of, &key));
    const ColocatePair *pair;

    if (!i) {
        return 0;
    }
    pair = &p->pairs[i - 1];
    return pair->a == v ? pair->alike_a : pair->alike_b;
}

/* What @v gains on @node: the most it holds alike with a VM there. */
static uint64_t gain_on(const Planner *p, const GArray *group, uint32_t v,
                        uint32_t node)
{
    uint64_t gain = 0;

    for (guint i = 0; i < group->len; i++) {
        uint32_t u = g_array_index(group, uint32_t, i);

        if (u != v && p->vms[u].node == node) {
            gain = MAX(gain, alike(p, v, u));
        }
    }
    return gain;
}

/* Would @v move to @node with its group, were it the target? */
static bool would_move(const Planner *p, const GArray *group, uint32_t v,
                       uint32_t node)
{
    return p->vms[v].node != node && !p->vms[v].pinned &&
           gain_on(p, group, v, node) >= p->params->min_gain_pages;
}

static bool has_room(const Planner *p, const Landing *l)
{
    const Room *r = &p->room[l->node];

    return (r->free_pages == UINT64_MAX || l->pages <= r->free_pages) &&
           (r->vcpus_max == UINT64_MAX || r->vcpus + l->vcpus <= r->vcpus_max);
}

/* @vm's memory and vCPUs come to (@sign 1) or leave (-1) a node. */
static void take_room(uint64_t *free_pages, uint64_t *vcpus, int sign,
                      const ColocateVm *vm)
{
    if (*free_pages != UINT64_MAX) {
        *free_pages = sign > 0 ? *free_pages - MIN(*free_pages, vm->pages)
                               : *free_pages + vm->pages;
    }
    *vcpus = sign > 0 ? *vcpus + vm->vcpus
                      : *vcpus - MIN(*vcpus, vm->vcpus);
}

/* A planned move of @vm from node @from to @to: the room it takes. */
static void move_room(Planner *p, const ColocateVm *vm, uint32_t from,
                      uint32_t to)
{
    take_room(&p->room[to].free_pages, &p->room[to].vcpus, 1, vm);
    take_room(&p->nodes[to].free_pages, &p->nodes[to].vcpus, 1, vm);
    if (from < p->nr_nodes) {
        take_room(&p->room[from].free_pages, &p->room[from].vcpus, -1, vm);
        take_room(&p->nodes[from].free_pages, &p->nodes[from].vcpus, -1,
                  vm);
    }
}

static Landing land(const Planner *p, const GArray *group, uint32_t node)
{
    Landing l = { .node = node };

    for (guint i = 0; i < group->len; i++) {
        uint32_t v = g_array_index(group, uint32_t, i);

        if (p->vms[v].node == node) {
            l.staying_pages += p->vms[v].pages;
        } else if (would_move(p, group, v, node)) {
            l.pages += p->vms[v].pages;
            l.vcpus += p->vms[v].vcpus;
            l.movers++;
        }
    }
    l.fits = has_room(p, &l);
    return l;
}

/* Is @a the better landing: more memory staying, fewer VMs moving? */
static bool better(const Landing *a, const Landing *b)
{
    if (a->staying_pages != b->staying_pages) {
        return a->staying_pages > b->staying_pages;
    }
    if (a->movers != b->movers) {
        return a->movers < b->movers;
    }
    return a->node < b->node;
}

/*
 * The group's target: among the nodes of its pinned VMs if it has any,
 * else among the nodes it is on, the best that has room, else the best.
 */
static Landing choose_target(const Planner *p, const GArray *group)
{
    bool pinned = false;
    Landing best = { .node = UINT32_MAX }, best_fit = { .node = UINT32_MAX };

    for (guint i = 0; i < group->len; i++) {
        pinned |= p->vms[g_array_index(group, uint32_t, i)].pinned;
    }
    for (guint i = 0; i < group->len; i++) {
        const ColocateVm *v = &p->vms[g_array_index(group, uint32_t, i)];
        Landing l;

        if ((pinned && !v->pinned) || v->node >= p->nr_nodes) {
            continue;
        }
        l = land(p, group, v->node);
        if (best.node == UINT32_MAX || better(&l, &best)) {
            best = l;
        }
        if (l.fits && (best_fit.node == UINT32_MAX || better(&l, &best_fit))) {
            best_fit = l;
        }
    }
    return best_fit.node != UINT32_MAX ? best_fit : best;
}

static void plan_group(Planner *p, const GArray *group, uint32_t nr,
                       GArray *moves)
{
    Landing target = choose_target(p, group);

    for (guint i = 0; i < group->len; i++) {
        uint32_t v = g_array_index(group, uint32_t, i);
        const ColocateVm *vm = &p->vms[v];
        ColocateMove mv = {
            .vm = v, .group = nr, .from = vm->node, .to = target.node,
            .gain_pages = gain_on(p, group, v, target.node),
        };

        if (vm->node == target.node) {
            continue;
        }
        if (vm->pinned) {
            mv.verdict = NUKSM_PLAN_PINNED;
        } else if (mv.gain_pages < p->params->min_gain_pages) {
            mv.verdict = NUKSM_PLAN_SMALL_GAIN;
        } else if (!target.fits) {
            mv.verdict = NUKSM_PLAN_NO_ROOM;
        } else {
            mv.verdict = NUKSM_PLAN_PLANNED;
            move_room(p, vm, vm->node, target.node);
        }
        g_array_append_val(moves, mv);
    }
}

/* A group's memory, for the order groups are planned in. */
static uint64_t group_pages(const Planner *p, const GArray *group)
{
    uint64_t pages = 0;

    for (guint i = 0; i < group->len; i++) {
        pages += p->vms[g_array_index(group, uint32_t, i)].pages;
    }
    return pages;
}

static gint compare_groups(gconstpointer x, gconstpointer y, gpointer opaque)
{
    const Planner *p = opaque;
    const GArray *a = *(GArray *const *)x, *b = *(GArray *const *)y;
    uint64_t pa = group_pages(p, a), pb = group_pages(p, b);

    if (pa != pb) {
        return pa > pb ? -1 : 1;
    }
    /* Members are in index order: the first decides. */
    return g_array_index(a, uint32_t, 0) < g_array_index(b, uint32_t, 0) ?
           -1 : 1;
}

/* The groups of two VMs or more, each its members in index order. */
static GPtrArray *find_groups(const Planner *p, size_t nr_vms,
                              size_t nr_pairs)
{
    g_autofree uint32_t *parent = g_new(uint32_t, nr_vms);
    g_autoptr(GHashTable) by_root = g_hash_table_new(NULL, NULL);
    GPtrArray *groups = g_ptr_array_new_with_free_func(
        (GDestroyNotify)g_array_unref);
    g_autoptr(GPtrArray) all = g_ptr_array_new();

    for (size_t i = 0; i < nr_vms; i++) {
        parent[i] = i;
    }
    for (size_t i = 0; i < nr_pairs; i++) {
        const ColocatePair *pair = &p->pairs[i];

        if (pair->similarity_pm >= p->params->threshold_pm &&
            p->vms[pair->a].domain == p->vms[pair->b].domain) {
            parent[root_of(parent, pair->a)] = root_of(parent, pair->b);
        }
    }
    for (size_t i = 0; i < nr_vms; i++) {
        gpointer root = GUINT_TO_POINTER(root_of(parent, i) + 1);
        GArray *group = g_hash_table_lookup(by_root, root);
        uint32_t v = i;

        if (!group) {
            group = g_array_new(FALSE, FALSE, sizeof(uint32_t));
            g_hash_table_insert(by_root, root, group);
            g_ptr_array_add(all, group);
        }
        g_array_append_val(group, v);
    }
    for (guint i = 0; i < all->len; i++) {
        GArray *group = g_ptr_array_index(all, i);

        if (group->len > 1) {
            g_ptr_array_add(groups, group);
        } else {
            g_array_unref(group);
        }
    }
    return groups;
}

/* @share percent of @value; UINT64_MAX (no limit) stays. */
static uint64_t share_of(uint64_t value, uint32_t share)
{
    return value == UINT64_MAX ? value : value / 100 * share +
                                         value % 100 * share / 100;
}

/*
 * The room of merge domain @domain on each node: all of it if its VMs
 * are the only ones, else its share of each node's free memory and vCPU
 * slots, less the vCPUs of its own VMs there.  What other domains'
 * VMs claim (their memory, their vCPUs, their planned moves) then
 * changes nothing of its plan.
 */
static void domain_room(Planner *p, size_t nr_vms, uint16_t domain,
                        bool alone)
{
    uint32_t per_cpu = p->params->vcpus_per_cpu;
    uint32_t share = alone ? 100 : p->params->domain_room_pct;

    for (uint32_t n = 0; n < p->nr_nodes; n++) {
        const ColocateNode *node = &p->nodes[n];

        p->room[n] = (Room) {
            .free_pages = share_of(node->free_pages, share),
            .vcpus_max = per_cpu ? share_of((uint64_t)node->cpus * per_cpu,
                                            share) : UINT64_MAX,
            .vcpus = alone ? node->vcpus : 0,
        };
    }
    for (size_t i = 0; i < nr_vms && !alone; i++) {
        if (p->vms[i].domain == domain && p->vms[i].node < p->nr_nodes) {
            p->room[p->vms[i].node].vcpus += p->vms[i].vcpus;
        }
    }
}

static gint compare_u16(gconstpointer a, gconstpointer b)
{
    return (int)*(const uint16_t *)a - (int)*(const uint16_t *)b;
}

/* The merge domains of @vms, in ascending order. */
static GArray *domains_of(const ColocateVm *vms, size_t nr_vms)
{
    GArray *domains = g_array_new(FALSE, FALSE, sizeof(uint16_t));

    for (size_t i = 0; i < nr_vms; i++) {
        guint j = 0;

        while (j < domains->len &&
               g_array_index(domains, uint16_t, j) != vms[i].domain) {
            j++;
        }
        if (j == domains->len) {
            g_array_append_val(domains, vms[i].domain);
        }
    }
    g_array_sort(domains, compare_u16);
    return domains;
}

GArray *colocate_plan(const ColocateVm *vms, size_t nr_vms,
                      ColocateNode *nodes, uint32_t nr_nodes,
                      const ColocatePair *pairs, size_t nr_pairs,
                      const ColocateParams *params, uint32_t *nr_groups)
{
    g_autoptr(GHashTable) pair_of = g_hash_table_new_full(
        g_int64_hash, g_int64_equal, g_free, NULL);
    Planner p = {
        .vms = vms, .nodes = nodes, .nr_nodes = nr_nodes, .pairs = pairs,
        .pair_of = pair_of, .params = params,
    };
    GArray *moves = g_array_new(FALSE, FALSE, sizeof(ColocateMove));
    g_autoptr(GPtrArray) groups = NULL;
    g_autoptr(GArray) domains = NULL;

    for (size_t i = 0; i < nr_pairs; i++) {
        uint64_t key = pair_key(pairs[i].a, pairs[i].b);

        g_hash_table_insert(pair_of, g_memdup2(&key, sizeof(key)),
                            GUINT_TO_POINTER(i + 1));
    }
    groups = find_groups(&p, nr_vms, nr_pairs);
    g_ptr_array_sort_with_data(groups, compare_groups, &p);
    domains = domains_of(vms, nr_vms);
    /* Each domain within its room, by itself. */
    for (guint d = 0; d < domains->len; d++) {
        uint16_t domain = g_array_index(domains, uint16_t, d);

        domain_room(&p, nr_vms, domain, domains->len == 1);
        for (guint g = 0; g < groups->len; g++) {
            const GArray *group = g_ptr_array_index(groups, g);

            if (vms[g_array_index(group, uint32_t, 0)].domain == domain) {
                plan_group(&p, group, g, moves);
            }
        }
    }
    *nr_groups = groups->len;
    return moves;
}

NuksmSchemeId colocate_scheme(const GArray *moves, const ColocateVm *vms,
                              uint16_t domain)
{
    NuksmSchemeId scheme = NUKSM_SCHEME_ID_GLOBAL;

    for (guint i = 0; i < moves->len; i++) {
        const ColocateMove *mv = &g_array_index(moves, ColocateMove, i);

        if (vms[mv->vm].domain != domain) {
            continue;
        }
        if (mv->verdict == NUKSM_PLAN_PLANNED) {
            return NUKSM_SCHEME_ID_COLOCATE;
        }
        scheme = NUKSM_SCHEME_ID_HOT_LOCAL;
    }
    return scheme;
}

bool colocate_pinned_by_operator(NuksmHomeSourceId source, uint32_t home,
                                 uint32_t colocated_to)
{
    switch (source) {
    case NUKSM_HOME_PINNED:
    case NUKSM_HOME_MEMORY:
        return home != colocated_to;
    case NUKSM_HOME_BACKEND:
        return true;
    default:
        return false;
    }
}
