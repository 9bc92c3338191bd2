/*
 * nuksm: the scanner unit, the "nuksm-scan" thread that walks eligible
 * RAM and hashes pages (nuksm-scan.c).  The same thread serves the commit
 * unit's queue between chunks (nuksm-commit.h).
 *
 * Its control (active, epoch, budget) and counters are protected by the
 * scanner's own lock, "lock" in the lock order (nuksm.h).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef HW_MEM_NUKSM_SCAN_H
#define HW_MEM_NUKSM_SCAN_H

#include "nuksm.h"

/*
 * Main loop (BQL), after s->pages and s->commit exist; give it its budget
 * (nuksm_scanner_set_budget()) before it is first made active.
 */
NuksmScanner *nuksm_scanner_new(Nuksm *s);
void nuksm_scanner_free(NuksmScanner *sc);
/* Run (scan, merge, hold userfaultfd) for connection @epoch, or stop. */
void nuksm_scanner_set_active(NuksmScanner *sc, bool active,
                              uint32_t epoch);
/* The budget to keep to (nuksm-governor.h), and whether to drop zeros. */
void nuksm_scanner_set_budget(NuksmScanner *sc, const NuksmBudget *budget,
                              bool zero_pages);
/* Fill the scan counters of @stats. */
void nuksm_scanner_get_stats(NuksmScanner *sc, NuksmStats *stats);
/*
 * The strength of the change test (nuksm-strength.h): @bytes, a power of
 * 2 from 64 to 4096, or 0 to let it adapt.  Applied by the thread.
 */
void nuksm_scanner_set_hash_strength(NuksmScanner *sc, uint32_t bytes);

/* Any thread; they take the scanner's lock, unless said otherwise */
/* Start a fresh pass now. */
void nuksm_scanner_kick(NuksmScanner *sc);
/* Let the thread look again at what it waits for (work, userfaultfd). */
void nuksm_scanner_wake(NuksmScanner *sc);
bool nuksm_scanner_is_active(NuksmScanner *sc);
/*
 * A tracked page was written (nuksm-writes.c), or the agent asked for
 * pages again (RETRY): the rest after a pass ends within a second.
 * Lock-free.
 */
void nuksm_scanner_nudge(NuksmScanner *sc);
/*
 * The last pass found nothing new and nothing has nudged the thread
 * since: nothing is offered to the agent until something changes.
 * Lock-free.
 */
bool nuksm_scanner_settled(NuksmScanner *sc);
/*
 * The agent spent @cpu_ns handling our messages (CHARGE): counted against
 * the CPU budget as if the thread had spent it.  Lock-free.
 */
void nuksm_scanner_charge(NuksmScanner *sc, uint64_t cpu_ns);
/*
 * The object is going: the thread is to end, and the main loop may be
 * joining it rather than serving it.  Lock-free.
 */
bool nuksm_scanner_quitting(NuksmScanner *sc);
/* The connection the thread works for; lock-free. */
uint32_t nuksm_scanner_epoch(NuksmScanner *sc);

#endif /* HW_MEM_NUKSM_SCAN_H */
