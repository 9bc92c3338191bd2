/*
 * Unit tests of nuksmd's hash table, the keymap, and of slot ids.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <glib.h>

#include "keymap.h"
#include "slots.h"

#define SEED 0x5eed5eed5eed5eedull

static void test_insert_lookup(void)
{
    KeyMap m;
    bool added;
    KeyMapEntry *e;

    keymap_init(&m, SEED);
    g_assert_null(keymap_lookup(&m, 1, 0));

    e = keymap_insert(&m, 1, 0, &added);
    g_assert_true(added);
    g_assert_cmpuint(e->value, ==, 0);
    g_assert_cmpuint(e->tag, ==, 0);
    e->value = 42;
    e->tag = 3;

    e = keymap_insert(&m, 1, 0, &added);
    g_assert_false(added);
    g_assert_cmpuint(e->value, ==, 42);

    /* The namespace is part of the key. */
    g_assert_null(keymap_lookup(&m, 1, 1));
    e = keymap_insert(&m, 1, 1, &added);
    g_assert_true(added);
    e->value = 7;
    g_assert_cmpuint(keymap_lookup(&m, 1, 0)->value, ==, 42);
    g_assert_cmpuint(keymap_lookup(&m, 1, 1)->value, ==, 7);
    g_assert_cmpuint(m.count, ==, 2);
    keymap_destroy(&m);
}

/* Many keys: growth, removal with backward shifts, shrinking. */
static void test_many(void)
{
    enum { N = 100000 };
    KeyMap m;
    bool added;
    size_t peak;

    keymap_init(&m, SEED);
    for (uint64_t k = 0; k < N; k++) {
        /* Keys that differ only in high bits still spread. */
        keymap_insert(&m, k << 40 | k, 0, &added)->value = k;
        g_assert_true(added);
    }
    g_assert_cmpuint(m.count, ==, N);
    g_assert_cmpuint(m.count * 4, <=, m.size * 3);
    peak = m.size;

    for (uint64_t k = 0; k < N; k += 2) {
        keymap_remove(&m, keymap_lookup(&m, k << 40 | k, 0));
    }
    for (uint64_t k = 0; k < N; k++) {
        KeyMapEntry *e = keymap_lookup(&m, k << 40 | k, 0);

        if (k % 2) {
            g_assert_nonnull(e);
            g_assert_cmpuint(e->value, ==, k);
        } else {
            g_assert_null(e);
        }
    }
    for (uint64_t k = 1; k < N - 100; k += 2) {
        keymap_remove(&m, keymap_lookup(&m, k << 40 | k, 0));
    }
    g_assert_cmpuint(m.count, ==, 50);
    g_assert_cmpuint(m.size, <, peak / 64);
    for (uint64_t k = N - 99; k < N; k += 2) {
        g_assert_cmpuint(keymap_lookup(&m, k << 40 | k, 0)->value, ==, k);
    }
    keymap_destroy(&m);
    g_assert_cmpuint(m.count, ==, 0);
    g_assert_cmpuint(keymap_bytes(&m), ==, 0);
}

/* Removal in the middle of colliding chains keeps every key reachable. */
static void test_remove_chains(void)
{
    KeyMap m;
    bool added;

    keymap_init(&m, SEED);
    for (unsigned round = 0; round < 50; round++) {
        for (uint64_t k = 0; k < 12; k++) {
            keymap_insert(&m, k, 0, &added);
        }
        /* 12 keys in a 16-entry table: long probe chains that wrap. */
        keymap_remove(&m, keymap_lookup(&m, round % 12, 0));
        for (uint64_t k = 0; k < 12; k++) {
            g_assert_true(!keymap_lookup(&m, k, 0) == (k == round % 12));
        }
    }
    keymap_destroy(&m);
}

/* keymap_next() sees every entry once; keymap_retain() keeps what it says. */
static bool keep_even(KeyMapEntry *e, void *opaque)
{
    (*(unsigned *)opaque)++;
    e->tag = 1;
    return !(e->key % 2);
}

static void test_walk_retain(void)
{
    enum { N = 1000 };
    g_autofree bool *seen = g_new0(bool, N);
    unsigned calls = 0, walked = 0;
    KeyMapEntry *e;
    KeyMap m;
    bool added;

    keymap_init(&m, SEED);
    for (size_t pos = 0; (e = keymap_next(&m, &pos));) {
        g_assert_not_reached();     /* an empty map has no entry */
    }
    for (uint64_t k = 0; k < N; k++) {
        keymap_insert(&m, k, 0, &added)->value = k * 3;
    }
    for (size_t pos = 0; (e = keymap_next(&m, &pos));) {
        g_assert_cmpuint(e->key, <, N);
        g_assert_false(seen[e->key]);
        g_assert_cmpuint(e->value, ==, e->key * 3);
        seen[e->key] = true;
        walked++;
    }
    g_assert_cmpuint(walked, ==, N);

    keymap_retain(&m, keep_even, &calls);
    g_assert_cmpuint(calls, ==, N);
    g_assert_cmpuint(m.count, ==, N / 2);
    for (uint64_t k = 0; k < N; k++) {
        e = keymap_lookup(&m, k, 0);
        if (k % 2) {
            g_assert_null(e);
        } else {
            g_assert_nonnull(e);
            /* What @keep changed stays. */
            g_assert_cmpuint(e->tag, ==, 1);
            g_assert_cmpuint(e->value, ==, k * 3);
        }
    }
    keymap_destroy(&m);
}

static void test_slot_id(void)
{
    SlotId id = slot_id(NUKSM_MAX_NODES - 1, (1u << SLOT_BITS) - 1);

    g_assert_cmpuint(slot_id_node(id), ==, NUKSM_MAX_NODES - 1);
    g_assert_cmpuint(slot_id_slot(id), ==, (1u << SLOT_BITS) - 1);
    g_assert_cmpuint(slot_id_node(slot_id(3, 0)), ==, 3);
    g_assert_cmpuint(slot_id_slot(slot_id(3, 0)), ==, 0);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/keymap/insert-lookup", test_insert_lookup);
    g_test_add_func("/keymap/many", test_many);
    g_test_add_func("/keymap/remove-chains", test_remove_chains);
    g_test_add_func("/keymap/walk-retain", test_walk_retain);
    g_test_add_func("/keymap/slot-id", test_slot_id);
    return g_test_run();
}
