/*
 * Unit tests of nuksmd's forgotten contents: a chain of Bloom filters.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <glib.h>

#include "forgotten.h"

/* Keys as uniform as key_hash()'s, the n-th of a sequence. */
static uint64_t key(uint64_t n)
{
    return (n + 1) * 0x9e3779b97f4a7c15ull ^ n >> 7;
}

/*
 * Every key added is held, through several filters of the chain; keys
 * never added are held at most about once in a hundred.
 */
static void test_no_false_negatives_few_false_positives(void)
{
    enum { KEYS = 200000, PROBES = 200000 };
    Forgotten f;
    size_t false_yes = 0;

    forgotten_init(&f);
    g_assert_false(forgotten_may_hold(&f, key(0)));
    for (uint64_t n = 0; n < KEYS; n++) {
        forgotten_add(&f, key(n));
    }
    g_assert_cmpuint(f.keys, ==, KEYS);
    g_assert_cmpuint(f.nr_filters, >, 2);
    for (uint64_t n = 0; n < KEYS; n++) {
        g_assert_true(forgotten_may_hold(&f, key(n)));
    }
    for (uint64_t n = KEYS; n < KEYS + PROBES; n++) {
        false_yes += forgotten_may_hold(&f, key(n));
    }
    g_test_message("false positives: %zu of %d", false_yes, PROBES);
    g_assert_cmpuint(false_yes, <, PROBES / 50);
    /* 3 bytes a key, up to twice that just after a new filter started. */
    g_assert_cmpuint(forgotten_bytes(&f), <=, 6 * KEYS);
    forgotten_destroy(&f);
}

static void test_clear(void)
{
    Forgotten f;

    forgotten_init(&f);
    for (uint64_t n = 0; n < 50000; n++) {
        forgotten_add(&f, key(n));
    }
    forgotten_clear(&f);
    g_assert_cmpuint(f.keys, ==, 0);
    g_assert_cmpuint(forgotten_bytes(&f), ==, 0);
    g_assert_false(forgotten_may_hold(&f, key(1)));
    forgotten_add(&f, key(1));
    g_assert_true(forgotten_may_hold(&f, key(1)));
    forgotten_destroy(&f);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/forgotten/no-false-negatives-few-false-positives",
                    test_no_false_negatives_few_false_positives);
    g_test_add_func("/forgotten/clear", test_clear);
    return g_test_run();
}
