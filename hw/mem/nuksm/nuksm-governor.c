/*
 * nuksm: governors, the presets of the scanner's budget.
 *
 * After UKSM's governors (its section 7): a user names how hard nuksm may
 * work for a VM instead of tuning each figure.  From full down, each
 * governor gives the scanner at most a quarter of the CPU budget of the
 * one above (medium is nuksm's historical default of 10% of a core) and
 * doubles the rests between passes, which bound both how soon new
 * duplicates are found and what an idle VM costs (the rest grows from
 * rest-ms up to a multiple of it, nuksm-scan.c).  quiet is the step of
 * UKSM's "quiet": about what kernel KSM's defaults spend.
 *
 * A property set explicitly (max-cpu, scan-rate) overrides the
 * governor's value from then on, whatever the governor becomes: the
 * order of properties on the command line does not matter.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "nuksm-governor.h"

typedef struct NuksmGovernorPreset {
    double max_cpu;             /* percent of one core */
    uint64_t scan_rate;         /* pages per second, 0: no cap */
    uint32_t rest_ms;           /* shortest rest between passes */
} NuksmGovernorPreset;

static const NuksmGovernorPreset nuksm_governor_presets[] = {
    [NUKSM_GOVERNOR_FULL]   = { .max_cpu = 40,  .rest_ms = 500 },
    [NUKSM_GOVERNOR_MEDIUM] = { .max_cpu = 10,  .rest_ms = 1000 },
    [NUKSM_GOVERNOR_LOW]    = { .max_cpu = 2.5, .rest_ms = 2000 },
    [NUKSM_GOVERNOR_QUIET]  = { .max_cpu = 0.5, .rest_ms = 4000 },
};
QEMU_BUILD_BUG_ON(ARRAY_SIZE(nuksm_governor_presets) !=
                  NUKSM_GOVERNOR__MAX);

void nuksm_governor_budget(Nuksm *s, NuksmBudget *budget)
{
    const NuksmGovernorPreset *preset =
        &nuksm_governor_presets[s->governor];

    budget->governor = s->governor;
    budget->max_cpu = s->max_cpu_set ? s->max_cpu : preset->max_cpu;
    budget->max_cpu_source = s->max_cpu_set ? NUKSM_SETTING_SOURCE_PROPERTY :
                             NUKSM_SETTING_SOURCE_GOVERNOR;
    budget->scan_rate = s->scan_rate_set ? s->scan_rate : preset->scan_rate;
    budget->scan_rate_source = s->scan_rate_set ?
                               NUKSM_SETTING_SOURCE_PROPERTY :
                               NUKSM_SETTING_SOURCE_GOVERNOR;
    budget->rest_ms = preset->rest_ms;
}
