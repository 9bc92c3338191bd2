/*
 * nuksm: QMP commands and HMP "info nuksm".
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
#include "nuksm-scan.h"

/* What INFO's counters cover: QAPI's NuksmInfoScope, libnuksm's Id. */
QEMU_BUILD_BUG_ON((int)NUKSM_INFO_SCOPE_HOST != NUKSM_INFO_HOST ||
                  (int)NUKSM_INFO_SCOPE_DOMAIN != NUKSM_INFO_DOMAIN ||
                  (int)NUKSM_INFO_SCOPE_NONE != NUKSM_INFO_NONE ||
                  (int)NUKSM_INFO_SCOPE__MAX != NUKSM_INFO__MAX);

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
        nuksm_scanner_kick(s->scanner);
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

        monitor_printf(mon, "  governor %s: max-cpu %g%% (%s), scan-rate %"
                       PRIu64 " (%s), rests from %u ms\n",
                       NuksmGovernor_str(i->budget->governor),
                       i->budget->max_cpu,
                       NuksmSettingSource_str(i->budget->max_cpu_source),
                       i->budget->scan_rate,
                       NuksmSettingSource_str(i->budget->scan_rate_source),
                       i->budget->rest_ms);
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
        monitor_printf(mon, "  io-hints %s: %" PRIu64 " pages hinted, %"
                       PRIu64 " dropped, %" PRIu64 " served, %" PRIu64
                       " merged\n", i->io_hints->enabled ? "on" : "off",
                       i->io_hints->pages_hinted, i->io_hints->pages_dropped,
                       i->io_hints->pages_served, i->io_hints->pages_merged);
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
