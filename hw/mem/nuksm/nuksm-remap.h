/*
 * nuksm: changing what backs guest pages, without ever losing a write.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef HW_MEM_NUKSM_REMAP_H
#define HW_MEM_NUKSM_REMAP_H

#include "libnuksm/nuksm-proto.h"

/*
 * A non-blocking userfaultfd able to write-protect anonymous and shmem
 * memory; @dev_fd is /dev/userfaultfd from the agent, or -1.
 */
int nuksm_remap_uffd_open(int dev_fd, Error **errp);

/*
 * Does this kernel report accesses to pages of a store's mappings that
 * are not mapped (UFFD_FEATURE_MINOR_SHMEM, Linux 5.14)?  Known once a
 * userfaultfd was opened.
 */
bool nuksm_remap_reads_supported(void);

/* Register [host, host + len) for write-protection. */
bool nuksm_remap_register(int uffd, void *host, size_t len, Error **errp);
/*
 * Register [host, host + len), all of it mappings of stores, for
 * write-protection and, where the kernel can, minor faults.
 */
bool nuksm_remap_register_store(int uffd, void *host, size_t len,
                                Error **errp);

/*
 * Write-protect (@wp) the @len bytes at @host for write tracking
 * (nuksm-writes.c), or lift that protection and wake their writers.
 * Returns 0 or -errno, quietly: callers have a fallback.
 */
int nuksm_remap_track(int uffd, void *host, size_t len, bool wp);

/*
 * Map those of the @pages pages at @host that @want (all if NULL) onto
 * consecutive slots of a store, starting at @slot, where the content is
 * equal; the other pages stay as they are.  @store_fd is a read-only
 * descriptor of the store.  Sets merged[i] for each page now mapping its
 * slot and returns their number; *err is an errno of a failed step, 0 if
 * none.  @delay_us widens the window between comparing and mapping, for
 * tests (x-commit-delay).
 */
size_t nuksm_remap_merge_run(int uffd, uint8_t *host, size_t pages,
                             int store_fd, uint64_t slot, uint32_t delay_us,
                             const bool *want, bool *merged, int *err);

/*
 * Merge those of the @pages pages at @host that @want with the
 * consecutive slots of a store from @slot, where the content is equal,
 * when every one of them is a private copy inside a mapping of that
 * store in line with its slot already (a window's copy): the copy is
 * dropped and the page reads its slot through the mapping it lies in.
 * No mapping changes.  Arguments and result as nuksm_remap_merge_run().
 */
size_t nuksm_remap_merge_in_place(int uffd, uint8_t *host, size_t pages,
                                  int store_fd, uint64_t slot,
                                  uint32_t delay_us, const bool *want,
                                  bool *merged, int *err);

/*
 * Map the window of @pages pages at @host onto the consecutive slots of a
 * store from @slot, as one mapping.  Pages with want[i] merge where their
 * content equals their slot (merged[i] is set); every other page keeps
 * its content as a private copy inside the new mapping.  Nothing changes
 * unless some page merges: returns how many did.  *err is an errno of a
 * failed step (nothing changed then), 0 if none.  @delay_us widens the
 * window between comparing and mapping, for tests (x-commit-delay).
 */
size_t nuksm_remap_merge_window(int uffd, uint8_t *host, size_t pages,
                                int store_fd, uint64_t slot,
                                uint32_t delay_us, const bool *want,
                                bool *merged, int *err);

/*
 * What a page of an incoming migration must be to land on a slot: the
 * page as sent (@content), or if it came as a digest, a page of which
 * @match(page, @strong) is true.
 */
typedef struct NuksmLandCheck {
    const uint8_t *content;
    bool (*match)(const void *page, const uint8_t *strong);
    const uint8_t *strong;
} NuksmLandCheck;

/*
 * Map slot @slot of @store_fd over the guest page at @host if it passes
 * @check, with no write protection: a page of an incoming migration,
 * which only the caller writes.  True if it did; *err says why not, if
 * a call failed.
 */
bool nuksm_remap_land(uint8_t *host, int store_fd, uint64_t slot,
                      const NuksmLandCheck *check, int *err);

/* What became of a page nuksm_remap_probe_reads() was asked to probe. */
typedef enum NuksmReadProbe {
    NUKSM_READ_PROBE_SET,       /* its next access faults (minor fault) */
    NUKSM_READ_PROBE_COPY,      /* not the store's page: left alone */
} NuksmReadProbe;

/*
 * Have the next access to the merged page at @host fault, so that it is
 * seen (a minor fault, which nuksm-writes.c resolves): drop its entry
 * from the page table, where it still maps its slot.  A page that is a
 * private copy (a write broke its sharing) is left alone.  @pagemap_fd
 * is a descriptor of /proc/self/pagemap.
 */
NuksmReadProbe nuksm_remap_probe_reads(int uffd, int pagemap_fd,
                                       uint8_t *host);

/*
 * Drop the anonymous pages at @host that are all zero (they read back as
 * zero).  Never call it on a range mapping a store: MADV_DONTNEED there
 * would expose the store.  Sets zeroed[i]; returns their number.
 */
size_t nuksm_remap_zero_run(int uffd, uint8_t *host, size_t pages,
                            bool *zeroed);

/*
 * The first step of rebuilding a huge page: write-protect the @len bytes
 * at @host (a stretch of a huge page's size and alignment) and copy them
 * into fresh anonymous memory of the same alignment, advised for huge
 * pages, at *@stage.  The pages with zero[i] (holes a dropped zero page
 * left, which the protection would not cover) are populated first, their
 * content untouched.  Where the first touch of *@stage found no huge page
 * free, MADV_COLLAPSE has the kernel make one.  Returns 0, or -errno
 * with nothing changed.
 */
int nuksm_remap_huge_stage(int uffd, uint8_t *host, size_t len,
                           const bool *zero, uint8_t **stage);

/*
 * The second step: move @stage over @host if @place, as fresh anonymous
 * memory registered with @uffd, else drop it; either way the writers
 * held meanwhile go on.  Returns 0, or -errno if @stage could not be
 * moved (it is dropped, and @host is as it was).
 */
int nuksm_remap_huge_place(int uffd, uint8_t *host, size_t len,
                           uint8_t *stage, bool place);

/*
 * Replace [host, host + len) with fresh anonymous memory (reads as zero),
 * with the advice QEMU gives guest RAM; registered with @uffd if >= 0.
 * Returns 0 or -errno.
 */
int nuksm_remap_anonymous(int uffd, void *host, size_t len);

#endif /* HW_MEM_NUKSM_REMAP_H */
