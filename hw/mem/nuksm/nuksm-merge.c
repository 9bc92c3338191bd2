/*
 * nuksm: serving the agent's merge requests, in the scanner thread.
 *
 *   STORE       keep a node's store descriptor (read-only), to map its slots
 *   UPLOAD_REQ  send the content of pages the agent makes new slots of
 *   MERGE       map pages onto slots where the content is equal
 *   MOVE        map merged pages onto another slot of equal content
 *   REFUSED     RESTORE entries the agent did not take back
 *
 * and keeping the agent's view of our references true: UNMERGED when a
 * write or a discard ends a page's sharing, RESTORE of every reference
 * after (re)connecting.
 *
 * Anything the agent names is checked here: a page must be eligible RAM
 * of this VM, a slot must lie inside a store we received.  The agent is
 * trusted with placement, never with content: a page is only ever mapped
 * onto a slot after a full comparison under write protection.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include <sys/mman.h>
#include "exec/ramblock.h"
#include "qemu/error-report.h"
#include "qemu/rcu.h"
#include "nuksm-remap.h"
#include "nuksm-scan.h"
#include "trace.h"

/* Longest run committed at once: bounds the write-protection window. */
#define NUKSM_MERGE_MAX_RUN 512
/* UPLOAD messages queued for the socket before uploading waits. */
#define NUKSM_MERGE_MAX_BACKLOG 16

typedef struct NuksmFindPage {
    uint64_t page;
    RAMBlock *rb;
} NuksmFindPage;

static bool nuksm_merge_find_block(Nuksm *s, RAMBlock *rb, void *opaque)
{
    NuksmFindPage *f = opaque;
    uint64_t first = rb->offset / NUKSM_PAGE_SIZE;

    if (f->page >= first &&
        f->page < first + rb->used_length / NUKSM_PAGE_SIZE) {
        f->rb = rb;
        return false;
    }
    return true;
}

/*
 * Find eligible RAM holding @page.  Called with page_lock and the RCU
 * read lock held; *rb is valid as long as the latter is.
 */
bool nuksm_merge_find_page(NuksmScanner *sc, uint64_t page, RAMBlock **rb,
                           NuksmBlockState **bs, uint64_t *index)
{
    NuksmFindPage f = { .page = page };

    nuksm_ram_foreach_eligible(sc->s, nuksm_merge_find_block, &f);
    if (!f.rb) {
        return false;
    }
    *rb = f.rb;
    *bs = nuksm_scan_block_state(sc, f.rb);
    *index = page - (*bs)->first_page;
    return true;
}

static void nuksm_merge_store(NuksmScanner *sc, NuksmWork *w)
{
    const NuksmMsgStore *m = (const NuksmMsgStore *)w->payload;
    NuksmStore *st = &sc->stores[m->node];

    qemu_mutex_lock(&sc->page_lock);
    if (st->fd >= 0) {
        close(st->fd);
    }
    st->fd = w->fd;
    st->size = m->size;
    qemu_mutex_unlock(&sc->page_lock);
}

void nuksm_merge_stores_free(NuksmScanner *sc)
{
    for (int n = 0; n < NUKSM_MAX_NODES; n++) {
        NuksmStore *st = &sc->stores[n];

        if (st->fd >= 0) {
            close(st->fd);
            st->fd = -1;
        }
    }
}

static bool nuksm_merge_slot_valid(NuksmScanner *sc, const NuksmSlotRef *r,
                                   size_t pages)
{
    const NuksmStore *st = &sc->stores[r->node];

    return st->fd >= 0 && r->slot + pages <= st->size / NUKSM_PAGE_SIZE &&
           r->slot + pages <= NUKSM_REF_MAX_SLOT;
}

/*
 * Post @n entries of @size bytes from @entries as batches of at most
 * @max entries each.
 */
static void nuksm_merge_post_batches(NuksmScanner *sc, uint32_t epoch,
                                     NuksmMsgType type, const void *entries,
                                     size_t size, size_t n, size_t max)
{
    const uint8_t *e = entries;

    while (n) {
        size_t count = MIN(n, max);
        uint32_t len = sizeof(NuksmMsgBatch) + count * size;
        g_autofree uint8_t *buf = g_malloc(len);
        NuksmMsgBatch *b = (NuksmMsgBatch *)buf;

        b->count = count;
        b->reserved = 0;
        memcpy(b + 1, e, count * size);
        nuksm_agent_post(sc->s, epoch, type, buf, len);
        e += count * size;
        n -= count;
    }
}

/* Post slot references as one or more batches. */
static void nuksm_merge_post_refs(NuksmScanner *sc, uint32_t epoch,
                                  NuksmMsgType type, const NuksmSlotRef *r,
                                  size_t n)
{
    nuksm_merge_post_batches(sc, epoch, type, r, sizeof(*r), n,
                             NUKSM_SLOTREFS_MAX);
}

/*
 * Fill @b with the references and content of those of the @n pages the
 * agent asked for (@want) that are eligible RAM; returns how many.  The
 * caller holds the RCU read lock, which keeps the RAM mapped while the
 * pages are copied; a discard meanwhile only makes us upload zeroes,
 * which the agent's digest check refuses.
 */
static uint32_t nuksm_merge_fill_upload(NuksmScanner *sc,
                                        const NuksmSlotRef *want, uint32_t n,
                                        NuksmMsgBatch *b)
{
    NuksmSlotRef *refs = (NuksmSlotRef *)(b + 1);
    uint8_t *host[NUKSM_UPLOAD_MAX];
    uint8_t *content;
    uint32_t count = 0;

    assert(n <= NUKSM_UPLOAD_MAX);
    qemu_mutex_lock(&sc->page_lock);
    for (uint32_t i = 0; i < n; i++) {
        NuksmBlockState *bs;
        RAMBlock *rb;
        uint64_t idx;

        if (!nuksm_merge_find_page(sc, want[i].page, &rb, &bs, &idx)) {
            warn_report_once("nuksm: the agent asked for a page outside "
                             "eligible RAM");
            continue;
        }
        refs[count] = want[i];
        host[count++] = rb->host + idx * NUKSM_PAGE_SIZE;
    }
    qemu_mutex_unlock(&sc->page_lock);
    content = (uint8_t *)(refs + count);
    for (uint32_t i = 0; i < count; i++) {
        memcpy(content + i * NUKSM_PAGE_SIZE, host[i], NUKSM_PAGE_SIZE);
    }
    return count;
}

/*
 * The agent makes new slots of these pages: send their content, up to
 * 60 KiB of guest memory a message.  Each sharer compares its own page
 * with the slot before mapping it, so the content may change meanwhile
 * without harm.
 *
 * Rather than copy the whole batch to the heap, wait for the socket to
 * take what is queued, and wait outside the RCU read lock: the main
 * loop, which drains the queue, may itself be waiting for an RCU grace
 * period (drain_call_rcu() in a failed device_add, say), which a reader
 * asleep here would hold off for ever.
 */
static void nuksm_merge_upload(NuksmScanner *sc, NuksmWork *w)
{
    const NuksmMsgBatch *req = (const NuksmMsgBatch *)w->payload;
    const NuksmSlotRef *want = (const NuksmSlotRef *)(req + 1);
    g_autofree uint8_t *buf = g_malloc(NUKSM_MSG_MAX);
    NuksmMsgBatch *b = (NuksmMsgBatch *)buf;

    b->reserved = 0;
    for (uint32_t done = 0; done < req->count;) {
        uint32_t n = MIN(req->count - done, NUKSM_UPLOAD_MAX);

        while (nuksm_agent_backlog(sc->s) > NUKSM_MERGE_MAX_BACKLOG) {
            g_usleep(1000);
        }
        WITH_RCU_READ_LOCK_GUARD() {
            b->count = nuksm_merge_fill_upload(sc, want + done, n, b);
        }
        done += n;
        if (b->count) {
            nuksm_agent_post(sc->s, w->epoch, NUKSM_MSG_UPLOAD, buf,
                             sizeof(*b) + b->count *
                             (sizeof(NuksmSlotRef) + NUKSM_PAGE_SIZE));
        }
    }
}

/* The slot page @idx of @bs maps (it is merged; page_lock held). */
static NuksmSlotRef nuksm_merge_ref(NuksmBlockState *bs, uint64_t idx)
{
    uint64_t v = bs->refs[idx / NUKSM_REF_REGION][idx % NUKSM_REF_REGION];

    return (NuksmSlotRef) {
        .page = bs->first_page + idx,
        .node = v & 0xff,
        .slot = (v >> 8) & (NUKSM_REF_MAX_SLOT - 1),
        .gen = v >> 32,
        .status = NUKSM_STATUS_NONE,
    };
}

/* Record that page @idx of @bs maps slot @r (page_lock held). */
static void nuksm_merge_remember(NuksmScanner *sc, NuksmBlockState *bs,
                                 uint64_t idx, const NuksmSlotRef *r)
{
    uint64_t **region;

    if (!bs->refs) {
        bs->refs = g_new0(uint64_t *,
                          DIV_ROUND_UP(bs->nr_pages, NUKSM_REF_REGION));
    }
    region = &bs->refs[idx / NUKSM_REF_REGION];
    if (!*region) {
        *region = g_new(uint64_t, NUKSM_REF_REGION);
    }
    (*region)[idx % NUKSM_REF_REGION] =
        (uint64_t)r->gen << 32 | (uint64_t)r->slot << 8 | r->node;
    if (!(bs->flags[idx] & NUKSM_PAGE_REMAPPED)) {
        sc->remapped_pages++;
    }
    bs->flags[idx] |= NUKSM_PAGE_MERGED | NUKSM_PAGE_REMAPPED;
    sc->stats.merged_pages++;
    sc->stats.merged_per_node[r->node]++;
    bs->merged_per_node[r->node]++;
}

/*
 * Page @idx of @bs no longer counts as merged, and the agent is not told:
 * it moved to another slot, or the agent refused its RESTORE (page_lock
 * held).
 */
static void nuksm_merge_leave_quietly(NuksmScanner *sc, NuksmBlockState *bs,
                                      uint64_t idx)
{
    NuksmSlotRef r = nuksm_merge_ref(bs, idx);

    bs->flags[idx] &= ~NUKSM_PAGE_MERGED;
    sc->stats.merged_pages--;
    sc->stats.merged_per_node[r.node]--;
    bs->merged_per_node[r.node]--;
}

/*
 * Page @idx of @bs no longer maps its slot: queue the agent's UNMERGED,
 * saying why (page_lock held).
 */
void nuksm_merge_forget(NuksmScanner *sc, NuksmBlockState *bs, uint64_t idx,
                        NuksmSlotStatus why)
{
    NuksmSlotRef r;

    if (!(bs->flags[idx] & NUKSM_PAGE_MERGED)) {
        return;
    }
    bs->flags[idx] &= ~(NUKSM_PAGE_MERGED | NUKSM_PAGE_STABLE |
                        NUKSM_PAGE_OFFERED);
    r = nuksm_merge_ref(bs, idx);
    r.status = why;
    g_array_append_val(sc->unmerged, r);
    sc->stats.merged_pages--;
    sc->stats.merged_per_node[r.node]--;
    bs->merged_per_node[r.node]--;
}

/*
 * Refuse a run for lack of mappings: the agent forgets it (FAILED), and
 * the scanner holds the pages back until merging resumes (nuksm-maps.c).
 */
static void nuksm_merge_hold(NuksmBlockState *bs, uint64_t idx,
                             NuksmSlotRef *r, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        r[i].status = NUKSM_STATUS_FAILED;
        bs->flags[idx + i] &= ~NUKSM_PAGE_OFFERED;
        bs->flags[idx + i] |= NUKSM_PAGE_HELD;
    }
}

/*
 * Commit one run: @n entries of @r naming consecutive pages of one block
 * and consecutive slots of one node, if the mapping budget allows.
 * Fills in each entry's status.
 */
static void nuksm_merge_run(NuksmScanner *sc, RAMBlock *rb,
                            NuksmBlockState *bs, uint64_t idx,
                            NuksmSlotRef *r, size_t n)
{
    bool merged[NUKSM_MERGE_MAX_RUN];
    NuksmStore *st = &sc->stores[r->node];
    int64_t edges;
    int err;

    if (!nuksm_maps_afford(sc, nuksm_maps_cost(bs, idx, n, false, r->node,
                                               r->slot), n)) {
        nuksm_merge_hold(bs, idx, r, n);
        return;
    }
    edges = nuksm_maps_window(bs, idx, n);
    nuksm_remap_merge_run(sc->uffd, rb->host + idx * NUKSM_PAGE_SIZE, n,
                          st->fd, r->slot,
                          qatomic_read(&sc->s->commit_delay_us), merged,
                          &err);
    if (err) {
        trace_nuksm_merge_run_error(n, err);
    }
    for (size_t i = 0; i < n; i++) {
        if (merged[i]) {
            r[i].status = NUKSM_STATUS_MERGED;
            nuksm_merge_remember(sc, bs, idx + i, &r[i]);
        } else if (err == ENOMEM) {
            nuksm_merge_hold(bs, idx + i, &r[i], 1);
        } else {
            r[i].status = NUKSM_STATUS_CHANGED;
            /* The agent forgets it: offer it again when stable. */
            bs->flags[idx + i] &= ~NUKSM_PAGE_OFFERED;
        }
    }
    nuksm_maps_account(sc, nuksm_maps_window(bs, idx, n) - edges);
    if (err == ENOMEM) {
        nuksm_maps_exhausted(sc);
    }
}

/* How many entries from @r on form one run on @bs starting at @idx. */
static size_t nuksm_merge_run_length(NuksmScanner *sc, NuksmBlockState *bs,
                                     uint64_t idx, const NuksmSlotRef *r,
                                     size_t left)
{
    size_t n = 1;

    while (n < left && n < NUKSM_MERGE_MAX_RUN &&
           r[n].page == r[0].page + n && r[n].node == r[0].node &&
           r[n].slot == r[0].slot + n && idx + n < bs->nr_pages &&
           !(bs->flags[idx + n] & (NUKSM_PAGE_MERGED | NUKSM_PAGE_ZERO))) {
        n++;
    }
    return nuksm_merge_slot_valid(sc, r, n) ? n : 0;
}

/* A run of a MERGE batch: @n entries from @first on. */
typedef struct NuksmMergeRun {
    size_t first, n;
    RAMBlock *rb;
    NuksmBlockState *bs;
    uint64_t idx;
} NuksmMergeRun;

/*
 * The connection @w came from has ended meanwhile: commit nothing more
 * of it.  Its agent may be gone, and the next one frees the slots that
 * no page reads when it looks (recovery in docs/agent.rst), which a
 * commit finishing late could then map.
 */
static bool nuksm_merge_stale(NuksmScanner *sc, NuksmWork *w)
{
    return qatomic_read(&sc->epoch) != w->epoch;
}

static void nuksm_merge_merge(NuksmScanner *sc, NuksmWork *w)
{
    const NuksmMsgBatch *b = (const NuksmMsgBatch *)w->payload;
    g_autofree NuksmSlotRef *r = g_memdup2(b + 1,
                                           b->count * sizeof(NuksmSlotRef));
    g_autofree NuksmMergeRun *runs = g_new(NuksmMergeRun, b->count);
    size_t i = 0, nr_runs = 0;

    RCU_READ_LOCK_GUARD();
    qemu_mutex_lock(&sc->page_lock);
    nuksm_maps_tick(sc, false);
    while (i < b->count) {
        NuksmBlockState *bs;
        RAMBlock *rb;
        uint64_t idx;
        size_t n = 0;

        if (!nuksm_merge_find_page(sc, r[i].page, &rb, &bs, &idx)) {
            r[i++].status = NUKSM_STATUS_GONE;
            continue;
        }
        if (sc->uffd >= 0 &&
            !(bs->flags[idx] & (NUKSM_PAGE_MERGED | NUKSM_PAGE_ZERO))) {
            n = nuksm_merge_run_length(sc, bs, idx, &r[i], b->count - i);
        }
        if (!n) {
            bs->flags[idx] &= ~NUKSM_PAGE_OFFERED;
            r[i++].status = NUKSM_STATUS_GONE;
            continue;
        }
        runs[nr_runs++] = (NuksmMergeRun) { i, n, rb, bs, idx };
        i += n;
    }
    /*
     * Runs that cost no mapping (they continue or join runs already
     * mapped) first, then the others while the mapping budget lasts.
     */
    for (size_t k = 0; k < nr_runs && !nuksm_merge_stale(sc, w); k++) {
        NuksmMergeRun *m = &runs[k];

        if (nuksm_maps_cost(m->bs, m->idx, m->n, false, r[m->first].node,
                            r[m->first].slot) <= 0) {
            nuksm_merge_run(sc, m->rb, m->bs, m->idx, &r[m->first], m->n);
            m->n = 0;
        }
    }
    for (size_t k = 0; k < nr_runs; k++) {
        NuksmMergeRun *m = &runs[k];

        if (!m->n) {
            continue;
        }
        if (nuksm_merge_stale(sc, w)) {
            for (size_t j = 0; j < m->n; j++) {
                r[m->first + j].status = NUKSM_STATUS_GONE;
            }
            continue;
        }
        nuksm_merge_run(sc, m->rb, m->bs, m->idx, &r[m->first], m->n);
    }
    qemu_mutex_unlock(&sc->page_lock);
    nuksm_merge_post_refs(sc, w->epoch, NUKSM_MSG_MERGED, r, b->count);
}

/* True if page @idx of @bs maps exactly the slot @r names. */
static bool nuksm_merge_maps(NuksmBlockState *bs, uint64_t idx,
                             const NuksmSlotRef *r)
{
    NuksmSlotRef cur;

    if (!(bs->flags[idx] & NUKSM_PAGE_MERGED)) {
        return false;
    }
    cur = nuksm_merge_ref(bs, idx);
    return cur.node == r->node && cur.slot == r->slot && cur.gen == r->gen;
}

/*
 * How many moves from @m on form one run: consecutive pages of @bs from
 * @idx, each mapping the next slot of one run and moving to the next
 * slot of another.
 */
static size_t nuksm_merge_move_run_length(NuksmScanner *sc,
                                          NuksmBlockState *bs, uint64_t idx,
                                          const NuksmMove *m, size_t left)
{
    size_t n = 1;

    while (n < left && n < NUKSM_MERGE_MAX_RUN && idx + n < bs->nr_pages &&
           m[n].to.page == m[0].to.page + n &&
           m[n].from.node == m[0].from.node &&
           m[n].from.slot == m[0].from.slot + n &&
           m[n].to.node == m[0].to.node &&
           m[n].to.slot == m[0].to.slot + n &&
           nuksm_merge_maps(bs, idx + n, &m[n].from)) {
        n++;
    }
    return nuksm_merge_slot_valid(sc, &m[0].to, n) ? n : 0;
}

/*
 * Placement changed: remap merged pages onto a copy elsewhere, after the
 * same comparison under write protection as a merge.  A page that no
 * longer maps the slot it is to leave stays as it is (GONE); the COW or
 * discard that ended its sharing is reported by UNMERGED.
 */
static void nuksm_merge_move(NuksmScanner *sc, NuksmWork *w)
{
    const NuksmMsgBatch *b = (const NuksmMsgBatch *)w->payload;
    g_autofree NuksmMove *m = g_memdup2(b + 1, b->count * sizeof(NuksmMove));
    bool merged[NUKSM_MERGE_MAX_RUN];
    size_t i = 0;

    RCU_READ_LOCK_GUARD();
    qemu_mutex_lock(&sc->page_lock);
    while (i < b->count) {
        NuksmBlockState *bs;
        RAMBlock *rb;
        uint64_t idx;
        int64_t edges;
        size_t n;
        int err;

        if (nuksm_merge_stale(sc, w) ||
            !nuksm_merge_find_page(sc, m[i].to.page, &rb, &bs, &idx) ||
            !nuksm_merge_maps(bs, idx, &m[i].from)) {
            m[i++].to.status = NUKSM_STATUS_GONE;
            continue;
        }
        n = sc->uffd < 0 ? 0 :
            nuksm_merge_move_run_length(sc, bs, idx, &m[i], b->count - i);
        if (n && !nuksm_maps_afford(sc, nuksm_maps_cost(bs, idx, n, false,
                                                        m[i].to.node,
                                                        m[i].to.slot), 0)) {
            /* Out of mappings: the pages stay where they are. */
            for (size_t k = 0; k < n; k++) {
                m[i + k].to.status = NUKSM_STATUS_FAILED;
            }
            i += n;
            continue;
        }
        if (!n) {
            /* Stepped aside, or no store to move to: the page stays. */
            m[i++].to.status = NUKSM_STATUS_FAILED;
            continue;
        }
        edges = nuksm_maps_window(bs, idx, n);
        nuksm_remap_merge_run(sc->uffd, rb->host + idx * NUKSM_PAGE_SIZE, n,
                              sc->stores[m[i].to.node].fd, m[i].to.slot,
                              0, merged, &err);
        for (size_t k = 0; k < n; k++) {
            if (merged[k]) {
                nuksm_merge_leave_quietly(sc, bs, idx + k);
                nuksm_merge_remember(sc, bs, idx + k, &m[i + k].to);
                m[i + k].to.status = NUKSM_STATUS_MERGED;
            } else {
                m[i + k].to.status = err == ENOMEM ? NUKSM_STATUS_FAILED :
                                                     NUKSM_STATUS_CHANGED;
            }
        }
        nuksm_maps_account(sc, nuksm_maps_window(bs, idx, n) - edges);
        if (err == ENOMEM) {
            nuksm_maps_exhausted(sc);
        }
        i += n;
    }
    qemu_mutex_unlock(&sc->page_lock);
    nuksm_merge_post_batches(sc, w->epoch, NUKSM_MSG_MOVED, m, sizeof(*m),
                             b->count, NUKSM_MOVES_MAX);
}

/*
 * The agent holds no reference for these pages, so nothing keeps their
 * slot for them: each is made our own again by copy-on-write (an atomic
 * add of zero writes without changing a byte, whatever a vCPU writes
 * meanwhile), no longer reported, and offered again, so that it merges
 * anew.
 */
static void nuksm_merge_refused(NuksmScanner *sc, NuksmWork *w)
{
    const NuksmMsgBatch *b = (const NuksmMsgBatch *)w->payload;
    const NuksmSlotRef *r = (const NuksmSlotRef *)(b + 1);

    RCU_READ_LOCK_GUARD();
    qemu_mutex_lock(&sc->page_lock);
    for (uint32_t i = 0; i < b->count; i++) {
        NuksmBlockState *bs;
        RAMBlock *rb;
        uint64_t idx;

        if (nuksm_merge_find_page(sc, r[i].page, &rb, &bs, &idx) &&
            nuksm_merge_maps(bs, idx, &r[i])) {
            trace_nuksm_merge_refused(r[i].page, r[i].node, r[i].slot);
            nuksm_merge_leave_quietly(sc, bs, idx);
            bs->flags[idx] &= ~(NUKSM_PAGE_STABLE | NUKSM_PAGE_OFFERED);
            qatomic_fetch_add((uint64_t *)(rb->host +
                                           idx * NUKSM_PAGE_SIZE), 0);
        }
    }
    qemu_mutex_unlock(&sc->page_lock);
}

void nuksm_merge_handle(NuksmScanner *sc, NuksmWork *w)
{
    trace_nuksm_merge_handle(w->type, w->len);
    switch (w->type) {
    case NUKSM_MSG_STORE:
        nuksm_merge_store(sc, w);
        break;
    case NUKSM_MSG_UPLOAD_REQ:
        nuksm_merge_upload(sc, w);
        break;
    case NUKSM_MSG_MERGE:
        nuksm_merge_merge(sc, w);
        break;
    case NUKSM_MSG_MOVE:
        nuksm_merge_move(sc, w);
        break;
    case NUKSM_MSG_REFUSED:
        nuksm_merge_refused(sc, w);
        break;
    default:
        g_assert_not_reached();
    }
}

/*
 * A new connection: what the old one did not send is moot, and the agent
 * (maybe restarted) learns which slots we still map.
 */
void nuksm_merge_reset(NuksmScanner *sc, uint32_t epoch)
{
    g_autoptr(GArray) restore = g_array_new(false, false,
                                            sizeof(NuksmSlotRef));
    GHashTableIter it;
    NuksmBlockState *bs;

    qemu_mutex_lock(&sc->page_lock);
    g_hash_table_iter_init(&it, sc->blocks);
    while (g_hash_table_iter_next(&it, NULL, (gpointer *)&bs)) {
        for (uint64_t i = 0; i < bs->nr_pages; i++) {
            /* A new agent has an empty unstable table: offer again. */
            bs->flags[i] &= ~NUKSM_PAGE_OFFERED;
            if (bs->flags[i] & NUKSM_PAGE_MERGED) {
                NuksmSlotRef r = nuksm_merge_ref(bs, i);
                g_array_append_val(restore, r);
            }
        }
    }
    /* What the old connection did not get to send is moot. */
    g_array_set_size(sc->candidates, 0);
    g_array_set_size(sc->unmerged, 0);
    qemu_mutex_unlock(&sc->page_lock);

    nuksm_merge_post_refs(sc, epoch, NUKSM_MSG_RESTORE,
                          (NuksmSlotRef *)restore->data, restore->len);
    sc->work_epoch = epoch;
}

/*
 * RAM discard (balloon, virtio-mem, postcopy) over pages we remapped:
 * MADV_DONTNEED there would expose the store, so map fresh anonymous
 * memory instead.  Returns false (nothing done) when no page of the
 * range was ever remapped: the caller's MADV_DONTNEED is right then.
 */
bool nuksm_scanner_discard(NuksmScanner *sc, RAMBlock *rb, void *host,
                           size_t len)
{
    uint64_t first = ((uint8_t *)host - rb->host) / NUKSM_PAGE_SIZE;
    uint64_t count = len / NUKSM_PAGE_SIZE;
    NuksmBlockState *bs;
    bool remapped = false;
    int64_t edges;
    int ret;

    qemu_mutex_lock(&sc->page_lock);
    bs = g_hash_table_lookup(sc->blocks, rb->idstr);
    for (uint64_t i = 0; bs && i < count && first + i < bs->nr_pages; i++) {
        remapped |= bs->flags[first + i] & NUKSM_PAGE_REMAPPED;
    }
    if (!remapped) {
        qemu_mutex_unlock(&sc->page_lock);
        return false;
    }
    count = MIN(count, bs->nr_pages - first);
    edges = nuksm_maps_window(bs, first, count);
    ret = nuksm_remap_anonymous(sc->uffd, host, len);
    if (ret < 0) {
        error_report("nuksm: cannot restore anonymous memory over a "
                     "discarded range: %s", strerror(-ret));
    }
    for (uint64_t i = 0; i < count && first + i < bs->nr_pages; i++) {
        uint8_t *flags = &bs->flags[first + i];

        if (*flags & NUKSM_PAGE_MERGED) {
            nuksm_merge_forget(sc, bs, first + i, NUKSM_STATUS_DISCARDED);
        }
        if (*flags & NUKSM_PAGE_ZERO) {
            sc->stats.zero_pages--;
        }
        if (*flags & NUKSM_PAGE_REMAPPED) {
            sc->remapped_pages--;
        }
        *flags = 0;
        bs->digest[first + i] = 0;
    }
    /* The anonymous mapping gives back the mappings it replaced. */
    nuksm_maps_account(sc, nuksm_maps_window(bs, first, count) - edges);
    qemu_mutex_lock(&sc->lock);
    nuksm_scan_flush_unmerged(sc, sc->epoch);
    qemu_mutex_unlock(&sc->lock);
    qemu_mutex_unlock(&sc->page_lock);
    return true;
}
