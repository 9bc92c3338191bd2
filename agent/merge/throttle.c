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
    CpuBucket bucket;
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

/*
 * Fill @b at @percent of a core up to what THROTTLE_PERIOD_US gives,
 * since it was last filled, and drain @ns from it.
 */
static void drain(CpuBucket *b, uint32_t percent, uint64_t ns, gint64 now)
{
    int64_t full = (int64_t)THROTTLE_PERIOD_US * 1000 * percent / 100;

    b->balance_ns = MIN(b->balance_ns +
                        (now - b->filled_at) * 1000 * percent / 100, full);
    b->filled_at = now;
    b->balance_ns = MAX(b->balance_ns - (int64_t)ns, -full);
}

/* How long, in us, @b at @percent takes to pay its debt: 0 if none. */
static gint64 debt_us(const CpuBucket *b, uint32_t percent)
{
    return b->balance_ns < 0 ? -b->balance_ns * 100 / percent / 1000 : 0;
}

/*
 * Charge @ns more of @domain's CPU: how long, in us, its VMs are now to
 * be left unread (its share holds only while another domain is served).
 */
static gint64 charge_domain(NuksmAgent *agent, uint16_t domain, uint64_t ns,
                            gint64 now)
{
    AgentThrottle *t = &agent->throttle;
    DomainCpu *cpu = domain_cpu(t, domain);
    uint32_t percent = domains_quota(&agent->domains, domain, QUOTA_CPU).value;
    gint64 unread_us;

    cpu->served_at = now;
    if (percent == 100) {
        return 0;
    }
    drain(&cpu->bucket, percent, ns, now);
    unread_us = debt_us(&cpu->bucket, percent);
    if (!unread_us) {
        return 0;
    }
    /* Only in debt are the other domains looked at: a loop over them. */
    if (!others_served(t, domain, now - THROTTLE_PERIOD_US)) {
        cpu->bucket.balance_ns = 0;     /* alone: no debt */
        return 0;
    }
    cpu->unread_us += unread_us;
    if (!t->look_timer) {
        t->look_timer = g_timeout_add_seconds(LOOK_SECONDS, on_look, agent);
    }
    return unread_us;
}

ThrottleVerdict throttle_charge(NuksmAgent *agent, NuksmClient *client,
                                uint64_t ns)
{
    AgentThrottle *t = &agent->throttle;
    gint64 now = g_get_monotonic_time();
    gint64 domain_us = charge_domain(agent, client->domain_id, ns, now);
    gint64 host_us = 0;

    client->cpu.used_ns += ns;
    if (t->max_cpu < 100) {
        static LogLimit at_cap;

        drain(&t->host, t->max_cpu, ns, now);
        host_us = debt_us(&t->host, t->max_cpu);
        if (host_us) {
            log_limited(&at_cap, LOG_LIMIT_SECONDS, NUKSMD_LOG_INFO,
                        "nuksmd at its --max-cpu, %u%% of a core: the VMs' "
                        "messages are read more slowly", t->max_cpu);
        }
    }
    if (host_us && host_us >= domain_us) {
        return (ThrottleVerdict) { .until = now + host_us, .every_vm = true };
    }
    return (ThrottleVerdict) { .until = domain_us ? now + domain_us : 0 };
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
