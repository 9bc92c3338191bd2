/*
 * nuksm: QMP commands and HMP "info nuksm": what each unit tells of the
 * nuksm objects, and requests to the agent.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qapi/error.h"
#include "qapi/qapi-commands-nuksm.h"
#include "qapi/qapi-visit-nuksm.h"
#include "monitor/hmp.h"
#include "monitor/monitor.h"
#include "qemu/cutils.h"
#include "nuksm.h"
#include "nuksm-agent.h"
#include "nuksm-control.h"
#include "nuksm-governor.h"
#include "nuksm-hints.h"
#include "nuksm-hot.h"
#include "nuksm-digests.h"
#include "nuksm-landing.h"
#include "nuksm-numa.h"
#include "nuksm-pages.h"
#include "nuksm-ram.h"
#include "nuksm-reads.h"
#include "nuksm-regions.h"
#include "nuksm-state.h"

/* What INFO's counters cover: QAPI's NuksmInfoScope, libnuksm's Id. */
QEMU_BUILD_BUG_ON((int)NUKSM_INFO_SCOPE_HOST != NUKSM_INFO_HOST ||
                  (int)NUKSM_INFO_SCOPE_DOMAIN != NUKSM_INFO_DOMAIN ||
                  (int)NUKSM_INFO_SCOPE_NONE != NUKSM_INFO_NONE ||
                  (int)NUKSM_INFO_SCOPE__MAX != NUKSM_INFO__MAX);

/* A planned move's verdict: QAPI's NuksmPlanVerdict, libnuksm's Id. */
QEMU_BUILD_BUG_ON((int)NUKSM_PLAN_VERDICT_PLANNED != NUKSM_PLAN_PLANNED ||
                  (int)NUKSM_PLAN_VERDICT_PINNED != NUKSM_PLAN_PINNED ||
                  (int)NUKSM_PLAN_VERDICT_NO_ROOM != NUKSM_PLAN_NO_ROOM ||
                  (int)NUKSM_PLAN_VERDICT_SMALL_GAIN !=
                  NUKSM_PLAN_SMALL_GAIN ||
                  (int)NUKSM_PLAN_VERDICT__MAX != NUKSM_PLAN__MAX);

/* The adaptive scheme's choice: QAPI's NuksmScheme, libnuksm's Id. */
QEMU_BUILD_BUG_ON((int)NUKSM_SCHEME_GLOBAL != NUKSM_SCHEME_ID_GLOBAL ||
                  (int)NUKSM_SCHEME_COLOCATE != NUKSM_SCHEME_ID_COLOCATE ||
                  (int)NUKSM_SCHEME_HOT_LOCAL != NUKSM_SCHEME_ID_HOT_LOCAL ||
                  (int)NUKSM_SCHEME__MAX != NUKSM_SCHEME_ID__MAX);

static Nuksm *nuksm_first_connected(Error **errp)
{
    g_autoptr(GPtrArray) all = nuksm_objects();

    for (guint i = 0; i < all->len; i++) {
        Nuksm *s = g_ptr_array_index(all, i);

        if (s->conn.ready) {
            return s;
        }
    }
    error_setg(errp, all->len ? "no nuksm object is connected to its agent" :
               "there is no nuksm object");
    return NULL;
}

static NuksmRegions *nuksm_regions_info(Nuksm *s, const NuksmStats *stats)
{
    NuksmRegions *info = g_new0(NuksmRegions, 1);
    uint64_t counts[NUKSM_REGION_LEVELS] = { 0 };
    uint64List **tail = &info->levels;

    info->enabled = s->distilling;
    info->region_size = NUKSM_REGION_PAGES * NUKSM_PAGE_SIZE;
    if (s->pages) {
        nuksm_pages_count_regions(s->pages, counts);
    }
    for (unsigned level = 0; level < NUKSM_REGION_LEVELS; level++) {
        QAPI_LIST_APPEND(tail, counts[level]);
    }
    info->promotions = stats->promotions;
    info->demotions = stats->demotions;
    return info;
}

/* What the agent's last COLOCATION said, or NULL if nothing yet. */
static NuksmColocation *nuksm_get_colocation(const NuksmMsgColocation *co)
{
    NuksmColocation *info;

    if (!co->twin_pm && co->plan_verdict >= NUKSM_PLAN__MAX &&
        co->scheme == NUKSM_SCHEME_ID_GLOBAL) {
        return NULL;
    }
    info = g_new0(NuksmColocation, 1);
    info->twin = g_strdup(co->twin);
    info->similarity = co->twin_pm / 1000.0;
    info->scheme = (NuksmScheme)co->scheme;
    if (co->plan_verdict < NUKSM_PLAN__MAX) {
        info->has_plan_node = true;
        info->plan_node = co->plan_to;
        info->has_plan = true;
        info->plan = (NuksmPlanVerdict)co->plan_verdict;
    }
    return info;
}

static NuksmDigestsInfo *nuksm_qmp_digests(Nuksm *s)
{
    NuksmDigestsInfo *info = g_new0(NuksmDigestsInfo, 1);
    NuksmDigestStats stats;

    nuksm_digests_get_stats(s, &stats);
    info->sent = stats.sent;
    info->held = stats.held;
    info->lacked = stats.lacked;
    info->unanswered = stats.unanswered;
    return info;
}

static NuksmInfo *nuksm_get_info(Nuksm *s)
{
    NuksmInfo *info = g_new0(NuksmInfo, 1);
    NuksmStats stats;
    NuksmNodePagesList **tail;

    nuksm_get_stats(s, &stats);
    info->id = g_strdup(s->id);
    info->state = nuksm_state(s);
    info->agent = g_strdup(s->agent_path);
    info->agent_error = g_strdup(s->conn.ready ? NULL : s->conn.last_error);
    info->domain = g_strdup(s->domain);
    info->priority = s->priority;
    if (s->conn.ready) {
        info->merge_domain = g_strdup(s->conn.merge_domain);
        info->has_domain_source = true;
        info->domain_source = s->conn.domain_source;
        info->has_priority_limit = true;
        info->priority_limit = s->conn.priority_limit;
    }
    if (s->conn.policy >= 0) {
        info->has_policy = true;
        info->policy = s->conn.policy;
    }
    info->colocation = nuksm_get_colocation(&s->conn.colocation);
    if (info->state == NUKSM_STATE_LIMITED) {
        info->has_limit = true;
        info->limit = nuksm_limit(s, &stats);
        info->limit_reason = nuksm_limit_reason(s, info->limit, &stats);
    }
    info->mappings = stats.maps_in_use;
    info->mappings_limit = stats.maps_limit;
    info->mappings_budget = stats.maps_budget;
    info->eligible_pages = nuksm_ram_eligible_pages(s);
    info->pages_scanned = stats.pages_scanned;
    info->full_scans = stats.full_scans;
    info->pages_volatile = stats.pages_volatile;
    info->merged_pages = stats.merged_pages + stats.zero_pages;
    info->zero_pages = stats.zero_pages;
    info->cow_breaks = stats.cow_breaks;
    info->tracked_writes = stats.tracked_writes;
    info->huge_pages = g_new0(NuksmHugePages, 1);
    info->huge_pages->split = qatomic_read(&s->huge_split);
    info->huge_pages->kept = stats.huge_kept;
    info->huge_pages->held_pages = stats.huge_held_pages;
    info->huge_pages->splits = stats.huge_splits;
    info->huge_pages->rebuilt = stats.huge_rebuilt;
    info->landing = g_new0(NuksmLandingInfo, 1);
    if (s->landing) {
        NuksmLandingStats landing;

        nuksm_landing_get_stats(s->landing, &landing);
        info->landing->offered = landing.offered;
        info->landing->landed = landing.landed;
        info->landing->written = landing.written;
        info->landing->passed = landing.passed;
        info->landing->digests = landing.digests;
        info->landing->digests_landed = landing.digests_landed;
        info->landing->digests_lacking = landing.digests_lacking;
    }
    if (s->enabled && nuksm_incoming() && nuksm_landing_blocker(s)) {
        info->landing->blocked = g_strdup(nuksm_landing_blocker(s));
    }
    info->digests = nuksm_qmp_digests(s);
    tail = &info->merged_per_node;
    for (uint32_t node = 0; node < NUKSM_MAX_NODES; node++) {
        NuksmNodePages *np;

        if (!stats.merged_per_node[node]) {
            continue;
        }
        np = g_new0(NuksmNodePages, 1);
        np->node = node;
        np->pages = stats.merged_per_node[node];
        QAPI_LIST_APPEND(tail, np);
    }
    if (s->scanner) {
        NuksmReadStats reads;

        nuksm_numa_locality(s, &info->merged_local, &info->merged_remote);
        nuksm_reads_get_stats(s->reads, &reads);
        info->reads_local = reads.reads_local;
        info->reads_remote = reads.reads_remote;
    }
    info->home_nodes = nuksm_numa_home_list(s);
    info->hotness = nuksm_hot_info(s);
    info->excluded = nuksm_ram_exclusions(s);
    info->budget = g_new0(NuksmBudget, 1);
    nuksm_governor_budget(s, info->budget);
    info->budget->host_share = nuksm_governor_host_share(s);
    info->hashing = g_new0(NuksmHashing, 1);
    info->hashing->strength = stats.hashing.strength;
    info->hashing->adaptive = stats.hashing.adaptive;
    info->hashing->pages_sampled = stats.hashing.pages_sampled;
    info->hashing->pages_hashed = stats.hashing.pages_hashed;
    info->hashing->misses = stats.hashing.misses;
    info->hashing->profit_us = stats.hashing.profit_ns / 1000;
    info->hashing->penalty_us = stats.hashing.penalty_ns / 1000;
    info->regions = nuksm_regions_info(s, &stats);
    info->io_hints = g_new0(NuksmIoHints, 1);
    info->io_hints->enabled = s->io_hints;
    info->io_hints->pages_served = stats.hints_served;
    info->io_hints->pages_merged = stats.hints_merged;
    if (s->hints) {
        NuksmHintStats hs;

        nuksm_hints_get_stats(s->hints, &hs);
        info->io_hints->pages_hinted = hs.hinted;
        info->io_hints->pages_dropped = hs.dropped;
    }
    return info;
}

static NuksmInfoList *nuksm_list_info(void)
{
    g_autoptr(GPtrArray) all = nuksm_objects();
    NuksmInfoList *head = NULL, **tail = &head;

    for (guint i = 0; i < all->len; i++) {
        QAPI_LIST_APPEND(tail, nuksm_get_info(g_ptr_array_index(all, i)));
    }
    return head;
}

static void nuksm_add_block_regions(const char *block, uint64_t nr_pages,
                                    const char *levels, void *opaque)
{
    NuksmBlockRegions *br = g_new0(NuksmBlockRegions, 1);

    br->block = g_strdup(block);
    br->size = nr_pages * NUKSM_PAGE_SIZE;
    br->levels = g_strdup(levels);
    QAPI_LIST_PREPEND(*(NuksmBlockRegionsList **)opaque, br);
}

static NuksmRegionMapList *nuksm_list_regions(void)
{
    g_autoptr(GPtrArray) all = nuksm_objects();
    NuksmRegionMapList *head = NULL, **tail = &head;

    for (guint i = 0; i < all->len; i++) {
        Nuksm *s = g_ptr_array_index(all, i);
        NuksmRegionMap *map = g_new0(NuksmRegionMap, 1);

        map->id = g_strdup(s->id);
        if (s->pages) {
            nuksm_pages_map_regions(s->pages, nuksm_add_block_regions,
                                    &map->blocks);
        }
        QAPI_LIST_APPEND(tail, map);
    }
    return head;
}

static void nuksm_kick_all(void)
{
    g_autoptr(GPtrArray) all = nuksm_objects();

    for (guint i = 0; i < all->len; i++) {
        Nuksm *s = g_ptr_array_index(all, i);

        if (s->enabled) {
            nuksm_control_kick(s->control);
        }
    }
}

NuksmInfoList *qmp_query_nuksm(Error **errp)
{
    return nuksm_list_info();
}

NuksmRegionMapList *qmp_x_query_nuksm_regions(Error **errp)
{
    return nuksm_list_regions();
}

static Nuksm *nuksm_target(const char *id, Error **errp)
{
    return id ? nuksm_find(id, errp) : nuksm_first_connected(errp);
}

NuksmAgentInfo *coroutine_fn qmp_query_nuksm_agent(const char *id,
                                                   Error **errp)
{
    Nuksm *s = nuksm_target(id, errp);
    NuksmAgentInfo *info;
    NuksmNodePagesList **tail;
    NuksmMsgInfo reply;

    if (!s || nuksm_agent_request(s, NUKSM_MSG_GET_INFO, NULL, 0,
                                  NUKSM_MSG_INFO, &reply, sizeof(reply),
                                  errp) < 0) {
        return NULL;
    }
    info = g_new0(NuksmAgentInfo, 1);
    info->version = g_strdup(reply.agent_version);
    info->policy = reply.policy;
    info->scope = reply.scope;  /* nuksm_msg_check() checked it */
    info->vms = reply.vms;
    info->pages_shared = reply.pages_shared;
    info->pages_sharing = reply.pages_sharing;
    info->pages_moved = reply.pages_moved;
    info->moves_pending = reply.moves_pending;
    tail = &info->store_pages_per_node;
    for (uint32_t node = 0; node < reply.nr_nodes; node++) {
        NuksmNodePages *np = g_new0(NuksmNodePages, 1);
        np->node = node;
        np->pages = reply.store_pages[node];
        QAPI_LIST_APPEND(tail, np);
    }
    return info;
}

void qmp_nuksm_scan(const char *id, Error **errp)
{
    Nuksm *s;

    if (id) {
        s = nuksm_find(id, errp);
        if (!s) {
            return;
        }
        if (!s->enabled) {
            error_setg(errp, "nuksm '%s' is disabled (property 'enabled' "
                       "is off)", id);
            return;
        }
        nuksm_control_kick(s->control);
        return;
    }
    nuksm_kick_all();
}

void coroutine_fn qmp_nuksm_set_policy(NuksmPolicy policy, const char *id,
                                       Error **errp)
{
    NuksmMsgPolicy msg = { .policy = policy }, reply;
    Nuksm *s = nuksm_target(id, errp);

    if (!s) {
        return;
    }
    nuksm_agent_request(s, NUKSM_MSG_SET_POLICY, &msg, sizeof(msg),
                        NUKSM_MSG_POLICY, &reply, sizeof(reply), errp);
}

void hmp_info_nuksm(Monitor *mon, const QDict *qdict)
{
    g_autoptr(NuksmInfoList) list = nuksm_list_info();

    if (!list) {
        monitor_printf(mon, "No nuksm object\n");
        return;
    }
    for (NuksmInfoList *l = list; l; l = l->next) {
        NuksmInfo *i = l->value;

        monitor_printf(mon, "%s: %s, agent %s, domain %s, priority %u, "
                       "policy %s\n", i->id, NuksmState_str(i->state),
                       i->agent, i->domain, i->priority,
                       i->has_policy ? NuksmPolicy_str(i->policy) : "-");
        if (i->agent_error) {
            monitor_printf(mon, "  agent error: %s\n", i->agent_error);
        }
        if (i->merge_domain) {
            /* The agent holds the priority to its limit. */
            monitor_printf(mon, "  merge domain %s (%s), priority in force "
                           "%u (limit %u)\n", i->merge_domain,
                           NuksmDomainSource_str(i->domain_source),
                           MIN(i->priority, i->priority_limit),
                           i->priority_limit);
        }
        if (i->colocation) {
            monitor_printf(mon, "  co-location: twin %s (%.0f%% alike)",
                           i->colocation->twin[0] ? i->colocation->twin : "-",
                           i->colocation->similarity * 100);
            if (i->colocation->has_plan) {
                monitor_printf(mon, ", plan: to node %u (%s)",
                               i->colocation->plan_node,
                               NuksmPlanVerdict_str(i->colocation->plan));
            }
            monitor_printf(mon, ", scheme %s\n",
                           NuksmScheme_str(i->colocation->scheme));
        }

        monitor_printf(mon, "  governor %s: max-cpu %g%% (%s), scan-rate %"
                       PRIu64 " (%s), rests from %u ms\n",
                       NuksmGovernor_str(i->budget->governor),
                       i->budget->max_cpu,
                       NuksmSettingSource_str(i->budget->max_cpu_source),
                       i->budget->scan_rate,
                       NuksmSettingSource_str(i->budget->scan_rate_source),
                       i->budget->rest_ms);
        if (i->budget->host_share) {
            const NuksmHostShare *hs = i->budget->host_share;

            monitor_printf(mon, "  host scan budget %g%% among %u VMs: "
                           "its part %g%% (%s, %u pages per CPU-second), "
                           "pace %u\n", hs->budget, hs->vms, hs->max_cpu,
                           NuksmShareReason_str(hs->reason), hs->yield,
                           hs->pace);
        }
        monitor_printf(mon, "  eligible %" PRIu64 " pages, scanned %"
                       PRIu64 " in %" PRIu64 " full passes, volatile %"
                       PRIu64 "\n", i->eligible_pages, i->pages_scanned,
                       i->full_scans, i->pages_volatile);
        monitor_printf(mon, "  merged %" PRIu64 " (zero %" PRIu64 ", local %"
                       PRIu64 ", remote %" PRIu64 "), cow-breaks %" PRIu64
                       "\n", i->merged_pages, i->zero_pages,
                       i->merged_local, i->merged_remote, i->cow_breaks);
        for (NuksmNodePagesList *n = i->merged_per_node; n; n = n->next) {
            monitor_printf(mon, "  node %u: %" PRIu64 " merged pages\n",
                           n->value->node, n->value->pages);
        }
        for (NuksmHomeNodeList *h = i->home_nodes; h; h = h->next) {
            monitor_printf(mon, "  guest node %u: home node %u (%s)\n",
                           h->value->guest_node, h->value->host_node,
                           NuksmHomeSource_str(h->value->source));
        }
        monitor_printf(mon, "  hotness %s, window %u ms, %" PRIu64
                       " samples, %" PRIu64 " pages written in the last%s%s\n",
                       NuksmHotnessSource_str(i->hotness->source),
                       i->hotness->window_ms, i->hotness->samples,
                       i->hotness->hot_pages,
                       i->hotness->error ? "; error: " : "",
                       i->hotness->error ?: "");
        monitor_printf(mon, "  reads %s%s%s: %u samples a window, %" PRIu64
                       " windows, %" PRIu64 " reads caught (local %" PRIu64
                       ", remote %" PRIu64 "), %" PRIu64 " regions read\n",
                       NuksmReadSource_str(i->hotness->reads->source),
                       i->hotness->reads->note ? ": " : "",
                       i->hotness->reads->note ?: "",
                       i->hotness->reads->samples,
                       i->hotness->reads->windows, i->hotness->reads->reads,
                       i->reads_local, i->reads_remote,
                       i->hotness->reads->read_regions);
        monitor_printf(mon, "  io-hints %s: %" PRIu64 " pages hinted, %"
                       PRIu64 " dropped, %" PRIu64 " served, %" PRIu64
                       " merged\n", i->io_hints->enabled ? "on" : "off",
                       i->io_hints->pages_hinted, i->io_hints->pages_dropped,
                       i->io_hints->pages_served, i->io_hints->pages_merged);
        if (i->landing->offered || i->landing->passed) {
            monitor_printf(mon, "  landing: %" PRIu64 " pages offered, %"
                           PRIu64 " landed, %" PRIu64 " written, %" PRIu64
                           " passed\n", i->landing->offered,
                           i->landing->landed, i->landing->written,
                           i->landing->passed);
        }
        if (i->landing->blocked) {
            monitor_printf(mon, "  landing blocked: %s\n",
                           i->landing->blocked);
        }
        if (i->landing->digests) {
            monitor_printf(mon, "  landing digests: %" PRIu64 " received, %"
                           PRIu64 " landed, %" PRIu64 " lacking\n",
                           i->landing->digests, i->landing->digests_landed,
                           i->landing->digests_lacking);
        }
        if (i->digests->sent) {
            monitor_printf(mon, "  migration digests: %" PRIu64 " sent, %"
                           PRIu64 " held there, %" PRIu64 " lacked, %"
                           PRIu64 " unanswered\n", i->digests->sent,
                           i->digests->held, i->digests->lacked,
                           i->digests->unanswered);
        }
        monitor_printf(mon, "  hashing %s %" PRIu32 " bytes: %" PRIu64
                       " pages sampled, %" PRIu64 " hashed in full, %"
                       PRIu64 " misses\n",
                       i->hashing->adaptive ? "adaptive, now" : "fixed at",
                       i->hashing->strength, i->hashing->pages_sampled,
                       i->hashing->pages_hashed, i->hashing->misses);
        monitor_printf(mon, "  regions%s:", i->regions->enabled ?
                       "" : " (distilling off)");
        for (uint64List *lv = i->regions->levels; lv; lv = lv->next) {
            monitor_printf(mon, " %" PRIu64, lv->value);
        }
        monitor_printf(mon, " on levels bottom to top, %" PRIu64
                       " promotions, %" PRIu64 " demotions\n",
                       i->regions->promotions, i->regions->demotions);
        monitor_printf(mon, "  mappings %" PRIu64 ", budget %" PRIu64
                       " of vm.max_map_count %" PRIu64 "\n", i->mappings,
                       i->mappings_budget, i->mappings_limit);
        if (i->has_limit) {
            monitor_printf(mon, "  limited by %s: %s\n",
                           NuksmLimit_str(i->limit), i->limit_reason);
        }
        for (NuksmExclusionList *e = i->excluded; e; e = e->next) {
            g_autofree char *size = size_to_str(e->value->size);
            monitor_printf(mon, "  excluded %s (%s): %s\n",
                           e->value->memdev, size,
                           NuksmExclusionReason_str(e->value->reason));
        }
    }
}
