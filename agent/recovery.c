/*
 * nuksmd crash recovery.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <inttypes.h>

#include "ledger.h"
#include "log.h"
#include "merge.h"
#include "nuksm-digest.h"
#include "recovery.h"
#include "server.h"

static gboolean on_grace_over(gpointer opaque)
{
    NuksmAgent *agent = opaque;
    uint64_t freed = 0;

    for (uint32_t n = 0; n < agent->nr_nodes; n++) {
        SlotTable *t = &agent->slots[n];

        for (uint32_t s = 0; s < t->top; s++) {
            if (slots_in_use(t, s) &&
                slots_get(t, s)->state == SLOT_ORPHAN) {
                ledger_free(agent, slot_id(n, s));
                freed++;
            }
        }
    }
    ledger_flush(agent);
    log_info("restore grace period over: freed %" PRIu64 " store page%s "
             "that no VM restored", freed, freed == 1 ? "" : "s");
    agent->restore_timer = 0;
    return G_SOURCE_REMOVE;
}

void recovery_start(NuksmAgent *agent, uint32_t grace)
{
    uint64_t orphans = 0;

    for (uint32_t n = 0; n < agent->nr_nodes; n++) {
        uint32_t start, end, from = 0;

        while (store_next_data(&agent->store, n, from, &start, &end)) {
            for (uint32_t s = start; s < end; s++) {
                slots_claim_orphan(&agent->slots[n], s);
            }
            orphans += end - start;
            from = end;
        }
    }
    if (orphans) {
        log_info("store holds %" PRIu64 " page%s from a previous run: VMs "
                 "have %u s to restore them", orphans,
                 orphans == 1 ? "" : "s", grace);
        agent->restore_timer = g_timeout_add_seconds(grace, on_grace_over,
                                                     agent);
    }
}

void recovery_stop(NuksmAgent *agent)
{
    if (agent->restore_timer) {
        g_source_remove(agent->restore_timer);
        agent->restore_timer = 0;
    }
}

static bool restore_one(NuksmAgent *agent, NuksmClient *client,
                        uint32_t seq, const NuksmSlotRef *r)
{
    SlotTable *t = &agent->slots[r->node];
    uint8_t content[NUKSM_PAGE_SIZE];
    KeyMapEntry *e = ledger_page(client, r->page);
    bool indexed = false;
    Slot *s;

    if (e && ledger_parked(e->tag)) {
        /* Taken back from its previous connection: it maps it. */
        if (e->value == slot_id(r->node, r->slot) &&
            ledger_slot(agent, e->value)->gen == r->gen) {
            ledger_confirm(agent, client, e);
            return true;
        }
        /* It maps another slot now. */
        ledger_drop(agent, client, e);
        e = NULL;
    }
    if (e) {
        server_reject(agent, client, seq, NUKSM_ERR_BAD_MESSAGE,
                      "RESTORE of page %#" PRIx64 ", which already has a "
                      "slot", r->page);
        return false;
    }
    if (ledger_full(client)) {
        server_reject(agent, client, seq, NUKSM_ERR_BAD_MESSAGE,
                      "RESTORE of more than %u pages",
                      LEDGER_CLIENT_PAGES_MAX);
        return false;
    }
    s = slots_in_use(t, r->slot) ? slots_get(t, r->slot) : NULL;
    if (s && s->state == SLOT_ORPHAN &&
        store_read(&agent->store, r->node, r->slot, content)) {
        /*
         * The first VM to restore a page sets its generation; the content
         * gives its digest, and it becomes a slot that new candidates
         * merge with, unless another slot of the domain has that content.
         */
        s->gen = r->gen;
        s->domain = client->domain_id;
        s->digest = nuksm_page_digest(content, NUKSM_PAGE_SIZE);
        s->state = SLOT_READY;
        index_insert(&agent->index, s->domain, s->digest,
                     slot_id(r->node, r->slot));
        indexed = true;
    } else if (!s || s->state != SLOT_READY) {
        server_reject(agent, client, seq, NUKSM_ERR_BAD_MESSAGE,
                      "RESTORE of node %u slot %u, which holds no merged "
                      "page", r->node, r->slot);
        return false;
    } else if (s->gen != r->gen) {
        server_reject(agent, client, seq, NUKSM_ERR_BAD_MESSAGE,
                      "RESTORE of node %u slot %u with generation %u, but "
                      "it is %u", r->node, r->slot, r->gen, s->gen);
        return false;
    } else if (s->domain != client->domain_id) {
        server_reject(agent, client, seq, NUKSM_ERR_BAD_MESSAGE,
                      "RESTORE of node %u slot %u, which belongs to another "
                      "merge domain", r->node, r->slot);
        return false;
    }
    ledger_add(agent, client, r->page, slot_id(r->node, r->slot),
               PAGE_MAPPED);
    if (indexed) {
        merge_join_unstable(agent, slot_id(r->node, r->slot));
    }
    return true;
}

void recovery_handle_restore(NuksmAgent *agent, NuksmClient *client,
                             uint32_t seq, const void *payload)
{
    const NuksmMsgBatch *batch = payload;
    const NuksmSlotRef *refs = (const NuksmSlotRef *)(batch + 1);

    for (uint32_t i = 0; i < batch->count; i++) {
        if (!merge_check_ref(agent, client, seq, "RESTORE", &refs[i]) ||
            !restore_one(agent, client, seq, &refs[i])) {
            return;
        }
    }
    log_debug("%s: restored %u merged page%s", client->label, batch->count,
              batch->count == 1 ? "" : "s");
}
