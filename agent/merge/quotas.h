/*
 * nuksmd domain quotas: what one merge domain may hold of what every
 * domain shares, so that one tenant's VMs cannot take the others' share.
 *
 * - Store: the pages of a domain's copies, at most its store-max (a
 *   [domain NAME] key, else domain-store-max, default 50%): MiB, or a
 *   percentage of what the store may hold, which is the size of the
 *   state directory's file system (its tmpfs) and at most every node's
 *   STORE_SLOTS.  At the quota the domain makes no new copy; its pages
 *   still join the copies it has.
 *
 * - Unstable table: the entries of its pages that wait for a partner, at
 *   most its unstable-max (default 50%): MiB of the table, or a
 *   percentage of its maximum size.  The table is a cache, full in the
 *   long run: at its quota a domain's new entry takes the place of one
 *   of its own (core/contents.h), which delays its own merges and no
 *   other domain's.  Nothing stops, so nothing is limited.
 *
 * - Queues: the replies its VMs leave unread, at most its queue-max
 *   (default 50%): MiB, or a percentage of --memory-max.  The VM whose
 *   reply would pass it is disconnected as one that does not read, as
 *   at the bound on one process's queues.
 *
 * A domain at its store quota is limited, which its VMs alone are told
 * (CONDITION with NUKSM_COND_DOMAIN_QUOTA: query-nuksm's limit
 * domain-quota), logged once when it starts and once when it ends.  It
 * ends once the domain holds less than QUOTA_RESUME_PERCENT of the
 * quota, which nuksmd checks as its copies are freed and, while it is
 * limited, every CONDITIONS_PROBE_SECONDS (a percentage grows with the
 * store's tmpfs); its VMs then offer again what it turned away.  The store-full
 * condition (conditions.h) holds for every domain alike and is checked
 * first.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_QUOTAS_H
#define NUKSMD_QUOTAS_H

#include "agent.h"

/* A quota that held is held until usage falls below this, in percent. */
#define QUOTA_RESUME_PERCENT 90

/*
 * Whether domain @domain may make one more copy; if not, it is limited
 * from now on.
 */
bool quotas_store_has_room(NuksmAgent *agent, uint16_t domain);

/* The entries @domain may hold in the unstable table. */
size_t quotas_unstable_max(NuksmAgent *agent, uint16_t domain);

/* The bytes of replies @domain's VMs may leave unread (transport.c). */
uint64_t quotas_queue_max(NuksmAgent *agent, uint16_t domain);

/*
 * A copy of @domain was freed: end its limit if it fell below
 * QUOTA_RESUME_PERCENT of its quota.
 */
void quotas_store_released(NuksmAgent *agent, uint16_t domain);

/* Stop looking at the domains at a quota. */
void quotas_destroy(NuksmAgent *agent);

#endif /* NUKSMD_QUOTAS_H */
