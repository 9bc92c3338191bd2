/*
 * nuksmd resident memory: how much of a process's memory is in RAM, as
 * a sign that a VM's guest has touched memory it had not (budget.h).
 *
 * A guest writing memory it never touched gives its scanner nothing to
 * see until its next pass, which a resting VM makes long: write
 * tracking protects only pages that are there.  The process's resident
 * pages (/proc/PID/statm) grow instead, and one read of them tells.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_RESIDENT_H
#define NUKSMD_RESIDENT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/*
 * Pages of process @pid in RAM now, in *@pages; false if they cannot
 * be read.  The caller tells whether @pid still names its process.
 */
bool resident_pages(pid_t pid, uint64_t *pages);

#endif /* NUKSMD_RESIDENT_H */
