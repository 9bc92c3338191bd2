/*
 * nuksmd copies.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "conditions.h"
#include "copies.h"
#include "ledger.h"
#include "outbox.h"

/* Slots recorded at most with one write. */
#define COPIES_RUN_MAX 64u

/* The store refused a slot's content with @err: say so; false. */
static bool store_refused(NuksmAgent *agent, int err)
{
    conditions_store_full(agent, "cannot write to the store in %s: %s",
                          agent->store.dir, g_strerror(err));
    return false;
}

static SlotRecord slot_record(NuksmAgent *agent, SlotId id)
{
    const Slot *s = ledger_slot(agent, id);

    return (SlotRecord) {
        .gen = s->gen,
        .domain_key = domains_record_key(&agent->domains, s->domain),
    };
}

/* The slots of a run are recorded: make them ready. */
static void ready(NuksmAgent *agent, const SlotId *ids, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        ledger_slot(agent, ids[i])->state = SLOT_READY;
    }
    memcg_charge(&agent->memcg, n * NUKSM_PAGE_SIZE);
    conditions_clear(agent, NUKSM_COND_STORE_FULL);
}

void copies_filled(NuksmAgent *agent, const SlotId *ids, size_t n,
                   bool *filled)
{
    SlotRecord recs[COPIES_RUN_MAX];

    for (size_t i = 0; i < n;) {
        size_t run = 1;
        int err;

        recs[0] = slot_record(agent, ids[i]);
        while (i + run < n && run < COPIES_RUN_MAX &&
               ids[i + run] == ids[i] + run &&
               slot_id_node(ids[i + run]) == slot_id_node(ids[i])) {
            recs[run] = slot_record(agent, ids[i + run]);
            run++;
        }
        err = store_set_records(&agent->store, slot_id_node(ids[i]),
                                slot_id_slot(ids[i]), recs, run);
        if (err) {
            store_refused(agent, err);
        } else {
            ready(agent, ids + i, run);
        }
        for (size_t k = 0; k < run; k++) {
            filled[i + k] = !err;
        }
        i += run;
    }
}

bool copies_write(NuksmAgent *agent, SlotId id, const void *content)
{
    const Slot *s = ledger_slot(agent, id);
    int err = store_write(&agent->store, s->domain, slot_id_node(id),
                          slot_id_slot(id), content);

    return err ? store_refused(agent, err) : true;
}

bool copies_fill(NuksmAgent *agent, SlotId id, const void *content)
{
    bool filled = false;

    if (!copies_write(agent, id, content)) {
        return false;
    }
    copies_filled(agent, &id, 1, &filled);
    return filled;
}

void copies_join(NuksmAgent *agent, NuksmClient *v, uint64_t page,
                 SlotId id)
{
    Slot *s = ledger_slot(agent, id);

    if (s->state == SLOT_READY) {
        ledger_add(agent, v, page, id, PAGE_MERGING);
        outbox_add(agent, v, NUKSM_MSG_MERGE, page, id, s->gen);
    } else {
        /* Indexed but not ready: its content is on its way. */
        ledger_add(agent, v, page, id, PAGE_WAITING);
        ledger_upload_join(agent, id, v, page);
    }
}

ContentEntry *copies_unstable_partner(NuksmAgent *agent, ContentEntry *seen,
                                      uint32_t node, NuksmClient **u,
                                      PolicyOwner *pu)
{
    *u = seen ? ledger_client(agent, contents_client(&agent->contents, seen))
              : NULL;
    if (!*u || ledger_page(*u, seen->page) || ledger_full(*u)) {
        return NULL;
    }
    *pu = (PolicyOwner) { .client = (*u)->id, .home = node,
                          .priority = (*u)->priority, .hot = seen->hot,
                          .warm = seen->warm };
    return seen;
}

void copies_publish(NuksmAgent *agent, SlotId id, uint64_t digest)
{
    const Slot *s = ledger_slot(agent, id);

    contents_add_copy(&agent->contents, s->domain, digest, id);
    for (uint32_t node = 0; node < agent->nr_nodes; node++) {
        PolicyOwner pu;
        NuksmClient *u;
        ContentProbe p;
        ContentEntry *seen;
        uint64_t page;

        contents_probe(&agent->contents, s->domain, node, digest, &p);
        seen = copies_unstable_partner(agent, p.seen, node, &u, &pu);
        if (!seen || !policy_may_map(agent->placement.policy, &pu,
                                     slot_id_node(id))) {
            continue;
        }
        page = seen->page;
        contents_forget(&agent->contents, seen);
        copies_join(agent, u, page, id);
    }
}
