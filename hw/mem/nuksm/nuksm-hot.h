/*
 * nuksm: write hotness of guest pages, from QEMU's dirty log
 * (nuksm-hot.c).  Main loop (BQL) only.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef HW_MEM_NUKSM_HOT_H
#define HW_MEM_NUKSM_HOT_H

#include "nuksm.h"

/* Sample every hot-window ms from now on, while the object runs. */
void nuksm_hot_start(Nuksm *s);
void nuksm_hot_stop(Nuksm *s);
/* The sampler's figures, for query-nuksm. */
NuksmHotness *nuksm_hot_info(Nuksm *s);

#endif /* HW_MEM_NUKSM_HOT_H */
