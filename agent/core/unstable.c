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

_Static_assert(sizeof(UnstableEntry) == 24, "unstable entry layout");

/* Sets at start (192 KiB); the table doubles at 3/4 load up to its max. */
#define INITIAL_SETS 1024u

void unstable_init(UnstableTable *u, size_t max_entries, uint64_t seed,
                   UnstableLiveFn live, UnstableEvictFn evicted,
                   void *opaque)
{
    size_t max_sets = 4;

    while (max_sets * 2 * UNSTABLE_WAYS <= max_entries) {
        max_sets *= 2;
    }
    *u = (UnstableTable) {
        .nr_sets = MIN(INITIAL_SETS, max_sets),
        .max_sets = max_sets,
        .seed = seed,
        .live = live,
        .evicted = evicted,
        .opaque = opaque,
    };
    u->entries = g_new0(UnstableEntry, u->nr_sets * UNSTABLE_WAYS);
}

void unstable_destroy(UnstableTable *u)
{
    g_clear_pointer(&u->entries, g_free);
    u->nr_sets = 0;
    u->count = 0;
}

/*
 * Two-choice hashing: an entry lives in the emptier of two sets, which
 * keeps sets from overflowing until the table is nearly full.
 */
static void sets_of(const UnstableTable *u, uint16_t domain, uint32_t node,
                    uint64_t digest, UnstableEntry *sets[2])
{
    uint64_t h = key_hash(u->seed, key_of_copy(node, digest), domain);

    sets[0] = &u->entries[(h & (u->nr_sets - 1)) * UNSTABLE_WAYS];
    sets[1] = &u->entries[((h >> 32) & (u->nr_sets - 1)) * UNSTABLE_WAYS];
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
    UnstableEntry *sets[2];

    sets_of(u, domain, node, digest, sets);
    for (unsigned s = 0; s < 2; s++) {
        for (unsigned w = 0; w < UNSTABLE_WAYS && sets[s][w].client; w++) {
            if (sets[s][w].digest == digest && sets[s][w].domain == domain &&
                sets[s][w].node == node) {
                return &sets[s][w];
            }
        }
    }
    return NULL;
}

void unstable_remove(UnstableTable *u, UnstableEntry *e)
{
    size_t index = e - u->entries;
    UnstableEntry *last = &u->entries[index - index % UNSTABLE_WAYS +
                                      UNSTABLE_WAYS - 1];

    memmove(e, e + 1, (last - e) * sizeof(*e));
    memset(last, 0, sizeof(*last));
    u->count--;
}

/* The oldest entry of a full @set whose client left, or NULL. */
static UnstableEntry *oldest_dead(UnstableTable *u, UnstableEntry *set)
{
    for (unsigned w = UNSTABLE_WAYS; w-- > 0;) {
        if (!u->live(set[w].client, u->opaque)) {
            return &set[w];
        }
    }
    return NULL;
}

/*
 * Add @e to the emptier of its sets.  When both are full, evict the
 * oldest entry of a client that left, else (telling u->evicted) the
 * oldest of the first set.
 */
static void place(UnstableTable *u, const UnstableEntry *e)
{
    UnstableEntry *sets[2], *set, *victim;

    sets_of(u, e->domain, e->node, e->digest, sets);
    set = fill_of(sets[1]) < fill_of(sets[0]) ? sets[1] : sets[0];
    if (fill_of(set) == UNSTABLE_WAYS) {
        victim = oldest_dead(u, sets[0]);
        if (!victim) {
            victim = oldest_dead(u, sets[1]);
        }
        if (!victim) {
            victim = &sets[0][UNSTABLE_WAYS - 1];
            u->evicted(victim, u->opaque);
        }
        set = victim - (victim - u->entries) % UNSTABLE_WAYS;
        unstable_remove(u, victim);
    }
    push_front(set, e);
    u->count++;
}

/*
 * Double the sets, dropping dead entries on the way.  Oldest first, so
 * that each set stays ordered by age.
 */
static void grow(UnstableTable *u)
{
    UnstableEntry *old = u->entries;
    size_t old_entries = u->nr_sets * UNSTABLE_WAYS;

    u->nr_sets *= 2;
    u->entries = g_new0(UnstableEntry, u->nr_sets * UNSTABLE_WAYS);
    u->count = 0;
    for (size_t i = 0; i < old_entries; i += UNSTABLE_WAYS) {
        for (unsigned w = UNSTABLE_WAYS; w-- > 0;) {
            const UnstableEntry *e = &old[i + w];

            if (e->client && u->live(e->client, u->opaque)) {
                place(u, e);
            }
        }
    }
    g_free(old);
}

void unstable_set(UnstableTable *u, uint16_t domain, uint32_t node,
                  uint64_t digest, uint32_t client, uint64_t page, bool hot)
{
    UnstableEntry entry = {
        .digest = digest,
        .page = page,
        .client = client,
        .domain = domain,
        .node = node,
        .hot = hot,
    };
    UnstableEntry *e = unstable_lookup(u, domain, node, digest);

    if (e) {
        unstable_remove(u, e);
    }
    if (u->count * 4 >= u->nr_sets * UNSTABLE_WAYS * 3 &&
        u->nr_sets < u->max_sets) {
        grow(u);
    }
    place(u, &entry);
}
