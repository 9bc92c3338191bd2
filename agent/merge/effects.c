/*
 * nuksmd effects.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <malloc.h>

#include "effects.h"
#include "ledger.h"
#include "merge.h"
#include "outbox.h"

/*
 * A client that leaves with this much queued or this many pages: give
 * the heap it used back to the system.
 */
#define TRIM_AFTER_TXQ_BYTES (1u << 20)
#define TRIM_AFTER_PAGES (1u << 16)

/* What a timer or a process watch left to do, checked before each poll. */
typedef struct SettleSource {
    GSource source;
    NuksmAgent *agent;
} SettleSource;

/*
 * Free the clients marked dead.  glibc keeps freed heap for reuse: give
 * it back when a big client went, so that a flood leaves no lasting cost.
 */
static void reap_clients(NuksmAgent *agent)
{
    GList *l = agent->clients.list.head;
    bool trim = false;

    while (l) {
        NuksmClient *client = l->data;

        l = l->next;
        if (client->dead) {
            trim |= client->txq_bytes >= TRIM_AFTER_TXQ_BYTES ||
                    client->pages.count >= TRIM_AFTER_PAGES;
            merge_client_leave(agent, client);
            clients_remove(&agent->clients, client);
        }
    }
    if (trim) {
        malloc_trim(0);
    }
}

static gint compare_ids(gconstpointer a, gconstpointer b)
{
    SlotId x = *(const SlotId *)a, y = *(const SlotId *)b;

    return x < y ? -1 : x > y;
}

/* Punch out and release the slots freed since the last call. */
static void free_slots(NuksmAgent *agent)
{
    GArray *ids = agent->effects.freeing;
    guint i = 0;

    /* Sorted, consecutive slots of a domain are punched with one call. */
    g_array_sort(ids, compare_ids);
    while (i < ids->len) {
        SlotId first = g_array_index(ids, SlotId, i);
        uint16_t domain = ledger_slot(agent, first)->domain;
        guint n = 1;

        while (i + n < ids->len &&
               g_array_index(ids, SlotId, i + n) == first + n &&
               slot_id_node(first + n) == slot_id_node(first) &&
               ledger_slot(agent, first + n)->domain == domain) {
            n++;
        }
        store_punch(&agent->store, domain, slot_id_node(first),
                    slot_id_slot(first), n);
        for (guint k = 0; k < n; k++) {
            ledger_release_slot(agent, first + k);
        }
        i += n;
    }
    g_array_set_size(ids, 0);
}

void effects_flush(NuksmAgent *agent)
{
    outbox_flush(agent);
    free_slots(agent);
}

void effects_settle(NuksmAgent *agent)
{
    outbox_flush(agent);
    reap_clients(agent);
    free_slots(agent);
}

static bool pending(const NuksmAgent *agent)
{
    return agent->effects.outbox->len || agent->effects.freeing->len;
}

static gboolean settle_prepare(GSource *source, gint *timeout)
{
    *timeout = -1;
    return pending(((SettleSource *)source)->agent);
}

static gboolean settle_check(GSource *source)
{
    return pending(((SettleSource *)source)->agent);
}

static gboolean settle_dispatch(GSource *source, GSourceFunc callback,
                                gpointer opaque)
{
    effects_settle(((SettleSource *)source)->agent);
    return G_SOURCE_CONTINUE;
}

static GSourceFuncs settle_funcs = {
    .prepare = settle_prepare,
    .check = settle_check,
    .dispatch = settle_dispatch,
};

void effects_start(NuksmAgent *agent)
{
    GSource *source = g_source_new(&settle_funcs, sizeof(SettleSource));

    ((SettleSource *)source)->agent = agent;
    g_source_set_name(source, "nuksmd effects");
    agent->effects.settle_source = g_source_attach(source, NULL);
    g_source_unref(source);
}

void effects_stop(NuksmAgent *agent)
{
    if (agent->effects.settle_source) {
        g_source_remove(agent->effects.settle_source);
        agent->effects.settle_source = 0;
    }
}
