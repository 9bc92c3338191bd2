/*
 * Unit tests of nuksmd's domain assignment (agent/core/assign.h): which
 * merge domain a VM gets from what the agent verified of it, in which
 * order the sources count, what its own request does in each mode, and
 * its priority limit.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <glib.h>

#include "assign.h"

#define UID_ALICE 1001
#define UID_BOB   1002
#define GID_TEAM  2001

static const char *const service_cgroups[] = {
    "/system.slice/vm-cache.service", NULL,
};

/* A process of @uid that root's libvirt hook did not register. */
static PeerIdentity plain(uid_t uid)
{
    return (PeerIdentity) {
        .uid = uid, .gid = uid,
        .cgroups = service_cgroups,
        .private_name = "vm:4242.99",
        .libvirt_domain = "",
    };
}

static PeerIdentity registered(const char *domain, uint32_t priority)
{
    PeerIdentity id = plain(UID_ALICE);

    id.libvirt_name = "web1";
    id.libvirt_domain = domain;
    id.libvirt_priority = priority;
    return id;
}

/* @cfg with rules: tenant-a by user alice, tenant-b by group team, */
/* web by cgroup glob, db by libvirt name, capped (max-priority 50). */
static void config_with_rules(AssignConfig *cfg)
{
    DomainRule *rule;
    uid_t alice = UID_ALICE;
    gid_t team = GID_TEAM;

    assign_config_init(cfg);
    rule = assign_add_rule(cfg, "tenant-a");
    g_array_append_val(rule->uids, alice);
    rule = assign_add_rule(cfg, "tenant-b");
    g_array_append_val(rule->gids, team);
    rule = assign_add_rule(cfg, "web");
    rule->cgroups = g_strsplit("/machine/qemu-*-web*", ";", -1);
    rule = assign_add_rule(cfg, "db");
    rule->libvirt_names = g_strsplit("db-*;pg", ";", -1);
    rule->max_priority = 50;
}

static void check(const AssignConfig *cfg, const PeerIdentity *id,
                  const char *requested, const char *domain,
                  NuksmDomainSourceId source, uint32_t limit)
{
    Assignment a;

    assign_domain(cfg, id, requested, &a);
    g_assert_null(a.refusal);
    g_assert_cmpstr(a.domain, ==, domain);
    g_assert_cmpint(a.source, ==, source);
    g_assert_cmpuint(a.priority_limit, ==, limit);
}

/* Why a VM that asked @requested is refused; it must be. */
static char *refusal(const AssignConfig *cfg, const PeerIdentity *id,
                     const char *requested)
{
    Assignment a;

    assign_domain(cfg, id, requested, &a);
    g_assert_nonnull(a.refusal);
    return a.refusal;
}

static void test_defaults(void)
{
    AssignConfig cfg;
    PeerIdentity id = plain(UID_BOB);

    assign_config_init(&cfg);
    g_assert_cmpint(cfg.isolation, ==, ISOLATION_SHARED);
    g_assert_cmpint(cfg.vm_domains, ==, VM_DOMAINS_IGNORE);
    /* One tenant: every VM in "default", whatever it asks for. */
    check(&cfg, &id, "default", "default", NUKSM_DOMAIN_SHARED, 1000);
    check(&cfg, &id, "tenant-a", "default", NUKSM_DOMAIN_SHARED, 1000);

    cfg.isolation = ISOLATION_VM;
    check(&cfg, &id, "default", "vm:4242.99", NUKSM_DOMAIN_PRIVATE, 1000);
    check(&cfg, &id, "tenant-a", "vm:4242.99", NUKSM_DOMAIN_PRIVATE, 1000);
    assign_config_clear(&cfg);
}

static void test_requests(void)
{
    AssignConfig cfg;
    PeerIdentity bob = plain(UID_BOB), alice = plain(UID_ALICE);
    char *why;

    config_with_rules(&cfg);
    cfg.vm_domains = VM_DOMAINS_ALLOW;
    /* Honoured where nothing is assigned, never over an assignment. */
    check(&cfg, &bob, "blue", "blue", NUKSM_DOMAIN_REQUEST, 1000);
    check(&cfg, &bob, "default", "default", NUKSM_DOMAIN_SHARED, 1000);
    check(&cfg, &alice, "blue", "tenant-a", NUKSM_DOMAIN_RULE, 1000);

    cfg.vm_domains = VM_DOMAINS_REFUSE;
    why = refusal(&cfg, &bob, "blue");
    g_assert_true(strstr(why, "'blue' refused"));
    g_assert_true(strstr(why, "'default'"));
    g_assert_true(strstr(why, "vm-domains=refuse"));
    g_free(why);
    /* Asking for what it gets, or for nothing, is no reason to refuse. */
    check(&cfg, &alice, "tenant-a", "tenant-a", NUKSM_DOMAIN_RULE, 1000);
    check(&cfg, &bob, "default", "default", NUKSM_DOMAIN_SHARED, 1000);

    /* A private domain's name cannot be asked for, in any mode. */
    cfg.vm_domains = VM_DOMAINS_ALLOW;
    why = refusal(&cfg, &bob, "vm:4242.99");
    g_assert_true(strstr(why, "not a valid name"));
    g_free(why);
    assign_config_clear(&cfg);
}

static void test_rules(void)
{
    AssignConfig cfg;
    PeerIdentity id = plain(UID_BOB);
    gid_t team = GID_TEAM;

    config_with_rules(&cfg);
    /* By user; the first matching rule wins. */
    id.uid = UID_ALICE;
    check(&cfg, &id, "default", "tenant-a", NUKSM_DOMAIN_RULE, 1000);
    /* By supplementary group, then by primary group. */
    id = plain(UID_BOB);
    id.groups = &team;
    id.nr_groups = 1;
    check(&cfg, &id, "default", "tenant-b", NUKSM_DOMAIN_RULE, 1000);
    id = plain(UID_BOB);
    id.gid = GID_TEAM;
    check(&cfg, &id, "default", "tenant-b", NUKSM_DOMAIN_RULE, 1000);
    /* By cgroup: web3's libvirt cgroup matches the glob. */
    id = plain(UID_BOB);
    id.cgroups = (const char *const[]) {
        "/", "/machine/qemu-7-web3.libvirt-qemu", NULL };
    check(&cfg, &id, "default", "web", NUKSM_DOMAIN_RULE, 1000);
    /* By libvirt name, with the rule's cap. */
    id = plain(UID_BOB);
    id.cgroups = NULL;
    id.libvirt_name = "db-7";
    check(&cfg, &id, "default", "db", NUKSM_DOMAIN_RULE, 50);
    /* Nothing matches: the isolation default. */
    id.libvirt_name = "cache";
    check(&cfg, &id, "default", "default", NUKSM_DOMAIN_SHARED, 1000);
    assign_config_clear(&cfg);
}

static void test_libvirt_first(void)
{
    AssignConfig cfg;
    PeerIdentity id = registered("db", 0);

    config_with_rules(&cfg);
    cfg.vm_domains = VM_DOMAINS_ALLOW;
    /* The metadata beats alice's rule and the request; db's cap holds. */
    check(&cfg, &id, "blue", "db", NUKSM_DOMAIN_LIBVIRT, 50);
    /* The metadata's priority caps too, the lower of the two wins. */
    id = registered("tenant-c", 300);
    check(&cfg, &id, "default", "tenant-c", NUKSM_DOMAIN_LIBVIRT, 300);
    id = registered("db", 700);
    check(&cfg, &id, "default", "db", NUKSM_DOMAIN_LIBVIRT, 50);
    /* Registered without a domain: the rules, then the default. */
    id = registered("", 200);
    check(&cfg, &id, "default", "tenant-a", NUKSM_DOMAIN_RULE, 200);
    assign_config_clear(&cfg);
}

static void test_names(void)
{
    AssignIsolation isolation;
    AssignRequests requests;

    g_assert_true(assign_parse_isolation("vm", &isolation));
    g_assert_cmpint(isolation, ==, ISOLATION_VM);
    g_assert_false(assign_parse_isolation("tenant", &isolation));
    g_assert_true(assign_parse_requests("refuse", &requests));
    g_assert_cmpint(requests, ==, VM_DOMAINS_REFUSE);
    g_assert_false(assign_parse_requests("yes", &requests));
    g_assert_cmpstr(assign_isolation_name(ISOLATION_SHARED), ==, "shared");
    g_assert_cmpstr(assign_requests_name(VM_DOMAINS_ALLOW), ==, "allow");
    g_assert_true(nuksm_domain_name_valid("tenant-7.a_b"));
    g_assert_false(nuksm_domain_name_valid(""));
    g_assert_false(nuksm_domain_name_valid("a/b"));
    g_assert_false(nuksm_domain_name_valid("vm:1"));
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/assign/defaults", test_defaults);
    g_test_add_func("/assign/requests", test_requests);
    g_test_add_func("/assign/rules", test_rules);
    g_test_add_func("/assign/libvirt-first", test_libvirt_first);
    g_test_add_func("/assign/names", test_names);
    return g_test_run();
}
