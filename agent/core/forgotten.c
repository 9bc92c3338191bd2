/*
 * nuksmd forgotten contents (forgotten.h).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <glib.h>

#include "forgotten.h"

/* Words of the first filter: 32 KiB. */
#define FIRST_WORDS 4096u

/*
 * Keys a filter takes per word before the next filter starts: 21 bits
 * a key, so that the whole chain's false yeses stay near 1 in 100.
 */
#define KEYS_PER_WORD 3u

void forgotten_init(Forgotten *f)
{
    *f = (Forgotten) { .nr_filters = 0 };
}

void forgotten_destroy(Forgotten *f)
{
    forgotten_clear(f);
}

/*
 * The key's bits, mixed (MurmurHash3's finalizer) so that the word and
 * the bits take no bits the content table's sets were picked by: the
 * filter then fills evenly whatever keys the table forgot.
 */
static uint64_t mix(uint64_t key)
{
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    key *= 0xc4ceb9fe1a85ec53ull;
    return key ^ key >> 33;
}

static uint64_t *word_of(const ForgottenFilter *filter, uint64_t mixed)
{
    return &filter->words[(mixed >> 32) & (filter->nr_words - 1)];
}

/* The four bits of a key in its word. */
static uint64_t bits_of(uint64_t mixed)
{
    return 1ull << (mixed & 63) | 1ull << (mixed >> 6 & 63) |
           1ull << (mixed >> 12 & 63) | 1ull << (mixed >> 18 & 63);
}

void forgotten_add(Forgotten *f, uint64_t key)
{
    uint64_t mixed = mix(key);
    ForgottenFilter *last = f->nr_filters ? &f->filters[f->nr_filters - 1]
                                          : NULL;

    if (!last || last->keys >= last->nr_words * KEYS_PER_WORD) {
        g_assert(f->nr_filters < FORGOTTEN_FILTERS_MAX);
        last = &f->filters[f->nr_filters];
        last->nr_words = (size_t)FIRST_WORDS << f->nr_filters;
        last->words = g_new0(uint64_t, last->nr_words);
        last->keys = 0;
        f->nr_filters++;
    }
    *word_of(last, mixed) |= bits_of(mixed);
    last->keys++;
    f->keys++;
}

bool forgotten_may_hold(const Forgotten *f, uint64_t key)
{
    uint64_t mixed = mix(key), bits = bits_of(mixed);

    for (unsigned i = 0; i < f->nr_filters; i++) {
        if ((*word_of(&f->filters[i], mixed) & bits) == bits) {
            return true;
        }
    }
    return false;
}

void forgotten_clear(Forgotten *f)
{
    for (unsigned i = 0; i < f->nr_filters; i++) {
        g_free(f->filters[i].words);
    }
    forgotten_init(f);
}

size_t forgotten_bytes(const Forgotten *f)
{
    size_t bytes = 0;

    for (unsigned i = 0; i < f->nr_filters; i++) {
        bytes += f->filters[i].nr_words * sizeof(uint64_t);
    }
    return bytes;
}
