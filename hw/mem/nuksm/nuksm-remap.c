/*
 * nuksm: changing what backs guest pages, without ever losing a write.
 *
 * Every change follows the same discipline:
 *   1. write-protect the range with userfaultfd (a writer, be it a vCPU
 *      through KVM, TCG, an iothread or vhost-kernel, now blocks in the
 *      kernel),
 *   2. check the content the change relies on (equal to the store slot,
 *      mapped privately beside guest RAM first, or all zero), and copy
 *      what must stay as it is into that mapping,
 *   3. replace the backing (mremap of those slots over the guest pages,
 *      or MADV_DONTNEED),
 *   4. wake the blocked writers and drop the protection that is left.
 * A writer woken after step 3 retries its fault on the new backing and
 * completes its write on a private copy (copy-on-write).
 *
 * Runs in the scanner thread, or in the thread discarding RAM.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <linux/userfaultfd.h>
#include "qapi/error.h"
#include "qemu/cutils.h"
#include "qemu/madvise.h"
#include "qemu/userfaultfd.h"
#include "hw/boards.h"
#include "system/qtest.h"
#include "libnuksm/nuksm-digest.h"
#include "libnuksm/nuksm-pagemap.h"
#include "nuksm-remap.h"
#include "trace.h"

/*
 * A new userfaultfd of this process: from the system call, or where this
 * process may not use it (vm.unprivileged_userfaultfd=0 and no
 * CAP_SYS_PTRACE, as QEMU run by libvirt), from @dev_fd, a descriptor of
 * /dev/userfaultfd the agent handed over (docs/security.rst).
 */
static int nuksm_remap_uffd_new(int dev_fd, Error **errp)
{
    int fd = syscall(__NR_userfaultfd, O_CLOEXEC | O_NONBLOCK);

    if (fd >= 0) {
        return fd;
    }
    if (errno != EPERM) {
        error_setg_errno(errp, errno, "userfaultfd is not available");
        return -1;
    }
    if (dev_fd < 0) {
        error_setg(errp, "this process may not create a userfaultfd "
                   "(vm.unprivileged_userfaultfd=0) and the agent handed "
                   "over no /dev/userfaultfd");
        return -1;
    }
    fd = ioctl(dev_fd, USERFAULTFD_IOC_NEW, O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        error_setg_errno(errp, errno, "cannot create a userfaultfd from the "
                         "agent's /dev/userfaultfd");
    }
    return fd;
}

/*
 * A new userfaultfd after its API handshake asking for @features; sets
 * *supported to the features it has.
 */
static int nuksm_remap_uffd_api(int dev_fd, uint64_t features,
                                uint64_t *supported, Error **errp)
{
    struct uffdio_api api = { .api = UFFD_API, .features = features };
    int fd = nuksm_remap_uffd_new(dev_fd, errp);

    if (fd < 0) {
        return -1;
    }
    if (ioctl(fd, UFFDIO_API, &api)) {
        error_setg_errno(errp, errno, "userfaultfd refused its API handshake");
        close(fd);
        return -1;
    }
    *supported = api.features;
    return fd;
}

/*
 * Does the kernel report minor faults on mappings of a store, so that
 * reads can be sampled (nuksm-reads.c)?  A property of the kernel, the
 * same for every userfaultfd of this process: known once one is open.
 */
static bool nuksm_remap_minor;

bool nuksm_remap_reads_supported(void)
{
    return qatomic_read(&nuksm_remap_minor);
}

int nuksm_remap_uffd_open(int dev_fd, Error **errp)
{
    uint64_t features = UFFD_FEATURE_PAGEFAULT_FLAG_WP;
    uint64_t supported;
    /* A userfaultfd takes one API handshake: ask on this one. */
    int fd = nuksm_remap_uffd_api(dev_fd, 0, &supported, errp);

    if (fd < 0) {
        return -1;
    }
    close(fd);
    if (!(supported & UFFD_FEATURE_PAGEFAULT_FLAG_WP)) {
        error_setg(errp, "userfaultfd write-protect is not supported by "
                   "this kernel (needs Linux 5.19 or later for shmem)");
        return -1;
    }
    /*
     * Protect pages that are not populated yet as well (Linux 6.4+), and
     * pages mapped from the store, a shmem file (Linux 5.19+).
     */
    features |= supported & (UFFD_FEATURE_WP_UNPOPULATED |
                             UFFD_FEATURE_WP_HUGETLBFS_SHMEM);
    /*
     * And report accesses to store pages not mapped (Linux 5.14+), with
     * the thread that made them: nuksm's own reads are not the VM's.
     */
    features |= supported & (UFFD_FEATURE_MINOR_SHMEM |
                             UFFD_FEATURE_THREAD_ID);
    fd = nuksm_remap_uffd_api(dev_fd, features, &supported, errp);
    if (fd >= 0) {
        qatomic_set(&nuksm_remap_minor,
                    !!(supported & UFFD_FEATURE_MINOR_SHMEM));
    }
    return fd;
}

static bool nuksm_remap_register_mode(int uffd, void *host, size_t len,
                                      uint64_t mode, Error **errp)
{
    uint64_t ioctls;

    if (uffd_register_memory(uffd, host, len, mode, &ioctls)) {
        error_setg_errno(errp, errno, "cannot register %zu bytes of guest "
                         "RAM with userfaultfd", len);
        return false;
    }
    return true;
}

bool nuksm_remap_register(int uffd, void *host, size_t len, Error **errp)
{
    return nuksm_remap_register_mode(uffd, host, len,
                                     UFFDIO_REGISTER_MODE_WP, errp);
}

/*
 * Minor faults can be asked for on shmem only: anonymous guest RAM has
 * write protection alone, a mapping of a store both.
 */
bool nuksm_remap_register_store(int uffd, void *host, size_t len,
                                Error **errp)
{
    return nuksm_remap_register_mode(uffd, host, len,
        UFFDIO_REGISTER_MODE_WP |
        (nuksm_remap_reads_supported() ? UFFDIO_REGISTER_MODE_MINOR : 0),
        errp);
}

/* Advice QEMU gave guest RAM, which a new mapping does not inherit. */
static void nuksm_remap_advise(void *host, size_t len)
{
    if (!qtest_enabled()) {
        qemu_madvise(host, len, QEMU_MADV_DONTFORK);
    }
    if (!machine_dump_guest_core(current_machine)) {
        qemu_madvise(host, len, QEMU_MADV_DONTDUMP);
    }
}

/*
 * After replacing the mapping of @host, register the new mapping too, so
 * that later changes of it can be write-protected in turn, and, if it
 * maps a store (@store), reads of its pages sampled.
 */
static void nuksm_remap_renew(int uffd, void *host, size_t len, bool store)
{
    Error *err = NULL;

    nuksm_remap_advise(host, len);
    if (!(store ? nuksm_remap_register_store(uffd, host, len, &err) :
                  nuksm_remap_register(uffd, host, len, &err))) {
        warn_report_err(err);
    }
}

static void nuksm_remap_protect(int uffd, void *host, size_t len, bool wp)
{
    if (uffd_change_protection(uffd, host, len, wp, false) && wp) {
        /* Without protection a change would not be safe: callers check. */
        trace_nuksm_remap_protect_failed(host, len, errno);
    }
}

int nuksm_remap_track(int uffd, void *host, size_t len, bool wp)
{
    struct uffdio_writeprotect prot = {
        .range = { .start = (uintptr_t)host, .len = len },
        .mode = wp ? UFFDIO_WRITEPROTECT_MODE_WP : 0,
    };

    if (ioctl(uffd, UFFDIO_WRITEPROTECT, &prot)) {
        trace_nuksm_remap_track_failed(host, len, wp, errno);
        return -errno;
    }
    return 0;
}

/*
 * A slot never holds a zero page (zero pages are dropped locally, never
 * offered, and an upload that is not the offered content is refused), so
 * a zero slot is one the agent punched out: mapping it would let the
 * guest read whatever the slot holds next.  Only pages starting with a
 * zero word are read whole.
 */
static bool nuksm_remap_slot_filled(const uint8_t *slot_page)
{
    return *(const uint64_t *)slot_page ||
           !nuksm_page_is_zero(slot_page, NUKSM_PAGE_SIZE);
}

/* Slots read into a buffer at once to compare them (64 KiB). */
#define NUKSM_REMAP_READ_PAGES 16

/*
 * Compare the guest pages at @host that @want (all if NULL) with the
 * @pages slots of @store_fd from @slot: merged[i] if equal, in the store
 * and filled.  The slots are read with pread(), never through a mapping:
 * a fault on a slot the agent punched out would put a page back into
 * its store (it fills the hole), which nobody frees.  That happens when
 * this thread was stopped long enough before mapping the slots for a
 * restarted agent to free them; pread() reads a hole as zero and leaves
 * it a hole.  Returns how many are equal, or -errno.
 */
static ssize_t nuksm_remap_compare(const uint8_t *host, size_t pages,
                                   int store_fd, uint64_t slot,
                                   const bool *want, bool *merged)
{
    const size_t psz = NUKSM_PAGE_SIZE;
    g_autofree uint8_t *buf = g_malloc(NUKSM_REMAP_READ_PAGES * psz);
    ssize_t equal = 0;

    for (size_t i = 0; i < pages;) {
        size_t n = 0;
        ssize_t got;

        if (want && !want[i]) {
            merged[i++] = false;
            continue;
        }
        while (i + n < pages && n < NUKSM_REMAP_READ_PAGES &&
               (!want || want[i + n])) {
            n++;
        }
        got = pread(store_fd, buf, n * psz, (slot + i) * psz);
        if (got < 0) {
            return -errno;
        }
        for (size_t k = 0; k < n; k++) {
            merged[i + k] = got >= (ssize_t)((k + 1) * psz) &&
                            memcmp(host + (i + k) * psz, buf + k * psz,
                                   psz) == 0 &&
                            nuksm_remap_slot_filled(buf + k * psz);
            equal += merged[i + k];
        }
        i += n;
    }
    return equal;
}

/*
 * Does slot @slot of @store_fd pass @check's match?  Read with pread(),
 * as nuksm_remap_compare() says why.  Returns 1 if so, 0 if not, or
 * -errno.
 */
static ssize_t nuksm_remap_match(const NuksmLandCheck *check, int store_fd,
                                 uint64_t slot)
{
    uint8_t buf[NUKSM_PAGE_SIZE];
    ssize_t got = pread(store_fd, buf, sizeof(buf), slot * sizeof(buf));

    if (got < 0) {
        return -errno;
    }
    return got == sizeof(buf) && nuksm_remap_slot_filled(buf) &&
           check->match(buf, check->strong);
}

/* How many of the @pages flags from @i on equal flags[@i]. */
static size_t nuksm_remap_stretch(const bool *flags, size_t i, size_t pages)
{
    size_t n = 1;

    while (i + n < pages && flags[i + n] == flags[i]) {
        n++;
    }
    return n;
}

/*
 * Leave the @pages guest pages at @host as they were: unprotect them,
 * wake their blocked writers and unmap their slots mapped at @slots.
 */
static void nuksm_remap_abandon(int uffd, uint8_t *host, size_t pages,
                                uint8_t *slots)
{
    nuksm_remap_protect(uffd, host, pages * NUKSM_PAGE_SIZE, false);
    uffd_wakeup(uffd, host, pages * NUKSM_PAGE_SIZE);
    munmap(slots, pages * NUKSM_PAGE_SIZE);
}

/*
 * The first steps of a merge: map the @pages slots of @store_fd from
 * @slot privately at a place of their own (*slots), write-protect the
 * guest pages at @host and compare those that @want (all if NULL) with
 * their slots (merged[i]).  Returns how many are equal; on a failure,
 * undoes what it did, sets *err and returns -1.
 */
static ssize_t nuksm_remap_prepare(int uffd, uint8_t *host, size_t pages,
                                   int store_fd, uint64_t slot,
                                   const bool *want, bool *merged,
                                   uint8_t **slots, int *err)
{
    const size_t psz = NUKSM_PAGE_SIZE;
    ssize_t equal;

    *err = 0;
    memset(merged, 0, pages * sizeof(*merged));
    *slots = mmap(NULL, pages * psz, PROT_READ | PROT_WRITE, MAP_PRIVATE,
                  store_fd, slot * psz);
    if (*slots == MAP_FAILED) {
        *err = errno;
        return -1;
    }
    if (uffd_change_protection(uffd, host, pages * psz, true, false)) {
        *err = errno;
        munmap(*slots, pages * psz);
        return -1;
    }
    equal = nuksm_remap_compare(host, pages, store_fd, slot, want, merged);
    if (equal < 0) {
        *err = -equal;
        nuksm_remap_abandon(uffd, host, pages, *slots);
        return -1;
    }
    trace_nuksm_remap_compared(host, pages, equal);
    return equal;
}

/*
 * The slots are mapped privately at a place of their own before their
 * content is compared, then moved over the guest pages.  The agent frees
 * a slot it lost track of (after its own restart) only when no process
 * maps it privately (agent/host/mapwatch.c), so a slot this run compared
 * can no longer be punched out before it backs the guest page, however
 * long this thread is stopped in between.
 */
size_t nuksm_remap_merge_run(int uffd, uint8_t *host, size_t pages,
                             int store_fd, uint64_t slot, uint32_t delay_us,
                             const bool *want, bool *merged, int *err)
{
    const size_t psz = NUKSM_PAGE_SIZE;
    size_t done = 0;
    uint8_t *slots;

    if (nuksm_remap_prepare(uffd, host, pages, store_fd, slot, want, merged,
                            &slots, err) < 0) {
        return 0;
    }
    if (delay_us) {
        g_usleep(delay_us);
    }

    /*
     * Move each maximal stretch of equal pages with one mremap, and unmap
     * the slots of each stretch of different ones (never the whole range
     * at the end: another thread may map into what was moved away).
     */
    for (size_t i = 0; i < pages;) {
        size_t n = nuksm_remap_stretch(merged, i, pages);
        void *p;

        if (!merged[i]) {
            munmap(slots + i * psz, n * psz);
        } else {
            p = mremap(slots + i * psz, n * psz, n * psz,
                       MREMAP_MAYMOVE | MREMAP_FIXED, host + i * psz);
            if (p == MAP_FAILED) {
                /* Checked before anything is unmapped: the pages stay as
                 * they were (e.g. ENOMEM at vm.max_map_count). */
                *err = errno;
                memset(merged + i, 0, n * sizeof(*merged));
                munmap(slots + i * psz, n * psz);
            } else {
                nuksm_remap_renew(uffd, host + i * psz, n * psz, true);
                done += n;
            }
        }
        i += n;
    }

    /* Unprotect what stayed as it was, then release blocked writers. */
    for (size_t i = 0; i < pages;) {
        size_t n = nuksm_remap_stretch(merged, i, pages);

        if (!merged[i]) {
            nuksm_remap_protect(uffd, host + i * psz, n * psz, false);
        }
        i += n;
    }
    uffd_wakeup(uffd, host, pages * psz);
    trace_nuksm_remap_merge_run(host, pages, done);
    return done;
}

/*
 * Land a page of an incoming migration: map slot @slot of @store_fd
 * privately at a place of its own, check it (compare it with the page
 * as sent, or match it with the digest sent), and if it passes and is
 * filled move it over the guest page at @host, whatever that holds
 * (nothing yet, or an older version).  No
 * write protection: only the caller, the thread loading the migration,
 * writes guest RAM then.  The slot is mapped before it is compared,
 * for the reason nuksm_remap_merge_run() gives.  False leaves @host as
 * it was, with *err set if a call failed.
 */
bool nuksm_remap_land(uint8_t *host, int store_fd, uint64_t slot,
                      const NuksmLandCheck *check, int *err)
{
    const size_t psz = NUKSM_PAGE_SIZE;
    uint8_t *slots;
    bool equal;
    ssize_t got;

    *err = 0;
    slots = mmap(NULL, psz, PROT_READ | PROT_WRITE, MAP_PRIVATE, store_fd,
                 slot * psz);
    if (slots == MAP_FAILED) {
        *err = errno;
        return false;
    }
    if (check->content) {
        got = nuksm_remap_compare(check->content, 1, store_fd, slot, NULL,
                                  &equal);
    } else {
        got = nuksm_remap_match(check, store_fd, slot);
    }
    if (got < 0) {
        *err = -got;
    }
    if (got <= 0) {
        munmap(slots, psz);
        return false;
    }
    if (mremap(slots, psz, psz, MREMAP_MAYMOVE | MREMAP_FIXED, host) ==
        MAP_FAILED) {
        *err = errno;
        munmap(slots, psz);
        return false;
    }
    nuksm_remap_advise(host, psz);
    return true;
}

/*
 * A private copy inside a mapping of the store in line with its slot
 * merges by dropping the copy (MADV_DONTNEED on a private mapping of a
 * file drops the private page and leaves the file alone): the next
 * access maps the slot, read-only, through the mapping.  No mapping is
 * made, moved or split, where nuksm_remap_merge_run() would map the
 * window's slots and move each merged page over from them; and only the
 * pages to merge are protected, not the copies between them, which
 * write tracking protects (lifting that would have them hashed again).
 * The slots are as safe from a restarted agent as there: the mapping
 * around the pages maps them (agent/host/mapwatch.c).  Lifting the
 * protection of a dropped page also clears the marker the kernel leaves
 * in its page table, which the page map shows as swapped out, not as a
 * page reading its file.
 */
size_t nuksm_remap_merge_in_place(int uffd, uint8_t *host, size_t pages,
                                  int store_fd, uint64_t slot,
                                  uint32_t delay_us, const bool *want,
                                  bool *merged, int *err)
{
    const size_t psz = NUKSM_PAGE_SIZE;
    size_t done = 0;

    *err = 0;
    memset(merged, 0, pages * sizeof(*merged));
    for (size_t i = 0; i < pages;) {
        size_t n = want ? nuksm_remap_stretch(want, i, pages) : pages;
        uint8_t *at = host + i * psz;
        ssize_t equal;

        if (want && !want[i]) {
            i += n;
            continue;
        }
        if (uffd_change_protection(uffd, at, n * psz, true, false)) {
            *err = errno;
            i += n;
            continue;
        }
        equal = nuksm_remap_compare(at, n, store_fd, slot + i, NULL,
                                    merged + i);
        if (equal < 0) {
            *err = -equal;
            memset(merged + i, 0, n * sizeof(*merged));
        } else if (equal && delay_us) {
            g_usleep(delay_us);
        }
        for (size_t k = i; k < i + n;) {
            size_t m = nuksm_remap_stretch(merged, k, i + n);

            if (merged[k] &&
                qemu_madvise(host + k * psz, m * psz, QEMU_MADV_DONTNEED)) {
                *err = errno;
                memset(merged + k, 0, m * sizeof(*merged));
            }
            done += merged[k] ? m : 0;
            k += m;
        }
        /* Lifting the protection wakes the writers blocked meanwhile. */
        nuksm_remap_protect(uffd, at, n * psz, false);
        i += n;
    }
    trace_nuksm_remap_merge_in_place(host, pages, done);
    return done;
}

/*
 * Fill the pages [@dst, @dst + @n pages) of a mapping registered with
 * @uffd, none of them populated, with private copies of those at @src.
 * UFFDIO_COPY installs anonymous pages into a private mapping of a file
 * without touching the file, so the store behind the window is neither
 * read nor filled; and anonymous pages survive a hole punched in the
 * file under them when the agent frees that slot.  (UFFDIO_ZEROPAGE
 * would not: the kernel zaps a mapping of the zero page with the file's
 * pages, and the page would read the next content of the slot.)
 * Returns 0 or an errno.
 */
static int nuksm_remap_fill_copies(int uffd, uint8_t *dst, uint8_t *src,
                                   size_t n)
{
    const size_t psz = NUKSM_PAGE_SIZE;
    size_t done = 0;

    while (done < n * psz) {
        struct uffdio_copy cp = {
            .dst = (uintptr_t)dst + done,
            .src = (uintptr_t)src + done,
            .len = n * psz - done,
            .mode = UFFDIO_COPY_MODE_DONTWAKE,
        };

        if (ioctl(uffd, UFFDIO_COPY, &cp) && cp.copy <= 0) {
            return errno;
        }
        /* A partial copy (EAGAIN) goes on where it stopped. */
        done += cp.copy;
    }
    return 0;
}

/*
 * A window spans pages that stay as they are, between the merges of
 * scattered duplicates: were each merged page a mapping of its own,
 * a guest with every other page a duplicate would need two mappings per
 * merged page, and vm.max_map_count stops it early.  Instead the slots
 * of the whole window are mapped privately beside guest RAM, the pages
 * that do not merge are copied into that mapping under write protection
 * (so they read and write as before, as private copies, like merged
 * pages after a copy-on-write break), and the window is moved over the
 * guest pages with one mremap.  Each copy is a page of memory: callers
 * leave pages that read as zero out of windows.
 */
size_t nuksm_remap_merge_window(int uffd, uint8_t *host, size_t pages,
                                int store_fd, uint64_t slot,
                                uint32_t delay_us, const bool *want,
                                bool *merged, int *err)
{
    const size_t psz = NUKSM_PAGE_SIZE;
    ssize_t equal;
    uint8_t *slots;
    void *p;

    equal = nuksm_remap_prepare(uffd, host, pages, store_fd, slot, want,
                                merged, &slots, err);
    if (equal < 0) {
        return 0;
    }
    if (!equal) {
        goto unprotect;
    }
    /* Pages not to merge, or not equal, are copied. */
    if ((size_t)equal < pages) {
        uint64_t ioctls;

        /* UFFDIO_COPY fills only a registered mapping. */
        if (uffd_register_memory(uffd, slots, pages * psz,
                                 UFFDIO_REGISTER_MODE_WP, &ioctls)) {
            *err = errno;
            goto unmerge;
        }
        for (size_t i = 0; i < pages;) {
            size_t n = nuksm_remap_stretch(merged, i, pages);

            if (!merged[i]) {
                *err = nuksm_remap_fill_copies(uffd, slots + i * psz,
                                               host + i * psz, n);
                if (*err) {
                    trace_nuksm_remap_copy_failed(host + i * psz, n, *err);
                    goto unmerge;
                }
            }
            i += n;
        }
        /*
         * Moved while registered, the window would merge with a mapping
         * of the next slots before it (registered with the same
         * userfaultfd), and mremap() then drops the registration of the
         * merged mapping whole (no UFFD_FEATURE_EVENT_REMAP): the pages
         * before the window could no longer be write-protected.
         */
        if (uffd_unregister_memory(uffd, slots, pages * psz)) {
            *err = errno;
            goto unmerge;
        }
    }
    if (delay_us) {
        g_usleep(delay_us);
    }

    p = mremap(slots, pages * psz, pages * psz, MREMAP_MAYMOVE | MREMAP_FIXED,
               host);
    if (p == MAP_FAILED) {
        /* Checked before anything is unmapped (e.g. ENOMEM at
         * vm.max_map_count): the pages stay as they were. */
        *err = errno;
        goto unmerge;
    }
    nuksm_remap_renew(uffd, host, pages * psz, true);
    uffd_wakeup(uffd, host, pages * psz);
    trace_nuksm_remap_merge_window(host, pages, equal);
    return equal;

unmerge:
    memset(merged, 0, pages * sizeof(*merged));
unprotect:
    nuksm_remap_abandon(uffd, host, pages, slots);
    return 0;
}

/* The pagemap entry of the page at @host, or 0 (not populated). */
static uint64_t nuksm_remap_pagemap(int pagemap_fd, const uint8_t *host)
{
    uint64_t pm;
    off_t at = (uintptr_t)host / NUKSM_PAGE_SIZE * sizeof(pm);

    return pread(pagemap_fd, &pm, sizeof(pm), at) == sizeof(pm) ? pm : 0;
}

/*
 * A merged page's copy is read through a private mapping of the store's
 * shmem file: dropping the page's entry loses nothing, and its next
 * access faults in the slot again, reported as a minor fault.  A write
 * may make the page a private copy at any time, though, which
 * MADV_DONTNEED would discard: the page is dropped only under write
 * protection, once its entry, read again under it, shows the store's
 * page.  A writer that hit it meanwhile waits for the protection to be
 * lifted and then faults in the slot and writes a copy of it.  Lifting
 * the protection also clears the marker the kernel leaves where it drops
 * a protected page.
 */
NuksmReadProbe nuksm_remap_probe_reads(int uffd, int pagemap_fd,
                                       uint8_t *host)
{
    const size_t psz = NUKSM_PAGE_SIZE;
    uint64_t pm = nuksm_remap_pagemap(pagemap_fd, host);
    NuksmReadProbe probe = NUKSM_READ_PROBE_COPY;

    if (!(pm & (NUKSM_PM_PRESENT | NUKSM_PM_SWAPPED))) {
        return NUKSM_READ_PROBE_SET;   /* its next access faults already */
    }
    if (!(pm & NUKSM_PM_PRESENT) || !(pm & NUKSM_PM_FILE) ||
        uffd_change_protection(uffd, host, psz, true, false)) {
        return NUKSM_READ_PROBE_COPY;
    }
    pm = nuksm_remap_pagemap(pagemap_fd, host);
    if ((pm & NUKSM_PM_PRESENT) && (pm & NUKSM_PM_FILE) &&
        !qemu_madvise(host, psz, QEMU_MADV_DONTNEED)) {
        probe = NUKSM_READ_PROBE_SET;
    }
    nuksm_remap_protect(uffd, host, psz, false);
    return probe;
}

size_t nuksm_remap_zero_run(int uffd, uint8_t *host, size_t pages,
                            bool *zeroed)
{
    const size_t psz = NUKSM_PAGE_SIZE;
    size_t done = 0;

    if (uffd_change_protection(uffd, host, pages * psz, true, false)) {
        memset(zeroed, 0, pages * sizeof(*zeroed));
        return 0;
    }
    for (size_t i = 0; i < pages; i++) {
        zeroed[i] = buffer_is_zero(host + i * psz, psz) &&
                    madvise(host + i * psz, psz, QEMU_MADV_DONTNEED) == 0;
        if (zeroed[i]) {
            done++;
        } else {
            nuksm_remap_protect(uffd, host + i * psz, psz, false);
        }
    }
    uffd_wakeup(uffd, host, pages * psz);
    return done;
}

/* Linux 6.1; glibc 2.36's headers lack it. */
#define NUKSM_MADV_COLLAPSE 25

int nuksm_remap_huge_stage(int uffd, uint8_t *host, size_t len,
                           const bool *zero, uint8_t **stage)
{
    const size_t psz = NUKSM_PAGE_SIZE;
    uint8_t *area = mmap(NULL, 2 * len, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    uint8_t *at;

    if (area == MAP_FAILED) {
        return -errno;
    }
    /* Aligned as a huge page, so that the kernel can back it with one. */
    at = QEMU_ALIGN_PTR_UP(area, len);
    if (at > area) {
        munmap(area, at - area);
    }
    munmap(at + len, area + 2 * len - (at + len));
    qemu_madvise(at, len, QEMU_MADV_HUGEPAGE);
    for (size_t i = 0; i < len / psz; i++) {
        if (zero[i] &&
            qemu_madvise(host + i * psz, psz, QEMU_MADV_POPULATE_WRITE)) {
            int err = -errno;

            munmap(at, len);
            return err;
        }
    }
    if (uffd_change_protection(uffd, host, len, true, false)) {
        int err = -errno;

        munmap(at, len);
        return err;
    }
    memcpy(at, host, len);
    /*
     * Where the first touch found no huge page free, the kernel compacts
     * memory for one (one already there makes it a no-op; an older
     * kernel refuses, and the first touch is all).
     */
    madvise(at, len, NUKSM_MADV_COLLAPSE);
    *stage = at;
    return 0;
}

int nuksm_remap_huge_place(int uffd, uint8_t *host, size_t len,
                           uint8_t *stage, bool place)
{
    int ret = 0;

    if (place && mremap(stage, len, len, MREMAP_MAYMOVE | MREMAP_FIXED,
                        host) != MAP_FAILED) {
        /* What physmem.c advises on anonymous RAM. */
        if (machine_mem_merge(current_machine)) {
            qemu_madvise(host, len, QEMU_MADV_MERGEABLE);
        }
        nuksm_remap_renew(uffd, host, len, false);
        uffd_wakeup(uffd, host, len);
        trace_nuksm_remap_huge_placed(host);
        return 0;
    }
    if (place) {
        ret = -errno;
    }
    nuksm_remap_abandon(uffd, host, len / NUKSM_PAGE_SIZE, stage);
    return ret;
}

int nuksm_remap_anonymous(int uffd, void *host, size_t len)
{
    void *p = mmap(host, len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);

    if (p == MAP_FAILED) {
        return -errno;
    }
    /* What physmem.c and the memory backend advise on anonymous RAM. */
    qemu_madvise(host, len, QEMU_MADV_HUGEPAGE);
    if (machine_mem_merge(current_machine)) {
        qemu_madvise(host, len, QEMU_MADV_MERGEABLE);
    }
    if (uffd >= 0) {
        nuksm_remap_renew(uffd, host, len, false);
    } else {
        nuksm_remap_advise(host, len);
    }
    return 0;
}
