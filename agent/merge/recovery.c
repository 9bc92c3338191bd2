/*
 * nuksmd recovery: orphans and RESTORE.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <inttypes.h>
#include <string.h>

#include "copies.h"
#include "ledger.h"
#include "log.h"
#include "mapwatch.h"
#include "nuksm-digest.h"
#include "recovery.h"
#include "transport.h"

/* Slots whose pages are looked up in pagemap at once. */
#define REAP_CHUNK 4096u
/* Slots whose residency one look for strays reads at a time (1 MiB). */
#define STRAY_CHUNK_SLOTS (1u << 20)
/* Used slots a look for strays reads through rather than make two. */
#define STRAY_GAP_SLOTS 4096u

static bool is_orphan(SlotTable *t, uint32_t slot)
{
    return slots_in_use(t, slot) &&
           slots_get(t, slot)->state == SLOT_ORPHAN;
}

/*
 * Mark in @used (a set of SlotIds) the orphans that the pages @r maps
 * still read, @r being a mapping of a store file of @node.  Only the
 * parts of @r with orphans are looked up.
 */
static void mark_used_orphans(NuksmAgent *agent, const SlotRange *r,
                              uint32_t node, GHashTable *used)
{
    SlotTable *t = &agent->ledger.slots[node];
    uint32_t end = MIN(r->end, t->top);
    bool reads[REAP_CHUNK];

    for (uint32_t first = r->first; first < end; first += REAP_CHUNK) {
        uint32_t n = MIN(REAP_CHUNK, end - first);
        uint32_t i = 0;

        while (i < n && !is_orphan(t, first + i)) {
            i++;
        }
        if (i == n) {
            continue;
        }
        mapwatch_reads_slots(r, first, n, NUKSM_PAGE_SIZE, reads);
        for (; i < n; i++) {
            if (reads[i] && is_orphan(t, first + i)) {
                g_hash_table_add(used,
                                 GUINT_TO_POINTER(slot_id(node, first + i)));
            }
        }
    }
}

/*
 * The store files of every open domain, and the node of each: what
 * mapwatch_scan() looks for in the mappings of processes.
 */
static bool store_files(NuksmAgent *agent, GArray *files, GArray *nodes)
{
    for (guint d = 0; d < agent->store.domains->len; d++) {
        if (!g_ptr_array_index(agent->store.domains, d)) {
            continue;
        }
        for (uint32_t n = 0; n < agent->nr_nodes; n++) {
            struct stat sb;

            if (fstat(store_fd(&agent->store, d, n), &sb) < 0) {
                return false;
            }
            g_array_append_val(files, sb);
            g_array_append_val(nodes, n);
        }
    }
    return true;
}

/* Free the orphans no process reads; false if that cannot be told. */
static bool reap_orphans(NuksmAgent *agent, uint64_t *freed)
{
    g_autoptr(GArray) mapped = g_array_new(FALSE, FALSE, sizeof(SlotRange));
    g_autoptr(GArray) pids = mappers_live(&agent->mappers);
    g_autoptr(GHashTable) used = g_hash_table_new(NULL, NULL);
    g_autoptr(GArray) files = g_array_new(FALSE, FALSE, sizeof(struct stat));
    g_autoptr(GArray) nodes = g_array_new(FALSE, FALSE, sizeof(uint32_t));

    if (!store_files(agent, files, nodes) ||
        !mapwatch_scan((const struct stat *)files->data, files->len,
                       NUKSM_PAGE_SIZE, (pid_t *)pids->data, pids->len,
                       mapped)) {
        return false;
    }
    for (guint i = 0; i < mapped->len; i++) {
        const SlotRange *r = &g_array_index(mapped, SlotRange, i);

        mark_used_orphans(agent, r, g_array_index(nodes, uint32_t, r->file),
                          used);
    }
    for (uint32_t n = 0; n < agent->nr_nodes; n++) {
        SlotTable *t = &agent->ledger.slots[n];

        for (uint32_t s = 0; s < t->top; s++) {
            if (is_orphan(t, s) &&
                !g_hash_table_contains(used,
                                       GUINT_TO_POINTER(slot_id(n, s)))) {
                ledger_free(agent, slot_id(n, s));
                (*freed)++;
            }
        }
    }
    return true;
}

static gboolean on_orphan_timer(gpointer opaque)
{
    NuksmAgent *agent = opaque;
    uint64_t freed = 0;

    agent->orphans.timer = 0;
    if (!agent->orphans.pages) {
        return G_SOURCE_REMOVE;
    }
    if (!reap_orphans(agent, &freed)) {
        if (!agent->orphans.unscannable) {
            log_warning("cannot read the mappings of every VM process "
                        "(/proc/<pid>/maps): keeping all %" PRIu64 " orphan "
                        "store page%s, which they may map",
                        agent->orphans.pages,
                        agent->orphans.pages == 1 ? "" : "s");
        }
        agent->orphans.unscannable = true;
    } else {
        agent->orphans.unscannable = false;
    }
    if (freed) {
        log_info("freed %" PRIu64 " orphan store page%s that no process "
                 "reads", freed, freed == 1 ? "" : "s");
    }
    if (agent->orphans.pages != agent->orphans.logged) {
        if (agent->orphans.pages) {
            log_info("keeping %" PRIu64 " orphan store page%s that live "
                     "processes still read without a reference: looking "
                     "again every %u s", agent->orphans.pages,
                     agent->orphans.pages == 1 ? "" : "s",
                     ORPHAN_RECHECK_SECONDS);
        }
        agent->orphans.logged = agent->orphans.pages;
    }
    recovery_watch_orphans(agent);
    return G_SOURCE_REMOVE;
}

static void watch_after(NuksmAgent *agent, uint32_t seconds)
{
    if (agent->orphans.pages && !agent->orphans.timer) {
        agent->orphans.timer = g_timeout_add_seconds(seconds,
                                                     on_orphan_timer, agent);
    }
}

void recovery_watch_orphans(NuksmAgent *agent)
{
    watch_after(agent, ORPHAN_RECHECK_SECONDS);
}

/* Take the page in free slot @s of node @n, of domain @domain, as an orphan. */
static void claim_orphan(NuksmAgent *agent, uint16_t domain, uint32_t n,
                         uint32_t s)
{
    slots_claim_orphan(&agent->ledger.slots[n], s);
    ledger_take_slot(agent, slot_id(n, s), domain);
    agent->orphans.pages++;
}

/*
 * Take the pages of domain @domain's files from slot @from on whose
 * slots are free as orphans; returns how many.  @at_start: the agent
 * just started, and a slot in use already has its page in another
 * domain's file, which is worth a warning.
 */
static uint64_t claim_orphans(NuksmAgent *agent, uint16_t domain,
                              uint32_t node, uint32_t from, bool at_start)
{
    SlotTable *t = &agent->ledger.slots[node];
    uint64_t claimed = 0;
    uint32_t start, end;

    while (store_next_data(&agent->store, domain, node, from, &start,
                           &end)) {
        for (uint32_t s = start; s < end; s++) {
            /* A slot's page is in one domain's file only. */
            if (slots_in_use(t, s)) {
                if (at_start) {
                    log_warning("slot %u of node %u has a page in two "
                                "domains' files: kept in the first "
                                "one's", s, node);
                }
                continue;
            }
            claim_orphan(agent, domain, node, s);
            claimed++;
        }
        from = end;
    }
    return claimed;
}

/*
 * Take the pages in the free slots of [@from, @end) of node @node of
 * domain @domain's files as orphans; returns how many, and *@failed.
 * Where the free slots lie between used ones (a run of data each), a
 * look at which pages are in memory costs one call, not one per run.
 */
static uint64_t claim_strays_in(NuksmAgent *agent, uint16_t domain,
                                uint32_t node, uint32_t from, uint32_t end,
                                unsigned char *resident, bool *failed)
{
    SlotTable *t = &agent->ledger.slots[node];
    uint64_t claimed = 0;

    for (; from < end; from += STRAY_CHUNK_SLOTS) {
        uint32_t count = MIN(end - from, STRAY_CHUNK_SLOTS);

        if (!store_resident(&agent->store, domain, node, from, count,
                            resident)) {
            *failed = true;
            break;
        }
        for (uint32_t i = 0; i < count; i++) {
            if ((resident[i] & 1) && !slots_in_use(t, from + i)) {
                claim_orphan(agent, domain, node, from + i);
                claimed++;
            }
        }
    }
    return claimed;
}

/*
 * Take the pages in free slots of domain @domain's files as orphans;
 * returns how many.  Below the highest slot ever used, only [@from[n],
 * @to[n]) of node n, and there only the spans with free slots, are
 * looked at (a store in use all over costs no look); above it, the file
 * is holes but for strays.  A stray swapped out is found when it comes
 * back in.
 */
static uint64_t claim_strays(NuksmAgent *agent, uint16_t domain,
                             const uint32_t *from, const uint32_t *to)
{
    g_autofree unsigned char *resident = NULL;
    uint64_t claimed = 0;

    for (uint32_t n = 0; n < agent->nr_nodes; n++) {
        SlotTable *t = &agent->ledger.slots[n];
        uint32_t start, end = from[n];
        bool failed = false;

        while (!failed && slots_next_free_span(t, end, to[n], STRAY_GAP_SLOTS,
                                               &start, &end)) {
            if (!resident) {
                resident = g_malloc(STRAY_CHUNK_SLOTS);
            }
            claimed += claim_strays_in(agent, domain, n, start, end,
                                       resident, &failed);
        }
        claimed += claim_orphans(agent, domain, n, t->top, false);
    }
    return claimed;
}

/*
 * A page in a store file whose slot is free is nobody's: a process filled
 * the slot after it was punched out (reading or writing a hole through a
 * mapping fills it).  Such strays are taken as orphans, so that they are
 * freed once no process maps them, as after a restart.
 */
static gboolean on_stray_timer(gpointer opaque)
{
    NuksmAgent *agent = opaque;
    uint32_t *from = agent->orphans.stray_from, to[NUKSM_MAX_NODES];
    uint64_t strays = 0;

    for (uint32_t n = 0; n < agent->nr_nodes; n++) {
        uint32_t top = agent->ledger.slots[n].top;

        /* Where the last look ended, on a word of the bitmap of used
         * slots, unless it reached the top. */
        from[n] = from[n] < top ? from[n] / 64 * 64 : 0;
        to[n] = MIN(top, from[n] + STRAY_SLOTS_PER_CHECK);
    }

    for (guint id = 0; id < agent->domains.by_id->len; id++) {
        if (g_ptr_array_index(agent->domains.by_id, id)) {
            strays += claim_strays(agent, id, from, to);
        }
    }
    /* The next look goes on from there, or starts over. */
    memcpy(from, to, agent->nr_nodes * sizeof(*from));
    if (strays) {
        log_warning("found %" PRIu64 " store page%s in free slots, filled "
                    "after they were freed: taken as orphans", strays,
                    strays == 1 ? "" : "s");
        recovery_watch_orphans(agent);
    }
    return G_SOURCE_CONTINUE;
}

void recovery_start(NuksmAgent *agent, uint32_t grace)
{
    g_autoptr(GPtrArray) keys = store_list_domains(&agent->store);

    for (guint i = 0; i < keys->len; i++) {
        uint16_t domain;

        if (!domains_get_key(&agent->domains, g_ptr_array_index(keys, i),
                             &domain)) {
            continue;
        }
        for (uint32_t n = 0; n < agent->nr_nodes; n++) {
            claim_orphans(agent, domain, n, 0, true);
        }
        /* Its orphans hold it now; none: its files go. */
        domains_put(&agent->domains, domain);
    }
    if (agent->orphans.pages) {
        log_info("store holds %" PRIu64 " page%s from a previous run: VMs "
                 "have %u s to restore them before those no process maps "
                 "are freed", agent->orphans.pages,
                 agent->orphans.pages == 1 ? "" : "s", grace);
        watch_after(agent, grace);
    }
    agent->orphans.stray_timer = g_timeout_add_seconds(STRAY_CHECK_SECONDS,
                                                       on_stray_timer, agent);
}

void recovery_stop(NuksmAgent *agent)
{
    if (agent->orphans.timer) {
        g_source_remove(agent->orphans.timer);
        agent->orphans.timer = 0;
    }
    if (agent->orphans.stray_timer) {
        g_source_remove(agent->orphans.stray_timer);
        agent->orphans.stray_timer = 0;
    }
}

/*
 * Make orphan @s the slot @r names again, if the slot's record says it
 * holds @client's domain's content at @r's generation, and set *@digest
 * to its content's; else say why not.
 */
static char *adopt_orphan(NuksmAgent *agent, NuksmClient *client,
                          const NuksmSlotRef *r, Slot *s, uint64_t *digest)
{
    uint8_t content[NUKSM_PAGE_SIZE];
    SlotRecord rec;

    if (s->domain != client->domain_id) {
        return g_strdup_printf("node %u slot %u belongs to another merge "
                               "domain", r->node, r->slot);
    }
    if (!store_get_record(&agent->store, r->node, r->slot, &rec) ||
        !store_read(&agent->store, s->domain, r->node, r->slot, content)) {
        return g_strdup_printf("node %u slot %u cannot be read", r->node,
                               r->slot);
    }
    if (!rec.domain_key) {
        return g_strdup_printf("node %u slot %u has no record of what it "
                               "holds", r->node, r->slot);
    }
    if (rec.gen != r->gen) {
        return g_strdup_printf("node %u slot %u has generation %u, not %u",
                               r->node, r->slot, rec.gen, r->gen);
    }
    if (rec.domain_key !=
        domains_record_key(&agent->domains, client->domain_id)) {
        return g_strdup_printf("node %u slot %u belongs to another merge "
                               "domain", r->node, r->slot);
    }
    s->gen = rec.gen;
    *digest = nuksm_page_digest(content, NUKSM_PAGE_SIZE);
    s->state = SLOT_READY;
    s->restored = true;
    agent->orphans.pages--;
    return NULL;
}

/* Why @client cannot restore @r, or NULL once it is restored. */
static char *restore_one(NuksmAgent *agent, NuksmClient *client,
                         const NuksmSlotRef *r)
{
    char *problem = ledger_ref_problem(agent, r);
    PageRef *e;
    bool adopted = false;
    uint64_t digest = 0;
    Slot *s;

    if (problem) {
        return problem;
    }
    e = ledger_page(client, r->page);
    if (e && ledger_parked(e->state)) {
        /* Taken back from its previous connection: it maps it. */
        if (e->slot == slot_id(r->node, r->slot) &&
            ledger_slot(agent, e->slot)->gen == r->gen) {
            ledger_confirm(agent, client, e);
            return NULL;
        }
        /* It maps another slot now. */
        ledger_drop(agent, client, r->page);
        e = NULL;
    }
    if (e) {
        return g_strdup_printf("page %#" PRIx64 " already has a slot",
                               r->page);
    }
    if (ledger_full(client)) {
        return g_strdup_printf("more than %u pages",
                               LEDGER_CLIENT_PAGES_MAX);
    }
    s = slots_in_use(&agent->ledger.slots[r->node], r->slot) ?
        slots_get(&agent->ledger.slots[r->node], r->slot) : NULL;
    if (s && s->state == SLOT_ORPHAN) {
        problem = adopt_orphan(agent, client, r, s, &digest);
        if (problem) {
            return problem;
        }
        adopted = true;
    } else if (!s || s->state != SLOT_READY) {
        return g_strdup_printf("node %u slot %u holds no merged page",
                               r->node, r->slot);
    } else if (s->gen != r->gen) {
        return g_strdup_printf("node %u slot %u has generation %u, not %u",
                               r->node, r->slot, s->gen, r->gen);
    } else if (s->domain != client->domain_id) {
        return g_strdup_printf("node %u slot %u belongs to another merge "
                               "domain", r->node, r->slot);
    }
    ledger_add(agent, client, r->page, slot_id(r->node, r->slot),
               PAGE_MAPPED);
    if (adopted) {
        /*
         * New candidates merge with it, unless another slot of the
         * domain has that content.
         */
        copies_publish(agent, slot_id(r->node, r->slot), digest);
    }
    return NULL;
}

void recovery_handle_restore(NuksmAgent *agent, NuksmClient *client,
                             uint32_t seq, const void *payload)
{
    const NuksmMsgBatch *batch = payload;
    const NuksmSlotRef *refs = (const NuksmSlotRef *)(batch + 1);
    g_autofree NuksmMsgBatch *refused =
        g_malloc(sizeof(*refused) + batch->count * sizeof(NuksmSlotRef));
    NuksmSlotRef *out = (NuksmSlotRef *)(refused + 1);
    g_autofree char *first = NULL;

    *refused = (NuksmMsgBatch) { 0 };
    for (uint32_t i = 0; i < batch->count; i++) {
        char *problem = restore_one(agent, client, &refs[i]);

        if (!problem) {
            continue;
        }
        out[refused->count++] = refs[i];
        if (first) {
            g_free(problem);
        } else {
            first = problem;
        }
    }
    agent->counters.restored_pages += batch->count - refused->count;
    agent->counters.refused_restores += refused->count;
    log_debug("%s: restored %u of %u merged page%s", client->label,
              batch->count - refused->count, batch->count,
              batch->count == 1 ? "" : "s");
    if (!refused->count) {
        return;
    }
    /* A misbehaving VM could send many: warn of the first only. */
    log_msg(client->refused_pages ? NUKSMD_LOG_DEBUG : NUKSMD_LOG_WARNING,
        "%s: refused %u RESTORE entr%s (the first: %s); the VM offers "
        "those pages again", client->label, refused->count,
        refused->count == 1 ? "y" : "ies", first);
    client->refused_pages += refused->count;
    transport_send(client, NUKSM_MSG_REFUSED, 0, refused,
                   sizeof(*refused) + refused->count * sizeof(NuksmSlotRef));
}
