/*
 * What a /proc/<pid>/pagemap entry says about a page of a private mapping
 * of a store file, for QEMU (is a merged page still merged?) and the
 * agent (may a process still read this slot?) alike.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSM_PAGEMAP_H
#define NUKSM_PAGEMAP_H

#include <stdbool.h>
#include <stdint.h>

/* Bits of an entry (Documentation/admin-guide/mm/pagemap.rst). */
#define NUKSM_PM_PRESENT (1ull << 63)
#define NUKSM_PM_SWAPPED (1ull << 62)
#define NUKSM_PM_FILE    (1ull << 61)
#define NUKSM_PM_UFFD_WP (1ull << 57)   /* write-protected by userfaultfd */

/*
 * Does the page of entry @pm still read the file?  Resident from the file,
 * or not faulted in yet (a read would fault the file's page in).  Present
 * and not the file's, or swapped out, it is the process's own copy: a
 * write made it anonymous (copy-on-write).  But swapped out and
 * write-protected by userfaultfd may also be the marker the kernel
 * leaves for a while where QEMU drops a protected page that reads the
 * file (a merge in place, a read probe): taken as reading it, so that
 * the agent never frees a slot under it; QEMU never leaves a merged page
 * protected, so it does not take a copy for one.
 */
static inline bool nuksm_pagemap_reads_file(uint64_t pm)
{
    if (pm & NUKSM_PM_SWAPPED) {
        return pm & NUKSM_PM_UFFD_WP;
    }
    return !(pm & NUKSM_PM_PRESENT) || (pm & NUKSM_PM_FILE);
}

#endif /* NUKSM_PAGEMAP_H */
