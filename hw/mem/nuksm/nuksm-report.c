/*
 * nuksm: the scanner's counters, told to the agent (nuksm-report.h).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/timer.h"
#include "qapi/qapi-types-nuksm.h"
#include "nuksm-governor.h"
#include "nuksm-hints.h"
#include "nuksm-outbox.h"
#include "nuksm-ram.h"
#include "nuksm-report.h"
#include "nuksm-scan.h"
#include "nuksm-state.h"
#include "trace.h"

/* The state numbered alike: QAPI's NuksmState, libnuksm's Id. */
QEMU_BUILD_BUG_ON((int)NUKSM_STATE_DISCONNECTED !=
                  NUKSM_VM_STATE_DISCONNECTED ||
                  (int)NUKSM_STATE_ACTIVE != NUKSM_VM_STATE_ACTIVE ||
                  (int)NUKSM_STATE_PAUSED != NUKSM_VM_STATE_PAUSED ||
                  (int)NUKSM_STATE_DISABLED != NUKSM_VM_STATE_DISABLED ||
                  (int)NUKSM_STATE_LIMITED != NUKSM_VM_STATE_LIMITED ||
                  (int)NUKSM_STATE__MAX != NUKSM_VM_STATE__MAX);

/* The counters as query-nuksm shows them. */
static void nuksm_report_collect(Nuksm *s, NuksmMsgVmStats *msg)
{
    NuksmStats stats;
    NuksmBudget budget;
    NuksmHintStats hints = { 0 };

    nuksm_get_stats(s, &stats);
    nuksm_governor_budget(s, &budget);
    if (s->hints) {
        nuksm_hints_get_stats(s->hints, &hints);
    }
    *msg = (NuksmMsgVmStats) {
        .eligible_pages = nuksm_ram_eligible_pages(s),
        .pages_scanned = stats.pages_scanned,
        .full_scans = stats.full_scans,
        .zero_pages = stats.zero_pages,
        .cow_breaks = stats.cow_breaks,
        .pages_volatile = stats.pages_volatile,
        .scan_rate = budget.scan_rate,
        .scan_cpu_ns = s->scanner ? nuksm_scanner_cpu_ns(s->scanner) : 0,
        .hints_received = hints.hinted,
        .hints_served = stats.hints_served,
        .hints_merged = stats.hints_merged,
        .tracked_writes = stats.tracked_writes,
        .huge_held_pages = stats.huge_held_pages,
        .huge_kept = stats.huge_kept,
        .huge_splits = stats.huge_splits,
        .huge_rebuilt = stats.huge_rebuilt,
        .rest_ms = budget.rest_ms,
        .max_cpu_pm = MIN(budget.max_cpu * 10, 100000),
        .state = nuksm_state(s),
    };
}

static void nuksm_report_tick(void *opaque)
{
    Nuksm *s = opaque;
    NuksmReport *r = &s->report;
    NuksmMsgVmStats msg;

    timer_mod(r->timer, qemu_clock_get_ms(QEMU_CLOCK_REALTIME) +
              NUKSM_REPORT_PERIOD_MS * nuksm_governor_pace(s));
    if (!s->conn.ready) {
        return;
    }
    nuksm_report_collect(s, &msg);
    if (r->epoch == s->conn.epoch && !memcmp(&msg, &r->sent, sizeof(msg))) {
        return;
    }
    r->epoch = s->conn.epoch;
    r->sent = msg;
    trace_nuksm_report(s->id, msg.pages_scanned, msg.full_scans);
    nuksm_outbox_post(&s->outbox, s->conn.epoch, NUKSM_MSG_VM_STATS, &msg,
                      sizeof(msg));
}

void nuksm_report_start(Nuksm *s)
{
    s->report.timer = timer_new_ms(QEMU_CLOCK_REALTIME, nuksm_report_tick,
                                   s);
    timer_mod(s->report.timer, qemu_clock_get_ms(QEMU_CLOCK_REALTIME));
}

void nuksm_report_soon(Nuksm *s)
{
    if (s->report.timer) {
        timer_mod(s->report.timer, qemu_clock_get_ms(QEMU_CLOCK_REALTIME));
    }
}

void nuksm_report_stop(Nuksm *s)
{
    g_clear_pointer(&s->report.timer, timer_free);
}
