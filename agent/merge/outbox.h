/*
 * nuksmd outbox: UPLOAD_REQ, MERGE, MOVE and RETRY entries gathered per
 * VM while an event is handled, sent as few batches (seq 0) once it is
 * done (effects.h), and the uploads the agent reads itself meanwhile.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_OUTBOX_H
#define NUKSMD_OUTBOX_H

#include "agent.h"

/* A joining VM's outbox, empty; freed by outbox_client_destroy(). */
void outbox_client_init(ClientOutbox *out);
void outbox_client_destroy(ClientOutbox *out);

/* Queue a @type (UPLOAD_REQ or MERGE) entry for @client. */
void outbox_add(NuksmAgent *agent, NuksmClient *client, NuksmMsgType type,
                uint64_t page, SlotId id, uint32_t gen);

/*
 * Queue @client's @page to be read from its memory as the content of
 * slot @id: no message, but uploads_read_queued() takes these before the
 * outbox is flushed (effects.c).
 */
void outbox_add_read(NuksmAgent *agent, NuksmClient *client, uint64_t page,
                     SlotId id, uint32_t gen);

/* Queue a MOVE of @client's @page from slot @from to slot @to. */
void outbox_add_move(NuksmAgent *agent, NuksmClient *client, uint64_t page,
                     SlotId from, uint32_t from_gen, SlotId to,
                     uint32_t to_gen);

/*
 * Queue a RETRY of @client's candidate @page: the agent keeps nothing
 * that would merge it, so the VM offers it again (nuksm-proto.h).
 */
void outbox_add_retry(NuksmAgent *agent, NuksmClient *client, uint64_t page);

/* Send everything queued, split at the largest batch a message holds. */
void outbox_flush(NuksmAgent *agent);

#endif /* NUKSMD_OUTBOX_H */
