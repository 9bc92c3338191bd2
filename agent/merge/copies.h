/*
 * nuksmd copies: store slots that hold a content, or are about to, and
 * the pages that come to share them.
 *
 * A copy starts when two pages meet in the unstable table (merge.c): its
 * slot is allocated, indexed under its domain and digest, and one page
 * is asked to upload the content; pages that find it meanwhile wait for
 * the upload.  Once the content is written (copies_fill(), or read in
 * place and then copies_filled()), every page sharing the slot is sent a
 * MERGE.  A slot that gets a content by other
 * ways, a RESTORE of an orphan (recovery.c) or a new copy made for
 * re-placement (relocate.c), is published the same way: indexed, and
 * joined by the pages of its content waiting in the unstable table.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_COPIES_H
#define NUKSMD_COPIES_H

#include "agent.h"

/*
 * Write @content into slot @id, whose domain is set, without recording
 * it: false, with the store-full condition set, if the store cannot take
 * it.
 */
bool copies_write(NuksmAgent *agent, SlotId id, const void *content);

/*
 * Write @content into slot @id, whose digest and domain are set, and
 * record it (store.h): it becomes SLOT_READY.  False, with the slot left
 * as it was and the store-full condition set, if the store cannot take
 * it.
 */
bool copies_fill(NuksmAgent *agent, SlotId id, const void *content);

/*
 * The @n slots @ids, whose digests and domains are set, have their
 * content written (in place through store_window_slot(), or by
 * copies_write()): record them, each run of consecutive slots with one
 * write, and they become SLOT_READY.
 * @filled[i] says which did; one that did not is left as it was, with
 * the store-full condition set, as by copies_fill().
 */
void copies_filled(NuksmAgent *agent, const SlotId *ids, size_t n,
                   bool *filled);

/*
 * Index slot @id, which has its content of @digest or is having it
 * uploaded, and let the pages seen with that content (contents.h), and
 * allowed to map it, share it.  Candidates are not offered again soon
 * once the agent has them (see nuksm-scan.c), so they must not wait for
 * a slot that appeared after them.
 */
void copies_publish(NuksmAgent *agent, SlotId id, uint64_t digest);

/* @v's @page shares slot @id, ready (MERGE) or being uploaded (waits). */
void copies_join(NuksmAgent *agent, NuksmClient *v, uint64_t page,
                 SlotId id);

/*
 * The page @seen (NULL: none) of home @node, from a probe, if it may
 * still merge: its VM *@u is there and the page has no slot yet.  *@pu
 * describes the page for placement.
 */
ContentEntry *copies_unstable_partner(NuksmAgent *agent, ContentEntry *seen,
                                      uint32_t node, NuksmClient **u,
                                      PolicyOwner *pu);

#endif /* NUKSMD_COPIES_H */
