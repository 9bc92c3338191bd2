/*
 * Unit tests of nuksmd's slot allocator: consecutive allocation, reuse
 * with a new generation, spans with free slots, reserved ranges,
 * reference counts.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <glib.h>

#include "slots.h"

#define GEN 1000u

static uint32_t alloc_one(SlotTable *t)
{
    uint32_t slot = UINT32_MAX;

    g_assert_true(slots_alloc(t, &slot));
    g_assert_cmpuint(slots_get(t, slot)->state, ==, SLOT_UPLOADING);
    g_assert_true(slots_in_use(t, slot));
    return slot;
}

static void free_one(SlotTable *t, uint32_t slot)
{
    slots_get(t, slot)->state = SLOT_FREEING;
    slots_release(t, slot);
    g_assert_false(slots_in_use(t, slot));
}

static void test_consecutive(void)
{
    SlotTable t;

    slots_init(&t, 1u << SLOT_BITS, GEN);
    for (uint32_t i = 0; i < 3000; i++) {
        g_assert_cmpuint(alloc_one(&t), ==, i);
        g_assert_cmpuint(slots_get(&t, i)->gen, ==, GEN);
    }
    g_assert_cmpuint(t.nr_used, ==, 3000);

    /*
     * A few holes: allocation goes on after the last slot handed out, so
     * that a batch still gets a run, rather than filling single holes.
     */
    free_one(&t, 10);
    free_one(&t, 20);
    for (uint32_t i = 3000; i < 3100; i++) {
        g_assert_cmpuint(alloc_one(&t), ==, i);
    }
    slots_destroy(&t);
}

static void test_reuse(void)
{
    enum { CAP = 130 };          /* not a whole number of bitmap words */
    SlotTable t;
    uint32_t slot;

    slots_init(&t, CAP, GEN);
    for (uint32_t i = 0; i < CAP; i++) {
        g_assert_cmpuint(alloc_one(&t), ==, i);
    }
    g_assert_false(slots_alloc(&t, &slot));

    /* Freed slots come back with the next generation. */
    free_one(&t, 129);
    free_one(&t, 64);
    free_one(&t, 5);
    g_assert_cmpuint(slots_get(&t, 64)->gen, ==, GEN + 1);
    g_assert_cmpuint(t.nr_used, ==, CAP - 3);
    g_assert_cmpuint(alloc_one(&t), ==, 5);
    g_assert_cmpuint(slots_get(&t, 5)->gen, ==, GEN + 1);
    g_assert_cmpuint(alloc_one(&t), ==, 64);
    g_assert_cmpuint(alloc_one(&t), ==, 129);
    g_assert_false(slots_alloc(&t, &slot));

    free_one(&t, 64);
    g_assert_cmpuint(alloc_one(&t), ==, 64);
    g_assert_cmpuint(slots_get(&t, 64)->gen, ==, GEN + 2);
    slots_destroy(&t);
}

/*
 * Spans with free slots: none in a store used all over, each free slot
 * in one, aligned to bitmap words, and short runs of used slots inside.
 */
static void test_free_spans(void)
{
    enum { USED = 20000, GAP = 4096 };
    SlotTable t;
    uint32_t start, end;

    slots_init(&t, 1u << SLOT_BITS, GEN);
    for (uint32_t i = 0; i < USED; i++) {
        alloc_one(&t);
    }
    g_assert_false(slots_next_free_span(&t, 0, t.top, GAP, &start, &end));

    /* 100 and 3000 are one span (1000 slots used between), 10000 another. */
    free_one(&t, 100);
    free_one(&t, 3000);
    free_one(&t, 10000);
    free_one(&t, USED - 1);         /* top stays: the last word is partial */
    g_assert_cmpuint(t.top, ==, USED);
    g_assert_true(slots_next_free_span(&t, 0, t.top, GAP, &start, &end));
    g_assert_cmpuint(start, ==, 64);
    g_assert_cmpuint(end, ==, 3008);
    g_assert_true(slots_next_free_span(&t, end, t.top, GAP, &start, &end));
    g_assert_cmpuint(start, ==, 9984);
    g_assert_cmpuint(end, ==, 10048);
    g_assert_true(slots_next_free_span(&t, end, t.top, GAP, &start, &end));
    g_assert_cmpuint(start, ==, 19968);
    g_assert_cmpuint(end, ==, USED);
    g_assert_false(slots_next_free_span(&t, end, t.top, GAP, &start, &end));
    /* A smaller gap splits the first span. */
    g_assert_true(slots_next_free_span(&t, 0, t.top, 64, &start, &end));
    g_assert_cmpuint(end, ==, 128);
    slots_destroy(&t);
}

/* Once most slots are holes, allocation wraps around to reuse them. */
static void test_wrap(void)
{
    SlotTable t;

    slots_init(&t, 1u << SLOT_BITS, GEN);
    for (uint32_t i = 0; i < 1000; i++) {
        alloc_one(&t);
    }
    for (uint32_t i = 100; i < 900; i++) {
        free_one(&t, i);
    }
    /* The holes form a run: a batch gets consecutive slots there. */
    for (uint32_t i = 100; i < 200; i++) {
        g_assert_cmpuint(alloc_one(&t), ==, i);
    }
    g_assert_cmpuint(t.top, ==, 1000);
    slots_destroy(&t);
}

/*
 * A reserved range is aligned, free, and passed over by next-fit until
 * nothing else is free; its slots are taken when asked for by number.
 */
static void test_reserved_ranges(void)
{
    const uint32_t len = 512;
    SlotTable t;
    uint32_t start, other, slot;

    slots_init(&t, 4 * len, GEN);
    g_assert_cmpuint(alloc_one(&t), ==, 0);
    g_assert_true(slots_reserve_range(&t, len, &start));
    g_assert_cmpuint(start, ==, len);  /* slot 0 is in use */
    g_assert_true(slots_reserved(&t, start) &&
                  slots_reserved(&t, start + len - 1));
    g_assert_false(slots_reserved(&t, start - 1));
    /* Next-fit: the holes below the range, then above it. */
    for (slot = 1; slot < len; slot++) {
        g_assert_cmpuint(alloc_one(&t), ==, slot);
    }
    g_assert_cmpuint(alloc_one(&t), ==, 2 * len);
    /* Its slots by number, as a line takes them. */
    g_assert_true(slots_alloc_at(&t, start + 7));
    g_assert_false(slots_alloc_at(&t, start + 7));
    /* The next range skips the one that is partly in use. */
    g_assert_true(slots_reserve_range(&t, len, &other));
    g_assert_cmpuint(other, ==, 3 * len);
    /* Only reserved slots are left: next-fit takes them. */
    for (slot = 2 * len + 1; slot < 3 * len; slot++) {
        g_assert_cmpuint(alloc_one(&t), ==, slot);
    }
    g_assert_true(slots_reserved(&t, alloc_one(&t)));
    /* No free range is left; ending a reservation frees it to next-fit. */
    g_assert_false(slots_reserve_range(&t, len, &slot));
    slots_unreserve_range(&t, other, len);
    g_assert_false(slots_reserved(&t, other));
    slots_destroy(&t);
}

static void test_refcounts(void)
{
    SlotTable t;
    uint32_t a, b;

    slots_init(&t, 1024, GEN);
    a = alloc_one(&t);
    b = alloc_one(&t);

    /* Two pages wait for a's upload. */
    slots_get_pending(&t, a);
    slots_get_pending(&t, a);
    g_assert_cmpuint(t.shared, ==, 0);

    /* Both map it: one shared page, one page saved. */
    slots_get_ref(&t, a);
    g_assert_false(slots_put_pending(&t, a));
    slots_get_ref(&t, a);
    g_assert_false(slots_put_pending(&t, a));
    g_assert_cmpuint(t.shared, ==, 1);
    g_assert_cmpuint(t.sharing, ==, 1);

    slots_get_ref(&t, b);
    slots_get_ref(&t, b);
    slots_get_ref(&t, b);
    g_assert_cmpuint(t.shared, ==, 2);
    g_assert_cmpuint(t.sharing, ==, 3);

    g_assert_false(slots_put_ref(&t, a));
    g_assert_cmpuint(t.shared, ==, 2);
    g_assert_cmpuint(t.sharing, ==, 2);
    /* The last reference: unused, to be freed. */
    g_assert_true(slots_put_ref(&t, a));
    g_assert_cmpuint(t.shared, ==, 1);
    g_assert_cmpuint(t.sharing, ==, 2);

    /* A pending user keeps a slot alive without references. */
    slots_get_pending(&t, b);
    g_assert_false(slots_put_ref(&t, b));
    g_assert_false(slots_put_ref(&t, b));
    g_assert_false(slots_put_ref(&t, b));
    g_assert_cmpuint(t.shared, ==, 0);
    g_assert_cmpuint(t.sharing, ==, 0);
    g_assert_true(slots_put_pending(&t, b));
    slots_destroy(&t);
}

static void test_orphans(void)
{
    SlotTable t;

    slots_init(&t, 1u << SLOT_BITS, GEN);
    slots_claim_orphan(&t, 3);
    slots_claim_orphan(&t, 5000);
    g_assert_cmpuint(t.nr_used, ==, 2);
    g_assert_cmpuint(t.top, ==, 5001);
    g_assert_cmpuint(slots_get(&t, 5000)->state, ==, SLOT_ORPHAN);
    g_assert_false(slots_in_use(&t, 4));

    /* New slots go around orphans. */
    for (uint32_t i = 0; i < 6; i++) {
        g_assert_cmpuint(alloc_one(&t), ==, i < 3 ? i : i + 1);
    }
    g_assert_cmpuint(slots_get(&t, 4)->gen, ==, GEN);
    free_one(&t, 5000);
    g_assert_cmpuint(t.nr_used, ==, 7);
    slots_destroy(&t);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/slots/consecutive", test_consecutive);
    g_test_add_func("/slots/reuse", test_reuse);
    g_test_add_func("/slots/free-spans", test_free_spans);
    g_test_add_func("/slots/wrap", test_wrap);
    g_test_add_func("/slots/reserved-ranges", test_reserved_ranges);
    g_test_add_func("/slots/refcounts", test_refcounts);
    g_test_add_func("/slots/orphans", test_orphans);
    return g_test_run();
}
