/*
 * nuksmd scan budget: one budget of CPU for every VM's scanner
 * (budget.h).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <string.h>

#include "budget.h"
#include "clients.h"
#include "domains.h"
#include "log.h"
#include "pressure.h"
#include "resident.h"
#include "shares.h"
#include "transport.h"

/* Signs of new duplicates in @vm since the last periodic look. */
static bool signs_of(const NuksmClient *vm)
{
    const ClientShare *sh = &vm->share;
    const NuksmMsgVmStats *st = &vm->scanner;

    return st->hints_received != sh->hints_seen ||
           st->cow_breaks != sh->breaks_seen ||
           st->tracked_writes != sh->writes_seen ||
           sh->offered != sh->offered_seen ||
           sh->resident >= sh->resident_seen + BUDGET_GROWTH_PAGES;
}

/*
 * How much of @vm's process is in RAM now: read while its pidfd says
 * the pid is still its (never, without one).
 */
static void read_resident(NuksmClient *vm)
{
    uint64_t pages;

    if (resident_pages(vm->pid, &pages) && pidfd_process_alive(vm->pidfd)) {
        vm->share.resident = pages;
    }
}

/*
 * A periodic look: what @vm merged and spent since the last one, and
 * whether the part signs gave it went without a merge (doubt, which
 * looks without signs wear off).
 */
static void tally(NuksmClient *vm, bool signs)
{
    ClientShare *sh = &vm->share;
    const NuksmMsgVmStats *st = &vm->scanner;
    uint64_t cpu = st->scan_cpu_ns + vm->cpu.used_ns;
    uint64_t merges = vm->merges - sh->merges_seen;

    /* Smoothed apart, so that figures told late still make a rate. */
    sh->merges_avg = (sh->merges_avg + merges) / 2;
    sh->cpu_avg_ns = (sh->cpu_avg_ns + (cpu - sh->cpu_seen)) / 2;
    if (merges) {
        sh->quiet_looks = 0;
        sh->doubt = 0;
    } else {
        sh->quiet_looks++;
        if (sh->told.reason == NUKSM_SHARE_SIGNALLED) {
            sh->doubt++;
        } else if (!signs && sh->doubt) {
            sh->doubt--;
        }
    }
    sh->merges_seen = vm->merges;
    sh->cpu_seen = cpu;
    sh->hints_seen = st->hints_received;
    sh->breaks_seen = st->cow_breaks;
    sh->writes_seen = st->tracked_writes;
    sh->offered_seen = sh->offered;
    sh->resident_seen = sh->resident;
}

/*
 * What @vm asks for now.  A @periodic look tallies what it did since
 * the last; one soon after a sign judges by what came since the last
 * periodic look, so that signs neither count twice nor wait.
 */
static NuksmShareReasonId look_at(NuksmClient *vm, bool periodic)
{
    ClientShare *sh = &vm->share;
    const NuksmMsgVmStats *st = &vm->scanner;
    bool signs = signs_of(vm);
    bool merged = vm->merges != sh->merges_seen;

    if (periodic) {
        tally(vm, signs);
    }
    if (st->state == NUKSM_VM_STATE_DISCONNECTED) {
        sh->quiet_looks = 0;        /* no VM_STATS yet */
        return NUKSM_SHARE_NEW;
    }
    if (st->state != NUKSM_VM_STATE_ACTIVE) {
        return NUKSM_SHARE_IDLE;
    }
    /* A page is offered in the pass after the one that first saw it. */
    if (st->full_scans < 2) {
        sh->quiet_looks = 0;
        return NUKSM_SHARE_NEW;
    }
    if (merged || sh->quiet_looks < BUDGET_QUIET_LOOKS) {
        return NUKSM_SHARE_YIELDING;
    }
    if (signs && sh->doubt <= BUDGET_DOUBT_LOOKS) {
        return NUKSM_SHARE_SIGNALLED;
    }
    return NUKSM_SHARE_RESTING;
}

/* Pages merged per CPU-second, lately. */
static double yield_of(const ClientShare *sh)
{
    return sh->cpu_avg_ns ? sh->merges_avg * 1e9 / sh->cpu_avg_ns : 0;
}

/* Is @now worth telling, after @told? */
static bool worth_telling(const NuksmMsgShare *told, const NuksmMsgShare *now)
{
    uint32_t delta = told->max_cpu_ppm > now->max_cpu_ppm ?
                     told->max_cpu_ppm - now->max_cpu_ppm :
                     now->max_cpu_ppm - told->max_cpu_ppm;

    return told->reason != now->reason || told->pace != now->pace ||
           delta > told->max_cpu_ppm / 8;
}

/* Available memory, per mille of the total. */
static uint32_t available_pm(const PressureSample *s)
{
    return s->total ? MIN(s->available * 1000 / s->total, 1000) : 0;
}

/*
 * run=pressure: is memory short now?  Once it is, until BUDGET_SPARE_PM
 * more is available and tasks stall less than half as much.  Memory that
 * cannot be read counts as short: merging goes on, as without the mode.
 */
static void look_at_memory(AgentBudget *b)
{
    const BudgetConfig *cfg = &b->cfg;
    g_autofree char *error = NULL;
    uint32_t avail, below = cfg->short_below_pm, stall = cfg->short_stall_pm;
    bool was = b->memory_short;

    if (!pressure_read(cfg->cgroup, &b->memory, &error)) {
        if (!b->memory_error) {
            log_warning("run=pressure: %s; merging goes on", error);
        }
        g_free(b->memory_error);
        b->memory_error = g_steal_pointer(&error);
        b->memory_short = true;
        return;
    }
    g_clear_pointer(&b->memory_error, g_free);
    avail = available_pm(&b->memory);
    b->memory_short = was ?
        avail < below + BUDGET_SPARE_PM ||
        (stall && b->memory.stall_pm > stall / 2) :
        avail < below || (stall && b->memory.stall_pm > stall);
    if (b->memory_short != was) {
        log_info("run=pressure: %.1f%% of memory available, tasks stalled "
                 "%.1f%% of the time: merging %s", avail / 10.0,
                 b->memory.stall_pm / 10.0,
                 b->memory_short ? "works" : "rests");
    }
}

bool budget_held(const NuksmAgent *agent)
{
    const AgentBudget *b = &agent->budget;

    return b->cfg.run == NUKSM_RUN_OFF ||
           (b->cfg.run == NUKSM_RUN_PRESSURE && !b->memory_short);
}

bool budget_vm_held(const NuksmAgent *agent, const NuksmClient *vm)
{
    return budget_held(agent) ||
           g_hash_table_contains(agent->budget.pruned,
                                 GUINT_TO_POINTER(vm->domain_id + 1u));
}

/* What a VM is told: its part, or that merging rests, or no budget. */
static NuksmMsgShare share_of(const AgentBudget *b, bool held,
                              NuksmShareReasonId reason,
                              const ShareGiven *given, double yield,
                              guint vms)
{
    NuksmMsgShare now = {
        .max_cpu_ppm = given->max_cpu_ppm,
        .reason = reason,
        .pace = given->pace,
        .vms = vms,
        .budget_ppm = b->cfg.budget_ppm,
        .yield = MIN(yield, UINT32_MAX),
    };

    if (held) {
        now.max_cpu_ppm = NUKSM_SHARE_MIN_PPM;
        now.reason = NUKSM_SHARE_HELD;
        now.pace = NUKSM_SHARE_PACE_MAX;
    } else if (!b->cfg.budget_ppm) {
        now.max_cpu_ppm = 0;
        now.reason = NUKSM_SHARE_OFF;
        now.pace = 1;
    }
    return now;
}

/* Divide the budget among the VMs, and tell those whose part changed. */
static void look(NuksmAgent *agent, bool periodic)
{
    AgentBudget *b = &agent->budget;
    g_autoptr(GPtrArray) all = clients_list_vms(&agent->clients);
    g_autofree ShareAsk *asks = NULL;
    g_autofree ShareGiven *given = NULL;
    uint32_t budget = MAX(b->cfg.budget_ppm, NUKSM_SHARE_MIN_PPM);
    guint n = 0, turns;

    if (b->soon) {
        g_clear_handle_id(&b->soon, g_source_remove);
    }
    for (guint i = 0; i < all->len; i++) {
        NuksmClient *vm = g_ptr_array_index(all, i);

        if (vm->joined && !vm->dead) {
            g_ptr_array_index(all, n++) = vm;
        }
    }
    if (periodic && b->cfg.run == NUKSM_RUN_PRESSURE) {
        look_at_memory(b);
    }
    asks = g_new(ShareAsk, n);
    given = g_new(ShareGiven, n);
    if (periodic) {
        b->looks++;
    }
    /* Each look reads the memory of one VM in @turns: 32 at most. */
    turns = (n + BUDGET_RESIDENT_PER_LOOK - 1) / BUDGET_RESIDENT_PER_LOOK;
    for (guint i = 0; i < n; i++) {
        NuksmClient *vm = g_ptr_array_index(all, i);
        uint32_t cap = vm->scanner.max_cpu_pm * 1000;
        NuksmShareReasonId reason;

        if (periodic && (b->looks + i) % turns == 0) {
            read_resident(vm);
        }
        reason = look_at(vm, periodic);

        asks[i] = (ShareAsk) {
            .reason = reason,
            .cap_ppm = cap ? MIN(cap, budget) : budget,
            .yield = yield_of(&vm->share),
            .reading = vm->reads.hot_regions > 0,
        };
    }
    shares_divide(budget, asks, n, given);
    for (guint i = 0; i < n; i++) {
        NuksmClient *vm = g_ptr_array_index(all, i);
        NuksmMsgShare now = share_of(b, budget_vm_held(agent, vm),
                                     asks[i].reason, &given[i],
                                     asks[i].yield, n);

        if (!vm->share.told.pace || worth_telling(&vm->share.told, &now)) {
            vm->share.told = now;
            transport_send(vm, NUKSM_MSG_SHARE, 0, &now, sizeof(now));
        }
    }
}

static gboolean on_look(gpointer opaque)
{
    look(opaque, true);
    return G_SOURCE_CONTINUE;
}

static gboolean on_soon(gpointer opaque)
{
    NuksmAgent *agent = opaque;

    agent->budget.soon = 0;
    look(agent, false);
    return G_SOURCE_REMOVE;
}

/* Whether anything is to be shared or held: else VMs are never told. */
static bool budget_active(const AgentBudget *b)
{
    return b->cfg.budget_ppm || b->cfg.run != NUKSM_RUN_ALWAYS ||
           g_hash_table_size(b->pruned);
}

/* Look periodically from now on if there is anything to share or hold. */
static void start_looking(NuksmAgent *agent)
{
    AgentBudget *b = &agent->budget;

    if (budget_active(b) && !b->timer) {
        b->timer = g_timeout_add_seconds(BUDGET_LOOK_S, on_look, agent);
    }
}

void budget_start(NuksmAgent *agent, const BudgetConfig *cfg)
{
    AgentBudget *b = &agent->budget;

    b->cfg = *cfg;
    b->pruned = g_hash_table_new(NULL, NULL);
    if (cfg->budget_ppm) {
        log_info("scan budget: %g%% of a core, shared by what each VM "
                 "merges", cfg->budget_ppm / 1e4);
    } else {
        log_info("no scan budget: each VM works within its own governor's");
    }
    if (cfg->run == NUKSM_RUN_PRESSURE) {
        log_info("run=pressure: merging while less than %.1f%% of the "
                 "memory of %s is available%s", cfg->short_below_pm / 10.0,
                 cfg->cgroup ? cfg->cgroup : "the host",
                 cfg->short_stall_pm ? " or tasks stall on it" : "");
        look_at_memory(b);
    } else if (cfg->run == NUKSM_RUN_OFF) {
        log_info("run=off: merging rests; merged pages stay merged");
    }
    start_looking(agent);
}

void budget_stop(NuksmAgent *agent)
{
    g_clear_handle_id(&agent->budget.timer, g_source_remove);
    g_clear_handle_id(&agent->budget.soon, g_source_remove);
    g_clear_pointer(&agent->budget.memory_error, g_free);
    g_clear_pointer(&agent->budget.pruned, g_hash_table_unref);
}

void budget_set_run(NuksmAgent *agent, NuksmRunId run, const char *by)
{
    AgentBudget *b = &agent->budget;

    log_info("run: %s -> %s (set by %s)%s", nuksm_run_name(b->cfg.run),
             nuksm_run_name(run), by,
             g_hash_table_size(b->pruned) ? "; pruned domains merge again"
                                          : "");
    b->cfg.run = run;
    g_hash_table_remove_all(b->pruned);
    if (run == NUKSM_RUN_PRESSURE) {
        look_at_memory(b);
    }
    start_looking(agent);
    /* At once, not at the next look: VMs held are let go or held now. */
    look(agent, false);
}

uint32_t budget_prune(NuksmAgent *agent, const char *domain, uint32_t rate,
                      const char *by)
{
    AgentBudget *b = &agent->budget;
    g_autoptr(GPtrArray) all = clients_list_vms(&agent->clients);
    NuksmMsgPrune msg = { .rate = rate };
    uint32_t told = 0;

    for (guint i = 0; i < all->len; i++) {
        NuksmClient *vm = g_ptr_array_index(all, i);

        if (!vm->joined || vm->dead || (*domain &&
            strcmp(domains_name(&agent->domains, vm->domain_id), domain))) {
            g_ptr_array_index(all, i) = NULL;
        } else if (*domain) {
            g_hash_table_add(b->pruned, GUINT_TO_POINTER(vm->domain_id + 1u));
        }
    }
    if (!*domain) {
        b->cfg.run = NUKSM_RUN_OFF;
    }
    /* Held first: their scanners stop, and no pass undoes the prune. */
    start_looking(agent);
    look(agent, false);
    for (guint i = 0; i < all->len; i++) {
        NuksmClient *vm = g_ptr_array_index(all, i);

        if (vm) {
            transport_send(vm, NUKSM_MSG_PRUNE, 0, &msg, sizeof(msg));
            told++;
        }
    }
    log_info("prune of %s%s (asked by %s): %u VM%s unmerge at most %u "
             "pages/s each; merging rests there until SET_RUN",
             *domain ? "merge domain " : "the host", domain, by, told,
             told == 1 ? "" : "s", rate);
    return told;
}

void budget_changed(NuksmAgent *agent)
{
    AgentBudget *b = &agent->budget;

    if (budget_active(b) && !b->soon) {
        b->soon = g_timeout_add(BUDGET_SOON_MS, on_soon, agent);
    }
}

void budget_signed(NuksmAgent *agent, const NuksmClient *vm)
{
    NuksmShareReasonId told = vm->share.told.reason;

    /* Unless signs without merges made it doubt them. */
    if (vm->share.told.pace && vm->share.doubt <= BUDGET_DOUBT_LOOKS &&
        (told == NUKSM_SHARE_RESTING || told == NUKSM_SHARE_IDLE)) {
        budget_changed(agent);
    }
}

static uint32_t count_resting(NuksmAgent *agent)
{
    g_autoptr(GPtrArray) all = clients_list_vms(&agent->clients);
    uint32_t resting = 0;

    for (guint i = 0; i < all->len; i++) {
        const NuksmClient *vm = g_ptr_array_index(all, i);

        resting += vm->share.told.reason == NUKSM_SHARE_RESTING ||
                   vm->share.told.reason == NUKSM_SHARE_IDLE ||
                   vm->share.told.reason == NUKSM_SHARE_HELD;
    }
    return resting;
}

void budget_info(NuksmAgent *agent, NuksmMsgInfo *info)
{
    const AgentBudget *b = &agent->budget;

    info->scan_budget_ppm = b->cfg.budget_ppm;
    info->run = b->cfg.run;
    info->held = budget_held(agent);
    if (b->cfg.run == NUKSM_RUN_PRESSURE && !b->memory_error) {
        info->available_pm = available_pm(&b->memory);
        info->stall_pm = b->memory.stall_pm;
    }
    if (info->scope == NUKSM_INFO_HOST) {
        info->vms_resting = count_resting(agent);
    }
}

void budget_told(const NuksmClient *vm, NuksmMsgShare *share)
{
    *share = vm->share.told.pace ? vm->share.told :
             (NuksmMsgShare) { .reason = NUKSM_SHARE_OFF, .pace = 1 };
}
