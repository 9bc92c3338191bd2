/*
 * nuksmd peek: pages read where they lie in a VM process's memory
 * (process_vm_readv()), the way a debugger reads them.  The agent reads
 * the content of a new slot itself rather than have QEMU send it through
 * the socket: one copy instead of three, and no round trip through
 * QEMU's main loop.  That needs ptrace read access to the process:
 * CAP_SYS_PTRACE (the agent's unit keeps it), or the process's own user
 * where Yama and the LSMs allow (docs/security.rst).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_PEEK_H
#define NUKSMD_PEEK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Pages read at most per call. */
#define PEEK_PAGES_MAX 64u

/*
 * Read the @n (at most PEEK_PAGES_MAX) pages at @addrs in process @pid,
 * which @pidfd names, page i into @dest[i]: read[i] says which were,
 * whole.  A page not mapped there is not read.  Returns
 * 0, or the errno that keeps the agent from reading that process at all
 * (EPERM, ESRCH, ENOSYS; ENOTSUP without a pidfd, which alone tells that
 * @pid still names the process, not one that got its pid later).
 */
int peek_pages(pid_t pid, int pidfd, const uint64_t *addrs, size_t n,
               void *const *dest, bool *read);

#endif
