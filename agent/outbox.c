/*
 * nuksmd outbox.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <string.h>

#include "outbox.h"
#include "server.h"

void outbox_add(NuksmAgent *agent, NuksmClient *client, NuksmMsgType type,
                uint64_t page, SlotId id, uint32_t gen)
{
    NuksmSlotRef ref = {
        .page = page,
        .node = slot_id_node(id),
        .slot = slot_id_slot(id),
        .gen = gen,
        .status = NUKSM_STATUS_NONE,
    };

    g_array_append_val(type == NUKSM_MSG_MERGE ? client->to_merge
                                               : client->to_upload, ref);
    if (!client->in_outbox) {
        client->in_outbox = true;
        g_ptr_array_add(agent->outbox, client);
    }
}

static void send_batches(NuksmAgent *agent, NuksmClient *client,
                         NuksmMsgType type, GArray *refs)
{
    for (guint i = 0; i < refs->len; i += NUKSM_SLOTREFS_MAX) {
        uint32_t count = MIN(refs->len - i, NUKSM_SLOTREFS_MAX);
        uint32_t len = sizeof(NuksmMsgBatch) + count * sizeof(NuksmSlotRef);
        g_autofree NuksmMsgBatch *batch = g_malloc(len);

        batch->count = count;
        batch->reserved = 0;
        memcpy(batch + 1, &g_array_index(refs, NuksmSlotRef, i),
               count * sizeof(NuksmSlotRef));
        if (!server_send(agent, client, type, 0, batch, len)) {
            break;
        }
    }
    g_array_set_size(refs, 0);
}

void outbox_flush(NuksmAgent *agent)
{
    for (guint i = 0; i < agent->outbox->len; i++) {
        NuksmClient *client = g_ptr_array_index(agent->outbox, i);

        send_batches(agent, client, NUKSM_MSG_UPLOAD_REQ, client->to_upload);
        send_batches(agent, client, NUKSM_MSG_MERGE, client->to_merge);
        client->in_outbox = false;
    }
    g_ptr_array_set_size(agent->outbox, 0);
}
