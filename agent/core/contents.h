/*
 * nuksmd content table: per (merge domain, node, digest), the slot of
 * that node holding that content (a copy: the stable index), and the
 * last page seen with that digest whose content no copy holds yet (the
 * unstable table).  Both live in one table under one key, so a candidate
 * finds the copy it may join and the page it may pair with in one probe
 * of two cache-line sets (contents_probe()).
 *
 * The table is sharded by key, so that growing it rehashes one shard at
 * a time.  A shard is set-associative: each entry may go to either of
 * two sets of CONTENT_WAYS, and an insertion into two full sets moves
 * one of their entries to its other set, or else evicts the oldest page
 * seen of the two.  A shard grows by half at 7/8 load and halves below
 * 1/8, so that what a flood took goes back.
 *
 * Copies are an index: never evicted, each kept until removed.  A
 * content has at most one copy per node.  Pages seen are a bounded
 * cache: at most max_seen of them are live, and a merge domain holds at
 * most its quota; past either, a new page takes the place of an older one
 * in its two sets (of its own domain, for the quota), or is turned away.
 * A VM flooding the table with digests only delays merges, its own first,
 * never exhausts memory.  A page seen that pairs with no other for
 * between one and two ages (contents_age()) is forgotten: the caller
 * keeps, at most, its key.
 *
 * The key is key_of_copy() (keymap.h), where the node takes the top bits
 * of the digest: two contents whose digests differ only there share a
 * key, so the second one is not indexed (and merges later, or not at
 * all).  Merges never trust a digest anyway: every page is compared with
 * its slot.
 *
 * An entry is 16 bytes: the keyed hash of (domain, node, digest), which
 * for one domain is a bijection of (node, digest), and either a copy's
 * slot and domain, or a page seen with its hotness, its age and its
 * client.  The
 * client is a slot of this table, which also knows the client's domain.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_CONTENTS_H
#define NUKSMD_CONTENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "slots.h"

#define CONTENT_WAYS 8u
#define CONTENT_SHARD_BITS 6

/*
 * Client slots are 1 to CONTENT_CLIENTS - 1: 0 marks an empty entry and
 * CONTENT_COPY a copy.
 */
#define CONTENT_CLIENTS 65535u
#define CONTENT_COPY 65535u

/* Pages at or beyond this are not remembered: 2^57 bytes of guest RAM. */
#define CONTENT_PAGE_LIMIT (1ull << 45)

typedef struct ContentEntry {
    uint64_t hash;           /* key_hash() of (node and digest, domain) */
    union {
        struct {             /* a page seen */
            uint64_t page : 45;
            uint64_t aged : 1;   /* there at the last contents_age() */
            uint64_t hot : 1;    /* the page was hot (policy_page_hot()) */
            uint64_t warm : 1;   /* and warm (policy_page_warm()) */
            uint64_t client : 16;    /* client slot; 0: empty */
        };
        struct {             /* a copy: client is CONTENT_COPY */
            uint64_t copy_slot : 32;     /* its SlotId */
            uint64_t copy_domain : 16;
            uint64_t : 16;
        };
    };
} ContentEntry;

/* A client slot; id 0 when free. */
typedef struct ContentClient {
    uint32_t id;
    uint16_t domain;
    bool stale;              /* freed, its entries may still be there */
    uint32_t entries;        /* its pages seen in the table */
} ContentClient;

/*
 * A page seen of a client that is still there was evicted to make room:
 * it will not merge unless offered again.
 */
typedef void (*ContentEvictFn)(uint32_t client, uint64_t page,
                               void *opaque);

typedef struct ContentShard {
    ContentEntry *entries;   /* nr_sets sets of CONTENT_WAYS, newest first */
    size_t nr_sets;
    size_t count;            /* non-empty entries, live or not */
} ContentShard;

typedef struct ContentTable {
    ContentShard shards[1u << CONTENT_SHARD_BITS];
    uint64_t seed;
    size_t max_seen;         /* live pages seen, at most */
    size_t seen;             /* live pages seen */
    size_t copies;
    uint64_t version;        /* changes with every entry added or removed */
    /*
     * Pages seen of a client that left are dead: reused first, dropped
     * when their shard grows.  Its slot is free again once none is left.
     */
    ContentClient *clients;  /* CONTENT_CLIENTS, touched as used */
    uint32_t *domain_entries;    /* per domain id: its live clients' */
                                 /* pages seen; touched as used */
    uint32_t client_cursor;  /* next-fit position */
    ContentEvictFn evicted;
    void *opaque;
} ContentTable;

/*
 * What one probe found for (domain, node, digest): its copy and the live
 * page seen with it, either NULL if none.  Valid until the table changes.
 */
typedef struct ContentProbe {
    ContentEntry *copy;
    ContentEntry *seen;
    uint64_t hash;
    uint16_t domain;
    uint64_t version;
} ContentProbe;

/* At most @max_seen live pages seen. */
void contents_init(ContentTable *t, size_t max_seen, uint64_t seed,
                   ContentEvictFn evicted, void *opaque);
void contents_destroy(ContentTable *t);

/*
 * A slot for client @id of merge domain @domain, to name it in entries;
 * 0 if CONTENT_CLIENTS - 1 clients hold one.
 */
uint16_t contents_client_add(ContentTable *t, uint32_t id, uint16_t domain);

/* Client slot @slot (0: none) left: its pages seen are dead. */
void contents_client_remove(ContentTable *t, uint16_t slot);

/* Look (@domain, @node, @digest) up, once for its copy and page seen. */
void contents_probe(ContentTable *t, uint16_t domain, uint32_t node,
                    uint64_t digest, ContentProbe *p);

/* The copy of (@domain, @digest) on @node. */
bool contents_copy_of(ContentTable *t, uint16_t domain, uint32_t node,
                      uint64_t digest, SlotId *id);

/*
 * Index (@domain, node of @id, @digest) as copy @id; false if it has a
 * copy already.
 */
bool contents_add_copy(ContentTable *t, uint16_t domain, uint64_t digest,
                       SlotId id);

/* Forget the copy of (@domain, node of @id, @digest) if it is @id. */
void contents_remove_copy(ContentTable *t, uint16_t domain, uint64_t digest,
                          SlotId id);

/* The client id of the page seen @e (from a probe). */
static inline uint32_t contents_client(const ContentTable *t,
                                       const ContentEntry *e)
{
    return t->clients[e->client].id;
}

/* Forget the page seen @e (from a probe). */
void contents_forget(ContentTable *t, ContentEntry *e);

/*
 * The probe @p's key -> a page seen: (client of slot @client, @page,
 * @hot, @warm), replacing the page @p found; nothing for a slot 0 or a
 * page from CONTENT_PAGE_LIMIT on.  @p must be current: the table did
 * not change since.  The domain holds at most @domain_max pages seen: at
 * that, the new one evicts the domain's oldest in its two sets, or is
 * itself turned away if they hold none (told as an eviction); the same
 * at max_seen, with any domain's.
 */
void contents_remember(ContentTable *t, const ContentProbe *p,
                       uint16_t client, uint64_t page, bool hot, bool warm,
                       size_t domain_max);

/* A page seen under @key was forgotten (contents_age()). */
typedef void (*ContentForgetFn)(uint64_t key, void *opaque);

/*
 * Forget the live pages seen that were there at the last call, telling
 * @forgot their keys, and drop the dead ones; those left are aged.  A
 * shard left below 3/8 load shrinks to about 4/5 load.  Returns how
 * many were forgotten.
 */
size_t contents_age(ContentTable *t, ContentForgetFn forgot, void *opaque);

/* The live pages seen of the clients of @domain. */
static inline uint32_t contents_domain_entries(const ContentTable *t,
                                               uint16_t domain)
{
    return t->domain_entries[domain];
}

/* Bytes of the shards' sets. */
size_t contents_bytes(const ContentTable *t);

#endif /* NUKSMD_CONTENTS_H */
