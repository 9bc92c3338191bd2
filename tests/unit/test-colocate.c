/*
 * Unit tests of nuksmd's co-location plan (agent/core/colocate.c): who
 * moves where, what it gains, and each reason not to move: room,
 * pinning, the similarity threshold and the gain threshold; ties.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <glib.h>

#include "colocate.h"

#define FREE UINT64_MAX      /* a node whose free memory is not known */

static const ColocateParams params = {
    .threshold_pm = 400, .min_gain_pages = 100, .vcpus_per_cpu = 0,
};

static ColocateVm vm(uint32_t id, uint32_t node, uint64_t pages)
{
    return (ColocateVm) { .id = id, .node = node, .pages = pages,
                          .vcpus = 2 };
}

/* a and b alike at @pm, each holding @alike pages of the other's. */
static ColocatePair pair(uint32_t a, uint32_t b, uint32_t pm, uint64_t alike)
{
    return (ColocatePair) { .a = a, .b = b, .similarity_pm = pm,
                            .alike_a = alike, .alike_b = alike };
}

/* Groups the last plan() found. */
static uint32_t groups;

static GArray *plan(const ColocateVm *vms, size_t n, ColocateNode *nodes,
                    uint32_t nr_nodes, const ColocatePair *pairs,
                    size_t nr_pairs, const ColocateParams *p)
{
    return colocate_plan(vms, n, nodes, nr_nodes, pairs, nr_pairs, p,
                         &groups);
}

static const ColocateMove *move(GArray *moves, guint i)
{
    return &g_array_index(moves, ColocateMove, i);
}

/*
 * Two similar VMs on two nodes, a third unlike them: the one with less
 * memory joins the other, gaining what it holds alike; the third stays.
 */
static void test_similar_pair_meets(void)
{
    ColocateVm vms[] = { vm(1, 0, 1000), vm(2, 1, 800), vm(3, 1, 5000) };
    ColocateNode nodes[] = { { .free_pages = 10000, .cpus = 4, .vcpus = 2 },
                             { .free_pages = 10000, .cpus = 4, .vcpus = 4 } };
    ColocatePair pairs[] = { pair(0, 1, 500, 400), pair(0, 2, 50, 50),
                             pair(1, 2, 60, 50) };
    g_autoptr(GArray) moves = plan(vms, 3, nodes, 2, pairs, 3, &params);

    g_assert_cmpuint(moves->len, ==, 1);
    g_assert_cmpuint(move(moves, 0)->vm, ==, 1);
    g_assert_cmpuint(move(moves, 0)->from, ==, 1);
    g_assert_cmpuint(move(moves, 0)->to, ==, 0);
    g_assert_cmpuint(move(moves, 0)->gain_pages, ==, 400);
    g_assert_cmpint(move(moves, 0)->verdict, ==, NUKSM_PLAN_PLANNED);
    /* The room it takes and gives back. */
    g_assert_cmpuint(nodes[0].free_pages, ==, 9200);
    g_assert_cmpuint(nodes[1].free_pages, ==, 10800);
    g_assert_cmpuint(nodes[0].vcpus, ==, 4);
    g_assert_cmpuint(nodes[1].vcpus, ==, 2);
}

/* Similar from the threshold on, not below it. */
static void test_threshold(void)
{
    ColocateVm vms[] = { vm(1, 0, 1000), vm(2, 1, 800) };
    ColocateNode nodes[2] = { { .free_pages = FREE }, { .free_pages = FREE } };
    ColocatePair below = pair(0, 1, 399, 400), at = pair(0, 1, 400, 400);
    g_autoptr(GArray) none = plan(vms, 2, nodes, 2, &below, 1, &params);
    g_autoptr(GArray) one = NULL;

    g_assert_cmpuint(groups, ==, 0);
    g_assert_cmpuint(none->len, ==, 0);
    one = plan(vms, 2, nodes, 2, &at, 1, &params);
    g_assert_cmpuint(groups, ==, 1);
    g_assert_cmpuint(one->len, ==, 1);
}

/* VMs of two merge domains never share: never a group. */
static void test_domains_apart(void)
{
    ColocateVm vms[] = { vm(1, 0, 1000), vm(2, 1, 800) };
    ColocateNode nodes[2] = { { .free_pages = FREE }, { .free_pages = FREE } };
    ColocatePair p = pair(0, 1, 1000, 800);
    g_autoptr(GArray) moves = NULL;

    vms[1].domain = 1;
    moves = plan(vms, 2, nodes, 2, &p, 1, &params);
    g_assert_cmpuint(moves->len, ==, 0);
}

/*
 * No room on the node with most of the group: it goes to the other
 * instead; no room on either: refused, and nothing moves.
 */
static void test_room(void)
{
    ColocateVm vms[] = { vm(1, 0, 1000), vm(2, 1, 800) };
    ColocatePair p = pair(0, 1, 500, 400);
    ColocateNode tight[] = { { .free_pages = 799 }, { .free_pages = 1000 } };
    ColocateNode full[] = { { .free_pages = 799 }, { .free_pages = 999 } };
    g_autoptr(GArray) other = plan(vms, 2, tight, 2, &p, 1, &params);
    g_autoptr(GArray) refused = plan(vms, 2, full, 2, &p, 1, &params);

    g_assert_cmpuint(other->len, ==, 1);
    g_assert_cmpuint(move(other, 0)->vm, ==, 0);
    g_assert_cmpuint(move(other, 0)->to, ==, 1);
    g_assert_cmpint(move(other, 0)->verdict, ==, NUKSM_PLAN_PLANNED);
    g_assert_cmpuint(tight[1].free_pages, ==, 0);

    g_assert_cmpuint(refused->len, ==, 1);
    g_assert_cmpuint(move(refused, 0)->to, ==, 0);   /* the best, no room */
    g_assert_cmpint(move(refused, 0)->verdict, ==, NUKSM_PLAN_NO_ROOM);
    g_assert_cmpuint(full[0].free_pages, ==, 799);
}

/* vCPUs count as room too: CPUs times the overcommit allowed. */
static void test_vcpu_room(void)
{
    ColocateVm vms[] = { vm(1, 0, 1000), vm(2, 1, 800) };
    ColocatePair p = pair(0, 1, 500, 400);
    ColocateNode nodes[] = { { .free_pages = FREE, .cpus = 2, .vcpus = 2 },
                             { .free_pages = FREE, .cpus = 2, .vcpus = 2 } };
    ColocateParams one_each = params, two_each = params;
    g_autoptr(GArray) refused = NULL, planned = NULL;

    one_each.vcpus_per_cpu = 1;
    two_each.vcpus_per_cpu = 2;
    refused = plan(vms, 2, nodes, 2, &p, 1, &one_each);
    g_assert_cmpint(move(refused, 0)->verdict, ==, NUKSM_PLAN_NO_ROOM);
    planned = plan(vms, 2, nodes, 2, &p, 1, &two_each);
    g_assert_cmpint(move(planned, 0)->verdict, ==, NUKSM_PLAN_PLANNED);
    g_assert_cmpuint(nodes[0].vcpus, ==, 4);
}

/*
 * A pinned VM never moves and decides its group's node, though it has
 * less memory there; a group pinned to two nodes goes to the one that
 * holds more of it, the other pinned VM refused.
 */
static void test_pinned(void)
{
    ColocateVm vms[] = { vm(1, 0, 1000), vm(2, 1, 800) };
    ColocatePair p = pair(0, 1, 500, 400);
    ColocateNode nodes[2] = { { .free_pages = FREE }, { .free_pages = FREE } };
    g_autoptr(GArray) to_pinned = NULL, apart = NULL;

    vms[1].pinned = true;
    to_pinned = plan(vms, 2, nodes, 2, &p, 1, &params);
    g_assert_cmpuint(to_pinned->len, ==, 1);
    g_assert_cmpuint(move(to_pinned, 0)->vm, ==, 0);
    g_assert_cmpuint(move(to_pinned, 0)->to, ==, 1);
    g_assert_cmpint(move(to_pinned, 0)->verdict, ==, NUKSM_PLAN_PLANNED);

    vms[0].pinned = true;
    apart = plan(vms, 2, nodes, 2, &p, 1, &params);
    g_assert_cmpuint(apart->len, ==, 1);
    g_assert_cmpuint(move(apart, 0)->vm, ==, 1);
    g_assert_cmpuint(move(apart, 0)->to, ==, 0);
    g_assert_cmpint(move(apart, 0)->verdict, ==, NUKSM_PLAN_PINNED);
}

/* A move that gains less than the threshold is refused, takes no room. */
static void test_small_gain(void)
{
    ColocateVm vms[] = { vm(1, 0, 1000), vm(2, 1, 200) };
    ColocatePair p = pair(0, 1, 495, 99);     /* 99 of b's 200 pages */
    ColocateNode nodes[] = { { .free_pages = 5000 }, { .free_pages = 5000 } };
    g_autoptr(GArray) moves = plan(vms, 2, nodes, 2, &p, 1, &params);

    g_assert_cmpuint(moves->len, ==, 1);
    g_assert_cmpuint(move(moves, 0)->gain_pages, ==, 99);
    g_assert_cmpint(move(moves, 0)->verdict, ==, NUKSM_PLAN_SMALL_GAIN);
    g_assert_cmpuint(nodes[0].free_pages, ==, 5000);
}

/*
 * Ties: as much memory on either node, the node that moves fewer VMs;
 * as many, the lower node.
 */
static void test_ties(void)
{
    /* Node 0: one VM of 1000; node 1: two of 500. */
    ColocateVm three[] = { vm(1, 0, 1000), vm(2, 1, 500), vm(3, 1, 500) };
    ColocatePair all[] = { pair(0, 1, 600, 300), pair(0, 2, 600, 300),
                           pair(1, 2, 600, 300) };
    ColocateVm two[] = { vm(1, 1, 700), vm(2, 0, 700) };
    ColocatePair p = pair(0, 1, 600, 300);
    ColocateNode nodes[2] = { { .free_pages = FREE }, { .free_pages = FREE } };
    g_autoptr(GArray) fewer = plan(three, 3, nodes, 2, all, 3, &params);
    g_autoptr(GArray) lower = plan(two, 2, nodes, 2, &p, 1, &params);

    g_assert_cmpuint(fewer->len, ==, 1);
    g_assert_cmpuint(move(fewer, 0)->vm, ==, 0);
    g_assert_cmpuint(move(fewer, 0)->to, ==, 1);
    g_assert_cmpuint(lower->len, ==, 1);
    g_assert_cmpuint(move(lower, 0)->vm, ==, 0);
    g_assert_cmpuint(move(lower, 0)->to, ==, 0);
}

/*
 * Similarity joins transitively: a ~ b and b ~ c make one group, on the
 * node with most of its memory; a gains what it holds alike with the VM
 * there even if it is not similar to it.  Groups go largest first,
 * each taking room the next one then lacks.
 */
static void test_groups(void)
{
    ColocateVm vms[] = { vm(1, 0, 100), vm(2, 1, 200), vm(3, 2, 3000),
                         vm(4, 0, 2000), vm(5, 1, 2000) };
    ColocatePair pairs[] = { pair(0, 1, 500, 150), pair(1, 2, 500, 100),
                             pair(0, 2, 300, 120), pair(3, 4, 900, 1800) };
    ColocateNode nodes[] = { { .free_pages = 2100 }, { .free_pages = 2100 },
                             { .free_pages = 300 } };
    g_autoptr(GArray) moves = plan(vms, 5, nodes, 3, pairs, 4, &params);

    /* d ~ e (4000 pages) first: e to node 0 (lower on the tie). */
    g_assert_cmpuint(groups, ==, 2);
    g_assert_cmpuint(moves->len, ==, 3);
    g_assert_cmpuint(move(moves, 0)->vm, ==, 4);
    g_assert_cmpuint(move(moves, 0)->group, ==, 0);
    g_assert_cmpuint(move(moves, 0)->to, ==, 0);
    g_assert_cmpint(move(moves, 0)->verdict, ==, NUKSM_PLAN_PLANNED);
    /* Then a, b, c (3300) to c's node 2, which has room for both. */
    g_assert_cmpuint(move(moves, 1)->vm, ==, 0);
    g_assert_cmpuint(move(moves, 1)->group, ==, 1);
    g_assert_cmpuint(move(moves, 1)->to, ==, 2);
    g_assert_cmpuint(move(moves, 1)->gain_pages, ==, 120);
    g_assert_cmpuint(move(moves, 2)->vm, ==, 1);
    g_assert_cmpuint(move(moves, 2)->to, ==, 2);
    g_assert_cmpuint(move(moves, 2)->gain_pages, ==, 100);
    g_assert_cmpuint(nodes[2].free_pages, ==, 0);
}

/*
 * The adaptive scheme (AdaptMD Fig. 9), per merge domain: similar VMs
 * apart with room is colocate (S), apart without is hot-local (H), none
 * apart is global; another domain's plan does not count.
 */
static void test_scheme(void)
{
    ColocateVm vms[] = { vm(1, 0, 1000), vm(2, 1, 800), vm(3, 0, 1000),
                         vm(4, 0, 800) };
    ColocatePair apart = pair(0, 1, 500, 400), together = pair(2, 3, 500, 400);
    ColocateNode room[] = { { .free_pages = FREE }, { .free_pages = FREE } };
    ColocateNode full[] = { { .free_pages = 10 }, { .free_pages = 10 } };
    g_autoptr(GArray) s_plan = NULL, h_plan = NULL, g_plan = NULL;

    vms[2].domain = vms[3].domain = 1;
    s_plan = plan(vms, 4, room, 2, &apart, 1, &params);
    g_assert_cmpint(colocate_scheme(s_plan, vms, 0), ==,
                    NUKSM_SCHEME_ID_COLOCATE);
    g_assert_cmpint(colocate_scheme(s_plan, vms, 1), ==,
                    NUKSM_SCHEME_ID_GLOBAL);

    h_plan = plan(vms, 4, full, 2, &apart, 1, &params);
    g_assert_cmpint(colocate_scheme(h_plan, vms, 0), ==,
                    NUKSM_SCHEME_ID_HOT_LOCAL);

    /* Similar, but on one node already: nothing to plan. */
    g_plan = plan(vms, 4, room, 2, &together, 1, &params);
    g_assert_cmpuint(g_plan->len, ==, 0);
    g_assert_cmpint(colocate_scheme(g_plan, vms, 1), ==,
                    NUKSM_SCHEME_ID_GLOBAL);
}

/*
 * Pins are the operator's unless a planned move set them: until the VM's
 * home leaves the node the move took it to.
 */
static void test_own_pins(void)
{
    const uint32_t none = NUKSM_MAX_NODES;

    g_assert_true(colocate_pinned_by_operator(NUKSM_HOME_PINNED, 1, none));
    g_assert_true(colocate_pinned_by_operator(NUKSM_HOME_MEMORY, 1, none));
    g_assert_true(colocate_pinned_by_operator(NUKSM_HOME_BACKEND, 1, none));
    g_assert_false(colocate_pinned_by_operator(NUKSM_HOME_RUNNING, 1, none));
    g_assert_false(colocate_pinned_by_operator(NUKSM_HOME_DEFAULT, 0, none));
    /* Moved to node 1 by nuksm, and held there: nuksm's own pins. */
    g_assert_false(colocate_pinned_by_operator(NUKSM_HOME_PINNED, 1, 1));
    g_assert_false(colocate_pinned_by_operator(NUKSM_HOME_MEMORY, 1, 1));
    /* Its operator pinned it elsewhere since: the operator's. */
    g_assert_true(colocate_pinned_by_operator(NUKSM_HOME_PINNED, 0, 1));
    /* A bound memory backend is never nuksm's doing. */
    g_assert_true(colocate_pinned_by_operator(NUKSM_HOME_BACKEND, 1, 1));
}

/*
 * Two merge domains: each is planned within its share of each node's
 * room, whatever the other claims.  Blue's b2 claims 8 vCPUs and b1 a
 * great deal of memory, so that blue's group is the larger and its
 * move would take all of node 1's vCPU slots; red's r2 joins r1 there
 * all the same, as it would with blue absent, and blue, over its share,
 * has no room.
 */
static void test_domains_planned_apart(void)
{
    ColocateVm vms[] = {
        { .id = 1, .domain = 1, .node = 1, .pages = 8192, .vcpus = 0 },
        { .id = 2, .domain = 1, .node = 0, .pages = 4096, .vcpus = 1 },
        { .id = 3, .domain = 2, .node = 1, .pages = 100000, .vcpus = 0 },
        { .id = 4, .domain = 2, .node = 0, .pages = 4096, .vcpus = 8 },
    };
    ColocatePair pairs[] = { pair(0, 1, 900, 2048), pair(2, 3, 900, 2048) };
    ColocateNode nodes[] = { { .free_pages = FREE, .cpus = 1, .vcpus = 9 },
                             { .free_pages = FREE, .cpus = 1 } };
    ColocateNode red_only[] = { { .free_pages = FREE, .cpus = 1, .vcpus = 1 },
                                { .free_pages = FREE, .cpus = 1 } };
    ColocateParams p = params;
    g_autoptr(GArray) alone = NULL, both = NULL;

    p.vcpus_per_cpu = 8;
    p.domain_room_pct = 50;
    alone = plan(vms, 2, red_only, 2, pairs, 1, &p);
    g_assert_cmpuint(alone->len, ==, 1);
    g_assert_cmpuint(move(alone, 0)->vm, ==, 1);
    g_assert_cmpuint(move(alone, 0)->to, ==, 1);
    g_assert_cmpint(move(alone, 0)->verdict, ==, NUKSM_PLAN_PLANNED);

    both = plan(vms, 4, nodes, 2, pairs, 2, &p);
    g_assert_cmpuint(both->len, ==, 2);
    for (guint i = 0; i < both->len; i++) {
        const ColocateMove *mv = move(both, i);

        g_assert_cmpuint(mv->to, ==, 1);
        if (mv->vm == 1) {
            g_assert_cmpint(mv->verdict, ==, NUKSM_PLAN_PLANNED);
        } else {
            g_assert_cmpuint(mv->vm, ==, 3);
            g_assert_cmpint(mv->verdict, ==, NUKSM_PLAN_NO_ROOM);
        }
    }
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/colocate/similar-pair-meets", test_similar_pair_meets);
    g_test_add_func("/colocate/threshold", test_threshold);
    g_test_add_func("/colocate/domains-apart", test_domains_apart);
    g_test_add_func("/colocate/room", test_room);
    g_test_add_func("/colocate/vcpu-room", test_vcpu_room);
    g_test_add_func("/colocate/pinned", test_pinned);
    g_test_add_func("/colocate/small-gain", test_small_gain);
    g_test_add_func("/colocate/ties", test_ties);
    g_test_add_func("/colocate/groups", test_groups);
    g_test_add_func("/colocate/scheme", test_scheme);
    g_test_add_func("/colocate/own-pins", test_own_pins);
    g_test_add_func("/colocate/domains-planned-apart",
                    test_domains_planned_apart);
    return g_test_run();
}
