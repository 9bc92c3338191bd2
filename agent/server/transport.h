/*
 * nuksmd transport: messages to one client, over its socket.
 *
 * A message goes out at once or, while the socket is full, waits in the
 * client's queue, up to a bound; a client that cannot take a message is
 * marked dead, and the server frees it once the current event is done.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_TRANSPORT_H
#define NUKSMD_TRANSPORT_H

#include "clients.h"
#include "nuksm-proto.h"

/*
 * What to run after a queued message could not be sent and marked its
 * client dead, outside any event the server handles: the server's own
 * end of event, which frees the client.
 */
typedef void TransportDeadFn(struct NuksmAgent *agent);

/* Allocate the send buffer; @on_dead as above. */
void transport_init(TransportDeadFn *on_dead);
void transport_destroy(void);

/*
 * Send one message without blocking; what the socket cannot take yet is
 * queued, up to a bound.  A client that cannot take it is marked dead
 * (disconnected after the current event); returns false then.
 */
bool transport_send(NuksmClient *client, NuksmMsgType type, uint32_t seq,
                    const void *payload, uint32_t len);

/*
 * transport_send() with @pass_fd attached (SCM_RIGHTS).  Such a message
 * is never queued: it must go out at once.
 */
bool transport_send_fd(NuksmClient *client, NuksmMsgType type, uint32_t seq,
                       const void *payload, uint32_t len, int pass_fd);

/*
 * Free what @client's queue holds and stop waiting for room in its
 * socket (its connection is closing).
 */
void transport_clear_queue(NuksmClient *client);

/* Send @client ERROR(@code, @text), logging nothing. */
void transport_send_error(NuksmClient *client, uint32_t seq,
                          NuksmErrorCode code, const char *text);

/*
 * Protocol violation: log a warning naming @client, send it ERROR(@code)
 * with the formatted text and mark it dead.
 */
void transport_reject(NuksmClient *client, uint32_t seq, NuksmErrorCode code,
                      const char *fmt, ...) G_GNUC_PRINTF(4, 5);

/*
 * A request @client may not make: answer ERROR(DENIED, @text), and go
 * on serving it.
 */
void transport_deny(NuksmClient *client, uint32_t seq, const char *text);

/* transport_deny() of a formatted text, logged at info level. */
void transport_denyf(NuksmClient *client, uint32_t seq, const char *fmt, ...)
    G_GNUC_PRINTF(3, 4);

/*
 * Send ERROR(HANDSHAKE, @text) to @fd, a connection not served: best
 * effort.
 */
void transport_refuse(int fd, const char *text);

/*
 * Close the connection @fd, first dropping what it sent that was not
 * read: the kernel gives a peer whose datagrams are left unread
 * ECONNRESET before anything queued for it, so that it would never read
 * the ERROR that says why it was closed.
 */
void transport_close(int fd);

/*
 * Close @fd, a connection refused as it came (transport_refuse()), once
 * its peer had a moment to send what it sends as it connects.
 */
void transport_close_refused(int fd);

#endif /* NUKSMD_TRANSPORT_H */
