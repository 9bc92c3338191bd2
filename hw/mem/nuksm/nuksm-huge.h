/*
 * nuksm: huge pages kept where merging does not pay.
 *
 * QEMU advises guest RAM to use transparent huge pages.  A merge maps a
 * store page into a 2 MiB stretch, and a zero page dropped leaves a hole
 * in one: either splits the huge page there, for good while the stretch
 * holds a merge (khugepaged collapses neither a mapping of a file nor,
 * while userfaultfd is armed, a range with holes).  The guest then walks
 * 512 page-table entries where it walked one: up to 83% more TLB misses
 * (Gemini, EuroSys'23) for a saving of 4 KiB a duplicate.
 *
 * So in a stretch that is a huge page now, duplicates (pages the agent
 * asks to merge, zero pages to drop) are held back (NUKSM_PAGE_HELD, the
 * agent told FAILED) until huge-split of its 512 pages would go: then the
 * split pays for itself, the held pages are released, to be offered or
 * dropped again by the next pass, and the stretch merges as any other.
 * Once writes, an unmerge or a policy leave fewer than half that many
 * merged or dropped (or held back for lack of mappings) in a stretch
 * split so, and a whole walk of the scanner saw no merge there (pages
 * written with the same content merge again) nor an offer (its merge
 * may still come), the split no longer pays: the scanner has its huge
 * page rebuilt (nuksm_commit_rebuild_huge()), and the duplicates left
 * are held back again.
 * A stretch that is not a huge page (the kernel gave it none, or split
 * it already) merges freely.  Reads of a huge page cannot be seen from
 * user space without splitting it (pagemap has no accessed bit; idle
 * page tracking and DAMON are root's and missing from many kernels):
 * the rule weighs what a split saves, not how hot the stretch is
 * (docs/placement.rst, "Huge pages").
 *
 * A stretch is known huge by PAGEMAP_SCAN (Linux 6.7); before it, by
 * all of its pages being present and anonymous, which in RAM advised
 * for huge pages is almost always one.
 *
 * What each stretch holds back is its region's huge_held
 * (nuksm-regions.h), counted for query-nuksm by nuksm_huge_get_stats().
 *
 * Lock rules: everything here is protected by page_lock (nuksm-pages.h),
 * like the flags it holds pages back with.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef HW_MEM_NUKSM_HUGE_H
#define HW_MEM_NUKSM_HUGE_H

#include "exec/ramblock.h"
#include "nuksm-pages.h"

/* huge-split: its default, and its range */
#define NUKSM_HUGE_SPLIT_DEFAULT 64
#define NUKSM_HUGE_SPLIT_MAX NUKSM_TRACK_STRETCH

struct NuksmHuge {
    int pagemap_fd;             /* /proc/self/pagemap, or -1 */
    bool scan_ioctl;            /* PAGEMAP_SCAN works here (Linux 6.7) */
    uint64_t splits;            /* huge pages split for paying */
    uint64_t rebuilt;           /* huge pages rebuilt once it ended */
};

NuksmHuge *nuksm_huge_new(void);
void nuksm_huge_free(NuksmHuge *h);

/*
 * @fresh more duplicates of the stretch of page @idx of @bs (in @rb)
 * would go now: may they, splitting its huge page if it is one, at a
 * threshold of @split pages?  False: hold them back (the caller marks
 * them NUKSM_PAGE_HELD); true: they go, and so may those held before,
 * released here, their indexes (uint64_t) appended to @released if
 * not NULL.
 */
bool nuksm_huge_may_split(NuksmHuge *h, uint32_t split, RAMBlock *rb,
                          NuksmBlockState *bs, uint64_t idx, unsigned fresh,
                          GArray *released);

/* Is the stretch at @host (of a huge page's size and alignment) one? */
bool nuksm_huge_is_huge(NuksmHuge *h, const uint8_t *host);

/*
 * A pass walked the stretch of page @idx of @bs (in @rb): count again
 * what it holds back, and release it if it is no huge page any more.
 * True if its huge page, split as it paid, is to be rebuilt now that
 * fewer than half of @split of its pages are merged, dropped or held
 * back and none merged, was dropped or was offered since the last
 * walk.
 */
bool nuksm_huge_walked(NuksmHuge *h, uint32_t split, RAMBlock *rb,
                       NuksmBlockState *bs, uint64_t idx);

/*
 * Page @idx of @bs was offered to the agent: its stretch is not rebuilt
 * before the next walk, so that the merge the agent may answer with is
 * not held back by a huge page rebuilt under it.
 */
void nuksm_huge_offered(NuksmBlockState *bs, uint64_t idx);

/* The rebuild nuksm_huge_walked() asked for was @done, or failed. */
void nuksm_huge_rebuilt(NuksmHuge *h, NuksmBlockState *bs, uint64_t idx,
                        bool done);

/* Pages held back, huge pages kept, split and rebuilt, into @stats. */
void nuksm_huge_get_stats(NuksmHuge *h, NuksmPages *pages,
                          NuksmStats *stats);

#endif /* HW_MEM_NUKSM_HUGE_H */
