/*
 * nuksmctl similarity: how much of their memory the VMs of each merge
 * domain hold alike (AdaptMD-S), estimated from their content sketches,
 * with the pages they share now.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMCTL_SIMILARITY_H
#define NUKSMCTL_SIMILARITY_H

#include <stdbool.h>

#include "ctl.h"

void cmd_similarity(Ctl *ctl, bool json);

/*
 * nuksmctl --json similarity --sketches: every VM's content sketch, in
 * the documented, versioned form fleets compare VMs across hosts by
 * (docs/operations.rst, "For fleets").
 */
void cmd_sketches(Ctl *ctl);

#endif
