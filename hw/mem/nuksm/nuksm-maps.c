/*
 * nuksm: the mapping budget.
 *
 * Every stretch of guest pages mapped from a store is a mapping (VMA) of
 * its own unless the kernel can merge it with a neighbour, and a process
 * may hold at most vm.max_map_count of them.  Past that, mmap() fails
 * with ENOMEM for everybody in QEMU: GLib aborts on a failed allocation,
 * memory backends cannot be added, threads cannot start.  So nuksm keeps
 * the process below a budget:
 *
 *   budget = vm.max_map_count - headroom,
 *   headroom = MAX(NUKSM_MAPS_RESERVE, vm.max_map_count / 10)
 *
 * which leaves QEMU, GLib, threads and hot-plugged backends at least
 * 4096 mappings.  The limit is re-read every second, so raising it takes
 * effect without restarting the VM.  The mappings in use are counted
 * from /proc/self/maps (a line per mapping), at a rate that keeps the
 * count's cost bounded (it takes about 1.25 us per mapping here), and in
 * between estimated: the last count plus what nuksm's own changes added
 * according to a model of the kernel's VMA merging (nuksm_maps_cost()).
 *
 * A merge that would cost mappings beyond the budget is refused (the
 * agent gets FAILED) and the page is held back: the scanner does not
 * offer it again until merging resumes, so nothing spins at the limit.
 * Merges that cost nothing or join existing runs still go through.  The
 * object is then "limited" (query-nuksm, NUKSM_MERGING_LIMITED) until the
 * mappings in use fall clearly below the budget again (discards give
 * mappings back, so does a raised limit), then it resumes
 * (NUKSM_MERGING_RESUMED) and the held pages are offered again.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/cutils.h"
#include "qemu/error-report.h"
#include "qemu/main-loop.h"
#include "qemu/units.h"
#include "qemu/timer.h"
#include "nuksm-commit.h"
#include "nuksm-control.h"
#include "nuksm-maps.h"
#include "trace.h"

/* Mappings always kept for QEMU's own needs, at least. */
#define NUKSM_MAPS_RESERVE 4096
/* ... or this fraction of vm.max_map_count if that is more. */
#define NUKSM_MAPS_RESERVE_DIV 10
/* How often vm.max_map_count is read again. */
#define NUKSM_MAPS_LIMIT_PERIOD_NS NANOSECONDS_PER_SECOND
/*
 * A count of the mappings costs about 1.25 us per mapping (/proc/self/maps
 * is text), so count at most every 500 us per mapping: at most 0.25% of
 * a core.  That is every second up to 2000 mappings and every 30 s at
 * 60000; at least every 30 s, while merging changes mappings or is
 * limited.  Once it rests, nothing is counted: what QEMU itself maps
 * meanwhile the headroom covers until the next change is counted, so an
 * idle VM's cost does not grow with its mappings.
 */
#define NUKSM_MAPS_COUNT_NS_PER_MAP 500000
#define NUKSM_MAPS_COUNT_MIN_NS NANOSECONDS_PER_SECOND
#define NUKSM_MAPS_COUNT_MAX_NS (30 * NANOSECONDS_PER_SECOND)
#define NUKSM_MAPS_DEFAULT_LIMIT 65530

uint64_t nuksm_maps_budget(uint64_t limit)
{
    uint64_t headroom = MAX(NUKSM_MAPS_RESERVE,
                            limit / NUKSM_MAPS_RESERVE_DIV);

    return limit > headroom ? limit - headroom : 0;
}

/*
 * Leave the limited state only this far below the budget, so that one
 * freed mapping does not resume merging only to be limited again.
 */
static uint64_t nuksm_maps_resume_margin(uint64_t budget)
{
    return MAX(64, budget / 64);
}

static uint64_t nuksm_maps_read_limit(void)
{
    char buf[32] = "";
    const char *end;
    uint64_t limit;
    int fd = open("/proc/sys/vm/max_map_count", O_RDONLY | O_CLOEXEC);
    ssize_t len = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);

    if (fd >= 0) {
        close(fd);
    }
    if (len <= 0 || qemu_strtou64(buf, &end, 10, &limit) < 0 || !limit) {
        warn_report_once("nuksm: cannot read vm.max_map_count, assuming "
                         "%u", NUKSM_MAPS_DEFAULT_LIMIT);
        return NUKSM_MAPS_DEFAULT_LIMIT;
    }
    return limit;
}

/* The mappings of this process: the lines of /proc/self/maps. */
static bool nuksm_maps_count(uint64_t *count)
{
    g_autofree char *buf = g_malloc(64 * KiB);
    uint64_t lines = 0;
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    ssize_t len;

    if (fd < 0) {
        return false;
    }
    while ((len = read(fd, buf, 64 * KiB)) > 0) {
        for (char *p = buf; (p = memchr(p, '\n', buf + len - p)); p++) {
            lines++;
        }
    }
    close(fd);
    if (len < 0) {
        return false;
    }
    *count = lines;
    return true;
}

uint64_t nuksm_maps_in_use(NuksmCommit *c)
{
    int64_t n = (int64_t)c->maps.counted + c->maps.delta;

    return MAX(n, 0);
}

static void nuksm_maps_recount(NuksmCommit *c, int64_t now)
{
    uint64_t count;

    if (!nuksm_maps_count(&count)) {
        warn_report_once("nuksm: cannot count the mappings of QEMU in "
                         "/proc/self/maps: %s", strerror(errno));
        c->maps.counted_at = now;
        return;
    }
    trace_nuksm_maps_count(count, nuksm_maps_in_use(c), c->maps.limit);
    c->maps.counted = count;
    c->maps.delta = 0;
    c->maps.changed = false;
    c->maps.counted_at = now;
}

void nuksm_maps_init(NuksmCommit *c)
{
    int64_t now = get_clock();

    c->maps.limit = nuksm_maps_read_limit();
    c->maps.limit_read_at = now;
    nuksm_maps_recount(c, now);
}

/* Tell the main loop, which emits the events (nuksm-state.c). */
static void nuksm_maps_notify(NuksmCommit *c)
{
    qemu_bh_schedule(c->s->limit_bh);
}

static void nuksm_maps_set_limited(NuksmCommit *c)
{
    if (c->maps.limited) {
        return;
    }
    trace_nuksm_maps_limited(nuksm_maps_in_use(c), c->maps.limit,
                             nuksm_maps_budget(c->maps.limit));
    qatomic_set(&c->maps.limited, true);
    c->maps.held = 0;
    nuksm_maps_notify(c);
}

/* Merging resumes: offer the pages held back again. */
static void nuksm_maps_resume(NuksmCommit *c)
{
    trace_nuksm_maps_resumed(nuksm_maps_in_use(c), c->maps.limit,
                             c->maps.held);
    qatomic_set(&c->maps.limited, false);
    nuksm_pages_clear_all(c->pages, NUKSM_PAGE_HELD);
    nuksm_maps_notify(c);
    nuksm_control_kick(c->s->control);
}

/*
 * Read the limit and count the mappings again when due (@force: count
 * now), and resume merging when the mappings fell clearly below the
 * budget.  Cheap when nothing is due: call it often.  A new limit is
 * counted against at once.
 */
void nuksm_maps_tick(NuksmCommit *c, bool force)
{
    int64_t now = get_clock();
    int64_t period = MIN(MAX((int64_t)c->maps.counted *
                             NUKSM_MAPS_COUNT_NS_PER_MAP,
                             NUKSM_MAPS_COUNT_MIN_NS),
                         NUKSM_MAPS_COUNT_MAX_NS);
    uint64_t budget;

    if (force || now - c->maps.limit_read_at >= NUKSM_MAPS_LIMIT_PERIOD_NS) {
        uint64_t limit = nuksm_maps_read_limit();

        if (limit != c->maps.limit) {
            trace_nuksm_maps_new_limit(c->maps.limit, limit);
            c->maps.limit = limit;
            force = true;
        }
        c->maps.limit_read_at = now;
    }
    if (force || (now - c->maps.counted_at >= period &&
                  (c->maps.changed || c->maps.limited))) {
        nuksm_maps_recount(c, now);
    }
    budget = nuksm_maps_budget(c->maps.limit);
    if (c->maps.limited &&
        nuksm_maps_in_use(c) + nuksm_maps_resume_margin(budget) <= budget) {
        nuksm_maps_resume(c);
    }
}

/*
 * May a change costing @cost mappings (nuksm_maps_cost()) of @pages pages
 * be made?  A change that costs nothing is always allowed; one that costs
 * more than the budget has left is refused, and merging is limited.
 */
bool nuksm_maps_afford(NuksmCommit *c, int64_t cost, uint64_t pages)
{
    uint64_t budget = nuksm_maps_budget(c->maps.limit);

    if (cost <= 0) {
        return true;
    }
    if (nuksm_maps_in_use(c) + cost > budget) {
        nuksm_maps_set_limited(c);
        c->maps.held += pages;
        trace_nuksm_maps_refused(pages, cost, nuksm_maps_in_use(c), budget);
        return false;
    }
    return true;
}

/* Record what a change did to the mappings, as nuksm_maps_cost() said. */
void nuksm_maps_account(NuksmCommit *c, int64_t delta)
{
    c->maps.delta += delta;
    c->maps.changed = true;
}

/* mmap() failed with ENOMEM: the limit is reached, whatever we thought. */
void nuksm_maps_exhausted(NuksmCommit *c)
{
    nuksm_maps_tick(c, true);
    nuksm_maps_set_limited(c);
}

NuksmMapId nuksm_maps_id(NuksmBlockState *bs, uint64_t i)
{
    uint8_t node;
    uint64_t slot;

    if (!nuksm_page_store_pos(bs, i, &node, &slot)) {
        return (NuksmMapId) { .anon = true };
    }
    return (NuksmMapId) {
        .node = node,
        .base = (int64_t)slot - (int64_t)i,
    };
}

bool nuksm_maps_id_equal(NuksmMapId a, NuksmMapId b)
{
    return a.anon ? b.anon : !b.anon && a.node == b.node && a.base == b.base;
}

/*
 * Boundaries between mappings among pages [@lo, @hi] of @bs, with pages
 * [@idx, @idx + @n) mapped as @over says if @over is not NULL.
 *
 * Two mappings of the store in line with each other (one node, the same
 * slot - page) count as two where a 2 MiB stretch ends: the windows of
 * nuksm_remap_merge_window() end there, and the kernel joins two of them
 * only if at most one holds private copies (an anon_vma), which this
 * model does not follow.  Counting them as two may overstate the
 * mappings in use until they are next counted; never understate them.
 */
static int64_t nuksm_maps_edges(NuksmBlockState *bs, uint64_t lo, uint64_t hi,
                                uint64_t idx, uint64_t n,
                                const NuksmMapId *over)
{
    int64_t edges = 0;
    NuksmMapId prev = {};

    for (uint64_t i = lo; i <= hi; i++) {
        NuksmMapId cur = over && i >= idx && i < idx + n ? *over :
                         nuksm_maps_id(bs, i);

        if (i > lo && (!nuksm_maps_id_equal(prev, cur) ||
                       (!cur.anon &&
                        (bs->first_page + i) % NUKSM_TRACK_STRETCH == 0))) {
            edges++;
        }
        prev = cur;
    }
    return edges;
}

/*
 * The mappings that mapping pages [@idx, @idx + @n) of @bs onto the
 * consecutive slots of @node from @slot (or onto fresh anonymous memory
 * if @anon) adds, negative if it frees some: a mapping boundary costs one
 * mapping.  A run onto consecutive slots in the middle of anonymous
 * memory costs 2, whatever its length; one that continues a neighbouring
 * run (next page, next slot) 1; one that fills the gap between two runs
 * -2.  The kernel merges the new mapping with such neighbours once it has
 * the same flags (userfaultfd registration, advice); while the mmap()
 * runs it may briefly take 2 more, which the headroom covers.  A model:
 * the budget also counts the mappings for real.
 */
int64_t nuksm_maps_cost(NuksmBlockState *bs, uint64_t idx, uint64_t n,
                        bool anon, uint8_t node, uint64_t slot)
{
    NuksmMapId id = {
        .anon = anon,
        .node = node,
        .base = (int64_t)slot - (int64_t)idx,
    };
    uint64_t lo = idx ? idx - 1 : idx;
    uint64_t hi = idx + n < bs->nr_pages ? idx + n : idx + n - 1;

    return nuksm_maps_edges(bs, lo, hi, idx, n, &id) -
           nuksm_maps_window(bs, idx, n);
}

/*
 * The mapping boundaries around and inside pages [@idx, @idx + @n) of
 * @bs as they are now: the difference across a change is what it cost.
 */
int64_t nuksm_maps_window(NuksmBlockState *bs, uint64_t idx, uint64_t n)
{
    uint64_t lo = idx ? idx - 1 : idx;
    uint64_t hi = idx + n < bs->nr_pages ? idx + n : idx + n - 1;

    return nuksm_maps_edges(bs, lo, hi, idx, n, NULL);
}
