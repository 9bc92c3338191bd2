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
}

void lines_destroy(SlotLines *l)
{
    g_clear_pointer(&l->lines, g_hash_table_destroy);
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

    g_hash_table_insert(l->lines, line_key(page, node),
                        GSIZE_TO_POINTER((gsize)start));
}

unsigned lines_count(const SlotLines *l)
{
    return g_hash_table_size(l->lines);
}
