/*
 * nuksmd uploads: the content of each new slot, from one of the pages
 * that will share it, and the hand-over when it does not come.
 *
 * A pair of pages makes a slot (merge.c): one of them is its uploader
 * (uploads_start()), the others wait (ledger.h keeps who).  The agent
 * reads the uploader's page from its VM's memory itself where the VM's
 * TOPOLOGY says where it lies (uploads_read_queued(), host/peek.h), else
 * asks the VM (UPLOAD_REQ) and takes what it sends (UPLOAD,
 * uploads_handle_upload()).  Content whose digest is the slot's is
 * written to the store (copies.h) and every page that waits is sent a
 * MERGE; the content is trusted no further, since every sharer compares
 * it with its own page before mapping the slot.
 *
 * An uploader has LEDGER_UPLOAD_SECONDS: one that lets them pass, whether
 * it cannot or will not upload, hands the upload to another sharer, and
 * is asked to upload only where nobody else can for UPLOAD_BAN_SECONDS,
 * doubled with each further miss up to an hour; what it sends late is
 * ignored.  A page that changes before its slot was filled leaves it
 * (uploads_leave_changed()).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_UPLOADS_H
#define NUKSMD_UPLOADS_H

#include <stdbool.h>
#include <stdint.h>

#include <glib.h>

#include "clients.h"
#include "keymap.h"
#include "slots.h"

struct NuksmAgent;

/* The uploads' own state. */
typedef struct Uploads {
    guint timer;             /* looks at late uploads while there are any */
    uint8_t *bounce;         /* PEEK_PAGES_MAX pages read, to be written */
} Uploads;

/*
 * New slot @id is to hold the content of @digest that @first's
 * @first_page and @second's @second_page share: @first uploads it,
 * unless its candidates land a migration (NuksmClient.landing), or it
 * missed an upload lately and @second did not; the other waits.  Both
 * landing is for the caller to avoid.
 */
void uploads_start(struct NuksmAgent *agent, SlotId id, uint64_t digest,
                   NuksmClient *first, uint64_t first_page,
                   NuksmClient *second, uint64_t second_page);

/*
 * @client's @page, on its way to a slot whose content has not come, was
 * offered with another content: it leaves the slot, and its upload, if
 * it was the uploader, passes to another page that waits.
 */
void uploads_leave_changed(struct NuksmAgent *agent, NuksmClient *client,
                           uint64_t page);

/*
 * Read the uploads queued for the agent to read (outbox_add_read()) from
 * their VMs' memory and store them, before the outbox goes out: the
 * MERGEs they make go with it.  A page that cannot be read is asked of
 * its VM (UPLOAD_REQ); so is every later one of a VM whose memory the
 * agent may not read.
 */
void uploads_read_queued(struct NuksmAgent *agent);

/* UPLOAD from a VM: payload passed nuksm_msg_check. */
void uploads_handle_upload(struct NuksmAgent *agent, NuksmClient *client,
                           uint32_t seq, const void *payload);

/* Free what uploads keep of a VM that is leaving. */
void uploads_client_destroy(ClientUploads *up);

/* Stop looking at late uploads, and free the buffer, at shutdown. */
void uploads_stop(struct NuksmAgent *agent);

#endif /* NUKSMD_UPLOADS_H */
