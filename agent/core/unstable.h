/*
 * nuksmd unstable table: the last page seen with a digest that no slot
 * holds yet, per merge domain and home node.  A second page with the same
 * digest makes a merge, if the placement policy lets the two share.  It
 * is a bounded cache, not an index: set-associative (each entry may go
 * to either of two sets), it grows by half at 7/8 load until it reaches
 * its maximum size, and an insertion into two full sets moves one of
 * their entries to its other set, or else evicts their oldest entry.  A
 * VM flooding it with digests only pushes out candidates (delays merges),
 * never exhausts memory.  A merge domain holds at most its quota of
 * entries: past it, a new entry of the domain takes the place of one of
 * its own, never of another domain's, so that one domain's flood delays
 * its own merges only.
 *
 * An entry is 16 bytes: the keyed hash of (domain, home node, digest),
 * which for one domain is a bijection of (home node, digest), the page,
 * its hotness and its client.  The client is a slot of this table, which
 * also knows the client's domain: a lookup compares that too.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_UNSTABLE_H
#define NUKSMD_UNSTABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define UNSTABLE_WAYS 8u

/* Client slots: 0 is none, so at most this many minus one clients. */
#define UNSTABLE_CLIENTS 65536u

/* Pages at or beyond this are not remembered: 2^58 bytes of guest RAM. */
#define UNSTABLE_PAGE_LIMIT (1ull << 46)

typedef struct UnstableEntry {
    uint64_t hash;           /* key_hash() of (node and digest, domain) */
    uint64_t page : 46;
    uint64_t hot : 1;        /* the page was hot (policy_page_hot()) */
    uint64_t warm : 1;       /* and warm (policy_page_warm()) */
    uint64_t client : 16;    /* client slot; 0: empty */
} UnstableEntry;

/* A client slot; id 0 when free. */
typedef struct UnstableClient {
    uint32_t id;
    uint16_t domain;
    bool stale;              /* freed, its entries may still be there */
    uint32_t entries;        /* its entries in the table */
} UnstableClient;

/*
 * An entry of a client that is still there was evicted to make room:
 * its page will not merge unless offered again.
 */
typedef void (*UnstableEvictFn)(uint32_t client, uint64_t page,
                                void *opaque);

typedef struct UnstableTable {
    UnstableEntry *entries;  /* nr_sets sets of UNSTABLE_WAYS, newest first */
    size_t nr_sets;
    size_t max_sets;
    size_t count;            /* non-empty entries, live or not */
    uint64_t seed;
    /*
     * Entries of a client that left are dead: reused first, dropped when
     * the table grows.  Its slot is free again once none is left.
     */
    UnstableClient *clients; /* UNSTABLE_CLIENTS, touched as used */
    uint32_t *domain_entries;    /* per domain id: its live clients' */
                                 /* entries; touched as used */
    uint32_t client_cursor;  /* next-fit position */
    UnstableEvictFn evicted;
    void *opaque;
} UnstableTable;

/* Room for @max_entries (at least 4 sets). */
void unstable_init(UnstableTable *u, size_t max_entries, uint64_t seed,
                   UnstableEvictFn evicted, void *opaque);
void unstable_destroy(UnstableTable *u);

/*
 * A slot for client @id of merge domain @domain, to name it in entries;
 * 0 if UNSTABLE_CLIENTS - 1 clients hold one.
 */
uint16_t unstable_client_add(UnstableTable *u, uint32_t id, uint16_t domain);

/* Client slot @slot (0: none) left: its entries are dead. */
void unstable_client_remove(UnstableTable *u, uint16_t slot);

UnstableEntry *unstable_lookup(UnstableTable *u, uint16_t domain,
                               uint32_t node, uint64_t digest);

/* The client id of the entry @e (from unstable_lookup()). */
static inline uint32_t unstable_client(const UnstableTable *u,
                                       const UnstableEntry *e)
{
    return u->clients[e->client].id;
}

/* Empty @e (from unstable_lookup()). */
void unstable_remove(UnstableTable *u, UnstableEntry *e);

/*
 * (@domain, @node, @digest) -> (client of slot @client, @page, @hot,
 * @warm),
 * replacing any previous value; nothing for a slot 0 or a page from
 * UNSTABLE_PAGE_LIMIT on.  @domain holds at most @domain_max entries:
 * at that, the new entry evicts the domain's oldest in its two sets, or
 * is itself turned away if they hold none (told as an eviction).
 */
void unstable_set(UnstableTable *u, uint16_t domain, uint32_t node,
                  uint64_t digest, uint16_t client, uint64_t page, bool hot,
                  bool warm, size_t domain_max);

/* The entries of the live clients of @domain. */
static inline uint32_t unstable_domain_entries(const UnstableTable *u,
                                               uint16_t domain)
{
    return u->domain_entries[domain];
}

/* The entries the table holds at most. */
static inline size_t unstable_max_entries(const UnstableTable *u)
{
    return u->max_sets * UNSTABLE_WAYS;
}

static inline size_t unstable_bytes(const UnstableTable *u)
{
    return u->nr_sets * UNSTABLE_WAYS * sizeof(UnstableEntry);
}

#endif /* NUKSMD_UNSTABLE_H */
