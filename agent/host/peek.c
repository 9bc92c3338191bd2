/*
 * nuksmd peek.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <glib.h>

#include "nuksm-proto.h"
#include "peek.h"

int peek_pages(pid_t pid, int pidfd, const uint64_t *addrs, size_t n,
               void *const *dest, bool *read)
{
    struct iovec local[PEEK_PAGES_MAX], remote[PEEK_PAGES_MAX];

    g_assert_cmpuint(n, <=, PEEK_PAGES_MAX);
    memset(read, 0, n * sizeof(*read));
    if (pidfd < 0) {
        return ENOTSUP;
    }
    for (size_t i = 0; i < n; i++) {
        local[i] = (struct iovec) { dest[i], NUKSM_PAGE_SIZE };
        remote[i] = (struct iovec) { (void *)(uintptr_t)addrs[i],
                                     NUKSM_PAGE_SIZE };
    }
    for (size_t i = 0; i < n;) {
        ssize_t got = process_vm_readv(pid, local + i, n - i, remote + i,
                                       n - i, 0);
        size_t whole;

        if (got < 0 && errno != EFAULT) {
            return errno;
        }
        /*
         * It stops at the first page it cannot read, or cannot write (a
         * destination the kernel cannot allocate): skip that one.
         */
        whole = got < 0 ? 0 : (size_t)got / NUKSM_PAGE_SIZE;
        for (size_t k = 0; k < whole; k++) {
            read[i + k] = true;
        }
        i += whole + (i + whole < n);
    }
    /*
     * The process still runs (another user's answers EPERM), so @pid was
     * not handed on to another one while we read: a pidfd keeps naming
     * the process it was opened for.
     */
    if (syscall(SYS_pidfd_send_signal, pidfd, 0, NULL, 0) != 0 &&
        errno == ESRCH) {
        memset(read, 0, n * sizeof(*read));
        return ESRCH;
    }
    return 0;
}
