/*
 * Unit tests of nuksmd's content sketches (agent/core/sketch.c): the
 * sample stays bounded, follows pages that change, and estimates
 * AdaptMD's similarity (pages of the smaller VM whose content the other
 * holds, over its pages) against the exact count.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <stdlib.h>

#include <glib.h>

#include "nuksm-digest.h"
#include "sketch.h"

#define SEED 0x1234u

/* The digest of content number @c: any 64-bit value spread as XXH3's. */
static uint64_t content(uint64_t c)
{
    return (c + 1) * 0x9e3779b97f4a7c15ull ^ 0x5851f42d4c957f2dull;
}

/* A small VM keeps every page: its sketch is exact. */
static void test_small_exact(void)
{
    ContentSketch a, b;
    SketchOverlap o;

    sketch_init(&a, SEED);
    sketch_init(&b, SEED);
    for (uint64_t p = 0; p < 1000; p++) {
        sketch_note(&a, p, content(p));
        sketch_note(&b, p, content(p < 300 ? p : 100000 + p));
    }
    /* b's page 0 twice: duplicates count as pages. */
    sketch_note(&b, 5000, content(0));
    g_assert_cmpuint(a.shift, ==, 0);
    g_assert_cmpuint(sketch_pages(&a), ==, 1000);
    sketch_compare(&a, &b, &o);
    g_assert_cmpuint(o.sampled_a, ==, 1000);
    g_assert_cmpuint(o.alike_a, ==, 300);
    g_assert_cmpuint(o.sampled_b, ==, 1001);
    g_assert_cmpuint(o.alike_b, ==, 301);
    /* a is the smaller: 300 of its 1000 pages. */
    g_assert_cmpuint(sketch_similarity_pm(&o), ==, 300);
    sketch_destroy(&a);
    sketch_destroy(&b);
}

/* A page that changes takes its new content into the sketch. */
static void test_page_changes(void)
{
    ContentSketch a, b;
    SketchOverlap o;

    sketch_init(&a, SEED);
    sketch_init(&b, SEED);
    for (uint64_t p = 0; p < 100; p++) {
        sketch_note(&a, p, content(p));
        sketch_note(&b, p, content(p));
    }
    for (uint64_t p = 0; p < 50; p++) {
        sketch_note(&a, p, content(7000 + p));
    }
    sketch_compare(&a, &b, &o);
    g_assert_cmpuint(o.sampled_a, ==, 100);
    g_assert_cmpuint(o.alike_a, ==, 50);
    g_assert_cmpuint(sketch_similarity_pm(&o), ==, 500);
    sketch_destroy(&a);
    sketch_destroy(&b);
}

/*
 * A VM of a million pages keeps between SKETCH_PAGES / 2 and
 * SKETCH_PAGES, and stands for about its size.
 */
static void test_bounded(void)
{
    const uint64_t n = 1 << 20;
    ContentSketch a;

    sketch_init(&a, SEED);
    for (uint64_t p = 0; p < n; p++) {
        sketch_note(&a, p, content(p));
        g_assert_cmpuint(a.pages.count, <=, SKETCH_PAGES);
    }
    g_assert_cmpuint(a.pages.count, >=, SKETCH_PAGES / 2);
    g_assert_cmpuint(a.shift, >=, 8);
    g_assert_cmpfloat_with_epsilon((double)sketch_pages(&a) / n, 1.0, 0.1);
    sketch_destroy(&a);
}

/*
 * Large VMs, at several true similarities, and of unequal sizes: the
 * estimate is within 3 points of the exact figure (about three standard
 * errors), the smaller VM's, and each sample compares at the stricter.
 */
static void test_estimate(void)
{
    static const double truths[] = { 0.0, 0.1, 0.4, 0.5, 0.9, 1.0 };

    for (size_t t = 0; t < G_N_ELEMENTS(truths); t++) {
        const uint64_t small = 200000, large = 600000;
        uint64_t alike = truths[t] * small;
        ContentSketch a, b;
        SketchOverlap o;

        sketch_init(&a, SEED);
        sketch_init(&b, SEED);
        /* b: contents 0..large-1; a: @alike of them, then its own. */
        for (uint64_t p = 0; p < large; p++) {
            sketch_note(&b, p, content(p));
        }
        for (uint64_t p = 0; p < small; p++) {
            sketch_note(&a, p, content(p < alike ? p * 3 : 10000000 + p));
        }
        g_assert_cmpuint(b.shift, >, a.shift);
        sketch_compare(&a, &b, &o);
        g_assert_cmpuint(o.shift, ==, b.shift);
        g_test_message("true %.1f%%, estimated %.1f%% (%" G_GUINT64_FORMAT
                       " of %" G_GUINT64_FORMAT " sampled pages)",
                       truths[t] * 100, sketch_similarity_pm(&o) / 10.0,
                       o.alike_a, o.sampled_a);
        g_assert_cmpint(abs((int)sketch_similarity_pm(&o) -
                            (int)(truths[t] * 1000)), <=, 30);
        sketch_destroy(&a);
        sketch_destroy(&b);
    }
}

/*
 * The export: one entry per fingerprint, ascending, with its pages; the
 * fingerprint is the one documented (the top 40 bits of the keyed mix).
 */
static void test_export(void)
{
    ContentSketch a;
    g_autoptr(GArray) out = NULL;
    uint64_t pages = 0;

    sketch_init(&a, SEED);
    for (uint64_t p = 0; p < 300; p++) {
        sketch_note(&a, p, content(p % 100));
    }
    out = sketch_export(&a);
    g_assert_cmpuint(out->len, ==, 100);
    for (guint i = 0; i < out->len; i++) {
        uint64_t e = g_array_index(out, uint64_t, i);

        g_assert_cmpuint(e & 0xffffff, ==, 3);
        pages += e & 0xffffff;
        if (i) {
            g_assert_cmpuint(e >> 24, >, g_array_index(out, uint64_t,
                                                       i - 1) >> 24);
        }
    }
    g_assert_cmpuint(pages, ==, 300);
    g_assert_cmpuint(sketch_fingerprint(content(0)), ==,
                     nuksm_mix64(content(0) ^ NUKSM_SKETCH_SEED) >> 24);
    sketch_destroy(&a);
}

/* Nothing sampled: no similarity, not a division by zero. */
static void test_empty(void)
{
    ContentSketch a, b;
    SketchOverlap o;

    sketch_init(&a, SEED);
    sketch_init(&b, SEED);
    sketch_note(&b, 1, content(1));
    sketch_compare(&a, &b, &o);
    g_assert_cmpuint(o.sampled_a, ==, 0);
    g_assert_cmpuint(sketch_similarity_pm(&o), ==, 0);
    sketch_destroy(&a);
    sketch_destroy(&b);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/sketch/small-exact", test_small_exact);
    g_test_add_func("/sketch/page-changes", test_page_changes);
    g_test_add_func("/sketch/bounded", test_bounded);
    g_test_add_func("/sketch/estimate", test_estimate);
    g_test_add_func("/sketch/export", test_export);
    g_test_add_func("/sketch/empty", test_empty);
    return g_test_run();
}
