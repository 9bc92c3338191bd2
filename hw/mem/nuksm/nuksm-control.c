/*
 * nuksm: the scanner thread's control (see nuksm-control.h).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/main-loop.h"
#include "nuksm-control.h"
#include "trace.h"

NuksmControl *nuksm_control_new(void)
{
    NuksmControl *ctl = g_new0(NuksmControl, 1);

    ctl->zero_pages = true;
    ctl->pace = 1;
    qemu_mutex_init(&ctl->lock);
    qemu_cond_init(&ctl->cond);
    return ctl;
}

void nuksm_control_free(NuksmControl *ctl)
{
    qemu_cond_destroy(&ctl->cond);
    qemu_mutex_destroy(&ctl->lock);
    g_free(ctl);
}

void nuksm_control_set_active(NuksmControl *ctl, bool active, uint32_t epoch)
{
    qemu_mutex_lock(&ctl->lock);
    if (ctl->active != active || ctl->epoch != epoch) {
        trace_nuksm_scan_active(active);
        /* A PRUNE was the old connection's: a new one asks again. */
        if (ctl->epoch != epoch) {
            qatomic_set(&ctl->prune_rate, 0);
        }
        ctl->active = active;
        qatomic_set(&ctl->epoch, epoch);
        qemu_cond_broadcast(&ctl->cond);
    }
    qemu_mutex_unlock(&ctl->lock);
}

void nuksm_control_set_budget(NuksmControl *ctl, const NuksmBudget *budget,
                              uint32_t pace, bool held, bool zero_pages)
{
    qemu_mutex_lock(&ctl->lock);
    ctl->max_cpu = budget->max_cpu;
    ctl->pace = pace;
    /* Held now: a pass under way stops, and none starts till let go. */
    ctl->restart |= held && !ctl->held;
    ctl->held = held;
    ctl->scan_rate = budget->scan_rate;
    /* A new rest applies at once: the pause starts over from it. */
    if (ctl->rest_ms != budget->rest_ms) {
        ctl->rest_ms = budget->rest_ms;
        ctl->pause_ms = ctl->rest_ms;
    }
    ctl->zero_pages = zero_pages;
    qemu_cond_broadcast(&ctl->cond);
    qemu_mutex_unlock(&ctl->lock);
}

void nuksm_control_set_hash_strength(NuksmControl *ctl, uint32_t bytes)
{
    qemu_mutex_lock(&ctl->lock);
    ctl->hash_strength = bytes;
    qemu_cond_broadcast(&ctl->cond);
    qemu_mutex_unlock(&ctl->lock);
}

void nuksm_control_quit(NuksmControl *ctl)
{
    qemu_mutex_lock(&ctl->lock);
    qatomic_set(&ctl->quit, true);
    qemu_cond_broadcast(&ctl->cond);
    qemu_mutex_unlock(&ctl->lock);
}

void nuksm_control_get_stats(NuksmControl *ctl, NuksmStats *stats)
{
    qemu_mutex_lock(&ctl->lock);
    stats->pages_scanned = ctl->stats.pages_scanned;
    stats->full_scans = ctl->stats.full_scans;
    stats->pages_volatile = ctl->stats.pages_volatile;
    stats->cow_breaks = ctl->stats.cow_breaks;
    stats->hints_served = ctl->stats.hints_served;
    stats->tracked_writes = qatomic_read(&ctl->tracked_writes);
    stats->promotions = ctl->stats.promotions;
    stats->demotions = ctl->stats.demotions;
    stats->hashing = ctl->hashing;
    qemu_mutex_unlock(&ctl->lock);
}

void nuksm_control_prune(NuksmControl *ctl, uint32_t rate)
{
    qemu_mutex_lock(&ctl->lock);
    qatomic_set(&ctl->prune_rate, rate);
    ctl->restart = true;
    qemu_cond_broadcast(&ctl->cond);
    qemu_mutex_unlock(&ctl->lock);
}

void nuksm_control_kick(NuksmControl *ctl)
{
    qemu_mutex_lock(&ctl->lock);
    ctl->restart = true;
    qemu_cond_broadcast(&ctl->cond);
    qemu_mutex_unlock(&ctl->lock);
}

void nuksm_control_wake(NuksmControl *ctl)
{
    qemu_mutex_lock(&ctl->lock);
    qemu_cond_broadcast(&ctl->cond);
    qemu_mutex_unlock(&ctl->lock);
}

bool nuksm_control_is_active(NuksmControl *ctl)
{
    bool active;

    qemu_mutex_lock(&ctl->lock);
    active = ctl->active;
    qemu_mutex_unlock(&ctl->lock);
    return active;
}

void nuksm_control_nudge(NuksmControl *ctl)
{
    qatomic_set(&ctl->nudged, true);
    qatomic_set(&ctl->settled, false);
    /*
     * Without the lock, which the caller may not take: a wake-up lost to
     * a thread about to wait costs it one look of its rest (a second,
     * times its pace).
     */
    qemu_cond_broadcast(&ctl->cond);
}

void nuksm_control_written(NuksmControl *ctl)
{
    bool first = !qatomic_read(&ctl->nudged);

    qatomic_inc(&ctl->tracked_writes);
    nuksm_control_nudge(ctl);
    if (first && ctl->written) {
        qemu_bh_schedule(ctl->written);
    }
}

bool nuksm_control_settled(NuksmControl *ctl)
{
    return qatomic_read(&ctl->settled);
}

void nuksm_control_charge(NuksmControl *ctl, uint64_t cpu_ns)
{
    qatomic_add(&ctl->charged_ns, cpu_ns);
}

bool nuksm_control_quitting(NuksmControl *ctl)
{
    return qatomic_read(&ctl->quit);
}

uint32_t nuksm_control_epoch(NuksmControl *ctl)
{
    return qatomic_read(&ctl->epoch);
}
