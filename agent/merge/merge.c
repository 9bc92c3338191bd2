/*
 * nuksmd merge engine.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <inttypes.h>
#include <unistd.h>

#include "conditions.h"
#include "copies.h"
#include "detached.h"
#include "home.h"
#include "ledger.h"
#include "log.h"
#include "merge.h"
#include "nuksm-digest.h"
#include "outbox.h"
#include "peek.h"
#include "policy.h"
#include "quotas.h"
#include "transport.h"

/*
 * Pages of one process on their way to a slot, over all its VM
 * connections (ledger_process_pages()): 256 MiB of guest memory in
 * flight, a bound on what a process that never uploads or answers can
 * hold, however many connections it opens.  A VM offering more at once
 * (its first passes over gigabytes of duplicates) is sent a RETRY for
 * the rest.
 */
#define CLIENT_IN_FLIGHT_MAX (1u << 16)

/* Fewer clients than slots: a joining VM always gets one. */
_Static_assert(CLIENTS_MAX < UNSTABLE_CLIENTS, "a VM has an unstable slot");

void merge_client_join(NuksmAgent *agent, NuksmClient *client)
{
    client->joined = true;
    /* Fixed while nuksmd runs: the transport only compares with it. */
    client->queue_max = quotas_queue_max(agent, client->domain_id);
    domains_stats(&agent->domains, client->domain_id)->vms++;
    keymap_init(&client->pages, agent->index.seed);
    keymap_init(&client->read_regions, agent->index.seed);
    sketch_init(&client->sketch, agent->index.seed);
    client->colocation.plan_verdict = NUKSM_PLAN__MAX;
    client->colocated_to = NUKSM_MAX_NODES;
    lines_init(&client->lines);
    client->to_merge = g_array_new(FALSE, FALSE, sizeof(NuksmSlotRef));
    client->to_upload = g_array_new(FALSE, FALSE, sizeof(NuksmSlotRef));
    client->to_read = g_array_new(FALSE, FALSE, sizeof(NuksmSlotRef));
    client->to_move = g_array_new(FALSE, FALSE, sizeof(NuksmMove));
    client->to_retry = g_array_new(FALSE, FALSE, sizeof(NuksmSlotRef));
    g_hash_table_insert(agent->ledger.vms, GUINT_TO_POINTER(client->id),
                        client);
    client->unstable_slot = unstable_client_add(&agent->unstable, client->id,
                                                client->domain_id);
    g_assert(client->unstable_slot);
    detached_adopt(agent, client);

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

bool merge_check_ref(NuksmAgent *agent, NuksmClient *client, uint32_t seq,
                     const char *what, const NuksmSlotRef *r)
{
    g_autofree char *problem = ledger_ref_problem(agent, r);

    if (problem) {
        transport_reject(client, seq, NUKSM_ERR_BAD_MESSAGE, "%s: %s",
                         what, problem);
        return false;
    }
    return true;
}

/*
 * An uploader that let its time pass (LEDGER_UPLOAD_SECONDS) is asked to
 * upload only where no other sharer can for this long, doubled with
 * each further miss up to the maximum: a client that claims contents
 * and never uploads them cannot keep a domain's other VMs from merging
 * them, and a VM alone in its domain still merges its own pages.
 */
#define UPLOAD_BAN_SECONDS 60
#define UPLOAD_BAN_MAX_SECONDS 3600

/* Revoked uploads of a client, remembered until they come or this many. */
#define REVOKED_UPLOADS_MAX CLIENT_IN_FLIGHT_MAX

static bool trusted_uploader(const NuksmClient *client)
{
    return g_get_monotonic_time() >= client->distrusted_until;
}

/*
 * A revoked upload: an upload of a page to a slot and generation that
 * is no longer awaited.  A page may have several on their way at once
 * (it changed again after it was asked to upload anew).
 */
typedef struct RevokedUpload {
    uint64_t page;
    uint64_t slot_gen;      /* generation << 32 | slot id */
} RevokedUpload;

static guint revoked_hash(gconstpointer key)
{
    const RevokedUpload *r = key;

    return g_int64_hash(&r->page) ^ g_int64_hash(&r->slot_gen);
}

static gboolean revoked_equal(gconstpointer a, gconstpointer b)
{
    const RevokedUpload *x = a, *y = b;

    return x->page == y->page && x->slot_gen == y->slot_gen;
}

static RevokedUpload revoked_key(uint64_t page, SlotId id, uint32_t gen)
{
    return (RevokedUpload){ .page = page,
                            .slot_gen = (uint64_t)gen << 32 | id };
}

/*
 * @client's @page is to upload to @id: the agent reads it from the VM's
 * memory when it can (merge_read_uploads()), else asks the VM.  Were an
 * upload of it to that slot and generation revoked, the one that comes
 * now answers this.
 */
static void ask_upload(NuksmAgent *agent, NuksmClient *client, uint64_t page,
                       SlotId id)
{
    uint32_t gen = ledger_slot(agent, id)->gen;
    uint64_t addr;

    if (client->revoked_uploads) {
        RevokedUpload key = revoked_key(page, id, gen);

        g_hash_table_remove(client->revoked_uploads, &key);
    }
    if (!client->read_errno && client_page_address(client, page, &addr)) {
        outbox_add_read(agent, client, page, id, gen);
    } else {
        outbox_add(agent, client, NUKSM_MSG_UPLOAD_REQ, page, id, gen);
    }
}

/*
 * @client's upload of @page to @id (generation @gen) is no longer
 * awaited: should it come, it is ignored.
 */
static void revoke_upload(NuksmClient *client, uint64_t page, SlotId id,
                          uint32_t gen)
{
    RevokedUpload key = revoked_key(page, id, gen);

    if (!client->revoked_uploads ||
        g_hash_table_size(client->revoked_uploads) >= REVOKED_UPLOADS_MAX) {
        g_clear_pointer(&client->revoked_uploads, g_hash_table_destroy);
        client->revoked_uploads = g_hash_table_new_full(revoked_hash,
                                                        revoked_equal,
                                                        g_free, NULL);
    }
    g_hash_table_add(client->revoked_uploads, g_memdup2(&key, sizeof(key)));
}

/*
 * @client let the upload of @page to @id (generation @gen) pass its
 * time: it may not upload for a while, and its upload, should it come,
 * is ignored.  @first: its first miss of this look.
 */
static void upload_missed(NuksmClient *client, uint64_t page, SlotId id,
                          uint32_t gen, bool first)
{
    revoke_upload(client, page, id, gen);
    if (first) {
        unsigned shift = MIN(client->uploads_missed, 6u);
        unsigned ban = MIN(UPLOAD_BAN_SECONDS << shift,
                           UPLOAD_BAN_MAX_SECONDS);

        client->uploads_missed++;
        client->distrusted_until = g_get_monotonic_time() +
                                       (gint64)ban * G_USEC_PER_SEC;
        log_warning("%s: did not upload in %u s (time %u): other VMs "
                    "upload in its place for %u s", client->label,
                    LEDGER_UPLOAD_SECONDS, client->uploads_missed, ban);
    }
}

/* Hand on the uploads whose time is up; runs while there are uploads. */
static gboolean on_upload_timer(gpointer opaque)
{
    NuksmAgent *agent = opaque;
    g_autoptr(GArray) ids = ledger_uploads_overdue(agent,
                                                   g_get_monotonic_time());
    g_autoptr(GHashTable) late_clients = g_hash_table_new(NULL, NULL);

    for (guint i = 0; i < ids->len; i++) {
        SlotId id = g_array_index(ids, SlotId, i);
        uint32_t gen = ledger_slot(agent, id)->gen;
        LedgerWaiter late, next;

        if (ledger_upload_reassign(agent, id, trusted_uploader, &late,
                                   &next)) {
            ask_upload(agent, next.client, next.page, id);
        }
        if (late.client) {
            upload_missed(late.client, late.page, id, gen,
                          g_hash_table_add(late_clients, late.client));
        }
    }
    if (!g_hash_table_size(agent->ledger.uploads)) {
        agent->ledger.upload_timer = 0;
        return G_SOURCE_REMOVE;
    }
    return G_SOURCE_CONTINUE;
}

/* Look at the uploads' time every second while there are uploads. */
static void watch_uploads(NuksmAgent *agent)
{
    if (!agent->ledger.upload_timer) {
        agent->ledger.upload_timer = g_timeout_add_seconds(1, on_upload_timer,
                                                           agent);
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
 * Would a line of @client starting at slot @start continue the line of
 * the stretch before @page's, or run into the one after, on @node?
 * QEMU's windows end at stretches, and two windows with copies of their
 * own stay two mappings although their slots follow each other, which
 * QEMU's count of its mappings (nuksm-maps.c) does not foresee.
 */
static bool line_adjoins(const NuksmClient *client, uint64_t page,
                         uint32_t node, uint32_t capacity, uint32_t start)
{
    uint64_t first = page - page % LINE_PAGES;
    uint32_t slot;

    return (first && lines_slot(&client->lines, first - 1, node, capacity,
                                &slot) && slot + 1 == start) ||
           (lines_slot(&client->lines, first + LINE_PAGES, node, capacity,
                       &slot) && slot == start + LINE_PAGES);
}

/*
 * Reserve a range of @node's slots for the line of @client's page @page
 * and take its slot there: false if @client owns that line already (its
 * slot was taken) or the store has no free range.
 */
static bool take_new_line(SlotTable *t, NuksmClient *client, uint64_t page,
                          uint32_t node, uint32_t *slot)
{
    /* Two starts adjoin (one per neighbour): one of three ranges will do. */
    uint32_t tried[3], start = UINT32_MAX;
    unsigned n = 0;

    if (lines_owns(&client->lines, page, node)) {
        return false;
    }
    while (n < G_N_ELEMENTS(tried) && start == UINT32_MAX &&
           slots_reserve_range(t, LINE_PAGES, &tried[n])) {
        if (!line_adjoins(client, page, node, t->capacity, tried[n])) {
            start = tried[n];
        }
        n++;
    }
    for (unsigned i = 0; i < n; i++) {
        if (tried[i] != start) {
            slots_unreserve_range(t, tried[i], LINE_PAGES);
        }
    }
    if (start == UINT32_MAX) {
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
 * @pv and @pu) share a new slot.  @v uploads it, unless it missed an
 * upload lately and @u did not.
 */
static void start_upload(NuksmAgent *agent, NuksmClient *v,
                         const NuksmCandidate *c, const PolicyOwner *pv,
                         NuksmClient *u, uint64_t upage,
                         const PolicyOwner *pu)
{
    LedgerWaiter uploader = { v, c->page }, waiter = { u, upage };
    uint32_t node = policy_new_copy(agent->placement.policy,
                                    agent_policy_load(agent), pv, pu,
                                    c->digest);
    uint32_t slot;
    SlotId id;
    Slot *s;

    if (!trusted_uploader(v) && trusted_uploader(u)) {
        uploader = waiter;
        waiter = (LedgerWaiter) { v, c->page };
    }
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
    s = ledger_slot(agent, id);
    s->digest = c->digest;
    ledger_take_slot(agent, id, v->domain_id);

    ledger_upload_start(agent, id);
    ledger_add(agent, uploader.client, uploader.page, id, PAGE_UPLOADING);
    ledger_upload_join(agent, id, uploader.client, uploader.page);
    ledger_add(agent, waiter.client, waiter.page, id, PAGE_WAITING);
    ledger_upload_join(agent, id, waiter.client, waiter.page);
    ask_upload(agent, uploader.client, uploader.page, id);
    watch_uploads(agent);
    copies_publish(agent, id);
}

/* The @i-th node to look at for a page of home @home: home first. */
static uint32_t nth_node(uint32_t home, uint32_t i)
{
    return i == 0 ? home : i <= home ? i - 1 : i;
}

/* Join a copy of @c's content that @v's page may map; false if none. */
static bool join_copy(NuksmAgent *agent, NuksmClient *v,
                      const NuksmCandidate *c, const PolicyOwner *pv)
{
    for (uint32_t i = 0; i < agent->nr_nodes; i++) {
        uint32_t node = nth_node(pv->home, i);
        SlotId id;

        if (policy_may_map(agent->placement.policy, pv, node) &&
            index_lookup(&agent->index, v->domain_id, node, c->digest,
                         &id)) {
            copies_join(agent, v, c->page, id);
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
                          const NuksmCandidate *c, const PolicyOwner *pv)
{
    for (uint32_t i = 0; i < agent->nr_nodes; i++) {
        PolicyOwner pu;
        NuksmClient *u;
        UnstableEntry *ue = copies_unstable_partner(agent, v->domain_id,
                                                    nth_node(pv->home, i),
                                                    c->digest, &u, &pu);
        uint64_t upage;

        if (!ue || (u == v && ue->page == c->page)) {
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
        unstable_remove(&agent->unstable, ue);
        start_upload(agent, v, c, pv, u, upage, &pu);
        return true;
    }
    return false;
}

/*
 * @client's page of entry @e, on its way to a slot (waiting for its
 * upload, or uploading it), is offered with another content: it changed,
 * and leaves the slot, as a page that changed before its upload would
 * when the upload came (the guest reused it, as its page cache does).
 * The slot's upload passes to another of its pages, if any waits.
 */
static void leave_changed(NuksmAgent *agent, NuksmClient *client,
                          KeyMapEntry *e)
{
    SlotId id = e->value;
    bool uploader = e->tag == PAGE_UPLOADING;
    LedgerWaiter late, next;

    if (uploader) {
        revoke_upload(client, e->key, id, ledger_slot(agent, id)->gen);
    }
    /* The last page of the slot frees it, and its upload with it. */
    ledger_drop(agent, client, e);
    if (uploader && ledger_upload_awaited(agent, id) &&
        ledger_upload_reassign(agent, id, trusted_uploader, &late, &next)) {
        ask_upload(agent, next.client, next.page, id);
    }
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
    KeyMapEntry *e = ledger_page(v, c->page);

    sketch_note(&v->sketch, c->page, c->digest);
    /*
     * A page merges once: it is already merged or on its way there,
     * unless it changed before its slot was filled.
     */
    if (e) {
        if (!ledger_before_fill(e->tag) ||
            ledger_slot(agent, e->value)->digest == c->digest) {
            return;
        }
        leave_changed(agent, v, e);
    }
    /* No room for it now: offered again, it merges once there is. */
    if (ledger_full(v) ||
        ledger_process_pages(v, true) >= CLIENT_IN_FLIGHT_MAX) {
        outbox_add_retry(agent, v, c->page);
        return;
    }
    if (join_copy(agent, v, c, &pv) || pair_unstable(agent, v, c, &pv)) {
        return;
    }
    /* The same page seen again only refreshes its entry. */
    unstable_set(&agent->unstable, v->domain_id, pv.home, c->digest,
                 v->unstable_slot, c->page, pv.hot, pv.warm,
                 quotas_unstable_max(agent, v->domain_id));
}

void merge_handle_candidates(NuksmAgent *agent, NuksmClient *client,
                             uint32_t seq, const void *payload)
{
    const NuksmMsgBatch *batch = payload;
    const NuksmCandidate *c = (const NuksmCandidate *)(batch + 1);

    if (!conditions_memory_has_room(agent)) {
        return;
    }
    for (uint32_t i = 0; i < batch->count; i++) {
        uint32_t gnodes = client->topology ? client->topology->nr_gnodes : 1;

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
        handle_candidate(agent, client, &c[i]);
    }
}

/*
 * The entry that @r answers: @client's page in @state on the slot and
 * generation that @r names.  Anything else rejects @client.
 */
static KeyMapEntry *expect_entry(NuksmAgent *agent, NuksmClient *client,
                                 uint32_t seq, NuksmMsgType type,
                                 const NuksmSlotRef *r, PageState state)
{
    static const char *const why[] = {
        [PAGE_UPLOADING] = "which it was not asked to upload",
        [PAGE_MERGING]   = "which has no MERGE awaiting an answer",
        [PAGE_MAPPED]    = "which does not map that slot",
    };
    const char *name = nuksm_msg_type_name(type);
    KeyMapEntry *e;
    Slot *s;

    if (!merge_check_ref(agent, client, seq, name, r)) {
        return NULL;
    }
    e = ledger_page(client, r->page);
    if (!e || e->tag != state || e->value != slot_id(r->node, r->slot)) {
        transport_reject(client, seq, NUKSM_ERR_BAD_MESSAGE,
                         "%s for page %#" PRIx64 " on node %u slot %u, %s",
                         name, r->page, r->node, r->slot, why[state]);
        return NULL;
    }
    s = ledger_slot(agent, e->value);
    if (r->gen != s->gen) {
        transport_reject(client, seq, NUKSM_ERR_BAD_MESSAGE,
                         "%s for node %u slot %u with stale generation %u "
                         "(it is %u)", name, r->node, r->slot, r->gen, s->gen);
        return NULL;
    }
    return e;
}

/* Upload @id is stored: send its sharers still waiting a MERGE. */
static void send_merges(NuksmAgent *agent, SlotId id)
{
    g_autoptr(GArray) waiters = ledger_upload_complete(agent, id);
    uint32_t gen = ledger_slot(agent, id)->gen;

    for (guint i = 0; i < waiters->len; i++) {
        const LedgerWaiter *w = &g_array_index(waiters, LedgerWaiter, i);

        outbox_add(agent, w->client, NUKSM_MSG_MERGE, w->page, id, gen);
    }
}

/*
 * Whether @r is an upload @client was too late for (its page left the
 * slot then): it is ignored, not taken for a protocol violation.
 */
static bool revoked_upload(NuksmClient *client, const NuksmSlotRef *r)
{
    RevokedUpload key = revoked_key(r->page, slot_id(r->node, r->slot),
                                    r->gen);

    return client->revoked_uploads &&
           g_hash_table_remove(client->revoked_uploads, &key);
}

/*
 * @content of @client's page @r arrived for slot @id, sent or read: make
 * the slot of it.  The content is trusted only as far as its digest:
 * every sharer compares it with its own page before mapping the slot, so
 * an uploader that lies can only fail its own merges.
 */
static void store_upload(NuksmAgent *agent, NuksmClient *client,
                         const NuksmSlotRef *r, SlotId id,
                         const uint8_t *content)
{
    if (nuksm_page_digest(content, NUKSM_PAGE_SIZE) !=
        ledger_slot(agent, id)->digest) {
        log_debug("%s: page %#" PRIx64 " changed before its upload, "
                  "dropping node %u slot %u", client->label, r->page,
                  r->node, r->slot);
        ledger_upload_cancel(agent, id);
        return;
    }
    if (!copies_fill(agent, id, content)) {
        ledger_upload_cancel(agent, id);
        return;
    }
    send_merges(agent, id);
}

void merge_handle_upload(NuksmAgent *agent, NuksmClient *client,
                         uint32_t seq, const void *payload)
{
    const NuksmMsgBatch *batch = payload;
    const NuksmSlotRef *refs = (const NuksmSlotRef *)(batch + 1);
    const uint8_t *pages = (const uint8_t *)(refs + batch->count);

    for (uint32_t i = 0; i < batch->count; i++) {
        KeyMapEntry *e;

        if (revoked_upload(client, &refs[i])) {
            log_debug("%s: page %#" PRIx64 " uploaded after its time, "
                      "ignored", client->label, refs[i].page);
            continue;
        }
        e = expect_entry(agent, client, seq, NUKSM_MSG_UPLOAD, &refs[i],
                         PAGE_UPLOADING);
        if (!e) {
            return;
        }
        client->uploads_sent++;
        store_upload(agent, client, &refs[i], e->value,
                     pages + (size_t)i * NUKSM_PAGE_SIZE);
    }
}

/*
 * Is @client's upload @r still awaited (queued to read, it may have been
 * revoked or handed on since)?  Then its entry's slot.
 */
static bool upload_awaited(NuksmAgent *agent, NuksmClient *client,
                           const NuksmSlotRef *r, SlotId *id)
{
    KeyMapEntry *e = ledger_page(client, r->page);

    *id = slot_id(r->node, r->slot);
    return !revoked_upload(client, r) && e && e->tag == PAGE_UPLOADING &&
           e->value == *id && ledger_slot(agent, *id)->gen == r->gen;
}

/* Read @client's @n uploads @refs from its memory, or ask for them. */
static void read_uploads(NuksmAgent *agent, NuksmClient *client,
                         const NuksmSlotRef *refs, size_t n, uint8_t *buf)
{
    uint64_t addrs[PEEK_PAGES_MAX];
    bool read[PEEK_PAGES_MAX] = {};

    for (size_t k = 0; k < n; k++) {
        /* Its TOPOLOGY may have changed since: 0 is not read. */
        if (!client_page_address(client, refs[k].page, &addrs[k])) {
            addrs[k] = 0;
        }
    }
    if (!client->read_errno) {
        client->read_errno = peek_pages(client->pid, client->pidfd, addrs, n,
                                        buf, read);
        if (client->read_errno) {
            log_warning("%s: cannot read its memory (%s): it uploads the "
                        "content of new slots itself", client->label,
                        g_strerror(client->read_errno));
        }
    }
    for (size_t k = 0; k < n; k++) {
        SlotId id;

        if (!upload_awaited(agent, client, &refs[k], &id)) {
            continue;
        }
        if (read[k]) {
            client->uploads_read++;
            store_upload(agent, client, &refs[k], id,
                         buf + k * NUKSM_PAGE_SIZE);
        } else {
            outbox_add(agent, client, NUKSM_MSG_UPLOAD_REQ, refs[k].page, id,
                       refs[k].gen);
        }
    }
}

/* The uploads to read of a client in the outbox, taken; NULL if none. */
static GArray *take_reads(NuksmAgent *agent, NuksmClient **client)
{
    for (guint i = 0; i < agent->effects.outbox->len; i++) {
        NuksmClient *c = g_ptr_array_index(agent->effects.outbox, i);
        GArray *refs = c->to_read;

        if (refs && refs->len) {
            c->to_read = g_array_new(FALSE, FALSE, sizeof(NuksmSlotRef));
            *client = c;
            return refs;
        }
    }
    return NULL;
}

void merge_read_uploads(NuksmAgent *agent)
{
    g_autofree uint8_t *buf = NULL;
    NuksmClient *client;
    GArray *refs;

    /* What is stored may queue more (the outbox grows): until none is. */
    while ((refs = take_reads(agent, &client))) {
        if (!buf) {
            buf = g_malloc(PEEK_PAGES_MAX * NUKSM_PAGE_SIZE);
        }
        for (guint k = 0; k < refs->len && !client->dead;
             k += PEEK_PAGES_MAX) {
            read_uploads(agent, client,
                         &g_array_index(refs, NuksmSlotRef, k),
                         MIN(refs->len - k, PEEK_PAGES_MAX), buf);
        }
        g_array_unref(refs);
    }
}

void merge_handle_merged(NuksmAgent *agent, NuksmClient *client,
                         uint32_t seq, const void *payload)
{
    const NuksmMsgBatch *batch = payload;
    const NuksmSlotRef *refs = (const NuksmSlotRef *)(batch + 1);

    for (uint32_t i = 0; i < batch->count; i++) {
        KeyMapEntry *e = expect_entry(agent, client, seq, NUKSM_MSG_MERGED,
                                      &refs[i], PAGE_MERGING);

        if (!e) {
            return;
        }
        if (refs[i].status == NUKSM_STATUS_MERGED) {
            ledger_map(agent, client, e);
        } else {
            ledger_drop(agent, client, e);
        }
    }
}

void merge_handle_unmerged(NuksmAgent *agent, NuksmClient *client,
                           uint32_t seq, const void *payload)
{
    const NuksmMsgBatch *batch = payload;
    const NuksmSlotRef *refs = (const NuksmSlotRef *)(batch + 1);

    for (uint32_t i = 0; i < batch->count; i++) {
        KeyMapEntry *e = expect_entry(agent, client, seq, NUKSM_MSG_UNMERGED,
                                      &refs[i], PAGE_MAPPED);

        if (!e) {
            return;
        }
        ledger_drop(agent, client, e);
    }
}

void merge_stop(NuksmAgent *agent)
{
    if (agent->ledger.upload_timer) {
        g_source_remove(agent->ledger.upload_timer);
        agent->ledger.upload_timer = 0;
    }
}
