/*
 * nuksmd start and stop.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "effects.h"
#include "home.h"
#include "lifecycle.h"
#include "log.h"
#include "merge.h"
#include "nuksm-config.h"
#include "server.h"
#include "topology.h"

bool agent_start(NuksmAgent *agent, const NuksmdConfig *cfg)
{
    *agent = (NuksmAgent) {
        .listen_fd = -1,
        .next_client_id = 1,
        .policy = cfg->policy,
        .cold_windows = cfg->cold_windows,
        .memory_max = (uint64_t)cfg->memory_max_mib << 20,
        .libvirt_dir = cfg->libvirt_dir,  /* cfg outlives the agent */
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
    if (!merge_init(agent, cfg->state_dir, cfg->restore_grace,
                    !cfg->fake_numa)) {
        server_stop(agent);
        return false;
    }
    log_info("nuksmd %s listening on %s, policy %s, %u NUMA node%s%s",
             NUKSM_VERSION, agent->socket_path,
             nuksm_policy_name(agent->policy),
             agent->nr_nodes, agent->nr_nodes == 1 ? "" : "s",
             cfg->fake_numa ? " (fake)" : "");

    agent->loop = g_main_loop_new(NULL, FALSE);
    replace_init(agent, cfg->replace_rate);
    home_start(agent);
    effects_start(agent);
    return true;
}

void agent_stop(NuksmAgent *agent)
{
    /* What the last event left: the store must not keep freed pages. */
    effects_settle(agent);
    effects_stop(agent);
    home_stop(agent);
    replace_destroy(agent);
    server_stop(agent);
    merge_destroy(agent);
    g_clear_pointer(&agent->loop, g_main_loop_unref);
}
