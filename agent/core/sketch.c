/*
 * nuksmd content sketches (sketch.h).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <glib.h>

#include "nuksm-digest.h"
#include "sketch.h"

/* Fixed, not secret: sketches of two hosts' VMs sample alike. */
#define SKETCH_SEED 0x6e756b736d736b74ull

/* A sampled page's fingerprint: the top 40 bits of its content's hash. */
static uint64_t fingerprint(const KeyMapEntry *e)
{
    return (uint64_t)e->value << 8 | e->tag;
}

/* Is a content whose fingerprint is @fp in the sample of @shift? */
static bool in_sample(uint64_t fp, uint32_t shift)
{
    return !shift || !(fp >> (40 - shift));
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

/* Halve the sample: one more top bit must be zero. */
static void tighten(ContentSketch *sk)
{
    KeyMap kept;
    bool added;

    sk->shift++;
    keymap_init(&kept, sk->pages.seed);
    for (size_t i = 0; i < sk->pages.size; i++) {
        const KeyMapEntry *e = &sk->pages.entries[i];
        KeyMapEntry *k;

        if (e->used && in_sample(fingerprint(e), sk->shift)) {
            k = keymap_insert(&kept, e->key, 0, &added);
            k->value = e->value;
            k->tag = e->tag;
        }
    }
    keymap_destroy(&sk->pages);
    sk->pages = kept;
}

void sketch_note(ContentSketch *sk, uint64_t page, uint64_t digest)
{
    uint64_t fp = nuksm_mix64(digest ^ SKETCH_SEED) >> 24;
    KeyMapEntry *e = keymap_lookup(&sk->pages, page, 0);
    bool added;

    if (!in_sample(fp, sk->shift)) {
        if (e) {
            keymap_remove(&sk->pages, e);
        }
        return;
    }
    e = keymap_insert(&sk->pages, page, 0, &added);
    e->value = fp >> 8;
    e->tag = fp & 0xff;
    /* 40 bits: a sample of one content in 2^40 is as far as it goes. */
    while (sk->pages.count > SKETCH_PAGES && sk->shift < 40) {
        tighten(sk);
    }
}

uint64_t sketch_pages(const ContentSketch *sk)
{
    return (uint64_t)sk->pages.count << MIN(sk->shift, 32u);
}

/* The fingerprints of @sk in the sample of @shift, as a set. */
static GHashTable *sample_set(const ContentSketch *sk, uint32_t shift)
{
    GHashTable *set = g_hash_table_new_full(g_int64_hash, g_int64_equal,
                                            g_free, NULL);

    for (size_t i = 0; i < sk->pages.size; i++) {
        const KeyMapEntry *e = &sk->pages.entries[i];
        uint64_t fp = fingerprint(e);

        if (e->used && in_sample(fp, shift) &&
            !g_hash_table_contains(set, &fp)) {
            g_hash_table_add(set, g_memdup2(&fp, sizeof(fp)));
        }
    }
    return set;
}

/* @sk's sampled pages in the sample of @shift, and how many are in @set. */
static void count_alike(const ContentSketch *sk, uint32_t shift,
                        GHashTable *set, uint64_t *sampled, uint64_t *alike)
{
    *sampled = *alike = 0;
    for (size_t i = 0; i < sk->pages.size; i++) {
        const KeyMapEntry *e = &sk->pages.entries[i];
        uint64_t fp = fingerprint(e);

        if (e->used && in_sample(fp, shift)) {
            ++*sampled;
            *alike += g_hash_table_contains(set, &fp);
        }
    }
}

void sketch_compare(const ContentSketch *a, const ContentSketch *b,
                    SketchOverlap *out)
{
    uint32_t shift = MAX(a->shift, b->shift);
    GHashTable *in_a = sample_set(a, shift);
    GHashTable *in_b = sample_set(b, shift);

    out->shift = shift;
    count_alike(a, shift, in_b, &out->sampled_a, &out->alike_a);
    count_alike(b, shift, in_a, &out->sampled_b, &out->alike_b);
    g_hash_table_destroy(in_a);
    g_hash_table_destroy(in_b);
}

uint32_t sketch_similarity_pm(const SketchOverlap *o)
{
    bool a_smaller = o->sampled_a <= o->sampled_b;
    uint64_t sampled = a_smaller ? o->sampled_a : o->sampled_b;
    uint64_t alike = a_smaller ? o->alike_a : o->alike_b;

    return sampled ? (uint32_t)((alike * 1000 + sampled / 2) / sampled) : 0;
}
