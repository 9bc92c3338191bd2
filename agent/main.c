/*
 * nuksmd: the nuksm host agent.  One per host; every QEMU with
 * -object nuksm and every nuksmctl connects to its socket.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>

#include <glib-unix.h>

#include "agent.h"
#include "config.h"
#include "detached.h"
#include "home.h"
#include "log.h"
#include "merge.h"
#include "nuksm-config.h"
#include "server.h"
#include "topology.h"

static gboolean on_quit_signal(gpointer opaque)
{
    NuksmAgent *agent = opaque;

    log_info("shutting down");
    g_main_loop_quit(agent->loop);
    return G_SOURCE_CONTINUE;
}

/*
 * The default soft limit of 1024 fds would run out before CLIENTS_MAX
 * clients, each with a socket and a pidfd, and DETACHED_MAX parked
 * pidfds; raise it as far as the hard limit allows.
 */
static void raise_fd_limit(void)
{
    rlim_t want = 2 * CLIENTS_MAX + DETACHED_MAX + 64;
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur >= want) {
        return;
    }
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY ? want : MIN(want, rl.rlim_max);
    if (setrlimit(RLIMIT_NOFILE, &rl) < 0) {
        log_warning("cannot raise the open file limit: %s",
                    g_strerror(errno));
    }
}

int main(int argc, char **argv)
{
    NuksmAgent agent = {
        .listen_fd = -1,
        .next_client_id = 1,
    };
    NuksmdConfig cfg;
    guint sigterm, sigint;

    if (!config_load(&cfg, argc, argv)) {
        config_clear(&cfg);
        return 2;
    }
    log_set_level(cfg.log_level);
    agent.policy = cfg.policy;
    topology_init(&agent.topology, cfg.fake_numa);
    agent.nr_nodes = agent.topology.nr_nodes;
    agent.cold_windows = cfg.cold_windows;
    agent.memory_max = (uint64_t)cfg.memory_max_mib << 20;
    raise_fd_limit();

    /*
     * The socket first: a second agent started by mistake must fail on
     * it with a clear message, before it touches the store.
     */
    if (!server_start(&agent, cfg.socket_path)) {
        config_clear(&cfg);
        return 1;
    }
    if (!merge_init(&agent, cfg.state_dir, cfg.restore_grace,
                    !cfg.fake_numa)) {
        server_stop(&agent);
        config_clear(&cfg);
        return 1;
    }
    log_info("nuksmd %s listening on %s, policy %s, %u NUMA node%s%s",
             NUKSM_VERSION, cfg.socket_path, nuksm_policy_name(agent.policy),
             agent.nr_nodes, agent.nr_nodes == 1 ? "" : "s",
             cfg.fake_numa ? " (fake)" : "");

    agent.loop = g_main_loop_new(NULL, FALSE);
    replace_init(&agent, cfg.replace_rate);
    home_start(&agent);
    sigterm = g_unix_signal_add(SIGTERM, on_quit_signal, &agent);
    sigint = g_unix_signal_add(SIGINT, on_quit_signal, &agent);
    g_main_loop_run(agent.loop);

    g_source_remove(sigterm);
    g_source_remove(sigint);
    home_stop(&agent);
    replace_destroy(&agent);
    server_stop(&agent);
    merge_destroy(&agent);
    g_main_loop_unref(agent.loop);
    config_clear(&cfg);
    return 0;
}
