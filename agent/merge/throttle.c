/*
 * nuksmd CPU quotas.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "conditions.h"
#include "log.h"
#include "throttle.h"

/* How often the limited domains are looked at, in seconds. */
#define LOOK_SECONDS 1

/* One domain's share of nuksmd's CPU, by domain id. */
typedef struct DomainCpu {
    int64_t balance_ns;      /* CPU it may take yet; below 0: its debt */
    gint64 filled_at;        /* monotonic us the balance was last filled */
    gint64 served_at;        /* its VMs' last message handled */
    gint64 unread_us;        /* its sockets left unread since the last look */
} DomainCpu;

static DomainCpu *domain_cpu(AgentThrottle *t, uint16_t domain)
{
    if (!t->domains) {
        t->domains = g_array_new(FALSE, TRUE, sizeof(DomainCpu));
    }
    if (domain >= t->domains->len) {
        g_array_set_size(t->domains, domain + 1);
    }
    return &g_array_index(t->domains, DomainCpu, domain);
}

/* Was a VM of a domain other than @domain served since @since? */
static bool others_served(const AgentThrottle *t, uint16_t domain,
                          gint64 since)
{
    for (guint id = 0; id < t->domains->len; id++) {
        if (id != domain &&
            g_array_index(t->domains, DomainCpu, id).served_at > since) {
            return true;
        }
    }
    return false;
}

/*
 * Once a second, while a domain's sockets were left unread or it is
 * limited: limited if they were more than THROTTLE_LIMITED_PERCENT of
 * that second, no longer if they never were.
 */
static gboolean on_look(gpointer opaque)
{
    NuksmAgent *agent = opaque;
    AgentThrottle *t = &agent->throttle;
    const gint64 second = LOOK_SECONDS * G_USEC_PER_SEC;
    bool again = false;

    for (guint id = 0; id < t->domains->len; id++) {
        DomainCpu *cpu = &g_array_index(t->domains, DomainCpu, id);
        bool limited, over;

        if (!g_ptr_array_index(agent->domains.by_id, id)) {
            cpu->unread_us = 0;
            continue;
        }
        limited = domains_limit(&agent->domains, id, QUOTA_CPU);
        over = cpu->unread_us * 100 > second * THROTTLE_LIMITED_PERCENT;
        if (over && !limited) {
            Quota q = domains_quota(&agent->domains, id, QUOTA_CPU);

            domains_set_limit(&agent->domains, id, QUOTA_CPU,
                g_strdup_printf("merge domain '%s' takes its share of "
                                "nuksmd's CPU while other domains wait: "
                                "%u%% of a core (cpu-max)",
                                domains_name(&agent->domains, id), q.value));
            log_warning("%s; its VMs' messages are read more slowly",
                        domains_limit(&agent->domains, id, QUOTA_CPU));
            conditions_send_domain(agent, id);
        } else if (!cpu->unread_us && limited) {
            log_info("merge domain '%s' within its share of nuksmd's CPU",
                     domains_name(&agent->domains, id));
            domains_set_limit(&agent->domains, id, QUOTA_CPU, NULL);
            conditions_send_domain(agent, id);
        }
        again |= cpu->unread_us || domains_limit(&agent->domains, id,
                                                 QUOTA_CPU);
        cpu->unread_us = 0;
    }
    if (!again) {
        t->look_timer = 0;
        return G_SOURCE_REMOVE;
    }
    return G_SOURCE_CONTINUE;
}

gint64 throttle_charge(NuksmAgent *agent, NuksmClient *client, uint64_t ns)
{
    AgentThrottle *t = &agent->throttle;
    DomainCpu *cpu = domain_cpu(t, client->domain_id);
    Quota q = domains_quota(&agent->domains, client->domain_id, QUOTA_CPU);
    gint64 now = g_get_monotonic_time();
    int64_t full = (int64_t)THROTTLE_PERIOD_US * 1000 * q.value / 100;
    gint64 unread_us;

    client->cpu_ns += ns;
    cpu->balance_ns = MIN(cpu->balance_ns +
                          (now - cpu->filled_at) * 1000 * q.value / 100,
                          full);
    cpu->filled_at = now;
    cpu->balance_ns -= ns;
    cpu->served_at = now;
    if (q.value == 100 || cpu->balance_ns >= 0) {
        return 0;
    }
    if (!others_served(t, client->domain_id, now - THROTTLE_PERIOD_US)) {
        cpu->balance_ns = 0;     /* alone: no debt */
        return 0;
    }
    cpu->balance_ns = MAX(cpu->balance_ns, -full);
    unread_us = -cpu->balance_ns * 100 / q.value / 1000;
    cpu->unread_us += unread_us;
    if (!t->look_timer) {
        t->look_timer = g_timeout_add_seconds(LOOK_SECONDS, on_look, agent);
    }
    return now + unread_us;
}

void throttle_destroy(NuksmAgent *agent)
{
    AgentThrottle *t = &agent->throttle;

    if (t->look_timer) {
        g_source_remove(t->look_timer);
        t->look_timer = 0;
    }
    g_clear_pointer(&t->domains, g_array_unref);
}
