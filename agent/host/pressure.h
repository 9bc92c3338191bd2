/*
 * nuksmd memory pressure: how short of memory the host, or the cgroup
 * its VMs run in, is now, for run=pressure (budget.h).
 *
 * As ksmtuned, oVirt's MOM and KubeVirt do, merging is worth its CPU
 * only while memory is short: while the memory available is below a
 * share of the total (their 20%), or, which they do not look at, while
 * tasks stall on memory (PSI, Linux 4.20: "some" over the last 10 s).
 * The host's figures are /proc/meminfo's MemTotal and MemAvailable and
 * /proc/pressure/memory; a cgroup's (--pressure-cgroup) its memory.max,
 * less memory.current, and its memory.pressure (cgroup v2), or its
 * memory.limit_in_bytes less memory.usage_in_bytes (v1, which counts no
 * stalls).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_PRESSURE_H
#define NUKSMD_PRESSURE_H

#include <stdbool.h>
#include <stdint.h>

/* What memory looks like now. */
typedef struct PressureSample {
    uint64_t total;          /* bytes: MemTotal, or memory.max */
    uint64_t available;      /* bytes: MemAvailable, or what is left */
    uint32_t stall_pm;       /* PSI "some" avg10, per mille; 0 unknown */
} PressureSample;

/*
 * Read the host's figures, or with @cgroup (a cgroup v2 directory) that
 * cgroup's.  False, with *@error saying why (free it), when they cannot
 * be read: a cgroup without a memory.max is an error.
 */
bool pressure_read(const char *cgroup, PressureSample *sample,
                   char **error);

#endif /* NUKSMD_PRESSURE_H */
