/*
 * nuksmd re-placement.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <inttypes.h>

#include "agent.h"
#include "copies.h"
#include "ledger.h"
#include "log.h"
#include "merge.h"
#include "nuksm-digest.h"
#include "outbox.h"
#include "policy.h"
#include "relocate.h"
#include "transport.h"

/* A merged page of a VM, as a pass finds it. */
typedef struct MergedPage {
    SlotId slot;
    uint32_t client;
    uint64_t page;
} MergedPage;

/* A planned move: @client's @page leaves slot @from for a copy on @node. */
typedef struct RelocateMove {
    SlotId from;
    uint32_t client;
    uint64_t page;
    uint32_t node;
    uint16_t domain;         /* of @from: counts it, and is held, while */
                             /* the move is planned */
} RelocateMove;

static gboolean on_tick(gpointer opaque);

void relocate_init(NuksmAgent *agent, uint32_t rate)
{
    agent->relocator = (Relocator) {
        .rate = rate,
        .plan = g_array_new(FALSE, FALSE, sizeof(RelocateMove)),
    };
}

void relocate_destroy(NuksmAgent *agent)
{
    Relocator *r = &agent->relocator;

    g_clear_handle_id(&r->pass_timer, g_source_remove);
    g_clear_handle_id(&r->tick_timer, g_source_remove);
    g_clear_pointer(&r->plan, g_array_unref);
}

uint64_t relocate_pending(const NuksmAgent *agent)
{
    const Relocator *r = &agent->relocator;

    return r->plan ? r->plan->len - r->next : 0;
}

static gint compare_sharers(gconstpointer a, gconstpointer b)
{
    const MergedPage *x = a, *y = b;

    return x->slot < y->slot ? -1 : x->slot > y->slot;
}

/*
 * Every mapped page of every VM that has nothing parked, by slot; into
 * *@moving, how many were left out because a MOVE is under way for them.
 */
static GArray *find_sharers(NuksmAgent *agent, uint64_t *moving)
{
    GArray *sharers = g_array_new(FALSE, FALSE, sizeof(MergedPage));
    GHashTableIter it;
    NuksmClient *client;

    g_hash_table_iter_init(&it, agent->ledger.vms);
    while (g_hash_table_iter_next(&it, NULL, (gpointer *)&client)) {
        const PageRef *e;
        uint64_t page;

        if (client->parked_pages) {
            continue;       /* its RESTORE will tell what it maps */
        }
        for (size_t pos = 0;
             (e = pagerefs_next(&client->pages, &pos, &page));) {
            MergedPage s = { .slot = e->slot, .client = client->id,
                             .page = page };

            if (e->state != PAGE_MAPPED) {
                continue;
            }
            if (ledger_move(client, page)) {
                (*moving)++;
            } else {
                g_array_append_val(sharers, s);
            }
        }
    }
    g_array_sort(sharers, compare_sharers);
    return sharers;
}

static void plan_move(NuksmAgent *agent, SlotId from, const MergedPage *s,
                      uint32_t node)
{
    RelocateMove mv = {
        .from = from, .client = s->client, .page = s->page, .node = node,
        .domain = ledger_slot(agent, from)->domain,
    };

    domains_hold(&agent->domains, mv.domain);
    domains_stats(&agent->domains, mv.domain)->moves_pending++;
    g_array_append_val(agent->relocator.plan, mv);
}

/* A planned move leaves the plan: carried out, or dropped. */
static void unplan(NuksmAgent *agent, const RelocateMove *mv)
{
    domains_stats(&agent->domains, mv->domain)->moves_pending--;
    domains_put(&agent->domains, mv->domain);
}

/* Drop the moves not carried out yet. */
static void drop_plan(NuksmAgent *agent)
{
    Relocator *r = &agent->relocator;

    for (guint i = r->next; i < r->plan->len; i++) {
        unplan(agent, &g_array_index(r->plan, RelocateMove, i));
    }
    g_array_set_size(r->plan, 0);
    r->next = 0;
}

/* Do the @n owners @o have more than one home node? */
static bool owners_apart(const PolicyOwner *o, size_t n)
{
    for (size_t i = 1; i < n; i++) {
        if (o[i].home != o[0].home) {
            return true;
        }
    }
    return false;
}

/* Plan the moves of the @n pages @sh that map slot @id. */
static void plan_slot(NuksmAgent *agent, SlotId id, const MergedPage *sh,
                      size_t n, PolicyLoad *load)
{
    g_autofree PolicyOwner *o = g_new(PolicyOwner, n);
    uint32_t node = slot_id_node(id), target;
    uint64_t digest = 0;

    for (size_t i = 0; i < n; i++) {
        const NuksmClient *client = ledger_client(agent, sh[i].client);
        uint8_t read_idle = client_read_idle(client, sh[i].page);
        uint32_t cold_windows = agent->placement.cold_windows;

        /* A merged page is never written: a write ends its sharing. */
        o[i] = (PolicyOwner) {
            .client = client->id,
            .home = client_home_of_page(client, sh[i].page),
            .priority = client->priority,
            .hot = policy_page_hot(NUKSM_IDLE_NEVER, read_idle,
                                   cold_windows),
            .warm = policy_page_warm(NUKSM_IDLE_NEVER, read_idle,
                                     cold_windows),
        };
    }
    if (policy_moves_pages(agent->placement.policy)) {
        bool owner_there = false;

        for (size_t i = 0; i < n; i++) {
            owner_there |= o[i].home == node;
        }
        for (size_t i = 0; i < n; i++) {
            target = policy_relocate_page(agent->placement.policy, &o[i],
                                          node, owner_there);
            if (target != node) {
                plan_move(agent, id, &sh[i], target);
            }
        }
        return;
    }
    /*
     * The policy's draw is of the content (policy.h), which the slot does
     * not keep: read it only where the owners' homes differ, the one case
     * where the draw can change where the copy goes.
     */
    if (owners_apart(o, n) && !ledger_slot_digest(agent, id, &digest)) {
        return;
    }
    target = policy_relocate_node(agent->placement.policy, load, node, o, n,
                                  digest);
    if (target == node) {
        return;
    }
    load->copies[node]--;
    load->copies[target]++;
    for (size_t i = 0; i < n; i++) {
        plan_move(agent, id, &sh[i], target);
    }
}

static gboolean on_pass(gpointer opaque)
{
    NuksmAgent *agent = opaque;
    Relocator *r = &agent->relocator;
    uint64_t moving = 0;
    g_autoptr(GArray) sharers = find_sharers(agent, &moving);
    /* A copy: the plan moves copies between the nodes as it goes. */
    PolicyLoad load = *agent_policy_load(agent);

    r->pass_timer = 0;
    drop_plan(agent);
    for (guint i = 0; i < sharers->len;) {
        const MergedPage *first = &g_array_index(sharers, MergedPage, i);
        guint n = 1;

        while (i + n < sharers->len &&
               g_array_index(sharers, MergedPage, i + n).slot == first->slot) {
            n++;
        }
        plan_slot(agent, first->slot, first, n, &load);
        i += n;
    }
    log_info("re-placement: %u of %u merged pages to move under policy "
             "%s, at most %u per second (%" PRIu64 " moving, looked at "
             "later)", r->plan->len, sharers->len,
             nuksm_policy_name(agent->placement.policy), r->rate, moving);
    /*
     * Only while fewer pages are moving than at the last pass: a VM that
     * never answers its MOVEs must not cost a pass a second.
     */
    r->recheck = moving > 0 && (!r->moving || moving < r->moving);
    r->moving = moving;
    if (r->plan->len && !r->tick_timer) {
        r->tick_timer = g_timeout_add(RELOCATE_TICK_MS, on_tick, agent);
    } else if (!r->plan->len && r->recheck) {
        r->pass_timer = g_timeout_add(RELOCATE_RECHECK_MS, on_pass, agent);
    }
    return G_SOURCE_REMOVE;
}

void relocate_request(NuksmAgent *agent, const char *why)
{
    Relocator *r = &agent->relocator;

    /*
     * Under global and adaptive every merged page may stay where it is:
     * moves planned under the previous policy are dropped.
     */
    if (!r->rate || !policy_moves_copies(agent->placement.policy)) {
        drop_plan(agent);
        return;
    }
    log_debug("re-placement requested: %s", why);
    if (!r->pass_timer) {
        r->pass_timer = g_timeout_add(RELOCATE_DEBOUNCE_MS, on_pass, agent);
    }
}

/*
 * The copy of slot @from's content on @node: the one there already, or a
 * new slot the content is copied to.  False if there is none ready and
 * none can be made.
 */
static bool copy_on_node(NuksmAgent *agent, SlotId from, uint32_t node,
                         SlotId *to)
{
    const Slot *s = ledger_slot(agent, from);
    uint8_t content[NUKSM_PAGE_SIZE];
    uint64_t digest;
    uint32_t slot;

    if (!store_read(&agent->store, s->domain, slot_id_node(from),
                    slot_id_slot(from), content)) {
        return false;
    }
    digest = nuksm_page_digest(content, NUKSM_PAGE_SIZE);
    if (contents_copy_of(&agent->contents, s->domain, node, digest, to)) {
        return ledger_slot(agent, *to)->state == SLOT_READY;
    }
    if (!slots_alloc(&agent->ledger.slots[node], &slot)) {
        return false;
    }
    *to = slot_id(node, slot);
    ledger_take_slot(agent, *to, s->domain);
    if (!copies_fill(agent, *to, content)) {
        ledger_free(agent, *to);
        return false;
    }
    copies_publish(agent, *to, digest);
    return true;
}

/* Carry out @mv if it still makes sense. */
static void start_move(NuksmAgent *agent, const RelocateMove *mv)
{
    NuksmClient *client = ledger_client(agent, mv->client);
    const PageRef *e = client ? ledger_page(client, mv->page) : NULL;
    SlotId to;

    if (!e || e->state != PAGE_MAPPED || e->slot != mv->from ||
        client->parked_pages || ledger_move(client, mv->page) ||
        !copy_on_node(agent, mv->from, mv->node, &to)) {
        return;     /* the page left, or a later pass will see to it */
    }
    ledger_move_start(agent, client, mv->page, to);
    outbox_add_move(agent, client, mv->page, mv->from,
                    ledger_slot(agent, mv->from)->gen, to,
                    ledger_slot(agent, to)->gen);
}

static gboolean on_tick(gpointer opaque)
{
    NuksmAgent *agent = opaque;
    Relocator *r = &agent->relocator;
    guint budget = MAX(1, r->rate * RELOCATE_TICK_MS / 1000);

    while (budget-- && r->next < r->plan->len) {
        const RelocateMove *mv = &g_array_index(r->plan, RelocateMove,
                                                r->next++);

        start_move(agent, mv);
        unplan(agent, mv);
    }
    if (r->next < r->plan->len) {
        return G_SOURCE_CONTINUE;
    }
    g_array_set_size(r->plan, 0);
    r->next = 0;
    r->tick_timer = 0;
    if (r->recheck) {
        relocate_request(agent, "pages were moving during the last pass");
    }
    return G_SOURCE_REMOVE;
}

void relocate_handle_moved(NuksmAgent *agent, NuksmClient *client,
                           uint32_t seq, const void *payload)
{
    const NuksmMsgBatch *batch = payload;
    const NuksmMove *m = (const NuksmMove *)(batch + 1);

    for (uint32_t i = 0; i < batch->count; i++) {
        const KeyMapEntry *move;
        const PageRef *e;

        if (!ledger_check_ref(agent, client, seq, "MOVED", &m[i].from) ||
            !ledger_check_ref(agent, client, seq, "MOVED", &m[i].to)) {
            return;
        }
        move = ledger_move(client, m[i].to.page);
        if (!move || move->value != slot_id(m[i].to.node, m[i].to.slot) ||
            ledger_slot(agent, move->value)->gen != m[i].to.gen) {
            transport_reject(client, seq, NUKSM_ERR_BAD_MESSAGE,
                             "MOVED for page %#" PRIx64 " to node %u slot %u, "
                             "which has no MOVE awaiting an answer",
                             m[i].to.page, m[i].to.node, m[i].to.slot);
            return;
        }
        if (m[i].to.status != NUKSM_STATUS_MERGED) {
            ledger_move_cancel(agent, client, m[i].to.page);
            continue;
        }
        e = ledger_page(client, m[i].from.page);
        if (!e || e->state != PAGE_MAPPED ||
            e->slot != slot_id(m[i].from.node, m[i].from.slot)) {
            transport_reject(client, seq, NUKSM_ERR_BAD_MESSAGE,
                             "MOVED for page %#" PRIx64 " from node %u slot "
                             "%u, which it does not map", m[i].from.page,
                             m[i].from.node, m[i].from.slot);
            return;
        }
        ledger_move_done(agent, client, m[i].from.page);
        agent->relocator.moved++;
        domains_stats(&agent->domains, client->domain_id)->pages_moved++;
    }
    /*
     * The last pass left pages whose MOVE was under way to a later look:
     * as their answers come, look again once no plan is being carried
     * out.  A VM that never answers asks for no pass.
     */
    if (agent->relocator.moving && !agent->relocator.tick_timer) {
        relocate_request(agent, "moves a pass skipped were answered");
    }
}
