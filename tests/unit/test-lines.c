/*
 * Unit tests of nuksmd's slot lines (lines.h) with the slot allocator:
 * scattered duplicates get slots in line with their guest pages, and
 * the holes between them serve the next stretch.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <glib.h>

#include "lines.h"
#include "slots.h"

#define CAP (1u << 20)

/* A slot for @page as the merge engine places one (merge.c). */
static uint32_t place(SlotTable *t, SlotLines *l, uint64_t page)
{
    uint32_t slot;

    if (!(lines_slot(l, page, 0, t->capacity, &slot) &&
          slots_alloc_at(t, slot))) {
        g_assert_true(slots_alloc(t, &slot));
    }
    lines_set(l, page, 0, slot);
    return slot;
}

static void test_no_line(void)
{
    SlotLines l;
    uint32_t slot;

    lines_init(&l);
    g_assert_false(lines_slot(&l, 7, 0, CAP, &slot));
    lines_set(&l, 7, 0, 100);
    g_assert_true(lines_slot(&l, 7, 0, CAP, &slot));
    g_assert_cmpuint(slot, ==, 100);
    g_assert_true(lines_slot(&l, 0, 0, CAP, &slot));
    g_assert_cmpuint(slot, ==, 93);
    g_assert_true(lines_slot(&l, LINE_PAGES - 1, 0, CAP, &slot));
    g_assert_cmpuint(slot, ==, 93 + LINE_PAGES - 1);
    /* Another stretch, another node: no line yet. */
    g_assert_false(lines_slot(&l, LINE_PAGES, 0, CAP, &slot));
    g_assert_false(lines_slot(&l, 7, 1, CAP, &slot));
    /* A line that would start before slot 0, or end past the store. */
    lines_set(&l, 10, 1, 3);
    g_assert_false(lines_slot(&l, 0, 1, CAP, &slot));
    g_assert_true(lines_slot(&l, 7, 1, CAP, &slot));
    g_assert_cmpuint(slot, ==, 0);
    g_assert_false(lines_slot(&l, 10, 1, 3, &slot));
    g_assert_cmpuint(lines_count(&l), ==, 2);
    lines_destroy(&l);
}

/*
 * Every other page a duplicate: each stretch's slots are in line with
 * its pages, and the next stretch fills the holes, so the table stays
 * dense.
 */
static void test_every_other_page(void)
{
    SlotTable t;
    SlotLines l;
    uint64_t stretches = 8;

    slots_init(&t, CAP, 1);
    lines_init(&l);
    for (uint64_t s = 0; s < stretches; s++) {
        uint64_t first = s * LINE_PAGES;
        uint32_t base = place(&t, &l, first);

        for (uint64_t p = first + 2; p < first + LINE_PAGES; p += 2) {
            g_assert_cmpuint(place(&t, &l, p), ==, base + (p - first));
        }
    }
    g_assert_cmpuint(t.nr_used, ==, stretches * LINE_PAGES / 2);
    g_assert_cmpuint(t.top, <=, t.nr_used + LINE_PAGES);
    slots_destroy(&t);
    lines_destroy(&l);
}

/* A slot in line that is taken: the page goes elsewhere, a new line. */
static void test_taken(void)
{
    SlotTable t;
    SlotLines l;
    uint32_t a, b, c;

    slots_init(&t, CAP, 1);
    lines_init(&l);
    a = place(&t, &l, 0);
    g_assert_true(slots_alloc_at(&t, a + 1));   /* someone else's */
    g_assert_false(slots_alloc_at(&t, a + 1));
    b = place(&t, &l, 1);
    g_assert_cmpuint(b, !=, a + 1);
    c = place(&t, &l, 2);
    g_assert_cmpuint(c, ==, b + 1);              /* the new line */
    g_assert_false(slots_alloc_at(&t, CAP));
    slots_destroy(&t);
    lines_destroy(&l);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/lines/no-line", test_no_line);
    g_test_add_func("/lines/every-other-page", test_every_other_page);
    g_test_add_func("/lines/taken", test_taken);
    return g_test_run();
}
