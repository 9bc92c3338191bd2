/*
 * nuksmd ledger: who uses which slot.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <inttypes.h>
#include <string.h>

#include "ledger.h"
#include "nuksm-digest.h"
#include "transport.h"
#include "outbox.h"
#include "quotas.h"
#include "store.h"

/* A page waiting for a slot's upload. */
typedef struct UploadSharer {
    uint64_t page;
    uint32_t client;         /* id: the client may leave meanwhile */
} UploadSharer;

/*
 * A slot being uploaded.  Its sharers are a plain malloc()ed array, not
 * a GArray: GLib before 2.76 takes a GArray's header from its slice
 * allocator, which keeps what a flood of uploads used once they are
 * done, where malloc_trim() cannot give it back.
 */
typedef struct Upload {
    uint64_t digest;         /* of the content expected */
    gint64 deadline;         /* monotonic us: the uploader's time is up */
    UploadSharer *sharers;   /* the uploader's first */
    guint len;
    guint alloc;             /* sharers[] has room for this many */
} Upload;

static void upload_free(Upload *up)
{
    g_free(up->sharers);
    g_free(up);
}

G_DEFINE_AUTOPTR_CLEANUP_FUNC(Upload, upload_free)

void ledger_init(NuksmAgent *agent, uint32_t gen)
{
    for (uint32_t n = 0; n < agent->nr_nodes; n++) {
        slots_init(&agent->ledger.slots[n], STORE_SLOTS, gen);
    }
    agent->ledger.vms = g_hash_table_new(NULL, NULL);
    agent->ledger.uploads = g_hash_table_new_full(NULL, NULL, NULL,
                                                  (GDestroyNotify)upload_free);
}

void ledger_destroy(NuksmAgent *agent)
{
    g_clear_pointer(&agent->ledger.vms, g_hash_table_destroy);
    g_clear_pointer(&agent->ledger.uploads, g_hash_table_destroy);
    for (uint32_t n = 0; n < agent->nr_nodes; n++) {
        slots_destroy(&agent->ledger.slots[n]);
    }
}

NuksmClient *ledger_client(NuksmAgent *agent, uint32_t client_id)
{
    return g_hash_table_lookup(agent->ledger.vms, GUINT_TO_POINTER(client_id));
}

void ledger_take_slot(NuksmAgent *agent, SlotId id, uint16_t domain)
{
    ledger_slot(agent, id)->domain = domain;
    domains_hold(&agent->domains, domain);
    domains_stats(&agent->domains, domain)->store_pages[slot_id_node(id)]++;
}

void ledger_release_slot(NuksmAgent *agent, SlotId id)
{
    uint16_t domain = ledger_slot(agent, id)->domain;

    slots_release(ledger_table(agent, id), slot_id_slot(id));
    domains_stats(&agent->domains, domain)->store_pages[slot_id_node(id)]--;
    quotas_store_released(agent, domain);
    domains_put(&agent->domains, domain);
}

/*
 * A page maps slot @id now, or no longer: the slot tables and the
 * domain count shared and sharing pages alike.  put_ref() returns true
 * when the slot is unused.
 */
static void get_ref(NuksmAgent *agent, SlotId id)
{
    Slot *s = ledger_slot(agent, id);
    DomainStats *stats = domains_stats(&agent->domains, s->domain);

    slots_get_ref(ledger_table(agent, id), slot_id_slot(id));
    if (s->refs == 1) {
        stats->pages_shared++;
    } else {
        stats->pages_sharing++;
    }
}

static bool put_ref(NuksmAgent *agent, SlotId id)
{
    Slot *s = ledger_slot(agent, id);
    DomainStats *stats = domains_stats(&agent->domains, s->domain);
    bool unused = slots_put_ref(ledger_table(agent, id), slot_id_slot(id));

    if (s->refs == 0) {
        stats->pages_shared--;
    } else {
        stats->pages_sharing--;
    }
    return unused;
}

/*
 * Slot @id lost its last user.  Unless a process may map it although no
 * reference says so (@may_be_mapped, or it was restored: processes that
 * did not restore it yet may), it is freed; such a one that holds its
 * content is kept as an orphan instead, freed once no process maps it.
 */
static void slot_unused(NuksmAgent *agent, SlotId id, bool may_be_mapped)
{
    Slot *s = ledger_slot(agent, id);

    if ((may_be_mapped || s->restored) && s->state == SLOT_READY) {
        ledger_orphan(agent, id);
    } else {
        ledger_free(agent, id);
    }
}

uint64_t ledger_process_pages(const NuksmClient *client, bool in_flight)
{
    const NuksmClient *c = client;
    uint64_t pages = 0;

    do {
        pages += pagerefs_entries(&c->pages) -
                 (in_flight ? c->merged_pages : 0);
        c = c->pid_next;
    } while (c != client);
    return pages;
}

char *ledger_ref_problem(NuksmAgent *agent, const NuksmSlotRef *r)
{
    if (r->node >= agent->nr_nodes) {
        return g_strdup_printf("node %u out of range (%u node%s)", r->node,
                               agent->nr_nodes,
                               agent->nr_nodes == 1 ? "" : "s");
    }
    if (r->slot >= STORE_SLOTS) {
        return g_strdup_printf("slot %u out of range (%u slots per node)",
                               r->slot, STORE_SLOTS);
    }
    if (r->page >= LEDGER_PAGE_LIMIT) {
        return g_strdup_printf("page %#" PRIx64 " out of range", r->page);
    }
    return NULL;
}

void ledger_add(NuksmAgent *agent, NuksmClient *client, uint64_t page,
                SlotId id, PageState state)
{
    SlotTable *t = ledger_table(agent, id);

    pagerefs_add(&client->pages, page, id, state);
    if (state == PAGE_MAPPED) {
        get_ref(agent, id);
        client->merged_pages++;
    } else {
        slots_get_pending(t, slot_id_slot(id));
    }
}

void ledger_move_start(NuksmAgent *agent, NuksmClient *client,
                       uint64_t page, SlotId to)
{
    bool added;
    KeyMapEntry *e = keymap_insert(&client->pages.moves, page, 0, &added);

    g_assert(added);
    e->value = to;
    e->tag = PAGE_MERGING;
    slots_get_pending(ledger_table(agent, to), slot_id_slot(to));
}

void ledger_move_done(NuksmAgent *agent, NuksmClient *client, uint64_t page)
{
    KeyMapEntry *move = ledger_move(client, page);
    PageRef *e = ledger_page(client, page);
    SlotId to = move->value, from = e->slot;

    keymap_remove(&client->pages.moves, move);
    e->slot = to;
    get_ref(agent, to);
    slots_put_pending(ledger_table(agent, to), slot_id_slot(to));
    if (put_ref(agent, from)) {
        slot_unused(agent, from, false);
    }
}

void ledger_move_cancel(NuksmAgent *agent, NuksmClient *client,
                        uint64_t page)
{
    KeyMapEntry *move = ledger_move(client, page);
    SlotId to = move->value;

    client->parked_pages -= ledger_parked(move->tag);
    keymap_remove(&client->pages.moves, move);
    if (slots_put_pending(ledger_table(agent, to), slot_id_slot(to))) {
        slot_unused(agent, to, false);
    }
}

void ledger_map(NuksmAgent *agent, NuksmClient *client, PageRef *e)
{
    SlotTable *t = ledger_table(agent, e->slot);

    e->state = PAGE_MAPPED;
    get_ref(agent, e->slot);
    slots_put_pending(t, slot_id_slot(e->slot));
    client->merged_pages++;
    client->merges++;
}

void ledger_drop(NuksmAgent *agent, NuksmClient *client, uint64_t page)
{
    PageRef *e = ledger_page(client, page);
    SlotId id = e->slot;
    SlotTable *t = ledger_table(agent, id);
    bool unused;

    client->parked_pages -= ledger_parked(e->state);
    if (ledger_holds_ref(e->state)) {
        client->merged_pages--;
        unused = put_ref(agent, id);
    } else {
        unused = slots_put_pending(t, slot_id_slot(id));
    }
    pagerefs_remove(&client->pages, page);
    if (unused) {
        slot_unused(agent, id, false);
    }
}

void ledger_upload_start(NuksmAgent *agent, SlotId id, uint64_t digest)
{
    Upload *up = g_new0(Upload, 1);

    up->digest = digest;
    up->deadline = g_get_monotonic_time() +
                   LEDGER_UPLOAD_SECONDS * G_USEC_PER_SEC;
    g_hash_table_insert(agent->ledger.uploads, GUINT_TO_POINTER(id), up);
}

void ledger_upload_join(NuksmAgent *agent, SlotId id, NuksmClient *client,
                        uint64_t page)
{
    Upload *up = g_hash_table_lookup(agent->ledger.uploads,
                                     GUINT_TO_POINTER(id));

    if (up->len == up->alloc) {
        up->alloc = MAX(2, up->alloc * 2);
        up->sharers = g_renew(UploadSharer, up->sharers, up->alloc);
    }
    up->sharers[up->len++] = (UploadSharer) { .page = page,
                                              .client = client->id };
}

/*
 * Sharers are recorded by client id and page and checked when the upload
 * ends: a client that left meanwhile is gone from agent->ledger.vms, and its
 * entries (which ledger_client_leave() dropped) cannot be found.
 */
static PageRef *waiting_entry(NuksmAgent *agent, SlotId id,
                              const UploadSharer *sharer,
                              NuksmClient **client)
{
    PageRef *e;

    *client = ledger_client(agent, sharer->client);
    if (!*client) {
        return NULL;
    }
    e = ledger_page(*client, sharer->page);
    if (!e || e->slot != id || !ledger_before_fill(e->state)) {
        return NULL;
    }
    return e;
}

/* Upload @id, no longer awaited: the caller frees it. */
static Upload *steal_upload(NuksmAgent *agent, SlotId id)
{
    gpointer p = NULL;

    g_hash_table_steal_extended(agent->ledger.uploads, GUINT_TO_POINTER(id),
                                NULL, &p);
    return p;
}

GArray *ledger_uploads_overdue(NuksmAgent *agent, gint64 now)
{
    GArray *ids = g_array_new(FALSE, FALSE, sizeof(SlotId));
    GHashTableIter iter;
    gpointer key, value;

    g_hash_table_iter_init(&iter, agent->ledger.uploads);
    while (g_hash_table_iter_next(&iter, &key, &value)) {
        SlotId id = GPOINTER_TO_UINT(key);

        if (((Upload *)value)->deadline <= now) {
            g_array_append_val(ids, id);
        }
    }
    return ids;
}

bool ledger_upload_awaited(NuksmAgent *agent, SlotId id)
{
    return g_hash_table_contains(agent->ledger.uploads, GUINT_TO_POINTER(id));
}

bool ledger_upload_reassign(NuksmAgent *agent, SlotId id,
                            bool (*preferred)(const NuksmClient *client),
                            LedgerWaiter *late, LedgerWaiter *next)
{
    Upload *up = g_hash_table_lookup(agent->ledger.uploads,
                                     GUINT_TO_POINTER(id));
    UploadSharer first = up->sharers[0];
    PageRef *late_entry = waiting_entry(agent, id, &first, &late->client);
    PageRef *e = NULL;
    guint pick = 0;

    late->page = first.page;
    if (!late_entry || late_entry->state != PAGE_UPLOADING) {
        late->client = NULL;
    }
    /* The first waiting page of a preferred client, else the first. */
    for (guint i = 1; i < up->len; i++) {
        NuksmClient *client;
        PageRef *w = waiting_entry(agent, id, &up->sharers[i], &client);

        if (w && (!e || preferred(client))) {
            e = w;
            pick = i;
            next->client = client;
            if (preferred(client)) {
                break;
            }
        }
    }
    if (!e) {
        ledger_upload_cancel(agent, id);
        return false;
    }
    e->state = PAGE_UPLOADING;
    next->page = up->sharers[pick].page;
    up->sharers[0] = up->sharers[pick];
    up->len--;
    memmove(&up->sharers[pick], &up->sharers[pick + 1],
            (up->len - pick) * sizeof(up->sharers[0]));
    up->deadline = g_get_monotonic_time() +
                   LEDGER_UPLOAD_SECONDS * G_USEC_PER_SEC;
    if (late->client) {
        /*
         * The new uploader keeps the slot: this frees nothing.  The late
         * page is offered again, to join the slot once it is filled.
         */
        ledger_drop(agent, late->client, late->page);
        outbox_add_retry(agent, late->client, late->page);
    }
    return true;
}

GArray *ledger_upload_complete(NuksmAgent *agent, SlotId id)
{
    g_autoptr(Upload) up = steal_upload(agent, id);
    GArray *waiters = g_array_new(FALSE, FALSE, sizeof(LedgerWaiter));

    for (guint i = 0; i < up->len; i++) {
        const UploadSharer *sharer = &up->sharers[i];
        LedgerWaiter w = { .page = sharer->page };
        PageRef *e = waiting_entry(agent, id, sharer, &w.client);

        if (e) {
            e->state = PAGE_MERGING;
            g_array_append_val(waiters, w);
        }
    }
    return waiters;
}

void ledger_upload_cancel(NuksmAgent *agent, SlotId id)
{
    Slot *s = ledger_slot(agent, id);
    g_autoptr(Upload) up = steal_upload(agent, id);

    contents_remove_copy(&agent->contents, s->domain, up->digest, id);
    for (guint i = 0; i < up->len; i++) {
        NuksmClient *client;
        const UploadSharer *sharer = &up->sharers[i];

        if (waiting_entry(agent, id, sharer, &client)) {
            ledger_drop(agent, client, sharer->page);
            /* Its content may still merge, with another copy. */
            outbox_add_retry(agent, client, sharer->page);
        }
    }
    /*
     * Unused now, unless the caller still holds a use it gives up next
     * (release_entry()): that frees the slot then.
     */
    if (!s->refs && !s->pending) {
        ledger_free(agent, id);
    }
}

bool ledger_slot_digest(NuksmAgent *agent, SlotId id, uint64_t *digest)
{
    const Upload *up = g_hash_table_lookup(agent->ledger.uploads,
                                           GUINT_TO_POINTER(id));
    uint8_t content[NUKSM_PAGE_SIZE];

    if (up) {
        *digest = up->digest;
        return true;
    }
    if (!store_read(&agent->store, ledger_slot(agent, id)->domain,
                    slot_id_node(id), slot_id_slot(id), content)) {
        return false;
    }
    *digest = nuksm_page_digest(content, NUKSM_PAGE_SIZE);
    return true;
}

/*
 * Take slot @id out of the content table, if it is there: a slot is
 * indexed while its upload is awaited and once it is ready; a slot
 * being filled otherwise (relocate.c) is indexed only once filled.
 */
static void unindex(NuksmAgent *agent, SlotId id, const Slot *s)
{
    uint64_t digest;

    if ((s->state == SLOT_READY || ledger_upload_awaited(agent, id)) &&
        ledger_slot_digest(agent, id, &digest)) {
        contents_remove_copy(&agent->contents, s->domain, digest, id);
    }
}

void ledger_free(NuksmAgent *agent, SlotId id)
{
    Slot *s = ledger_slot(agent, id);

    if (s->state == SLOT_FREEING) {
        return;
    }
    if (s->state == SLOT_ORPHAN) {
        agent->orphans.pages--;
    } else {
        unindex(agent, id, s);
        g_hash_table_remove(agent->ledger.uploads, GUINT_TO_POINTER(id));
    }
    s->state = SLOT_FREEING;
    g_array_append_val(agent->effects.freeing, id);
}

void ledger_orphan(NuksmAgent *agent, SlotId id)
{
    Slot *s = ledger_slot(agent, id);

    g_assert(s->state == SLOT_READY && !s->refs && !s->pending);
    unindex(agent, id, s);
    s->state = SLOT_ORPHAN;
    agent->orphans.pages++;
}

/*
 * Give up a use of slot @id by an entry in @state that its table no
 * longer holds.  A slot that becomes unused is freed, or kept as an
 * orphan if its page @may_be_mapped (slot_unused()).  The caller adjusts
 * merged_pages and parked_pages.
 */
static void release_entry(NuksmAgent *agent, SlotId id, PageState state,
                          bool may_be_mapped)
{
    SlotTable *t = ledger_table(agent, id);
    bool unused;

    if (state == PAGE_UPLOADING &&
        slots_get(t, slot_id_slot(id))->state == SLOT_UPLOADING) {
        /* Nobody else has the content: the other sharers give up. */
        ledger_upload_cancel(agent, id);
    }
    if (ledger_holds_ref(state)) {
        unused = put_ref(agent, id);
    } else {
        unused = slots_put_pending(t, slot_id_slot(id));
    }
    if (unused) {
        slot_unused(agent, id, may_be_mapped);
    }
}

/*
 * What an entry in @state becomes in a @keep of ledger_client_leave():
 * past a MERGE (always for a ready slot), the VM may have mapped the
 * slot before the connection ended without its MERGED, so the entry is
 * kept; 0 if it is not.
 */
static PageState kept_state(PageState state)
{
    if (ledger_before_fill(state)) {
        return 0;
    }
    return ledger_holds_ref(state) ? PAGE_MAPPED : PAGE_MERGING;
}

void ledger_client_leave(NuksmAgent *agent, NuksmClient *client,
                         PageRefs *keep)
{
    PageRefs pages;
    const KeyMapEntry *move;
    PageRef *e;
    uint64_t page;

    /* From now on, uploads and the unstable table no longer see it. */
    g_hash_table_remove(agent->ledger.vms, GUINT_TO_POINTER(client->id));
    contents_client_remove(&agent->contents, client->contents_slot);
    client->contents_slot = 0;
    pagerefs_init(&pages, client->pages.seed);
    pagerefs_take(&pages, &client->pages);

    for (size_t pos = 0; (e = pagerefs_next(&pages, &pos, &page));) {
        PageState kept = keep ? kept_state(e->state) : 0;

        if (kept) {
            pagerefs_add(keep, page, e->slot, kept);
        } else {
            release_entry(agent, e->slot, e->state, false);
        }
    }
    for (size_t pos = 0; (move = keymap_next(&pages.moves, &pos));) {
        bool added;

        if (keep) {
            KeyMapEntry *k = keymap_insert(&keep->moves, move->key, 0,
                                           &added);

            k->value = move->value;
            k->tag = PAGE_MERGING;
        } else {
            release_entry(agent, move->value, move->tag, false);
        }
    }
    client->merged_pages = 0;
    client->parked_pages = 0;
    pagerefs_destroy(&pages);
    domains_put(&agent->domains, client->domain_id);
}

void ledger_release(NuksmAgent *agent, PageRefs *pages, bool may_be_mapped)
{
    const KeyMapEntry *move;
    PageRef *e;
    uint64_t page;

    for (size_t pos = 0; (e = pagerefs_next(pages, &pos, &page));) {
        release_entry(agent, e->slot, e->state, may_be_mapped);
    }
    for (size_t pos = 0; (move = keymap_next(&pages->moves, &pos));) {
        release_entry(agent, move->value, move->tag, may_be_mapped);
    }
    pagerefs_destroy(pages);
}

void ledger_adopt(NuksmClient *client, PageRefs *pages)
{
    KeyMapEntry *move;
    PageRef *e;
    uint64_t page;

    pagerefs_take(&client->pages, pages);
    client->merged_pages = 0;
    for (size_t pos = 0; (e = pagerefs_next(&client->pages, &pos, &page));) {
        if (e->state == PAGE_MAPPED) {
            e->state = PAGE_PARKED;
            client->merged_pages++;
        } else {
            e->state = PAGE_PARKED_MERGING;
        }
    }
    for (size_t pos = 0; (move = keymap_next(&client->pages.moves, &pos));) {
        move->tag = PAGE_PARKED_MERGING;
    }
    client->parked_pages = pagerefs_entries(&client->pages);
}

void ledger_confirm(NuksmAgent *agent, NuksmClient *client, PageRef *e)
{
    client->parked_pages--;
    if (e->state == PAGE_PARKED_MERGING) {
        ledger_map(agent, client, e);
    } else {
        e->state = PAGE_MAPPED;
    }
}

typedef struct DropParked {
    NuksmAgent *agent;
    NuksmClient *client;
} DropParked;

/* A parked page is released; every other is kept. */
static bool keep_unparked(PageRef *e, uint64_t page, void *opaque)
{
    DropParked *d = opaque;

    if (!ledger_parked(e->state)) {
        return true;
    }
    release_entry(d->agent, e->slot, e->state, false);
    d->client->merged_pages -= e->state == PAGE_PARKED;
    return false;
}

/* A parked move is released; every other is kept. */
static bool keep_unparked_move(KeyMapEntry *move, void *opaque)
{
    DropParked *d = opaque;

    if (!ledger_parked(move->tag)) {
        return true;
    }
    release_entry(d->agent, move->value, move->tag, false);
    return false;
}

void ledger_drop_parked(NuksmAgent *agent, NuksmClient *client)
{
    DropParked d = { agent, client };

    pagerefs_retain(&client->pages, keep_unparked, &d);
    keymap_retain(&client->pages.moves, keep_unparked_move, &d);
    client->parked_pages = 0;
}

void ledger_locality(const NuksmClient *client, uint64_t *local,
                     uint64_t *remote)
{
    const PageRef *e;
    uint64_t page;

    *local = *remote = 0;
    for (size_t pos = 0; (e = pagerefs_next(&client->pages, &pos, &page));) {
        if (ledger_holds_ref(e->state)) {
            if (slot_id_node(e->slot) == client_home_of_page(client, page)) {
                (*local)++;
            } else {
                (*remote)++;
            }
        }
    }
}

void ledger_remote_hot(const NuksmClient *client, uint32_t cold_windows,
                       uint64_t *per_node)
{
    const PageRef *e;
    uint64_t page;

    for (size_t pos = 0; (e = pagerefs_next(&client->pages, &pos, &page));) {
        uint32_t node;

        if (e->state != PAGE_MAPPED) {
            continue;
        }
        node = slot_id_node(e->slot);
        if (node != client_home_of_page(client, page) &&
            policy_page_hot(NUKSM_IDLE_NEVER,
                            client_read_idle(client, page), cold_windows)) {
            per_node[node]++;
        }
    }
}

bool ledger_check_ref(NuksmAgent *agent, NuksmClient *client, uint32_t seq,
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

PageRef *ledger_expect_entry(NuksmAgent *agent, NuksmClient *client,
                             uint32_t seq, NuksmMsgType type,
                             const NuksmSlotRef *r, PageState state)
{
    static const char *const why[] = {
        [PAGE_UPLOADING] = "which it was not asked to upload",
        [PAGE_MERGING]   = "which has no MERGE awaiting an answer",
        [PAGE_MAPPED]    = "which does not map that slot",
    };
    const char *name = nuksm_msg_type_name(type);
    PageRef *e;
    Slot *s;

    if (!ledger_check_ref(agent, client, seq, name, r)) {
        return NULL;
    }
    e = ledger_page(client, r->page);
    if (!e || e->state != state || e->slot != slot_id(r->node, r->slot)) {
        transport_reject(client, seq, NUKSM_ERR_BAD_MESSAGE,
                         "%s for page %#" PRIx64 " on node %u slot %u, %s",
                         name, r->page, r->node, r->slot, why[state]);
        return NULL;
    }
    s = ledger_slot(agent, e->slot);
    if (r->gen != s->gen) {
        transport_reject(client, seq, NUKSM_ERR_BAD_MESSAGE,
                         "%s for node %u slot %u with stale generation %u "
                         "(it is %u)", name, r->node, r->slot, r->gen, s->gen);
        return NULL;
    }
    return e;
}
