/*
 * nuksmd merge engine: the protocol between VMs and the store.
 *
 *   VM -> CANDIDATES  pages whose digest was stable across two scans
 *                     join a copy, or pair in the unstable table into a
 *                     new slot, whose content uploads.h brings
 *   -> VM MERGE       to every page sharing that content
 *   VM -> MERGED      each MERGE's outcome; MERGED takes a reference
 *   VM -> UNMERGED    a page that left its slot drops its reference
 *
 * The order of these messages and what each side owes the other are
 * libnuksm/nuksm-proto.h's.  Candidates meet in the unstable table, and
 * slots with content are found through the stable index, both in the
 * content table (contents.h);
 * ledger.h keeps who uses which slot.  A VM that sends anything it was
 * not asked for is disconnected: its pages are dropped like those of a
 * VM that left.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_MERGE_H
#define NUKSMD_MERGE_H

#include "agent.h"

/*
 * A VM completed HELLO: hand it what its process left parked (see
 * detached.h) and send it a STORE with a read-only fd per node.
 */
void merge_client_join(NuksmAgent *agent, NuksmClient *client);

/*
 * A VM is going away: drop its pending merges, and its references and
 * unanswered MERGEs unless its process runs on (see detached.h).
 */
void merge_client_leave(NuksmAgent *agent, NuksmClient *client);

/*
 * Free what the merge engine, its helpers and placement keep for @client
 * (its ledger, outbox, uploads, read hotness, sketch, lines and
 * topology), touching nothing else: after merge_client_leave(), or as
 * the agent stops and leaves the store to the next one.  Before
 * clients_remove().
 */
void merge_client_free(NuksmClient *client);

/* Handlers of the VM -> agent messages; payloads passed nuksm_msg_check. */
void merge_handle_candidates(NuksmAgent *agent, NuksmClient *client,
                             uint32_t seq, const void *payload);
void merge_handle_merged(NuksmAgent *agent, NuksmClient *client,
                         uint32_t seq, const void *payload);
void merge_handle_unmerged(NuksmAgent *agent, NuksmClient *client,
                           uint32_t seq, const void *payload);

#endif /* NUKSMD_MERGE_H */
