/*
 * nuksmd outbox.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <string.h>

#include "outbox.h"
#include "transport.h"

void outbox_client_init(ClientOutbox *out)
{
    out->to_merge = g_array_new(FALSE, FALSE, sizeof(NuksmSlotRef));
    out->to_upload = g_array_new(FALSE, FALSE, sizeof(NuksmSlotRef));
    out->to_read = g_array_new(FALSE, FALSE, sizeof(NuksmSlotRef));
    out->to_move = g_array_new(FALSE, FALSE, sizeof(NuksmMove));
    out->to_retry = g_array_new(FALSE, FALSE, sizeof(NuksmSlotRef));
}

void outbox_client_destroy(ClientOutbox *out)
{
    g_clear_pointer(&out->to_merge, g_array_unref);
    g_clear_pointer(&out->to_upload, g_array_unref);
    g_clear_pointer(&out->to_read, g_array_unref);
    g_clear_pointer(&out->to_move, g_array_unref);
    g_clear_pointer(&out->to_retry, g_array_unref);
}

static NuksmSlotRef slot_ref(uint64_t page, SlotId id, uint32_t gen)
{
    return (NuksmSlotRef) {
        .page = page,
        .node = slot_id_node(id),
        .slot = slot_id_slot(id),
        .gen = gen,
        .status = NUKSM_STATUS_NONE,
    };
}

static void add_client(NuksmAgent *agent, NuksmClient *client)
{
    if (!client->outbox.queued) {
        client->outbox.queued = true;
        g_ptr_array_add(agent->effects.outbox, client);
    }
}

void outbox_add(NuksmAgent *agent, NuksmClient *client, NuksmMsgType type,
                uint64_t page, SlotId id, uint32_t gen)
{
    NuksmSlotRef ref = slot_ref(page, id, gen);

    g_array_append_val(type == NUKSM_MSG_MERGE ? client->outbox.to_merge
                                               : client->outbox.to_upload,
                       ref);
    add_client(agent, client);
}

void outbox_add_read(NuksmAgent *agent, NuksmClient *client, uint64_t page,
                     SlotId id, uint32_t gen)
{
    NuksmSlotRef ref = slot_ref(page, id, gen);

    g_array_append_val(client->outbox.to_read, ref);
    add_client(agent, client);
}

void outbox_add_move(NuksmAgent *agent, NuksmClient *client, uint64_t page,
                     SlotId from, uint32_t from_gen, SlotId to,
                     uint32_t to_gen)
{
    NuksmMove move = {
        .from = slot_ref(page, from, from_gen),
        .to = slot_ref(page, to, to_gen),
    };

    g_array_append_val(client->outbox.to_move, move);
    add_client(agent, client);
}

void outbox_add_retry(NuksmAgent *agent, NuksmClient *client, uint64_t page)
{
    NuksmSlotRef ref = { .page = page };

    g_array_append_val(client->outbox.to_retry, ref);
    add_client(agent, client);
}

/* Send the entries of @entries as @type batches of at most @max. */
static void send_batches(NuksmAgent *agent, NuksmClient *client,
                         NuksmMsgType type, GArray *entries, size_t max)
{
    size_t size = g_array_get_element_size(entries);

    for (guint i = 0; i < entries->len; i += max) {
        uint32_t count = MIN(entries->len - i, max);
        uint32_t len = sizeof(NuksmMsgBatch) + count * size;
        g_autofree NuksmMsgBatch *batch = g_malloc(len);

        batch->count = count;
        batch->reserved = 0;
        memcpy(batch + 1, entries->data + i * size, count * size);
        if (!transport_send(client, type, 0, batch, len)) {
            break;
        }
    }
    g_array_set_size(entries, 0);
}

void outbox_flush(NuksmAgent *agent)
{
    for (guint i = 0; i < agent->effects.outbox->len; i++) {
        NuksmClient *client = g_ptr_array_index(agent->effects.outbox, i);

        send_batches(agent, client, NUKSM_MSG_UPLOAD_REQ,
                     client->outbox.to_upload, NUKSM_SLOTREFS_MAX);
        send_batches(agent, client, NUKSM_MSG_MERGE, client->outbox.to_merge,
                     NUKSM_SLOTREFS_MAX);
        send_batches(agent, client, NUKSM_MSG_MOVE, client->outbox.to_move,
                     NUKSM_MOVES_MAX);
        send_batches(agent, client, NUKSM_MSG_RETRY, client->outbox.to_retry,
                     NUKSM_SLOTREFS_MAX);
        client->outbox.queued = false;
    }
    g_ptr_array_set_size(agent->effects.outbox, 0);
}
