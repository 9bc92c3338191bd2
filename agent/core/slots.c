/*
 * nuksmd slot allocator.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <string.h>

#include <glib.h>

#include "slots.h"

_Static_assert(sizeof(Slot) == 24, "slot layout");

#define NO_SLOT UINT32_MAX
#define MIN_ALLOC 1024u

void slots_init(SlotTable *t, uint32_t capacity, uint32_t initial_gen)
{
    *t = (SlotTable) {
        .capacity = capacity,
        .initial_gen = initial_gen,
    };
}

void slots_destroy(SlotTable *t)
{
    g_free(t->slots);
    g_free(t->used);
    slots_init(t, t->capacity, t->initial_gen);
}

static bool test_bit(const SlotTable *t, uint32_t slot)
{
    return t->used[slot / 64] >> (slot % 64) & 1;
}

bool slots_in_use(const SlotTable *t, uint32_t slot)
{
    return slot < t->top && test_bit(t, slot);
}

/* The first free slot in [@from, @to), or NO_SLOT. */
static uint32_t find_free(const SlotTable *t, uint32_t from, uint32_t to)
{
    uint32_t s = from;

    while (s < to) {
        uint64_t free_bits = ~t->used[s / 64] >> (s % 64);

        if (free_bits) {
            s += __builtin_ctzll(free_bits);
            return s < to ? s : NO_SLOT;
        }
        s = (s / 64 + 1) * 64;
    }
    return NO_SLOT;
}

/* Make slots [top, @end) usable, as never-used free slots. */
static void extend(SlotTable *t, uint32_t end)
{
    if (end > t->alloc) {
        uint32_t limit = (t->capacity + 63) / 64 * 64;
        uint32_t alloc = MAX(MAX(t->alloc * 2, MIN_ALLOC), end);
        uint32_t words;

        /* Whole bitmap words; never more than the store can hold. */
        alloc = MIN((alloc + 63) / 64 * 64, limit);
        words = alloc / 64;

        t->slots = g_renew(Slot, t->slots, alloc);
        t->used = g_renew(uint64_t, t->used, words);
        memset(t->used + t->alloc / 64, 0,
               (words - t->alloc / 64) * sizeof(uint64_t));
        t->alloc = alloc;
    }
    for (; t->top < end; t->top++) {
        t->slots[t->top] = (Slot) {
            .gen = t->initial_gen,
            .state = SLOT_FREE,
        };
    }
}

static void take(SlotTable *t, uint32_t slot, SlotState state)
{
    Slot *s = &t->slots[slot];

    t->used[slot / 64] |= 1ull << (slot % 64);
    t->nr_used++;
    s->digest = 0;
    s->refs = 0;
    s->pending = 0;
    s->domain = 0;
    s->state = state;
}

bool slots_alloc(SlotTable *t, uint32_t *slot)
{
    uint32_t s;

    if (t->nr_used >= t->capacity) {
        return false;
    }
    s = find_free(t, t->cursor, t->top);
    if (s == NO_SLOT) {
        /*
         * No hole after the cursor.  Grow while at least half of the
         * slots in use are taken, so that runs stay long; else wrap
         * around and reuse the holes, so that the metadata (which grows
         * with top) stays within twice what is in use.
         */
        uint32_t holes = t->top - t->nr_used;

        if (t->top < t->capacity && holes * 2 <= t->top) {
            s = t->top;
            extend(t, s + 1);
        } else {
            s = find_free(t, 0, t->top);
        }
    }
    take(t, s, SLOT_UPLOADING);
    t->cursor = s + 1;
    *slot = s;
    return true;
}

bool slots_alloc_at(SlotTable *t, uint32_t slot)
{
    if (t->nr_used >= t->capacity || slot >= t->capacity ||
        slots_in_use(t, slot)) {
        return false;
    }
    extend(t, MAX(t->top, slot + 1));
    take(t, slot, SLOT_UPLOADING);
    return true;
}

void slots_claim_orphan(SlotTable *t, uint32_t slot)
{
    extend(t, MAX(t->top, slot + 1));
    take(t, slot, SLOT_ORPHAN);
}

void slots_release(SlotTable *t, uint32_t slot)
{
    Slot *s = &t->slots[slot];

    s->state = SLOT_FREE;
    s->gen++;
    s->digest = 0;
    t->used[slot / 64] &= ~(1ull << (slot % 64));
    t->nr_used--;
}

void slots_get_ref(SlotTable *t, uint32_t slot)
{
    if (t->slots[slot].refs++) {
        t->sharing++;
    } else {
        t->shared++;
    }
}

bool slots_put_ref(SlotTable *t, uint32_t slot)
{
    Slot *s = &t->slots[slot];

    if (--s->refs) {
        t->sharing--;
    } else {
        t->shared--;
    }
    return !s->refs && !s->pending;
}

void slots_get_pending(SlotTable *t, uint32_t slot)
{
    t->slots[slot].pending++;
}

bool slots_put_pending(SlotTable *t, uint32_t slot)
{
    Slot *s = &t->slots[slot];

    s->pending--;
    return !s->refs && !s->pending;
}
