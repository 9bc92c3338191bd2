/*
 * nuksmd conditions: what holds back new merges agent-wide, kept
 * visible: logged once when it starts and once when it ends, shown by
 * nuksmctl status (INFO) and sent to every VM (CONDITION), whose
 * query-nuksm shows it.
 *
 * - Store full (a failed write, a node's store out of slots, or the
 *   memory cgroup near its limit: memcg.h): no new slot is made, but
 *   pages still join the copies that exist.
 * - Agent memory: no candidate is taken while nuksmd's heap is over its
 *   budget (--memory-max), until it falls back below 90% of it.
 *
 * While a condition holds, nuksmd looks every CONDITIONS_PROBE_SECONDS
 * whether it still does, and ends it when not.  Nothing else would:
 * QEMU offers the pages a condition turned away again only once it
 * ends (the CONDITION that says so), so no candidate comes to try again
 * unless guest memory changes.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_CONDITIONS_H
#define NUKSMD_CONDITIONS_H

#include "agent.h"

/* Seconds between two looks at whether the conditions still hold. */
#define CONDITIONS_PROBE_SECONDS 5

/* @cond (a NuksmCondition) holds, for the reason @fmt says. */
void conditions_set(NuksmAgent *agent, NuksmCondition cond,
                    const char *fmt, ...) G_GNUC_PRINTF(3, 4);

/* @cond no longer holds. */
void conditions_clear(NuksmAgent *agent, NuksmCondition cond);

static inline bool conditions_hold(const NuksmAgent *agent,
                                   NuksmCondition cond)
{
    return agent->conditions.held & cond;
}

/*
 * The store takes no new page, for the reason @fmt says: store-full
 * holds until the store has room again (see conditions.c).
 */
void conditions_store_full(NuksmAgent *agent, const char *fmt, ...)
    G_GNUC_PRINTF(2, 3);

/*
 * False while store-full holds, or while the agent's memory cgroup is
 * near its limit (where the OOM killer would strike instead of a failed
 * write; store-full then starts): no slot is allocated then, so a full
 * store costs no futile uploads.
 */
bool conditions_store_has_room(NuksmAgent *agent);

/*
 * False while nuksmd's heap is over its budget: no new candidate is
 * taken then.  A budget that held is held until usage falls back below
 * MEMORY_RESUME_PERCENT of it.
 */
bool conditions_memory_has_room(NuksmAgent *agent);

/*
 * The bytes nuksmd's heap holds for its tables (what --memory-max
 * limits), read at most every 10 ms.
 */
uint64_t conditions_heap_bytes(void);

/* Why the conditions in force hold, into the string field @field. */
void conditions_describe(const NuksmAgent *agent, char *field, size_t len);

/*
 * What holds back @client's merging (a VM's): the agent's conditions,
 * and NUKSM_COND_DOMAIN_QUOTA if its domain is at a quota (quotas.h,
 * throttle.h); their reasons into the string field @field.
 */
uint32_t conditions_of_vm(const NuksmAgent *agent,
                          const NuksmClient *client, char *field, size_t len);

/* Tell @client (a VM) what holds now: conditions_of_vm(). */
void conditions_send(NuksmAgent *agent, NuksmClient *client);

/* Tell every VM of domain @domain what holds now. */
void conditions_send_domain(NuksmAgent *agent, uint16_t domain);

void conditions_destroy(NuksmAgent *agent);

#endif /* NUKSMD_CONDITIONS_H */
