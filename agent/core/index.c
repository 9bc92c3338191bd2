/*
 * nuksmd stable index.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <glib.h>

#include "index.h"

void index_init(StableIndex *ix, uint64_t seed)
{
    ix->seed = seed;
    for (size_t i = 0; i < G_N_ELEMENTS(ix->shards); i++) {
        keymap_init(&ix->shards[i], seed);
    }
}

void index_destroy(StableIndex *ix)
{
    for (size_t i = 0; i < G_N_ELEMENTS(ix->shards); i++) {
        keymap_destroy(&ix->shards[i]);
    }
}

/* The top bits pick the shard; the shard's table uses the low ones. */
static KeyMap *shard_of(const StableIndex *ix, uint16_t domain, uint64_t key)
{
    uint64_t h = key_hash(ix->seed, key, domain);

    return (KeyMap *)&ix->shards[h >> (64 - INDEX_SHARD_BITS)];
}

bool index_lookup(const StableIndex *ix, uint16_t domain, uint32_t node,
                  uint64_t digest, SlotId *id)
{
    uint64_t key = key_of_copy(node, digest);
    KeyMapEntry *e = keymap_lookup(shard_of(ix, domain, key), key, domain);

    if (e) {
        *id = e->value;
    }
    return e;
}

bool index_insert(StableIndex *ix, uint16_t domain, uint64_t digest,
                  SlotId id)
{
    uint64_t key = key_of_copy(slot_id_node(id), digest);
    bool added;
    KeyMapEntry *e = keymap_insert(shard_of(ix, domain, key), key, domain,
                                   &added);

    if (added) {
        e->value = id;
    }
    return added;
}

void index_remove(StableIndex *ix, uint16_t domain, uint64_t digest,
                  SlotId id)
{
    uint64_t key = key_of_copy(slot_id_node(id), digest);
    KeyMap *m = shard_of(ix, domain, key);
    KeyMapEntry *e = keymap_lookup(m, key, domain);

    if (e && e->value == id) {
        keymap_remove(m, e);
    }
}

size_t index_count(const StableIndex *ix)
{
    size_t n = 0;

    for (size_t i = 0; i < G_N_ELEMENTS(ix->shards); i++) {
        n += ix->shards[i].count;
    }
    return n;
}
