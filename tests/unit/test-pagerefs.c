/*
 * Unit tests of nuksmd's page references: chunks of per-page arrays.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <glib.h>

#include "pagerefs.h"

#define SEED 0x5eed5eed5eed5eedull

static void test_add_lookup_remove(void)
{
    PageRefs r;
    PageRef *a, *b;

    pagerefs_init(&r, SEED);
    g_assert_null(pagerefs_lookup(&r, 5));

    a = pagerefs_add(&r, 5, 42, 3);
    g_assert_cmpuint(a->slot, ==, 42);
    g_assert_cmpuint(a->state, ==, 3);
    /* Its neighbours share its chunk and have no reference. */
    g_assert_null(pagerefs_lookup(&r, 4));
    g_assert_null(pagerefs_lookup(&r, 6));
    g_assert_true(pagerefs_lookup(&r, 5) == a);

    /* Adding pages, in its chunk or others, leaves its address valid. */
    for (uint64_t p = 6; p < 6 + 64 * PAGE_REFS_CHUNK; p++) {
        pagerefs_add(&r, p, p, 1);
    }
    g_assert_true(pagerefs_lookup(&r, 5) == a);
    g_assert_cmpuint(a->slot, ==, 42);
    g_assert_cmpuint(r.count, ==, 1 + 64 * PAGE_REFS_CHUNK);

    b = pagerefs_lookup(&r, 7);
    g_assert_cmpuint(b->slot, ==, 7);
    pagerefs_remove(&r, 7);
    g_assert_null(pagerefs_lookup(&r, 7));
    g_assert_true(pagerefs_lookup(&r, 5) == a);

    /* Pages far apart: 64-bit page numbers, chunks hashed apart. */
    pagerefs_add(&r, UINT64_MAX / 4096, 9, 2);
    g_assert_cmpuint(pagerefs_lookup(&r, UINT64_MAX / 4096)->slot, ==, 9);
    pagerefs_destroy(&r);
    g_assert_cmpuint(r.count, ==, 0);
    g_assert_cmpuint(pagerefs_bytes(&r), ==, 0);
}

/*
 * Random adds and removes against a model: every lookup agrees with it,
 * and once every page is removed, no chunk is left.
 */
static void test_against_model(void)
{
    enum { STEPS = 200000, SPAN = 1 << 16 };
    g_autoptr(GHashTable) model = g_hash_table_new(g_int64_hash,
                                                   g_int64_equal);
    g_autofree uint64_t *keys = g_new(uint64_t, SPAN);
    GRand *rand = g_rand_new_with_seed(7);
    PageRefs r;
    size_t peak = 0;

    pagerefs_init(&r, SEED);
    for (int step = 0; step < STEPS; step++) {
        /* Runs of pages, in a few far-apart regions. */
        uint32_t k = g_rand_int_range(rand, 0, SPAN);
        uint64_t page = (uint64_t)(k % 4) << 40 | k;
        PageRef *ref = pagerefs_lookup(&r, page);
        gpointer slot;
        bool had = g_hash_table_lookup_extended(model, &page, NULL, &slot);

        g_assert_true(had == (ref != NULL));
        if (had) {
            g_assert_cmpuint(ref->slot, ==, GPOINTER_TO_UINT(slot));
            pagerefs_remove(&r, page);
            g_hash_table_remove(model, &page);
        } else {
            keys[k] = page;
            pagerefs_add(&r, page, k, 1 + k % 6);
            g_hash_table_insert(model, &keys[k], GUINT_TO_POINTER(k));
        }
        g_assert_cmpuint(r.count, ==, g_hash_table_size(model));
        peak = MAX(peak, pagerefs_bytes(&r));
    }
    /* The walk sees every reference once. */
    {
        size_t pos = 0, seen = 0;
        uint64_t page;
        PageRef *ref;

        while ((ref = pagerefs_next(&r, &pos, &page))) {
            g_assert_true(g_hash_table_contains(model, &page));
            g_assert_cmpuint(ref->slot, ==, page & (SPAN - 1));
            seen++;
        }
        g_assert_cmpuint(seen, ==, r.count);
    }
    for (uint64_t k = 0; k < SPAN; k++) {
        uint64_t page = (uint64_t)(k % 4) << 40 | k;

        if (pagerefs_lookup(&r, page)) {
            pagerefs_remove(&r, page);
        }
    }
    g_assert_cmpuint(r.count, ==, 0);
    g_assert_cmpuint(r.chunks, ==, 0);
    g_assert_cmpuint(pagerefs_bytes(&r), <, peak / 100);
    pagerefs_destroy(&r);
    g_rand_free(rand);
}

static bool keep_odd_slots(PageRef *ref, uint64_t page, void *opaque)
{
    size_t *seen = opaque;

    g_assert_cmpuint(ref->slot, ==, page);
    (*seen)++;
    return ref->slot & 1;
}

/* Retain: every reference seen once, empty chunks freed, the rest found. */
static void test_retain(void)
{
    enum { N = 10 * PAGE_REFS_CHUNK };
    PageRefs r;
    size_t seen = 0;

    pagerefs_init(&r, SEED);
    for (uint64_t p = 0; p < N; p++) {
        /* Chunks 0..9 hold even pages only, chunks 10..14 every page. */
        uint64_t page = p < N / 2 ? 2 * p : p + N / 2;

        pagerefs_add(&r, page, page, 4);
    }
    g_assert_cmpuint(r.chunks, ==, 15);
    pagerefs_retain(&r, keep_odd_slots, &seen);
    g_assert_cmpuint(seen, ==, N);
    g_assert_cmpuint(r.count, ==, N / 4);
    g_assert_cmpuint(r.chunks, ==, 5);
    for (uint64_t page = 0; page < 2 * N; page++) {
        PageRef *ref = pagerefs_lookup(&r, page);

        g_assert_true((ref != NULL) ==
                      (page >= N && page < N + N / 2 && (page & 1)));
    }
    pagerefs_destroy(&r);
}

/* Taking the references of another table leaves that one empty. */
static void test_take(void)
{
    PageRefs a, b;
    bool added;

    pagerefs_init(&a, SEED);
    pagerefs_init(&b, SEED);
    pagerefs_add(&a, 1, 11, 4);
    keymap_insert(&a.moves, 1, 0, &added)->value = 12;
    pagerefs_take(&b, &a);
    g_assert_cmpuint(pagerefs_entries(&a), ==, 0);
    g_assert_null(pagerefs_lookup(&a, 1));
    g_assert_cmpuint(pagerefs_entries(&b), ==, 2);
    g_assert_cmpuint(pagerefs_lookup(&b, 1)->slot, ==, 11);
    g_assert_cmpuint(keymap_lookup(&b.moves, 1, 0)->value, ==, 12);
    pagerefs_destroy(&a);
    pagerefs_destroy(&b);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/pagerefs/add-lookup-remove", test_add_lookup_remove);
    g_test_add_func("/pagerefs/against-model", test_against_model);
    g_test_add_func("/pagerefs/retain", test_retain);
    g_test_add_func("/pagerefs/take", test_take);
    return g_test_run();
}
