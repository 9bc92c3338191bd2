/*
 * nuksm: the write-fault thread, "nuksm-writes", which makes write
 * tracking work.
 *
 * A pass write-protects with userfaultfd the guest pages it found stable
 * (nuksm-scan.c), so that the next pass can tell from their pagemap
 * entries' uffd-wp bit, without reading them, that nothing wrote them
 * since.  A write to such a page faults to our userfaultfd and blocks
 * until this thread lifts the protection of the page's stretch (a whole
 * NUKSM_TRACK_STRETCH, 2 MiB, so that a transparent huge page stays
 * huge) and wakes the writer.  The next pass hashes that stretch again.
 * An idle VM then costs a walk of its page tables per pass, not a hash
 * of its memory, and each written stretch one fault per pass at most.
 *
 * The bit only spares hashing.  Every change of what backs a page still
 * compares the content under its own write protection (nuksm-remap.c),
 * so a bit that were wrong would cost a merge, never a write.
 *
 * Faults of pages a commit write-protected arrive here as well.  The
 * commit holds page_lock until it has woken them itself, and this thread
 * takes page_lock before it lifts any protection, so it never lifts a
 * commit's.  It takes nothing but page_lock and the RCU read lock, and
 * never the BQL: the main loop may be one of the writers it wakes.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include <poll.h>
#include <linux/userfaultfd.h>
#include "exec/cpu-common.h"
#include "exec/ramblock.h"
#include "qemu/event_notifier.h"
#include "qemu/rcu.h"
#include "qemu/userfaultfd.h"
#include "nuksm-control.h"
#include "nuksm-pages.h"
#include "nuksm-remap.h"
#include "nuksm-writes.h"
#include "trace.h"

/* Fault messages read at once. */
#define NUKSM_WRITES_BATCH 16

struct NuksmWrites {
    Nuksm *s;
    int uffd;                   /* the commit unit's, borrowed */
    EventNotifier quit;
    QemuThread thread;
};

/*
 * Lift the write protection of the stretch of guest RAM holding the page
 * at @addr, and wake its writers.  Outside guest RAM, or where the
 * stretch cannot be lifted whole, the page alone.
 */
static void nuksm_writes_release(NuksmWrites *w, uint64_t addr)
{
    uint8_t *page = (uint8_t *)(uintptr_t)QEMU_ALIGN_DOWN(addr,
                                                          NUKSM_PAGE_SIZE);
    uint8_t *start = page;
    size_t len = NUKSM_PAGE_SIZE;

    WITH_RCU_READ_LOCK_GUARD() {
        ram_addr_t offset;
        RAMBlock *rb = qemu_ram_block_from_host(page, false, &offset);

        if (rb) {
            uint64_t first = QEMU_ALIGN_DOWN(offset / NUKSM_PAGE_SIZE,
                                             NUKSM_TRACK_STRETCH);
            uint64_t pages = rb->used_length / NUKSM_PAGE_SIZE;

            start = rb->host + first * NUKSM_PAGE_SIZE;
            len = MIN(NUKSM_TRACK_STRETCH, pages - first) * NUKSM_PAGE_SIZE;
        }
        qemu_mutex_lock(&w->s->pages->lock);
        if (nuksm_remap_track(w->uffd, start, len, false) &&
            (start == page ||
             nuksm_remap_track(w->uffd, page, NUKSM_PAGE_SIZE, false))) {
            /* Not ours to protect: a writer retrying is not held again. */
            uffd_wakeup(w->uffd, page, NUKSM_PAGE_SIZE);
        }
        qemu_mutex_unlock(&w->s->pages->lock);
    }
    trace_nuksm_writes_fault(page, start, len);
    nuksm_control_nudge(w->s->control);
}

static void *nuksm_writes_thread(void *opaque)
{
    NuksmWrites *w = opaque;
    struct pollfd fds[2] = {
        { .fd = w->uffd, .events = POLLIN },
        { .fd = event_notifier_get_fd(&w->quit), .events = POLLIN },
    };

    rcu_register_thread();
    /*
     * A writer waits for this loop: nothing but the quit notifier ends
     * it, and an error only makes it poll again.
     */
    while (!(fds[1].revents & POLLIN)) {
        struct uffd_msg msgs[NUKSM_WRITES_BATCH];
        int n;

        if (poll(fds, ARRAY_SIZE(fds), -1) < 0 || !(fds[0].revents & POLLIN)) {
            continue;
        }
        n = uffd_read_events(w->uffd, msgs, ARRAY_SIZE(msgs));
        for (int i = 0; i < n; i++) {
            if (msgs[i].event == UFFD_EVENT_PAGEFAULT) {
                nuksm_writes_release(w, msgs[i].arg.pagefault.address);
            }
        }
    }
    rcu_unregister_thread();
    return NULL;
}

NuksmWrites *nuksm_writes_start(Nuksm *s, int uffd)
{
    NuksmWrites *w = g_new0(NuksmWrites, 1);

    if (event_notifier_init(&w->quit, false) < 0) {
        g_free(w);
        return NULL;
    }
    w->s = s;
    w->uffd = uffd;
    qemu_thread_create(&w->thread, "nuksm-writes", nuksm_writes_thread, w,
                       QEMU_THREAD_JOINABLE);
    return w;
}

void nuksm_writes_stop(NuksmWrites *w)
{
    event_notifier_set(&w->quit);
    qemu_thread_join(&w->thread);
    event_notifier_cleanup(&w->quit);
    g_free(w);
}
