/*
 * Unit tests of nuksmd's unstable table: lookups, replacement, the bound
 * on its size, eviction of entries of clients that left first, and the
 * report of every live entry evicted.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <glib.h>

#include "keymap.h"
#include "unstable.h"

#define SEED 0x0123456789abcdefull

/* Clients with an id in this set have left. */
static GHashTable *gone;

static bool live(uint32_t client, void *opaque)
{
    g_assert_true(opaque == &gone);
    return !g_hash_table_contains(gone, GUINT_TO_POINTER(client));
}

/* Pages of the live entries evicted, in order. */
static GArray *evicted;

static void on_evicted(const UnstableEntry *e, void *opaque)
{
    g_assert_true(opaque == &gone);
    g_assert_true(live(e->client, opaque));
    g_array_append_val(evicted, e->page);
}

static void setup(UnstableTable *u, size_t max_entries)
{
    gone = g_hash_table_new(NULL, NULL);
    evicted = g_array_new(FALSE, FALSE, sizeof(uint64_t));
    unstable_init(u, max_entries, SEED, live, on_evicted, &gone);
}

static void teardown(UnstableTable *u)
{
    unstable_destroy(u);
    g_hash_table_destroy(gone);
    g_array_unref(evicted);
}

static void test_set_lookup(void)
{
    UnstableTable u;
    UnstableEntry *e;

    setup(&u, 1024);
    g_assert_null(unstable_lookup(&u, 0, 0, 0xd1));
    unstable_set(&u, 0, 0, 0xd1, 1, 100, false);
    unstable_set(&u, 1, 0, 0xd1, 2, 200, false);

    e = unstable_lookup(&u, 0, 0, 0xd1);
    g_assert_nonnull(e);
    g_assert_cmpuint(e->client, ==, 1);
    g_assert_cmpuint(e->page, ==, 100);
    /* Domains are apart. */
    g_assert_cmpuint(unstable_lookup(&u, 1, 0, 0xd1)->client, ==, 2);
    /* So are home nodes. */
    g_assert_null(unstable_lookup(&u, 0, 1, 0xd1));
    unstable_set(&u, 0, 1, 0xd1, 4, 400, true);
    e = unstable_lookup(&u, 0, 1, 0xd1);
    g_assert_cmpuint(e->client, ==, 4);
    g_assert_true(e->hot);
    g_assert_cmpuint(unstable_lookup(&u, 0, 0, 0xd1)->client, ==, 1);
    unstable_remove(&u, e);

    /* A newer page with the digest replaces the entry. */
    unstable_set(&u, 0, 0, 0xd1, 3, 300, false);
    e = unstable_lookup(&u, 0, 0, 0xd1);
    g_assert_cmpuint(e->client, ==, 3);
    g_assert_cmpuint(e->page, ==, 300);
    g_assert_cmpuint(u.count, ==, 2);

    unstable_remove(&u, e);
    g_assert_null(unstable_lookup(&u, 0, 0, 0xd1));
    g_assert_nonnull(unstable_lookup(&u, 1, 0, 0xd1));
    g_assert_cmpuint(u.count, ==, 1);
    teardown(&u);
}

/* However many digests come, the table stays within its bound. */
static void test_bound(void)
{
    enum { MAX = 4096, N = 100000 };
    UnstableTable u;
    size_t found = 0;

    setup(&u, MAX);
    for (uint64_t d = 0; d < N; d++) {
        unstable_set(&u, 0, 0, d, 1, d, false);
        g_assert_cmpuint(u.count, <=, MAX);
    }
    g_assert_cmpuint(unstable_bytes(&u), ==, MAX * sizeof(UnstableEntry));
    g_assert_cmpuint(u.count, >, MAX / 2);

    /* The newest digests are the ones remembered. */
    for (uint64_t d = N - 64; d < N; d++) {
        g_assert_nonnull(unstable_lookup(&u, 0, 0, d));
    }
    for (uint64_t d = 0; d < N; d++) {
        UnstableEntry *e = unstable_lookup(&u, 0, 0, d);

        if (e) {
            g_assert_cmpuint(e->page, ==, d);
            found++;
        }
    }
    g_assert_cmpuint(found, ==, u.count);
    /* Every digest is either remembered or was reported evicted. */
    g_assert_cmpuint(evicted->len, ==, N - u.count);
    teardown(&u);
}

/* Digests whose two sets are both set 0 of a 4-set table. */
static uint64_t next_digest_of_set0(uint64_t d)
{
    for (;; d++) {
        uint64_t h = key_hash(SEED, d, 0);

        if ((h & 3) == 0 && (h >> 32 & 3) == 0) {
            return d;
        }
    }
}

/* Full sets evict entries of clients that left before live ones. */
static void test_evict_dead_first(void)
{
    UnstableTable u;
    uint64_t digests[UNSTABLE_WAYS + 1];
    uint64_t d = 0;

    /* The smallest table: 4 sets, never grown. */
    setup(&u, 16);
    g_assert_cmpuint(u.nr_sets, ==, 4);
    for (unsigned i = 0; i < G_N_ELEMENTS(digests); i++) {
        digests[i] = d = next_digest_of_set0(d + 1);
        unstable_set(&u, 0, 0, d, 1, i, false);
    }
    /* Set 0 overflowed once: the oldest, digests[0], is out. */
    g_assert_null(unstable_lookup(&u, 0, 0, digests[0]));
    g_assert_cmpuint(u.count, ==, UNSTABLE_WAYS);
    g_assert_cmpuint(evicted->len, ==, 1);
    g_assert_cmpuint(g_array_index(evicted, uint64_t, 0), ==, 0);

    /* Client 7 owns digests[2] and leaves; a new digest takes its place. */
    unstable_set(&u, 0, 0, digests[2], 7, 2, false);
    g_hash_table_add(gone, GUINT_TO_POINTER(7));
    unstable_set(&u, 0, 0, digests[0], 1, 0, false);
    for (unsigned i = 0; i < G_N_ELEMENTS(digests); i++) {
        g_assert_true(!unstable_lookup(&u, 0, 0, digests[i]) == (i == 2));
    }
    /* A dead client's entry goes unreported: nobody would offer it. */
    g_assert_cmpuint(evicted->len, ==, 1);
    teardown(&u);
}

/* Growing drops the entries of clients that left. */
static void test_grow_drops_dead(void)
{
    UnstableTable u;
    size_t sets;

    setup(&u, 1u << 20);
    sets = u.nr_sets;
    for (uint64_t d = 0; d < 100; d++) {
        unstable_set(&u, 0, 0, d, 9, d, false);
    }
    g_hash_table_add(gone, GUINT_TO_POINTER(9));
    for (uint64_t d = 100; u.nr_sets == sets; d++) {
        unstable_set(&u, 0, 0, d, 1, d, false);
    }
    for (uint64_t d = 0; d < 100; d++) {
        g_assert_null(unstable_lookup(&u, 0, 0, d));
    }
    teardown(&u);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/unstable/set-lookup", test_set_lookup);
    g_test_add_func("/unstable/bound", test_bound);
    g_test_add_func("/unstable/evict-dead-first", test_evict_dead_first);
    g_test_add_func("/unstable/grow-drops-dead", test_grow_drops_dead);
    return g_test_run();
}
