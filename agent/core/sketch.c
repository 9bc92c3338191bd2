/*
 * nuksmd content sketches (sketch.h).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <glib.h>

#include "nuksm-digest.h"
#include "sketch.h"

/* A sampled page's fingerprint: the top 40 bits of its content's hash. */
static uint64_t fingerprint(const KeyMapEntry *e)
{
    return (uint64_t)e->value << 8 | e->tag;
}

/* Is a content whose fingerprint is @fp in the sample of @shift? */
static bool in_sample(uint64_t fp, uint32_t shift)
{
    return !shift || !(fp >> (NUKSM_SKETCH_FINGERPRINT_BITS - shift));
}

void sketch_init(ContentSketch *sk, uint64_t seed)
{
    *sk = (ContentSketch) { .shift = 0 };
    keymap_init(&sk->pages, seed);
}

void sketch_destroy(ContentSketch *sk)
{
    keymap_destroy(&sk->pages);
}

static bool keep_in_sample(KeyMapEntry *e, void *opaque)
{
    const ContentSketch *sk = opaque;

    return in_sample(fingerprint(e), sk->shift);
}

/* Halve the sample: one more top bit must be zero. */
static void tighten(ContentSketch *sk)
{
    sk->shift++;
    keymap_retain(&sk->pages, keep_in_sample, sk);
}

uint64_t sketch_fingerprint(uint64_t digest)
{
    return nuksm_mix64(digest ^ NUKSM_SKETCH_SEED) >>
           (64 - NUKSM_SKETCH_FINGERPRINT_BITS);
}

void sketch_note(ContentSketch *sk, uint64_t page, uint64_t digest)
{
    uint64_t fp = sketch_fingerprint(digest);
    KeyMapEntry *e = keymap_lookup(&sk->pages, page, 0);
    bool added;

    if (!in_sample(fp, sk->shift)) {
        if (e) {
            keymap_remove(&sk->pages, e);
            sk->changes++;
        }
        return;
    }
    e = keymap_insert(&sk->pages, page, 0, &added);
    if (added || e->value != fp >> 8 || e->tag != (fp & 0xff)) {
        sk->changes++;
    }
    e->value = fp >> 8;
    e->tag = fp & 0xff;
    /* 40 bits: a sample of one content in 2^40 is as far as it goes. */
    while (sk->pages.count > SKETCH_PAGES &&
           sk->shift < NUKSM_SKETCH_FINGERPRINT_BITS) {
        tighten(sk);
    }
}

uint64_t sketch_pages(const ContentSketch *sk)
{
    return (uint64_t)sk->pages.count << MIN(sk->shift, 32u);
}

static gint compare_u64(gconstpointer x, gconstpointer y)
{
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;

    return a < b ? -1 : a > b;
}

GArray *sketch_export(const ContentSketch *sk)
{
    GArray *out = g_array_new(FALSE, FALSE, sizeof(uint64_t));
    const KeyMapEntry *e;
    guint n = 0;

    for (size_t pos = 0; (e = keymap_next(&sk->pages, &pos));) {
        uint64_t fp = fingerprint(e) << 24 | 1;

        g_array_append_val(out, fp);
    }
    g_array_sort(out, compare_u64);
    /* Fold the pages of each fingerprint into one entry. */
    for (guint i = 0; i < out->len; i++) {
        uint64_t fp = g_array_index(out, uint64_t, i) >> 24;

        if (n && g_array_index(out, uint64_t, n - 1) >> 24 == fp) {
            g_array_index(out, uint64_t, n - 1)++;
        } else {
            g_array_index(out, uint64_t, n++) = fp << 24 | 1;
        }
    }
    g_array_set_size(out, n);
    return out;
}

/* Entry @e of an export: its fingerprint, and its sampled pages. */
static uint64_t entry_fp(uint64_t e)
{
    return e >> 24;
}

static uint64_t entry_pages(uint64_t e)
{
    return e & 0xffffff;
}

/*
 * The end of the entries of @s that are in the sample of @shift: they
 * are the smallest fingerprints, so a prefix of the ascending export.
 */
static guint sample_end(const GArray *s, uint32_t shift)
{
    uint64_t limit = 1ull << (NUKSM_SKETCH_FINGERPRINT_BITS - shift);
    guint lo = 0, hi = s->len;

    while (lo < hi) {
        guint mid = lo + (hi - lo) / 2;

        if (entry_fp(g_array_index(s, uint64_t, mid)) < limit) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo;
}

void sketch_compare_samples(const GArray *a, uint32_t shift_a,
                            const GArray *b, uint32_t shift_b,
                            SketchOverlap *out)
{
    uint32_t shift = MAX(shift_a, shift_b);
    guint end_a = sample_end(a, shift), end_b = sample_end(b, shift);
    guint i = 0, j = 0;

    *out = (SketchOverlap) { .shift = shift };
    for (guint k = 0; k < end_a; k++) {
        out->sampled_a += entry_pages(g_array_index(a, uint64_t, k));
    }
    for (guint k = 0; k < end_b; k++) {
        out->sampled_b += entry_pages(g_array_index(b, uint64_t, k));
    }
    /* Both ascending: one merge finds the fingerprints they share. */
    while (i < end_a && j < end_b) {
        uint64_t ea = g_array_index(a, uint64_t, i);
        uint64_t eb = g_array_index(b, uint64_t, j);

        if (entry_fp(ea) < entry_fp(eb)) {
            i++;
        } else if (entry_fp(eb) < entry_fp(ea)) {
            j++;
        } else {
            out->alike_a += entry_pages(ea);
            out->alike_b += entry_pages(eb);
            i++;
            j++;
        }
    }
}

void sketch_compare(const ContentSketch *a, const ContentSketch *b,
                    SketchOverlap *out)
{
    g_autoptr(GArray) ea = sketch_export(a);
    g_autoptr(GArray) eb = sketch_export(b);

    sketch_compare_samples(ea, a->shift, eb, b->shift, out);
}

uint32_t sketch_similarity_pm(const SketchOverlap *o)
{
    bool a_smaller = o->sampled_a <= o->sampled_b;
    uint64_t sampled = a_smaller ? o->sampled_a : o->sampled_b;
    uint64_t alike = a_smaller ? o->alike_a : o->alike_b;

    return sampled ? (uint32_t)((alike * 1000 + sampled / 2) / sampled) : 0;
}
