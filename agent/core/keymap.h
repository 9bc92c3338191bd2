/*
 * nuksmd hash table of small fixed-size entries, keyed by a 64-bit key
 * and a 16-bit namespace: open addressing, linear probing, no per-entry
 * allocation (16 bytes per slot of the table).
 *
 * Keys come from clients (digests, page numbers): the hash is keyed by a
 * secret seed so that a client cannot aim its keys at one probe chain.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_KEYMAP_H
#define NUKSMD_KEYMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nuksm-proto.h"

typedef struct KeyMapEntry {
    uint64_t key;
    uint32_t value;          /* the user's */
    uint16_t ns;             /* namespace: part of the key */
    uint8_t tag;             /* the user's */
    uint8_t used;
} KeyMapEntry;

typedef struct KeyMap {
    KeyMapEntry *entries;    /* size entries, NULL while empty */
    size_t size;             /* 0 or a power of two */
    size_t count;            /* used entries */
    uint64_t seed;
} KeyMap;

/* Keyed 64-bit hash of (@key, @ns); also used to pick shards and sets. */
uint64_t key_hash(uint64_t seed, uint64_t key, uint16_t ns);

/*
 * A content on a node as one key, for the stable index and the unstable
 * table: the node in the top KEY_NODE_BITS bits, the digest's other bits
 * below.  Two digests that differ only in those top bits make one key
 * (contents.h says what follows from that).
 */
#define KEY_NODE_BITS 6

_Static_assert(NUKSM_MAX_NODES <= 1u << KEY_NODE_BITS,
               "a node fits a key");

static inline uint64_t key_of_copy(uint32_t node, uint64_t digest)
{
    const uint32_t shift = 64 - KEY_NODE_BITS;

    return (uint64_t)node << shift | (digest & ((1ull << shift) - 1));
}

void keymap_init(KeyMap *m, uint64_t seed);

/* Free the table; @m is empty and reusable afterwards. */
void keymap_destroy(KeyMap *m);

KeyMapEntry *keymap_lookup(const KeyMap *m, uint64_t key, uint16_t ns);

/*
 * The entry of (@key, @ns), added with value and tag 0 when absent
 * (*@added tells which).  Pointers returned earlier become invalid.
 */
KeyMapEntry *keymap_insert(KeyMap *m, uint64_t key, uint16_t ns,
                           bool *added);

/* Remove @e; pointers returned earlier become invalid. */
void keymap_remove(KeyMap *m, KeyMapEntry *e);

/*
 * The first used entry at or after *@pos (0 to start), moving *@pos past
 * it; NULL at the end.  The way to walk a map:
 *
 *     for (size_t pos = 0; (e = keymap_next(m, &pos));)
 *
 * An entry may be changed in place; none may be added or removed
 * meanwhile (keymap_retain() removes).
 */
KeyMapEntry *keymap_next(const KeyMap *m, size_t *pos);

/*
 * Keep the entries for which @keep returns true, remove the others.
 * @keep sees every entry once, and may change it; the map is not
 * changed otherwise until every entry was seen.
 */
typedef bool KeyMapKeepFn(KeyMapEntry *e, void *opaque);
void keymap_retain(KeyMap *m, KeyMapKeepFn *keep, void *opaque);

/* Bytes of the table itself. */
static inline size_t keymap_bytes(const KeyMap *m)
{
    return m->size * sizeof(KeyMapEntry);
}

#endif /* NUKSMD_KEYMAP_H */
