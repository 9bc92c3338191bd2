/*
 * Unit tests of nuksmd's home rule (policy_home(), agent/core/policy.h): each
 * source in its order, the running streak, and the memory source from a
 * Mems_allowed_list as vcpus.c parses it.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <glib.h>

#include "policy.h"
#include "vcpus.h"

/* HOME carries source ids as numbers: the old ones must keep theirs. */
G_STATIC_ASSERT(NUKSM_HOME_DEFAULT == 0 && NUKSM_HOME_PINNED == 1 &&
                NUKSM_HOME_BACKEND == 2 && NUKSM_HOME_RUNNING == 3 &&
                NUKSM_HOME_MEMORY == 4 && NUKSM_HOME__MAX == 5);

#define UNTOUCHED 0xdeadbeefcafef00dull

static uint64_t parse_ok(const char *list)
{
    uint64_t nodes = UNTOUCHED;

    if (!vcpus_parse_nodes(list, &nodes)) {
        g_error("\"%s\" did not parse", list);
    }
    return nodes;
}

static void test_parse(void)
{
    g_assert_cmphex(parse_ok("0"), ==, 0x1);
    g_assert_cmphex(parse_ok("1"), ==, 0x2);
    g_assert_cmphex(parse_ok("0-1"), ==, 0x3);
    g_assert_cmphex(parse_ok("0,2-3"), ==, 0xd);
    g_assert_cmphex(parse_ok("1,3,5-7"), ==, 0xea);
    g_assert_cmphex(parse_ok("2-2"), ==, 0x4);
    g_assert_cmphex(parse_ok("4-5,0"), ==, 0x31);      /* any order */
    g_assert_cmphex(parse_ok("0-1,1-2"), ==, 0x7);     /* overlapping */
    g_assert_cmphex(parse_ok("63"), ==, 1ull << 63);
    g_assert_cmphex(parse_ok("0-63"), ==, UINT64_MAX);
    g_assert_cmphex(parse_ok("62-63"), ==, 3ull << 62);
    g_assert_cmphex(parse_ok("007"), ==, 0x80);
    /* As /proc shows it after the tab, newline included. */
    g_assert_cmphex(parse_ok("\t0-1\n"), ==, 0x3);
    g_assert_cmphex(parse_ok(" 3 "), ==, 0x8);
}

static void test_parse_empty(void)
{
    g_assert_cmphex(parse_ok(""), ==, 0);
    g_assert_cmphex(parse_ok("\n"), ==, 0);
    g_assert_cmphex(parse_ok("  \t "), ==, 0);
}

static void test_parse_malformed(void)
{
    static const char *const bad[] = {
        "x", "0x1", "a-b", "-1", "1-", "-", ",", "0,", ",0", "0,,1",
        "0-1-2", "3-1", "0 1", "0, 1", "0 ,1", "1;2", "+1", "1.0",
        "0-7:2/4",                  /* bitmap_parselist's strides */
        "64", "0-64", "63-64", "100", "99999999999999999999999",
        "0\n1",
    };

    for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
        uint64_t nodes = UNTOUCHED;

        if (vcpus_parse_nodes(bad[i], &nodes)) {
            g_error("\"%s\" parsed as %#" G_GINT64_MODIFIER "x", bad[i],
                    nodes);
        }
        g_assert_cmphex(nodes, ==, UNTOUCHED);
    }
}

static void test_memory_node(void)
{
    const uint64_t two = 0x3, four = 0xf;

    /* A strict subset: its lowest node. */
    g_assert_cmpint(policy_memory_node(0x1, two), ==, 0);
    g_assert_cmpint(policy_memory_node(0x2, two), ==, 1);
    g_assert_cmpint(policy_memory_node(0xc, four), ==, 2);
    g_assert_cmpint(policy_memory_node(0xa, four), ==, 1);
    g_assert_cmpint(policy_memory_node(0xe, four), ==, 1);
    g_assert_cmpint(policy_memory_node(1ull << 63, UINT64_MAX), ==, 63);
    /* Every node the agent places on: nothing to go by. */
    g_assert_cmpint(policy_memory_node(two, two), ==, -1);
    g_assert_cmpint(policy_memory_node(four, four), ==, -1);
    g_assert_cmpint(policy_memory_node(UINT64_MAX, UINT64_MAX), ==, -1);
    /* None (no vCPU status read). */
    g_assert_cmpint(policy_memory_node(0, two), ==, -1);
    /* Nodes the agent does not place on: not a subset. */
    g_assert_cmpint(policy_memory_node(0x4, two), ==, -1);
    g_assert_cmpint(policy_memory_node(0x5, two), ==, -1);
    g_assert_cmpint(policy_memory_node(UINT64_MAX, two), ==, -1);
    /* One node: no strict subset but the empty one. */
    g_assert_cmpint(policy_memory_node(0x1, 0x1), ==, -1);
}

/* A list as the agent reads it, to the home it gives. */
static int home_of_list(const char *list, uint64_t placed)
{
    uint64_t nodes;

    return vcpus_parse_nodes(list, &nodes) ?
           policy_memory_node(nodes, placed) : -1;
}

static void test_lists(void)
{
    g_assert_cmpint(home_of_list("1\n", 0x3), ==, 1);
    g_assert_cmpint(home_of_list("0-1\n", 0x3), ==, -1);
    g_assert_cmpint(home_of_list("2-3", 0xf), ==, 2);
    g_assert_cmpint(home_of_list("1,3", 0xf), ==, 1);
    g_assert_cmpint(home_of_list("0-3", 0xf), ==, -1);
    g_assert_cmpint(home_of_list("0-3", 0x3), ==, -1);
    g_assert_cmpint(home_of_list("", 0x3), ==, -1);
    g_assert_cmpint(home_of_list("0", 0x1), ==, -1);   /* this host */
    g_assert_cmpint(home_of_list("1-", 0x3), ==, -1);
}

/* Two nodes, nothing known: what each case below starts from. */
static PolicyHomeView view2(void)
{
    return (PolicyHomeView) { .nr_nodes = 2 };
}

static PolicyHome decide(const PolicyHomeView *v, PolicyHome h)
{
    policy_home(v, &h);
    return h;
}

static void test_sources_in_order(void)
{
    PolicyHomeView v = view2();
    PolicyHome h;

    /* Nothing to go by. */
    h = decide(&v, (PolicyHome) { 0 });
    g_assert_cmpuint(h.node, ==, 0);
    g_assert_cmpint(h.source, ==, NUKSM_HOME_DEFAULT);

    /* Where the vCPUs ran. */
    v.vcpus = (PolicyVcpus) { .count = 3, .allowed = 0x3,
                              .running = { 1, 2 } };
    h = decide(&v, (PolicyHome) { 0 });
    g_assert_cmpuint(h.node, ==, 1);
    g_assert_cmpint(h.source, ==, NUKSM_HOME_RUNNING);

    /* The memory they may use beats where they ran. */
    v.vcpus.mems = 0x1;
    h = decide(&v, (PolicyHome) { 0 });
    g_assert_cmpuint(h.node, ==, 0);
    g_assert_cmpint(h.source, ==, NUKSM_HOME_MEMORY);

    /* A bound or preferred backend beats it; another policy does not. */
    v.backend_nodes = 0x2;
    h = decide(&v, (PolicyHome) { 0 });
    g_assert_cmpint(h.source, ==, NUKSM_HOME_MEMORY);
    v.backend_binds = true;
    h = decide(&v, (PolicyHome) { 0 });
    g_assert_cmpuint(h.node, ==, 1);
    g_assert_cmpint(h.source, ==, NUKSM_HOME_BACKEND);

    /* Pinning beats all. */
    v.vcpus.allowed = 0x1;
    h = decide(&v, (PolicyHome) { 0 });
    g_assert_cmpuint(h.node, ==, 0);
    g_assert_cmpint(h.source, ==, NUKSM_HOME_PINNED);
}

static void test_backend_and_pinning_edges(void)
{
    PolicyHomeView v = view2();
    PolicyHome h;

    /* A backend on nodes the agent does not place on does not count. */
    v.backend_nodes = 0x4;
    v.backend_binds = true;
    h = decide(&v, (PolicyHome) { 0 });
    g_assert_cmpint(h.source, ==, NUKSM_HOME_DEFAULT);

    /* The lowest of several backend nodes. */
    v.nr_nodes = 4;
    v.backend_nodes = 0xc;
    h = decide(&v, (PolicyHome) { 0 });
    g_assert_cmpuint(h.node, ==, 2);
    g_assert_cmpint(h.source, ==, NUKSM_HOME_BACKEND);

    /* vCPUs allowed two nodes are not pinned. */
    v.backend_binds = false;
    v.vcpus = (PolicyVcpus) { .count = 2, .allowed = 0x6 };
    h = decide(&v, (PolicyHome) { 0 });
    g_assert_cmpint(h.source, ==, NUKSM_HOME_DEFAULT);

    /* No vCPUs counted: their affinity says nothing. */
    v.vcpus = (PolicyVcpus) { .allowed = 0x2 };
    h = decide(&v, (PolicyHome) { 0 });
    g_assert_cmpint(h.source, ==, NUKSM_HOME_DEFAULT);
}

static void test_running_streak(void)
{
    PolicyHomeView v = view2();
    PolicyHome h = { .node = 1, .source = NUKSM_HOME_RUNNING };

    v.vcpus = (PolicyVcpus) { .count = 1, .allowed = 0x3,
                              .running = { 1, 0 } };
    /* A running home moves only after the streak. */
    for (uint32_t i = 1; i < POLICY_HOME_RUNNING_STREAK; i++) {
        h = decide(&v, h);
        g_assert_cmpuint(h.node, ==, 1);
        g_assert_cmpuint(h.streak, ==, i);
    }
    h = decide(&v, h);
    g_assert_cmpuint(h.node, ==, 0);
    g_assert_cmpuint(h.streak, ==, 0);

    /* One evaluation back home ends a streak. */
    h = (PolicyHome) { .node = 1, .source = NUKSM_HOME_RUNNING, .streak = 2 };
    v.vcpus.running[0] = 0;
    v.vcpus.running[1] = 1;
    h = decide(&v, h);
    g_assert_cmpuint(h.node, ==, 1);
    g_assert_cmpuint(h.streak, ==, 0);

    /* From another source, running applies at once. */
    h = decide(&v, (PolicyHome) { .node = 0,
                                  .source = NUKSM_HOME_BACKEND });
    g_assert_cmpuint(h.node, ==, 1);
    g_assert_cmpint(h.source, ==, NUKSM_HOME_RUNNING);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/home/parse", test_parse);
    g_test_add_func("/home/parse-empty", test_parse_empty);
    g_test_add_func("/home/parse-malformed", test_parse_malformed);
    g_test_add_func("/home/memory-node", test_memory_node);
    g_test_add_func("/home/lists", test_lists);
    g_test_add_func("/home/sources-in-order", test_sources_in_order);
    g_test_add_func("/home/backend-and-pinning-edges",
                    test_backend_and_pinning_edges);
    g_test_add_func("/home/running-streak", test_running_streak);
    return g_test_run();
}
