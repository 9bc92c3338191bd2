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

#define SAMPLE_LINE_BYTES 64
#define SAMPLE_PRIME1 0x9E3779B185EBCA87ull
#define SAMPLE_PRIME2 0xC2B2AE3D27D4EB4Full

/* Line @i in bit-reversed order of the page's 64 (6 bits). */
static unsigned sample_line(unsigned i)
{
    unsigned r = 0;

    for (unsigned b = 0; b < 6; b++) {
        r |= ((i >> b) & 1) << (5 - b);
    }
    return r;
}

uint64_t nuksm_sample_start(void)
{
    return SAMPLE_PRIME2;
}

uint64_t nuksm_sample_continue(const void *page, uint64_t state,
                               unsigned from, unsigned to)
{
    const unsigned char *p = page;

    for (unsigned i = from; i < to; i++) {
        const nuksm_word *w =
            (const nuksm_word *)(p + sample_line(i) * SAMPLE_LINE_BYTES);
        /* Two lanes, so that the multiplications overlap. */
        uint64_t a = state ^ (i + 1), b = state * SAMPLE_PRIME1;

        for (unsigned k = 0; k < 8; k += 2) {
            a = (a ^ w[k]) * SAMPLE_PRIME1;
            b = (b ^ w[k + 1]) * SAMPLE_PRIME2;
        }
        state = (a ^ (b >> 29) ^ (b << 35)) * SAMPLE_PRIME2;
    }
    return state;
}

uint64_t nuksm_mix64(uint64_t h)
{
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return h;
}

uint64_t nuksm_sample_digest(uint64_t state)
{
    return nuksm_mix64(state);
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
