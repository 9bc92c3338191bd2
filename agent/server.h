/*
 * nuksmd listening socket and per-client socket I/O.
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

/*
 * Send one message without blocking; what the socket cannot take yet is
 * queued, up to a bound.  A client that cannot take it is marked dead
 * (disconnected after the current event); returns false then.
 */
bool server_send(NuksmAgent *agent, NuksmClient *client, NuksmMsgType type,
                 uint32_t seq, const void *payload, uint32_t len);

/*
 * server_send() with @pass_fd attached (SCM_RIGHTS).  Such a message is
 * never queued: it must go out at once.
 */
bool server_send_fd(NuksmAgent *agent, NuksmClient *client,
                    NuksmMsgType type, uint32_t seq, const void *payload,
                    uint32_t len, int pass_fd);

/*
 * Protocol violation: log a warning naming @client, send it ERROR(@code)
 * with the formatted text and disconnect it.
 */
void server_reject(NuksmAgent *agent, NuksmClient *client, uint32_t seq,
                   NuksmErrorCode code, const char *fmt, ...)
    G_GNUC_PRINTF(5, 6);

#endif /* NUKSMD_SERVER_H */
