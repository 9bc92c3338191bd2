/*
 * nuksmd pages seen once (wanted.h).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "agent.h"
#include "log.h"
#include "outbox.h"
#include "transport.h"
#include "wanted.h"

_Static_assert(WANTED_FRAGMENTS_MAX <= NUKSM_WANTED_MAX,
               "a VM's fragments fit in one WANTED");

/* Keys the filter holds at most, per page seen the table may hold. */
#define FORGOTTEN_PER_SEEN 4u

static void send_wanted(NuksmClient *client)
{
    ClientWanted *w = &client->wanted;
    uint32_t count = w->all ? 0 : w->fragments->len;
    uint32_t len = sizeof(NuksmMsgBatch) + count * sizeof(uint16_t);
    g_autofree NuksmMsgBatch *batch = g_malloc(len);

    batch->count = count;
    batch->reserved = 0;
    memcpy(batch + 1, w->fragments->data, count * sizeof(uint16_t));
    transport_send(client, NUKSM_MSG_WANTED, 0, batch, len);
    g_array_set_size(w->fragments, 0);
    w->all = false;
}

/* Once a second while there is any: send what each VM is asked for. */
static gboolean on_send(gpointer opaque)
{
    NuksmAgent *agent = opaque;
    GHashTableIter it;
    NuksmClient *client;
    bool sent = false;

    g_hash_table_iter_init(&it, agent->ledger.vms);
    while (g_hash_table_iter_next(&it, NULL, (gpointer *)&client)) {
        if (!client->dead &&
            (client->wanted.all || client->wanted.fragments->len)) {
            send_wanted(client);
            sent = true;
        }
        client->wanted.caused = 0;
    }
    if (!sent) {
        agent->wanted.send_timer = 0;
        return G_SOURCE_REMOVE;
    }
    return G_SOURCE_CONTINUE;
}

static void arm_send(NuksmAgent *agent)
{
    if (!agent->wanted.send_timer) {
        agent->wanted.send_timer = g_timeout_add_seconds(1, on_send, agent);
    }
}

/* Ask every VM of @domain for @fragment; every VM for all, if @all. */
static void want(NuksmAgent *agent, uint16_t domain, uint16_t fragment,
                 bool all)
{
    GHashTableIter it;
    NuksmClient *client;

    g_hash_table_iter_init(&it, agent->ledger.vms);
    while (g_hash_table_iter_next(&it, NULL, (gpointer *)&client)) {
        ClientWanted *w = &client->wanted;

        if (client->dead || (!all && client->domain_id != domain)) {
            continue;
        }
        if (all || w->fragments->len >= WANTED_FRAGMENTS_MAX) {
            w->all = true;
            g_array_set_size(w->fragments, 0);
        } else if (!w->all) {
            g_array_append_val(w->fragments, fragment);
        }
    }
    arm_send(agent);
}

static void forgot(uint64_t key, void *opaque)
{
    NuksmAgent *agent = opaque;

    forgotten_add(&agent->wanted.forgotten, key);
}

/* Every age: forget the pages seen that paired with none for a whole one. */
static gboolean on_age(gpointer opaque)
{
    NuksmAgent *agent = opaque;
    Wanted *wanted = &agent->wanted;

    if (!agent->contents.seen) {
        return G_SOURCE_CONTINUE;
    }
    wanted->forgotten_total += contents_age(&agent->contents, forgot, agent);
    if (wanted->forgotten.keys >=
        (uint64_t)agent->contents.max_seen * FORGOTTEN_PER_SEEN) {
        log_info("forgot %zu pages seen: offering them all again",
                 wanted->forgotten.keys);
        forgotten_clear(&wanted->forgotten);
        want(agent, 0, 0, true);
    }
    return G_SOURCE_CONTINUE;
}

void wanted_start(NuksmAgent *agent, uint32_t forget_after)
{
    forgotten_init(&agent->wanted.forgotten);
    agent->wanted.forget_after = forget_after;
    agent->wanted.age_timer = g_timeout_add_seconds(forget_after, on_age,
                                                    agent);
}

void wanted_stop(NuksmAgent *agent)
{
    Wanted *wanted = &agent->wanted;

    if (wanted->age_timer) {
        g_source_remove(wanted->age_timer);
        wanted->age_timer = 0;
    }
    if (wanted->send_timer) {
        g_source_remove(wanted->send_timer);
        wanted->send_timer = 0;
    }
    forgotten_destroy(&wanted->forgotten);
}

void wanted_client_init(ClientWanted *w)
{
    w->fragments = g_array_new(FALSE, FALSE, sizeof(uint16_t));
}

void wanted_client_destroy(ClientWanted *w)
{
    g_clear_pointer(&w->fragments, g_array_unref);
}

bool wanted_unseen(NuksmAgent *agent, NuksmClient *v, uint64_t page,
                   uint64_t digest, const uint64_t *keys, size_t n)
{
    bool forgotten = false;

    for (size_t i = 0; i < n && !forgotten; i++) {
        forgotten = forgotten_may_hold(&agent->wanted.forgotten, keys[i]);
    }
    if (!forgotten) {
        return true;
    }
    if (v->wanted.caused >= WANTED_CAUSED_MAX) {
        outbox_add_retry(agent, v, page);
        return false;
    }
    v->wanted.caused++;
    agent->wanted.wanted_total++;
    want(agent, v->domain_id, nuksm_digest_fragment(digest), false);
    return true;
}
