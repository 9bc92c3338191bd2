/*
 * nuksmd start and stop.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <unistd.h>

#include "budget.h"
#include "colocation.h"
#include "conditions.h"
#include "detached.h"
#include "effects.h"
#include "home.h"
#include "ledger.h"
#include "lifecycle.h"
#include "log.h"
#include "merge.h"
#include "metrics.h"
#include "outbox.h"
#include "nuksm-config.h"
#include "quotas.h"
#include "reads.h"
#include "recovery.h"
#include "throttle.h"
#include "server.h"
#include "topology.h"
#include "wanted.h"

/*
 * Pages seen remembered per agent: at most 2^22 (64 MiB of entries), and
 * at most a quarter of the memory budget.
 */
#define PAGES_SEEN_MAX (1u << 22)

/* A page seen was evicted or turned away: its VM offers it again. */
static void candidate_evicted(uint32_t client, uint64_t page, void *opaque)
{
    NuksmAgent *agent = opaque;

    outbox_add_retry(agent, ledger_client(agent, client), page);
}

/*
 * Open the store in @state_dir, take over the pages a previous agent
 * left there (see recovery.h) and set up the merge engine's state.  With
 * @bind_nodes, store pages are bound to their host node.  Logs and
 * returns false on failure.
 */
static bool open_engine(NuksmAgent *agent, const char *state_dir,
                        uint32_t restore_grace, bool bind_nodes)
{
    /*
     * Random, so that a generation from before a restart is unlikely to
     * match a slot's current one; the hash seed keeps clients from
     * choosing digests that collide in the tables.
     */
    uint32_t gen = g_random_int();
    uint64_t seed = (uint64_t)g_random_int() << 32 | g_random_int();
    uint64_t max_seen;

    if (!store_open(&agent->store, state_dir, agent->nr_nodes, bind_nodes)) {
        return false;
    }
    /*
     * Handed to every VM, for a QEMU that may not create a userfaultfd
     * itself (vm.unprivileged_userfaultfd=0): docs/security.rst says why
     * that is safe.
     */
    agent->userfaultfd = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
    if (agent->userfaultfd < 0) {
        log_warning("cannot open /dev/userfaultfd (%s): a QEMU that may not "
                    "create a userfaultfd itself cannot merge",
                    g_strerror(errno));
    }
    mappers_open(&agent->mappers, state_dir);
    memcg_init(&agent->memcg);
    max_seen = agent->conditions.memory_max / 4 / sizeof(ContentEntry);
    contents_init(&agent->contents, MIN(PAGES_SEEN_MAX, max_seen),
                  seed, candidate_evicted, agent);
    domains_init(&agent->domains, &agent->store, agent->assign,
                 agent->store.secret, sizeof(agent->store.secret));
    ledger_init(agent, gen);
    agent->effects.outbox = g_ptr_array_new();
    agent->effects.freeing = g_array_new(FALSE, FALSE, sizeof(SlotId));
    log_info("store in %s: a file of %" PRIu64 " GiB (sparse) per merge "
             "domain and node", state_dir, STORE_SIZE >> 30);
    recovery_start(agent, restore_grace);
    return true;
}

/*
 * Tear the engine down; the store keeps its pages, parked ones too, for
 * the next agent.
 */
static void close_engine(NuksmAgent *agent)
{
    recovery_stop(agent);
    detached_destroy(agent);
    g_clear_pointer(&agent->effects.outbox, g_ptr_array_unref);
    g_clear_pointer(&agent->effects.freeing, g_array_unref);
    ledger_destroy(agent);
    conditions_destroy(agent);
    quotas_destroy(agent);
    throttle_destroy(agent);
    domains_destroy(&agent->domains);
    contents_destroy(&agent->contents);
    mappers_close(&agent->mappers);
    memcg_destroy(&agent->memcg);
    if (agent->userfaultfd >= 0) {
        close(agent->userfaultfd);
    }
    store_close(&agent->store);
}

bool agent_start(NuksmAgent *agent, const NuksmdConfig *cfg)
{
    *agent = (NuksmAgent) {
        .libvirt_dir = cfg->libvirt_dir,  /* cfg outlives the agent */
        .assign = &cfg->assign,
        .admin_gid = cfg->admin_gid,
        .vm_set_policy = cfg->vm_set_policy,
        .server.listen_fd = -1,
        .clients.next_id = 1,
        .placement.policy = cfg->policy,
        .placement.cold_windows = cfg->cold_windows,
        .placement.colocate = {
            .threshold_pm = cfg->colocate_threshold * 10,
            .min_gain_pages = ((uint64_t)cfg->colocate_min_gain_mib << 20) /
                              NUKSM_PAGE_SIZE,
            .vcpus_per_cpu = cfg->colocate_vcpus_per_cpu,
            .domain_room_pct = cfg->colocate_domain_room,
        },
        .placement.colocate_move_pinned = cfg->colocate_move_pinned,
        .placement.colocate_apply = cfg->colocate_apply,
        .conditions.memory_max = (uint64_t)cfg->memory_max_mib << 20,
        .counters.started_at = g_get_real_time(),
        .metrics = {
            .dir = cfg->metrics_dir,
            .interval_s = cfg->metrics_interval,
            .gid = cfg->metrics_gid,
        },
        .throttle.max_cpu = cfg->max_cpu,
    };
    topology_init(&agent->topology, cfg->fake_numa);
    agent->nr_nodes = agent->topology.nr_nodes;

    /*
     * The socket first: a second agent started by mistake must fail on
     * it with a clear message, before it touches the store.
     */
    if (!server_start(agent, cfg->socket_path, cfg->socket_gid)) {
        return false;
    }
    if (!open_engine(agent, cfg->state_dir, cfg->restore_grace,
                     !cfg->fake_numa)) {
        server_stop(agent);
        return false;
    }
    log_info("nuksmd %s listening on %s, policy %s, %u NUMA node%s%s",
             NUKSM_VERSION, agent->server.path,
             nuksm_policy_name(agent->placement.policy),
             agent->nr_nodes, agent->nr_nodes == 1 ? "" : "s",
             cfg->fake_numa ? " (fake)" : "");
    log_info("merge domains: isolation %s, VM requests %s, %u assigned "
             "domain%s; VMs %s set the policy",
             assign_isolation_name(cfg->assign.isolation),
             assign_requests_name(cfg->assign.vm_domains),
             cfg->assign.rules->len, cfg->assign.rules->len == 1 ? "" : "s",
             cfg->vm_set_policy ? "may" : "may not");

    agent->loop = g_main_loop_new(NULL, FALSE);
    relocate_init(agent, cfg->replace_rate);
    wanted_start(agent, cfg->forget_after);
    home_start(agent);
    colocation_start(agent);
    budget_start(agent, &(BudgetConfig) {
        .budget_ppm = cfg->scan_budget_ppm,
        .run = cfg->run,
        .short_below_pm = cfg->pressure_available_pm,
        .short_stall_pm = cfg->pressure_stall_pm,
        .cgroup = cfg->pressure_cgroup,
    });
    effects_start(agent);
    metrics_start(agent);
    return true;
}

void agent_stop(NuksmAgent *agent)
{
    /* What the last event left: the store must not keep freed pages. */
    effects_settle(agent);
    metrics_stop(agent);
    effects_stop(agent);
    uploads_stop(agent);
    wanted_stop(agent);
    home_stop(agent);
    colocation_stop(agent);
    budget_stop(agent);
    reads_stop(agent);
    relocate_destroy(agent);
    server_stop(agent);
    close_engine(agent);
    g_clear_pointer(&agent->loop, g_main_loop_unref);
}
