/*
 * nuksmd detached VMs: the references of a VM whose connection ended
 * while its process lives on.  That QEMU still maps the store pages, so
 * they must stay: its references are parked until the process exits
 * (then dropped like those of a VM that left) or connects again as a VM
 * of the same domain (then handed to the new connection as PAGE_PARKED
 * entries, which its RESTORE confirms; those it did not restore by its
 * first merge message are dropped then).  Its MERGEs without a MERGED,
 * which it may have mapped, are parked too, as pending users of their
 * slot: a RESTORE makes them references (from PAGE_PARKED_MERGING).
 * Processes are told apart by pidfd.  Without a pidfd, or beyond
 * DETACHED_MAX parked connections, the references are dropped at
 * disconnection, but the slots that only they used stay as orphans
 * until no process maps them (recovery.h).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_DETACHED_H
#define NUKSMD_DETACHED_H

#include "agent.h"

/* Parked connections, each with a pidfd: bounds the fds they hold. */
#define DETACHED_MAX CLIENTS_MAX

/*
 * @client leaves: ledger_client_leave(), except that the references are
 * parked if its process still runs.
 */
void detached_client_leave(NuksmAgent *agent, NuksmClient *client);

/* A VM joined: hand it the references its process left parked, if any. */
void detached_adopt(NuksmAgent *agent, NuksmClient *client);

/* @client sends a merge message: drop what it did not restore. */
void detached_restore_end(NuksmAgent *agent, NuksmClient *client);

/* Free the parked connections, keeping their pages in the store. */
void detached_destroy(NuksmAgent *agent);

#endif /* NUKSMD_DETACHED_H */
