/*
 * nuksmd merge engine.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <inttypes.h>
#include <unistd.h>

#include "budget.h"
#include "conditions.h"
#include "copies.h"
#include "detached.h"
#include "home.h"
#include "ledger.h"
#include "merge.h"
#include "outbox.h"
#include "policy.h"
#include "quotas.h"
#include "reads.h"
#include "transport.h"
#include "uploads.h"
#include "wanted.h"

/* Fewer clients than slots: a joining VM always gets one. */
_Static_assert(CLIENTS_MAX < CONTENT_CLIENTS, "a VM has a content slot");

void merge_client_free(NuksmClient *client)
{
    pagerefs_destroy(&client->pages);
    outbox_client_destroy(&client->outbox);
    wanted_client_destroy(&client->wanted);
    uploads_client_destroy(&client->uploads);
    reads_client_destroy(&client->reads);
    home_client_destroy(&client->home);
    sketch_destroy(&client->sketch);
    lines_destroy(&client->lines);
}

void merge_client_join(NuksmAgent *agent, NuksmClient *client)
{
    client->joined = true;
    /* Fixed while nuksmd runs: the transport only compares with it. */
    client->queue_max = quotas_queue_max(agent, client->domain_id);
    domains_stats(&agent->domains, client->domain_id)->vms++;
    pagerefs_init(&client->pages, agent->contents.seed);
    reads_client_init(&client->reads, agent->contents.seed);
    sketch_init(&client->sketch, agent->contents.seed);
    client->colocation.plan_verdict = NUKSM_PLAN__MAX;
    client->colocated_to = NUKSM_MAX_NODES;
    lines_init(&client->lines);
    outbox_client_init(&client->outbox);
    g_hash_table_insert(agent->ledger.vms, GUINT_TO_POINTER(client->id),
                        client);
    client->contents_slot = contents_client_add(&agent->contents, client->id,
                                                client->domain_id);
    g_assert(client->contents_slot);
    detached_adopt(agent, client);
    budget_changed(agent);

    /* Before it gets the store: it may map slots from now on. */
    if (client->pid > 0) {
        mappers_add(&agent->mappers, client->pid);
    }
    /* Its own domain's files only: it can read no other's pages. */
    for (uint32_t n = 0; n < agent->nr_nodes; n++) {
        NuksmMsgStore msg = { .node = n, .size = STORE_SIZE };
        int fd = store_reader(&agent->store, client->domain_id, n);

        if (fd < 0) {
            transport_reject(client, 0, NUKSM_ERR_BAD_MESSAGE,
                             "nuksmd cannot open its store (see its log)");
            return;
        }
        transport_send_fd(client, NUKSM_MSG_STORE, 0, &msg, sizeof(msg), fd);
        close(fd);
    }
    conditions_send(agent, client);
}

/* The reserved range of slots a departed VM's line owned is free to all. */
static void release_line(uint32_t node, uint32_t start, gpointer opaque)
{
    NuksmAgent *agent = opaque;

    slots_unreserve_range(&agent->ledger.slots[node], start, LINE_PAGES);
}

void merge_client_leave(NuksmAgent *agent, NuksmClient *client)
{
    if (client->joined) {
        domains_stats(&agent->domains, client->domain_id)->vms--;
        lines_disown(&client->lines, release_line, agent);
        detached_client_leave(agent, client);
        client->joined = false;
    }
}

/*
 * Take the slot of @node in line with @client's page @page: false if
 * there is none, if it is taken, or if it lies in a range reserved for a
 * line @client does not own.
 */
static bool take_in_line(SlotTable *t, NuksmClient *client, uint64_t page,
                         uint32_t node, uint32_t *slot)
{
    return lines_slot(&client->lines, page, node, t->capacity, slot) &&
           (lines_owns(&client->lines, page, node) ||
            !slots_reserved(t, *slot)) &&
           slots_alloc_at(t, *slot);
}

/*
 * Reserve a range of @node's slots for the line of @client's page @page
 * and take its slot there: false if @client owns that line already (its
 * slot was taken) or the store has no free range.
 */
static bool take_new_line(SlotTable *t, NuksmClient *client, uint64_t page,
                          uint32_t node, uint32_t *slot)
{
    uint32_t start;

    if (lines_owns(&client->lines, page, node) ||
        !slots_reserve_range(t, LINE_PAGES, &start)) {
        return false;
    }
    lines_own(&client->lines, page, node, start);
    *slot = start + page % LINE_PAGES;
    return slots_alloc_at(t, *slot);
}

/*
 * A new slot of @node for @v's page @vpage and @u's page @upage.  Of the
 * two VMs, the one that joined first (the lower id) keeps its pages in
 * line: its slot in line if free, else the first slot of a new line of
 * its own; only when neither can be had the other's slot in line, else
 * the next free one.  Both pages' lines then follow it unless they are
 * owned (lines.h).  False when the store is full.
 */
static bool place_slot(NuksmAgent *agent, uint32_t node, NuksmClient *v,
                       uint64_t vpage, NuksmClient *u, uint64_t upage,
                       uint32_t *slot)
{
    SlotTable *t = &agent->ledger.slots[node];
    bool v_first = v->id <= u->id;
    NuksmClient *first = v_first ? v : u, *second = v_first ? u : v;
    uint64_t first_page = v_first ? vpage : upage;
    uint64_t second_page = v_first ? upage : vpage;

    if (!take_in_line(t, first, first_page, node, slot) &&
        !take_new_line(t, first, first_page, node, slot) &&
        !take_in_line(t, second, second_page, node, slot) &&
        !slots_alloc(t, slot)) {
        return false;
    }
    lines_set(&v->lines, vpage, node, *slot);
    lines_set(&u->lines, upage, node, *slot);
    return true;
}

/*
 * @v's candidate @c and the unstable entry of @u's @upage (placed as
 * @pv and @pu) share a new slot, on the node the policy picks; its
 * content is then uploaded (uploads.h).
 */
static void start_upload(NuksmAgent *agent, NuksmClient *v,
                         const NuksmCandidate *c, const PolicyOwner *pv,
                         NuksmClient *u, uint64_t upage,
                         const PolicyOwner *pu)
{
    uint32_t node = policy_new_copy(agent->placement.policy,
                                    agent_policy_load(agent), pv, pu,
                                    c->digest);
    uint32_t slot;
    SlotId id;

    if (!conditions_store_has_room(agent) ||
        !quotas_store_has_room(agent, v->domain_id)) {
        return;
    }
    if (!place_slot(agent, node, v, c->page, u, upage, &slot)) {
        conditions_store_full(agent, "store node %u holds its %u pages", node,
                              STORE_SLOTS);
        return;
    }
    id = slot_id(node, slot);
    ledger_take_slot(agent, id, v->domain_id);

    uploads_start(agent, id, c->digest, v, c->page, u, upage);
    copies_publish(agent, id, c->digest);
}

/* The @i-th node to look at for a page of home @home: home first. */
static uint32_t nth_node(uint32_t home, uint32_t i)
{
    return i == 0 ? home : i <= home ? i - 1 : i;
}

/*
 * What the content table holds for a candidate's content on each node,
 * each node probed once, when first looked at; valid while the table
 * does not change.
 */
typedef struct CandidateProbes {
    ContentProbe node[NUKSM_MAX_NODES];
    uint64_t probed;         /* bit n: node n was */
} CandidateProbes;

_Static_assert(NUKSM_MAX_NODES <= 64, "a bit per node");

static ContentProbe *probe_node(NuksmAgent *agent, NuksmClient *v,
                                const NuksmCandidate *c,
                                CandidateProbes *cp, uint32_t node)
{
    if (!(cp->probed & (1ull << node))) {
        contents_probe(&agent->contents, v->domain_id, node, c->digest,
                       &cp->node[node]);
        cp->probed |= 1ull << node;
    }
    return &cp->node[node];
}

/* Join a copy of @c's content that @v's page may map; false if none. */
static bool join_copy(NuksmAgent *agent, NuksmClient *v,
                      const NuksmCandidate *c, const PolicyOwner *pv,
                      CandidateProbes *cp)
{
    for (uint32_t i = 0; i < agent->nr_nodes; i++) {
        uint32_t node = nth_node(pv->home, i);
        const ContentEntry *copy;

        if (!policy_may_map(agent->placement.policy, pv, node)) {
            continue;
        }
        copy = probe_node(agent, v, c, cp, node)->copy;
        if (copy) {
            copies_join(agent, v, c->page, copy->copy_slot);
            return true;
        }
    }
    return false;
}

/* Is page @o kept from a copy on @node only by being hot (or warm)? */
static bool kept_by_hotness(NuksmAgent *agent, const PolicyOwner *o,
                            uint32_t node)
{
    PolicyOwner cold = *o;

    cold.hot = cold.warm = false;
    return !policy_may_map(agent->placement.policy, o, node) &&
           policy_may_map(agent->placement.policy, &cold, node);
}

/*
 * Pair @c with an unstable entry of the same content that @v's page may
 * share a copy with, starting its upload; false if none.  Within a VM
 * too: two of its pages with one content share a slot.
 */
static bool pair_unstable(NuksmAgent *agent, NuksmClient *v,
                          const NuksmCandidate *c, const PolicyOwner *pv,
                          CandidateProbes *cp)
{
    for (uint32_t i = 0; i < agent->nr_nodes; i++) {
        uint32_t node = nth_node(pv->home, i);
        PolicyOwner pu;
        NuksmClient *u;
        ContentEntry *ue = copies_unstable_partner(
            agent, probe_node(agent, v, c, cp, node)->seen, node, &u, &pu);
        uint64_t upage;

        if (!ue || (u == v && ue->page == c->page)) {
            continue;
        }
        /* One of the two must upload the content from its memory. */
        if (v->landing && u->landing) {
            continue;
        }
        if (!policy_may_share(agent->placement.policy, pv, &pu)) {
            /*
             * Only hotness keeps two pages of one content from sharing
             * across nodes: those it keeps from the other's node are
             * offered again, to pair once they have cooled down.
             */
            if (kept_by_hotness(agent, &pu, pv->home)) {
                outbox_add_retry(agent, u, ue->page);
            }
            if (kept_by_hotness(agent, pv, pu.home)) {
                outbox_add_retry(agent, v, c->page);
            }
            continue;
        }
        upage = ue->page;
        contents_forget(&agent->contents, ue);
        start_upload(agent, v, c, pv, u, upage, &pu);
        return true;
    }
    return false;
}

/*
 * @c paired with nothing: if no node holds a page seen with its content,
 * it may have been forgotten (wanted.h).  Returns what became of it.
 */
static WantedOutcome unseen_wanted(NuksmAgent *agent, NuksmClient *v,
                                   const NuksmCandidate *c,
                                   CandidateProbes *cp)
{
    uint64_t keys[NUKSM_MAX_NODES];

    for (uint32_t n = 0; n < agent->nr_nodes; n++) {
        const ContentProbe *p = probe_node(agent, v, c, cp, n);

        if (p->seen) {
            return WANTED_NOT;
        }
        keys[n] = p->hash;
    }
    return wanted_unseen(agent, v, c, keys, agent->nr_nodes);
}

/*
 * A candidate is hot when it was written lately (its idle) or when a
 * merged page of its read region was read lately (READS): the copy it
 * may share will be read where it goes.
 */
static void handle_candidate(NuksmAgent *agent, NuksmClient *v,
                             const NuksmCandidate *c)
{
    uint8_t read_idle = client_read_idle(v, c->page);
    uint32_t cold_windows = agent->placement.cold_windows;
    PolicyOwner pv = {
        .client = v->id,
        .home = client_home(v, c->gnode),
        .priority = v->priority,
        .hot = policy_page_hot(c->idle, read_idle, cold_windows),
        .warm = policy_page_warm(c->idle, read_idle, cold_windows),
    };
    const PageRef *e = ledger_page(v, c->page);
    CandidateProbes cp;     /* 2.5 KiB: only probed is set */
    WantedOutcome wanted;

    cp.probed = 0;
    sketch_note(&v->sketch, c->page, c->digest);
    /*
     * A page merges once: it is already merged or on its way there,
     * unless it changed before its slot was filled.
     */
    if (e) {
        uint64_t digest;

        if (!ledger_before_fill(e->state) ||
            (ledger_slot_digest(agent, e->slot, &digest) &&
             digest == c->digest)) {
            return;
        }
        uploads_leave_changed(agent, v, c->page);
    }
    /* No room for it now: offered again, it merges once there is. */
    if (ledger_full(v) ||
        ledger_process_pages(v, true) >= CLIENT_IN_FLIGHT_MAX) {
        outbox_add_retry(agent, v, c->page);
        return;
    }
    if (join_copy(agent, v, c, &pv, &cp) ||
        pair_unstable(agent, v, c, &pv, &cp)) {
        return;
    }
    wanted = unseen_wanted(agent, v, c, &cp);
    if (wanted == WANTED_LATER) {
        return;
    }
    /* The same page seen again only refreshes its entry. */
    contents_remember(&agent->contents, probe_node(agent, v, c, &cp, pv.home),
                      v->contents_slot, c->page, pv.hot, pv.warm,
                      quotas_unstable_max(agent, v->domain_id));
    /*
     * A landing page waits in the VM's buffer: unless a page WANTED
     * may pair with it, it is written into the VM's memory now.
     */
    if ((c->flags & NUKSM_CANDIDATE_LANDING) && wanted == WANTED_NOT) {
        outbox_add_retry(agent, v, c->page);
    }
}

void merge_handle_candidates(NuksmAgent *agent, NuksmClient *client,
                             uint32_t seq, const void *payload)
{
    const NuksmMsgBatch *batch = payload;
    const NuksmCandidate *c = (const NuksmCandidate *)(batch + 1);
    uint32_t found = 0;
    bool held;

    if (!conditions_memory_has_room(agent)) {
        return;
    }
    held = budget_vm_held(agent, client);
    for (uint32_t i = 0; i < batch->count; i++) {
        const NuksmMsgTopology *t = client->home.topology;
        uint32_t gnodes = t ? t->nr_gnodes : 1;

        if (c[i].page >= LEDGER_PAGE_LIMIT) {
            transport_reject(client, seq, NUKSM_ERR_BAD_MESSAGE,
                             "CANDIDATES: page %#" PRIx64 " out of range",
                             c[i].page);
            return;
        }
        if (c[i].gnode >= gnodes) {
            transport_reject(client, seq, NUKSM_ERR_BAD_MESSAGE,
                             "CANDIDATES: guest node %u of page %#" PRIx64
                             " out of range (%u guest node%s)", c[i].gnode,
                             c[i].page, gnodes, gnodes == 1 ? "" : "s");
            return;
        }
        /*
         * Merging rests for it (run=off, pressure or a prune): offered
         * again once it works, as its scanner passes again only then.
         */
        client->landing = c[i].flags & NUKSM_CANDIDATE_LANDING;
        if (held) {
            outbox_add_retry(agent, client, c[i].page);
            continue;
        }
        handle_candidate(agent, client, &c[i]);
        found += !(c[i].flags & NUKSM_CANDIDATE_WANTED);
    }
    /* What its scanner found: a sign of new duplicates (budget.h). */
    if (found) {
        client->share.offered += found;
        budget_signed(agent, client);
    }
}

void merge_handle_merged(NuksmAgent *agent, NuksmClient *client,
                         uint32_t seq, const void *payload)
{
    const NuksmMsgBatch *batch = payload;
    const NuksmSlotRef *refs = (const NuksmSlotRef *)(batch + 1);

    for (uint32_t i = 0; i < batch->count; i++) {
        PageRef *e = ledger_expect_entry(agent, client, seq,
                                         NUKSM_MSG_MERGED, &refs[i],
                                         PAGE_MERGING);

        if (!e) {
            return;
        }
        if (refs[i].status == NUKSM_STATUS_MERGED) {
            ledger_map(agent, client, e);
        } else {
            ledger_drop(agent, client, refs[i].page);
        }
    }
}

void merge_handle_unmerged(NuksmAgent *agent, NuksmClient *client,
                           uint32_t seq, const void *payload)
{
    const NuksmMsgBatch *batch = payload;
    const NuksmSlotRef *refs = (const NuksmSlotRef *)(batch + 1);

    for (uint32_t i = 0; i < batch->count; i++) {
        if (!ledger_expect_entry(agent, client, seq, NUKSM_MSG_UNMERGED,
                                 &refs[i], PAGE_MAPPED)) {
            return;
        }
        ledger_drop(agent, client, refs[i].page);
    }
}
