/*
 * Unit tests of nuksmd's content table: copies (the stable index) and
 * pages seen (the unstable table) under one key, found by one probe;
 * replacement, the bound on pages seen, copies never evicted, shards
 * that shrink once emptied, eviction
 * of pages of clients that left first, the report of every live page
 * evicted, a domain's quota, growth by shard, client slots, and the
 * ageing that forgets pages seen.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <glib.h>

#include "contents.h"
#include "keymap.h"

#define SEED 0x0123456789abcdefull

/* A domain quota none of these tests reaches. */
#define NO_QUOTA SIZE_MAX

/* Pages of the live pages seen evicted, in order. */
static GArray *evicted;

static void on_evicted(uint32_t client, uint64_t page, void *opaque)
{
    g_assert_true(opaque == &evicted);
    g_assert_cmpuint(client, !=, 0);
    g_array_append_val(evicted, page);
}

/* Client ids 1..4: slots[id], of domain 0 (1, 3, 4) or 1 (2). */
static uint16_t slots[5];

static void setup(ContentTable *t, size_t max_seen)
{
    evicted = g_array_new(FALSE, FALSE, sizeof(uint64_t));
    contents_init(t, max_seen, SEED, on_evicted, &evicted);
    for (uint32_t id = 1; id < G_N_ELEMENTS(slots); id++) {
        slots[id] = contents_client_add(t, id, id == 2);
        g_assert_cmpuint(slots[id], !=, 0);
    }
}

static void teardown(ContentTable *t)
{
    contents_destroy(t);
    g_array_unref(evicted);
}

static ContentEntry *seen(ContentTable *t, uint16_t domain, uint32_t node,
                          uint64_t digest)
{
    ContentProbe p;

    contents_probe(t, domain, node, digest, &p);
    return p.seen;
}

static uint32_t client_of(ContentTable *t, uint16_t domain, uint32_t node,
                          uint64_t digest)
{
    ContentEntry *e = seen(t, domain, node, digest);

    return e ? contents_client(t, e) : 0;
}

/* Remember @page of client slot @client, of @domain, seen on @node. */
static void remember(ContentTable *t, uint16_t domain, uint32_t node,
                     uint64_t digest, uint16_t client, uint64_t page,
                     bool hot, bool warm, size_t quota)
{
    ContentProbe p;

    contents_probe(t, domain, node, digest, &p);
    contents_remember(t, &p, client, page, hot, warm, quota);
}

/* The hash of (@domain, node 0, @d) is in shard 0 and both its sets are
 * set 0 of a shard of @sets sets. */
static bool in_set0(uint64_t d, uint16_t domain, size_t sets)
{
    uint64_t h = key_hash(SEED, d, domain);
    uint64_t lo = (uint32_t)(h >> CONTENT_SHARD_BITS), hi = h >> 32;

    return !(h & ((1u << CONTENT_SHARD_BITS) - 1)) &&
           !(lo * sets >> 32) && !(hi * sets >> 32);
}

/* The next digest after @d whose sets are set 0 of shard 0. */
static uint64_t next_digest_of_set0(uint64_t d, size_t sets)
{
    while (!in_set0(++d, 0, sets)) {
    }
    return d;
}

/* The next digest after @d in shard 0. */
static uint64_t next_digest_of_shard0(uint64_t d)
{
    while (key_hash(SEED, ++d, 0) & ((1u << CONTENT_SHARD_BITS) - 1)) {
    }
    return d;
}

static void test_seen(void)
{
    ContentTable t;
    ContentEntry *e;

    setup(&t, 1024);
    g_assert_null(seen(&t, 0, 0, 0xd1));
    remember(&t, 0, 0, 0xd1, slots[1], 100, false, false, NO_QUOTA);
    remember(&t, 1, 0, 0xd1, slots[2], 200, false, false, NO_QUOTA);

    e = seen(&t, 0, 0, 0xd1);
    g_assert_nonnull(e);
    g_assert_cmpuint(contents_client(&t, e), ==, 1);
    g_assert_cmpuint(e->page, ==, 100);
    /* Domains are apart. */
    g_assert_cmpuint(client_of(&t, 1, 0, 0xd1), ==, 2);
    /* So are home nodes. */
    g_assert_null(seen(&t, 0, 1, 0xd1));
    remember(&t, 0, 1, 0xd1, slots[4], 400, false, true, NO_QUOTA);
    e = seen(&t, 0, 1, 0xd1);
    g_assert_cmpuint(contents_client(&t, e), ==, 4);
    g_assert_false(e->hot);
    g_assert_true(e->warm);
    g_assert_cmpuint(e->page, ==, 400);
    g_assert_cmpuint(client_of(&t, 0, 0, 0xd1), ==, 1);
    contents_forget(&t, e);

    /* A newer page with the digest replaces the entry. */
    remember(&t, 0, 0, 0xd1, slots[3], 300, false, false, NO_QUOTA);
    e = seen(&t, 0, 0, 0xd1);
    g_assert_cmpuint(contents_client(&t, e), ==, 3);
    g_assert_cmpuint(e->page, ==, 300);
    g_assert_cmpuint(t.seen, ==, 2);

    contents_forget(&t, e);
    g_assert_null(seen(&t, 0, 0, 0xd1));
    g_assert_nonnull(seen(&t, 1, 0, 0xd1));
    g_assert_cmpuint(t.seen, ==, 1);

    /* Pages from CONTENT_PAGE_LIMIT on, and slot 0, are not kept. */
    remember(&t, 0, 0, 0xd2, slots[1], CONTENT_PAGE_LIMIT, false, false,
             NO_QUOTA);
    remember(&t, 0, 0, 0xd3, 0, 1, false, false, NO_QUOTA);
    remember(&t, 0, 0, 0xd4, slots[1], CONTENT_PAGE_LIMIT - 1, true, false,
             NO_QUOTA);
    g_assert_null(seen(&t, 0, 0, 0xd2));
    g_assert_null(seen(&t, 0, 0, 0xd3));
    g_assert_cmpuint(seen(&t, 0, 0, 0xd4)->page, ==, CONTENT_PAGE_LIMIT - 1);
    teardown(&t);
}

static void test_copies(void)
{
    ContentTable t;
    ContentProbe p;
    SlotId id = 0;

    setup(&t, 1024);
    g_assert_false(contents_copy_of(&t, 0, 1, 0xabc, &id));
    g_assert_true(contents_add_copy(&t, 0, 0xabc, slot_id(1, 5)));
    g_assert_false(contents_add_copy(&t, 0, 0xabc, slot_id(1, 6)));
    /* One copy per node: node 2 may have its own. */
    g_assert_true(contents_add_copy(&t, 0, 0xabc, slot_id(2, 6)));
    g_assert_true(contents_add_copy(&t, 1, 0xabc, slot_id(2, 7)));
    g_assert_true(contents_copy_of(&t, 0, 1, 0xabc, &id));
    g_assert_cmpuint(id, ==, slot_id(1, 5));
    g_assert_true(contents_copy_of(&t, 0, 2, 0xabc, &id));
    g_assert_cmpuint(id, ==, slot_id(2, 6));
    g_assert_false(contents_copy_of(&t, 0, 0, 0xabc, &id));
    g_assert_true(contents_copy_of(&t, 1, 2, 0xabc, &id));
    g_assert_cmpuint(id, ==, slot_id(2, 7));

    /* A key has a copy and a page seen apart: one probe finds both. */
    remember(&t, 0, 1, 0xabc, slots[1], 100, false, false, NO_QUOTA);
    contents_probe(&t, 0, 1, 0xabc, &p);
    g_assert_nonnull(p.copy);
    g_assert_cmpuint(p.copy->copy_slot, ==, slot_id(1, 5));
    g_assert_nonnull(p.seen);
    g_assert_cmpuint(p.seen->page, ==, 100);
    g_assert_cmpuint(t.copies, ==, 3);
    g_assert_cmpuint(t.seen, ==, 1);

    /* Only the slot that owns the copy removes it. */
    contents_remove_copy(&t, 0, 0xabc, slot_id(1, 6));
    g_assert_true(contents_copy_of(&t, 0, 1, 0xabc, &id));
    contents_remove_copy(&t, 0, 0xabc, slot_id(1, 5));
    g_assert_false(contents_copy_of(&t, 0, 1, 0xabc, &id));
    g_assert_true(contents_copy_of(&t, 0, 2, 0xabc, &id));
    g_assert_nonnull(seen(&t, 0, 1, 0xabc));
    contents_remove_copy(&t, 0, 0xabc, slot_id(2, 6));
    g_assert_cmpuint(t.copies, ==, 1);

    /* Many copies: spread over the shards, each grown as it filled. */
    for (uint64_t d = 0; d < 100000; d++) {
        g_assert_true(contents_add_copy(&t, 2, d, d));
    }
    g_assert_cmpuint(t.copies, ==, 100001);
    for (uint64_t d = 0; d < 100000; d++) {
        g_assert_true(contents_copy_of(&t, 2, 0, d, &id));
        g_assert_cmpuint(id, ==, d);
    }
    for (size_t s = 0; s < G_N_ELEMENTS(t.shards); s++) {
        g_assert_cmpuint(t.shards[s].count, >, 0);
    }
    /* Gone again, they give their memory back. */
    g_assert_cmpuint(contents_bytes(&t), >, 100000 * sizeof(ContentEntry));
    for (uint64_t d = 0; d < 100000; d++) {
        contents_remove_copy(&t, 2, d, d);
    }
    g_assert_cmpuint(t.copies, ==, 1);
    g_assert_cmpuint(contents_bytes(&t), ==, 128 * 1024);
    teardown(&t);
}

/*
 * Copies are never evicted: a flood of pages seen into full sets takes
 * only pages seen, and two sets full of copies grow their shard.
 */
static void test_copies_stay(void)
{
    enum { COPIES = 2 * CONTENT_WAYS };
    ContentTable t;
    uint64_t copies[COPIES], d = 0;
    SlotId id;

    setup(&t, 16);
    for (unsigned i = 0; i < COPIES; i++) {
        copies[i] = d = next_digest_of_set0(d, 16);
        g_assert_true(contents_add_copy(&t, 0, d, slot_id(0, i)));
    }
    /* Set 0 of shard 0 could hold 8: the shard grew for the rest. */
    g_assert_cmpuint(t.shards[0].nr_sets, >, 16);
    for (unsigned i = 0; i < 1000; i++) {
        d = next_digest_of_shard0(d);
        remember(&t, 0, 0, d, slots[1], i, false, false, NO_QUOTA);
        g_assert_cmpuint(t.seen, <=, 16);
    }
    for (unsigned i = 0; i < COPIES; i++) {
        g_assert_true(contents_copy_of(&t, 0, 0, copies[i], &id));
        g_assert_cmpuint(id, ==, slot_id(0, i));
    }
    g_assert_cmpuint(t.copies, ==, COPIES);
    g_assert_cmpuint(evicted->len, ==, 1000 - t.seen);
    teardown(&t);
}

/*
 * Two domains whose keys hash alike: entries keep the hash, not the key,
 * and the client's domain, or the copy's, keeps them apart.
 */
static void test_domain_compared(void)
{
    const uint64_t golden = 0x9e3779b97f4a7c15ull;  /* key_hash()'s */
    ContentTable t;
    uint16_t domain, other;
    uint64_t d0, d1;
    SlotId id;

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

    setup(&t, 1024);
    other = contents_client_add(&t, 5, domain);
    remember(&t, 0, 0, d0, slots[1], 100, false, false, NO_QUOTA);
    g_assert_null(seen(&t, domain, 0, d1));
    remember(&t, domain, 0, d1, other, 200, false, false, NO_QUOTA);
    g_assert_cmpuint(client_of(&t, 0, 0, d0), ==, 1);
    g_assert_cmpuint(client_of(&t, domain, 0, d1), ==, 5);

    g_assert_true(contents_add_copy(&t, 0, d0, slot_id(0, 1)));
    g_assert_false(contents_copy_of(&t, domain, 0, d1, &id));
    g_assert_true(contents_add_copy(&t, domain, d1, slot_id(0, 2)));
    g_assert_true(contents_copy_of(&t, 0, 0, d0, &id));
    g_assert_cmpuint(id, ==, slot_id(0, 1));
    g_assert_true(contents_copy_of(&t, domain, 0, d1, &id));
    g_assert_cmpuint(id, ==, slot_id(0, 2));
    teardown(&t);
}

/* However many digests come, the pages seen stay within their bound. */
static void test_bound(void)
{
    enum { MAX = 1 << 15, N = 200000 };
    ContentTable t;
    size_t found = 0;

    setup(&t, MAX);
    for (uint64_t d = 0; d < N; d++) {
        remember(&t, 0, 0, d, slots[1], d, false, false, NO_QUOTA);
        g_assert_cmpuint(t.seen, <=, MAX);
    }
    g_assert_cmpuint(t.seen, >, MAX / 2);
    /* Grown for them, no more: at 5/8 load at least. */
    g_assert_cmpuint(contents_bytes(&t), <=,
                     MAX * 8 / 5 * sizeof(ContentEntry));

    /* The newest digests are the ones remembered. */
    for (uint64_t d = N - 64; d < N; d++) {
        g_assert_nonnull(seen(&t, 0, 0, d));
    }
    for (uint64_t d = 0; d < N; d++) {
        ContentEntry *e = seen(&t, 0, 0, d);

        if (e) {
            g_assert_cmpuint(e->page, ==, d);
            found++;
        }
    }
    g_assert_cmpuint(found, ==, t.seen);
    /* Every digest is either remembered or was reported evicted. */
    g_assert_cmpuint(evicted->len, ==, N - t.seen);
    teardown(&t);
}

/*
 * Below its bound, a table evicts next to nothing: a full set moves an
 * entry to its other set first, and a shard grows at 7/8 load.
 */
static void test_full_load(void)
{
    enum { MAX = 1 << 16 };
    ContentTable t;

    setup(&t, MAX);
    for (uint64_t d = 0; d < MAX; d++) {
        remember(&t, 0, 0, d, slots[1], d, false, false, NO_QUOTA);
    }
    g_test_message("%u of %u evicted", evicted->len, MAX);
    g_assert_cmpuint(evicted->len, <, MAX / 1000);
    teardown(&t);
}

/* Full sets evict pages of clients that left before live ones. */
static void test_evict_dead_first(void)
{
    ContentTable t;
    uint64_t digests[CONTENT_WAYS + 1];
    uint64_t d = 0;
    uint16_t leaving;

    setup(&t, 1024);
    g_assert_cmpuint(t.shards[0].nr_sets, ==, 16);
    for (unsigned i = 0; i < G_N_ELEMENTS(digests); i++) {
        digests[i] = d = next_digest_of_set0(d, 16);
        remember(&t, 0, 0, d, slots[1], i, false, false, NO_QUOTA);
    }
    /* Set 0 overflowed once: the oldest, digests[0], is out. */
    g_assert_cmpuint(t.shards[0].nr_sets, ==, 16);
    g_assert_null(seen(&t, 0, 0, digests[0]));
    g_assert_cmpuint(t.seen, ==, CONTENT_WAYS);
    g_assert_cmpuint(evicted->len, ==, 1);
    g_assert_cmpuint(g_array_index(evicted, uint64_t, 0), ==, 0);

    /* Client 7 owns digests[2] and leaves; a new digest takes its place. */
    leaving = contents_client_add(&t, 7, 0);
    remember(&t, 0, 0, digests[2], leaving, 2, false, false, NO_QUOTA);
    contents_client_remove(&t, leaving);
    g_assert_null(seen(&t, 0, 0, digests[2]));
    remember(&t, 0, 0, digests[0], slots[1], 0, false, false, NO_QUOTA);
    for (unsigned i = 0; i < G_N_ELEMENTS(digests); i++) {
        g_assert_true(!seen(&t, 0, 0, digests[i]) == (i == 2));
    }
    /* A dead client's page goes unreported: nobody would offer it. */
    g_assert_cmpuint(evicted->len, ==, 1);
    teardown(&t);
}

/*
 * A shard grows by half when 5/8 of it is live, dropping the pages of
 * clients that left.
 */
static void test_grow_drops_dead(void)
{
    ContentTable t;
    ContentShard *sh = &t.shards[0];
    uint16_t leaving;
    size_t sets, live = 0;
    uint64_t d = 0;

    setup(&t, 1u << 20);
    leaving = contents_client_add(&t, 9, 0);
    sets = sh->nr_sets;
    for (unsigned i = 0; i < 20; i++) {
        d = next_digest_of_shard0(d);
        remember(&t, 0, 0, d, leaving, d, false, false, NO_QUOTA);
    }
    contents_client_remove(&t, leaving);
    while (sh->nr_sets == sets) {
        d = next_digest_of_shard0(d);
        remember(&t, 0, 0, d, slots[1], d, false, false, NO_QUOTA);
        live++;
    }
    g_assert_cmpuint(sh->nr_sets, ==, sets + sets / 2);
    /* Every live page seen is in, none of the dead. */
    g_assert_cmpuint(sh->count, ==, live - evicted->len);
    teardown(&t);
}

/*
 * A domain at its quota recycles its own pages seen: never another
 * domain's, and the count follows entries in, replaced, found and of
 * clients that left.
 */
static void test_domain_quota(void)
{
    const uint32_t quota = 64, others = 200;
    ContentTable t;
    ContentEntry *e;
    unsigned kept = 0;

    setup(&t, 4096);
    /* Domain 1 (client 2) first, then domain 0 floods past its quota. */
    for (uint64_t d = 0; d < others; d++) {
        remember(&t, 1, 0, 0x10000 + d, slots[2], d, false, false, NO_QUOTA);
    }
    for (uint64_t d = 0; d < 10 * quota; d++) {
        remember(&t, 0, 0, d, slots[1], d, false, false, quota);
        g_assert_cmpuint(contents_domain_entries(&t, 0), <=, quota);
    }
    g_assert_cmpuint(contents_domain_entries(&t, 0), >, quota / 2);
    g_assert_cmpuint(contents_domain_entries(&t, 1), ==, others);
    for (uint64_t d = 0; d < others; d++) {
        kept += client_of(&t, 1, 0, 0x10000 + d) == 2;
    }
    g_assert_cmpuint(kept, ==, others);
    /* Each page domain 0 lost, or was refused, was told. */
    g_assert_cmpuint(evicted->len, ==,
                     10 * quota - contents_domain_entries(&t, 0));

    /* Replacing an entry, and finding it, keep the count true. */
    remember(&t, 1, 0, 0x10000, slots[2], 7, false, false, NO_QUOTA);
    g_assert_cmpuint(contents_domain_entries(&t, 1), ==, others);
    e = seen(&t, 1, 0, 0x10000);
    contents_forget(&t, e);
    g_assert_cmpuint(contents_domain_entries(&t, 1), ==, others - 1);
    contents_client_remove(&t, slots[2]);
    g_assert_cmpuint(contents_domain_entries(&t, 1), ==, 0);
    g_assert_cmpuint(t.seen, ==, contents_domain_entries(&t, 0));
    teardown(&t);
}

/*
 * A slot is taken again only after every other one, and only once no
 * entry of its client is left: the new client never inherits them.
 */
static void test_slot_reuse(void)
{
    ContentTable t;
    uint16_t first, slot;
    uint32_t id = 100;

    setup(&t, 1024);
    first = contents_client_add(&t, id, 0);
    remember(&t, 0, 0, 0xd1, first, 1, false, false, NO_QUOTA);
    contents_client_remove(&t, first);
    do {
        slot = contents_client_add(&t, ++id, 0);
        g_assert_cmpuint(slot, !=, 0);
        g_assert_cmpuint(slot, !=, CONTENT_COPY);
        contents_client_remove(&t, slot);
    } while (slot != first);
    g_assert_cmpuint(id - 100, ==, CONTENT_CLIENTS - G_N_ELEMENTS(slots));
    slot = contents_client_add(&t, ++id, 0);
    g_assert_null(seen(&t, 0, 0, 0xd1));
    for (size_t s = 0; s < G_N_ELEMENTS(t.shards); s++) {
        g_assert_cmpuint(t.shards[s].count, ==, 0);
    }

    /* With every slot taken there is none. */
    while (slot) {
        slot = contents_client_add(&t, ++id, 0);
    }
    g_assert_cmpuint(contents_client_add(&t, ++id, 0), ==, 0);
    teardown(&t);
}

static void on_forgot(uint64_t key, void *opaque)
{
    g_array_append_val((GArray *)opaque, key);
}

static bool key_told(GArray *keys, uint64_t key)
{
    for (guint i = 0; i < keys->len; i++) {
        if (g_array_index(keys, uint64_t, i) == key) {
            return true;
        }
    }
    return false;
}

/*
 * A page seen is forgotten at the second age after it came, not at the
 * first; one seen again meanwhile starts anew; copies stay; a client's
 * that left are dropped, not reported; the table shrinks back.
 */
static void test_age(void)
{
    enum { PAGES = 20000 };
    g_autoptr(GArray) keys = g_array_new(FALSE, FALSE, sizeof(uint64_t));
    ContentTable t;
    size_t empty_bytes;
    ContentProbe p;

    setup(&t, SIZE_MAX);
    empty_bytes = contents_bytes(&t);
    for (uint64_t d = 1; d <= PAGES; d++) {
        remember(&t, 0, 0, d, slots[1], d, false, false, NO_QUOTA);
    }
    remember(&t, 0, 0, PAGES + 1, slots[3], 7, false, false, NO_QUOTA);
    g_assert_true(contents_add_copy(&t, 0, PAGES + 2, slot_id(0, 9)));
    g_assert_cmpuint(contents_bytes(&t), >, empty_bytes);

    g_assert_cmpuint(contents_age(&t, on_forgot, keys), ==, 0);
    g_assert_cmpuint(t.seen, ==, PAGES + 1);
    /* Seen again since: not forgotten at the next age. */
    remember(&t, 0, 0, 5, slots[1], 5, false, false, NO_QUOTA);
    contents_client_remove(&t, slots[3]);

    g_assert_cmpuint(contents_age(&t, on_forgot, keys), ==, PAGES - 1);
    g_assert_cmpuint(keys->len, ==, PAGES - 1);
    g_assert_cmpuint(t.seen, ==, 1);
    /* Their room went back: the shards are at their first size. */
    g_assert_cmpuint(contents_bytes(&t), ==, empty_bytes);
    g_assert_cmpuint(client_of(&t, 0, 0, 5), ==, 1);
    g_assert_null(seen(&t, 0, 0, 4));
    /* The keys told are those of the pages forgotten. */
    contents_probe(&t, 0, 0, 4, &p);
    g_assert_true(key_told(keys, p.hash));
    contents_probe(&t, 0, 0, 5, &p);
    g_assert_false(key_told(keys, p.hash));
    g_assert_true(contents_copy_of(&t, 0, 0, PAGES + 2, &(SlotId){ 0 }));
    g_assert_cmpuint(evicted->len, ==, 0);

    g_assert_cmpuint(contents_age(&t, on_forgot, keys), ==, 1);
    g_assert_cmpuint(t.seen, ==, 0);
    g_assert_cmpuint(contents_bytes(&t), ==, empty_bytes);
    teardown(&t);
}

/*
 * Copies stay when the pages seen beside them are forgotten, and the
 * table shrinks to about 2/3 load on them, where the 1/8 rule of a
 * single forget would leave it at 1/4.
 */
static void test_age_compacts(void)
{
    enum { COPIES = 20000 };
    g_autoptr(GArray) keys = g_array_new(FALSE, FALSE, sizeof(uint64_t));
    ContentTable t;
    size_t full;

    setup(&t, SIZE_MAX);
    for (uint64_t d = 1; d <= 3 * COPIES; d++) {
        if (d % 3) {
            remember(&t, 0, 0, d, slots[1], d, false, false, NO_QUOTA);
        } else {
            g_assert_true(contents_add_copy(&t, 0, d, slot_id(0, d)));
        }
    }
    full = contents_bytes(&t);
    contents_age(&t, on_forgot, keys);
    g_assert_cmpuint(contents_age(&t, on_forgot, keys), ==, 2 * COPIES);
    g_assert_cmpuint(contents_bytes(&t), <, full / 2);
    g_assert_cmpuint(contents_bytes(&t), <=,
                     COPIES * sizeof(ContentEntry) * 5 / 4 + 64 * 1024);
    for (uint64_t d = 3; d <= 3 * COPIES; d += 3) {
        SlotId id;

        g_assert_true(contents_copy_of(&t, 0, 0, d, &id));
        g_assert_cmpuint(id, ==, slot_id(0, d));
    }
    teardown(&t);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/contents/seen", test_seen);
    g_test_add_func("/contents/copies", test_copies);
    g_test_add_func("/contents/copies-stay", test_copies_stay);
    g_test_add_func("/contents/domain-compared", test_domain_compared);
    g_test_add_func("/contents/bound", test_bound);
    g_test_add_func("/contents/full-load", test_full_load);
    g_test_add_func("/contents/evict-dead-first", test_evict_dead_first);
    g_test_add_func("/contents/grow-drops-dead", test_grow_drops_dead);
    g_test_add_func("/contents/domain-quota", test_domain_quota);
    g_test_add_func("/contents/slot-reuse", test_slot_reuse);
    g_test_add_func("/contents/age", test_age);
    g_test_add_func("/contents/age-compacts", test_age_compacts);
    return g_test_run();
}
