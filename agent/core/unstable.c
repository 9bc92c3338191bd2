/*
 * nuksmd unstable table.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <string.h>

#include <glib.h>

#include "keymap.h"
#include "unstable.h"

_Static_assert(sizeof(UnstableEntry) == 16, "unstable entry layout");

/* Sets at start (128 KiB); the table grows by half at 7/8 load. */
#define INITIAL_SETS 1024u

void unstable_init(UnstableTable *u, size_t max_entries, uint64_t seed,
                   UnstableEvictFn evicted, void *opaque)
{
    size_t max_sets = MAX(4, max_entries / UNSTABLE_WAYS);

    *u = (UnstableTable) {
        .nr_sets = MIN(INITIAL_SETS, max_sets),
        .max_sets = max_sets,
        .seed = seed,
        .client_cursor = 1,
        .evicted = evicted,
        .opaque = opaque,
    };
    u->entries = g_new0(UnstableEntry, u->nr_sets * UNSTABLE_WAYS);
    /* 512 KiB of address space; only the slots ever used are touched. */
    u->clients = g_new0(UnstableClient, UNSTABLE_CLIENTS);
    u->domain_entries = g_new0(uint32_t, UINT16_MAX + 1);
}

void unstable_destroy(UnstableTable *u)
{
    g_clear_pointer(&u->entries, g_free);
    g_clear_pointer(&u->clients, g_free);
    g_clear_pointer(&u->domain_entries, g_free);
    u->nr_sets = 0;
    u->count = 0;
}

static bool live(const UnstableTable *u, const UnstableEntry *e)
{
    return u->clients[e->client].id != 0;
}

/*
 * A live entry @e comes (@delta 1) or goes (-1): its client's and its
 * domain's counts.  Dead entries count for nobody: their client's were
 * taken off its domain's as it left.
 */
static void count(UnstableTable *u, const UnstableEntry *e, int delta)
{
    UnstableClient *c = &u->clients[e->client];

    c->entries += delta;
    u->domain_entries[c->domain] += delta;
}

/*
 * Two-choice hashing: an entry lives in the emptier of two sets, which
 * keeps sets from overflowing until the table is nearly full.  Each half
 * of the hash picks one, by its high bits: any number of sets will do.
 */
static void sets_of(const UnstableTable *u, uint64_t hash,
                    UnstableEntry *sets[2])
{
    uint64_t lo = (uint32_t)hash, hi = hash >> 32;

    sets[0] = &u->entries[(lo * u->nr_sets >> 32) * UNSTABLE_WAYS];
    sets[1] = &u->entries[(hi * u->nr_sets >> 32) * UNSTABLE_WAYS];
}

static uint64_t hash_of(const UnstableTable *u, uint16_t domain,
                        uint32_t node, uint64_t digest)
{
    return key_hash(u->seed, key_of_copy(node, digest), domain);
}

/* Entries of a set are packed at its front, newest first. */
static void push_front(UnstableEntry *set, const UnstableEntry *e)
{
    memmove(set + 1, set, (UNSTABLE_WAYS - 1) * sizeof(*set));
    set[0] = *e;
}

static unsigned fill_of(const UnstableEntry *set)
{
    unsigned n = 0;

    while (n < UNSTABLE_WAYS && set[n].client) {
        n++;
    }
    return n;
}

UnstableEntry *unstable_lookup(UnstableTable *u, uint16_t domain,
                               uint32_t node, uint64_t digest)
{
    uint64_t hash = hash_of(u, domain, node, digest);
    UnstableEntry *sets[2];

    sets_of(u, hash, sets);
    for (unsigned s = 0; s < 2; s++) {
        for (unsigned w = 0; w < UNSTABLE_WAYS && sets[s][w].client; w++) {
            const UnstableEntry *e = &sets[s][w];

            /* Two domains may share a hash: the domain is compared. */
            if (e->hash == hash && live(u, e) &&
                u->clients[e->client].domain == domain) {
                return &sets[s][w];
            }
        }
    }
    return NULL;
}

/* Take @e out of its set, keeping the set packed; no one's count. */
static void drop(UnstableTable *u, UnstableEntry *e)
{
    size_t index = e - u->entries;
    UnstableEntry *last = &u->entries[index - index % UNSTABLE_WAYS +
                                      UNSTABLE_WAYS - 1];

    memmove(e, e + 1, (last - e) * sizeof(*e));
    memset(last, 0, sizeof(*last));
    u->count--;
}

void unstable_remove(UnstableTable *u, UnstableEntry *e)
{
    count(u, e, -1);
    drop(u, e);
}

/* Evict the live entry @e: its client offers its page again. */
static void evict(UnstableTable *u, UnstableEntry *e)
{
    u->evicted(unstable_client(u, e), e->page, u->opaque);
    unstable_remove(u, e);
}

/* The oldest entry of a full @set whose client left, or NULL. */
static UnstableEntry *oldest_dead(UnstableTable *u, UnstableEntry *set)
{
    for (unsigned w = UNSTABLE_WAYS; w-- > 0;) {
        if (!live(u, &set[w])) {
            return &set[w];
        }
    }
    return NULL;
}

/*
 * Make room in full @set by moving its oldest entry that can go to its
 * other set, as that set's oldest; false if none can.
 */
static bool move_out(UnstableTable *u, UnstableEntry *set)
{
    for (unsigned w = UNSTABLE_WAYS; w-- > 0;) {
        UnstableEntry *alt[2], *other;
        unsigned fill;

        sets_of(u, set[w].hash, alt);
        other = alt[0] == set ? alt[1] : alt[0];
        fill = fill_of(other);
        if (fill < UNSTABLE_WAYS) {
            other[fill] = set[w];
            u->count++;
            drop(u, &set[w]);
            return true;
        }
    }
    return false;
}

/*
 * Add @e, a live entry already counted, to the emptier of its sets.
 * When both are full, drop the oldest entry of a client that left, else
 * move an entry of either to its other set, else evict the oldest of the
 * first.
 */
static void place(UnstableTable *u, const UnstableEntry *e)
{
    UnstableEntry *sets[2], *set, *victim;

    sets_of(u, e->hash, sets);
    set = fill_of(sets[1]) < fill_of(sets[0]) ? sets[1] : sets[0];
    if (fill_of(set) == UNSTABLE_WAYS) {
        victim = oldest_dead(u, sets[0]);
        if (!victim) {
            victim = oldest_dead(u, sets[1]);
        }
        if (!victim && (move_out(u, sets[0]) || move_out(u, sets[1]))) {
            push_front(fill_of(sets[0]) < UNSTABLE_WAYS ? sets[0] : sets[1],
                       e);
            u->count++;
            return;
        }
        if (victim) {
            set = victim - (victim - u->entries) % UNSTABLE_WAYS;
            drop(u, victim);
        } else {
            set = sets[0];
            evict(u, &sets[0][UNSTABLE_WAYS - 1]);
        }
    }
    push_front(set, e);
    u->count++;
}

/* The oldest live entry of @domain in @e's two sets, or NULL. */
static UnstableEntry *oldest_of_domain(UnstableTable *u, uint16_t domain,
                                       const UnstableEntry *e)
{
    UnstableEntry *sets[2];

    sets_of(u, e->hash, sets);
    for (unsigned s = 0; s < 2; s++) {
        for (unsigned w = UNSTABLE_WAYS; w-- > 0;) {
            UnstableEntry *x = &sets[s][w];

            if (x->client && live(u, x) &&
                u->clients[x->client].domain == domain) {
                return x;
            }
        }
    }
    return NULL;
}

/* No entry of a client that left is in the table: free their slots. */
static void release_stale_slots(UnstableTable *u)
{
    for (uint32_t s = 1; s < UNSTABLE_CLIENTS; s++) {
        if (u->clients[s].stale) {   /* writes touch the pages it holds */
            u->clients[s].stale = false;
        }
    }
}

/*
 * Grow by half (to at most max_sets), dropping dead entries on the way.
 * Oldest first, so that each set stays ordered by age.
 */
static void grow(UnstableTable *u)
{
    UnstableEntry *old = u->entries;
    size_t old_entries = u->nr_sets * UNSTABLE_WAYS;

    u->nr_sets = MIN(u->max_sets, u->nr_sets + u->nr_sets / 2);
    u->entries = g_new0(UnstableEntry, u->nr_sets * UNSTABLE_WAYS);
    u->count = 0;
    for (size_t i = 0; i < old_entries; i += UNSTABLE_WAYS) {
        for (unsigned w = UNSTABLE_WAYS; w-- > 0;) {
            const UnstableEntry *e = &old[i + w];

            if (e->client && live(u, e)) {
                place(u, e);
            }
        }
    }
    g_free(old);
    release_stale_slots(u);
}

/* Drop every dead entry, in place. */
static void sweep(UnstableTable *u)
{
    for (size_t i = 0; i < u->nr_sets * UNSTABLE_WAYS; i++) {
        while (u->entries[i].client && !live(u, &u->entries[i])) {
            unstable_remove(u, &u->entries[i]);
        }
    }
    release_stale_slots(u);
}

/*
 * Next fit, so that a slot a client left is taken again only after all
 * the others: one sweep of the table per UNSTABLE_CLIENTS clients at most.
 */
static uint16_t find_free_slot(UnstableTable *u)
{
    for (uint32_t n = 1; n < UNSTABLE_CLIENTS; n++) {
        uint32_t s = u->client_cursor;

        u->client_cursor = s + 1 < UNSTABLE_CLIENTS ? s + 1 : 1;
        if (!u->clients[s].id && !u->clients[s].stale) {
            return s;
        }
    }
    return 0;
}

uint16_t unstable_client_add(UnstableTable *u, uint32_t id, uint16_t domain)
{
    uint16_t slot = find_free_slot(u);

    if (!slot) {
        sweep(u);
        slot = find_free_slot(u);
    }
    if (slot) {
        u->clients[slot] = (UnstableClient) { .id = id, .domain = domain };
    }
    return slot;
}

void unstable_client_remove(UnstableTable *u, uint16_t slot)
{
    if (slot) {
        UnstableClient *c = &u->clients[slot];

        u->domain_entries[c->domain] -= c->entries;
        *c = (UnstableClient) { .stale = true };
    }
}

void unstable_set(UnstableTable *u, uint16_t domain, uint32_t node,
                  uint64_t digest, uint16_t client, uint64_t page, bool hot,
                  bool warm, size_t domain_max)
{
    UnstableEntry entry = {
        .hash = hash_of(u, domain, node, digest),
        .page = page,
        .hot = hot,
        .warm = warm,
        .client = client,
    };
    UnstableEntry *e;

    if (!client || page >= UNSTABLE_PAGE_LIMIT) {
        return;
    }
    e = unstable_lookup(u, domain, node, digest);
    if (e) {
        unstable_remove(u, e);
    }
    if (u->count * 8 >= u->nr_sets * UNSTABLE_WAYS * 7 &&
        u->nr_sets < u->max_sets) {
        grow(u);
    }
    if (u->domain_entries[domain] >= domain_max) {
        e = oldest_of_domain(u, domain, &entry);
        if (!e) {
            u->evicted(u->clients[client].id, page, u->opaque);
            return;
        }
        evict(u, e);
    }
    count(u, &entry, 1);
    place(u, &entry);
}
