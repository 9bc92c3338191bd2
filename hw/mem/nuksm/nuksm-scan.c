/*
 * nuksm: the scanner thread ("nuksm-scan").
 *
 * Walks the eligible guest RAM in chunks.  For each chunk it reads the
 * pages' entries in /proc/self/pagemap, which tells which pages are
 * resident (a page never touched is never populated by us) and which
 * merged pages a write has copied (copy-on-write made them anonymous).
 * Resident pages are hashed; a page whose digest did not change since the
 * previous pass is stable and becomes a candidate for the agent, or, if
 * all zero, is dropped locally.  Between chunks the thread serves the
 * agent's requests (nuksm-merge.c).
 *
 * The thread keeps to a CPU budget (max-cpu, measured on its own CPU
 * clock) and an optional page-rate cap (scan-rate).  The RCU read lock is
 * held for one chunk at a time, never across a sleep (the main loop may be
 * waiting for a grace period; x-commit-delay-us, for tests, is the one
 * exception), and RAM blocks are looked up by name for every chunk, so
 * hot-unplug and resizing are safe.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qapi/error.h"
#include "exec/ramblock.h"
#include "qemu/cutils.h"
#include "qemu/error-report.h"
#include "qemu/main-loop.h"
#include "qemu/rcu.h"
#include "qemu/timer.h"
#include "libnuksm/nuksm-digest.h"
#include "nuksm-remap.h"
#include "nuksm-scan.h"
#include "trace.h"

#define NUKSM_SCAN_CHUNK_PAGES  64
/*
 * Rest between full passes, so an idle VM costs next to nothing: 1 s,
 * doubling after each pass that found nothing new, up to 4 s.
 */
#define NUKSM_SCAN_PASS_PAUSE_MS 1000
#define NUKSM_SCAN_PASS_PAUSE_MAX_MS 4000
/*
 * A candidate the agent did not merge stays in its unstable table, where
 * a later duplicate finds it; offer it again only every so many passes
 * (each page in a different pass), in case the table forgot it.
 */
#define NUKSM_SCAN_REOFFER_PASSES 4
/* How often the page-rate cap is enforced, in hashed pages. */
#define NUKSM_SCAN_RATE_SLICE_PAGES 256
/* Messages waiting for the socket before the scanner holds back. */
#define NUKSM_SCAN_MAX_BACKLOG 64

/* pagemap entry bits (Documentation/admin-guide/mm/pagemap.rst) */
#define PM_PRESENT   (1ULL << 63)
#define PM_SWAPPED   (1ULL << 62)
#define PM_FILE      (1ULL << 61)

static int nuksm_pagemap_fd = -1;

void nuksm_scan_block_refs_free(NuksmBlockState *bs)
{
    for (uint64_t r = 0; bs->refs && r < DIV_ROUND_UP(bs->nr_pages,
                                                      NUKSM_REF_REGION); r++) {
        g_free(bs->refs[r]);
    }
    g_free(bs->refs);
    bs->refs = NULL;
}

static void nuksm_block_state_free(gpointer p)
{
    NuksmBlockState *bs = p;

    nuksm_scan_block_refs_free(bs);
    g_free(bs->digest);
    g_free(bs->flags);
    g_free(bs->idle);
    g_free(bs);
}

/* Called with page_lock held. */
NuksmBlockState *nuksm_scan_block_state(NuksmScanner *sc, RAMBlock *rb)
{
    NuksmBlockState *bs = g_hash_table_lookup(sc->blocks, rb->idstr);
    uint64_t nr_pages = rb->used_length / NUKSM_PAGE_SIZE;

    if (!bs) {
        bs = g_new0(NuksmBlockState, 1);
        g_hash_table_insert(sc->blocks, g_strdup(rb->idstr), bs);
    }
    if (bs->nr_pages != nr_pages || bs->first_page !=
        rb->offset / NUKSM_PAGE_SIZE) {
        /*
         * New or resized block: forget what we knew of it.  Only device
         * RAM, which nuksm never touches, is ever resized.
         */
        nuksm_scan_block_refs_free(bs);
        g_free(bs->digest);
        g_free(bs->flags);
        g_free(bs->idle);
        bs->digest = g_new0(uint32_t, nr_pages);
        bs->flags = g_new0(uint8_t, nr_pages);
        bs->idle = g_malloc(nr_pages);
        memset(bs->idle, NUKSM_HOT_IDLE_MAX, nr_pages);
        memset(bs->merged_per_node, 0, sizeof(bs->merged_per_node));
        bs->nr_pages = nr_pages;
        bs->first_page = rb->offset / NUKSM_PAGE_SIZE;
        bs->gnode = nuksm_numa_block_gnode(rb);
    }
    return bs;
}

/* Post the entries of @a as one batch message and empty @a. */
static void nuksm_scan_post_batch(NuksmScanner *sc, uint32_t epoch,
                                  NuksmMsgType type, GArray *a)
{
    uint32_t len = sizeof(NuksmMsgBatch) + a->len * g_array_get_element_size(a);
    g_autofree uint8_t *buf = g_malloc(len);
    NuksmMsgBatch *b = (NuksmMsgBatch *)buf;

    b->count = a->len;
    b->reserved = 0;
    memcpy(b + 1, a->data, len - sizeof(*b));
    nuksm_agent_post(sc->s, epoch, type, buf, len);
    g_array_set_size(a, 0);
}

/* Called with page_lock held. */
void nuksm_scan_flush_unmerged(NuksmScanner *sc, uint32_t epoch)
{
    while (sc->unmerged->len) {
        uint32_t n = MIN(sc->unmerged->len, NUKSM_SLOTREFS_MAX);
        g_autoptr(GArray) part = g_array_sized_new(false, false,
                                                   sizeof(NuksmSlotRef), n);

        g_array_append_vals(part, sc->unmerged->data, n);
        g_array_remove_range(sc->unmerged, 0, n);
        nuksm_scan_post_batch(sc, epoch, NUKSM_MSG_UNMERGED, part);
    }
}

static void nuksm_scan_flush_candidates(NuksmScanner *sc, uint32_t epoch)
{
    if (sc->candidates->len) {
        nuksm_scan_post_batch(sc, epoch, NUKSM_MSG_CANDIDATES,
                              sc->candidates);
    }
}

static void nuksm_scan_add_candidate(NuksmScanner *sc, uint32_t epoch,
                                     NuksmBlockState *bs, uint64_t idx,
                                     uint64_t digest)
{
    NuksmCandidate c = {
        .page = bs->first_page + idx,
        .digest = digest,
        .gnode = bs->gnode,
        .idle = bs->idle[idx],
    };

    g_array_append_val(sc->candidates, c);
    if (sc->candidates->len == NUKSM_CANDIDATES_MAX) {
        nuksm_scan_flush_candidates(sc, epoch);
    }
}

/*
 * Zero the stable zero pages collected in @zero (indexes into the chunk
 * at @host), under write protection.
 */
static void nuksm_scan_drop_zero_pages(NuksmScanner *sc, NuksmBlockState *bs,
                                       uint64_t first, uint8_t *host,
                                       const unsigned *zero, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        uint64_t idx = first + zero[i];
        bool zeroed;

        nuksm_remap_zero_run(sc->uffd, host + zero[i] * NUKSM_PAGE_SIZE, 1,
                             &zeroed);
        if (zeroed) {
            bs->flags[idx] |= NUKSM_PAGE_ZERO;
            sc->stats.zero_pages++;
        }
    }
}

/*
 * Scan one chunk of @count pages starting at page index @first of @rb.
 * Called with page_lock and the RCU read lock held.
 */
static unsigned nuksm_scan_chunk(NuksmScanner *sc, RAMBlock *rb,
                                 NuksmBlockState *bs, uint64_t first,
                                 unsigned count, uint32_t epoch,
                                 NuksmScanStats *delta)
{
    uint8_t *host = rb->host + first * NUKSM_PAGE_SIZE;
    uint64_t pm[NUKSM_SCAN_CHUNK_PAGES];
    unsigned zero[NUKSM_SCAN_CHUNK_PAGES], nr_zero = 0;
    off_t pm_off = (uintptr_t)host / NUKSM_PAGE_SIZE * sizeof(uint64_t);
    unsigned hashed = 0;
    bool zero_pages;

    if (pread(nuksm_pagemap_fd, pm, count * sizeof(pm[0]), pm_off) !=
        count * sizeof(pm[0])) {
        return 0;
    }
    qemu_mutex_lock(&sc->lock);
    zero_pages = sc->zero_pages;
    qemu_mutex_unlock(&sc->lock);

    for (unsigned i = 0; i < count; i++) {
        uint64_t idx = first + i;
        uint8_t *p = host + i * NUKSM_PAGE_SIZE;
        uint8_t *flags = &bs->flags[idx];
        uint64_t digest;
        uint32_t digest32;

        if (*flags & NUKSM_PAGE_MERGED) {
            if (!(pm[i] & PM_SWAPPED) &&
                !((pm[i] & PM_PRESENT) && !(pm[i] & PM_FILE))) {
                continue;       /* still maps its slot */
            }
            /*
             * Copy-on-write made the page anonymous: sharing is over.
             * Its digest is still the slot's, so if the write left the
             * content as it was (the page is hashed below), it is
             * offered again at once rather than a pass later.
             */
            nuksm_merge_forget(sc, bs, idx, NUKSM_STATUS_COW);
            delta->cow_breaks++;
            sc->news++;
        }
        if (!(pm[i] & PM_PRESENT)) {
            continue;
        }
        digest = nuksm_page_digest(p, NUKSM_PAGE_SIZE);
        hashed++;
        if (*flags & NUKSM_PAGE_ZERO) {
            if (digest == sc->zero_digest) {
                continue;       /* read since, still the zero page */
            }
            *flags &= ~NUKSM_PAGE_ZERO;
            sc->stats.zero_pages--;
            delta->cow_breaks++;
            sc->news++;
        }
        /* 0 means "not hashed yet", so fold a zero digest to 1. */
        digest32 = (uint32_t)digest ?: 1;
        if (bs->digest[idx] == digest32) {
            *flags |= NUKSM_PAGE_STABLE;
        } else {
            if (bs->digest[idx]) {
                delta->pages_volatile++;
            }
            *flags &= ~(NUKSM_PAGE_STABLE | NUKSM_PAGE_OFFERED);
            bs->digest[idx] = digest32;
            sc->news++;
            continue;
        }
        /*
         * Without userfaultfd nothing can be merged safely.  A page the
         * agent is merging already may be nominated again: the agent
         * ignores it.
         */
        if (sc->uffd < 0) {
            continue;
        }
        if (digest == sc->zero_digest &&
            nuksm_page_is_zero(p, NUKSM_PAGE_SIZE)) {
            /* MADV_DONTNEED on a store mapping would expose the store. */
            if (zero_pages && !(*flags & NUKSM_PAGE_REMAPPED)) {
                zero[nr_zero++] = i;
            }
            continue;
        }
        /* Refused for lack of mappings: offered when merging resumes. */
        if (*flags & NUKSM_PAGE_HELD) {
            continue;
        }
        if ((*flags & NUKSM_PAGE_OFFERED) &&
            (sc->passes + idx) % NUKSM_SCAN_REOFFER_PASSES) {
            continue;
        }
        if (!(*flags & NUKSM_PAGE_OFFERED)) {
            *flags |= NUKSM_PAGE_OFFERED;
            sc->news++;
        }
        nuksm_scan_add_candidate(sc, epoch, bs, idx, digest);
    }
    if (nr_zero && sc->uffd >= 0) {
        sc->news += nr_zero;
        nuksm_scan_drop_zero_pages(sc, bs, first, host, zero, nr_zero);
    }
    return hashed;
}

static int64_t nuksm_thread_cpu_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * NANOSECONDS_PER_SECOND + ts.tv_nsec;
}

/* Serve queued agent requests.  Called with @lock held; drops it. */
static void nuksm_scan_serve(NuksmScanner *sc)
{
    NuksmWork *w;

    while ((w = g_queue_pop_head(&sc->work))) {
        uint32_t epoch = sc->epoch;

        qemu_mutex_unlock(&sc->lock);
        if (w->epoch == epoch) {
            nuksm_merge_handle(sc, w);
        } else if (w->fd >= 0) {
            close(w->fd);
        }
        g_free(w);
        qemu_mutex_lock(&sc->lock);
    }
}

/*
 * Sleep long enough that the time spent on the last chunks keeps within
 * the CPU budget and the page-rate cap, serving the agent meanwhile.
 * Returns false when the pass must stop (deactivated, quitting, or a
 * fresh pass was requested).
 */
static bool nuksm_scan_throttle(NuksmScanner *sc, int64_t cpu_ns,
                                int64_t wall_ns, unsigned pages)
{
    int64_t sleep_ns, deadline;
    bool go_on;

    qemu_mutex_lock(&sc->lock);
    sleep_ns = cpu_ns * (100 - sc->max_cpu) / sc->max_cpu;
    if (sc->scan_rate) {
        int64_t min_ns = (int64_t)pages * NANOSECONDS_PER_SECOND /
                         sc->scan_rate;
        sleep_ns = MAX(sleep_ns, min_ns - wall_ns);
    }
    deadline = get_clock() + sleep_ns;
    for (;;) {
        int64_t left = deadline - get_clock();

        nuksm_scan_serve(sc);
        go_on = sc->active && !sc->quit && !sc->restart;
        /* Hold back while the socket cannot take what we produce. */
        if (go_on && nuksm_agent_backlog(sc->s) > NUKSM_SCAN_MAX_BACKLOG) {
            left = MAX(left, SCALE_MS);
        }
        if (!go_on || left < SCALE_MS) {
            break;
        }
        qemu_cond_timedwait(&sc->cond, &sc->lock, left / SCALE_MS);
    }
    qemu_mutex_unlock(&sc->lock);
    return go_on;
}

static bool nuksm_pass_add_block(Nuksm *s, RAMBlock *rb, void *opaque)
{
    g_ptr_array_add(opaque, g_strdup(rb->idstr));
    return true;
}

/* One full pass.  Returns true if it ran to the end. */
static bool nuksm_scan_pass(NuksmScanner *sc, uint32_t epoch)
{
    g_autoptr(GPtrArray) pass = g_ptr_array_new_with_free_func(g_free);
    int64_t cpu_debt = 0, wall_start = 0;
    unsigned pages_since_sleep = 0;
    NuksmScanStats delta;

    nuksm_ram_foreach_eligible(sc->s, nuksm_pass_add_block, pass);

    for (guint b = 0; b < pass->len; b++) {
        const char *name = g_ptr_array_index(pass, b);

        for (uint64_t first = 0;; first += NUKSM_SCAN_CHUNK_PAGES) {
            int64_t cpu_start = nuksm_thread_cpu_ns();
            unsigned hashed = 0;
            bool end = false;

            if (!wall_start) {
                wall_start = get_clock();
            }
            memset(&delta, 0, sizeof(delta));
            WITH_RCU_READ_LOCK_GUARD() {
                RAMBlock *rb = qemu_ram_block_by_name(name);
                NuksmBlockState *bs;

                qemu_mutex_lock(&sc->page_lock);
                bs = rb ? nuksm_scan_block_state(sc, rb) : NULL;
                if (!bs || first >= bs->nr_pages) {
                    end = true;
                } else {
                    hashed = nuksm_scan_chunk(sc, rb, bs, first,
                                 MIN(NUKSM_SCAN_CHUNK_PAGES,
                                     bs->nr_pages - first),
                                 epoch, &delta);
                    nuksm_scan_flush_unmerged(sc, epoch);
                }
                qemu_mutex_unlock(&sc->page_lock);
            }
            if (end) {
                break;
            }
            cpu_debt += nuksm_thread_cpu_ns() - cpu_start;
            pages_since_sleep += hashed;

            qemu_mutex_lock(&sc->lock);
            sc->stats.pages_scanned += hashed;
            sc->stats.pages_volatile += delta.pages_volatile;
            sc->stats.cow_breaks += delta.cow_breaks;
            qemu_mutex_unlock(&sc->lock);

            /* Sleep in slices of at least 1 ms, not after every chunk. */
            if (cpu_debt >= SCALE_MS ||
                pages_since_sleep >= NUKSM_SCAN_RATE_SLICE_PAGES) {
                if (!nuksm_scan_throttle(sc, cpu_debt,
                                         get_clock() - wall_start,
                                         pages_since_sleep)) {
                    return false;
                }
                cpu_debt = 0;
                wall_start = 0;
                pages_since_sleep = 0;
            }
        }
    }
    return true;
}

/*
 * Take or release userfaultfd on the eligible RAM.  nuksm holds it only
 * while active: migration, postcopy and background snapshots use
 * userfaultfd on the same RAM.
 */
static bool nuksm_scan_register(Nuksm *s, RAMBlock *rb, void *opaque)
{
    NuksmScanner *sc = opaque;
    Error *err = NULL;

    if (!nuksm_remap_register(sc->uffd, rb->host, rb->used_length, &err)) {
        warn_report_err(err);
    }
    return true;
}

/*
 * Create our userfaultfd.  Without one nothing can merge: the error is
 * kept for query-nuksm (limit userfaultfd) and reported once, and it is
 * tried again only on the next connection to the agent.
 */
static void nuksm_scan_take_uffd(NuksmScanner *sc)
{
    Error *err = NULL;
    bool active, changed;
    int uffd;

    qemu_mutex_lock(&sc->lock);
    if (sc->uffd_error && !sc->uffd_retry) {
        qemu_mutex_unlock(&sc->lock);
        return;
    }
    sc->uffd_retry = false;
    uffd = nuksm_remap_uffd_open(sc->uffd_dev, &err);
    changed = (uffd < 0) != !!sc->uffd_error;
    g_clear_pointer(&sc->uffd_error, g_free);
    if (uffd < 0) {
        sc->uffd_error = g_strdup(error_get_pretty(err));
    }
    qemu_mutex_unlock(&sc->lock);
    if (changed) {
        qemu_bh_schedule(sc->s->limit_bh);
    }
    if (uffd < 0) {
        error_free(err);
        return;
    }
    qemu_mutex_lock(&sc->page_lock);
    qemu_mutex_lock(&sc->lock);
    active = sc->active;
    qemu_mutex_unlock(&sc->lock);
    /*
     * Checked under page_lock: once deactivation released userfaultfd
     * (under page_lock too), a migration may hold its own on our RAM.
     */
    if (!active || sc->uffd >= 0) {
        qemu_mutex_unlock(&sc->page_lock);
        close(uffd);
        return;
    }
    sc->uffd = uffd;
    nuksm_ram_foreach_eligible(sc->s, nuksm_scan_register, sc);
    qemu_mutex_unlock(&sc->page_lock);
}

static void nuksm_scan_release_uffd(NuksmScanner *sc)
{
    qemu_mutex_lock(&sc->page_lock);
    if (sc->uffd >= 0) {
        /* Closing unregisters every range and wakes any waiter. */
        close(sc->uffd);
        sc->uffd = -1;
    }
    qemu_mutex_unlock(&sc->page_lock);
}

static void *nuksm_scan_thread(void *opaque)
{
    NuksmScanner *sc = opaque;

    rcu_register_thread();
    qemu_mutex_lock(&sc->lock);
    while (!sc->quit) {
        uint32_t epoch;

        nuksm_scan_serve(sc);
        if (!sc->active) {
            if (sc->uffd >= 0) {
                qemu_mutex_unlock(&sc->lock);
                nuksm_scan_release_uffd(sc);
                qemu_mutex_lock(&sc->lock);
                continue;
            }
            qemu_cond_wait(&sc->cond, &sc->lock);
            continue;
        }
        epoch = sc->epoch;
        sc->restart = false;
        qemu_mutex_unlock(&sc->lock);

        if (sc->uffd < 0) {
            nuksm_scan_take_uffd(sc);
        }
        if (sc->uffd < 0) {
            /* Nothing can merge: serve the agent, wait for a change. */
            qemu_mutex_lock(&sc->lock);
            if (sc->active && !sc->uffd_retry && !sc->quit &&
                g_queue_is_empty(&sc->work)) {
                qemu_cond_wait(&sc->cond, &sc->lock);
            }
            continue;
        }
        if (sc->work_epoch != epoch) {
            nuksm_merge_reset(sc, epoch);
        }
        qemu_mutex_lock(&sc->page_lock);
        nuksm_maps_tick(sc, false);
        qemu_mutex_unlock(&sc->page_lock);
        trace_nuksm_scan_pass_start();
        sc->passes++;
        sc->news = 0;
        if (nuksm_scan_pass(sc, epoch)) {
            nuksm_scan_flush_candidates(sc, epoch);
            sc->pause_ms = sc->news ? NUKSM_SCAN_PASS_PAUSE_MS :
                           MIN(sc->pause_ms * 2, NUKSM_SCAN_PASS_PAUSE_MAX_MS);
            qemu_mutex_lock(&sc->lock);
            sc->stats.full_scans++;
            trace_nuksm_scan_pass_done(sc->stats.full_scans,
                                       sc->stats.pages_scanned);
            if (!sc->restart && !sc->quit) {
                int64_t end = get_clock() + sc->pause_ms * SCALE_MS;
                /* Rest, but keep serving the agent. */
                while (sc->active && !sc->restart && !sc->quit &&
                       get_clock() < end) {
                    nuksm_scan_serve(sc);
                    /* Limited, see within a second whether it is over. */
                    qemu_mutex_unlock(&sc->lock);
                    qemu_mutex_lock(&sc->page_lock);
                    nuksm_maps_tick(sc, false);
                    qemu_mutex_unlock(&sc->page_lock);
                    qemu_mutex_lock(&sc->lock);
                    qemu_cond_timedwait(&sc->cond, &sc->lock,
                                        MAX(1, MIN(end - get_clock(),
                                                   NANOSECONDS_PER_SECOND) /
                                            SCALE_MS));
                }
            }
        } else {
            qemu_mutex_lock(&sc->lock);
        }
    }
    qemu_mutex_unlock(&sc->lock);
    nuksm_scan_release_uffd(sc);
    rcu_unregister_thread();
    return NULL;
}

NuksmScanner *nuksm_scanner_new(Nuksm *s)
{
    NuksmScanner *sc = g_new0(NuksmScanner, 1);
    static uint8_t zero_page[NUKSM_PAGE_SIZE];

    if (nuksm_pagemap_fd < 0) {
        nuksm_pagemap_fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
        if (nuksm_pagemap_fd < 0) {
            error_report("nuksm: cannot open /proc/self/pagemap: %s",
                         strerror(errno));
        }
    }
    sc->s = s;
    sc->pause_ms = NUKSM_SCAN_PASS_PAUSE_MS;
    sc->max_cpu = NUKSM_DEFAULT_MAX_CPU;
    sc->zero_pages = true;
    sc->uffd = -1;
    sc->uffd_dev = -1;
    sc->zero_digest = nuksm_page_digest(zero_page, NUKSM_PAGE_SIZE);
    sc->blocks = g_hash_table_new_full(g_str_hash, g_str_equal, g_free,
                                       nuksm_block_state_free);
    sc->candidates = g_array_new(false, false, sizeof(NuksmCandidate));
    sc->unmerged = g_array_new(false, false, sizeof(NuksmSlotRef));
    for (int n = 0; n < NUKSM_MAX_NODES; n++) {
        sc->stores[n].fd = -1;
    }
    nuksm_maps_init(sc);
    g_queue_init(&sc->work);
    qemu_mutex_init(&sc->lock);
    qemu_mutex_init(&sc->page_lock);
    qemu_cond_init(&sc->cond);
    qemu_thread_create(&sc->thread, "nuksm-scan", nuksm_scan_thread, sc,
                       QEMU_THREAD_JOINABLE);
    return sc;
}

void nuksm_scanner_free(NuksmScanner *sc)
{
    NuksmWork *w;

    qemu_mutex_lock(&sc->lock);
    sc->quit = true;
    qemu_cond_broadcast(&sc->cond);
    qemu_mutex_unlock(&sc->lock);
    qemu_thread_join(&sc->thread);

    while ((w = g_queue_pop_head(&sc->work))) {
        if (w->fd >= 0) {
            close(w->fd);
        }
        g_free(w);
    }
    nuksm_merge_stores_free(sc);
    if (sc->uffd_dev >= 0) {
        close(sc->uffd_dev);
    }
    g_free(sc->uffd_error);
    g_hash_table_destroy(sc->blocks);
    g_array_free(sc->candidates, true);
    g_array_free(sc->unmerged, true);
    qemu_cond_destroy(&sc->cond);
    qemu_mutex_destroy(&sc->lock);
    qemu_mutex_destroy(&sc->page_lock);
    g_free(sc);
}

void nuksm_scanner_set_active(NuksmScanner *sc, bool active, uint32_t epoch)
{
    qemu_mutex_lock(&sc->lock);
    if (sc->active != active || sc->epoch != epoch) {
        trace_nuksm_scan_active(active);
        sc->active = active;
        sc->epoch = epoch;
        qemu_cond_broadcast(&sc->cond);
    }
    qemu_mutex_unlock(&sc->lock);
    /*
     * Give userfaultfd back now, not when the thread gets to it: a
     * migration starting next registers its own on the same RAM.  The
     * thread never waits for the main loop while holding page_lock.
     */
    if (!active) {
        nuksm_scan_release_uffd(sc);
    }
}

void nuksm_scanner_set_budget(NuksmScanner *sc, uint32_t max_cpu,
                              uint64_t scan_rate, bool zero_pages)
{
    qemu_mutex_lock(&sc->lock);
    sc->max_cpu = max_cpu;
    sc->scan_rate = scan_rate;
    sc->zero_pages = zero_pages;
    qemu_cond_broadcast(&sc->cond);
    qemu_mutex_unlock(&sc->lock);
}

void nuksm_scanner_kick(NuksmScanner *sc)
{
    qemu_mutex_lock(&sc->lock);
    sc->restart = true;
    qemu_cond_broadcast(&sc->cond);
    qemu_mutex_unlock(&sc->lock);
}

bool nuksm_scanner_limited(NuksmScanner *sc)
{
    return qatomic_read(&sc->maps.limited);
}

bool nuksm_scanner_has_remapped(NuksmScanner *sc)
{
    bool remapped;

    qemu_mutex_lock(&sc->page_lock);
    remapped = sc->remapped_pages > 0;
    qemu_mutex_unlock(&sc->page_lock);
    return remapped;
}

void nuksm_scanner_get_stats(NuksmScanner *sc, NuksmScanStats *stats)
{
    qemu_mutex_lock(&sc->page_lock);
    qemu_mutex_lock(&sc->lock);
    *stats = sc->stats;
    pstrcpy(stats->uffd_error, sizeof(stats->uffd_error),
            sc->uffd_error ? sc->uffd_error : "");
    qemu_mutex_unlock(&sc->lock);
    stats->maps_in_use = nuksm_maps_in_use(sc);
    stats->maps_limit = sc->maps.limit;
    stats->maps_budget = nuksm_maps_budget(sc->maps.limit);
    stats->maps_limited = sc->maps.limited;
    qemu_mutex_unlock(&sc->page_lock);
}

/* On each connection to the agent, before the scanner runs for it. */
void nuksm_scanner_set_uffd_device(NuksmScanner *sc, int dev_fd)
{
    qemu_mutex_lock(&sc->lock);
    if (sc->uffd_dev >= 0) {
        close(sc->uffd_dev);
    }
    sc->uffd_dev = dev_fd;
    sc->uffd_retry = true;
    qemu_cond_broadcast(&sc->cond);
    qemu_mutex_unlock(&sc->lock);
}

void nuksm_scanner_queue(NuksmScanner *sc, NuksmMsgType type,
                         uint32_t epoch, const void *payload, uint32_t len,
                         int fd)
{
    NuksmWork *w = g_malloc(sizeof(*w) + len);

    w->type = type;
    w->epoch = epoch;
    w->fd = fd;
    w->len = len;
    memcpy(w->payload, payload, len);
    qemu_mutex_lock(&sc->lock);
    g_queue_push_tail(&sc->work, w);
    qemu_cond_broadcast(&sc->cond);
    qemu_mutex_unlock(&sc->lock);
}
