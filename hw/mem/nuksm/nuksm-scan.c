/*
 * nuksm: the scanner thread ("nuksm-scan").
 *
 * Walks the eligible guest RAM in chunks, hashes the pages that are
 * resident (mincore: a page never touched is never populated by us) and
 * remembers a 32-bit digest per page, so that a page whose content
 * changed between two passes is known as volatile.  The thread keeps to
 * a CPU budget (max-cpu, measured on the thread's own CPU clock) and an
 * optional page-rate cap (scan-rate).
 *
 * Guest RAM is only read here.  The RCU read lock is held for one chunk
 * at a time, never across a sleep, and RAM blocks are looked up by name
 * for every chunk, so hot-unplug and resizing are safe.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include <sys/mman.h>
#include "exec/ramblock.h"
#include "qemu/rcu.h"
#include "qemu/thread.h"
#include "qemu/timer.h"
#include "libnuksm/nuksm-digest.h"
#include "nuksm.h"
#include "trace.h"

#define NUKSM_SCAN_CHUNK_PAGES  64
/* Rest between full passes, so an idle VM costs next to nothing. */
#define NUKSM_SCAN_PASS_PAUSE_MS 1000
/* How often the page-rate cap is enforced, in hashed pages. */
#define NUKSM_SCAN_RATE_SLICE_PAGES 256

/* Per-RAM-block scan state, owned by the scanner thread. */
typedef struct NuksmBlockState {
    uint64_t nr_pages;
    uint32_t *digest;           /* 0 = not hashed yet */
} NuksmBlockState;

/* A RAM block to visit in the current pass. */
typedef struct NuksmPassBlock {
    char *name;
    uint64_t nr_pages;
} NuksmPassBlock;

struct NuksmScanner {
    Nuksm *s;
    QemuThread thread;
    QemuMutex lock;
    QemuCond cond;

    /* Protected by @lock */
    bool active;
    bool quit;
    bool restart;               /* nuksm-scan asked for a fresh pass */
    uint32_t max_cpu;
    uint64_t scan_rate;
    NuksmScanStats stats;

    /* Scanner thread only */
    GHashTable *blocks;         /* RAM block name -> NuksmBlockState */
};

static void nuksm_block_state_free(gpointer p)
{
    NuksmBlockState *bs = p;

    g_free(bs->digest);
    g_free(bs);
}

static NuksmBlockState *nuksm_block_state(NuksmScanner *sc,
                                          const char *name,
                                          uint64_t nr_pages)
{
    NuksmBlockState *bs = g_hash_table_lookup(sc->blocks, name);

    if (!bs) {
        bs = g_new0(NuksmBlockState, 1);
        g_hash_table_insert(sc->blocks, g_strdup(name), bs);
    }
    if (bs->nr_pages != nr_pages) {
        /* New or resized block: forget what we knew of it. */
        g_free(bs->digest);
        bs->digest = g_new0(uint32_t, nr_pages);
        bs->nr_pages = nr_pages;
    }
    return bs;
}

static bool nuksm_pass_add_block(Nuksm *s, RAMBlock *rb, void *opaque)
{
    GArray *pass = opaque;
    NuksmPassBlock pb = {
        .name = g_strdup(rb->idstr),
        .nr_pages = rb->used_length / qemu_real_host_page_size(),
    };

    g_array_append_val(pass, pb);
    return true;
}

static void nuksm_pass_block_clear(gpointer p)
{
    g_free(((NuksmPassBlock *)p)->name);
}

/*
 * Hash the resident pages of one chunk.  Returns the number of pages
 * hashed and counts those whose digest changed in @volatile_pages.
 */
static unsigned nuksm_scan_chunk(NuksmBlockState *bs, const char *name,
                                 uint64_t first, unsigned count,
                                 uint64_t *volatile_pages)
{
    size_t page_size = qemu_real_host_page_size();
    unsigned char resident[NUKSM_SCAN_CHUNK_PAGES];
    unsigned hashed = 0;
    RAMBlock *rb;
    uint8_t *host;

    RCU_READ_LOCK_GUARD();
    rb = qemu_ram_block_by_name(name);
    if (!rb || rb->used_length / page_size != bs->nr_pages) {
        return 0;  /* unplugged or resized since the pass began */
    }
    host = rb->host + first * page_size;
    if (mincore(host, (size_t)count * page_size, resident) < 0) {
        return 0;
    }
    for (unsigned i = 0; i < count; i++) {
        uint32_t digest;

        if (!(resident[i] & 1)) {
            continue;
        }
        /* 0 means "not hashed yet", so fold a zero digest to 1. */
        digest = (uint32_t)nuksm_page_digest(host + i * page_size,
                                             page_size) ?: 1;
        if (bs->digest[first + i] && bs->digest[first + i] != digest) {
            (*volatile_pages)++;
        }
        bs->digest[first + i] = digest;
        hashed++;
    }
    return hashed;
}

static int64_t nuksm_thread_cpu_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * NANOSECONDS_PER_SECOND + ts.tv_nsec;
}

/*
 * Sleep long enough that the time spent on the last chunk keeps within
 * the CPU budget and the page-rate cap.  Returns false when the pass
 * must stop (deactivated, quitting, or a fresh pass was requested).
 */
static bool nuksm_scan_throttle(NuksmScanner *sc, int64_t cpu_ns,
                                int64_t wall_ns, unsigned pages)
{
    int64_t sleep_ns;
    bool go_on;

    qemu_mutex_lock(&sc->lock);
    sleep_ns = cpu_ns * (100 - sc->max_cpu) / sc->max_cpu;
    if (sc->scan_rate) {
        int64_t min_ns = (int64_t)pages * NANOSECONDS_PER_SECOND /
                         sc->scan_rate;
        sleep_ns = MAX(sleep_ns, min_ns - wall_ns);
    }
    if (sleep_ns >= SCALE_MS && sc->active && !sc->quit && !sc->restart) {
        qemu_cond_timedwait(&sc->cond, &sc->lock, sleep_ns / SCALE_MS);
    }
    go_on = sc->active && !sc->quit && !sc->restart;
    qemu_mutex_unlock(&sc->lock);
    return go_on;
}

/* One full pass.  Returns true if it ran to the end. */
static bool nuksm_scan_pass(NuksmScanner *sc)
{
    g_autoptr(GArray) pass = g_array_new(false, false,
                                         sizeof(NuksmPassBlock));
    int64_t cpu_debt = 0, wall_start = 0;
    unsigned pages_since_sleep = 0;

    g_array_set_clear_func(pass, nuksm_pass_block_clear);
    nuksm_ram_foreach_eligible(sc->s, nuksm_pass_add_block, pass);

    for (guint b = 0; b < pass->len; b++) {
        NuksmPassBlock *pb = &g_array_index(pass, NuksmPassBlock, b);
        NuksmBlockState *bs = nuksm_block_state(sc, pb->name, pb->nr_pages);

        for (uint64_t first = 0; first < pb->nr_pages;
             first += NUKSM_SCAN_CHUNK_PAGES) {
            unsigned count = MIN(NUKSM_SCAN_CHUNK_PAGES,
                                 pb->nr_pages - first);
            int64_t cpu_start = nuksm_thread_cpu_ns();
            uint64_t volatile_pages = 0;
            unsigned hashed;

            if (!wall_start) {
                wall_start = get_clock();
            }
            hashed = nuksm_scan_chunk(bs, pb->name, first, count,
                                      &volatile_pages);
            cpu_debt += nuksm_thread_cpu_ns() - cpu_start;
            pages_since_sleep += hashed;

            qemu_mutex_lock(&sc->lock);
            sc->stats.pages_scanned += hashed;
            sc->stats.pages_volatile += volatile_pages;
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

static void *nuksm_scan_thread(void *opaque)
{
    NuksmScanner *sc = opaque;

    rcu_register_thread();
    qemu_mutex_lock(&sc->lock);
    while (!sc->quit) {
        if (!sc->active) {
            qemu_cond_wait(&sc->cond, &sc->lock);
            continue;
        }
        sc->restart = false;
        qemu_mutex_unlock(&sc->lock);

        trace_nuksm_scan_pass_start();
        if (nuksm_scan_pass(sc)) {
            qemu_mutex_lock(&sc->lock);
            sc->stats.full_scans++;
            trace_nuksm_scan_pass_done(sc->stats.full_scans,
                                       sc->stats.pages_scanned);
            if (!sc->restart && !sc->quit) {
                qemu_cond_timedwait(&sc->cond, &sc->lock,
                                    NUKSM_SCAN_PASS_PAUSE_MS);
            }
        } else {
            qemu_mutex_lock(&sc->lock);
        }
    }
    qemu_mutex_unlock(&sc->lock);
    rcu_unregister_thread();
    return NULL;
}

NuksmScanner *nuksm_scanner_new(Nuksm *s)
{
    NuksmScanner *sc = g_new0(NuksmScanner, 1);

    sc->s = s;
    sc->max_cpu = NUKSM_DEFAULT_MAX_CPU;
    sc->blocks = g_hash_table_new_full(g_str_hash, g_str_equal, g_free,
                                       nuksm_block_state_free);
    qemu_mutex_init(&sc->lock);
    qemu_cond_init(&sc->cond);
    qemu_thread_create(&sc->thread, "nuksm-scan", nuksm_scan_thread, sc,
                       QEMU_THREAD_JOINABLE);
    return sc;
}

void nuksm_scanner_free(NuksmScanner *sc)
{
    qemu_mutex_lock(&sc->lock);
    sc->quit = true;
    qemu_cond_broadcast(&sc->cond);
    qemu_mutex_unlock(&sc->lock);
    qemu_thread_join(&sc->thread);

    g_hash_table_destroy(sc->blocks);
    qemu_cond_destroy(&sc->cond);
    qemu_mutex_destroy(&sc->lock);
    g_free(sc);
}

void nuksm_scanner_set_active(NuksmScanner *sc, bool active)
{
    qemu_mutex_lock(&sc->lock);
    if (sc->active != active) {
        trace_nuksm_scan_active(active);
        sc->active = active;
        qemu_cond_broadcast(&sc->cond);
    }
    qemu_mutex_unlock(&sc->lock);
}

void nuksm_scanner_set_budget(NuksmScanner *sc, uint32_t max_cpu,
                              uint64_t scan_rate)
{
    qemu_mutex_lock(&sc->lock);
    sc->max_cpu = max_cpu;
    sc->scan_rate = scan_rate;
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

void nuksm_scanner_get_stats(NuksmScanner *sc, NuksmScanStats *stats)
{
    qemu_mutex_lock(&sc->lock);
    *stats = sc->stats;
    qemu_mutex_unlock(&sc->lock);
}
