/*
 * nuksm: the commit unit, serving the agent's merge requests in the
 * scanner thread:
 *
 *   STORE       keep a node's store descriptor (read-only), to map its slots
 *   UPLOAD_REQ  send the content of pages the agent makes new slots of
 *   MERGE       map pages onto slots where the content is equal
 *   MOVE        map merged pages onto another slot of equal content
 *   REFUSED     RESTORE entries the agent did not take back
 *
 * and keeping the agent's view of our references true: UNMERGED when a
 * write or a discard ends a page's sharing, RESTORE of every reference
 * after (re)connecting.  It also holds the userfaultfd on guest RAM,
 * drops zero pages for the scanner and serves RAM discard.
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
#include "qapi/error.h"
#include "exec/ramblock.h"
#include "qemu/cutils.h"
#include "qemu/error-report.h"
#include "qemu/main-loop.h"
#include "qemu/rcu.h"
#include "nuksm-commit.h"
#include "nuksm-remap.h"
#include "nuksm-scan.h"
#include "trace.h"

/* Longest run committed at once: bounds the write-protection window. */
#define NUKSM_COMMIT_MAX_RUN 512
/* UPLOAD messages queued for the socket before uploading waits. */
#define NUKSM_COMMIT_MAX_BACKLOG 16

typedef struct NuksmFindPage {
    uint64_t page;
    RAMBlock *rb;
    uint8_t gnode;
} NuksmFindPage;

static bool nuksm_commit_find_block(RAMBlock *rb, uint8_t gnode,
                                    void *opaque)
{
    NuksmFindPage *f = opaque;
    uint64_t first = rb->offset / NUKSM_PAGE_SIZE;

    if (f->page >= first &&
        f->page < first + rb->used_length / NUKSM_PAGE_SIZE) {
        f->rb = rb;
        f->gnode = gnode;
        return false;
    }
    return true;
}

/*
 * Find eligible RAM holding @page.  Called with page_lock and the RCU
 * read lock held; *rb is valid as long as the latter is.
 */
static bool nuksm_commit_find_page(NuksmCommit *c, uint64_t page,
                                   RAMBlock **rb, NuksmBlockState **bs,
                                   uint64_t *index)
{
    NuksmFindPage f = { .page = page };

    nuksm_ram_foreach_resolved(c->s, nuksm_commit_find_block, &f);
    if (!f.rb) {
        return false;
    }
    *rb = f.rb;
    *bs = nuksm_pages_block(c->pages, f.rb, f.gnode);
    *index = page - (*bs)->first_page;
    return true;
}

static void nuksm_commit_store(NuksmCommit *c, NuksmWork *w)
{
    const NuksmMsgStore *m = (const NuksmMsgStore *)w->payload;
    NuksmStore *st = &c->stores[m->node];

    qemu_mutex_lock(&c->pages->lock);
    if (st->fd >= 0) {
        close(st->fd);
    }
    st->fd = w->fd;
    st->size = m->size;
    qemu_mutex_unlock(&c->pages->lock);
}

static void nuksm_commit_stores_free(NuksmCommit *c)
{
    for (int n = 0; n < NUKSM_MAX_NODES; n++) {
        NuksmStore *st = &c->stores[n];

        if (st->fd >= 0) {
            close(st->fd);
            st->fd = -1;
        }
    }
}

static bool nuksm_commit_slot_valid(NuksmCommit *c, const NuksmSlotRef *r,
                                    size_t pages)
{
    const NuksmStore *st = &c->stores[r->node];

    return st->fd >= 0 && r->slot + pages <= st->size / NUKSM_PAGE_SIZE &&
           r->slot + pages <= NUKSM_REF_MAX_SLOT;
}

/* Post slot references as one or more batches. */
static void nuksm_commit_post_refs(NuksmCommit *c, uint32_t epoch,
                                   NuksmMsgType type, const NuksmSlotRef *r,
                                   size_t n)
{
    nuksm_agent_post_batches(c->s, epoch, type, r, sizeof(*r), n,
                             NUKSM_SLOTREFS_MAX);
}

/*
 * Fill @b with the references and content of those of the @n pages the
 * agent asked for (@want) that are eligible RAM; returns how many.  The
 * caller holds the RCU read lock, which keeps the RAM mapped while the
 * pages are copied; a discard meanwhile only makes us upload zeroes,
 * which the agent's digest check refuses.
 */
static uint32_t nuksm_commit_fill_upload(NuksmCommit *c,
                                         const NuksmSlotRef *want,
                                         uint32_t n, NuksmMsgBatch *b)
{
    NuksmSlotRef *refs = (NuksmSlotRef *)(b + 1);
    uint8_t *host[NUKSM_UPLOAD_MAX];
    uint8_t *content;
    uint32_t count = 0;

    assert(n <= NUKSM_UPLOAD_MAX);
    qemu_mutex_lock(&c->pages->lock);
    for (uint32_t i = 0; i < n; i++) {
        NuksmBlockState *bs;
        RAMBlock *rb;
        uint64_t idx;

        if (!nuksm_commit_find_page(c, want[i].page, &rb, &bs, &idx)) {
            warn_report_once("nuksm: the agent asked for a page outside "
                             "eligible RAM");
            continue;
        }
        refs[count] = want[i];
        host[count++] = rb->host + idx * NUKSM_PAGE_SIZE;
    }
    qemu_mutex_unlock(&c->pages->lock);
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
static void nuksm_commit_upload(NuksmCommit *c, NuksmWork *w)
{
    const NuksmMsgBatch *req = (const NuksmMsgBatch *)w->payload;
    const NuksmSlotRef *want = (const NuksmSlotRef *)(req + 1);
    g_autofree uint8_t *buf = g_malloc(NUKSM_MSG_MAX);
    NuksmMsgBatch *b = (NuksmMsgBatch *)buf;

    b->reserved = 0;
    for (uint32_t done = 0; done < req->count;) {
        uint32_t n = MIN(req->count - done, NUKSM_UPLOAD_MAX);

        while (nuksm_agent_backlog(c->s) > NUKSM_COMMIT_MAX_BACKLOG) {
            g_usleep(1000);
        }
        WITH_RCU_READ_LOCK_GUARD() {
            b->count = nuksm_commit_fill_upload(c, want + done, n, b);
        }
        done += n;
        if (b->count) {
            nuksm_agent_post(c->s, w->epoch, NUKSM_MSG_UPLOAD, buf,
                             sizeof(*b) + b->count *
                             (sizeof(NuksmSlotRef) + NUKSM_PAGE_SIZE));
        }
    }
}

/*
 * Page @idx of @bs no longer maps its slot: queue the agent's UNMERGED,
 * saying why (page_lock held).
 */
void nuksm_commit_forget(NuksmCommit *c, NuksmBlockState *bs, uint64_t idx,
                         NuksmSlotStatus why)
{
    NuksmSlotRef r;

    if (!(nuksm_page_flags(bs, idx) & NUKSM_PAGE_MERGED)) {
        return;
    }
    r = nuksm_pages_unmerged(c->pages, bs, idx,
                             NUKSM_PAGE_STABLE | NUKSM_PAGE_OFFERED);
    r.status = why;
    g_array_append_val(c->unmerged, r);
}

/* Post the UNMERGED references queued (page_lock held). */
void nuksm_commit_flush_unmerged(NuksmCommit *c, uint32_t epoch)
{
    if (c->unmerged->len) {
        nuksm_commit_post_refs(c, epoch, NUKSM_MSG_UNMERGED,
                               (NuksmSlotRef *)c->unmerged->data,
                               c->unmerged->len);
        g_array_set_size(c->unmerged, 0);
    }
}

/*
 * Drop page @idx of @bs, at @host, stable and all zero, under write
 * protection: it reads back as zero.  Returns true if it was dropped
 * (page_lock held).
 */
bool nuksm_commit_drop_zero(NuksmCommit *c, NuksmBlockState *bs,
                            uint64_t idx, uint8_t *host)
{
    bool zeroed;

    nuksm_remap_zero_run(c->uffd, host, 1, &zeroed);
    if (zeroed) {
        nuksm_pages_zeroed(c->pages, bs, idx);
    }
    return zeroed;
}

/*
 * Refuse a run for lack of mappings: the agent forgets it (FAILED), and
 * the scanner holds the pages back until merging resumes (nuksm-maps.c).
 */
static void nuksm_commit_hold(NuksmBlockState *bs, uint64_t idx,
                              NuksmSlotRef *r, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        r[i].status = NUKSM_STATUS_FAILED;
        nuksm_page_update(bs, idx + i, NUKSM_PAGE_OFFERED, NUKSM_PAGE_HELD);
    }
}

/*
 * Commit one run: @n entries of @r naming consecutive pages of one block
 * and consecutive slots of one node, if the mapping budget allows.
 * Fills in each entry's status.
 */
static void nuksm_commit_run(NuksmCommit *c, RAMBlock *rb,
                             NuksmBlockState *bs, uint64_t idx,
                             NuksmSlotRef *r, size_t n)
{
    bool merged[NUKSM_COMMIT_MAX_RUN];
    NuksmStore *st = &c->stores[r->node];
    int64_t edges;
    int err;

    if (!nuksm_maps_afford(c, nuksm_maps_cost(bs, idx, n, false, r->node,
                                              r->slot), n)) {
        nuksm_commit_hold(bs, idx, r, n);
        return;
    }
    edges = nuksm_maps_window(bs, idx, n);
    nuksm_remap_merge_run(c->uffd, rb->host + idx * NUKSM_PAGE_SIZE, n,
                          st->fd, r->slot,
                          qatomic_read(&c->s->commit_delay_us), merged,
                          &err);
    if (err) {
        trace_nuksm_commit_run_error(n, err);
    }
    for (size_t i = 0; i < n; i++) {
        if (merged[i]) {
            r[i].status = NUKSM_STATUS_MERGED;
            nuksm_pages_merged(c->pages, bs, idx + i, &r[i]);
        } else if (err == ENOMEM) {
            nuksm_commit_hold(bs, idx + i, &r[i], 1);
        } else {
            r[i].status = NUKSM_STATUS_CHANGED;
            /* The agent forgets it: offer it again when stable. */
            nuksm_page_update(bs, idx + i, NUKSM_PAGE_OFFERED, 0);
        }
    }
    nuksm_maps_account(c, nuksm_maps_window(bs, idx, n) - edges);
    if (err == ENOMEM) {
        nuksm_maps_exhausted(c);
    }
}

/* How many entries from @r on form one run on @bs starting at @idx. */
static size_t nuksm_commit_run_length(NuksmCommit *c, NuksmBlockState *bs,
                                      uint64_t idx, const NuksmSlotRef *r,
                                      size_t left)
{
    size_t n = 1;

    while (n < left && n < NUKSM_COMMIT_MAX_RUN &&
           r[n].page == r[0].page + n && r[n].node == r[0].node &&
           r[n].slot == r[0].slot + n && idx + n < bs->nr_pages &&
           !(nuksm_page_flags(bs, idx + n) &
             (NUKSM_PAGE_MERGED | NUKSM_PAGE_ZERO))) {
        n++;
    }
    return nuksm_commit_slot_valid(c, r, n) ? n : 0;
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
static bool nuksm_commit_stale(NuksmCommit *c, NuksmWork *w)
{
    return nuksm_scanner_epoch(c->s->scanner) != w->epoch;
}

static void nuksm_commit_merge(NuksmCommit *c, NuksmWork *w)
{
    const NuksmMsgBatch *b = (const NuksmMsgBatch *)w->payload;
    g_autofree NuksmSlotRef *r = g_memdup2(b + 1,
                                           b->count * sizeof(NuksmSlotRef));
    g_autofree NuksmMergeRun *runs = g_new(NuksmMergeRun, b->count);
    size_t i = 0, nr_runs = 0;

    RCU_READ_LOCK_GUARD();
    qemu_mutex_lock(&c->pages->lock);
    nuksm_maps_tick(c, false);
    while (i < b->count) {
        NuksmBlockState *bs;
        RAMBlock *rb;
        uint64_t idx;
        size_t n = 0;

        if (!nuksm_commit_find_page(c, r[i].page, &rb, &bs, &idx)) {
            r[i++].status = NUKSM_STATUS_GONE;
            continue;
        }
        if (c->uffd >= 0 && !(nuksm_page_flags(bs, idx) &
                              (NUKSM_PAGE_MERGED | NUKSM_PAGE_ZERO))) {
            n = nuksm_commit_run_length(c, bs, idx, &r[i], b->count - i);
        }
        if (!n) {
            nuksm_page_update(bs, idx, NUKSM_PAGE_OFFERED, 0);
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
    for (size_t k = 0; k < nr_runs && !nuksm_commit_stale(c, w); k++) {
        NuksmMergeRun *m = &runs[k];

        if (nuksm_maps_cost(m->bs, m->idx, m->n, false, r[m->first].node,
                            r[m->first].slot) <= 0) {
            nuksm_commit_run(c, m->rb, m->bs, m->idx, &r[m->first], m->n);
            m->n = 0;
        }
    }
    for (size_t k = 0; k < nr_runs; k++) {
        NuksmMergeRun *m = &runs[k];

        if (!m->n) {
            continue;
        }
        if (nuksm_commit_stale(c, w)) {
            for (size_t j = 0; j < m->n; j++) {
                r[m->first + j].status = NUKSM_STATUS_GONE;
            }
            continue;
        }
        nuksm_commit_run(c, m->rb, m->bs, m->idx, &r[m->first], m->n);
    }
    qemu_mutex_unlock(&c->pages->lock);
    nuksm_commit_post_refs(c, w->epoch, NUKSM_MSG_MERGED, r, b->count);
}

/*
 * How many moves from @m on form one run: consecutive pages of @bs from
 * @idx, each mapping the next slot of one run and moving to the next
 * slot of another.
 */
static size_t nuksm_commit_move_run_length(NuksmCommit *c,
                                           NuksmBlockState *bs, uint64_t idx,
                                           const NuksmMove *m, size_t left)
{
    size_t n = 1;

    while (n < left && n < NUKSM_COMMIT_MAX_RUN && idx + n < bs->nr_pages &&
           m[n].to.page == m[0].to.page + n &&
           m[n].from.node == m[0].from.node &&
           m[n].from.slot == m[0].from.slot + n &&
           m[n].to.node == m[0].to.node &&
           m[n].to.slot == m[0].to.slot + n &&
           nuksm_page_maps(bs, idx + n, &m[n].from)) {
        n++;
    }
    return nuksm_commit_slot_valid(c, &m[0].to, n) ? n : 0;
}

/*
 * Placement changed: remap merged pages onto a copy elsewhere, after the
 * same comparison under write protection as a merge.  A page that no
 * longer maps the slot it is to leave stays as it is (GONE); the COW or
 * discard that ended its sharing is reported by UNMERGED.
 */
static void nuksm_commit_move(NuksmCommit *c, NuksmWork *w)
{
    const NuksmMsgBatch *b = (const NuksmMsgBatch *)w->payload;
    g_autofree NuksmMove *m = g_memdup2(b + 1, b->count * sizeof(NuksmMove));
    bool merged[NUKSM_COMMIT_MAX_RUN];
    size_t i = 0;

    RCU_READ_LOCK_GUARD();
    qemu_mutex_lock(&c->pages->lock);
    while (i < b->count) {
        NuksmBlockState *bs;
        RAMBlock *rb;
        uint64_t idx;
        int64_t edges;
        size_t n;
        int err;

        if (nuksm_commit_stale(c, w) ||
            !nuksm_commit_find_page(c, m[i].to.page, &rb, &bs, &idx) ||
            !nuksm_page_maps(bs, idx, &m[i].from)) {
            m[i++].to.status = NUKSM_STATUS_GONE;
            continue;
        }
        n = c->uffd < 0 ? 0 :
            nuksm_commit_move_run_length(c, bs, idx, &m[i], b->count - i);
        if (n && !nuksm_maps_afford(c, nuksm_maps_cost(bs, idx, n, false,
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
        nuksm_remap_merge_run(c->uffd, rb->host + idx * NUKSM_PAGE_SIZE, n,
                              c->stores[m[i].to.node].fd, m[i].to.slot,
                              0, merged, &err);
        for (size_t k = 0; k < n; k++) {
            if (merged[k]) {
                /* Left quietly: the agent moved the reference itself. */
                nuksm_pages_unmerged(c->pages, bs, idx + k, 0);
                nuksm_pages_merged(c->pages, bs, idx + k, &m[i + k].to);
                m[i + k].to.status = NUKSM_STATUS_MERGED;
            } else {
                m[i + k].to.status = err == ENOMEM ? NUKSM_STATUS_FAILED :
                                                     NUKSM_STATUS_CHANGED;
            }
        }
        nuksm_maps_account(c, nuksm_maps_window(bs, idx, n) - edges);
        if (err == ENOMEM) {
            nuksm_maps_exhausted(c);
        }
        i += n;
    }
    qemu_mutex_unlock(&c->pages->lock);
    nuksm_agent_post_batches(c->s, w->epoch, NUKSM_MSG_MOVED, m, sizeof(*m),
                             b->count, NUKSM_MOVES_MAX);
}

/*
 * The agent holds no reference for these pages, so nothing keeps their
 * slot for them: each is made our own again by copy-on-write (an atomic
 * add of zero writes without changing a byte, whatever a vCPU writes
 * meanwhile), no longer reported, and offered again, so that it merges
 * anew.
 */
static void nuksm_commit_refused(NuksmCommit *c, NuksmWork *w)
{
    const NuksmMsgBatch *b = (const NuksmMsgBatch *)w->payload;
    const NuksmSlotRef *r = (const NuksmSlotRef *)(b + 1);

    RCU_READ_LOCK_GUARD();
    qemu_mutex_lock(&c->pages->lock);
    for (uint32_t i = 0; i < b->count; i++) {
        NuksmBlockState *bs;
        RAMBlock *rb;
        uint64_t idx;

        if (nuksm_commit_find_page(c, r[i].page, &rb, &bs, &idx) &&
            nuksm_page_maps(bs, idx, &r[i])) {
            trace_nuksm_commit_refused(r[i].page, r[i].node, r[i].slot);
            nuksm_pages_unmerged(c->pages, bs, idx,
                                 NUKSM_PAGE_STABLE | NUKSM_PAGE_OFFERED);
            qatomic_fetch_add((uint64_t *)(rb->host +
                                           idx * NUKSM_PAGE_SIZE), 0);
        }
    }
    qemu_mutex_unlock(&c->pages->lock);
}

static void nuksm_commit_handle(NuksmCommit *c, NuksmWork *w)
{
    trace_nuksm_commit_handle(w->type, w->len);
    switch (w->type) {
    case NUKSM_MSG_STORE:
        nuksm_commit_store(c, w);
        break;
    case NUKSM_MSG_UPLOAD_REQ:
        nuksm_commit_upload(c, w);
        break;
    case NUKSM_MSG_MERGE:
        nuksm_commit_merge(c, w);
        break;
    case NUKSM_MSG_MOVE:
        nuksm_commit_move(c, w);
        break;
    case NUKSM_MSG_REFUSED:
        nuksm_commit_refused(c, w);
        break;
    default:
        g_assert_not_reached();
    }
}

/*
 * Serve request @w, taken with nuksm_commit_next(), if it belongs to
 * @epoch, the connection the thread works for; it is freed.
 */
void nuksm_commit_serve(NuksmCommit *c, NuksmWork *w, uint32_t epoch)
{
    if (w->epoch == epoch) {
        nuksm_commit_handle(c, w);
    } else if (w->fd >= 0) {
        close(w->fd);
    }
    g_free(w);
}

/* The next request queued by the main loop, or NULL. */
NuksmWork *nuksm_commit_next(NuksmCommit *c)
{
    NuksmWork *w;

    qemu_mutex_lock(&c->lock);
    w = g_queue_pop_head(&c->work);
    qemu_mutex_unlock(&c->lock);
    return w;
}

bool nuksm_commit_has_work(NuksmCommit *c)
{
    bool has;

    qemu_mutex_lock(&c->lock);
    has = !g_queue_is_empty(&c->work);
    qemu_mutex_unlock(&c->lock);
    return has;
}

void nuksm_commit_queue(NuksmCommit *c, NuksmMsgType type, uint32_t epoch,
                        const void *payload, uint32_t len, int fd)
{
    NuksmWork *w = g_malloc(sizeof(*w) + len);

    w->type = type;
    w->epoch = epoch;
    w->fd = fd;
    w->len = len;
    memcpy(w->payload, payload, len);
    qemu_mutex_lock(&c->lock);
    g_queue_push_tail(&c->work, w);
    qemu_mutex_unlock(&c->lock);
    nuksm_scanner_wake(c->s->scanner);
}

typedef struct NuksmRestore {
    GArray *refs;
} NuksmRestore;

static void nuksm_commit_restore_block(NuksmBlockState *bs, void *opaque)
{
    NuksmRestore *restore = opaque;

    for (uint64_t i = 0; i < bs->nr_pages; i++) {
        /* A new agent has an empty unstable table: offer again. */
        nuksm_page_update(bs, i, NUKSM_PAGE_OFFERED, 0);
        if (nuksm_page_flags(bs, i) & NUKSM_PAGE_MERGED) {
            NuksmSlotRef r = nuksm_page_ref(bs, i);
            g_array_append_val(restore->refs, r);
        }
    }
}

/*
 * A new connection, @epoch: what the old one did not send is moot, and
 * the agent (maybe restarted) learns which slots we still map.
 */
void nuksm_commit_start(NuksmCommit *c, uint32_t epoch)
{
    g_autoptr(GArray) refs = g_array_new(false, false, sizeof(NuksmSlotRef));
    NuksmRestore restore = { .refs = refs };

    qemu_mutex_lock(&c->pages->lock);
    nuksm_pages_foreach(c->pages, nuksm_commit_restore_block, &restore);
    g_array_set_size(c->unmerged, 0);
    qemu_mutex_unlock(&c->pages->lock);

    nuksm_commit_post_refs(c, epoch, NUKSM_MSG_RESTORE,
                           (NuksmSlotRef *)refs->data, refs->len);
}

/* Look whether the mapping budget's figures are due (scanner thread). */
void nuksm_commit_tick(NuksmCommit *c)
{
    qemu_mutex_lock(&c->pages->lock);
    nuksm_maps_tick(c, false);
    qemu_mutex_unlock(&c->pages->lock);
}

/*
 * Take or release userfaultfd on the eligible RAM.  nuksm holds it only
 * while active: migration, postcopy and background snapshots use
 * userfaultfd on the same RAM.
 */
static bool nuksm_commit_register(RAMBlock *rb, uint8_t gnode, void *opaque)
{
    NuksmCommit *c = opaque;
    Error *err = NULL;

    if (!nuksm_remap_register(c->uffd, rb->host, rb->used_length, &err)) {
        warn_report_err(err);
    }
    return true;
}

/* Without userfaultfd nothing can merge safely. */
bool nuksm_commit_has_uffd(NuksmCommit *c)
{
    return qatomic_read(&c->uffd) >= 0;
}

/* A new connection may bring what userfaultfd failed for: try again. */
bool nuksm_commit_wants_uffd(NuksmCommit *c)
{
    bool retry;

    qemu_mutex_lock(&c->lock);
    retry = c->uffd_retry;
    qemu_mutex_unlock(&c->lock);
    return retry;
}

/*
 * Create our userfaultfd.  Without one nothing can merge: the error is
 * kept for query-nuksm (limit userfaultfd) and reported once, and it is
 * tried again only on the next connection to the agent.
 */
void nuksm_commit_take_uffd(NuksmCommit *c)
{
    Error *err = NULL;
    bool changed;
    int uffd;

    qemu_mutex_lock(&c->lock);
    if (c->uffd_error && !c->uffd_retry) {
        qemu_mutex_unlock(&c->lock);
        return;
    }
    c->uffd_retry = false;
    uffd = nuksm_remap_uffd_open(c->uffd_dev, &err);
    changed = (uffd < 0) != !!c->uffd_error;
    g_clear_pointer(&c->uffd_error, g_free);
    if (uffd < 0) {
        c->uffd_error = g_strdup(error_get_pretty(err));
    }
    qemu_mutex_unlock(&c->lock);
    if (changed) {
        qemu_bh_schedule(c->s->limit_bh);
    }
    if (uffd < 0) {
        error_free(err);
        return;
    }
    qemu_mutex_lock(&c->pages->lock);
    /*
     * Checked under page_lock: once deactivation released userfaultfd
     * (under page_lock too), a migration may hold its own on our RAM.
     */
    if (!nuksm_scanner_is_active(c->s->scanner) || c->uffd >= 0) {
        qemu_mutex_unlock(&c->pages->lock);
        close(uffd);
        return;
    }
    qatomic_set(&c->uffd, uffd);
    nuksm_ram_foreach_resolved(c->s, nuksm_commit_register, c);
    qemu_mutex_unlock(&c->pages->lock);
}

void nuksm_commit_release_uffd(NuksmCommit *c)
{
    qemu_mutex_lock(&c->pages->lock);
    if (c->uffd >= 0) {
        /* Closing unregisters every range and wakes any waiter. */
        close(c->uffd);
        qatomic_set(&c->uffd, -1);
    }
    qemu_mutex_unlock(&c->pages->lock);
}

void nuksm_commit_set_uffd_device(NuksmCommit *c, int dev_fd)
{
    qemu_mutex_lock(&c->lock);
    if (c->uffd_dev >= 0) {
        close(c->uffd_dev);
    }
    c->uffd_dev = dev_fd;
    c->uffd_retry = true;
    qemu_mutex_unlock(&c->lock);
    nuksm_scanner_wake(c->s->scanner);
}

void nuksm_commit_get_stats(NuksmCommit *c, NuksmStats *stats)
{
    qemu_mutex_lock(&c->lock);
    pstrcpy(stats->uffd_error, sizeof(stats->uffd_error),
            c->uffd_error ? c->uffd_error : "");
    qemu_mutex_unlock(&c->lock);
    qemu_mutex_lock(&c->pages->lock);
    stats->maps_in_use = nuksm_maps_in_use(c);
    stats->maps_limit = c->maps.limit;
    stats->maps_budget = nuksm_maps_budget(c->maps.limit);
    stats->maps_limited = c->maps.limited;
    qemu_mutex_unlock(&c->pages->lock);
}

/*
 * RAM discard (balloon, virtio-mem, postcopy) over pages we remapped:
 * MADV_DONTNEED there would expose the store, so map fresh anonymous
 * memory instead.  Returns false (nothing done) when no page of the
 * range was ever remapped: the caller's MADV_DONTNEED is right then.
 */
bool nuksm_commit_discard(NuksmCommit *c, RAMBlock *rb, void *host,
                          size_t len)
{
    uint64_t first = ((uint8_t *)host - rb->host) / NUKSM_PAGE_SIZE;
    uint64_t count = len / NUKSM_PAGE_SIZE;
    NuksmBlockState *bs;
    int64_t edges;
    int ret;

    qemu_mutex_lock(&c->pages->lock);
    bs = nuksm_pages_find(c->pages, rb);
    if (!bs || !nuksm_pages_any_remapped(bs, first, count)) {
        qemu_mutex_unlock(&c->pages->lock);
        return false;
    }
    count = MIN(count, bs->nr_pages - first);
    edges = nuksm_maps_window(bs, first, count);
    ret = nuksm_remap_anonymous(c->uffd, host, len);
    if (ret < 0) {
        error_report("nuksm: cannot restore anonymous memory over a "
                     "discarded range: %s", strerror(-ret));
    }
    for (uint64_t i = 0; i < count && first + i < bs->nr_pages; i++) {
        nuksm_commit_forget(c, bs, first + i, NUKSM_STATUS_DISCARDED);
        nuksm_pages_discarded(c->pages, bs, first + i);
    }
    /* The anonymous mapping gives back the mappings it replaced. */
    nuksm_maps_account(c, nuksm_maps_window(bs, first, count) - edges);
    nuksm_commit_flush_unmerged(c, nuksm_scanner_epoch(c->s->scanner));
    qemu_mutex_unlock(&c->pages->lock);
    return true;
}

NuksmCommit *nuksm_commit_new(Nuksm *s, NuksmPages *pages)
{
    NuksmCommit *c = g_new0(NuksmCommit, 1);

    c->s = s;
    c->pages = pages;
    c->uffd = -1;
    c->uffd_dev = -1;
    c->unmerged = g_array_new(false, false, sizeof(NuksmSlotRef));
    for (int n = 0; n < NUKSM_MAX_NODES; n++) {
        c->stores[n].fd = -1;
    }
    nuksm_maps_init(c);
    g_queue_init(&c->work);
    qemu_mutex_init(&c->lock);
    return c;
}

/* After the scanner thread is gone. */
void nuksm_commit_free(NuksmCommit *c)
{
    NuksmWork *w;

    assert(c->uffd < 0);
    while ((w = g_queue_pop_head(&c->work))) {
        if (w->fd >= 0) {
            close(w->fd);
        }
        g_free(w);
    }
    nuksm_commit_stores_free(c);
    if (c->uffd_dev >= 0) {
        close(c->uffd_dev);
    }
    g_free(c->uffd_error);
    g_array_free(c->unmerged, true);
    qemu_mutex_destroy(&c->lock);
    g_free(c);
}
