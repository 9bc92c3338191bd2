/*
 * nuksmctl top: a live view of what the metrics say (docs/operations.rst,
 * "Monitoring"), for the operator at the console: the agent and the
 * host, each merge domain, each VM, refreshed in place every interval,
 * with rates over it (pages scanned, the scanner's and nuksmd's CPU, the
 * remote share of sampled reads).  Keys: s (saved), r (remote), c (CPU),
 * n (name) sort the VMs, q quits.  With --once, one frame after one
 * interval, not in place: for scripts and logs.
 *
 * It shows what the client may see (docs/agent.rst, "Roles"): an
 * administrator every VM, another user their own.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMCTL_TOP_H
#define NUKSMCTL_TOP_H

#include <stdbool.h>

#include "ctl.h"

/* How the VMs are sorted: a key of the view, and its name. */
typedef enum TopSort {
    TOP_SORT_SAVED,          /* merged pages, most first (the default) */
    TOP_SORT_REMOTE,         /* remote merged pages, most first */
    TOP_SORT_CPU,            /* scanner CPU over the interval, most first */
    TOP_SORT_NAME,
    TOP_SORT__MAX,
} TopSort;

/* The sort called @name ("saved", "remote", "cpu", "name"); -1 if none. */
int top_sort_parse(const char *name);

/* "saved, remote, cpu, name", for errors. */
const char *top_sort_names(void);

/* The exit status. */
int cmd_top(Ctl *ctl, unsigned interval_s, TopSort sort, bool once);

#endif
