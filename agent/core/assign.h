/*
 * nuksmd domain assignment: which merge domain a VM goes into, and the
 * highest priority it may have, decided from what the agent verified of
 * its process, never from what the VM says about itself.
 *
 * Only VMs of one merge domain ever share pages, and a VM can read every
 * merged page of its own domain (docs/security.rst), so the domain is
 * the operator's to give.  In order, a VM's domain is:
 *
 * 1. its libvirt domain's <nuksm:domain> metadata, which root's hook
 *    registered for its process (server/libvirt.h);
 * 2. the first [domain NAME] group of nuksmd.conf whose users, groups,
 *    cgroups or libvirt-names match the process;
 * 3. its own request, only with vm-domains=allow;
 * 4. with isolation=shared (the default, for a host with one tenant),
 *    the domain "default"; with isolation=vm, a private domain of its
 *    own ("vm:" and what names its process), which nobody can ask for.
 *
 * A VM that asks for a domain other than the one it gets is refused
 * with vm-domains=refuse; with vm-domains=ignore (the default) it gets
 * the assigned one, and says which in query-nuksm.  A VM asking for
 * nothing sends NUKSM_DEFAULT_DOMAIN.
 *
 * Pure: tested by tests/unit/test-assign.c.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_ASSIGN_H
#define NUKSMD_ASSIGN_H

#include <stdbool.h>
#include <stdint.h>

#include <glib.h>

#include "nuksm-proto.h"

/* Where VMs the operator assigned nothing go. */
typedef enum AssignIsolation {
    ISOLATION_SHARED,        /* all into "default": one tenant */
    ISOLATION_VM,            /* each into a domain of its own */
} AssignIsolation;

/* What a VM's own domain request does. */
typedef enum AssignRequests {
    VM_DOMAINS_IGNORE,       /* the agent's choice wins */
    VM_DOMAINS_REFUSE,       /* a request the agent's choice differs */
                             /* from refuses the VM */
    VM_DOMAINS_ALLOW,        /* honoured where nothing is assigned */
} AssignRequests;

/*
 * A domain's share of a host resource: @value MiB or, if @percent,
 * @value percent of the whole (cpu-max: always a percentage of a core).
 */
typedef struct Quota {
    uint32_t value;
    bool percent;
} Quota;

/* What a domain's quotas bound (merge/quotas.h). */
typedef enum QuotaKind {
    QUOTA_STORE,             /* store-max: its copies in the store */
    QUOTA_UNSTABLE,          /* unstable-max: its unstable table entries */
    QUOTA_QUEUE,             /* queue-max: replies its VMs do not read */
    QUOTA_CPU,               /* cpu-max: nuksmd's CPU for its messages */
    QUOTA__COUNT,
} QuotaKind;

/* Every domain's, unless its [domain NAME] says otherwise: half. */
#define QUOTA_DEFAULT ((Quota) { .value = 50, .percent = true })

/* "store-max", ..., "cpu-max": keys of [domain NAME]. */
extern const char *const assign_quota_keys[QUOTA__COUNT];

/* One [domain NAME] group of nuksmd.conf. */
typedef struct DomainRule {
    char *domain;            /* NAME, nuksm_domain_name_valid() */
    GArray *uids;            /* uid_t: users= */
    GArray *gids;            /* gid_t: groups=, primary or supplementary */
    char **cgroups;          /* cgroups=: globs on cgroup paths, or NULL */
    char **libvirt_names;    /* libvirt-names=: globs, or NULL */
    uint32_t max_priority;   /* max-priority=, NUKSM_PRIORITY_MAX if unset */
    Quota quotas[QUOTA__COUNT];  /* store-max= ...; value 0: the default */
} DomainRule;

typedef struct AssignConfig {
    AssignIsolation isolation;
    AssignRequests vm_domains;
    GPtrArray *rules;        /* DomainRule *, in the file's order */
    Quota quotas[QUOTA__COUNT];  /* domain-store-max= ...: every domain's */
                                 /* that its rule sets none of */
} AssignConfig;

/* What the agent verified of a VM's process (server/identity.h). */
typedef struct PeerIdentity {
    uid_t uid;               /* SO_PEERCRED */
    gid_t gid;
    const gid_t *groups;     /* supplementary groups */
    size_t nr_groups;
    const char *const *cgroups;      /* its cgroup paths, NULL-terminated */
    const char *private_name;        /* its private domain's name */
    const char *libvirt_name;        /* registered libvirt domain, or NULL */
    const char *libvirt_domain;      /* its <nuksm:domain>, or "" */
    uint32_t libvirt_priority;       /* its <nuksm:priority>, or 0 */
} PeerIdentity;

typedef struct Assignment {
    char domain[NUKSM_NAME_LEN];
    NuksmDomainSourceId source;
    uint32_t priority_limit; /* PRIORITY_MIN..MAX */
    char *refusal;           /* why the VM is refused, or NULL: g_free() */
} Assignment;

void assign_config_init(AssignConfig *cfg);
void assign_config_clear(AssignConfig *cfg);

/* A new rule for domain @name, appended to @cfg's (which own it). */
DomainRule *assign_add_rule(AssignConfig *cfg, const char *name);

/*
 * Domain @name's quota of @kind: its [domain NAME]'s (store-max, ...),
 * else every domain's (domain-store-max, ...).
 */
Quota assign_quota(const AssignConfig *cfg, const char *name,
                   QuotaKind kind);

/* "shared, vm" and friends, and their parsers (false: unknown). */
bool assign_parse_isolation(const char *text, AssignIsolation *out);
bool assign_parse_requests(const char *text, AssignRequests *out);
const char *assign_isolation_name(AssignIsolation isolation);
const char *assign_requests_name(AssignRequests requests);

/* The domain, its source and priority limit of a VM that asked @requested. */
void assign_domain(const AssignConfig *cfg, const PeerIdentity *id,
                   const char *requested, Assignment *out);

#endif /* NUKSMD_ASSIGN_H */
