/*
 * nuksmd hash table of small fixed-size entries.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <glib.h>

#include "keymap.h"
#include "nuksm-digest.h"

_Static_assert(sizeof(KeyMapEntry) == 16, "keymap entry layout");

/* Smallest table; it grows at 3/4 load and shrinks below 1/8. */
#define KEYMAP_MIN_SIZE 16u

uint64_t key_hash(uint64_t seed, uint64_t key, uint16_t ns)
{
    return nuksm_mix64((key ^ seed) + ns * 0x9e3779b97f4a7c15ull);
}

void keymap_init(KeyMap *m, uint64_t seed)
{
    *m = (KeyMap) { .seed = seed };
}

void keymap_destroy(KeyMap *m)
{
    g_free(m->entries);
    keymap_init(m, m->seed);
}

static size_t bucket_of(const KeyMap *m, uint64_t key, uint16_t ns)
{
    return key_hash(m->seed, key, ns) & (m->size - 1);
}

static void resize(KeyMap *m, size_t size)
{
    KeyMapEntry *old = m->entries;
    size_t old_size = m->size;

    m->entries = g_new0(KeyMapEntry, size);
    m->size = size;
    for (size_t i = 0; i < old_size; i++) {
        size_t j;

        if (!old[i].used) {
            continue;
        }
        j = bucket_of(m, old[i].key, old[i].ns);
        while (m->entries[j].used) {
            j = (j + 1) & (size - 1);
        }
        m->entries[j] = old[i];
    }
    g_free(old);
}

KeyMapEntry *keymap_lookup(const KeyMap *m, uint64_t key, uint16_t ns)
{
    size_t i;

    if (!m->count) {
        return NULL;
    }
    for (i = bucket_of(m, key, ns); m->entries[i].used;
         i = (i + 1) & (m->size - 1)) {
        if (m->entries[i].key == key && m->entries[i].ns == ns) {
            return &m->entries[i];
        }
    }
    return NULL;
}

KeyMapEntry *keymap_insert(KeyMap *m, uint64_t key, uint16_t ns,
                           bool *added)
{
    KeyMapEntry *e = keymap_lookup(m, key, ns);
    size_t i;

    *added = !e;
    if (e) {
        return e;
    }
    if ((m->count + 1) * 4 > m->size * 3) {
        resize(m, m->size ? m->size * 2 : KEYMAP_MIN_SIZE);
    }
    for (i = bucket_of(m, key, ns); m->entries[i].used;
         i = (i + 1) & (m->size - 1)) {
        continue;
    }
    e = &m->entries[i];
    *e = (KeyMapEntry) { .key = key, .ns = ns, .used = 1 };
    m->count++;
    return e;
}

KeyMapEntry *keymap_next(const KeyMap *m, size_t *pos)
{
    while (*pos < m->size) {
        KeyMapEntry *e = &m->entries[(*pos)++];

        if (e->used) {
            return e;
        }
    }
    return NULL;
}

void keymap_retain(KeyMap *m, KeyMapKeepFn *keep, void *opaque)
{
    KeyMap kept;
    KeyMapEntry *e;
    bool added;

    keymap_init(&kept, m->seed);
    for (size_t pos = 0; (e = keymap_next(m, &pos));) {
        if (keep(e, opaque)) {
            *keymap_insert(&kept, e->key, e->ns, &added) = *e;
        }
    }
    keymap_destroy(m);
    *m = kept;
}

void keymap_remove(KeyMap *m, KeyMapEntry *e)
{
    size_t mask = m->size - 1;
    size_t hole = e - m->entries;
    size_t j = hole;

    /*
     * Backward-shift deletion: move later members of the probe chain
     * into the hole unless their bucket lies cyclically in (hole, j], so
     * that lookups never need tombstones.
     */
    for (;;) {
        size_t bucket;

        j = (j + 1) & mask;
        if (!m->entries[j].used) {
            break;
        }
        bucket = bucket_of(m, m->entries[j].key, m->entries[j].ns);
        if (((j - bucket) & mask) >= ((j - hole) & mask)) {
            m->entries[hole] = m->entries[j];
            hole = j;
        }
    }
    m->entries[hole].used = 0;
    m->count--;

    if (!m->count) {
        keymap_destroy(m);
    } else if (m->size > KEYMAP_MIN_SIZE && m->count * 8 < m->size) {
        resize(m, m->size / 2);
    }
}
