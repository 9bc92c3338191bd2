/*
 * nuksm: the strength of the scanner's change test (nuksm-strength.h).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/timer.h"
#include "libnuksm/nuksm-digest.h"
#include "nuksm-strength.h"
#include "trace.h"

/* Where adaptation starts: 4 lines, 256 bytes. */
#define NUKSM_STRENGTH_DEFAULT_LEVEL 2
/* Confirmations that make a window. */
#define NUKSM_STRENGTH_WINDOW 256
/*
 * Stronger when the misses cost more than this part of what sampling
 * saved; a strength that missed stays the floor for this many calm
 * windows.
 */
#define NUKSM_STRENGTH_PENALTY_SHARE 0.25
#define NUKSM_STRENGTH_FLOOR_WINDOWS 16
/* Pages timed to measure the digests' costs. */
#define NUKSM_STRENGTH_CALIBRATION_PAGES 64
/*
 * Times each cost is measured; the fastest counts, since a preemption
 * or a cold cache only ever makes a round slower (one slow round made
 * a sample look dearer than a full digest, and every profit zero).
 */
#define NUKSM_STRENGTH_CALIBRATION_ROUNDS 8

void nuksm_strength_calibrate(NuksmStrength *st)
{
    g_autofree uint8_t *pages =
        g_malloc(NUKSM_STRENGTH_CALIBRATION_PAGES * NUKSM_PAGE_SIZE);
    int64_t full_ns = INT64_MAX, lines_ns = INT64_MAX;
    uint64_t sink = 0;

    for (size_t i = 0; i < NUKSM_STRENGTH_CALIBRATION_PAGES *
                           NUKSM_PAGE_SIZE; i++) {
        pages[i] = i * 131 + (i >> 12);
    }
    for (unsigned round = 0; round < NUKSM_STRENGTH_CALIBRATION_ROUNDS;
         round++) {
        int64_t start = get_clock();

        for (unsigned i = 0; i < NUKSM_STRENGTH_CALIBRATION_PAGES; i++) {
            sink += nuksm_page_digest(pages + i * NUKSM_PAGE_SIZE,
                                      NUKSM_PAGE_SIZE);
        }
        full_ns = MIN(full_ns, get_clock() - start);
        start = get_clock();
        for (unsigned i = 0; i < NUKSM_STRENGTH_CALIBRATION_PAGES; i++) {
            sink += nuksm_sample_continue(pages + i * NUKSM_PAGE_SIZE,
                                          nuksm_sample_start(), 0,
                                          NUKSM_PAGE_LINES);
        }
        lines_ns = MIN(lines_ns, get_clock() - start);
    }
    st->full_ns = (double)full_ns / NUKSM_STRENGTH_CALIBRATION_PAGES;
    st->line_ns = (double)lines_ns /
                  (NUKSM_STRENGTH_CALIBRATION_PAGES * NUKSM_PAGE_LINES);
    trace_nuksm_strength_calibrated(st->full_ns, st->line_ns * 1000,
                                    sink & 1);
}

void nuksm_strength_init(NuksmStrength *st)
{
    memset(st, 0, sizeof(*st));
    st->adaptive = true;
    st->level = NUKSM_STRENGTH_DEFAULT_LEVEL;
    st->stats.adaptive = true;
    st->stats.strength = nuksm_strength_lines(st) * 64;
}

void nuksm_strength_set(NuksmStrength *st, unsigned bytes)
{
    st->adaptive = !bytes;
    if (bytes) {
        st->level = ctz32(bytes / 64);
    }
    st->floor = 0;
    st->calm_windows = 0;
    st->stats.adaptive = st->adaptive;
    st->stats.strength = nuksm_strength_lines(st) * 64;
}

/* A full digest or compare checked what a sample said: @missed or not. */
static void nuksm_strength_checked(NuksmStrength *st, bool missed)
{
    st->confirmed++;
    if (missed) {
        st->misses++;
        st->stats.misses++;
    }
}

void nuksm_strength_confirmed(NuksmStrength *st, bool changed)
{
    st->stats.pages_hashed++;
    nuksm_strength_checked(st, changed);
}

void nuksm_strength_zero_checked(NuksmStrength *st, bool zero)
{
    nuksm_strength_checked(st, !zero);
}

void nuksm_strength_adapt(NuksmStrength *st)
{
    double sample_ns = nuksm_strength_lines(st) * st->line_ns;
    double profit_ns = st->settled * MAX(st->full_ns - sample_ns, 0);
    double penalty_ns = st->misses * st->full_ns;
    unsigned level = st->level;

    if (st->confirmed < NUKSM_STRENGTH_WINDOW) {
        return;
    }
    st->stats.profit_ns += profit_ns;
    st->stats.penalty_ns += penalty_ns;
    if (st->adaptive) {
        if (st->misses &&
            penalty_ns > NUKSM_STRENGTH_PENALTY_SHARE * profit_ns) {
            level = MIN(level + 1, NUKSM_STRENGTH_LEVELS - 1);
            st->floor = level;
            st->calm_windows = 0;
        } else if (!st->misses) {
            if (++st->calm_windows >= NUKSM_STRENGTH_FLOOR_WINDOWS &&
                st->floor) {
                st->floor--;
                st->calm_windows = 0;
            }
            level = MAX(level, 1) - 1;
            level = MAX(level, st->floor);
        }
    }
    trace_nuksm_strength_window(nuksm_strength_lines(st) * 64, st->settled,
                                st->confirmed, st->misses, profit_ns,
                                penalty_ns, (1u << level) * 64);
    st->level = level;
    st->stats.strength = nuksm_strength_lines(st) * 64;
    st->settled = st->confirmed = st->misses = 0;
}
