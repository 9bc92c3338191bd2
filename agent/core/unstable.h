/*
 * nuksmd unstable table: the last page seen with a digest that no slot
 * holds yet, per merge domain and home node.  A second page with the same
 * digest makes a merge, if the placement policy lets the two share.  It
 * is a bounded cache, not an index: set-associative (each entry may go
 * to either of two sets), it doubles at 3/4 load until it
 * reaches its maximum size, and an insertion into full sets evicts their
 * oldest entry.  A VM flooding it with digests only pushes out candidates
 * (delays merges), never exhausts memory.
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

typedef struct UnstableEntry {
    uint64_t digest;
    uint64_t page;
    uint32_t client;         /* client id; 0: empty */
    uint16_t domain;
    uint8_t node;            /* home node of the page */
    bool hot;                /* the page was hot (policy_page_hot()) */
} UnstableEntry;

/*
 * Entries name clients, which may leave: a client id for which @live
 * returns false makes its entries dead, to be reused first and dropped
 * when the table grows.  Client ids are never reused, so a dead entry
 * cannot come back to life.
 */
typedef bool (*UnstableLiveFn)(uint32_t client, void *opaque);

/*
 * An entry of a client that is still there was evicted to make room:
 * its page will not merge unless offered again.
 */
typedef void (*UnstableEvictFn)(const UnstableEntry *e, void *opaque);

typedef struct UnstableTable {
    UnstableEntry *entries;  /* nr_sets sets of UNSTABLE_WAYS, newest first */
    size_t nr_sets;          /* power of two */
    size_t max_sets;
    size_t count;            /* non-empty entries, live or not */
    uint64_t seed;
    UnstableLiveFn live;
    UnstableEvictFn evicted;
    void *opaque;
} UnstableTable;

/* Room for @max_entries (rounded down to a power of two, at least 4 sets). */
void unstable_init(UnstableTable *u, size_t max_entries, uint64_t seed,
                   UnstableLiveFn live, UnstableEvictFn evicted,
                   void *opaque);
void unstable_destroy(UnstableTable *u);

UnstableEntry *unstable_lookup(UnstableTable *u, uint16_t domain,
                               uint32_t node, uint64_t digest);

/* Empty @e (from unstable_lookup()). */
void unstable_remove(UnstableTable *u, UnstableEntry *e);

/*
 * (@domain, @node, @digest) -> (@client, @page, @hot), replacing any
 * previous value.
 */
void unstable_set(UnstableTable *u, uint16_t domain, uint32_t node,
                  uint64_t digest, uint32_t client, uint64_t page, bool hot);

static inline size_t unstable_bytes(const UnstableTable *u)
{
    return u->nr_sets * UNSTABLE_WAYS * sizeof(UnstableEntry);
}

#endif /* NUKSMD_UNSTABLE_H */
