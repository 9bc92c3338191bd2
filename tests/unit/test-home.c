/*
 * Unit tests of nuksmd's memory home source (agent/home.h): parsing a
 * Mems_allowed_list and the home it gives.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <glib.h>

#include "home.h"

/* HOME carries source ids as numbers: the old ones must keep theirs. */
G_STATIC_ASSERT(NUKSM_HOME_DEFAULT == 0 && NUKSM_HOME_PINNED == 1 &&
                NUKSM_HOME_BACKEND == 2 && NUKSM_HOME_RUNNING == 3 &&
                NUKSM_HOME_MEMORY == 4 && NUKSM_HOME__MAX == 5);

#define UNTOUCHED 0xdeadbeefcafef00dull

static uint64_t parse_ok(const char *list)
{
    uint64_t nodes = UNTOUCHED;

    if (!home_parse_nodes(list, &nodes)) {
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

        if (home_parse_nodes(bad[i], &nodes)) {
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
    g_assert_cmpint(home_memory_node(0x1, two), ==, 0);
    g_assert_cmpint(home_memory_node(0x2, two), ==, 1);
    g_assert_cmpint(home_memory_node(0xc, four), ==, 2);
    g_assert_cmpint(home_memory_node(0xa, four), ==, 1);
    g_assert_cmpint(home_memory_node(0xe, four), ==, 1);
    g_assert_cmpint(home_memory_node(1ull << 63, UINT64_MAX), ==, 63);
    /* Every node the agent places on: nothing to go by. */
    g_assert_cmpint(home_memory_node(two, two), ==, -1);
    g_assert_cmpint(home_memory_node(four, four), ==, -1);
    g_assert_cmpint(home_memory_node(UINT64_MAX, UINT64_MAX), ==, -1);
    /* None (no vCPU status read). */
    g_assert_cmpint(home_memory_node(0, two), ==, -1);
    /* Nodes the agent does not place on: not a subset. */
    g_assert_cmpint(home_memory_node(0x4, two), ==, -1);
    g_assert_cmpint(home_memory_node(0x5, two), ==, -1);
    g_assert_cmpint(home_memory_node(UINT64_MAX, two), ==, -1);
    /* One node: no strict subset but the empty one. */
    g_assert_cmpint(home_memory_node(0x1, 0x1), ==, -1);
}

/* A list as the agent reads it, to the home it gives. */
static int home_of_list(const char *list, uint64_t placed)
{
    uint64_t nodes;

    return home_parse_nodes(list, &nodes) ?
           home_memory_node(nodes, placed) : -1;
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

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/home/parse", test_parse);
    g_test_add_func("/home/parse-empty", test_parse_empty);
    g_test_add_func("/home/parse-malformed", test_parse_malformed);
    g_test_add_func("/home/memory-node", test_memory_node);
    g_test_add_func("/home/lists", test_lists);
    return g_test_run();
}
