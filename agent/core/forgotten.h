/*
 * nuksmd forgotten contents: the keys (contents.h) of the pages seen
 * that the content table forgot, in a filter that tells whether a key
 * may be among them: never no for one that is, yes for about 1 in 100
 * that is not.
 *
 * A chain of blocked Bloom filters, each twice the size of the one
 * before it and filled to about 21 bits per key: a key sets four bits
 * of one 64-bit word, so that a look reads one cache line per filter.
 * Keys are never taken out; one whose page changed or went since costs
 * only a false yes.  About 3 bytes per key, up to twice that just after
 * a filter started, against the content table's 16 and more per page
 * seen.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_FORGOTTEN_H
#define NUKSMD_FORGOTTEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Filters of a chain at most: the last holds 2^(12+27) words' keys. */
#define FORGOTTEN_FILTERS_MAX 28u

typedef struct ForgottenFilter {
    uint64_t *words;
    size_t nr_words;         /* a power of two */
    size_t keys;
} ForgottenFilter;

typedef struct Forgotten {
    ForgottenFilter filters[FORGOTTEN_FILTERS_MAX];
    unsigned nr_filters;
    size_t keys;             /* added since the last clear */
} Forgotten;

void forgotten_init(Forgotten *f);
void forgotten_destroy(Forgotten *f);

/* Add @key, a hash as uniform as key_hash()'s (keymap.h). */
void forgotten_add(Forgotten *f, uint64_t key);

/* May @key have been added since the last clear? */
bool forgotten_may_hold(const Forgotten *f, uint64_t key);

/* Forget every key. */
void forgotten_clear(Forgotten *f);

/* Bytes of the filters. */
size_t forgotten_bytes(const Forgotten *f);

#endif /* NUKSMD_FORGOTTEN_H */
