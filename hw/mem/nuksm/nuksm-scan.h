/*
 * nuksm: the scanner unit, the "nuksm-scan" thread that walks eligible
 * RAM and hashes pages (nuksm-scan.c).  The same thread serves the commit
 * unit's queue between chunks (nuksm-commit.h).
 *
 * What other threads tell it, and read of it, goes through its control
 * (nuksm-control.h), whose lock is "lock" in the lock order (nuksm.h).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef HW_MEM_NUKSM_SCAN_H
#define HW_MEM_NUKSM_SCAN_H

#include "nuksm.h"

/*
 * Main loop (BQL), after s->control, s->pages and s->commit exist; give
 * it its budget (nuksm_control_set_budget()) before it is first made
 * active.
 */
NuksmScanner *nuksm_scanner_new(Nuksm *s);
void nuksm_scanner_free(NuksmScanner *sc);
/* CPU the scanner thread took so far, in ns; any thread. */
uint64_t nuksm_scanner_cpu_ns(NuksmScanner *sc);
/*
 * Run (scan, merge, hold userfaultfd) for connection @epoch, or stop
 * and give userfaultfd back.  Main loop.
 */
void nuksm_scanner_set_active(NuksmScanner *sc, bool active,
                              uint32_t epoch);

#endif /* HW_MEM_NUKSM_SCAN_H */
