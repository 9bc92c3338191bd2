/*
 * nuksm: the fault threads, "nuksm-faults" and "nuksm-writes", which make
 * write tracking and read sampling work.
 *
 * A pass write-protects with userfaultfd the guest pages it sees for the
 * first time and those it found stable (nuksm-scan.c), so that the next
 * pass can tell from their pagemap entries' uffd-wp bit, without reading
 * them, that nothing wrote them since.  A write to such a page faults to
 * our userfaultfd and blocks until the protection of the page's stretch
 * (a whole NUKSM_TRACK_STRETCH, 2 MiB, so that a transparent huge page
 * stays huge) is lifted and the writer woken.  The next pass hashes that
 * stretch again.  An idle VM then costs a walk of its page tables per
 * pass, not a hash of its memory, and each written stretch one fault per
 * pass at most.
 *
 * The bit only spares hashing.  Every change of what backs a page still
 * compares the content under its own write protection (nuksm-remap.c),
 * so a bit that were wrong would cost a merge, never a write.
 *
 * Faults of pages a commit write-protected arrive here as well.  The
 * commit holds page_lock until it has woken them itself, and the
 * protection is lifted only under page_lock, so never a commit's.
 *
 * Reads of merged pages whose page-table entry is gone (read sampling
 * dropped it, nuksm-reads.c, or the page was not read since it merged)
 * arrive as minor faults: the store's page is mapped back
 * (UFFDIO_CONTINUE) and the read counted, with no lock taken at all.
 * The thread holding page_lock may be such a reader (the commit unit
 * compares a page it moves with its new slot), so the thread that reads
 * the faults, "nuksm-faults", never waits for page_lock: it serves reads
 * itself and hands write faults to "nuksm-writes", which lifts their
 * protection under page_lock.  Neither takes any other lock than
 * page_lock, the queue's and the RCU read lock, nor ever the BQL: the
 * main loop may be one of the writers or readers they serve.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include <poll.h>
#include <sys/ioctl.h>
#include <linux/userfaultfd.h>
#include "exec/cpu-common.h"
#include "exec/ramblock.h"
#include "qemu/event_notifier.h"
#include "qemu/rcu.h"
#include "qemu/userfaultfd.h"
#include "nuksm-control.h"
#include "nuksm-pages.h"
#include "nuksm-reads.h"
#include "nuksm-remap.h"
#include "nuksm-writes.h"
#include "trace.h"

/* Fault messages read at once. */
#define NUKSM_WRITES_BATCH 16

struct NuksmWrites {
    Nuksm *s;
    int uffd;                   /* the commit unit's, borrowed */
    EventNotifier quit;         /* for nuksm-faults */
    QemuThread faults;
    QemuThread writes;
    QemuMutex lock;             /* the fields below */
    QemuCond cond;              /* write faults queued, or quit */
    GArray *queue;              /* write fault addresses (uint64_t) */
    bool quitting;
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
    nuksm_control_written(w->s->control);
}

/*
 * A read of a merged page whose entry is not in the page table: map the
 * store's page back, read-only as the mapping is private (a write then
 * copies it), and count the read.  Where that fails, the reader is woken
 * all the same, or it would wait for ever: it faults again, and finds
 * the page mapped (EEXIST: a fault of another thread on the page, read
 * before its own, was served after it faulted) or the kernel serves that
 * fault itself (the page left the store's page cache meanwhile).
 */
static void nuksm_writes_continue(NuksmWrites *w, uint64_t addr, int tid)
{
    uint64_t page = QEMU_ALIGN_DOWN(addr, NUKSM_PAGE_SIZE);
    struct uffdio_continue cont = {
        .range = { .start = page, .len = NUKSM_PAGE_SIZE },
    };

    if (ioctl(w->uffd, UFFDIO_CONTINUE, &cont)) {
        if (errno != EEXIST) {
            trace_nuksm_writes_continue_failed((void *)(uintptr_t)page,
                                               errno);
        }
        uffd_wakeup(w->uffd, (void *)(uintptr_t)page, NUKSM_PAGE_SIZE);
    }
    nuksm_reads_note(w->s->reads, page, tid);
}

static void *nuksm_faults_thread(void *opaque)
{
    NuksmWrites *w = opaque;
    struct pollfd fds[2] = {
        { .fd = w->uffd, .events = POLLIN },
        { .fd = event_notifier_get_fd(&w->quit), .events = POLLIN },
    };

    /*
     * A writer or reader waits for this loop: nothing but the quit
     * notifier ends it, and an error only makes it poll again.
     */
    while (!(fds[1].revents & POLLIN)) {
        struct uffd_msg msgs[NUKSM_WRITES_BATCH];
        bool queued = false;
        int n;

        if (poll(fds, ARRAY_SIZE(fds), -1) < 0 || !(fds[0].revents & POLLIN)) {
            continue;
        }
        n = uffd_read_events(w->uffd, msgs, ARRAY_SIZE(msgs));
        for (int i = 0; i < n; i++) {
            uint64_t addr = msgs[i].arg.pagefault.address;

            if (msgs[i].event != UFFD_EVENT_PAGEFAULT) {
                continue;
            }
            if (msgs[i].arg.pagefault.flags & UFFD_PAGEFAULT_FLAG_MINOR) {
                nuksm_writes_continue(w, addr,
                                      msgs[i].arg.pagefault.feat.ptid);
                continue;
            }
            if (!queued) {
                qemu_mutex_lock(&w->lock);
                queued = true;
            }
            g_array_append_val(w->queue, addr);
        }
        if (queued) {
            qemu_cond_signal(&w->cond);
            qemu_mutex_unlock(&w->lock);
        }
    }
    return NULL;
}

static void *nuksm_writes_thread(void *opaque)
{
    NuksmWrites *w = opaque;
    g_autoptr(GArray) faults = g_array_new(false, false, sizeof(uint64_t));

    rcu_register_thread();
    qemu_mutex_lock(&w->lock);
    while (!w->quitting) {
        if (!w->queue->len) {
            qemu_cond_wait(&w->cond, &w->lock);
            continue;
        }
        /* Taken whole: nuksm-faults queues more meanwhile. */
        g_array_append_vals(faults, w->queue->data, w->queue->len);
        g_array_set_size(w->queue, 0);
        qemu_mutex_unlock(&w->lock);
        for (guint i = 0; i < faults->len; i++) {
            nuksm_writes_release(w, g_array_index(faults, uint64_t, i));
        }
        g_array_set_size(faults, 0);
        qemu_mutex_lock(&w->lock);
    }
    qemu_mutex_unlock(&w->lock);
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
    /*
     * Allocated here, so that nuksm-faults, which appends to it, never
     * mallocs: its first malloc would give it an arena of its own, new
     * mappings that QEMU's mapping budget did not count (nuksm-maps.c).
     * Grown by realloc, it stays in this thread's arena.
     */
    w->queue = g_array_sized_new(false, false, sizeof(uint64_t),
                                 NUKSM_WRITES_BATCH);
    qemu_mutex_init(&w->lock);
    qemu_cond_init(&w->cond);
    qemu_thread_create(&w->writes, "nuksm-writes", nuksm_writes_thread, w,
                       QEMU_THREAD_JOINABLE);
    qemu_thread_create(&w->faults, "nuksm-faults", nuksm_faults_thread, w,
                       QEMU_THREAD_JOINABLE);
    return w;
}

void nuksm_writes_stop(NuksmWrites *w)
{
    event_notifier_set(&w->quit);
    qemu_thread_join(&w->faults);
    qemu_mutex_lock(&w->lock);
    w->quitting = true;
    qemu_cond_signal(&w->cond);
    qemu_mutex_unlock(&w->lock);
    qemu_thread_join(&w->writes);
    event_notifier_cleanup(&w->quit);
    qemu_cond_destroy(&w->cond);
    qemu_mutex_destroy(&w->lock);
    g_array_free(w->queue, true);
    g_free(w);
}
