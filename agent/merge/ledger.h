/*
 * nuksmd ledger: which guest page of which VM uses which slot, and the
 * life of slots that follows from it.
 *
 * Each VM has its page references (pagerefs.h): page -> (slot,
 * PageState); a page has at most one, and while it moves to another copy
 * (see relocate.h) one more among the moves, naming the slot it moves to
 * as PAGE_MERGING.
 * A slot counts the MAPPED entries naming it as references and the
 * others as pending users; it is freed (punched out of the store, its
 * generation bumped) once it has neither, as the protocol's generations
 * require (libnuksm/nuksm-proto.h).  A slot is never freed
 * while a VM may map it: from the MERGE that names it until the VM's
 * answer (a RESTORE if the connection ends first while its process
 * lives: see detached.h), and while the VM holds a reference.  A slot
 * taken back after a restart (Slot.restored) may be mapped by VMs that
 * have not restored it yet: once unused, it is an orphan again, freed
 * when no process maps it (recovery.h).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_LEDGER_H
#define NUKSMD_LEDGER_H

#include "agent.h"

/*
 * Pages (references and pending merges) one process may hold over all
 * its VM connections: 256 GiB.
 */
#define LEDGER_CLIENT_PAGES_MAX (1u << 26)

/* A page index names a page of a 64-bit RAM address space. */
#define LEDGER_PAGE_LIMIT (UINT64_MAX / NUKSM_PAGE_SIZE + 1)

typedef enum PageState {
    PAGE_WAITING = 1,        /* shares a slot whose upload is awaited */
    PAGE_UPLOADING,          /* asked to upload its content to the slot */
    PAGE_MERGING,            /* sent a MERGE, no MERGED yet */
    PAGE_MAPPED,             /* maps the slot: holds a reference */
    PAGE_PARKED,             /* mapped before a reconnection: holds a
                              * reference until its RESTORE or the VM's
                              * first merge message (see detached.h) */
    PAGE_PARKED_MERGING,     /* MERGE unanswered at a reconnection: may
                              * map the slot, a pending user until its
                              * RESTORE or the VM's first merge message */
} PageState;

/* True if an entry in @state holds a reference on its slot. */
static inline bool ledger_holds_ref(PageState state)
{
    return state == PAGE_MAPPED || state == PAGE_PARKED;
}

/* True if an entry in @state is on its way to a slot not filled yet. */
static inline bool ledger_before_fill(PageState state)
{
    return state == PAGE_WAITING || state == PAGE_UPLOADING;
}

/* True if an entry in @state was taken back and awaits its RESTORE. */
static inline bool ledger_parked(PageState state)
{
    return state == PAGE_PARKED || state == PAGE_PARKED_MERGING;
}

/* Slot generations start at @gen (random: see lifecycle.c). */
void ledger_init(NuksmAgent *agent, uint32_t gen);
void ledger_destroy(NuksmAgent *agent);

static inline SlotTable *ledger_table(NuksmAgent *agent, SlotId id)
{
    return &agent->ledger.slots[slot_id_node(id)];
}

static inline Slot *ledger_slot(NuksmAgent *agent, SlotId id)
{
    return slots_get(ledger_table(agent, id), slot_id_slot(id));
}

/* @client's entry for @page, or NULL. */
static inline PageRef *ledger_page(NuksmClient *client, uint64_t page)
{
    return pagerefs_lookup(&client->pages, page);
}

/*
 * The move in progress of @client's @page, if any: value is the SlotId
 * it moves to, tag the PageState.
 */
static inline KeyMapEntry *ledger_move(NuksmClient *client, uint64_t page)
{
    return keymap_lookup(&client->pages.moves, page, 0);
}

/*
 * Pages of one process on their way to a slot, over all its VM
 * connections (ledger_process_pages()): 256 MiB of guest memory in
 * flight, a bound on what a process that never uploads or answers can
 * hold, however many connections it opens.  A VM offering more at once
 * (its first passes over gigabytes of duplicates) is sent a RETRY for
 * the rest.
 */
#define CLIENT_IN_FLIGHT_MAX (1u << 16)

/*
 * The pages @client's process holds over all its VM connections; with
 * @in_flight, only those on their way to a slot (waiting for an upload,
 * uploading, or sent a MERGE not answered yet).  What a client may hold
 * is bounded per process, not per connection: a process may open
 * CLIENT_VMS_PER_PID of them (a QEMU opens one per nuksm object, one or
 * a few), and must not hold that many times more.
 */
uint64_t ledger_process_pages(const NuksmClient *client, bool in_flight);

/* True if @client's process may not hold another page. */
static inline bool ledger_full(const NuksmClient *client)
{
    return ledger_process_pages(client, false) >= LEDGER_CLIENT_PAGES_MAX;
}

/* What is out of range in @r (to be freed), or NULL if nothing is. */
char *ledger_ref_problem(NuksmAgent *agent, const NuksmSlotRef *r);

/* The joined VM of id @client_id, or NULL if it left. */
NuksmClient *ledger_client(NuksmAgent *agent, uint32_t client_id);

/*
 * A slot just allocated (SLOT_UPLOADING) or claimed as an orphan holds
 * content of domain @domain: the domain and its files live at least as
 * long as the slot is not free.
 */
void ledger_take_slot(NuksmAgent *agent, SlotId id, uint16_t domain);

/* A punched slot goes back to the free pool, and gives up its domain. */
void ledger_release_slot(NuksmAgent *agent, SlotId id);

/* Add an entry for @page, which @client has none for. */
void ledger_add(NuksmAgent *agent, NuksmClient *client, uint64_t page,
                SlotId id, PageState state);

/* @page of @client, mapped, starts moving to slot @to (a pending user). */
void ledger_move_start(NuksmAgent *agent, NuksmClient *client,
                       uint64_t page, SlotId to);

/*
 * The move of @page is done: it maps the slot it moved to and drops its
 * reference on the one it left (freed if that was the last).
 */
void ledger_move_done(NuksmAgent *agent, NuksmClient *client, uint64_t page);

/* The move of @page failed: it gives up the slot it was to move to. */
void ledger_move_cancel(NuksmAgent *agent, NuksmClient *client,
                        uint64_t page);

/* A PAGE_MERGING or PAGE_PARKED_MERGING entry's page now maps its slot. */
void ledger_map(NuksmAgent *agent, NuksmClient *client, PageRef *e);

/*
 * Remove @page's entry.  If that was its slot's last user, the slot is
 * freed, or kept as an orphan if it was restored (Slot.restored).
 */
void ledger_drop(NuksmAgent *agent, NuksmClient *client, uint64_t page);

/* A page of a client: one that waits for an upload, or uploads. */
typedef struct LedgerWaiter {
    NuksmClient *client;
    uint64_t page;
} LedgerWaiter;

/*
 * Uploads.  A new slot starts SLOT_UPLOADING with the pages that will
 * share it, the uploader's one first; more may join until the content
 * arrives.  The upload then either completes (the content is stored, see
 * copies.h, and every sharer still there is to be sent a MERGE) or is
 * cancelled (the sharers' entries are dropped and the slot freed), which
 * is also what happens when the content cannot be stored.
 *
 * The uploader has LEDGER_UPLOAD_SECONDS from the start: one that does
 * not upload in time, whether it cannot or will not, must not hold back
 * the others' merge of that content (uploads.c hands the upload on).
 */
#define LEDGER_UPLOAD_SECONDS 5

/* Slot @id is to hold a content of @digest: its upload starts. */
void ledger_upload_start(NuksmAgent *agent, SlotId id, uint64_t digest);
void ledger_upload_join(NuksmAgent *agent, SlotId id, NuksmClient *client,
                        uint64_t page);
void ledger_upload_cancel(NuksmAgent *agent, SlotId id);

/*
 * The digest of what slot @id is to hold while its upload is awaited,
 * else of what it holds, read from the store and hashed (the slot keeps
 * none); false if that cannot be read.
 */
bool ledger_slot_digest(NuksmAgent *agent, SlotId id, uint64_t *digest);


/*
 * Upload @id is stored: its sharers still there become PAGE_MERGING.
 * Returns them (LedgerWaiter), for the caller to send each a MERGE.
 */
GArray *ledger_upload_complete(NuksmAgent *agent, SlotId id);

/* The uploads whose uploader's time is up by @now (monotonic us). */
GArray *ledger_uploads_overdue(NuksmAgent *agent, gint64 now);

/* True while the content of slot @id is awaited from an upload. */
bool ledger_upload_awaited(NuksmAgent *agent, SlotId id);

/*
 * Upload @id's uploader is late: the first waiting sharer of a client
 * @preferred, else the first waiting sharer, becomes the uploader, with
 * time of its own, and is in @next; the late one's page (in @late,
 * client NULL if it is gone) leaves the slot.  False if no sharer waits:
 * the upload is cancelled.
 */
bool ledger_upload_reassign(NuksmAgent *agent, SlotId id,
                            bool (*preferred)(const NuksmClient *client),
                            LedgerWaiter *late, LedgerWaiter *next);

/* Queue an unused slot to be freed once the event is done (effects.h). */
void ledger_free(NuksmAgent *agent, SlotId id);

/*
 * Keep @id, an unused SLOT_READY slot that some process may still map
 * although no reference says so, as a SLOT_ORPHAN: out of the index, its
 * content and record kept until a RESTORE takes it back or no process
 * maps it any more (recovery.h).
 */
void ledger_orphan(NuksmAgent *agent, SlotId id);

/*
 * @client leaves: drop all its entries, as if it had answered every
 * MERGE with GONE and unmerged every page.  With @keep, the entries that
 * hold a reference move there as PAGE_MAPPED instead, keeping it, and
 * those with a MERGE unanswered (the VM may have mapped the slot) as
 * PAGE_MERGING, still pending users of their slot.
 */
void ledger_client_leave(NuksmAgent *agent, NuksmClient *client,
                         PageRefs *keep);

/*
 * Drop the entries of @pages, a @keep of ledger_client_leave().  With
 * @may_be_mapped (its process may still map them), the slots that become
 * unused are kept as orphans instead of being freed.
 */
void ledger_release(NuksmAgent *agent, PageRefs *pages, bool may_be_mapped);

/*
 * Hand the entries of @pages, a @keep of ledger_client_leave(), to
 * @client (which has no entries yet): PAGE_MAPPED ones as PAGE_PARKED,
 * PAGE_MERGING ones as PAGE_PARKED_MERGING.
 */
void ledger_adopt(NuksmClient *client, PageRefs *pages);

/*
 * A RESTORE confirms @e, a parked entry of @client naming the slot it
 * restores: it maps the slot.
 */
void ledger_confirm(NuksmAgent *agent, NuksmClient *client, PageRef *e);

/* Drop @client's parked entries: its VM does not map them. */
void ledger_drop_parked(NuksmAgent *agent, NuksmClient *client);

/*
 * Add to @per_node[N] @client's merged pages read lately (hot, over
 * @cold_windows read samples) that map a copy on node N, not on their
 * home: the hot pages it reads remotely, by where the copy is.
 */
void ledger_remote_hot(const NuksmClient *client, uint32_t cold_windows,
                       uint64_t *per_node);

/*
 * @client's merged pages whose copy is on their home node, and the
 * others.  Walks its whole table: for reports, not for hot paths.
 */
void ledger_locality(const NuksmClient *client, uint64_t *local,
                     uint64_t *remote);

/*
 * Check that @r names a node, slot and page that exist; else reject
 * @client (naming @what) and return false.
 */
bool ledger_check_ref(NuksmAgent *agent, NuksmClient *client, uint32_t seq,
                      const char *what, const NuksmSlotRef *r);

/*
 * The entry that @r, of a @type message, answers: @client's page in
 * @state on the slot and generation that @r names.  Anything else
 * rejects @client, and NULL is returned.
 */
PageRef *ledger_expect_entry(NuksmAgent *agent, NuksmClient *client,
                             uint32_t seq, NuksmMsgType type,
                             const NuksmSlotRef *r, PageState state);

#endif /* NUKSMD_LEDGER_H */
