/*
 * nuksm: the object's state (disabled, disconnected, paused, limited,
 * active), which decides whether the scanner runs, and the limits that
 * hold back merging, with their events.
 *
 * The state follows from the object's enabled property, its connection
 * to the agent (nuksm-agent.c), migration and the run state (nuksm.c),
 * and the limits from the units' figures: userfaultfd and the mapping
 * budget (nuksm-commit.c) and the agent's conditions.  Whoever changes
 * one of them calls nuksm_update_activity() or nuksm_limit_changed().
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qapi/qapi-events-nuksm.h"
#include "qemu/error-report.h"
#include "system/runstate.h"
#include "migration/colo.h"
#include "migration/misc.h"
#include "migration/options.h"
#include "nuksm-commit.h"
#include "nuksm-control.h"
#include "nuksm-huge.h"
#include "nuksm-outbox.h"
#include "nuksm-pages.h"
#include "nuksm-scan.h"
#include "nuksm-state.h"
#include "trace.h"

NuksmLimit nuksm_limit(Nuksm *s, const NuksmStats *stats)
{
    if (stats->uffd_error[0]) {
        return NUKSM_LIMIT_USERFAULTFD;
    }
    if (stats->maps_limited) {
        return NUKSM_LIMIT_MAP_COUNT;
    }
    if (s->conn.conditions & NUKSM_COND_STORE_FULL) {
        return NUKSM_LIMIT_STORE_FULL;
    }
    if (s->conn.conditions & NUKSM_COND_AGENT_MEMORY) {
        return NUKSM_LIMIT_AGENT_MEMORY;
    }
    if (s->conn.conditions & NUKSM_COND_DOMAIN_QUOTA) {
        return NUKSM_LIMIT_DOMAIN_QUOTA;
    }
    return NUKSM_LIMIT__MAX;
}

void nuksm_get_stats(Nuksm *s, NuksmStats *stats)
{
    *stats = (NuksmStats) { 0 };
    if (s->scanner) {
        nuksm_control_get_stats(s->control, stats);
        nuksm_pages_get_stats(s->pages, stats);
        nuksm_commit_get_stats(s->commit, stats);
        nuksm_huge_get_stats(s->huge, s->pages, stats);
    }
}

bool nuksm_incoming(void)
{
    return runstate_check(RUN_STATE_INMIGRATE) ||
           migration_in_incoming_postcopy();
}

NuksmState nuksm_state(Nuksm *s)
{
    NuksmStats stats;

    if (!s->enabled) {
        return NUKSM_STATE_DISABLED;
    }
    if (!s->conn.ready) {
        return NUKSM_STATE_DISCONNECTED;
    }
    if (s->migrating || nuksm_incoming()) {
        return NUKSM_STATE_PAUSED;
    }
    nuksm_get_stats(s, &stats);
    if (nuksm_limit(s, &stats) != NUKSM_LIMIT__MAX) {
        return NUKSM_STATE_LIMITED;
    }
    return NUKSM_STATE_ACTIVE;
}

bool nuksm_is_running(Nuksm *s)
{
    NuksmState state = nuksm_state(s);

    return state == NUKSM_STATE_ACTIVE || state == NUKSM_STATE_LIMITED;
}

const char *nuksm_landing_blocker(Nuksm *s)
{
    if (!s->landing_on) {
        return "landing=off";
    }
    if (!s->conn.ready) {
        return "the agent is not connected";
    }
    /*
     * Pages that landed before the switch, and that the source discards
     * then (dirtied since sent), go through nuksm_commit_discard().
     */
    if (migration_in_incoming_postcopy()) {
        return "postcopy: its userfaultfd places the pages";
    }
    if (migrate_multifd()) {
        return "multifd: its threads load the pages";
    }
    if (migration_incoming_colo_enabled()) {
        return "x-colo: its cache takes the pages";
    }
    return NULL;
}

bool nuksm_may_land(Nuksm *s)
{
    return s->enabled && runstate_check(RUN_STATE_INMIGRATE) &&
           !nuksm_landing_blocker(s);
}

void nuksm_update_activity(Nuksm *s)
{
    if (s->scanner) {
        nuksm_scanner_set_active(s->scanner, nuksm_is_running(s),
                                 s->conn.epoch);
    }
}

char *nuksm_limit_reason(Nuksm *s, NuksmLimit limit, const NuksmStats *stats)
{
    if (limit == NUKSM_LIMIT_USERFAULTFD) {
        return g_strdup(stats->uffd_error);
    }
    if (limit == NUKSM_LIMIT_MAP_COUNT) {
        return g_strdup_printf("%" PRIu64 " of %" PRIu64 " mappings in use "
                               "(vm.max_map_count), %" PRIu64 " kept for "
                               "QEMU", stats->maps_in_use, stats->maps_limit,
                               stats->maps_limit - stats->maps_budget);
    }
    return g_strdup_printf("agent: %s", s->conn.condition_reason);
}

/*
 * Tell the agent what holds back our merging in QEMU itself, for
 * nuksmctl vms (the agent knows its own conditions).
 */
static void nuksm_send_vm_limit(Nuksm *s, NuksmLimit limit,
                                const NuksmStats *stats)
{
    NuksmMsgVmLimit msg = { .limit = NUKSM_VM_LIMIT_NONE };

    if (limit == NUKSM_LIMIT_USERFAULTFD) {
        msg.limit = NUKSM_VM_LIMIT_USERFAULTFD;
    } else if (limit == NUKSM_LIMIT_MAP_COUNT) {
        msg.limit = NUKSM_VM_LIMIT_MAP_COUNT;
    }
    if (!s->conn.ready || msg.limit == s->conn.vm_limit_sent) {
        return;
    }
    if (msg.limit != NUKSM_VM_LIMIT_NONE) {
        g_autofree char *reason = nuksm_limit_reason(s, limit, stats);

        nuksm_strfield_set(msg.reason, sizeof(msg.reason), reason);
    }
    s->conn.vm_limit_sent = msg.limit;
    nuksm_outbox_post(&s->outbox, s->conn.epoch, NUKSM_MSG_VM_LIMIT, &msg,
                      sizeof(msg));
}

void nuksm_limit_changed(Nuksm *s)
{
    NuksmStats stats;
    NuksmLimit limit;
    g_autofree char *reason = NULL;

    nuksm_get_stats(s, &stats);
    limit = nuksm_limit(s, &stats);
    nuksm_send_vm_limit(s, limit, &stats);
    if (limit == s->limit_reported) {
        return;
    }
    trace_nuksm_limit_event(s->id, limit);
    if (s->limit_reported != NUKSM_LIMIT__MAX) {
        info_report("nuksm '%s': merging no longer limited by %s",
                    s->id, NuksmLimit_str(s->limit_reported));
        qapi_event_send_nuksm_merging_resumed(s->id, s->limit_reported);
    }
    s->limit_reported = limit;
    if (limit != NUKSM_LIMIT__MAX) {
        reason = nuksm_limit_reason(s, limit, &stats);
        warn_report("nuksm '%s': merging limited by %s: %s", s->id,
                    NuksmLimit_str(limit), reason);
        qapi_event_send_nuksm_merging_limited(s->id, limit, reason);
    }
}
