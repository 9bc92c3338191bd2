/*
 * nuksmd shares: the host's scan budget divided among its VMs
 * (shares.h).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <glib.h>

#include "shares.h"

static bool resting(const ShareAsk *ask)
{
    return ask->reason == NUKSM_SHARE_RESTING ||
           ask->reason == NUKSM_SHARE_IDLE;
}

/* Resting with nothing to sample: its samplers may slow down. */
static bool paced(const ShareAsk *ask)
{
    return resting(ask) && !ask->reading;
}

/* A yielding VM's weight: a yield below one page per CPU-second is one. */
static double yield_weight(const ShareAsk *ask)
{
    return MAX(ask->yield, 1.0);
}

/*
 * The weight of each working VM: its yield, or the mean yielding VM's
 * for those that have none yet.
 */
static void weigh(const ShareAsk *asks, uint32_t n, double *weight)
{
    double sum = 0, hoped;
    uint32_t yielding = 0;

    for (uint32_t i = 0; i < n; i++) {
        if (asks[i].reason == NUKSM_SHARE_YIELDING) {
            sum += yield_weight(&asks[i]);
            yielding++;
        }
    }
    hoped = yielding ? sum / yielding : 1.0;
    for (uint32_t i = 0; i < n; i++) {
        weight[i] = resting(&asks[i]) ? 0 :
                    asks[i].reason == NUKSM_SHARE_YIELDING ?
                    yield_weight(&asks[i]) : hoped;
    }
}

/* The weight of the working VMs not held at their cap. */
static double free_weight(const bool *held, const double *weight,
                          uint32_t n)
{
    double total = 0;

    for (uint32_t i = 0; i < n; i++) {
        total += held[i] ? 0 : weight[i];
    }
    return total;
}

/*
 * Give the working VMs @left by their weights, none more than its cap:
 * a VM its weight would give more is held at its cap and the rest is
 * divided again among the others, until no VM is over its cap.
 */
static void fill(double left, const ShareAsk *asks, uint32_t n,
                 const double *weight, double *part)
{
    g_autofree bool *held = g_new0(bool, n);
    double total;
    bool again;

    do {
        again = false;
        total = free_weight(held, weight, n);
        for (uint32_t i = 0; total > 0 && i < n; i++) {
            if (!held[i] && weight[i] > 0 &&
                left * weight[i] / total >= asks[i].cap_ppm) {
                held[i] = true;
                part[i] = asks[i].cap_ppm;
                left -= asks[i].cap_ppm;
                again = true;
            }
        }
    } while (again);
    for (uint32_t i = 0; total > 0 && i < n; i++) {
        if (!held[i] && weight[i] > 0) {
            part[i] = left * weight[i] / total;
        }
    }
}

/* What the working VMs of @part were given, all together. */
static double working_total(const ShareAsk *asks, uint32_t n,
                            const double *part)
{
    double total = 0;

    for (uint32_t i = 0; i < n; i++) {
        total += resting(&asks[i]) ? 0 : part[i];
    }
    return total;
}

void shares_divide(uint32_t budget_ppm, const ShareAsk *asks, uint32_t n,
                   ShareGiven *given)
{
    g_autofree double *weight = g_new0(double, n);
    g_autofree double *part = g_new0(double, n);
    uint32_t nr_resting = 0, nr_paced = 0;
    double least, left;

    for (uint32_t i = 0; i < n; i++) {
        nr_resting += resting(&asks[i]);
        nr_paced += paced(&asks[i]);
    }
    /* The working VMs first, less the resting VMs' least part. */
    least = nr_resting ? (double)budget_ppm / SHARES_RESTING_PART : 0;
    weigh(asks, n, weight);
    fill(budget_ppm - least, asks, n, weight, part);
    /* The resting VMs then, what the working VMs leave, evenly. */
    left = MAX(budget_ppm - working_total(asks, n, part), least);
    for (uint32_t i = 0; i < n; i++) {
        if (resting(&asks[i])) {
            part[i] = MIN(left / nr_resting, asks[i].cap_ppm);
        }
    }
    for (uint32_t i = 0; i < n; i++) {
        given[i] = (ShareGiven) {
            .max_cpu_ppm = CLAMP((uint32_t)part[i], NUKSM_SHARE_MIN_PPM,
                                 budget_ppm),
            .pace = paced(&asks[i]) ? MIN(nr_paced, NUKSM_SHARE_PACE_MAX)
                                    : 1,
        };
    }
}
