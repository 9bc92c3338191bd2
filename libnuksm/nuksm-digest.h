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

/* True if all @len bytes at @page are zero (true for @len == 0). */
bool nuksm_page_is_zero(const void *page, size_t len);

#endif /* NUKSM_DIGEST_H */
