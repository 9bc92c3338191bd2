/*
 * nuksm: read hotness of merged pages, sampled by hinting faults.
 *
 * A merged page is never written (a write ends its sharing), so the
 * accesses that make a VM pay for a copy on another node are reads,
 * which no dirty log shows.  They are sampled the way the kernel's own
 * NUMA balancing samples accesses, and DAMON regions: each window
 * (hot-window ms), the next read-samples read regions
 * (NUKSM_READ_REGION_PAGES pages, taken in turn) are looked at, and one
 * merged page of each that holds one has its page-table entry dropped
 * (nuksm_remap_probe_reads(): free, the page reads the store's shmem
 * file through a private mapping); its next access, by a vCPU through
 * KVM, by TCG or by QEMU itself, faults to our userfaultfd as a minor
 * fault, which the fault thread resolves (UFFDIO_CONTINUE) and notes
 * here, taking no lock.  Reads by the scanner thread (comparing, hashing)
 * are nuksm's, not the VM's: not noted.  A read of a merged page that
 * was not mapped since it merged or moved is caught the same way: it
 * shows that its region is read, but is no sample.
 *
 * At the end of a window each probed region's count of samples since one
 * was read (its read idle, AdaptMD's inactive counter) restarts if a page
 * of it was read, and grows by one if not; the agent gets the regions
 * whose count changed (READS) and decides by them what is hot
 * (docs/placement.rst).  A merge counts the write that made its page as
 * an access of its region (nuksm_reads_merged()), so that placement
 * weighs the writer as warm until that warmth ends like a read's; where
 * reads cannot be sampled, such regions age by one each window
 * (nuksm_reads_unsampled()).  Each read of a probed page is also counted
 * local or remote, by whether the page's copy is on the home node of its
 * guest node: the NUMA tax in accesses.
 *
 * Cost: a probe is a few system calls in the scanner thread, within its
 * CPU budget; a read of a probed page, one fault served by another
 * thread, once per window at most, so at most read-samples faults a
 * window for the whole VM.
 *
 * Lock rules: the queue of noted reads is written by the fault thread
 * and read by the scanner thread, with no lock; the window's state
 * belongs to the scanner thread, which holds page_lock in
 * nuksm_reads_tick(); @lock, a leaf, guards the settings and figures.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/atomic.h"
#include "qemu/rcu.h"
#include "qemu/timer.h"
#include "exec/cpu-common.h"
#include "exec/ramblock.h"
#include "nuksm-pages.h"
#include "nuksm-ram.h"
#include "nuksm-reads.h"
#include "nuksm-remap.h"
#include "trace.h"

/* Reads noted and not yet counted, at most (a power of two). */
#define NUKSM_READS_QUEUE 4096

struct NuksmReads {
    Nuksm *s;
    /* The fault thread fills it, the scanner thread empties it. */
    uint64_t queue[NUKSM_READS_QUEUE];
    unsigned head;              /* written by the fault thread */
    unsigned tail;              /* written by the scanner thread */
    uint64_t lost;              /* atomic: noted with the queue full */
    int own_tid;                /* atomic: the scanner thread's, not */
                                /* counted */

    /* The scanner thread's (nuksm_reads_tick() holds page_lock) */
    int pagemap_fd;
    int64_t window_start;       /* ns; 0 while no window is open */
    GArray *probes;             /* pages probed in the open window */
                                /* (uint64_t, VM page index) */
    GHashTable *unread;         /* VM page index + 1 of those not */
                                /* read yet */
    GHashTable *read;           /* read region -> page index + 1 of a */
                                /* page of it read in the open window */
    uint64_t cursor;            /* read region the next probes start at */
    uint64_t random;            /* xorshift64 state */
    uint32_t epoch;             /* connection told of every region */
    uint64_t reads_told;        /* stats.reads when last told */
    GArray *merged_writes;      /* NuksmReadRegion: regions a merge of a */
                                /* page written lately made warmer, to */
                                /* tell at the next window */
    int64_t unsampled_at;       /* ns: regions last aged while reads */
                                /* cannot be sampled; 0: none to age */

    QemuMutex lock;             /* the fields below */
    uint32_t window_ms;
    uint32_t samples;
    NuksmMsgHome home;
    NuksmReadStats stats;
};

NuksmReads *nuksm_reads_new(Nuksm *s)
{
    NuksmReads *r = g_new0(NuksmReads, 1);

    r->s = s;
    r->pagemap_fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    r->probes = g_array_new(false, false, sizeof(uint64_t));
    r->unread = g_hash_table_new(g_direct_hash, g_direct_equal);
    r->read = g_hash_table_new(g_direct_hash, g_direct_equal);
    r->merged_writes = g_array_new(false, false, sizeof(NuksmReadRegion));
    r->random = 0x9e3779b97f4a7c15ull ^ (uintptr_t)r;
    qemu_mutex_init(&r->lock);
    return r;
}

void nuksm_reads_free(NuksmReads *r)
{
    if (r->pagemap_fd >= 0) {
        close(r->pagemap_fd);
    }
    g_array_free(r->probes, true);
    g_hash_table_destroy(r->unread);
    g_hash_table_destroy(r->read);
    g_array_free(r->merged_writes, true);
    qemu_mutex_destroy(&r->lock);
    g_free(r);
}

void nuksm_reads_configure(NuksmReads *r, uint32_t window_ms,
                           uint32_t samples)
{
    qemu_mutex_lock(&r->lock);
    r->window_ms = window_ms;
    r->samples = samples;
    qemu_mutex_unlock(&r->lock);
}

void nuksm_reads_set_home(NuksmReads *r, const NuksmMsgHome *home)
{
    qemu_mutex_lock(&r->lock);
    r->home = *home;
    qemu_mutex_unlock(&r->lock);
}

void nuksm_reads_set_own_thread(NuksmReads *r, int tid)
{
    qatomic_set(&r->own_tid, tid);
}

void nuksm_reads_note(NuksmReads *r, uint64_t addr, int tid)
{
    unsigned head = r->head;
    bool own = tid && tid == qatomic_read(&r->own_tid);

    trace_nuksm_reads_fault((void *)(uintptr_t)addr, tid, own);
    if (own) {
        return;
    }

    if (head - qatomic_load_acquire(&r->tail) >= NUKSM_READS_QUEUE) {
        qatomic_inc(&r->lost);
        return;
    }
    r->queue[head % NUKSM_READS_QUEUE] = addr;
    qatomic_store_release(&r->head, head + 1);
}

static uint64_t nuksm_reads_random(NuksmReads *r)
{
    r->random ^= r->random << 13;
    r->random ^= r->random >> 7;
    r->random ^= r->random << 17;
    return r->random;
}

/*
 * Count the reads of probed pages noted since the last call, each as
 * local or remote, and remember which regions they read.  A read of a
 * page not probed (its first since it merged or moved) shows that its
 * region is read, but is not a sample: a whole region is read that way
 * after a move, which would outweigh the probes.  With the RCU read
 * lock.
 */
static void nuksm_reads_count(NuksmReads *r)
{
    unsigned head = qatomic_load_acquire(&r->head);
    uint64_t reads = 0, local = 0;
    NuksmMsgHome home;

    qemu_mutex_lock(&r->lock);
    home = r->home;
    qemu_mutex_unlock(&r->lock);
    for (; r->tail != head; r->tail++) {
        void *addr = (void *)(uintptr_t)r->queue[r->tail % NUKSM_READS_QUEUE];
        ram_addr_t offset;
        RAMBlock *rb = qemu_ram_block_from_host(addr, false, &offset);
        NuksmBlockState *bs = rb ? nuksm_pages_find(r->s->pages, rb) : NULL;
        uint64_t idx = offset / NUKSM_PAGE_SIZE;
        uint32_t node_home;

        if (!bs || idx >= bs->nr_pages ||
            !(nuksm_page_flags(bs, idx) & NUKSM_PAGE_MERGED)) {
            continue;       /* it left its copy meanwhile */
        }
        g_hash_table_insert(r->read,
                            GSIZE_TO_POINTER(nuksm_page_read_region(bs, idx)),
                            GSIZE_TO_POINTER(bs->first_page + idx + 1));
        if (!g_hash_table_remove(r->unread,
                                 GSIZE_TO_POINTER(bs->first_page + idx + 1))) {
            continue;
        }
        node_home = bs->gnode < home.nr_gnodes ? home.home[bs->gnode] : 0;
        local += nuksm_page_ref(bs, idx).node == node_home;
        reads++;
    }
    qatomic_store_release(&r->tail, head);
    if (reads) {
        qemu_mutex_lock(&r->lock);
        r->stats.reads += reads;
        r->stats.reads_local += local;
        r->stats.reads_remote += reads - local;
        qemu_mutex_unlock(&r->lock);
    }
}

/* Set the read idle of @region of @bs, noting a change in @changed. */
static void nuksm_reads_set_idle(NuksmBlockState *bs, uint64_t region,
                                 uint8_t idle, GArray *changed)
{
    uint8_t *at = nuksm_pages_read_idle(bs, region);
    NuksmReadRegion e = { .region = region, .idle = idle };

    if (*at != idle) {
        *at = idle;
        g_array_append_val(changed, e);
    }
}

void nuksm_reads_merged(NuksmReads *r, NuksmBlockState *bs, uint64_t idx)
{
    uint64_t region = nuksm_page_read_region(bs, idx);
    uint8_t written = nuksm_page_idle(bs, idx);

    if (written < *nuksm_pages_read_idle(bs, region)) {
        nuksm_reads_set_idle(bs, region, written, r->merged_writes);
    }
}

/*
 * The window is over: a probed region restarts its count if a page of
 * it was read, and counts one more sample if not; a region read without
 * a probe (a page not mapped since it merged) restarts it too.
 */
static void nuksm_reads_close_window(NuksmReads *r, GArray *changed)
{
    NuksmPages *pages = r->s->pages;
    GHashTableIter it;
    gpointer value;

    for (guint i = 0; i < r->probes->len; i++) {
        uint64_t idx;
        NuksmBlockState *bs = nuksm_pages_find_page(
            pages, g_array_index(r->probes, uint64_t, i), &idx);
        uint64_t region;
        uint8_t idle;

        if (!bs) {
            continue;
        }
        region = nuksm_page_read_region(bs, idx);
        idle = *nuksm_pages_read_idle(bs, region);
        if (g_hash_table_remove(r->read, GSIZE_TO_POINTER(region))) {
            idle = 0;
        } else if (idle < NUKSM_IDLE_NEVER) {
            idle++;
        }
        nuksm_reads_set_idle(bs, region, idle, changed);
    }
    g_hash_table_iter_init(&it, r->read);
    while (g_hash_table_iter_next(&it, NULL, &value)) {
        uint64_t idx;
        NuksmBlockState *bs = nuksm_pages_find_page(
            pages, GPOINTER_TO_SIZE(value) - 1, &idx);

        if (bs) {
            nuksm_reads_set_idle(bs, nuksm_page_read_region(bs, idx), 0,
                                 changed);
        }
    }
    g_hash_table_remove_all(r->read);
    g_hash_table_remove_all(r->unread);
    g_array_set_size(r->probes, 0);
}

typedef struct NuksmReadsScan {
    GArray *regions;            /* every region read at all, or NULL */
    uint64_t read_regions;      /* regions whose last sample was read */
} NuksmReadsScan;

static void nuksm_reads_scan_block(NuksmBlockState *bs, void *opaque)
{
    NuksmReadsScan *scan = opaque;
    uint64_t first;
    uint64_t n = nuksm_pages_read_regions(bs, &first);

    for (uint64_t region = first; region < first + n; region++) {
        uint8_t idle = *nuksm_pages_read_idle(bs, region);
        NuksmReadRegion e = { .region = region, .idle = idle };

        scan->read_regions += idle == 0;
        if (scan->regions && idle != NUKSM_IDLE_NEVER) {
            g_array_append_val(scan->regions, e);
        }
    }
}

/*
 * Tell the agent on connection @epoch the regions in @changed, or every
 * region read at all on a connection it has not told yet (a new agent
 * knows none), and the reads counted.
 */
static void nuksm_reads_report(NuksmReads *r, uint32_t epoch,
                               GArray *changed, bool sampled)
{
    bool new_connection = epoch != r->epoch;
    NuksmReadsScan scan = { .regions = new_connection ? changed : NULL };
    NuksmMsgReads head;
    size_t done = 0;

    if (new_connection) {
        g_array_set_size(changed, 0);
        r->epoch = epoch;
    }
    nuksm_pages_foreach(r->s->pages, nuksm_reads_scan_block, &scan);
    qemu_mutex_lock(&r->lock);
    r->stats.read_regions = scan.read_regions;
    head = (NuksmMsgReads) {
        .window_ms = sampled ? r->window_ms : 0,
        .reads_local = r->stats.reads_local,
        .reads_remote = r->stats.reads_remote,
    };
    qemu_mutex_unlock(&r->lock);
    if (!new_connection && !changed->len &&
        head.reads_local + head.reads_remote == r->reads_told) {
        return;
    }
    r->reads_told = head.reads_local + head.reads_remote;
    do {
        size_t n = MIN(changed->len - done, NUKSM_READS_MAX);
        size_t len = sizeof(head) + n * sizeof(NuksmReadRegion);
        g_autofree uint8_t *msg = g_malloc(len);

        head.count = n;
        memcpy(msg, &head, sizeof(head));
        memcpy(msg + sizeof(head),
               &g_array_index(changed, NuksmReadRegion, done),
               n * sizeof(NuksmReadRegion));
        nuksm_outbox_post(&r->s->outbox, epoch, NUKSM_MSG_READS, msg, len);
        done += n;
    } while (done < changed->len);
    trace_nuksm_reads_report(changed->len, head.reads_local,
                             head.reads_remote);
}

/*
 * Probe one merged page of @region of @bs (in @rb), picked at random, if
 * the region has one.  A region without one counts a sample not read: no
 * read of it can be seen until a page of it merges again.
 */
static void nuksm_reads_probe_region(NuksmReads *r, int uffd, RAMBlock *rb,
                                     NuksmBlockState *bs, uint64_t region,
                                     GArray *changed)
{
    uint8_t idle = *nuksm_pages_read_idle(bs, region);

    uint64_t lo = MAX(region * NUKSM_READ_REGION_PAGES, bs->first_page) -
                  bs->first_page;
    uint64_t hi = MIN((region + 1) * NUKSM_READ_REGION_PAGES,
                      bs->first_page + bs->nr_pages) - bs->first_page;
    uint64_t start = nuksm_reads_random(r) % (hi - lo);

    for (uint64_t k = 0; k < hi - lo; k++) {
        uint64_t idx = lo + (start + k) % (hi - lo);
        uint64_t page = bs->first_page + idx;

        if (!(nuksm_page_flags(bs, idx) & NUKSM_PAGE_MERGED)) {
            continue;
        }
        if (nuksm_remap_probe_reads(uffd, r->pagemap_fd,
                                    rb->host + idx * NUKSM_PAGE_SIZE) ==
            NUKSM_READ_PROBE_SET) {
            g_array_append_val(r->probes, page);
            g_hash_table_add(r->unread, GSIZE_TO_POINTER(page + 1));
        }
        return;
    }
    if (idle < NUKSM_IDLE_NEVER) {
        nuksm_reads_set_idle(bs, region, idle + 1, changed);
    }
}

/* An eligible block with merged pages, to probe. */
typedef struct NuksmReadsBlock {
    RAMBlock *rb;
    NuksmBlockState *bs;
} NuksmReadsBlock;

typedef struct NuksmReadsBlocks {
    NuksmReads *r;
    GArray *blocks;             /* NuksmReadsBlock */
    GArray *changed;            /* NuksmReadRegion */
} NuksmReadsBlocks;

/*
 * Take @rb to probe if it has merged pages; if it has none, none of its
 * regions can be seen read any more: they go back to never read.
 */
static bool nuksm_reads_add_block(RAMBlock *rb, uint8_t gnode, void *opaque)
{
    NuksmReadsBlocks *ctx = opaque;
    NuksmReadsBlock b = { rb, nuksm_pages_find(ctx->r->s->pages, rb) };
    uint64_t merged = 0, first, n;

    if (!b.bs) {
        return true;
    }
    for (int node = 0; node < NUKSM_MAX_NODES; node++) {
        merged += b.bs->merged_per_node[node];
    }
    if (merged) {
        g_array_append_val(ctx->blocks, b);
        return true;
    }
    n = nuksm_pages_read_regions(b.bs, &first);
    for (uint64_t region = first; region < first + n; region++) {
        nuksm_reads_set_idle(b.bs, region, NUKSM_IDLE_NEVER, ctx->changed);
    }
    return true;
}

static gint nuksm_reads_block_cmp(gconstpointer a, gconstpointer b)
{
    const NuksmReadsBlock *x = a, *y = b;

    return x->bs->first_page < y->bs->first_page ? -1 :
           x->bs->first_page > y->bs->first_page;
}

/*
 * Probe the pages of the next window: a merged page of each region
 * holding one, from the cursor on, in the order of the VM's RAM, until
 * @samples regions were looked at or every one was.  Regions whose
 * count changed meanwhile go to @changed.  With the RCU read lock.
 */
static void nuksm_reads_probe(NuksmReads *r, int uffd, uint32_t samples,
                              GArray *changed)
{
    g_autoptr(GArray) blocks = g_array_new(false, false,
                                           sizeof(NuksmReadsBlock));
    NuksmReadsBlocks ctx = { r, blocks, changed };
    uint64_t start = r->cursor;
    uint32_t looked = 0;

    nuksm_ram_foreach_resolved(r->s, nuksm_reads_add_block, &ctx);
    g_array_sort(blocks, nuksm_reads_block_cmp);
    /* From the cursor to the end, then from the start to the cursor. */
    for (int round = 0; round < 2; round++) {
        for (guint b = 0; b < blocks->len; b++) {
            NuksmReadsBlock *rb = &g_array_index(blocks, NuksmReadsBlock, b);
            uint64_t first;
            uint64_t n = nuksm_pages_read_regions(rb->bs, &first);

            for (uint64_t region = first; region < first + n; region++) {
                if ((region >= start) != (round == 0)) {
                    continue;
                }
                if (looked++ >= samples) {
                    return;
                }
                nuksm_reads_probe_region(r, uffd, rb->rb, rb->bs, region,
                                         changed);
                r->cursor = region + 1;
            }
        }
    }
}

/* The regions merges made warmer since the last call, to tell. */
static GArray *nuksm_reads_take_merged_writes(NuksmReads *r)
{
    GArray *changed = r->merged_writes;

    r->merged_writes = g_array_new(false, false, sizeof(NuksmReadRegion));
    return changed;
}

typedef struct NuksmReadsAge {
    uint64_t windows;           /* to age every region by */
    GArray *changed;
    bool warm_left;             /* a region is still below NEVER */
} NuksmReadsAge;

static void nuksm_reads_age_block(NuksmBlockState *bs, void *opaque)
{
    NuksmReadsAge *age = opaque;
    uint64_t first;
    uint64_t n = nuksm_pages_read_regions(bs, &first);

    for (uint64_t region = first; region < first + n; region++) {
        uint8_t idle = *nuksm_pages_read_idle(bs, region);

        if (idle < NUKSM_IDLE_NEVER) {
            idle = MIN(NUKSM_IDLE_NEVER, idle + age->windows);
            nuksm_reads_set_idle(bs, region, idle, age->changed);
            age->warm_left |= idle < NUKSM_IDLE_NEVER;
        }
    }
}

/*
 * Reads cannot be sampled, so no read can be seen: a region that merges
 * of pages written lately made warm (nuksm_reads_merged()) counts one
 * window more for every window that passes, as a region probed and not
 * read does, so that its warmth ends.  Nothing to age, nothing to do.
 */
static void nuksm_reads_unsampled(NuksmReads *r, uint32_t window_ms,
                                  uint32_t epoch, int64_t now)
{
    g_autoptr(GArray) changed = nuksm_reads_take_merged_writes(r);
    int64_t window_ns = (int64_t)window_ms * SCALE_MS;
    NuksmReadsAge age = { .changed = changed };

    if (changed->len && !r->unsampled_at) {
        r->unsampled_at = now;
    }
    if (window_ns && r->unsampled_at &&
        (age.windows = (now - r->unsampled_at) / window_ns)) {
        r->unsampled_at += age.windows * window_ns;
        nuksm_pages_foreach(r->s->pages, nuksm_reads_age_block, &age);
        if (!age.warm_left) {
            r->unsampled_at = 0;
        }
    }
    if (changed->len || epoch != r->epoch) {
        nuksm_reads_report(r, epoch, changed, false);
    }
}

void nuksm_reads_tick(NuksmReads *r, int uffd, uint32_t epoch)
{
    g_autoptr(GArray) changed = NULL;
    int64_t now = get_clock();
    uint32_t window_ms, samples;

    qemu_mutex_lock(&r->lock);
    window_ms = r->window_ms;
    samples = r->samples;
    qemu_mutex_unlock(&r->lock);

    RCU_READ_LOCK_GUARD();
    nuksm_reads_count(r);
    if (!window_ms || !samples || uffd < 0 || r->pagemap_fd < 0 ||
        !nuksm_remap_reads_supported()) {
        /* What the window caught no longer tells a rate: forget it. */
        r->window_start = 0;
        g_array_set_size(r->probes, 0);
        g_hash_table_remove_all(r->unread);
        g_hash_table_remove_all(r->read);
        nuksm_reads_unsampled(r, window_ms, epoch, now);
        return;
    }
    r->unsampled_at = 0;
    if (r->window_start &&
        now - r->window_start < (int64_t)window_ms * SCALE_MS) {
        return;
    }
    /* First: the windows below see and change the counts merges set. */
    changed = nuksm_reads_take_merged_writes(r);
    if (r->window_start) {
        nuksm_reads_close_window(r, changed);
    }
    nuksm_reads_probe(r, uffd, samples, changed);
    nuksm_reads_report(r, epoch, changed, true);
    r->window_start = now;
    qemu_mutex_lock(&r->lock);
    r->stats.windows++;
    r->stats.probes += r->probes->len;
    qemu_mutex_unlock(&r->lock);
    trace_nuksm_reads_window(r->probes->len, changed->len);
}

int64_t nuksm_reads_due_ns(NuksmReads *r)
{
    int64_t window_ns, start = r->window_start ?: r->unsampled_at;

    qemu_mutex_lock(&r->lock);
    window_ns = (int64_t)r->window_ms * SCALE_MS;
    qemu_mutex_unlock(&r->lock);
    if (!r->window_start && r->merged_writes->len) {
        return 0;           /* not sampling: told at once */
    }
    if (!start || !window_ns) {
        return INT64_MAX;
    }
    return MAX(0, start + window_ns - get_clock());
}

void nuksm_reads_get_stats(NuksmReads *r, NuksmReadStats *stats)
{
    qemu_mutex_lock(&r->lock);
    *stats = r->stats;
    stats->window_ms = r->window_ms;
    stats->samples = r->samples;
    qemu_mutex_unlock(&r->lock);
    stats->lost = qatomic_read(&r->lost);
}
