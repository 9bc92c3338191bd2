/*
 * nuksmd content table.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <string.h>

#include <glib.h>

#include "contents.h"
#include "keymap.h"

_Static_assert(sizeof(ContentEntry) == 16, "content entry layout");
_Static_assert(CONTENT_COPY == (1u << 16) - 1, "a copy's client mark");

/* Sets of a shard at start: 128 KiB in all; a shard grows at 7/8 load. */
#define INITIAL_SETS 16u

void contents_init(ContentTable *t, size_t max_seen, uint64_t seed,
                   ContentEvictFn evicted, void *opaque)
{
    *t = (ContentTable) {
        .seed = seed,
        .max_seen = max_seen,
        .client_cursor = 1,
        .evicted = evicted,
        .opaque = opaque,
    };
    for (size_t i = 0; i < G_N_ELEMENTS(t->shards); i++) {
        t->shards[i].nr_sets = INITIAL_SETS;
        t->shards[i].entries = g_new0(ContentEntry,
                                      INITIAL_SETS * CONTENT_WAYS);
    }
    /* 768 KiB of address space; only the slots ever used are touched. */
    t->clients = g_new0(ContentClient, CONTENT_CLIENTS);
    t->domain_entries = g_new0(uint32_t, UINT16_MAX + 1);
}

void contents_destroy(ContentTable *t)
{
    for (size_t i = 0; i < G_N_ELEMENTS(t->shards); i++) {
        g_clear_pointer(&t->shards[i].entries, g_free);
        t->shards[i].nr_sets = t->shards[i].count = 0;
    }
    g_clear_pointer(&t->clients, g_free);
    g_clear_pointer(&t->domain_entries, g_free);
    t->seen = t->copies = 0;
}

static bool is_copy(const ContentEntry *e)
{
    return e->client == CONTENT_COPY;
}

/* A copy, or a page seen of a client still there. */
static bool live(const ContentTable *t, const ContentEntry *e)
{
    return is_copy(e) || t->clients[e->client].id != 0;
}

static bool live_seen(const ContentTable *t, const ContentEntry *e)
{
    return e->client && !is_copy(e) && t->clients[e->client].id != 0;
}

/*
 * A live page seen @e comes (@delta 1) or goes (-1): its client's, its
 * domain's and the table's counts.  Dead ones count for nobody: their
 * client's were taken off as it left.
 */
static void count(ContentTable *t, const ContentEntry *e, int delta)
{
    ContentClient *c = &t->clients[e->client];

    c->entries += delta;
    t->domain_entries[c->domain] += delta;
    t->seen += delta;
}

/* The low bits of the hash pick the shard. */
static ContentShard *shard_of(ContentTable *t, uint64_t hash)
{
    return &t->shards[hash & ((1u << CONTENT_SHARD_BITS) - 1)];
}

/*
 * Two-choice hashing: an entry lives in the emptier of two sets, which
 * keeps sets from overflowing until the shard is nearly full.  Each of
 * two bit ranges of the hash above the shard's picks one, by its high
 * bits: any number of sets will do.
 */
static void sets_of(const ContentShard *sh, uint64_t hash,
                    ContentEntry *sets[2])
{
    uint64_t lo = (uint32_t)(hash >> CONTENT_SHARD_BITS), hi = hash >> 32;

    sets[0] = &sh->entries[(lo * sh->nr_sets >> 32) * CONTENT_WAYS];
    sets[1] = &sh->entries[(hi * sh->nr_sets >> 32) * CONTENT_WAYS];
}

static uint64_t hash_of(const ContentTable *t, uint16_t domain,
                        uint32_t node, uint64_t digest)
{
    return key_hash(t->seed, key_of_copy(node, digest), domain);
}

/* Entries of a set are packed at its front, newest first. */
static void push_front(ContentEntry *set, const ContentEntry *e)
{
    memmove(set + 1, set, (CONTENT_WAYS - 1) * sizeof(*set));
    set[0] = *e;
}

static unsigned fill_of(const ContentEntry *set)
{
    unsigned n = 0;

    while (n < CONTENT_WAYS && set[n].client) {
        n++;
    }
    return n;
}

static ContentEntry *set_of(ContentShard *sh, ContentEntry *e)
{
    return e - (e - sh->entries) % CONTENT_WAYS;
}

void contents_probe(ContentTable *t, uint16_t domain, uint32_t node,
                    uint64_t digest, ContentProbe *p)
{
    uint64_t hash = hash_of(t, domain, node, digest);
    ContentEntry *sets[2];

    *p = (ContentProbe) { .hash = hash, .domain = domain,
                          .version = t->version };
    sets_of(shard_of(t, hash), hash, sets);
    for (unsigned s = 0; s < (sets[0] == sets[1] ? 1 : 2); s++) {
        for (unsigned w = 0; w < CONTENT_WAYS && sets[s][w].client; w++) {
            ContentEntry *e = &sets[s][w];

            /* Two domains may share a hash: the domain is compared. */
            if (e->hash != hash) {
                continue;
            }
            if (is_copy(e)) {
                p->copy = e->copy_domain == domain ? e : p->copy;
            } else if (live(t, e) && t->clients[e->client].domain == domain) {
                p->seen = e;
            }
        }
    }
}

/* Take @e out of its set, keeping the set packed; no one's count. */
static void drop(ContentTable *t, ContentEntry *e)
{
    ContentShard *sh = shard_of(t, e->hash);
    ContentEntry *last = set_of(sh, e) + CONTENT_WAYS - 1;

    memmove(e, e + 1, (last - e) * sizeof(*e));
    memset(last, 0, sizeof(*last));
    sh->count--;
    t->version++;
}

/* Forget the page seen @e; its shard stays as big. */
static void forget(ContentTable *t, ContentEntry *e)
{
    g_assert(!is_copy(e));
    count(t, e, -1);
    drop(t, e);
}

/* Evict the live page seen @e: its client offers it again. */
static void evict(ContentTable *t, ContentEntry *e)
{
    t->evicted(contents_client(t, e), e->page, t->opaque);
    forget(t, e);
}

/* The oldest page seen of a full @set whose client left, or NULL. */
static ContentEntry *oldest_dead(const ContentTable *t, ContentEntry *set)
{
    for (unsigned w = CONTENT_WAYS; w-- > 0;) {
        if (!live(t, &set[w])) {
            return &set[w];
        }
    }
    return NULL;
}

/*
 * The oldest live page seen in the two sets of @hash, of @domain unless
 * @any_domain; NULL if none.
 */
static ContentEntry *oldest_seen(ContentTable *t, uint64_t hash,
                                 uint16_t domain, bool any_domain)
{
    ContentEntry *sets[2];

    sets_of(shard_of(t, hash), hash, sets);
    for (unsigned s = 0; s < 2; s++) {
        for (unsigned w = CONTENT_WAYS; w-- > 0;) {
            ContentEntry *x = &sets[s][w];

            if (live_seen(t, x) &&
                (any_domain || t->clients[x->client].domain == domain)) {
                return x;
            }
        }
    }
    return NULL;
}

/*
 * Make room in full @set by moving its oldest entry that can go to its
 * other set, as that set's oldest; false if none can.
 */
static bool move_out(ContentTable *t, ContentShard *sh, ContentEntry *set)
{
    for (unsigned w = CONTENT_WAYS; w-- > 0;) {
        ContentEntry *alt[2], *other;
        unsigned fill;

        sets_of(sh, set[w].hash, alt);
        other = alt[0] == set ? alt[1] : alt[0];
        fill = fill_of(other);
        if (fill < CONTENT_WAYS) {
            other[fill] = set[w];
            sh->count++;
            drop(t, &set[w]);
            return true;
        }
    }
    return false;
}

static void rebuild(ContentTable *t, ContentShard *sh, size_t nr_sets);

/*
 * Add @e, live and counted already, to the emptier of its sets.  When
 * both are full, drop the oldest page seen of a client that left, else
 * move an entry of either to its other set, else evict the oldest page
 * seen of the two; when all are copies, grow.
 */
static void place(ContentTable *t, const ContentEntry *e)
{
    ContentShard *sh = shard_of(t, e->hash);
    ContentEntry *sets[2], *set, *victim;

    for (;;) {
        sets_of(sh, e->hash, sets);
        set = fill_of(sets[1]) < fill_of(sets[0]) ? sets[1] : sets[0];
        if (fill_of(set) < CONTENT_WAYS) {
            break;
        }
        victim = oldest_dead(t, sets[0]);
        if (!victim) {
            victim = oldest_dead(t, sets[1]);
        }
        if (victim) {
            set = set_of(sh, victim);
            drop(t, victim);
            break;
        }
        if (move_out(t, sh, sets[0]) || move_out(t, sh, sets[1])) {
            set = fill_of(sets[0]) < CONTENT_WAYS ? sets[0] : sets[1];
            break;
        }
        victim = oldest_seen(t, e->hash, 0, true);
        if (victim) {
            set = set_of(sh, victim);
            evict(t, victim);
            break;
        }
        rebuild(t, sh, sh->nr_sets + sh->nr_sets / 2);
    }
    push_front(set, e);
    sh->count++;
    t->version++;
}

/*
 * Rebuild @sh with @nr_sets sets, without its dead pages seen.  Oldest
 * first, so that each set stays ordered by age.
 */
static void rebuild(ContentTable *t, ContentShard *sh, size_t nr_sets)
{
    ContentEntry *old = sh->entries;
    size_t old_entries = sh->nr_sets * CONTENT_WAYS;

    sh->nr_sets = nr_sets;
    sh->entries = g_new0(ContentEntry, sh->nr_sets * CONTENT_WAYS);
    sh->count = 0;
    for (size_t i = 0; i < old_entries; i += CONTENT_WAYS) {
        for (unsigned w = CONTENT_WAYS; w-- > 0;) {
            const ContentEntry *e = &old[i + w];

            if (e->client && live(t, e)) {
                place(t, e);
            }
        }
    }
    g_free(old);
    t->version++;
}

/*
 * Room for one more entry in the shard of @hash: at 7/8 load, half as
 * big again if 5/8 of it is live, else as big without its dead.
 */
static void make_room(ContentTable *t, uint64_t hash)
{
    ContentShard *sh = shard_of(t, hash);
    size_t entries = sh->nr_sets * CONTENT_WAYS, alive = 0;

    if (sh->count * 8 < entries * 7) {
        return;
    }
    for (size_t i = 0; i < entries; i++) {
        alive += sh->entries[i].client && live(t, &sh->entries[i]);
    }
    rebuild(t, sh, alive * 8 >= entries * 5 ? sh->nr_sets + sh->nr_sets / 2
                                            : sh->nr_sets);
}

/*
 * Below 1/8 load, the shard of @hash halves (not below its first size):
 * what a flood of copies or pages took goes back.
 */
static void shrink_if_sparse(ContentTable *t, uint64_t hash)
{
    ContentShard *sh = shard_of(t, hash);

    if (sh->nr_sets > INITIAL_SETS &&
        sh->count * 8 < sh->nr_sets * CONTENT_WAYS) {
        rebuild(t, sh, MAX(INITIAL_SETS, sh->nr_sets / 2));
    }
}

void contents_forget(ContentTable *t, ContentEntry *e)
{
    uint64_t hash = e->hash;

    forget(t, e);
    shrink_if_sparse(t, hash);
}

bool contents_copy_of(ContentTable *t, uint16_t domain, uint32_t node,
                      uint64_t digest, SlotId *id)
{
    ContentProbe p;

    contents_probe(t, domain, node, digest, &p);
    if (p.copy) {
        *id = p.copy->copy_slot;
    }
    return p.copy;
}

bool contents_add_copy(ContentTable *t, uint16_t domain, uint64_t digest,
                       SlotId id)
{
    ContentProbe p;
    ContentEntry e = { .hash = 0 };

    contents_probe(t, domain, slot_id_node(id), digest, &p);
    if (p.copy) {
        return false;
    }
    e.hash = p.hash;
    e.copy_slot = id;
    e.copy_domain = domain;
    e.client = CONTENT_COPY;
    make_room(t, e.hash);
    place(t, &e);
    t->copies++;
    return true;
}

void contents_remove_copy(ContentTable *t, uint16_t domain, uint64_t digest,
                          SlotId id)
{
    ContentProbe p;

    contents_probe(t, domain, slot_id_node(id), digest, &p);
    if (p.copy && p.copy->copy_slot == id) {
        drop(t, p.copy);
        t->copies--;
        shrink_if_sparse(t, p.hash);
    }
}

void contents_remember(ContentTable *t, const ContentProbe *p,
                       uint16_t client, uint64_t page, bool hot, bool warm,
                       size_t domain_max)
{
    ContentEntry entry = {
        .hash = p->hash,
        .page = page,
        .hot = hot,
        .warm = warm,
        .client = client,
    };
    ContentEntry *victim = NULL;

    g_assert(p->version == t->version);
    if (!client || page >= CONTENT_PAGE_LIMIT) {
        return;
    }
    g_assert(client != CONTENT_COPY &&
             t->clients[client].domain == p->domain);
    if (p->seen) {
        forget(t, p->seen);
    }
    make_room(t, entry.hash);
    if (t->domain_entries[p->domain] >= domain_max ||
        t->seen >= t->max_seen) {
        victim = oldest_seen(t, entry.hash, p->domain,
                             t->domain_entries[p->domain] < domain_max);
        if (!victim) {
            t->evicted(t->clients[client].id, page, t->opaque);
            return;
        }
        evict(t, victim);
    }
    count(t, &entry, 1);
    place(t, &entry);
}

/*
 * Below 3/8 load after an age, rebuild @sh at about 4/5 load (not below
 * its first size): the pages forgotten give their room back, where
 * shrink_if_sparse() waits for 1/8 so that a shard does not swing
 * between two sizes.  What is left after an age is mostly copies, which
 * stay until their slot is freed: packed close to the 7/8 at which the
 * shard grows, they cost 20 bytes each, not the 24 of a shard that just
 * grew; the next pages seen grow it again.
 */
static void compact(ContentTable *t, ContentShard *sh)
{
    if (sh->nr_sets > INITIAL_SETS &&
        sh->count * 8 < sh->nr_sets * CONTENT_WAYS * 3) {
        rebuild(t, sh, MAX(INITIAL_SETS,
                           sh->count * 5 / 4 / CONTENT_WAYS + 1));
    }
}

/* No page seen of a client that left is in the table: free their slots. */
static void release_stale_slots(ContentTable *t)
{
    for (uint32_t s = 1; s < CONTENT_CLIENTS; s++) {
        if (t->clients[s].stale) {   /* writes touch the pages it holds */
            t->clients[s].stale = false;
        }
    }
}

/* Drop every dead page seen, in place. */
static void sweep(ContentTable *t)
{
    for (size_t i = 0; i < G_N_ELEMENTS(t->shards); i++) {
        ContentShard *sh = &t->shards[i];

        for (size_t k = 0; k < sh->nr_sets * CONTENT_WAYS; k++) {
            while (sh->entries[k].client && !live(t, &sh->entries[k])) {
                drop(t, &sh->entries[k]);
            }
        }
    }
    release_stale_slots(t);
}

size_t contents_age(ContentTable *t, ContentForgetFn forgot, void *opaque)
{
    size_t forgotten = 0;

    for (size_t i = 0; i < G_N_ELEMENTS(t->shards); i++) {
        ContentShard *sh = &t->shards[i];

        for (size_t k = 0; k < sh->nr_sets * CONTENT_WAYS; k++) {
            ContentEntry *e = &sh->entries[k];

            /* Each drop packs the set: the next entry comes to @e. */
            while (e->client && !is_copy(e) && (!live(t, e) || e->aged)) {
                if (live(t, e)) {
                    forgot(e->hash, opaque);
                    forget(t, e);
                    forgotten++;
                } else {
                    drop(t, e);
                }
            }
            if (e->client && !is_copy(e)) {
                e->aged = true;
            }
        }
        compact(t, sh);
    }
    release_stale_slots(t);
    return forgotten;
}

/*
 * Next fit, so that a slot a client left is taken again only after all
 * the others: one sweep of the table per CONTENT_CLIENTS clients at most.
 */
static uint16_t find_free_slot(ContentTable *t)
{
    for (uint32_t n = 1; n < CONTENT_CLIENTS; n++) {
        uint32_t s = t->client_cursor;

        t->client_cursor = s + 1 < CONTENT_CLIENTS ? s + 1 : 1;
        if (!t->clients[s].id && !t->clients[s].stale) {
            return s;
        }
    }
    return 0;
}

uint16_t contents_client_add(ContentTable *t, uint32_t id, uint16_t domain)
{
    uint16_t slot = find_free_slot(t);

    if (!slot) {
        sweep(t);
        slot = find_free_slot(t);
    }
    if (slot) {
        t->clients[slot] = (ContentClient) { .id = id, .domain = domain };
    }
    return slot;
}

void contents_client_remove(ContentTable *t, uint16_t slot)
{
    if (slot) {
        ContentClient *c = &t->clients[slot];

        t->domain_entries[c->domain] -= c->entries;
        t->seen -= c->entries;
        *c = (ContentClient) { .stale = true };
    }
}

size_t contents_bytes(const ContentTable *t)
{
    size_t sets = 0;

    for (size_t i = 0; i < G_N_ELEMENTS(t->shards); i++) {
        sets += t->shards[i].nr_sets;
    }
    return sets * CONTENT_WAYS * sizeof(ContentEntry);
}
