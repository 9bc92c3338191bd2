/*
 * nuksmd start and stop: everything main() does between parsing the
 * configuration and running the main loop, and after it.  Shared with
 * the fuzz harness (tests/fuzz/), which runs a real agent in-process.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_LIFECYCLE_H
#define NUKSMD_LIFECYCLE_H

#include "agent.h"
#include "config.h"

/*
 * Set @agent up as @cfg says: topology, listening socket, store and
 * merge engine, the main loop (not run yet) and the placement timers on
 * the default main context.  Logs and returns false on failure, with
 * nothing left to stop.
 */
bool agent_start(NuksmAgent *agent, const NuksmdConfig *cfg);

/*
 * Undo agent_start(): the socket is removed, clients are disconnected
 * and the store files keep their pages for the next agent.
 */
void agent_stop(NuksmAgent *agent);

#endif /* NUKSMD_LIFECYCLE_H */
