/*
 * nuksmd conditions.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <malloc.h>
#include <unistd.h>

#include "conditions.h"
#include "log.h"
#include "transport.h"

/* The memory budget holds again below this share of it, in percent. */
#define MEMORY_RESUME_PERCENT 90

/*
 * Store-full ends once this much fits again, not one page: else a page
 * freed would end it only for the next one to start it again, each time
 * with every VM offering its pages again.
 */
#define STORE_RESUME_BYTES (1u << 20)

/* For logs, by bit number: the conditions of the whole agent. */
static const char *const names[] = {
    [0] = "store full",
    [1] = "agent memory budget used",
};

/* The last bit is a domain's (quotas.h), not the agent's. */
_Static_assert(G_N_ELEMENTS(names) == NUKSM_COND_COUNT - 1,
               "a name per bit");

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

uint32_t conditions_of_vm(const NuksmAgent *agent,
                          const NuksmClient *client, char *field, size_t len)
{
    g_autofree char *quota = domains_limits_text(&agent->domains,
                                                 client->domain_id);
    g_autofree char *both = NULL;

    conditions_describe(agent, field, len);
    if (!quota) {
        return agent->conditions.held;
    }
    both = g_strdup_printf("%s%s%s", field, field[0] ? "; " : "", quota);
    nuksm_strfield_set(field, len, both);
    return agent->conditions.held | NUKSM_COND_DOMAIN_QUOTA;
}

void conditions_send(NuksmAgent *agent, NuksmClient *client)
{
    NuksmMsgCondition msg = { 0 };

    msg.conditions = conditions_of_vm(agent, client, msg.reason,
                                      sizeof(msg.reason));
    transport_send(client, NUKSM_MSG_CONDITION, 0, &msg, sizeof(msg));
}

void conditions_send_domain(NuksmAgent *agent, uint16_t domain)
{
    for (GList *l = agent->clients.list.head; l; l = l->next) {
        NuksmClient *client = l->data;

        if (clients_is_vm(client) && client->domain_id == domain) {
            conditions_send(agent, client);
        }
    }
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

/*
 * How long a reading of the heap is taken as known, in us.  mallinfo2()
 * walks every free chunk of the heap: on a heap fragmented by a flood it
 * took 120 ms here, and candidates come in thousands of batches a
 * second; in 10 ms they add far less than the budget's slack.
 */
#define HEAP_READING_US 10000

uint64_t conditions_heap_bytes(void)
{
    static uint64_t used;
    static gint64 read_at;
    gint64 now = g_get_monotonic_time();

    if (!read_at || now - read_at >= HEAP_READING_US) {
        struct mallinfo2 mi = mallinfo2();

        used = mi.uordblks + mi.hblkhd;
        read_at = now;
    }
    return used;
}

/*
 * Whether a heap of @used bytes uses the budget: all of it, or
 * MEMORY_RESUME_PERCENT of it once agent-memory holds.
 */
static bool memory_over(NuksmAgent *agent, uint64_t used)
{
    uint64_t max = agent->conditions.memory_max;

    return used >= (conditions_hold(agent, NUKSM_COND_AGENT_MEMORY)
                    ? max / 100 * MEMORY_RESUME_PERCENT : max);
}

/*
 * Whether the store takes pages again: every node's store has a free
 * slot, the memory cgroup has STORE_RESUME_BYTES of room, and the state
 * directory's tmpfs allocates them, to an unnamed file that gives them
 * back as it closes (a file of our own, so that no slot a process might
 * map is touched).  The cgroup first: at its limit the OOM killer would
 * strike rather than fail the allocation.
 */
static bool store_has_room_again(NuksmAgent *agent)
{
    uint64_t limit;
    int fd, err = 0;

    for (uint32_t n = 0; n < agent->nr_nodes; n++) {
        const SlotTable *t = &agent->ledger.slots[n];

        if (t->nr_used >= t->capacity) {
            return false;
        }
    }
    if (memcg_room(&agent->memcg, &limit) < STORE_RESUME_BYTES) {
        return false;
    }
    fd = open(agent->store.dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0 || fallocate(fd, 0, 0, STORE_RESUME_BYTES) < 0) {
        err = errno;
    }
    if (fd >= 0) {
        close(fd);
    }
    if (err) {
        log_debug("store full still: cannot allocate %u KiB in %s: %s",
                  STORE_RESUME_BYTES >> 10, agent->store.dir,
                  g_strerror(err));
        return false;
    }
    return true;
}

/*
 * End the conditions that no longer hold.  Runs every
 * CONDITIONS_PROBE_SECONDS while one holds, and goes once none does.
 */
static gboolean on_probe(gpointer opaque)
{
    NuksmAgent *agent = opaque;

    if (conditions_hold(agent, NUKSM_COND_STORE_FULL) &&
        store_has_room_again(agent)) {
        conditions_clear(agent, NUKSM_COND_STORE_FULL);
    }
    if (conditions_hold(agent, NUKSM_COND_AGENT_MEMORY) &&
        !memory_over(agent, conditions_heap_bytes())) {
        conditions_clear(agent, NUKSM_COND_AGENT_MEMORY);
    }
    if (!agent->conditions.held) {
        agent->conditions.probe_timer = 0;
        return G_SOURCE_REMOVE;
    }
    return G_SOURCE_CONTINUE;
}

static void watch(NuksmAgent *agent)
{
    if (!agent->conditions.probe_timer) {
        agent->conditions.probe_timer =
            g_timeout_add_seconds(CONDITIONS_PROBE_SECONDS, on_probe, agent);
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
    watch(agent);
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
}

bool conditions_store_has_room(NuksmAgent *agent)
{
    uint64_t limit;

    if (conditions_hold(agent, NUKSM_COND_STORE_FULL)) {
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
    uint64_t used = conditions_heap_bytes();

    if (!memory_over(agent, used)) {
        conditions_clear(agent, NUKSM_COND_AGENT_MEMORY);
        return true;
    }
    conditions_set(agent, NUKSM_COND_AGENT_MEMORY,
                   "nuksmd's tables use %" PRIu64 " MiB of its %" PRIu64
                   " MiB budget (--memory-max)", used >> 20,
                   agent->conditions.memory_max >> 20);
    return false;
}

/* Stop looking, and forget the reasons. */
void conditions_destroy(NuksmAgent *agent)
{
    if (agent->conditions.probe_timer) {
        g_source_remove(agent->conditions.probe_timer);
        agent->conditions.probe_timer = 0;
    }
    for (unsigned i = 0; i < G_N_ELEMENTS(agent->conditions.reasons); i++) {
        g_clear_pointer(&agent->conditions.reasons[i], g_free);
    }
}
