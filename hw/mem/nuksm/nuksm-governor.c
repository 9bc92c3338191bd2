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
 * The VM's budget is a cap: nuksmd shares one scan budget among the
 * host's VMs (SHARE, nuksmd's merge/budget.h), and the scanner works
 * within the smaller of the two.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "nuksm-control.h"
#include "nuksm-governor.h"
#include "nuksm-reads.h"

/* The reasons numbered alike: QAPI's NuksmShareReason, libnuksm's Id. */
QEMU_BUILD_BUG_ON((int)NUKSM_SHARE_REASON_OFF != NUKSM_SHARE_OFF ||
                  (int)NUKSM_SHARE_REASON_NEW != NUKSM_SHARE_NEW ||
                  (int)NUKSM_SHARE_REASON_YIELDING != NUKSM_SHARE_YIELDING ||
                  (int)NUKSM_SHARE_REASON_SIGNALLED !=
                  NUKSM_SHARE_SIGNALLED ||
                  (int)NUKSM_SHARE_REASON_RESTING != NUKSM_SHARE_RESTING ||
                  (int)NUKSM_SHARE_REASON_IDLE != NUKSM_SHARE_IDLE ||
                  (int)NUKSM_SHARE_REASON_HELD != NUKSM_SHARE_HELD ||
                  (int)NUKSM_SHARE_REASON__MAX != NUKSM_SHARE__MAX);

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

/* The agent's share, while it has told one. */
static const NuksmMsgShare *nuksm_governor_share(Nuksm *s)
{
    const NuksmMsgShare *share = &s->conn.share;

    return s->conn.ready && share->reason != NUKSM_SHARE_OFF ? share : NULL;
}

double nuksm_governor_scan_max_cpu(Nuksm *s, const NuksmBudget *budget)
{
    const NuksmMsgShare *share = nuksm_governor_share(s);

    return share ? MIN(budget->max_cpu, share->max_cpu_ppm / 1e4)
                 : budget->max_cpu;
}

uint32_t nuksm_governor_pace(Nuksm *s)
{
    const NuksmMsgShare *share = nuksm_governor_share(s);

    return share ? share->pace : 1;
}

NuksmHostShare *nuksm_governor_host_share(Nuksm *s)
{
    const NuksmMsgShare *share = nuksm_governor_share(s);
    NuksmHostShare *info;

    if (!share) {
        return NULL;
    }
    info = g_new0(NuksmHostShare, 1);
    *info = (NuksmHostShare) {
        .max_cpu = share->max_cpu_ppm / 1e4,
        .reason = share->reason,
        .pace = share->pace,
        .vms = share->vms,
        .budget = share->budget_ppm / 1e4,
        .yield = share->yield,
    };
    return info;
}

void nuksm_governor_apply(Nuksm *s)
{
    const NuksmMsgShare *share = nuksm_governor_share(s);
    NuksmBudget budget;
    uint32_t pace = nuksm_governor_pace(s);

    if (s->control) {
        nuksm_governor_budget(s, &budget);
        budget.max_cpu = nuksm_governor_scan_max_cpu(s, &budget);
        nuksm_control_set_budget(s->control, &budget, pace,
                                 share && share->reason == NUKSM_SHARE_HELD,
                                 s->zero_pages);
    }
    /* A resting VM's read windows are its pace times longer. */
    if (s->reads) {
        nuksm_reads_configure(s->reads, s->hot_window_ms * pace,
                              s->read_samples);
    }
}
