/*
 * nuksm page digests and zero-page detection.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <xxhash.h>

#include "nuksm-digest.h"

/* Guest RAM may have been written through any type: read it may_alias. */
typedef uint64_t __attribute__((may_alias)) nuksm_word;

uint64_t nuksm_page_digest(const void *page, size_t len)
{
    return XXH3_64bits(page, len);
}

bool nuksm_page_is_zero(const void *page, size_t len)
{
    const unsigned char *p = page;
    size_t i = 0;

    while (i < len && ((uintptr_t)(p + i) % sizeof(nuksm_word))) {
        if (p[i++]) {
            return false;
        }
    }

    /*
     * OR a 64-byte block together before testing it: the compiler turns
     * this into vector loads, and most non-zero pages fail on the first
     * block so the early exit keeps the common case cheap.
     */
    for (; i + 8 * sizeof(nuksm_word) <= len; i += 8 * sizeof(nuksm_word)) {
        const nuksm_word *w = (const nuksm_word *)(p + i);

        if (w[0] | w[1] | w[2] | w[3] | w[4] | w[5] | w[6] | w[7]) {
            return false;
        }
    }
    for (; i + sizeof(nuksm_word) <= len; i += sizeof(nuksm_word)) {
        if (*(const nuksm_word *)(p + i)) {
            return false;
        }
    }
    for (; i < len; i++) {
        if (p[i]) {
            return false;
        }
    }
    return true;
}
