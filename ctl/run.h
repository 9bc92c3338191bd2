/*
 * nuksmctl run and prune: when the host merges, changed at run time,
 * and merging stopped with every merged page unmerged (SET_RUN, PRUNE;
 * agent/merge/budget.h).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMCTL_RUN_H
#define NUKSMCTL_RUN_H

#include <stdbool.h>

#include "ctl.h"

/* Unmerge at most this many MiB per second per VM unless told. */
#define PRUNE_RATE_DEFAULT_MIB 256

/* nuksmctl run MODE: merge always, under pressure only, or never. */
void cmd_run(Ctl *ctl, NuksmRunId run, bool json);

/*
 * nuksmctl prune [DOMAIN]: stop merging in merge domain @domain, or on
 * the host (NULL), and unmerge every merged page there, each VM at most
 * @rate_mib MiB per second; with @wait, until none is left, showing
 * how many are.  Returns the exit status.
 */
int cmd_prune(Ctl *ctl, const char *domain, unsigned rate_mib, bool wait,
              bool json);

#endif
