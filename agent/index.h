/*
 * nuksmd stable index: (merge domain, digest) -> the slot holding that
 * content, for slots being uploaded or ready.  Sharded by digest so that
 * growing the index rehashes one shard at a time, never the whole index.
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

bool index_lookup(const StableIndex *ix, uint16_t domain, uint64_t digest,
                  SlotId *id);

/* Map (@domain, @digest) to @id; false if it already maps to a slot. */
bool index_insert(StableIndex *ix, uint16_t domain, uint64_t digest,
                  SlotId id);

/* Forget (@domain, @digest) if it maps to @id. */
void index_remove(StableIndex *ix, uint16_t domain, uint64_t digest,
                  SlotId id);

/* Slots indexed. */
size_t index_count(const StableIndex *ix);

#endif /* NUKSMD_INDEX_H */
