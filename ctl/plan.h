/*
 * nuksmctl plan: the co-location plan (AdaptMD-S) nuksmd would carry
 * out now, each move with what it gains, or why it is refused.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMCTL_PLAN_H
#define NUKSMCTL_PLAN_H

#include <stdbool.h>

#include "ctl.h"

void cmd_plan(Ctl *ctl, bool json);

#endif
