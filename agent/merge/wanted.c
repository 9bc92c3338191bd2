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

/*
 * Send each VM its WANTED; with @second, a second is over: each VM may
 * make contents wanted again, up to its limit (wanted.h).  Whether any
 * was sent.
 */
static bool send_wanted(NuksmAgent *agent, bool second)
{
    GHashTableIter it;
    NuksmClient *client;
    bool sent = false;

    g_hash_table_iter_init(&it, agent->ledger.vms);
    while (g_hash_table_iter_next(&it, NULL, (gpointer *)&client)) {
        ClientWanted *w = &client->wanted;

        if (w->fragments) {
            transport_send(client, NUKSM_MSG_WANTED, 0, w->fragments,
                           sizeof(NuksmMsgWanted));
            g_clear_pointer(&w->fragments, g_free);
            sent = true;
        }
        if (second) {
            w->caused = 0;
        }
    }
    return sent;
}

/* Once a second while any is to be sent. */
static gboolean on_send(gpointer opaque)
{
    NuksmAgent *agent = opaque;

    if (!send_wanted(agent, true)) {
        agent->wanted.send_timer = 0;
        return G_SOURCE_REMOVE;
    }
    return G_SOURCE_CONTINUE;
}

static gboolean on_send_soon(gpointer opaque)
{
    NuksmAgent *agent = opaque;

    send_wanted(agent, false);
    agent->wanted.soon_timer = 0;
    return G_SOURCE_REMOVE;
}

/*
 * Ask every VM of @domain for the pages of digest fragment @fragment;
 * @soon: for a landing page.
 */
static void want(NuksmAgent *agent, uint16_t domain, uint16_t fragment,
                 bool soon)
{
    GHashTableIter it;
    NuksmClient *client;

    g_hash_table_iter_init(&it, agent->ledger.vms);
    while (g_hash_table_iter_next(&it, NULL, (gpointer *)&client)) {
        ClientWanted *w = &client->wanted;

        if (client->dead || client->domain_id != domain) {
            continue;
        }
        if (!w->fragments) {
            w->fragments = g_malloc0(sizeof(NuksmMsgWanted));
        }
        w->fragments[fragment / 64] |= 1ull << (fragment % 64);
    }
    if (!agent->wanted.send_timer) {
        agent->wanted.send_timer = g_timeout_add_seconds(1, on_send, agent);
    }
    if (soon && !agent->wanted.soon_timer) {
        agent->wanted.soon_timer = g_timeout_add(WANTED_LANDING_MS,
                                                 on_send_soon, agent);
    }
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
    contents_age(&agent->contents, forgot, agent);
    if (wanted->forgotten.keys >=
        (uint64_t)agent->contents.max_seen * FORGOTTEN_PER_SEEN) {
        log_info("forgot %zu pages seen that paired with none: they merge "
                 "from now on only when offered again",
                 wanted->forgotten.keys);
        forgotten_clear(&wanted->forgotten);
        wanted->cleared_total++;
    }
    return G_SOURCE_CONTINUE;
}

void wanted_start(NuksmAgent *agent, uint32_t forget_after)
{
    forgotten_init(&agent->wanted.forgotten);
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
    if (wanted->soon_timer) {
        g_source_remove(wanted->soon_timer);
        wanted->soon_timer = 0;
    }
    forgotten_destroy(&wanted->forgotten);
}

void wanted_client_destroy(ClientWanted *w)
{
    g_clear_pointer(&w->fragments, g_free);
}

WantedOutcome wanted_unseen(NuksmAgent *agent, NuksmClient *v,
                            const NuksmCandidate *c, const uint64_t *keys,
                            size_t n)
{
    bool forgotten = false;
    bool landing;

    /* Offered again because its fragment was wanted: it only pairs. */
    if (c->flags & NUKSM_CANDIDATE_WANTED) {
        return WANTED_NOT;
    }
    for (size_t i = 0; i < n && !forgotten; i++) {
        forgotten = forgotten_may_hold(&agent->wanted.forgotten, keys[i]);
    }
    if (!forgotten) {
        return WANTED_NOT;
    }
    landing = c->flags & NUKSM_CANDIDATE_LANDING;
    if (v->wanted.caused >= (landing ? WANTED_LANDING_MAX
                                     : WANTED_CAUSED_MAX)) {
        outbox_add_retry(agent, v, c->page);
        return WANTED_LATER;
    }
    v->wanted.caused++;
    agent->wanted.wanted_total++;
    want(agent, v->domain_id, nuksm_digest_fragment(c->digest), landing);
    return WANTED_ASKED;
}
