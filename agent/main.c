/*
 * nuksmd: the nuksm host agent.  One per host; every QEMU with
 * -object nuksm and every nuksmctl connects to its socket.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <errno.h>
#include <malloc.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>

#include <glib-unix.h>

#include "agent.h"
#include "config.h"
#include "detached.h"
#include "lifecycle.h"
#include "log.h"

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

/*
 * The tables (hash tables, slot arrays) grow by reallocation.  glibc
 * raises its mmap() threshold to every large block freed, so grown tables
 * land in the heap, where the smaller ones they replaced stay resident as
 * holes.  A fixed threshold keeps each large table in a mapping of its
 * own, returned whole when freed.
 */
#define MMAP_THRESHOLD (32 * 1024)

int main(int argc, char **argv)
{
    NuksmAgent agent;
    NuksmdConfig cfg;
    guint sigterm, sigint;

    mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD);
    if (!config_load(&cfg, argc, argv)) {
        config_clear(&cfg);
        return 2;
    }
    log_set_level(cfg.log_level);
    raise_fd_limit();
    /*
     * Before the socket exists: a SIGTERM as soon as clients can connect
     * (systemd stopping a unit just started, a test) must stop the agent
     * cleanly once its loop runs, not kill it with the socket left behind.
     */
    sigterm = g_unix_signal_add(SIGTERM, on_quit_signal, &agent);
    sigint = g_unix_signal_add(SIGINT, on_quit_signal, &agent);
    if (!agent_start(&agent, &cfg)) {
        g_source_remove(sigterm);
        g_source_remove(sigint);
        config_clear(&cfg);
        return 1;
    }

    g_main_loop_run(agent.loop);

    g_source_remove(sigterm);
    g_source_remove(sigint);
    agent_stop(&agent);
    config_clear(&cfg);
    return 0;
}
