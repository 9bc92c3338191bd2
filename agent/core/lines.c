/*
 * nuksmd slot lines.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "lines.h"
#include "nuksm-proto.h"

_Static_assert(sizeof(gsize) >= sizeof(uint64_t), "a line in a pointer");

static gpointer line_key(uint64_t page, uint32_t node)
{
    return GSIZE_TO_POINTER(page / LINE_PAGES * NUKSM_MAX_NODES + node);
}

void lines_init(SlotLines *l)
{
    l->lines = g_hash_table_new(NULL, NULL);
    l->owned = g_hash_table_new(NULL, NULL);
}

void lines_destroy(SlotLines *l)
{
    g_clear_pointer(&l->lines, g_hash_table_destroy);
    g_clear_pointer(&l->owned, g_hash_table_destroy);
}

bool lines_slot(const SlotLines *l, uint64_t page, uint32_t node,
                uint32_t capacity, uint32_t *slot)
{
    gpointer value;
    int64_t s;

    if (!g_hash_table_lookup_extended(l->lines, line_key(page, node), NULL,
                                      &value)) {
        return false;
    }
    s = (int64_t)GPOINTER_TO_SIZE(value) + (int64_t)(page % LINE_PAGES);
    if (s < 0 || s >= capacity) {
        return false;
    }
    *slot = s;
    return true;
}

void lines_set(SlotLines *l, uint64_t page, uint32_t node, uint32_t slot)
{
    int64_t start = (int64_t)slot - (int64_t)(page % LINE_PAGES);

    if (!lines_owns(l, page, node)) {
        g_hash_table_insert(l->lines, line_key(page, node),
                            GSIZE_TO_POINTER((gsize)start));
    }
}

bool lines_owns(const SlotLines *l, uint64_t page, uint32_t node)
{
    return g_hash_table_contains(l->owned, line_key(page, node));
}

void lines_own(SlotLines *l, uint64_t page, uint32_t node, uint32_t start)
{
    g_assert(start % LINE_PAGES == 0 && !lines_owns(l, page, node));
    g_hash_table_insert(l->lines, line_key(page, node),
                        GSIZE_TO_POINTER((gsize)start));
    g_hash_table_add(l->owned, line_key(page, node));
}

void lines_disown(SlotLines *l,
                  void (*release)(uint32_t node, uint32_t start,
                                  gpointer opaque),
                  gpointer opaque)
{
    GHashTableIter iter;
    gpointer key;

    g_hash_table_iter_init(&iter, l->owned);
    while (g_hash_table_iter_next(&iter, &key, NULL)) {
        gsize start = GPOINTER_TO_SIZE(g_hash_table_lookup(l->lines, key));

        release(GPOINTER_TO_SIZE(key) % NUKSM_MAX_NODES, start, opaque);
    }
    g_hash_table_remove_all(l->owned);
}

unsigned lines_count(const SlotLines *l)
{
    return g_hash_table_size(l->lines);
}
