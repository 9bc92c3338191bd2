/*
 * nuksm: governors, the presets of the scanner's budget
 * (nuksm-governor.c).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef HW_MEM_NUKSM_GOVERNOR_H
#define HW_MEM_NUKSM_GOVERNOR_H

#include "nuksm.h"

#define NUKSM_DEFAULT_GOVERNOR NUKSM_GOVERNOR_MEDIUM

/*
 * The budget object @s gives its scanner: its governor's preset, less
 * what its max-cpu and scan-rate properties override.  Main loop.
 */
void nuksm_governor_budget(Nuksm *s, NuksmBudget *budget);

#endif /* HW_MEM_NUKSM_GOVERNOR_H */
