/*
 * nuksmd conditions.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <inttypes.h>
#include <malloc.h>

#include "conditions.h"
#include "log.h"
#include "transport.h"

/* The memory budget holds again below this share of it, in percent. */
#define MEMORY_RESUME_PERCENT 90

/* For logs, by bit number. */
static const char *const names[] = {
    [0] = "store full",
    [1] = "agent memory budget used",
};

_Static_assert(G_N_ELEMENTS(names) == NUKSM_COND_COUNT, "a name per bit");

static unsigned bit_index(NuksmCondition cond)
{
    return __builtin_ctz(cond);
}

void conditions_describe(const NuksmAgent *agent, char *field, size_t len)
{
    g_autoptr(GString) reason = g_string_new(NULL);

    for (unsigned i = 0; i < NUKSM_COND_COUNT; i++) {
        if (agent->conditions.held & (1u << i)) {
            g_string_append_printf(reason, "%s%s", reason->len ? "; " : "",
                                   agent->conditions.reasons[i]);
        }
    }
    nuksm_strfield_set(field, len, reason->str);
}

void conditions_send(NuksmAgent *agent, NuksmClient *client)
{
    NuksmMsgCondition msg = { .conditions = agent->conditions.held };

    conditions_describe(agent, msg.reason, sizeof(msg.reason));
    transport_send(client, NUKSM_MSG_CONDITION, 0, &msg, sizeof(msg));
}

static void broadcast(NuksmAgent *agent)
{
    for (GList *l = agent->clients.list.head; l; l = l->next) {
        NuksmClient *client = l->data;

        if (clients_is_vm(client)) {
            conditions_send(agent, client);
        }
    }
}

void conditions_set(NuksmAgent *agent, NuksmCondition cond,
                    const char *fmt, ...)
{
    unsigned i = bit_index(cond);
    va_list ap;

    if (agent->conditions.held & cond) {
        return;
    }
    g_free(agent->conditions.reasons[i]);
    va_start(ap, fmt);
    agent->conditions.reasons[i] = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    agent->conditions.held |= cond;
    log_warning("%s: %s; no new merges until it ends", names[i],
                agent->conditions.reasons[i]);
    broadcast(agent);
}

void conditions_clear(NuksmAgent *agent, NuksmCondition cond)
{
    unsigned i = bit_index(cond);

    if (!(agent->conditions.held & cond)) {
        return;
    }
    agent->conditions.held &= ~cond;
    g_clear_pointer(&agent->conditions.reasons[i], g_free);
    log_info("%s no more: merging resumes", names[i]);
    broadcast(agent);
}

void conditions_store_full(NuksmAgent *agent, const char *fmt, ...)
{
    g_autofree char *reason = NULL;
    va_list ap;

    va_start(ap, fmt);
    reason = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    conditions_set(agent, NUKSM_COND_STORE_FULL, "%s", reason);
    agent->conditions.store_retry_at = g_get_monotonic_time() +
                            STORE_RETRY_SECONDS * G_USEC_PER_SEC;
}

bool conditions_store_has_room(NuksmAgent *agent)
{
    uint64_t limit;

    if (conditions_hold(agent, NUKSM_COND_STORE_FULL) &&
        g_get_monotonic_time() < agent->conditions.store_retry_at) {
        return false;
    }
    if (memcg_room(&agent->memcg, &limit) < NUKSM_PAGE_SIZE) {
        conditions_store_full(agent, "nuksmd's memory cgroup is within its "
                              "headroom of its %" PRIu64 " MiB limit",
                              limit >> 20);
        return false;
    }
    return true;
}

bool conditions_memory_has_room(NuksmAgent *agent)
{
    struct mallinfo2 mi = mallinfo2();
    uint64_t used = mi.uordblks + mi.hblkhd;
    bool over = conditions_hold(agent, NUKSM_COND_AGENT_MEMORY);
    uint64_t max = agent->conditions.memory_max;
    uint64_t limit = over ? max / 100 * MEMORY_RESUME_PERCENT : max;

    if (used < limit) {
        conditions_clear(agent, NUKSM_COND_AGENT_MEMORY);
        return true;
    }
    conditions_set(agent, NUKSM_COND_AGENT_MEMORY,
                   "nuksmd's tables use %" PRIu64 " MiB of its %" PRIu64
                   " MiB budget (--memory-max)", used >> 20,
                   agent->conditions.memory_max >> 20);
    return false;
}

void conditions_destroy(NuksmAgent *agent)
{
    for (unsigned i = 0; i < G_N_ELEMENTS(agent->conditions.reasons); i++) {
        g_clear_pointer(&agent->conditions.reasons[i], g_free);
    }
}
