/*
 * nuksmd domain quotas.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <inttypes.h>
#include <sys/statvfs.h>

#include "conditions.h"
#include "log.h"
#include "quotas.h"

/* How long the store's size, from statvfs(), is taken as known. */
#define STORE_SIZE_REFRESH_US G_USEC_PER_SEC

/*
 * The pages the store may hold: its file system's size (a tmpfs can be
 * remounted bigger or smaller, so it is read again once a second), and
 * at most the slots of every node.
 */
static uint64_t store_capacity(NuksmAgent *agent)
{
    static uint64_t pages;
    static gint64 read_at;
    gint64 now = g_get_monotonic_time();
    uint64_t slots = (uint64_t)STORE_SLOTS * agent->nr_nodes;
    struct statvfs fs;

    if (!read_at || now - read_at >= STORE_SIZE_REFRESH_US) {
        read_at = now;
        pages = statvfs(agent->store.dir, &fs) == 0 ?
                (uint64_t)fs.f_blocks * fs.f_frsize / NUKSM_PAGE_SIZE :
                slots;
    }
    return MIN(pages, slots);
}

/*
 * Domain @domain's quota of @kind, in units of @unit bytes: its
 * percentage of @whole units, or its MiB; UINT64_MAX for 100%, which is
 * all there is and leaves only the resource's own bounds.
 */
static uint64_t quota_units(NuksmAgent *agent, uint16_t domain,
                            QuotaKind kind, uint64_t whole, size_t unit)
{
    Quota q = domains_quota(&agent->domains, domain, kind);

    if (q.percent && q.value == 100) {
        return UINT64_MAX;
    }
    return q.percent ? whole * q.value / 100
                     : ((uint64_t)q.value << 20) / unit;
}

/* Domain @domain's store quota, in pages. */
static uint64_t store_quota(NuksmAgent *agent, uint16_t domain)
{
    return quota_units(agent, domain, QUOTA_STORE, store_capacity(agent),
                       NUKSM_PAGE_SIZE);
}

static uint64_t store_pages(NuksmAgent *agent, uint16_t domain)
{
    const DomainStats *stats = domains_stats(&agent->domains, domain);
    uint64_t pages = 0;

    for (uint32_t n = 0; n < agent->nr_nodes; n++) {
        pages += stats->store_pages[n];
    }
    return pages;
}

size_t quotas_unstable_max(NuksmAgent *agent, uint16_t domain)
{
    return quota_units(agent, domain, QUOTA_UNSTABLE,
                       agent->contents.max_seen, sizeof(ContentEntry));
}

uint64_t quotas_queue_max(NuksmAgent *agent, uint16_t domain)
{
    return quota_units(agent, domain, QUOTA_QUEUE,
                       agent->conditions.memory_max, 1);
}

/* End @domain's limit if it holds less than QUOTA_RESUME_PERCENT. */
static bool end_if_below(NuksmAgent *agent, uint16_t domain)
{
    /* A limited domain's quota is bounded: no overflow. */
    if (store_pages(agent, domain) * 100 >=
        store_quota(agent, domain) * QUOTA_RESUME_PERCENT) {
        return false;
    }
    domains_set_limit(&agent->domains, domain, QUOTA_STORE, NULL);
    log_info("merge domain '%s' below its store quota: its merging resumes",
             domains_name(&agent->domains, domain));
    conditions_send_domain(agent, domain);
    return true;
}

/*
 * While a domain is limited, look every CONDITIONS_PROBE_SECONDS whether
 * it still is: its quota may have grown with the store's tmpfs, and
 * nothing else would look, since its VMs offer nothing new until told.
 */
static gboolean on_quota_probe(gpointer opaque)
{
    NuksmAgent *agent = opaque;
    bool limited = false;

    for (guint id = 0; id < agent->domains.by_id->len; id++) {
        if (g_ptr_array_index(agent->domains.by_id, id) &&
            domains_limit(&agent->domains, id, QUOTA_STORE)) {
            limited |= !end_if_below(agent, id);
        }
    }
    if (!limited) {
        agent->conditions.quota_timer = 0;
        return G_SOURCE_REMOVE;
    }
    return G_SOURCE_CONTINUE;
}

bool quotas_store_has_room(NuksmAgent *agent, uint16_t domain)
{
    const char *name = domains_name(&agent->domains, domain);
    uint64_t quota, pages;

    if (domains_limit(&agent->domains, domain, QUOTA_STORE)) {
        return false;
    }
    quota = store_quota(agent, domain);
    pages = store_pages(agent, domain);
    if (pages < quota) {
        return true;
    }
    domains_set_limit(&agent->domains, domain, QUOTA_STORE, g_strdup_printf(
        "merge domain '%s' holds its store quota: %" PRIu64 " MiB of "
        "copies (store-max)", name, quota * NUKSM_PAGE_SIZE >> 20));
    log_warning("%s; its VMs make no new copy until it holds less than "
                "%u%% of it",
                domains_limit(&agent->domains, domain, QUOTA_STORE),
                QUOTA_RESUME_PERCENT);
    conditions_send_domain(agent, domain);
    if (!agent->conditions.quota_timer) {
        agent->conditions.quota_timer =
            g_timeout_add_seconds(CONDITIONS_PROBE_SECONDS, on_quota_probe,
                                  agent);
    }
    return false;
}

void quotas_store_released(NuksmAgent *agent, uint16_t domain)
{
    if (domains_limit(&agent->domains, domain, QUOTA_STORE)) {
        end_if_below(agent, domain);
    }
}

void quotas_destroy(NuksmAgent *agent)
{
    if (agent->conditions.quota_timer) {
        g_source_remove(agent->conditions.quota_timer);
        agent->conditions.quota_timer = 0;
    }
}
