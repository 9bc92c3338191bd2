/*
 * nuksmd recovery: orphans and RESTORE.
 *
 * The store files outlive the agent, and so do the VMs' mappings of them.
 * An orphan is a store page that holds content no VM has a reference on
 * that the agent knows of, but that a live process may still map:
 *
 * - every page a new agent finds in the store, until a RESTORE takes it
 *   back;
 * - the slots of a VM that disconnected while its process could not be
 *   watched (detached.h);
 * - pages found in free slots of the store, looked for every
 *   STRAY_CHECK_SECONDS, among at most STRAY_SLOTS_PER_CHECK of each
 *   node's slots in use at a time, round robin, and beyond them: a
 *   process filled such a slot after it was punched out (through a
 *   mapping of the hole), and nothing else would ever free it.
 *
 * A RESTORE entry takes an orphan back only if its generation and domain
 * are those of the slot's record (store.h), which no client can change;
 * the first claim does not decide.  An entry that does not match is
 * refused alone (REFUSED), and the VM keeps its other pages.
 *
 * An orphan is freed only once no process maps it (mapwatch.h): first
 * @grace seconds after the start, then every ORPHAN_RECHECK_SECONDS while
 * orphans remain.  A VM stopped across a restart therefore keeps its
 * pages however long it stays stopped, and restores them when it runs.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_RECOVERY_H
#define NUKSMD_RECOVERY_H

#include "agent.h"

/* Seconds between two looks at who maps the orphans that remain. */
#define ORPHAN_RECHECK_SECONDS 10
/* Seconds between two looks for pages in free slots of the store. */
#define STRAY_CHECK_SECONDS 30
/*
 * Slots in use of a node one look reads (1 GiB of store): a look costs
 * about 20 ms of CPU at most, however big the store (a look at all of a
 * 4 GiB one cost 90 ms), and a stray costs its maker a page meanwhile.
 */
#define STRAY_SLOTS_PER_CHECK (1u << 18)

/*
 * Claim the pages found in the store as orphans; the first look at who
 * maps them comes @grace seconds later.
 */
void recovery_start(NuksmAgent *agent, uint32_t grace);

/* New orphans were made: make sure somebody looks at them. */
void recovery_watch_orphans(NuksmAgent *agent);

void recovery_stop(NuksmAgent *agent);

void recovery_handle_restore(NuksmAgent *agent, NuksmClient *client,
                             uint32_t seq, const void *payload);

#endif /* NUKSMD_RECOVERY_H */
