/*
 * nuksm: what only our scanner counts, told to the agent (VM_STATS) for
 * its Prometheus metrics: once a second, when it changed since the last
 * report or the connection is a new one.  Main loop (BQL) only.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef HW_MEM_NUKSM_REPORT_H
#define HW_MEM_NUKSM_REPORT_H

#include "nuksm.h"

/* How often the counters are looked at, times the host share's pace. */
#define NUKSM_REPORT_PERIOD_MS 1000

void nuksm_report_start(Nuksm *s);
/*
 * The VM's own budget changed: tell the agent now, not a period later,
 * so that the host's scan budget follows at once.
 */
void nuksm_report_soon(Nuksm *s);
void nuksm_report_stop(Nuksm *s);

#endif /* HW_MEM_NUKSM_REPORT_H */
