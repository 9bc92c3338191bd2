/*
 * nuksmd uploads (uploads.h).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <inttypes.h>

#include "agent.h"
#include "copies.h"
#include "ledger.h"
#include "log.h"
#include "nuksm-digest.h"
#include "outbox.h"
#include "peek.h"
#include "store.h"
#include "transport.h"
#include "uploads.h"

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

/* May @client upload now (it missed none lately)? */
static bool uploads_trusted(const NuksmClient *client)
{
    return g_get_monotonic_time() >= client->uploads.distrusted_until;
}

/* A VM whose candidates land a migration may not hold their content yet. */
static bool may_upload(const NuksmClient *client)
{
    return !client->landing && uploads_trusted(client);
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
 * memory when it can (uploads_read_queued()), else asks the VM.  Were an
 * upload of it to that slot and generation revoked, the one that comes
 * now answers this.
 */
static void ask_upload(NuksmAgent *agent, NuksmClient *client, uint64_t page,
                       SlotId id)
{
    uint32_t gen = ledger_slot(agent, id)->gen;
    uint64_t addr;

    if (client->uploads.revoked) {
        RevokedUpload key = revoked_key(page, id, gen);

        g_hash_table_remove(client->uploads.revoked, &key);
    }
    if (!client->uploads.read_errno &&
        client_page_address(client, page, &addr)) {
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

    if (!client->uploads.revoked ||
        g_hash_table_size(client->uploads.revoked) >= REVOKED_UPLOADS_MAX) {
        g_clear_pointer(&client->uploads.revoked, g_hash_table_destroy);
        client->uploads.revoked = g_hash_table_new_full(revoked_hash,
                                                        revoked_equal,
                                                        g_free, NULL);
    }
    g_hash_table_add(client->uploads.revoked, g_memdup2(&key, sizeof(key)));
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
        unsigned shift = MIN(client->uploads.missed, 6u);
        unsigned ban = MIN(UPLOAD_BAN_SECONDS << shift,
                           UPLOAD_BAN_MAX_SECONDS);

        client->uploads.missed++;
        client->uploads.distrusted_until = g_get_monotonic_time() +
                                           (gint64)ban * G_USEC_PER_SEC;
        log_warning("%s: did not upload in %u s (time %u): other VMs "
                    "upload in its place for %u s", client->label,
                    LEDGER_UPLOAD_SECONDS, client->uploads.missed, ban);
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

        if (ledger_upload_reassign(agent, id, may_upload, &late,
                                   &next)) {
            ask_upload(agent, next.client, next.page, id);
        }
        if (late.client) {
            upload_missed(late.client, late.page, id, gen,
                          g_hash_table_add(late_clients, late.client));
        }
    }
    if (!g_hash_table_size(agent->ledger.uploads)) {
        agent->uploads.timer = 0;
        return G_SOURCE_REMOVE;
    }
    return G_SOURCE_CONTINUE;
}

/* Look at the uploads' time every second while there are uploads. */
static void watch_uploads(NuksmAgent *agent)
{
    if (!agent->uploads.timer) {
        agent->uploads.timer = g_timeout_add_seconds(1, on_upload_timer,
                                                     agent);
    }
}

void uploads_start(NuksmAgent *agent, SlotId id, uint64_t digest,
                   NuksmClient *first, uint64_t first_page,
                   NuksmClient *second, uint64_t second_page)
{
    LedgerWaiter uploader = { first, first_page };
    LedgerWaiter waiter = { second, second_page };

    if (first->landing ||
        (!uploads_trusted(first) && uploads_trusted(second))) {
        uploader = waiter;
        waiter = (LedgerWaiter) { first, first_page };
    }
    ledger_upload_start(agent, id, digest);
    ledger_add(agent, uploader.client, uploader.page, id, PAGE_UPLOADING);
    ledger_upload_join(agent, id, uploader.client, uploader.page);
    ledger_add(agent, waiter.client, waiter.page, id, PAGE_WAITING);
    ledger_upload_join(agent, id, waiter.client, waiter.page);
    ask_upload(agent, uploader.client, uploader.page, id);
    watch_uploads(agent);
}

/*
 * @client's @page, on its way to a slot (waiting for its upload, or
 * uploading it), is offered with another content: it changed,
 * and leaves the slot, as a page that changed before its upload would
 * when the upload came (the guest reused it, as its page cache does).
 * The slot's upload passes to another of its pages, if any waits.
 */
void uploads_leave_changed(NuksmAgent *agent, NuksmClient *client,
                           uint64_t page)
{
    const PageRef *e = ledger_page(client, page);
    SlotId id = e->slot;
    bool uploader = e->state == PAGE_UPLOADING;
    LedgerWaiter late, next;

    if (uploader) {
        revoke_upload(client, page, id, ledger_slot(agent, id)->gen);
    }
    /* The last page of the slot frees it, and its upload with it. */
    ledger_drop(agent, client, page);
    if (uploader && ledger_upload_awaited(agent, id) &&
        ledger_upload_reassign(agent, id, may_upload, &late, &next)) {
        ask_upload(agent, next.client, next.page, id);
    }
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

    return client->uploads.revoked &&
           g_hash_table_remove(client->uploads.revoked, &key);
}

/*
 * Is @content, of @client's page @r, what slot @id awaits?  Its content
 * is trusted only as far as its digest: every sharer compares it with
 * its own page before mapping the slot, so an uploader that lies can
 * only fail its own merges.  If not, the slot is given up, and freed,
 * which punches out whatever was read into it.
 */
static bool upload_intact(NuksmAgent *agent, NuksmClient *client,
                          const NuksmSlotRef *r, SlotId id,
                          const uint8_t *content)
{
    uint64_t digest;

    if (!ledger_slot_digest(agent, id, &digest) ||
        nuksm_page_digest(content, NUKSM_PAGE_SIZE) != digest) {
        log_debug("%s: page %#" PRIx64 " changed before its upload, "
                  "dropping node %u slot %u", client->label, r->page,
                  r->node, r->slot);
        ledger_upload_cancel(agent, id);
        return false;
    }
    return true;
}

/* @client sent @content of its page @r for slot @id: make the slot of it. */
static void store_upload(NuksmAgent *agent, NuksmClient *client,
                         const NuksmSlotRef *r, SlotId id,
                         const uint8_t *content)
{
    if (!upload_intact(agent, client, r, id, content)) {
        return;
    }
    if (!copies_fill(agent, id, content)) {
        ledger_upload_cancel(agent, id);
        return;
    }
    send_merges(agent, id);
}

void uploads_handle_upload(NuksmAgent *agent, NuksmClient *client,
                           uint32_t seq, const void *payload)
{
    const NuksmMsgBatch *batch = payload;
    const NuksmSlotRef *refs = (const NuksmSlotRef *)(batch + 1);
    const uint8_t *pages = (const uint8_t *)(refs + batch->count);

    for (uint32_t i = 0; i < batch->count; i++) {
        PageRef *e;

        if (revoked_upload(client, &refs[i])) {
            log_debug("%s: page %#" PRIx64 " uploaded after its time, "
                      "ignored", client->label, refs[i].page);
            continue;
        }
        e = ledger_expect_entry(agent, client, seq, NUKSM_MSG_UPLOAD, &refs[i],
                         PAGE_UPLOADING);
        if (!e) {
            return;
        }
        client->uploads.sent++;
        store_upload(agent, client, &refs[i], e->slot,
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
    PageRef *e = ledger_page(client, r->page);

    *id = slot_id(r->node, r->slot);
    return !revoked_upload(client, r) && e && e->state == PAGE_UPLOADING &&
           e->slot == *id && ledger_slot(agent, *id)->gen == r->gen;
}

static bool slot_listed(const SlotId *ids, size_t n, SlotId id)
{
    for (size_t i = 0; i < n; i++) {
        if (ids[i] == id) {
            return true;
        }
    }
    return false;
}

/*
 * A window of the store pays for its mapping (mmap(), munmap() and the
 * TLB shootdown that takes) once this many slots of a batch lie in it.
 * The other slots are read into a buffer and written with pwrite(): the
 * copy a window saves costs less than a mapping of their own.  A VM's
 * pages that pair in order fill runs of slots; shuffled duplicates
 * scatter theirs, one to a window.
 */
#define UPLOAD_WINDOW_MIN_SLOTS 8

/* How many of the @n slots @ids lie in the same store window as @ids[k]. */
static size_t window_share(NuksmAgent *agent, const SlotId *ids, size_t n,
                           size_t k)
{
    uint16_t domain = ledger_slot(agent, ids[k])->domain;
    SlotId first = ids[k] - slot_id_slot(ids[k]) % STORE_WINDOW_SLOTS;
    size_t share = 0;

    for (size_t i = 0; i < n; i++) {
        share += ids[i] >= first && ids[i] < first + STORE_WINDOW_SLOTS &&
                 ledger_slot(agent, ids[i])->domain == domain;
    }
    return share;
}

/*
 * Where to read each of the @n uploads to slots @ids: into its slot
 * through a window of @windows (@dest[k], @bounced[k] false), or into
 * the bounce buffer, to be written afterwards.
 */
static void place_uploads(NuksmAgent *agent, const SlotId *ids, size_t n,
                          StoreWindows *windows, void **dest, bool *bounced)
{
    void *in_windows[PEEK_PAGES_MAX];
    size_t nr_in_windows = 0;

    if (!agent->uploads.bounce) {
        agent->uploads.bounce = g_malloc((size_t)PEEK_PAGES_MAX *
                                         NUKSM_PAGE_SIZE);
    }
    for (size_t k = 0; k < n; k++) {
        dest[k] = NULL;
        if (window_share(agent, ids, n, k) >= UPLOAD_WINDOW_MIN_SLOTS) {
            dest[k] = store_window_slot(&agent->store, windows,
                                        ledger_slot(agent, ids[k])->domain,
                                        slot_id_node(ids[k]),
                                        slot_id_slot(ids[k]));
        }
        bounced[k] = !dest[k];
        if (bounced[k]) {
            dest[k] = agent->uploads.bounce + k * NUKSM_PAGE_SIZE;
        } else {
            in_windows[nr_in_windows++] = dest[k];
        }
    }
    store_windows_prefault(in_windows, nr_in_windows);
}

/*
 * Read @client's @n uploads @refs from its memory into their slots, or
 * ask for them.  Only slots still awaiting their upload are written: a
 * slot is written before it is ready, so no VM maps it yet.  A ref
 * queued twice is read twice, from the same page, and stored once.  The
 * slots whose content is intact are recorded together (copies_filled()).
 */
static void read_uploads(NuksmAgent *agent, NuksmClient *client,
                         const NuksmSlotRef *refs, size_t n,
                         StoreWindows *windows)
{
    const NuksmSlotRef *to_read[PEEK_PAGES_MAX];
    SlotId ids[PEEK_PAGES_MAX];
    uint64_t addrs[PEEK_PAGES_MAX];
    void *dest[PEEK_PAGES_MAX];
    bool bounced[PEEK_PAGES_MAX];
    bool read[PEEK_PAGES_MAX] = {};
    SlotId intact[PEEK_PAGES_MAX];
    bool filled[PEEK_PAGES_MAX];
    size_t m = 0, nr_intact = 0;

    for (size_t k = 0; k < n; k++) {
        const NuksmSlotRef *r = &refs[k];

        if (!upload_awaited(agent, client, r, &ids[m])) {
            continue;
        }
        /* A slot VMs may map is never written again. */
        g_assert(ledger_slot(agent, ids[m])->state == SLOT_UPLOADING);
        /* Its TOPOLOGY may have changed since it was queued. */
        if (client->uploads.read_errno ||
            !client_page_address(client, r->page, &addrs[m])) {
            outbox_add(agent, client, NUKSM_MSG_UPLOAD_REQ, r->page, ids[m],
                       r->gen);
            continue;
        }
        to_read[m++] = r;
    }
    if (!m) {
        return;
    }
    place_uploads(agent, ids, m, windows, dest, bounced);
    client->uploads.read_errno = peek_pages(client->pid, client->pidfd,
                                            addrs, m, dest, read);
    if (client->uploads.read_errno) {
        log_warning("%s: cannot read its memory (%s): it uploads the "
                    "content of new slots itself", client->label,
                    g_strerror(client->uploads.read_errno));
    }
    for (size_t k = 0; k < m; k++) {
        SlotId id;

        if (!upload_awaited(agent, client, to_read[k], &id) ||
            slot_listed(intact, nr_intact, id)) {
            continue;
        }
        if (!read[k]) {
            outbox_add(agent, client, NUKSM_MSG_UPLOAD_REQ,
                       to_read[k]->page, id, to_read[k]->gen);
        } else if (upload_intact(agent, client, to_read[k], id, dest[k])) {
            if (bounced[k] && !copies_write(agent, id, dest[k])) {
                ledger_upload_cancel(agent, id);
                continue;
            }
            client->uploads.read++;
            intact[nr_intact++] = id;
        }
    }
    /* Their records are written together, consecutive slots at once. */
    copies_filled(agent, intact, nr_intact, filled);
    for (size_t k = 0; k < nr_intact; k++) {
        if (filled[k]) {
            send_merges(agent, intact[k]);
        } else {
            ledger_upload_cancel(agent, intact[k]);
        }
    }
}

/* The uploads to read of a client in the outbox, taken; NULL if none. */
static GArray *take_reads(NuksmAgent *agent, NuksmClient **client)
{
    for (guint i = 0; i < agent->effects.outbox->len; i++) {
        NuksmClient *c = g_ptr_array_index(agent->effects.outbox, i);
        GArray *refs = c->outbox.to_read;

        if (refs && refs->len) {
            c->outbox.to_read = g_array_new(FALSE, FALSE,
                                            sizeof(NuksmSlotRef));
            *client = c;
            return refs;
        }
    }
    return NULL;
}

void uploads_read_queued(NuksmAgent *agent)
{
    NuksmClient *client;
    GArray *refs;

    G_STATIC_ASSERT(PEEK_PAGES_MAX <= STORE_WINDOWS_MAX);
    /* What is stored may queue more (the outbox grows): until none is. */
    while ((refs = take_reads(agent, &client))) {
        for (guint k = 0; k < refs->len && !client->dead;
             k += PEEK_PAGES_MAX) {
            StoreWindows windows = { .len = 0 };

            read_uploads(agent, client,
                         &g_array_index(refs, NuksmSlotRef, k),
                         MIN(refs->len - k, PEEK_PAGES_MAX), &windows);
            store_windows_unmap(&windows);
        }
        g_array_unref(refs);
    }
}


void uploads_client_destroy(ClientUploads *up)
{
    g_clear_pointer(&up->revoked, g_hash_table_destroy);
}

void uploads_stop(NuksmAgent *agent)
{
    if (agent->uploads.timer) {
        g_source_remove(agent->uploads.timer);
        agent->uploads.timer = 0;
    }
    g_clear_pointer(&agent->uploads.bounce, g_free);
}
