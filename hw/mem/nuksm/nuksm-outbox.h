/*
 * nuksm: the queue of messages to the agent (nuksm-outbox.c).
 *
 * Every unit that tells the agent something posts it here, from any
 * thread: the scanner thread its candidates and the commit unit's
 * replies, RAM discard its UNMERGED, the main loop the rest.  Once the
 * connection is ready, a message goes straight to its socket from the
 * thread that posts it, unless others wait before it or the socket is
 * full: then it is queued, and the connection (nuksm-agent.c) sends the
 * queue in the main loop whenever the socket takes it.  So no thread
 * ever waits for the agent, and the main loop wakes for none of the
 * scanner's messages while the agent keeps up.  Each message belongs to
 * the connection it was posted for (its epoch, NuksmAgentConn.epoch):
 * after a reconnection it is dropped.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef HW_MEM_NUKSM_OUTBOX_H
#define HW_MEM_NUKSM_OUTBOX_H

#include "qemu/thread.h"
#include "block/aio.h"
#include "libnuksm/nuksm-proto.h"

typedef struct NuksmOutbox {
    QemuMutex lock;             /* "outbox lock" in the lock order: the */
                                /* fields below */
    GQueue queue;               /* NuksmTx *, waiting for the socket */
    QEMUBH *send_bh;            /* the connection's sender, once started */
    int fd;                     /* the ready connection's socket, or -1 */
    uint32_t epoch;             /* and its epoch */
} NuksmOutbox;

void nuksm_outbox_init(NuksmOutbox *ob);
/*
 * Main loop: from now on a message queued schedules @send, which sends
 * the queue (nuksm_outbox_send()).
 */
void nuksm_outbox_start(NuksmOutbox *ob, QEMUBHFunc *send, void *opaque);
void nuksm_outbox_cleanup(NuksmOutbox *ob);

/* Any thread: queue a message for connection @epoch, with @seq. */
void nuksm_outbox_queue(NuksmOutbox *ob, uint32_t epoch, NuksmMsgType type,
                        uint32_t seq, const void *payload, uint32_t len);
/* Any thread: queue a notification (seq 0) for connection @epoch. */
void nuksm_outbox_post(NuksmOutbox *ob, uint32_t epoch, NuksmMsgType type,
                       const void *payload, uint32_t len);
/*
 * Any thread: post @n entries of @size bytes from @entries as batch
 * messages of at most @max entries each.
 */
void nuksm_outbox_post_batches(NuksmOutbox *ob, uint32_t epoch,
                               NuksmMsgType type, const void *entries,
                               size_t size, size_t n, size_t max);
/* Any thread: the messages waiting for the socket. */
size_t nuksm_outbox_backlog(NuksmOutbox *ob);

/*
 * Main loop: connection @epoch on @fd is ready: messages posted for it
 * may go straight to @fd.
 */
void nuksm_outbox_connect(NuksmOutbox *ob, int fd, uint32_t epoch);
/*
 * Main loop: the connection is lost, its socket about to be closed: send
 * nothing more to it, and drop every message queued.
 */
void nuksm_outbox_disconnect(NuksmOutbox *ob);
/*
 * Main loop: send the messages queued for the ready connection until its
 * socket is full, and drop the others (all of them while no connection
 * is ready: a handshake is not over, or there is none).  Returns why the
 * connection is lost, or NULL; *pending tells whether messages are left
 * for when the socket is writable.
 */
const char *nuksm_outbox_send(NuksmOutbox *ob, bool *pending);

#endif /* HW_MEM_NUKSM_OUTBOX_H */
