/*
 * nuksm: the queue of messages to the agent (see nuksm-outbox.h).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include <sys/socket.h>
#include "qemu/main-loop.h"
#include "nuksm-outbox.h"

/* A message posted for the socket; dropped if its connection is gone. */
typedef struct NuksmTx {
    uint32_t epoch;
    uint32_t size;
    uint8_t data[];
} NuksmTx;

void nuksm_outbox_init(NuksmOutbox *ob)
{
    qemu_mutex_init(&ob->lock);
    g_queue_init(&ob->queue);
    ob->fd = -1;
}

void nuksm_outbox_start(NuksmOutbox *ob, QEMUBHFunc *send, void *opaque)
{
    ob->send_bh = qemu_bh_new(send, opaque);
}

void nuksm_outbox_cleanup(NuksmOutbox *ob)
{
    g_clear_pointer(&ob->send_bh, qemu_bh_delete);
    g_queue_clear_full(&ob->queue, g_free);
    qemu_mutex_destroy(&ob->lock);
}

void nuksm_outbox_queue(NuksmOutbox *ob, uint32_t epoch, NuksmMsgType type,
                        uint32_t seq, const void *payload, uint32_t len)
{
    NuksmTx *tx = g_malloc(sizeof(*tx) + sizeof(NuksmMsgHeader) + len);

    tx->epoch = epoch;
    tx->size = nuksm_msg_pack(tx->data, type, seq, payload, len);
    qemu_mutex_lock(&ob->lock);
    /*
     * Straight to the socket if nothing waits before it.  Else, or if
     * the socket is full or failed, the main loop sends it in turn (or
     * finds the failure).
     */
    if (ob->fd >= 0 && epoch == ob->epoch && g_queue_is_empty(&ob->queue) &&
        send(ob->fd, tx->data, tx->size, MSG_NOSIGNAL | MSG_DONTWAIT) ==
        tx->size) {
        qemu_mutex_unlock(&ob->lock);
        g_free(tx);
        return;
    }
    g_queue_push_tail(&ob->queue, tx);
    qemu_mutex_unlock(&ob->lock);
    qemu_bh_schedule(ob->send_bh);
}

void nuksm_outbox_post(NuksmOutbox *ob, uint32_t epoch, NuksmMsgType type,
                       const void *payload, uint32_t len)
{
    nuksm_outbox_queue(ob, epoch, type, 0, payload, len);
}

void nuksm_outbox_post_batches(NuksmOutbox *ob, uint32_t epoch,
                               NuksmMsgType type, const void *entries,
                               size_t size, size_t n, size_t max)
{
    const uint8_t *e = entries;

    while (n) {
        size_t count = MIN(n, max);
        uint32_t len = sizeof(NuksmMsgBatch) + count * size;
        g_autofree uint8_t *buf = g_malloc(len);
        NuksmMsgBatch *b = (NuksmMsgBatch *)buf;

        b->count = count;
        b->reserved = 0;
        memcpy(b + 1, e, count * size);
        nuksm_outbox_post(ob, epoch, type, buf, len);
        e += count * size;
        n -= count;
    }
}

size_t nuksm_outbox_backlog(NuksmOutbox *ob)
{
    size_t n;

    qemu_mutex_lock(&ob->lock);
    n = g_queue_get_length(&ob->queue);
    qemu_mutex_unlock(&ob->lock);
    return n;
}

void nuksm_outbox_connect(NuksmOutbox *ob, int fd, uint32_t epoch)
{
    qemu_mutex_lock(&ob->lock);
    ob->fd = fd;
    ob->epoch = epoch;
    qemu_mutex_unlock(&ob->lock);
}

void nuksm_outbox_disconnect(NuksmOutbox *ob)
{
    qemu_mutex_lock(&ob->lock);
    ob->fd = -1;
    g_queue_clear_full(&ob->queue, g_free);
    qemu_mutex_unlock(&ob->lock);
}

const char *nuksm_outbox_send(NuksmOutbox *ob, bool *pending)
{
    const char *failed = NULL;
    NuksmTx *tx;

    qemu_mutex_lock(&ob->lock);
    while ((tx = g_queue_peek_head(&ob->queue))) {
        ssize_t n = 0;

        if (ob->fd >= 0 && tx->epoch == ob->epoch) {
            n = send(ob->fd, tx->data, tx->size, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n < 0 && (errno == EINTR || errno == EAGAIN)) {
                break;  /* retried when the socket is writable */
            }
            if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) {
                failed = "agent closed the connection";
            } else if (n != tx->size) {
                failed = "cannot send to the agent";
            }
        }
        g_free(g_queue_pop_head(&ob->queue));
        if (failed) {
            break;
        }
    }
    *pending = !g_queue_is_empty(&ob->queue);
    qemu_mutex_unlock(&ob->lock);
    return failed;
}
