/*
 * nuksm: the per-page table, what nuksm knows of each guest page.
 *
 * One NuksmBlockState per RAM block nuksm scanned, found by the block's
 * name: per guest page a 32-bit digest (nuksm-scan.c), a flag byte, an
 * inactive counter (nuksm-hot.c), and, in the regions where some page is
 * merged, the store slot the page maps (nuksm-commit.c); per 2 MiB region
 * its sampling level (nuksm-regions.c).  The table also counts the pages
 * in each state for query-nuksm.
 *
 * Lock rules: the table and every NuksmBlockState in it are protected by
 * NuksmPages.lock, "page_lock" in the lock order (nuksm.h).  It is taken
 * by the scanner thread for each chunk and each commit, by the main loop
 * (hotness samples, locality, statistics) and by RAM discard (any
 * thread).  Other units read and change pages only through the functions
 * below, with the lock held unless a function says otherwise; they may
 * read a block's @first_page, @nr_pages, @gnode and @merged_per_node.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef HW_MEM_NUKSM_PAGES_H
#define HW_MEM_NUKSM_PAGES_H

#include "qemu/thread.h"
#include "nuksm.h"

/*
 * Per-page flags (one byte per guest page), and the combinations that are
 * legal (nuksm_page_update() asserts them):
 *
 *   OFFERED  implies STABLE: only a stable page is offered, and a page
 *            that stops being stable is no longer on offer;
 *   HELD     excludes OFFERED: a held page is not offered until merging
 *            resumes (nuksm-maps.c) or its huge page is to split
 *            (nuksm-huge.c);
 *   MERGED   implies REMAPPED: a page maps its slot through a mapping of
 *            the store, which stays when a write ends the sharing (a
 *            REMAPPED page that is not MERGED is a private copy in such
 *            a mapping: after a copy-on-write break, or a page a window
 *            spans, nuksm_remap_merge_window());
 *   ZERO     excludes REMAPPED (and so MERGED): only anonymous memory is
 *            dropped as zero, and a dropped page is never merged.
 *   WAITING  excludes STABLE: the page has not been hashed since a pass
 *            first saw it and write-protected it (nuksm-scan.c).
 *
 * Every other combination is legal: e.g. a merged page is usually STABLE
 * and OFFERED too, and a HELD page may be dropped as ZERO.
 */
enum {
    NUKSM_PAGE_STABLE   = 1 << 0,  /* unchanged since the last pass */
    NUKSM_PAGE_MERGED   = 1 << 1,  /* maps a store slot (see ->refs) */
    NUKSM_PAGE_ZERO     = 1 << 2,  /* dropped as a zero page */
    NUKSM_PAGE_REMAPPED = 1 << 3,  /* mapped from a store file, maybe COWed */
    NUKSM_PAGE_OFFERED  = 1 << 4,  /* sent to the agent as a candidate */
    NUKSM_PAGE_HELD     = 1 << 5,  /* held back: for lack of mappings, */
                                   /* or for a huge page (nuksm-huge.c) */
    NUKSM_PAGE_HINTED   = 1 << 6,  /* offered on an I/O hint, not merged */
                                   /* or changed since (nuksm-hints.c) */
    NUKSM_PAGE_WAITING  = 1 << 7,  /* protected at first sight, to be */
                                   /* hashed once if still protected */
};

/*
 * Pages of a stretch: 2 MiB, aligned in the RAM block, the size of a
 * transparent huge page.  Write tracking protects and lifts whole
 * stretches where it can, so as not to split a huge page
 * (nuksm-writes.c).
 */
#define NUKSM_TRACK_STRETCH 512

/* Pages per region of NuksmBlockState.refs. */
#define NUKSM_REF_REGION 512
/* Slots a packed reference can name: a node's (nuksm-proto.h). */
#define NUKSM_REF_MAX_SLOT NUKSM_SLOTS_PER_NODE

/*
 * Scan state of one RAM block: 6 bytes per guest page, 13 bytes per 2 MiB
 * region, plus 8 bytes per page of the regions where some page is merged.
 */
typedef struct NuksmBlockState {
    uint64_t first_page;        /* ram_addr / NUKSM_PAGE_SIZE */
    uint64_t nr_pages;
    uint8_t gnode;              /* guest NUMA node of the block */
    uint32_t *digest;           /* nuksm-scan.c's; 0 = not hashed yet */
    uint8_t *flags;
    uint8_t *idle;              /* inactive counters (nuksm-hot.c) */
    uint64_t merged_per_node[NUKSM_MAX_NODES];  /* its merged pages */
    /*
     * The slot each merged page maps (gen << 32 | slot << 8 | node), by
     * region of NUKSM_REF_REGION pages; a region is allocated when one of
     * its pages first merges.
     */
    uint64_t **refs;
    struct NuksmRegion *regions;    /* sampling levels (nuksm-regions.c) */
    /*
     * Per read region the block overlaps (NUKSM_READ_REGION_PAGES pages,
     * aligned in the VM's RAM page space, as the agent counts them): the
     * samples since one of its merged pages was seen read, up to
     * NUKSM_IDLE_NEVER, where it starts (nuksm-reads.c).
     */
    uint8_t *read_idle;
} NuksmBlockState;

typedef struct NuksmPages {
    QemuMutex lock;             /* "page_lock": everything below */
    GHashTable *blocks;         /* RAM block name -> NuksmBlockState */
    bool distilling;            /* region distilling (nuksm-regions.c) */
    uint64_t remapped_pages;    /* pages with NUKSM_PAGE_REMAPPED */
    uint64_t merged_pages;      /* ... with NUKSM_PAGE_MERGED */
    uint64_t zero_pages;        /* ... with NUKSM_PAGE_ZERO */
    uint64_t hinted_merged;     /* NUKSM_PAGE_HINTED pages that merged */
    uint64_t merged_per_node[NUKSM_MAX_NODES];  /* merged, by slot node */
} NuksmPages;

static inline void nuksm_page_assert_legal(uint8_t f)
{
    assert(!(f & NUKSM_PAGE_OFFERED) || (f & NUKSM_PAGE_STABLE));
    assert(!(f & NUKSM_PAGE_HELD) || !(f & NUKSM_PAGE_OFFERED));
    assert(!(f & NUKSM_PAGE_MERGED) || (f & NUKSM_PAGE_REMAPPED));
    assert(!(f & NUKSM_PAGE_ZERO) || !(f & NUKSM_PAGE_REMAPPED));
    assert(!(f & NUKSM_PAGE_WAITING) || !(f & NUKSM_PAGE_STABLE));
}

static inline uint8_t nuksm_page_flags(const NuksmBlockState *bs,
                                       uint64_t idx)
{
    return bs->flags[idx];
}

/*
 * Clear @clear, then set @set, in the flags of page @idx of @bs.  Flags
 * that are counted (MERGED, ZERO, REMAPPED) change only through the
 * nuksm_pages_*() functions below.
 */
static inline void nuksm_page_update(NuksmBlockState *bs, uint64_t idx,
                                     uint8_t clear, uint8_t set)
{
    uint8_t f = (bs->flags[idx] & ~clear) | set;

    nuksm_page_assert_legal(f);
    bs->flags[idx] = f;
}

/*
 * The 16 bits of its full digest that a page's 32-bit digest keeps, the
 * fragment WANTED names it by (nuksm_digest_fragment()): 0 while not
 * computed since the page changed.
 */
#define NUKSM_D32_FULL(d)       ((d) & 0xffff)

/*
 * The page's last 32-bit digest (its sampled and full digests, see
 * nuksm-scan.c; never 0), 0 if not hashed yet.
 */
static inline uint32_t nuksm_page_digest32(const NuksmBlockState *bs,
                                           uint64_t idx)
{
    return bs->digest[idx];
}

static inline void nuksm_page_set_digest32(NuksmBlockState *bs,
                                           uint64_t idx, uint32_t digest32)
{
    bs->digest[idx] = digest32;
}

/* Samples since the page was last seen written (nuksm-hot.c). */
static inline uint8_t nuksm_page_idle(const NuksmBlockState *bs,
                                      uint64_t idx)
{
    return bs->idle[idx];
}

/*
 * A hotness sample saw page @idx written (@written), or not: its
 * inactive counter restarts, or counts one more, up to
 * NUKSM_HOT_IDLE_MAX.
 */
static inline void nuksm_page_sample(NuksmBlockState *bs, uint64_t idx,
                                     bool written)
{
    if (written) {
        bs->idle[idx] = 0;
    } else if (bs->idle[idx] < NUKSM_HOT_IDLE_MAX) {
        bs->idle[idx]++;
    }
}

/* The read region of page @idx of @bs, in the VM's RAM page space. */
static inline uint64_t nuksm_page_read_region(const NuksmBlockState *bs,
                                              uint64_t idx)
{
    return (bs->first_page + idx) / NUKSM_READ_REGION_PAGES;
}

/* The read regions @bs overlaps: [*first, *first + count). */
static inline uint64_t nuksm_pages_read_regions(const NuksmBlockState *bs,
                                                uint64_t *first)
{
    *first = bs->first_page / NUKSM_READ_REGION_PAGES;
    return bs->nr_pages ?
           nuksm_page_read_region(bs, bs->nr_pages - 1) - *first + 1 : 0;
}

/* The read idle count of read region @region, which @bs overlaps. */
static inline uint8_t *nuksm_pages_read_idle(NuksmBlockState *bs,
                                             uint64_t region)
{
    return &bs->read_idle[region - bs->first_page / NUKSM_READ_REGION_PAGES];
}

void nuksm_pages_init(NuksmPages *p);
void nuksm_pages_destroy(NuksmPages *p);

/*
 * The state of @rb, created (every page unknown) for a block new to the
 * table or whose size or place changed; @gnode is its guest NUMA node,
 * as the main loop resolved it (nuksm-ram.c).
 */
NuksmBlockState *nuksm_pages_block(NuksmPages *p, RAMBlock *rb,
                                   uint8_t gnode);
/* The state of @rb if the table has one, else NULL. */
NuksmBlockState *nuksm_pages_find(NuksmPages *p, RAMBlock *rb);
/*
 * The state of the block holding page @page of the VM's RAM page space,
 * and the page's index in it in *idx; NULL if no block of the table
 * holds it.
 */
NuksmBlockState *nuksm_pages_find_page(NuksmPages *p, uint64_t page,
                                       uint64_t *idx);

typedef void NuksmPagesBlockFn(NuksmBlockState *bs, void *opaque);
void nuksm_pages_foreach(NuksmPages *p, NuksmPagesBlockFn *fn, void *opaque);

/* Clear @flags on every page of the table. */
void nuksm_pages_clear_all(NuksmPages *p, uint8_t flags);

/*
 * The slot page @idx maps or last mapped: it must be REMAPPED.  The
 * reference stays when MERGED is cleared, as the mapping does.
 */
NuksmSlotRef nuksm_page_ref(const NuksmBlockState *bs, uint64_t idx);
/* True if page @idx is MERGED and maps exactly the slot @r names. */
bool nuksm_page_maps(const NuksmBlockState *bs, uint64_t idx,
                     const NuksmSlotRef *r);
/*
 * Where page @idx is mapped from: false for anonymous memory, else true
 * with the store's node and the slot.
 */
bool nuksm_page_store_pos(const NuksmBlockState *bs, uint64_t idx,
                          uint8_t *node, uint64_t *slot);
/* True if a page of [@first, @first + @count) of @bs is REMAPPED. */
bool nuksm_pages_any_remapped(const NuksmBlockState *bs, uint64_t first,
                              uint64_t count);

/*
 * Page @idx now maps slot @r: MERGED and REMAPPED, counted, and credited
 * to its region; if it was HINTED, counted as a merge an I/O hint
 * brought, and no longer HINTED.
 */
void nuksm_pages_merged(NuksmPages *p, NuksmBlockState *bs, uint64_t idx,
                        const NuksmSlotRef *r);
/*
 * Page @idx, not MERGED, now lies in a window mapping the store from
 * @node (nuksm_remap_merge_window()) at @slot, as its own private copy:
 * REMAPPED, as a merged page after a copy-on-write break.
 */
void nuksm_pages_windowed(NuksmPages *p, NuksmBlockState *bs, uint64_t idx,
                          uint8_t node, uint64_t slot);
/*
 * Page @idx, MERGED, no longer counts as merged; @clear are further flags
 * to clear.  Returns the slot it mapped.
 */
NuksmSlotRef nuksm_pages_unmerged(NuksmPages *p, NuksmBlockState *bs,
                                  uint64_t idx, uint8_t clear);
/*
 * Page @idx was dropped as zero (credited to its region as a merge), or
 * is no longer.
 */
void nuksm_pages_zeroed(NuksmPages *p, NuksmBlockState *bs, uint64_t idx);
void nuksm_pages_unzeroed(NuksmPages *p, NuksmBlockState *bs, uint64_t idx);
/*
 * Page @idx, not MERGED, is fresh anonymous memory again (a discard):
 * nothing is known of it.
 */
void nuksm_pages_discarded(NuksmPages *p, NuksmBlockState *bs, uint64_t idx);

/*
 * Takes the lock: region distilling (nuksm-regions.h) on or off for the
 * whole table.  Off puts every region on the top level; blocks added
 * later start on the bottom one if on.
 */
void nuksm_pages_set_distilling(NuksmPages *p, bool on);
/*
 * Takes the lock: the regions on each level, bottom first, in @counts
 * (NUKSM_REGION_LEVELS of them).
 */
void nuksm_pages_count_regions(NuksmPages *p, uint64_t *counts);
/*
 * Takes the lock: each block's regions, as a string of their levels
 * ('0' bottom), in @fn; for the debug view (x-query-nuksm-regions).
 */
typedef void NuksmPagesRegionsFn(const char *block, uint64_t nr_pages,
                                 const char *levels, void *opaque);
void nuksm_pages_map_regions(NuksmPages *p, NuksmPagesRegionsFn *fn,
                             void *opaque);

/* Takes the lock: does some page map a store? */
bool nuksm_pages_has_remapped(NuksmPages *p);
/*
 * Takes the lock: fill the merged and zero page counts of @stats, and the
 * merges I/O hints brought.
 */
void nuksm_pages_get_stats(NuksmPages *p, NuksmStats *stats);

#endif /* HW_MEM_NUKSM_PAGES_H */
