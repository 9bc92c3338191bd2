/*
 * Unit tests of nuksmd's unstable table: lookups, replacement, the bound
 * on its size, eviction of entries of clients that left first, the
 * report of every live entry evicted, a domain's quota, and client
 * slots.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <glib.h>

#include "keymap.h"
#include "unstable.h"

#define SEED 0x0123456789abcdefull

/* A domain quota none of these tests reaches. */
#define NO_QUOTA SIZE_MAX

/* Pages of the live entries evicted, in order. */
static GArray *evicted;

static void on_evicted(uint32_t client, uint64_t page, void *opaque)
{
    g_assert_true(opaque == &evicted);
    g_assert_cmpuint(client, !=, 0);
    g_array_append_val(evicted, page);
}

/* Client ids 1..4: slots[id], of domain 0 (1, 3, 4) or 1 (2). */
static uint16_t slots[5];

static void setup(UnstableTable *u, size_t max_entries)
{
    evicted = g_array_new(FALSE, FALSE, sizeof(uint64_t));
    unstable_init(u, max_entries, SEED, on_evicted, &evicted);
    for (uint32_t id = 1; id < G_N_ELEMENTS(slots); id++) {
        slots[id] = unstable_client_add(u, id, id == 2);
        g_assert_cmpuint(slots[id], !=, 0);
    }
}

static void teardown(UnstableTable *u)
{
    unstable_destroy(u);
    g_array_unref(evicted);
}

static uint32_t client_of(UnstableTable *u, uint16_t domain, uint32_t node,
                          uint64_t digest)
{
    UnstableEntry *e = unstable_lookup(u, domain, node, digest);

    return e ? unstable_client(u, e) : 0;
}

static void test_set_lookup(void)
{
    UnstableTable u;
    UnstableEntry *e;

    setup(&u, 1024);
    g_assert_null(unstable_lookup(&u, 0, 0, 0xd1));
    unstable_set(&u, 0, 0, 0xd1, slots[1], 100, false, false, NO_QUOTA);
    unstable_set(&u, 1, 0, 0xd1, slots[2], 200, false, false, NO_QUOTA);

    e = unstable_lookup(&u, 0, 0, 0xd1);
    g_assert_nonnull(e);
    g_assert_cmpuint(unstable_client(&u, e), ==, 1);
    g_assert_cmpuint(e->page, ==, 100);
    /* Domains are apart. */
    g_assert_cmpuint(client_of(&u, 1, 0, 0xd1), ==, 2);
    /* So are home nodes. */
    g_assert_null(unstable_lookup(&u, 0, 1, 0xd1));
    unstable_set(&u, 0, 1, 0xd1, slots[4], 400, false, true, NO_QUOTA);
    e = unstable_lookup(&u, 0, 1, 0xd1);
    g_assert_cmpuint(unstable_client(&u, e), ==, 4);
    g_assert_false(e->hot);
    g_assert_true(e->warm);
    g_assert_cmpuint(e->page, ==, 400);
    g_assert_cmpuint(client_of(&u, 0, 0, 0xd1), ==, 1);
    unstable_remove(&u, e);

    /* A newer page with the digest replaces the entry. */
    unstable_set(&u, 0, 0, 0xd1, slots[3], 300, false, false, NO_QUOTA);
    e = unstable_lookup(&u, 0, 0, 0xd1);
    g_assert_cmpuint(unstable_client(&u, e), ==, 3);
    g_assert_cmpuint(e->page, ==, 300);
    g_assert_cmpuint(u.count, ==, 2);

    unstable_remove(&u, e);
    g_assert_null(unstable_lookup(&u, 0, 0, 0xd1));
    g_assert_nonnull(unstable_lookup(&u, 1, 0, 0xd1));
    g_assert_cmpuint(u.count, ==, 1);

    /* Pages from UNSTABLE_PAGE_LIMIT on, and slot 0, are not kept. */
    unstable_set(&u, 0, 0, 0xd2, slots[1], UNSTABLE_PAGE_LIMIT, false, false,
                 NO_QUOTA);
    unstable_set(&u, 0, 0, 0xd3, 0, 1, false, false, NO_QUOTA);
    unstable_set(&u, 0, 0, 0xd4, slots[1], UNSTABLE_PAGE_LIMIT - 1, true,
                 false, NO_QUOTA);
    g_assert_null(unstable_lookup(&u, 0, 0, 0xd2));
    g_assert_null(unstable_lookup(&u, 0, 0, 0xd3));
    g_assert_cmpuint(unstable_lookup(&u, 0, 0, 0xd4)->page, ==,
                     UNSTABLE_PAGE_LIMIT - 1);
    teardown(&u);
}

/*
 * Two domains whose keys hash alike: entries keep the hash, not the key,
 * and the client's domain keeps them apart.
 */
static void test_domain_compared(void)
{
    const uint64_t golden = 0x9e3779b97f4a7c15ull;  /* key_hash()'s */
    UnstableTable u;
    uint16_t domain, other;
    uint64_t d0, d1;

    /*
     * (d0, domain 0) and (d1, @domain) are one input of key_hash() where
     * domain * golden is below 2^58: then both digests are keys of node 0.
     */
    domain = 1;
    while ((domain * golden) >> (64 - KEY_NODE_BITS)) {
        domain++;
    }
    d0 = ((domain * golden) + 5) ^ SEED;
    d1 = 5 ^ SEED;
    g_assert_cmpuint(key_of_copy(0, d0), ==, d0);
    g_assert_cmpuint(key_of_copy(0, d1), ==, d1);
    g_assert_cmpuint(key_hash(SEED, d0, 0), ==, key_hash(SEED, d1, domain));

    setup(&u, 1024);
    other = unstable_client_add(&u, 5, domain);
    unstable_set(&u, 0, 0, d0, slots[1], 100, false, false, NO_QUOTA);
    g_assert_null(unstable_lookup(&u, domain, 0, d1));
    unstable_set(&u, domain, 0, d1, other, 200, false, false, NO_QUOTA);
    g_assert_cmpuint(client_of(&u, 0, 0, d0), ==, 1);
    g_assert_cmpuint(client_of(&u, domain, 0, d1), ==, 5);
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
        unstable_set(&u, 0, 0, d, slots[1], d, false, false, NO_QUOTA);
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

/*
 * Up to the load at which it grows, a table evicts next to nothing: a
 * full set moves an entry to its other set first.
 */
static void test_full_load(void)
{
    enum { MAX = 8192 };
    UnstableTable u;

    setup(&u, MAX);
    for (uint64_t d = 0; d < MAX / 8 * 7; d++) {
        unstable_set(&u, 0, 0, d, slots[1], d, false, false, NO_QUOTA);
    }
    g_assert_cmpuint(unstable_bytes(&u), ==, MAX * sizeof(UnstableEntry));
    g_test_message("%u of %u evicted", evicted->len, MAX / 8 * 7);
    g_assert_cmpuint(evicted->len, <, MAX / 1000);
    teardown(&u);
}

/* Digests whose two sets are both set 0 of a 4-set table. */
static uint64_t next_digest_of_set0(uint64_t d)
{
    for (;; d++) {
        uint64_t h = key_hash(SEED, d, 0);

        if ((uint32_t)h >> 30 == 0 && h >> 62 == 0) {
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
    uint16_t leaving;

    /* The smallest table: 4 sets, never grown. */
    setup(&u, 16);
    g_assert_cmpuint(u.nr_sets, ==, 4);
    for (unsigned i = 0; i < G_N_ELEMENTS(digests); i++) {
        digests[i] = d = next_digest_of_set0(d + 1);
        unstable_set(&u, 0, 0, d, slots[1], i, false, false, NO_QUOTA);
    }
    /* Set 0 overflowed once: the oldest, digests[0], is out. */
    g_assert_null(unstable_lookup(&u, 0, 0, digests[0]));
    g_assert_cmpuint(u.count, ==, UNSTABLE_WAYS);
    g_assert_cmpuint(evicted->len, ==, 1);
    g_assert_cmpuint(g_array_index(evicted, uint64_t, 0), ==, 0);

    /* Client 7 owns digests[2] and leaves; a new digest takes its place. */
    leaving = unstable_client_add(&u, 7, 0);
    unstable_set(&u, 0, 0, digests[2], leaving, 2, false, false, NO_QUOTA);
    unstable_client_remove(&u, leaving);
    g_assert_null(unstable_lookup(&u, 0, 0, digests[2]));
    unstable_set(&u, 0, 0, digests[0], slots[1], 0, false, false, NO_QUOTA);
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
    uint16_t leaving;
    size_t sets;
    uint64_t d;

    setup(&u, 1u << 20);
    leaving = unstable_client_add(&u, 9, 0);
    sets = u.nr_sets;
    for (d = 0; d < 100; d++) {
        unstable_set(&u, 0, 0, d, leaving, d, false, false, NO_QUOTA);
    }
    unstable_client_remove(&u, leaving);
    for (d = 100; u.nr_sets == sets; d++) {
        unstable_set(&u, 0, 0, d, slots[1], d, false, false, NO_QUOTA);
    }
    g_assert_cmpuint(u.nr_sets, ==, sets + sets / 2);
    /* Every live entry is in, none of the dead. */
    g_assert_cmpuint(u.count, ==, d - 100 - evicted->len);
    teardown(&u);
}

/*
 * A slot is taken again only after every other one, and only once no
 * entry of its client is left: the new client never inherits them.
 */
/*
 * A domain at its quota recycles its own entries: never another
 * domain's, and the count follows entries in, replaced, found and of
 * clients that left.
 */
static void test_domain_quota(void)
{
    const uint32_t quota = 64, others = 200;
    UnstableTable u;
    UnstableEntry *e;
    unsigned kept = 0;

    setup(&u, 4096);
    /* Domain 1 (client 2) first, then domain 0 floods past its quota. */
    for (uint64_t d = 0; d < others; d++) {
        unstable_set(&u, 1, 0, 0x10000 + d, slots[2], d, false, false, NO_QUOTA);
    }
    for (uint64_t d = 0; d < 10 * quota; d++) {
        unstable_set(&u, 0, 0, d, slots[1], d, false, false, quota);
        g_assert_cmpuint(unstable_domain_entries(&u, 0), <=, quota);
    }
    g_assert_cmpuint(unstable_domain_entries(&u, 0), >, quota / 2);
    g_assert_cmpuint(unstable_domain_entries(&u, 1), ==, others);
    for (uint64_t d = 0; d < others; d++) {
        kept += client_of(&u, 1, 0, 0x10000 + d) == 2;
    }
    g_assert_cmpuint(kept, ==, others);
    /* Each page domain 0 lost, or was refused, was told. */
    g_assert_cmpuint(evicted->len, ==,
                     10 * quota - unstable_domain_entries(&u, 0));

    /* Replacing an entry, and finding it, keep the count true. */
    unstable_set(&u, 1, 0, 0x10000, slots[2], 7, false, false, NO_QUOTA);
    g_assert_cmpuint(unstable_domain_entries(&u, 1), ==, others);
    e = unstable_lookup(&u, 1, 0, 0x10000);
    unstable_remove(&u, e);
    g_assert_cmpuint(unstable_domain_entries(&u, 1), ==, others - 1);
    unstable_client_remove(&u, slots[2]);
    g_assert_cmpuint(unstable_domain_entries(&u, 1), ==, 0);
    teardown(&u);
}

static void test_slot_reuse(void)
{
    UnstableTable u;
    uint16_t first, slot;
    uint32_t id = 100;

    setup(&u, 1024);
    first = unstable_client_add(&u, id, 0);
    unstable_set(&u, 0, 0, 0xd1, first, 1, false, false, NO_QUOTA);
    unstable_client_remove(&u, first);
    do {
        slot = unstable_client_add(&u, ++id, 0);
        g_assert_cmpuint(slot, !=, 0);
        unstable_client_remove(&u, slot);
    } while (slot != first);
    g_assert_cmpuint(id - 100, ==, UNSTABLE_CLIENTS - G_N_ELEMENTS(slots));
    slot = unstable_client_add(&u, ++id, 0);
    g_assert_null(unstable_lookup(&u, 0, 0, 0xd1));
    g_assert_cmpuint(u.count, ==, 0);

    /* With every slot taken there is none. */
    while (slot) {
        slot = unstable_client_add(&u, ++id, 0);
    }
    g_assert_cmpuint(unstable_client_add(&u, ++id, 0), ==, 0);
    teardown(&u);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/unstable/set-lookup", test_set_lookup);
    g_test_add_func("/unstable/domain-compared", test_domain_compared);
    g_test_add_func("/unstable/bound", test_bound);
    g_test_add_func("/unstable/full-load", test_full_load);
    g_test_add_func("/unstable/evict-dead-first", test_evict_dead_first);
    g_test_add_func("/unstable/grow-drops-dead", test_grow_drops_dead);
    g_test_add_func("/unstable/domain-quota", test_domain_quota);
    g_test_add_func("/unstable/slot-reuse", test_slot_reuse);
    return g_test_run();
}
