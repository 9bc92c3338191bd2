/*
 * nuksm page digests and zero-page detection, shared by the QEMU scanner
 * and nuksmd so both sides compute identical digests.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSM_DIGEST_H
#define NUKSM_DIGEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * 64-bit digest of @len bytes at @page (XXH3_64bits, seed 0).  Equal
 * digests only nominate candidates: a merge always compares full contents.
 */
uint64_t nuksm_page_digest(const void *page, size_t len);

/*
 * Sampled digests: of a few of a 4 KiB page's 64 lines of 64 bytes, read
 * in bit-reversed order (0, 32, 16, 48, 8, ...), so that the first 2^k
 * of them are spread evenly over the page, and the lines a weaker digest
 * reads are the first lines a stronger one reads.  A digest is computed
 * in two steps: the state after @to lines continues the state after
 * @from lines, so that going from a weak digest to a stronger one costs
 * only the lines added (progressive hashing, after UKSM).  Equal pages
 * have equal sampled digests; pages that differ only outside the lines
 * read have equal ones too: a sampled digest tells a page changed, never
 * that two pages are equal.
 */
#define NUKSM_PAGE_LINES 64

/* The state of a sampled digest before any line. */
uint64_t nuksm_sample_start(void);

/*
 * The state after lines @from to @to (exclusive, at most
 * NUKSM_PAGE_LINES) of the 4 KiB page at @page, continuing @state, the
 * state after its first @from lines.
 */
uint64_t nuksm_sample_continue(const void *page, uint64_t state,
                               unsigned from, unsigned to);

/* The digest of a state (all its bits depend on every line read). */
uint64_t nuksm_sample_digest(uint64_t state);

/*
 * MurmurHash3's 64-bit finaliser: a bijection that mixes every bit of @h
 * into every bit of the result.
 */
uint64_t nuksm_mix64(uint64_t h);

/* True if all @len bytes at @page are zero (true for @len == 0). */
bool nuksm_page_is_zero(const void *page, size_t len);

#endif /* NUKSM_DIGEST_H */
