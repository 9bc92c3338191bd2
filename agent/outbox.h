/*
 * nuksmd outbox: UPLOAD_REQ and MERGE entries gathered per VM while a
 * message is handled, sent as few batches (seq 0) once it is done.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_OUTBOX_H
#define NUKSMD_OUTBOX_H

#include "agent.h"

/* Queue a @type (UPLOAD_REQ or MERGE) entry for @client. */
void outbox_add(NuksmAgent *agent, NuksmClient *client, NuksmMsgType type,
                uint64_t page, SlotId id, uint32_t gen);

/* Send everything queued, split at NUKSM_SLOTREFS_MAX entries. */
void outbox_flush(NuksmAgent *agent);

#endif /* NUKSMD_OUTBOX_H */
