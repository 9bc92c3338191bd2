/*
 * nuksmd conditions: what holds back new merges agent-wide, kept
 * visible: logged once when it starts and once when it ends, shown by
 * nuksmctl status (INFO) and sent to every VM (CONDITION), whose
 * query-nuksm shows it.
 *
 * - Store full (a failed write, a node's store out of slots, or the
 *   memory cgroup near its limit: memcg.h): no new slot is made, but
 *   pages still join the copies that exist; every STORE_RETRY_SECONDS
 *   one new slot is tried again.
 * - Agent memory: no candidate is taken while nuksmd's heap is over its
 *   budget (--memory-max); candidates that come after it fell back below
 *   90% of it are.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_CONDITIONS_H
#define NUKSMD_CONDITIONS_H

#include "agent.h"

/* Seconds between two tries to write to a store that was full. */
#define STORE_RETRY_SECONDS 5

/* @cond (a NuksmCondition) holds, for the reason @fmt says. */
void conditions_set(NuksmAgent *agent, NuksmCondition cond,
                    const char *fmt, ...) G_GNUC_PRINTF(3, 4);

/* @cond no longer holds. */
void conditions_clear(NuksmAgent *agent, NuksmCondition cond);

static inline bool conditions_hold(const NuksmAgent *agent,
                                   NuksmCondition cond)
{
    return agent->conditions & cond;
}

/* Why the conditions in force hold, into the string field @field. */
void conditions_describe(const NuksmAgent *agent, char *field, size_t len);

/* Tell @client (a VM that just joined) what holds now. */
void conditions_send(NuksmAgent *agent, NuksmClient *client);

void conditions_destroy(NuksmAgent *agent);

#endif /* NUKSMD_CONDITIONS_H */
