/*
 * nuksmd domain assignment (assign.h).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <string.h>

#include "assign.h"

static void rule_free(gpointer p)
{
    DomainRule *rule = p;

    g_free(rule->domain);
    g_array_unref(rule->uids);
    g_array_unref(rule->gids);
    g_strfreev(rule->cgroups);
    g_strfreev(rule->libvirt_names);
    g_free(rule);
}

void assign_config_init(AssignConfig *cfg)
{
    *cfg = (AssignConfig) {
        .isolation = ISOLATION_SHARED,
        .vm_domains = VM_DOMAINS_IGNORE,
        .rules = g_ptr_array_new_with_free_func(rule_free),
    };
    for (unsigned k = 0; k < QUOTA__COUNT; k++) {
        cfg->quotas[k] = QUOTA_DEFAULT;
    }
}

void assign_config_clear(AssignConfig *cfg)
{
    g_clear_pointer(&cfg->rules, g_ptr_array_unref);
}

DomainRule *assign_add_rule(AssignConfig *cfg, const char *name)
{
    DomainRule *rule = g_new0(DomainRule, 1);

    rule->domain = g_strdup(name);
    rule->uids = g_array_new(FALSE, FALSE, sizeof(uid_t));
    rule->gids = g_array_new(FALSE, FALSE, sizeof(gid_t));
    rule->max_priority = NUKSM_PRIORITY_MAX;
    g_ptr_array_add(cfg->rules, rule);
    return rule;
}

static const char *const isolation_names[] = {
    [ISOLATION_SHARED] = "shared",
    [ISOLATION_VM] = "vm",
};

static const char *const requests_names[] = {
    [VM_DOMAINS_IGNORE] = "ignore",
    [VM_DOMAINS_REFUSE] = "refuse",
    [VM_DOMAINS_ALLOW] = "allow",
};

static int lookup(const char *const *names, size_t n, const char *text)
{
    for (size_t i = 0; i < n; i++) {
        if (g_str_equal(names[i], text)) {
            return i;
        }
    }
    return -1;
}

bool assign_parse_isolation(const char *text, AssignIsolation *out)
{
    int i = lookup(isolation_names, G_N_ELEMENTS(isolation_names), text);

    if (i >= 0) {
        *out = i;
    }
    return i >= 0;
}

bool assign_parse_requests(const char *text, AssignRequests *out)
{
    int i = lookup(requests_names, G_N_ELEMENTS(requests_names), text);

    if (i >= 0) {
        *out = i;
    }
    return i >= 0;
}

const char *assign_isolation_name(AssignIsolation isolation)
{
    return isolation_names[isolation];
}

const char *assign_requests_name(AssignRequests requests)
{
    return requests_names[requests];
}

static bool has_id(GArray *ids, uint32_t id)
{
    for (guint i = 0; i < ids->len; i++) {
        if (g_array_index(ids, uint32_t, i) == id) {
            return true;
        }
    }
    return false;
}

static bool any_glob(char **globs, const char *text)
{
    for (char **g = globs; text && g && *g; g++) {
        if (g_pattern_match_simple(*g, text)) {
            return true;
        }
    }
    return false;
}

/* A rule matches a process that any of its lists names. */
static bool rule_matches(const DomainRule *rule, const PeerIdentity *id)
{
    if (has_id(rule->uids, id->uid) || has_id(rule->gids, id->gid)) {
        return true;
    }
    for (size_t i = 0; i < id->nr_groups; i++) {
        if (has_id(rule->gids, id->groups[i])) {
            return true;
        }
    }
    for (const char *const *cg = id->cgroups; cg && *cg; cg++) {
        if (any_glob(rule->cgroups, *cg)) {
            return true;
        }
    }
    return any_glob(rule->libvirt_names, id->libvirt_name);
}

static const DomainRule *rule_of_domain(const AssignConfig *cfg,
                                        const char *domain)
{
    for (guint i = 0; i < cfg->rules->len; i++) {
        const DomainRule *rule = g_ptr_array_index(cfg->rules, i);

        if (g_str_equal(rule->domain, domain)) {
            return rule;
        }
    }
    return NULL;
}

static void choose(const AssignConfig *cfg, const PeerIdentity *id,
                   const char *requested, bool asked, Assignment *out)
{
    const char *name;

    if (id->libvirt_domain && id->libvirt_domain[0]) {
        name = id->libvirt_domain;
        out->source = NUKSM_DOMAIN_LIBVIRT;
        goto done;
    }
    for (guint i = 0; i < cfg->rules->len; i++) {
        const DomainRule *rule = g_ptr_array_index(cfg->rules, i);

        if (rule_matches(rule, id)) {
            name = rule->domain;
            out->source = NUKSM_DOMAIN_RULE;
            goto done;
        }
    }
    if (asked && cfg->vm_domains == VM_DOMAINS_ALLOW) {
        name = requested;
        out->source = NUKSM_DOMAIN_REQUEST;
    } else if (cfg->isolation == ISOLATION_VM) {
        name = id->private_name;
        out->source = NUKSM_DOMAIN_PRIVATE;
    } else {
        name = NUKSM_DEFAULT_DOMAIN;
        out->source = NUKSM_DOMAIN_SHARED;
    }
done:
    g_strlcpy(out->domain, name, sizeof(out->domain));
}

const char *const assign_quota_keys[QUOTA__COUNT] = {
    [QUOTA_STORE] = "store-max",
    [QUOTA_UNSTABLE] = "unstable-max",
    [QUOTA_QUEUE] = "queue-max",
    [QUOTA_CPU] = "cpu-max",
};

Quota assign_quota(const AssignConfig *cfg, const char *name,
                   QuotaKind kind)
{
    const DomainRule *rule = rule_of_domain(cfg, name);

    return rule && rule->quotas[kind].value ? rule->quotas[kind]
                                            : cfg->quotas[kind];
}

void assign_domain(const AssignConfig *cfg, const PeerIdentity *id,
                   const char *requested, Assignment *out)
{
    /* NUKSM_DEFAULT_DOMAIN is what a VM that asks for nothing sends. */
    bool asked = !g_str_equal(requested, NUKSM_DEFAULT_DOMAIN);
    const DomainRule *rule;

    memset(out, 0, sizeof(*out));
    if (asked && !nuksm_domain_name_valid(requested)) {
        out->refusal = g_strdup_printf("domain '%s' is not a valid name "
                                       "(1 to %u characters from "
                                       "[A-Za-z0-9._-])", requested,
                                       NUKSM_NAME_LEN - 1);
        return;
    }
    choose(cfg, id, requested, asked, out);

    out->priority_limit = NUKSM_PRIORITY_MAX;
    if (id->libvirt_priority) {
        out->priority_limit = id->libvirt_priority;
    }
    rule = rule_of_domain(cfg, out->domain);
    if (rule) {
        out->priority_limit = MIN(out->priority_limit, rule->max_priority);
    }

    if (asked && cfg->vm_domains == VM_DOMAINS_REFUSE &&
        !g_str_equal(requested, out->domain)) {
        out->refusal = g_strdup_printf(
            "domain '%s' refused: this VM's domain is '%s' (from %s), and "
            "nuksmd refuses VMs that ask for another (vm-domains=refuse)",
            requested, out->domain, nuksm_domain_source_name(out->source));
    }
}
