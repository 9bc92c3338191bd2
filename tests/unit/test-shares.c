/*
 * Unit tests of the host's scan budget divided among its VMs
 * (shares.h).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <glib.h>

#include "shares.h"

#define BUDGET 200000u          /* 20% of a core */
#define CAP    100000u          /* medium's 10% */

static uint32_t sum(const ShareGiven *given, uint32_t n)
{
    uint32_t total = 0;

    for (uint32_t i = 0; i < n; i++) {
        total += given[i].max_cpu_ppm;
    }
    return total;
}

/* New VMs share evenly; a cap holds one back and the others take it. */
static void test_new_vms_share_evenly(void)
{
    ShareAsk asks[3] = {
        { NUKSM_SHARE_NEW, CAP, 0, false },
        { NUKSM_SHARE_NEW, CAP, 0, false },
        { NUKSM_SHARE_NEW, 10000, 0, false },
    };
    ShareGiven given[3];

    shares_divide(BUDGET, asks, 3, given);
    g_assert_cmpuint(given[2].max_cpu_ppm, ==, 10000);
    g_assert_cmpuint(given[0].max_cpu_ppm, ==, 95000);
    g_assert_cmpuint(given[1].max_cpu_ppm, ==, 95000);
    for (int i = 0; i < 3; i++) {
        g_assert_cmpuint(given[i].pace, ==, 1);
    }
}

/* The budget goes by yield; the VM that yields nothing rests. */
static void test_budget_goes_by_yield(void)
{
    ShareAsk asks[3] = {
        { NUKSM_SHARE_YIELDING, BUDGET, 3000, false },
        { NUKSM_SHARE_YIELDING, BUDGET, 1000, false },
        { NUKSM_SHARE_RESTING, BUDGET, 0, false },
    };
    ShareGiven given[3];

    shares_divide(BUDGET, asks, 3, given);
    g_assert_cmpuint(given[2].max_cpu_ppm, ==, BUDGET / SHARES_RESTING_PART);
    g_assert_cmpuint(given[0].max_cpu_ppm, ==,
                     (BUDGET - BUDGET / SHARES_RESTING_PART) * 3 / 4);
    g_assert_cmpuint(given[1].max_cpu_ppm, ==,
                     (BUDGET - BUDGET / SHARES_RESTING_PART) / 4);
    g_assert_cmpuint(sum(given, 3), <=, BUDGET);
    g_assert_cmpuint(given[2].pace, ==, 1);
}

/* Signalled and new VMs weigh as much as the mean yielding VM. */
static void test_signals_weigh_as_the_mean(void)
{
    ShareAsk asks[3] = {
        { NUKSM_SHARE_YIELDING, BUDGET, 3000, false },
        { NUKSM_SHARE_YIELDING, BUDGET, 1000, false },
        { NUKSM_SHARE_SIGNALLED, BUDGET, 0, false },
    };
    ShareGiven given[3];

    shares_divide(BUDGET, asks, 3, given);
    g_assert_cmpuint(given[2].max_cpu_ppm, ==, given[0].max_cpu_ppm * 2 / 3);
    g_assert_cmpuint(given[1].max_cpu_ppm, ==, given[0].max_cpu_ppm / 3);
    g_assert_cmpuint(sum(given, 3), <=, BUDGET);
    g_assert_cmpuint(sum(given, 3), >=, BUDGET - 3);
}

/*
 * However many VMs rest, they share what the working VMs leave, and
 * their pace slows their passes and samplers as many times: their cost
 * does not grow.
 */
static void test_resting_vms_cost_one(void)
{
    for (uint32_t n = 1; n <= 2048; n *= 4) {
        g_autofree ShareAsk *asks = g_new(ShareAsk, n + 1);
        g_autofree ShareGiven *given = g_new(ShareGiven, n + 1);

        for (uint32_t i = 0; i < n; i++) {
            asks[i] = (ShareAsk) { i % 2 ? NUKSM_SHARE_RESTING :
                                           NUKSM_SHARE_IDLE, CAP, 0, false };
        }
        asks[n] = (ShareAsk) { NUKSM_SHARE_YIELDING, CAP, 50, false };
        shares_divide(BUDGET, asks, n + 1, given);
        for (uint32_t i = 0; i < n; i++) {
            g_assert_cmpuint(given[i].max_cpu_ppm, ==,
                             MAX(MIN((BUDGET - CAP) / n, CAP),
                                 NUKSM_SHARE_MIN_PPM));
            g_assert_cmpuint(given[i].pace, ==,
                             MIN(n, NUKSM_SHARE_PACE_MAX));
        }
        g_assert_cmpuint(given[n].max_cpu_ppm, ==, CAP);
        g_assert_cmpuint(given[n].pace, ==, 1);
        g_assert_cmpuint(sum(given, n + 1), <=,
                         BUDGET + n * NUKSM_SHARE_MIN_PPM);
    }
}

/*
 * What working VMs leave (their caps) goes to the resting VMs, which
 * then find what is written into them at once; working VMs that take
 * it all leave them the least part.
 */
static void test_resting_vms_take_what_is_left(void)
{
    ShareAsk asks[4] = {
        { NUKSM_SHARE_YIELDING, 10000, 3000, false },
        { NUKSM_SHARE_SIGNALLED, 10000, 0, false },
        { NUKSM_SHARE_RESTING, CAP, 0, false },
        { NUKSM_SHARE_IDLE, CAP, 0, false },
    };
    ShareGiven given[4];

    shares_divide(BUDGET, asks, 4, given);
    g_assert_cmpuint(given[0].max_cpu_ppm, ==, 10000);
    g_assert_cmpuint(given[1].max_cpu_ppm, ==, 10000);
    g_assert_cmpuint(given[2].max_cpu_ppm, ==, (BUDGET - 20000) / 2);
    g_assert_cmpuint(given[3].max_cpu_ppm, ==, (BUDGET - 20000) / 2);
    g_assert_cmpuint(sum(given, 4), ==, BUDGET);

    asks[0].cap_ppm = asks[1].cap_ppm = BUDGET;
    shares_divide(BUDGET, asks, 4, given);
    g_assert_cmpuint(given[2].max_cpu_ppm, ==,
                     BUDGET / SHARES_RESTING_PART / 2);
    g_assert_cmpuint(sum(given, 4), <=, BUDGET);
}

/*
 * A resting VM whose merged pages are read keeps its samplers' periods;
 * the others' pace counts only those they slow down.
 */
static void test_read_vms_keep_their_pace(void)
{
    ShareAsk asks[3] = {
        { NUKSM_SHARE_RESTING, CAP, 0, true },
        { NUKSM_SHARE_RESTING, CAP, 0, false },
        { NUKSM_SHARE_IDLE, CAP, 0, false },
    };
    ShareGiven given[3];

    shares_divide(BUDGET, asks, 3, given);
    g_assert_cmpuint(given[0].pace, ==, 1);
    g_assert_cmpuint(given[1].pace, ==, 2);
    g_assert_cmpuint(given[2].pace, ==, 2);
    for (int i = 0; i < 3; i++) {
        g_assert_cmpuint(given[i].max_cpu_ppm, ==, BUDGET / 3);
    }
}

/* A budget below the caps: nobody gets less than the least part. */
static void test_least_part(void)
{
    ShareAsk asks[2] = {
        { NUKSM_SHARE_RESTING, CAP, 0, false },
        { NUKSM_SHARE_NEW, CAP, 0, false },
    };
    ShareGiven given[2];

    shares_divide(NUKSM_SHARE_MIN_PPM, asks, 2, given);
    g_assert_cmpuint(given[0].max_cpu_ppm, ==, NUKSM_SHARE_MIN_PPM);
    g_assert_cmpuint(given[1].max_cpu_ppm, ==, NUKSM_SHARE_MIN_PPM);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/shares/new-vms-share-evenly",
                    test_new_vms_share_evenly);
    g_test_add_func("/shares/budget-goes-by-yield",
                    test_budget_goes_by_yield);
    g_test_add_func("/shares/signals-weigh-as-the-mean",
                    test_signals_weigh_as_the_mean);
    g_test_add_func("/shares/resting-vms-cost-one",
                    test_resting_vms_cost_one);
    g_test_add_func("/shares/resting-vms-take-what-is-left",
                    test_resting_vms_take_what_is_left);
    g_test_add_func("/shares/read-vms-keep-their-pace",
                    test_read_vms_keep_their_pace);
    g_test_add_func("/shares/least-part", test_least_part);
    return g_test_run();
}
