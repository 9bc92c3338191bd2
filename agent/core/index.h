/*
 * nuksmd stable index: (merge domain, node, digest) -> the slot of that
 * node holding that content, for slots being uploaded or ready: a content
 * has at most one copy per node.  Sharded by digest so that growing the
 * index rehashes one shard at a time, never the whole index.
 *
 * The key is key_of_copy() (keymap.h), where the node takes the top bits
 * of the digest: two contents whose digests differ only there share an
 * entry, so the second one is not indexed (and merges later, or not at
 * all).  Merges
 * never trust a digest anyway: every page is compared with its slot.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_INDEX_H
#define NUKSMD_INDEX_H

#include "keymap.h"
#include "slots.h"

#define INDEX_SHARD_BITS 6

typedef struct StableIndex {
    KeyMap shards[1u << INDEX_SHARD_BITS];
    uint64_t seed;
} StableIndex;

void index_init(StableIndex *ix, uint64_t seed);
void index_destroy(StableIndex *ix);

/* The copy of (@domain, @digest) on @node. */
bool index_lookup(const StableIndex *ix, uint16_t domain, uint32_t node,
                  uint64_t digest, SlotId *id);

/*
 * Map (@domain, node of @id, @digest) to @id; false if it already maps to
 * a slot.
 */
bool index_insert(StableIndex *ix, uint16_t domain, uint64_t digest,
                  SlotId id);

/* Forget (@domain, node of @id, @digest) if it maps to @id. */
void index_remove(StableIndex *ix, uint16_t domain, uint64_t digest,
                  SlotId id);

/* Slots indexed. */
size_t index_count(const StableIndex *ix);

#endif /* NUKSMD_INDEX_H */
