/*
 * nuksmd slot allocator.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <string.h>

#include <glib.h>

#include "slots.h"

_Static_assert(sizeof(Slot) == 16, "slot layout");

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
    g_free(t->reserved);
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

/* Is a slot of bitmap word @w below @limit free? */
static bool word_has_free(const SlotTable *t, uint32_t w, uint32_t limit)
{
    uint32_t below = limit - w * 64;
    uint64_t mask = below < 64 ? (1ull << below) - 1 : ~0ull;

    return (t->used[w] & mask) != mask;
}

bool slots_next_free_span(const SlotTable *t, uint32_t from, uint32_t limit,
                          uint32_t gap, uint32_t *start, uint32_t *end)
{
    uint32_t words = (limit + 63) / 64, w = from / 64, end_w;

    g_assert(limit <= t->top);
    if (from >= limit) {
        return false;
    }
    g_assert(from % 64 == 0);
    while (w < words && !word_has_free(t, w, limit)) {
        w++;
    }
    if (w >= words) {
        return false;
    }
    *start = w * 64;
    for (end_w = ++w; w < words && (w - end_w) * 64 < gap; w++) {
        if (word_has_free(t, w, limit)) {
            end_w = w + 1;
        }
    }
    *end = MIN(end_w * 64, limit);
    return true;
}

bool slots_reserved(const SlotTable *t, uint32_t slot)
{
    return slot < t->top && t->reserved[slot / 64] >> (slot % 64) & 1;
}

/*
 * The first free slot in [@from, @to), or NO_SLOT; outside the reserved
 * ranges unless @reserved_too.
 */
static uint32_t find_free(const SlotTable *t, uint32_t from, uint32_t to,
                          bool reserved_too)
{
    uint32_t s = from;

    while (s < to) {
        uint64_t taken = t->used[s / 64] |
                         (reserved_too ? 0 : t->reserved[s / 64]);
        uint64_t free_bits = ~taken >> (s % 64);

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
        t->reserved = g_renew(uint64_t, t->reserved, words);
        memset(t->used + t->alloc / 64, 0,
               (words - t->alloc / 64) * sizeof(uint64_t));
        memset(t->reserved + t->alloc / 64, 0,
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

/*
 * May the table grow rather than reuse its holes?  While at least half
 * of the slots up to top are in use: runs stay long, and the metadata
 * (which grows with top) stays within twice what is in use.
 */
static bool may_grow(const SlotTable *t)
{
    return (t->top - t->nr_used) * 2 <= t->top;
}

static void take(SlotTable *t, uint32_t slot, SlotState state)
{
    Slot *s = &t->slots[slot];

    t->used[slot / 64] |= 1ull << (slot % 64);
    t->nr_used++;
    s->refs = 0;
    s->pending = 0;
    s->domain = 0;
    s->state = state;
    s->restored = false;
}

bool slots_alloc(SlotTable *t, uint32_t *slot)
{
    uint32_t s;

    if (t->nr_used >= t->capacity) {
        return false;
    }
    s = find_free(t, t->cursor, t->top, false);
    if (s == NO_SLOT) {
        /*
         * No hole after the cursor: grow, or wrap around and reuse the
         * holes (may_grow()).  The holes of reserved ranges are the last
         * resort.
         */
        if (t->top < t->capacity && may_grow(t)) {
            s = t->top;
        } else {
            s = find_free(t, 0, t->top, false);
        }
        if (s == NO_SLOT && t->top < t->capacity) {
            s = t->top;
        } else if (s == NO_SLOT) {
            s = find_free(t, 0, t->top, true);
        }
        extend(t, MAX(t->top, s + 1));
    }
    take(t, s, SLOT_UPLOADING);
    t->cursor = s + 1;
    *slot = s;
    return true;
}

/* True if none of [@start, @start + @len) is in use or reserved. */
static bool range_free(const SlotTable *t, uint32_t start, uint32_t len)
{
    for (uint32_t w = start / 64; w < (start + len) / 64; w++) {
        if (t->used[w] | t->reserved[w]) {
            return false;
        }
    }
    return true;
}

/* The first free range of @len slots at a multiple of @len in [@from, top). */
static uint32_t find_free_range(const SlotTable *t, uint32_t len,
                                uint32_t from)
{
    for (uint32_t s = from / len * len; s + len <= t->top; s += len) {
        if (range_free(t, s, len)) {
            return s;
        }
    }
    return NO_SLOT;
}

bool slots_reserve_range(SlotTable *t, uint32_t len, uint32_t *start)
{
    uint32_t above_top = (t->top + len - 1) / len * len;
    bool room = above_top + len <= t->capacity;
    uint32_t s = find_free_range(t, len, t->range_cursor);

    g_assert(len % 64 == 0);
    if (s == NO_SLOT && !(room && may_grow(t))) {
        s = find_free_range(t, len, 0);
    }
    if (s == NO_SLOT && room) {
        s = above_top;
        extend(t, s + len);
    }
    if (s == NO_SLOT) {
        return false;
    }
    memset(t->reserved + s / 64, 0xff, len / 64 * sizeof(uint64_t));
    t->range_cursor = s + len;
    *start = s;
    return true;
}

void slots_unreserve_range(SlotTable *t, uint32_t start, uint32_t len)
{
    memset(t->reserved + start / 64, 0, len / 64 * sizeof(uint64_t));
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
