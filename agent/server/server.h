/*
 * nuksmd server: the listening socket, admission and receiving; each
 * client event ends with effects_settle() (effects.h).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_SERVER_H
#define NUKSMD_SERVER_H

#include "agent.h"

/*
 * Create @path's directory if needed, replace a stale socket file, bind
 * (mode 0660, group @group unless it is -1), listen and start accepting
 * on the default main context.  A socket from systemd (LISTEN_FDS) is
 * taken as it is.  Logs and returns false on failure, including when
 * another nuksmd listens there.
 */
bool server_start(NuksmAgent *agent, const char *path, gid_t group);

/* Disconnect every client, stop listening and remove the socket file. */
void server_stop(NuksmAgent *agent);

#endif /* NUKSMD_SERVER_H */
