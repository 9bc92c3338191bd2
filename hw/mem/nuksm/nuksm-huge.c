/*
 * nuksm: huge pages kept where merging does not pay (nuksm-huge.h).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include <sys/ioctl.h>
#include "libnuksm/nuksm-pagemap.h"
#include "nuksm-huge.h"
#include "nuksm-regions.h"
#include "trace.h"

/*
 * PAGEMAP_SCAN (Linux 6.7, include/uapi/linux/fs.h), spelled out: the
 * headers QEMU builds against may predate it.  The ioctl's number
 * encodes the argument's size, which is the kernel's.
 */
typedef struct NuksmPageRegion {
    uint64_t start, end, categories;
} NuksmPageRegion;

typedef struct NuksmPmScanArg {
    uint64_t size, flags, start, end, walk_end, vec, vec_len, max_pages;
    uint64_t category_inverted, category_mask, category_anyof_mask;
    uint64_t return_mask;
} NuksmPmScanArg;

#define NUKSM_PAGEMAP_SCAN _IOWR('f', 16, NuksmPmScanArg)
#define NUKSM_PAGE_IS_HUGE (1 << 6)

#define NUKSM_HUGE_BYTES (NUKSM_TRACK_STRETCH * NUKSM_PAGE_SIZE)

NuksmHuge *nuksm_huge_new(void)
{
    NuksmHuge *h = g_new0(NuksmHuge, 1);

    h->scan_ioctl = true;
    h->pagemap_fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    return h;
}

void nuksm_huge_free(NuksmHuge *h)
{
    if (h->pagemap_fd >= 0) {
        close(h->pagemap_fd);
    }
    g_free(h);
}

/* Without PAGEMAP_SCAN: is every page at @host present and anonymous? */
static bool nuksm_huge_all_present(NuksmHuge *h, const uint8_t *host)
{
    uint64_t pm[NUKSM_TRACK_STRETCH];
    off_t off = (uintptr_t)host / NUKSM_PAGE_SIZE * sizeof(uint64_t);

    if (pread(h->pagemap_fd, pm, sizeof(pm), off) != sizeof(pm)) {
        return false;
    }
    for (unsigned i = 0; i < NUKSM_TRACK_STRETCH; i++) {
        if (!(pm[i] & NUKSM_PM_PRESENT) || (pm[i] & NUKSM_PM_FILE)) {
            return false;
        }
    }
    return true;
}

bool nuksm_huge_is_huge(NuksmHuge *h, const uint8_t *host)
{
    NuksmPageRegion region;
    NuksmPmScanArg arg = {
        .size = sizeof(arg),
        .start = (uintptr_t)host,
        .end = (uintptr_t)host + NUKSM_HUGE_BYTES,
        .vec = (uintptr_t)&region,
        .vec_len = 1,
        .category_mask = NUKSM_PAGE_IS_HUGE,
        .return_mask = NUKSM_PAGE_IS_HUGE,
    };
    int n;

    if (h->pagemap_fd < 0 || (uintptr_t)host % NUKSM_HUGE_BYTES) {
        return false;
    }
    if (h->scan_ioctl) {
        n = ioctl(h->pagemap_fd, NUKSM_PAGEMAP_SCAN, &arg);
        if (n >= 0) {
            return n == 1 && region.start == arg.start &&
                   region.end == arg.end;
        }
        if (errno != ENOTTY && errno != EINVAL) {
            return false;
        }
        h->scan_ioctl = false;
    }
    return nuksm_huge_all_present(h, host);
}

/* The pages [*@first, *@end) of @bs in the stretch of page @idx. */
static void nuksm_huge_stretch(NuksmBlockState *bs, uint64_t idx,
                               uint64_t *first, uint64_t *end)
{
    *first = QEMU_ALIGN_DOWN(idx, NUKSM_TRACK_STRETCH);
    *end = MIN(*first + NUKSM_TRACK_STRETCH, bs->nr_pages);
}

/*
 * Let the pages held back in the stretch of page @idx of @bs go; their
 * indexes are appended to @released if not NULL.
 */
static void nuksm_huge_release(NuksmHuge *h, NuksmBlockState *bs,
                               uint64_t idx, GArray *released)
{
    uint64_t first, end;

    nuksm_huge_stretch(bs, idx, &first, &end);
    for (uint64_t i = first; i < end; i++) {
        if (released && (nuksm_page_flags(bs, i) & NUKSM_PAGE_HELD)) {
            g_array_append_val(released, i);
        }
        nuksm_page_update(bs, i, NUKSM_PAGE_HELD, 0);
    }
    nuksm_region_of(bs, idx)->huge_held = 0;
}

/* Where the stretch of page @idx of @bs (in @rb) is, if it is whole. */
static uint8_t *nuksm_huge_stretch_host(RAMBlock *rb, NuksmBlockState *bs,
                                        uint64_t idx)
{
    uint64_t first, end;

    nuksm_huge_stretch(bs, idx, &first, &end);
    if (end - first < NUKSM_TRACK_STRETCH) {
        return NULL;            /* a block's tail: no whole huge page */
    }
    return rb->host + first * NUKSM_PAGE_SIZE;
}

bool nuksm_huge_may_split(NuksmHuge *h, uint32_t split, RAMBlock *rb,
                          NuksmBlockState *bs, uint64_t idx, unsigned fresh,
                          GArray *released)
{
    NuksmRegion *r = nuksm_region_of(bs, idx);
    uint8_t *host = nuksm_huge_stretch_host(rb, bs, idx);
    unsigned held = r->huge_held + fresh;

    if (!host || !nuksm_huge_is_huge(h, host)) {
        if (r->huge_held) {
            nuksm_huge_release(h, bs, idx, released);
        }
        r->huge_busy = true;
        return true;
    }
    if (held >= split) {
        trace_nuksm_huge_split(bs->first_page + idx, held);
        nuksm_huge_release(h, bs, idx, released);
        r->huge_split = r->huge_busy = true;
        h->splits++;
        return true;
    }
    r->huge_held = held;
    return false;
}

/*
 * Is the stretch of page @idx of @bs (in @rb), split as it paid, to have
 * its huge page rebuilt: fewer than half of @split of its pages merged,
 * dropped or held back (in a split stretch, for lack of mappings: they
 * merge once there are), so that splitting it would not pay now?
 */
static bool nuksm_huge_to_rebuild(NuksmHuge *h, uint32_t split,
                                  RAMBlock *rb, NuksmBlockState *bs,
                                  uint64_t idx)
{
    uint8_t *host = nuksm_huge_stretch_host(rb, bs, idx);
    uint64_t first, end;
    unsigned saving = 0;

    if (!host) {
        return false;
    }
    nuksm_huge_stretch(bs, idx, &first, &end);
    for (uint64_t i = first; i < end; i++) {
        saving += !!(nuksm_page_flags(bs, i) &
                     (NUKSM_PAGE_MERGED | NUKSM_PAGE_ZERO |
                      NUKSM_PAGE_HELD));
    }
    if (2 * saving >= split) {
        return false;
    }
    if (nuksm_huge_is_huge(h, host)) {
        /* khugepaged was first (a stretch with no merge left) */
        nuksm_region_of(bs, idx)->huge_split = false;
        return false;
    }
    trace_nuksm_huge_rebuild(bs->first_page + first, saving);
    return true;
}

bool nuksm_huge_walked(NuksmHuge *h, uint32_t split, RAMBlock *rb,
                       NuksmBlockState *bs, uint64_t idx)
{
    NuksmRegion *r = nuksm_region_of(bs, idx);
    uint64_t first, end;
    uint8_t *host;
    unsigned held = 0;

    if (r->huge_split) {
        bool busy = r->huge_busy;

        /* Merges that break and form again (a page written with the
         * same content) are no end of merging, nor is an offer whose
         * answer may not have come (the pages a split released,
         * offered again): not before a walk without any. */
        r->huge_busy = false;
        return !busy && nuksm_huge_to_rebuild(h, split, rb, bs, idx);
    }
    if (!r->huge_held) {
        return false;
    }
    host = nuksm_huge_stretch_host(rb, bs, idx);
    if (!host || !nuksm_huge_is_huge(h, host)) {
        nuksm_huge_release(h, bs, idx, NULL);
        return false;
    }
    nuksm_huge_stretch(bs, idx, &first, &end);
    for (uint64_t i = first; i < end; i++) {
        held += !!(nuksm_page_flags(bs, i) & NUKSM_PAGE_HELD);
    }
    r->huge_held = held;
    return false;
}

void nuksm_huge_offered(NuksmBlockState *bs, uint64_t idx)
{
    nuksm_region_of(bs, idx)->huge_busy = true;
}

void nuksm_huge_rebuilt(NuksmHuge *h, NuksmBlockState *bs, uint64_t idx,
                        bool done)
{
    NuksmRegion *r = nuksm_region_of(bs, idx);

    /* Failed, it is not tried again: the kernel had no huge page. */
    r->huge_split = false;
    if (done) {
        r->huge_held = 0;
        h->rebuilt++;
    }
}

typedef struct NuksmHugeCount {
    uint64_t held, kept;
} NuksmHugeCount;

static void nuksm_huge_count_block(NuksmBlockState *bs, void *opaque)
{
    NuksmHugeCount *count = opaque;

    for (uint64_t i = 0; i < bs->nr_pages; i += NUKSM_TRACK_STRETCH) {
        unsigned held = nuksm_region_of(bs, i)->huge_held;

        count->held += held;
        count->kept += held > 0;
    }
}

void nuksm_huge_get_stats(NuksmHuge *h, NuksmPages *pages,
                          NuksmStats *stats)
{
    NuksmHugeCount count = {};

    qemu_mutex_lock(&pages->lock);
    nuksm_pages_foreach(pages, nuksm_huge_count_block, &count);
    stats->huge_held_pages = count.held;
    stats->huge_kept = count.kept;
    stats->huge_splits = h->splits;
    stats->huge_rebuilt = h->rebuilt;
    qemu_mutex_unlock(&pages->lock);
}
