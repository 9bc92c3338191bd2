/*
 * nuksm: the commit unit, serving the agent's merge requests in the
 * scanner thread:
 *
 *   STORE       keep a node's store descriptor (read-only), to map its slots
 *   UPLOAD_REQ  send the content of pages the agent makes new slots of
 *   MERGE       map pages onto slots where the content is equal
 *   MOVE        map merged pages onto another slot of equal content
 *   REFUSED     RESTORE entries the agent did not take back
 *   RETRY       candidates the agent did not keep: offer them again
 *   WANTED      contents the agent forgot that appeared again: offer
 *               again the pages offered with them
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
#include "qemu/lockable.h"
#include "qemu/main-loop.h"
#include "qemu/rcu.h"
#include "libnuksm/nuksm-digest.h"
#include "nuksm-commit.h"
#include "nuksm-control.h"
#include "nuksm-huge.h"
#include "nuksm-maps.h"
#include "nuksm-outbox.h"
#include "nuksm-ram.h"
#include "nuksm-reads.h"
#include "nuksm-remap.h"
#include "trace.h"

/*
 * Longest window committed at once, and the stretch of guest pages whose
 * slots the agent keeps in line (LINE_PAGES of agent/core/lines.h): a
 * window stays within one.  It bounds the write-protection time.
 */
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

/*
 * A node's store, kept at once, not queued for the scanner thread: a
 * landing (nuksm-landing.c) maps slots while the scanner does not run.
 */
static void nuksm_commit_store(NuksmCommit *c, const NuksmMsgStore *m, int fd)
{
    NuksmStore *st = &c->stores[m->node];

    qemu_mutex_lock(&c->pages->lock);
    if (st->fd >= 0) {
        close(st->fd);
    }
    st->fd = fd;
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
    nuksm_outbox_post_batches(&c->s->outbox, epoch, type, r, sizeof(*r), n,
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
 * take what is queued (or the scanner to quit), and wait outside the RCU
 * read lock: the main
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
    NuksmOutbox *ob = &c->s->outbox;

    b->reserved = 0;
    for (uint32_t done = 0; done < req->count;) {
        uint32_t n = MIN(req->count - done, NUKSM_UPLOAD_MAX);

        while (nuksm_outbox_backlog(ob) > NUKSM_COMMIT_MAX_BACKLOG) {
            /*
             * The main loop drains the queue, unless it is joining this
             * thread (the object goes, QEMU quits): the agent then loses
             * the connection, and with it the wait for these pages.
             */
            if (nuksm_control_quitting(c->s->control)) {
                return;
            }
            g_usleep(1000);
        }
        WITH_RCU_READ_LOCK_GUARD() {
            b->count = nuksm_commit_fill_upload(c, want + done, n, b);
        }
        done += n;
        if (b->count) {
            nuksm_outbox_post(ob, w->epoch, NUKSM_MSG_UPLOAD, buf,
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
 * Refuse the merge of page @idx of @bs (entry @r), for lack of mappings
 * or for its huge page: the agent forgets it (FAILED), and the scanner
 * holds the page back until merging resumes (nuksm-maps.c) or the huge
 * page is to split (nuksm-huge.c).
 */
static void nuksm_commit_hold(NuksmBlockState *bs, uint64_t idx,
                              NuksmSlotRef *r)
{
    r->status = NUKSM_STATUS_FAILED;
    nuksm_page_update(bs, idx, NUKSM_PAGE_OFFERED, NUKSM_PAGE_HELD);
}

/*
 * A window of a MERGE batch: pages [@idx, @idx + @span) of @bs mapped
 * onto the slots of @node from @slot, where entries [@first, @first + @n)
 * of the batch merge.  Every other page of the window is either copied
 * into it (@copies: nuksm_remap_merge_window()), or lies there already
 * and stays (nuksm_remap_merge_run()).
 */
typedef struct NuksmWindow {
    RAMBlock *rb;
    NuksmBlockState *bs;
    uint64_t idx, span;
    uint8_t node;
    uint64_t slot;
    size_t first, n;
    bool copies;
} NuksmWindow;

/*
 * May page @idx of @bs lie inside a window, copied?  Not a merged page
 * (its sharing would end, unseen by the agent) nor a dropped zero page
 * (it would cost memory again).
 */
static bool nuksm_commit_copyable(NuksmBlockState *bs, uint64_t idx)
{
    return !(nuksm_page_flags(bs, idx) & (NUKSM_PAGE_MERGED |
                                          NUKSM_PAGE_ZERO));
}

/* Is page @idx of @bs mapped from @node at slot @base + @idx already? */
static bool nuksm_commit_in_place(NuksmBlockState *bs, uint64_t idx,
                                  uint8_t node, int64_t base)
{
    uint8_t n;
    uint64_t slot;

    return nuksm_page_store_pos(bs, idx, &n, &slot) && n == node &&
           (int64_t)slot - (int64_t)idx == base;
}

/*
 * Does page @idx of @rb read as zero?  Then it costs no memory (never
 * written, or the zero page), and a copy in a window would.
 */
static bool nuksm_commit_blank(RAMBlock *rb, uint64_t idx)
{
    return buffer_is_zero(rb->host + idx * NUKSM_PAGE_SIZE, NUKSM_PAGE_SIZE);
}

/*
 * May page @idx of @bs (in @rb) be copied into a window mapping @node at
 * @base?  Not if it lies there already: a window with copies is a
 * mapping the kernel never merges with a neighbour that has copies of
 * its own (each has its own anon_vma), whereas one of merged pages alone
 * merges into the window around it.
 */
static bool nuksm_commit_fillable(RAMBlock *rb, NuksmBlockState *bs,
                                  uint64_t idx, uint8_t node, int64_t base)
{
    return nuksm_commit_copyable(bs, idx) &&
           !nuksm_commit_in_place(bs, idx, node, base) &&
           !nuksm_commit_blank(rb, idx);
}

/*
 * May a window copy page @idx of @bs (in @rb) only to grow?  Only
 * anonymous memory: a page another window holds would be copied again
 * by every window out of line in its stretch.
 */
static bool nuksm_commit_spare(RAMBlock *rb, NuksmBlockState *bs,
                               uint64_t idx)
{
    return !(nuksm_page_flags(bs, idx) & (NUKSM_PAGE_REMAPPED |
                                          NUKSM_PAGE_ZERO)) &&
           !nuksm_commit_blank(rb, idx);
}

/* The pages between the entries of a window. */
typedef enum NuksmGap {
    NUKSM_GAP_NONE,             /* none so far */
    NUKSM_GAP_COPY,             /* all copied into the window */
    NUKSM_GAP_IN_PLACE,         /* all in the window already: they stay */
    NUKSM_GAP_MIXED,            /* some of neither, or of both: no window */
} NuksmGap;

/* What page @g of @bs (in @rb) between entries makes of @gaps so far. */
static NuksmGap nuksm_commit_gap(NuksmGap gaps, RAMBlock *rb,
                                 NuksmBlockState *bs, uint64_t g,
                                 uint8_t node, int64_t base)
{
    NuksmGap kind = nuksm_commit_fillable(rb, bs, g, node, base) ?
                    NUKSM_GAP_COPY :
                    nuksm_commit_in_place(bs, g, node, base) ?
                    NUKSM_GAP_IN_PLACE : NUKSM_GAP_MIXED;

    return gaps == NUKSM_GAP_NONE || gaps == kind ? kind : NUKSM_GAP_MIXED;
}

/*
 * A lone entry at page @idx of @bs (in @rb), to map at @base on @node,
 * whose neighbour going @step (+1 or -1) lies in a mapping of the store:
 * how many pages from the neighbour on lie in that mapping up to where
 * it ends, all of them pages a window may copy within [@lo, @hi); 0 if
 * there are none, or others come first.  A window of this batch ends at
 * @lo if @edge_lo, another begins at @hi if @edge_hi, neither in line
 * with this one: that mapping ends there too.  A window over those pages
 * ends where that mapping did, so the entry splits it once, not twice.
 */
static uint64_t nuksm_commit_reach(RAMBlock *rb, NuksmBlockState *bs,
                                   uint64_t idx, int step, uint64_t lo,
                                   uint64_t hi, bool edge_lo, bool edge_hi,
                                   uint8_t node, int64_t base)
{
    const NuksmMapId window = { .node = node, .base = base };
    int64_t i = (int64_t)idx + step;
    NuksmMapId around;

    if (i < 0 || i >= (int64_t)bs->nr_pages) {
        return 0;
    }
    around = nuksm_maps_id(bs, i);
    if (around.anon) {
        return 0;
    }
    for (;; i += step) {
        uint64_t reached = (i - (int64_t)idx) * step - 1;
        NuksmMapId id;

        if (i < 0 || i >= (int64_t)bs->nr_pages) {
            return reached;
        }
        id = nuksm_maps_id(bs, i);
        if (!nuksm_maps_id_equal(id, around)) {
            /*
             * Not up to a mapping in line with the window: the kernel
             * would not join them (each has copies, so an anon_vma of
             * its own), though slot - page is the same.
             */
            return nuksm_maps_id_equal(id, window) ? 0 : reached;
        }
        if (i < (int64_t)lo) {
            return edge_lo ? reached : 0;
        }
        if (i >= (int64_t)hi) {
            return edge_hi ? reached : 0;
        }
        if (!nuksm_commit_fillable(rb, bs, i, node, base)) {
            return 0;
        }
    }
}

/*
 * The window entries @r[@i..@count) open on @bs at @idx (@r sorted by
 * page; the window may not reach below page @floor of @bs, where the
 * previous one ended).
 *
 * Entries join it while they lie in line (slot - page constant, one
 * node) within the same 2 MiB stretch of guest pages as the agent's
 * slot lines (agent/core/lines.h), with only pages between them that
 * are all to copy, or all in line already.  A window that copies pages,
 * or a lone entry, then widens over the anonymous pages around it, up
 * to the ends of the stretch: the later merges of the stretch's pages
 * then land inside it, where they cost no mapping, rather than in a
 * window of their own beside it.
 */
static NuksmWindow nuksm_commit_window(NuksmCommit *c, RAMBlock *rb,
                                       NuksmBlockState *bs, uint64_t idx,
                                       const NuksmSlotRef *r, size_t i,
                                       size_t count, uint64_t floor)
{
    const uint64_t first = bs->first_page;
    NuksmWindow w = {
        .rb = rb, .bs = bs, .idx = idx, .span = 1,
        .node = r[i].node, .slot = r[i].slot, .first = i, .n = 1,
    };
    int64_t base = (int64_t)r[i].slot - (int64_t)idx;
    uint64_t start = QEMU_ALIGN_DOWN(first + idx, NUKSM_COMMIT_MAX_RUN);
    uint64_t lo = MAX(MAX(start, first) - first, floor);
    uint64_t hi = MIN(start + NUKSM_COMMIT_MAX_RUN - first, bs->nr_pages);
    NuksmGap gaps = NUKSM_GAP_NONE;
    bool next_entry;
    size_t j;
    NuksmSlotRef at;

    for (j = i + 1; j < count; j++) {
        uint64_t prev = w.idx + w.span - 1;
        uint64_t next;
        NuksmGap kind = gaps;

        if (r[j].page <= r[j - 1].page || r[j].page - first >= hi) {
            break;
        }
        next = r[j].page - first;
        if (r[j].node != w.node ||
            (int64_t)r[j].slot - (int64_t)next != base ||
            !nuksm_commit_copyable(bs, next)) {
            break;
        }
        for (uint64_t g = prev + 1; g < next && kind != NUKSM_GAP_MIXED;
             g++) {
            kind = nuksm_commit_gap(kind, rb, bs, g, w.node, base);
        }
        if (kind == NUKSM_GAP_MIXED) {
            break;
        }
        gaps = kind;
        w.span = next - idx + 1;
        w.n++;
    }
    w.copies = gaps == NUKSM_GAP_COPY;
    /* Never over the next entry: it may open a window of its own. */
    next_entry = j < count && r[j].page > r[j - 1].page &&
                 r[j].page - first < hi;
    if (next_entry) {
        hi = r[j].page - first;
    }
    if (w.copies ||
        (w.n == 1 &&
         !(w.idx > lo && nuksm_commit_in_place(bs, w.idx - 1, w.node, base)) &&
         !(w.idx + w.span < hi &&
           nuksm_commit_in_place(bs, w.idx + w.span, w.node, base)))) {
        uint64_t span = w.span;

        while (w.idx > lo && base + (int64_t)w.idx > 0 &&
               nuksm_commit_spare(rb, bs, w.idx - 1)) {
            w.idx--;
            w.span++;
        }
        while (w.idx + w.span < hi &&
               nuksm_commit_spare(rb, bs, w.idx + w.span)) {
            w.span++;
        }
        w.copies |= w.span > span;
    }
    /*
     * A lone entry inside another window (shuffled duplicates, out of
     * line): were it a mapping of its own it would split that window in
     * three, two mappings more.  It takes the pages to the nearer end of
     * that window instead, copied: one mapping more.
     */
    if (w.n == 1 && w.span == 1) {
        /*
         * A window of this batch ends at lo within the stretch: its
         * entries would have joined this one's had they been in line.
         */
        bool after_window = floor && lo == floor &&
                            lo > MAX(start, first) - first;
        uint64_t down = nuksm_commit_reach(rb, bs, w.idx, -1, lo, hi,
                                           after_window, next_entry, w.node,
                                           base);
        uint64_t up = nuksm_commit_reach(rb, bs, w.idx, 1, lo, hi,
                                         after_window, next_entry, w.node,
                                         base);
        NuksmSlotRef from = { .node = w.node };

        from.slot = base + (int64_t)w.idx - (int64_t)down;
        if (base + (int64_t)w.idx < (int64_t)down ||
            !nuksm_commit_slot_valid(c, &from, down + 1)) {
            down = 0;
        }
        from.slot = base + (int64_t)w.idx;
        if (!nuksm_commit_slot_valid(c, &from, up + 1)) {
            up = 0;
        }
        if (down && (!up || down <= up)) {
            w.idx -= down;
            w.span += down;
            w.copies = true;
        } else if (up) {
            w.span += up;
            w.copies = true;
        }
    }
    w.slot = base + (int64_t)w.idx;

    at = (NuksmSlotRef) { .node = w.node, .slot = w.slot };
    if (!nuksm_commit_slot_valid(c, &at, w.span)) {
        w.n = 0;
    }
    return w;
}

/*
 * Is every entry of window @w (of @r) a copy inside a mapping in line with
 * its slot already?  Then it merges in place.
 */
static bool nuksm_commit_all_in_place(const NuksmWindow *w,
                                      const NuksmSlotRef *r)
{
    int64_t base = (int64_t)w->slot - (int64_t)w->idx;

    for (size_t k = 0; k < w->n; k++) {
        uint64_t idx = r[w->first + k].page - w->bs->first_page;

        if (!nuksm_commit_in_place(w->bs, idx, w->node, base)) {
            return false;
        }
    }
    return true;
}

/*
 * Commit window @w if the mapping budget allows, and fill in the status
 * of its entries of @r.
 */
static void nuksm_commit_window_merge(NuksmCommit *c, NuksmWindow *w,
                                      NuksmSlotRef *r)
{
    bool want[NUKSM_COMMIT_MAX_RUN] = {}, merged[NUKSM_COMMIT_MAX_RUN];
    NuksmStore *st = &c->stores[w->node];
    uint64_t first_page = w->bs->first_page + w->idx;
    uint8_t *host = w->rb->host + w->idx * NUKSM_PAGE_SIZE;
    uint32_t delay_us = qatomic_read(&c->s->commit_delay_us);
    int64_t edges;
    size_t done;
    int err;

    if (!nuksm_maps_afford(c, nuksm_maps_cost(w->bs, w->idx, w->span, false,
                                              w->node, w->slot), w->n)) {
        for (size_t k = 0; k < w->n; k++) {
            NuksmSlotRef *e = &r[w->first + k];

            nuksm_commit_hold(w->bs, e->page - w->bs->first_page, e);
        }
        return;
    }
    for (size_t k = 0; k < w->n; k++) {
        want[r[w->first + k].page - first_page] = true;
    }
    edges = nuksm_maps_window(w->bs, w->idx, w->span);
    if (w->copies) {
        done = nuksm_remap_merge_window(c->uffd, host, w->span, st->fd,
                                        w->slot, delay_us, want, merged,
                                        &err);
    } else if (nuksm_commit_all_in_place(w, r)) {
        done = nuksm_remap_merge_in_place(c->uffd, host, w->span, st->fd,
                                          w->slot, delay_us, want, merged,
                                          &err);
    } else {
        done = nuksm_remap_merge_run(c->uffd, host, w->span, st->fd, w->slot,
                                     delay_us, want, merged, &err);
    }
    if (err) {
        trace_nuksm_commit_run_error(w->span, err);
    }
    for (uint64_t i = 0; w->copies && done && i < w->span; i++) {
        if (!merged[i]) {
            nuksm_pages_windowed(c->pages, w->bs, w->idx + i, w->node,
                                 w->slot + i);
        }
    }
    for (size_t k = 0; k < w->n; k++) {
        NuksmSlotRef *e = &r[w->first + k];
        uint64_t i = e->page - first_page;

        if (merged[i]) {
            e->status = NUKSM_STATUS_MERGED;
            nuksm_pages_merged(c->pages, w->bs, w->idx + i, e);
            nuksm_reads_merged(c->s->reads, w->bs, w->idx + i);
        } else if (err == ENOMEM) {
            nuksm_commit_hold(w->bs, w->idx + i, e);
        } else {
            e->status = NUKSM_STATUS_CHANGED;
            /* The agent forgets it: offer it again when stable. */
            nuksm_page_update(w->bs, w->idx + i, NUKSM_PAGE_OFFERED, 0);
        }
    }
    nuksm_maps_account(c, nuksm_maps_window(w->bs, w->idx, w->span) - edges);
    if (err == ENOMEM) {
        nuksm_maps_exhausted(c);
    }
}

static int nuksm_commit_ref_cmp(const void *a, const void *b)
{
    const NuksmSlotRef *x = a, *y = b;

    return x->page < y->page ? -1 : x->page > y->page;
}

/*
 * The connection @w came from has ended meanwhile: commit nothing more
 * of it.  Its agent may be gone, and the next one frees the slots that
 * no page reads when it looks (recovery in docs/agent.rst), which a
 * commit finishing late could then map.
 */
static bool nuksm_commit_stale(NuksmCommit *c, NuksmWork *w)
{
    return nuksm_control_epoch(c->s->control) != w->epoch;
}

/*
 * How many entries of @r from @i on (sorted by page, @count in all) lie
 * in the stretch of @r[@i] in @bs?
 */
static unsigned nuksm_commit_stretch_entries(NuksmBlockState *bs,
                                             const NuksmSlotRef *r, size_t i,
                                             size_t count)
{
    uint64_t idx = r[i].page - bs->first_page;
    uint64_t end = bs->first_page +
                   MIN(QEMU_ALIGN_DOWN(idx, NUKSM_TRACK_STRETCH) +
                       NUKSM_TRACK_STRETCH, bs->nr_pages);
    size_t j = i;

    while (j < count && r[j].page < end) {
        j++;
    }
    return j - i;
}

/*
 * Offer again at once, hashed now, the pages @released of @bs (in @rb)
 * that its huge page held back until it split, into @candidates: the
 * agent forgot them, and their twins may wait in the store, so they
 * merge beside this batch rather than a pass later.  A page written
 * since (no longer stable, or its digest's fragment not the one kept)
 * or zero (the scanner drops it) waits for the scanner.
 */
static void nuksm_commit_offer_released(RAMBlock *rb, NuksmBlockState *bs,
                                        GArray *released,
                                        GArray *candidates)
{
    for (guint k = 0; k < released->len; k++) {
        uint64_t i = g_array_index(released, uint64_t, k);
        const uint8_t *host = rb->host + i * NUKSM_PAGE_SIZE;
        uint8_t f = nuksm_page_flags(bs, i);
        NuksmCandidate cand;

        if (!(f & NUKSM_PAGE_STABLE) ||
            (f & (NUKSM_PAGE_OFFERED | NUKSM_PAGE_MERGED |
                  NUKSM_PAGE_ZERO)) ||
            buffer_is_zero(host, NUKSM_PAGE_SIZE)) {
            continue;
        }
        cand = (NuksmCandidate) {
            .page = bs->first_page + i,
            .digest = nuksm_page_digest(host, NUKSM_PAGE_SIZE),
            .gnode = bs->gnode,
            .idle = nuksm_page_idle(bs, i),
        };
        if (nuksm_digest_fragment(cand.digest) !=
            NUKSM_D32_FULL(nuksm_page_digest32(bs, i))) {
            continue;
        }
        nuksm_page_update(bs, i, 0, NUKSM_PAGE_OFFERED);
        nuksm_huge_offered(bs, i);
        g_array_append_val(candidates, cand);
    }
    g_array_set_size(released, 0);
}

static void nuksm_commit_merge(NuksmCommit *c, NuksmWork *w)
{
    const NuksmMsgBatch *b = (const NuksmMsgBatch *)w->payload;
    g_autofree NuksmSlotRef *r = g_memdup2(b + 1,
                                           b->count * sizeof(NuksmSlotRef));
    g_autofree NuksmWindow *windows = g_new(NuksmWindow, b->count);
    size_t i = 0, nr_windows = 0;
    NuksmBlockState *floor_bs = NULL, *huge_bs = NULL;
    uint64_t floor = 0, huge_stretch = 0;
    bool huge_hold = false;
    g_autoptr(GArray) released = g_array_new(FALSE, FALSE, sizeof(uint64_t));
    g_autoptr(GArray) candidates = g_array_new(FALSE, FALSE,
                                               sizeof(NuksmCandidate));

    /* In page order, so that scattered merges in line share windows. */
    qsort(r, b->count, sizeof(*r), nuksm_commit_ref_cmp);
    RCU_READ_LOCK_GUARD();
    qemu_mutex_lock(&c->pages->lock);
    nuksm_maps_tick(c, false);
    while (i < b->count) {
        NuksmBlockState *bs;
        RAMBlock *rb;
        uint64_t idx;
        NuksmWindow win = {};

        if (!nuksm_commit_find_page(c, r[i].page, &rb, &bs, &idx)) {
            r[i++].status = NUKSM_STATUS_GONE;
            continue;
        }
        if (c->uffd >= 0 && (bs != huge_bs ||
                             idx / NUKSM_TRACK_STRETCH != huge_stretch)) {
            huge_bs = bs;
            huge_stretch = idx / NUKSM_TRACK_STRETCH;
            /*
             * At the mapping limit, the pages held back include those
             * refused for lack of mappings, which would be refused
             * again at once: those a split releases wait for the
             * scanner.
             */
            huge_hold = !nuksm_huge_may_split(
                c->s->huge, qatomic_read(&c->s->huge_split), rb, bs, idx,
                nuksm_commit_stretch_entries(bs, r, i, b->count),
                qatomic_read(&c->maps.limited) ? NULL : released);
            nuksm_commit_offer_released(rb, bs, released, candidates);
        }
        if (huge_hold) {
            nuksm_commit_hold(bs, idx, &r[i++]);
            continue;
        }
        if (c->uffd >= 0 && nuksm_commit_copyable(bs, idx)) {
            win = nuksm_commit_window(c, rb, bs, idx, r, i, b->count,
                                      bs == floor_bs ? floor : 0);
        }
        if (!win.n) {
            nuksm_page_update(bs, idx, NUKSM_PAGE_OFFERED, 0);
            r[i++].status = NUKSM_STATUS_GONE;
            continue;
        }
        windows[nr_windows++] = win;
        floor_bs = bs;
        floor = win.idx + win.span;
        i += win.n;
    }
    /*
     * Windows that cost no mapping (they continue or join mappings in
     * line) first, then the others while the mapping budget lasts.
     */
    for (size_t k = 0; k < nr_windows && !nuksm_commit_stale(c, w); k++) {
        NuksmWindow *m = &windows[k];

        if (nuksm_maps_cost(m->bs, m->idx, m->span, false, m->node,
                            m->slot) <= 0) {
            nuksm_commit_window_merge(c, m, r);
            m->n = 0;
        }
    }
    for (size_t k = 0; k < nr_windows; k++) {
        NuksmWindow *m = &windows[k];

        if (!m->n) {
            continue;
        }
        if (nuksm_commit_stale(c, w)) {
            for (size_t j = 0; j < m->n; j++) {
                r[m->first + j].status = NUKSM_STATUS_GONE;
            }
            continue;
        }
        nuksm_commit_window_merge(c, m, r);
    }
    qemu_mutex_unlock(&c->pages->lock);
    nuksm_commit_post_refs(c, w->epoch, NUKSM_MSG_MERGED, r, b->count);
    nuksm_outbox_post_batches(&c->s->outbox, w->epoch, NUKSM_MSG_CANDIDATES,
                              candidates->data, sizeof(NuksmCandidate),
                              candidates->len, NUKSM_CANDIDATES_MAX);
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
                              0, NULL, merged, &err);
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
    nuksm_outbox_post_batches(&c->s->outbox, w->epoch, NUKSM_MSG_MOVED, m,
                              sizeof(*m), b->count, NUKSM_MOVES_MAX);
}

typedef void NuksmCommitPageFn(NuksmCommit *c, RAMBlock *rb,
                               NuksmBlockState *bs, uint64_t idx,
                               const NuksmSlotRef *r);

/*
 * Call @fn for each entry of the slot-ref batch @w that names a page of
 * eligible RAM, with page_lock and the RCU read lock held.
 */
static void nuksm_commit_foreach_page(NuksmCommit *c, NuksmWork *w,
                                      NuksmCommitPageFn *fn)
{
    const NuksmMsgBatch *b = (const NuksmMsgBatch *)w->payload;
    const NuksmSlotRef *r = (const NuksmSlotRef *)(b + 1);

    RCU_READ_LOCK_GUARD();
    qemu_mutex_lock(&c->pages->lock);
    for (uint32_t i = 0; i < b->count; i++) {
        NuksmBlockState *bs;
        RAMBlock *rb;
        uint64_t idx;

        if (nuksm_commit_find_page(c, r[i].page, &rb, &bs, &idx)) {
            fn(c, rb, bs, idx, &r[i]);
        }
    }
    qemu_mutex_unlock(&c->pages->lock);
}

/*
 * The agent holds no reference for this page, so nothing keeps its slot
 * for it: it is made our own again by copy-on-write (an atomic add of
 * zero writes without changing a byte, whatever a vCPU writes
 * meanwhile), no longer reported, and offered again, so that it merges
 * anew.
 */
static void nuksm_commit_refused_page(NuksmCommit *c, RAMBlock *rb,
                                      NuksmBlockState *bs, uint64_t idx,
                                      const NuksmSlotRef *r)
{
    uint8_t *host = rb->host + idx * NUKSM_PAGE_SIZE;

    if (!nuksm_page_maps(bs, idx, r)) {
        return;
    }
    trace_nuksm_commit_refused(r->page, r->node, r->slot);
    nuksm_pages_unmerged(c->pages, bs, idx,
                         NUKSM_PAGE_STABLE | NUKSM_PAGE_OFFERED);
    /*
     * The write below would wait for the write-fault thread, which
     * waits for page_lock, were the page write-protected.
     */
    if (c->uffd >= 0) {
        nuksm_remap_track(c->uffd, host, NUKSM_PAGE_SIZE, false);
    }
    qatomic_fetch_add((uint64_t *)host, 0);
}

/*
 * The agent kept nothing that would merge this candidate: it is no
 * longer on offer, so the next pass offers it again.
 */
static void nuksm_commit_retry_page(NuksmCommit *c, RAMBlock *rb,
                                    NuksmBlockState *bs, uint64_t idx,
                                    const NuksmSlotRef *r)
{
    nuksm_page_update(bs, idx, NUKSM_PAGE_OFFERED, 0);
}

/* RETRY: the next pass, within a second, offers the pages again. */
static void nuksm_commit_retry(NuksmCommit *c, NuksmWork *w)
{
    nuksm_commit_foreach_page(c, w, nuksm_commit_retry_page);
    trace_nuksm_commit_retry(((const NuksmMsgBatch *)w->payload)->count);
    nuksm_control_nudge(c->s->control);
}

typedef struct NuksmWanted {
    NuksmCommit *c;
    const uint64_t *fragments;       /* NuksmMsgWanted's bitmap */
    GArray *candidates;      /* NuksmCandidate, offered again */
} NuksmWanted;

static bool nuksm_commit_wanted_block(RAMBlock *rb, uint8_t gnode,
                                      void *opaque)
{
    NuksmWanted *wanted = opaque;
    NuksmBlockState *bs;

    QEMU_LOCK_GUARD(&wanted->c->pages->lock);
    bs = nuksm_pages_find(wanted->c->pages, rb);
    for (uint64_t i = 0; bs && i < bs->nr_pages &&
                         i < rb->used_length / NUKSM_PAGE_SIZE; i++) {
        uint8_t f = nuksm_page_flags(bs, i);
        uint32_t fragment = NUKSM_D32_FULL(nuksm_page_digest32(bs, i));
        NuksmCandidate cand;

        if (!(f & NUKSM_PAGE_OFFERED) || (f & NUKSM_PAGE_MERGED) ||
            !(wanted->fragments[fragment / 64] >> (fragment % 64) & 1)) {
            continue;
        }
        cand = (NuksmCandidate) {
            .page = bs->first_page + i,
            .digest = nuksm_page_digest(rb->host + i * NUKSM_PAGE_SIZE,
                                        NUKSM_PAGE_SIZE),
            .gnode = bs->gnode,
            .idle = nuksm_page_idle(bs, i),
            .flags = NUKSM_CANDIDATE_WANTED,
        };
        /* Else it was written since: the scanner's next pass sees it. */
        if (nuksm_digest_fragment(cand.digest) == fragment) {
            g_array_append_val(wanted->candidates, cand);
        }
    }
    return true;
}

/*
 * WANTED: the pages on offer whose digest has one of the fragments
 * named are hashed and offered again at once, marked: the agent forgot
 * them, and a page of the same content may have appeared since.  A walk
 * of the page table, and a hash of about one page on offer in 65,536
 * per fragment, which the agent asks for at most once a second.
 */
static void nuksm_commit_wanted(NuksmCommit *c, NuksmWork *w)
{
    const NuksmMsgWanted *m = (const NuksmMsgWanted *)w->payload;
    g_autoptr(GArray) candidates = g_array_new(FALSE, FALSE,
                                               sizeof(NuksmCandidate));
    NuksmWanted wanted = {
        .c = c,
        .fragments = m->fragments,
        .candidates = candidates,
    };

    nuksm_ram_foreach_resolved(c->s, nuksm_commit_wanted_block, &wanted);
    trace_nuksm_commit_wanted(candidates->len);
    nuksm_outbox_post_batches(&c->s->outbox, w->epoch, NUKSM_MSG_CANDIDATES,
                              candidates->data, sizeof(NuksmCandidate),
                              candidates->len, NUKSM_CANDIDATES_MAX);
}

static void nuksm_commit_handle(NuksmCommit *c, NuksmWork *w)
{
    trace_nuksm_commit_handle(w->type, w->len);
    switch (w->type) {
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
        nuksm_commit_foreach_page(c, w, nuksm_commit_refused_page);
        break;
    case NUKSM_MSG_RETRY:
        nuksm_commit_retry(c, w);
        break;
    case NUKSM_MSG_WANTED:
        nuksm_commit_wanted(c, w);
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
    NuksmWork *w;

    if (type == NUKSM_MSG_STORE) {
        nuksm_commit_store(c, payload, fd);
        return;
    }
    w = g_malloc(sizeof(*w) + len);

    w->type = type;
    w->epoch = epoch;
    w->fd = fd;
    w->len = len;
    memcpy(w->payload, payload, len);
    qemu_mutex_lock(&c->lock);
    /*
     * WANTED first: pages of an incoming migration may wait for the
     * pages it offers again, and merges queued before it need not.
     */
    if (type == NUKSM_MSG_WANTED) {
        g_queue_push_head(&c->work, w);
    } else {
        g_queue_push_tail(&c->work, w);
    }
    qemu_mutex_unlock(&c->lock);
    nuksm_control_wake(c->s->control);
}

void nuksm_commit_reoffer(NuksmCommit *c)
{
    qemu_mutex_lock(&c->pages->lock);
    nuksm_pages_clear_all(c->pages, NUKSM_PAGE_OFFERED);
    qemu_mutex_unlock(&c->pages->lock);
    nuksm_control_kick(c->s->control);
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
 * the agent (maybe restarted) learns which slots we still map, once per
 * connection, before anything merges in it.  page_lock held.
 */
static void nuksm_commit_restore(NuksmCommit *c, uint32_t epoch)
{
    g_autoptr(GArray) refs = g_array_new(false, false, sizeof(NuksmSlotRef));
    NuksmRestore restore = { .refs = refs };

    if (c->restored && c->restored_epoch == epoch) {
        return;
    }
    nuksm_pages_foreach(c->pages, nuksm_commit_restore_block, &restore);
    g_array_set_size(c->unmerged, 0);
    nuksm_commit_post_refs(c, epoch, NUKSM_MSG_RESTORE,
                           (NuksmSlotRef *)refs->data, refs->len);
    c->restored = true;
    c->restored_epoch = epoch;
}

void nuksm_commit_start(NuksmCommit *c, uint32_t epoch)
{
    qemu_mutex_lock(&c->pages->lock);
    nuksm_commit_restore(c, epoch);
    qemu_mutex_unlock(&c->pages->lock);
}

NuksmSlotStatus nuksm_commit_land(NuksmCommit *c, uint32_t epoch,
                                  const NuksmSlotRef *r,
                                  const NuksmLandCheck *check)
{
    g_autofree uint8_t *now = NULL;
    NuksmLandCheck as_now;
    NuksmBlockState *bs;
    RAMBlock *rb;
    uint64_t idx;
    int64_t edges;
    uint8_t *host;
    int err;

    RCU_READ_LOCK_GUARD();
    QEMU_LOCK_GUARD(&c->pages->lock);
    /* Landed before the scanner ever ran for this connection. */
    nuksm_commit_restore(c, epoch);
    if (!nuksm_commit_find_page(c, r->page, &rb, &bs, &idx) ||
        nuksm_page_flags(bs, idx) & (NUKSM_PAGE_REMAPPED | NUKSM_PAGE_ZERO) ||
        !nuksm_commit_slot_valid(c, r, 1)) {
        return NUKSM_STATUS_GONE;
    }
    host = rb->host + idx * NUKSM_PAGE_SIZE;
    if (!check) {
        /* The guest page itself: compared after the slot replaced it. */
        as_now = (NuksmLandCheck) {
            .content = now = g_memdup2(host, NUKSM_PAGE_SIZE),
        };
        check = &as_now;
    }
    nuksm_maps_tick(c, false);
    if (!nuksm_maps_afford(c, nuksm_maps_cost(bs, idx, 1, false, r->node,
                                              r->slot), 1)) {
        return NUKSM_STATUS_FAILED;
    }
    edges = nuksm_maps_window(bs, idx, 1);
    if (!nuksm_remap_land(host, c->stores[r->node].fd, r->slot, check,
                          &err)) {
        trace_nuksm_commit_land_failed(r->page, err);
        if (err == ENOMEM) {
            nuksm_maps_exhausted(c);
            return NUKSM_STATUS_FAILED;
        }
        return NUKSM_STATUS_CHANGED;
    }
    nuksm_pages_merged(c->pages, bs, idx, r);
    nuksm_reads_merged(c->s->reads, bs, idx);
    nuksm_maps_account(c, nuksm_maps_window(bs, idx, 1) - edges);
    return NUKSM_STATUS_MERGED;
}

/*
 * Look whether the mapping budget's figures are due, and a read sampling
 * window is over (scanner thread).
 */
void nuksm_commit_tick(NuksmCommit *c)
{
    qemu_mutex_lock(&c->pages->lock);
    nuksm_maps_tick(c, false);
    nuksm_reads_tick(c->s->reads, c->uffd,
                     nuksm_control_epoch(c->s->control));
    qemu_mutex_unlock(&c->pages->lock);
}

/* How long until nuksm_commit_tick() has work (ns), at most. */
int64_t nuksm_commit_tick_due_ns(NuksmCommit *c)
{
    return nuksm_reads_due_ns(c->s->reads);
}

/*
 * Take or release userfaultfd on the eligible RAM.  nuksm holds it only
 * while active: migration, postcopy and background snapshots use
 * userfaultfd on the same RAM.  Taking it lifts any write protection a
 * previous one left in the page tables (closing a userfaultfd leaves its
 * ptes' uffd-wp bits), so that write tracking trusts only its own.
 */
static bool nuksm_commit_register(RAMBlock *rb, uint8_t gnode, void *opaque)
{
    NuksmCommit *c = opaque;
    NuksmBlockState *bs = nuksm_pages_find(c->pages, rb);
    Error *err = NULL;

    if (!nuksm_remap_register(c->uffd, rb->host, rb->used_length, &err)) {
        warn_report_err(err);
        return true;
    }
    nuksm_remap_track(c->uffd, rb->host, rb->used_length, false);
    /* The mappings of stores report reads too. */
    for (uint64_t i = 0; bs && i < bs->nr_pages;) {
        uint64_t n = 1;

        if (!(nuksm_page_flags(bs, i) & NUKSM_PAGE_REMAPPED)) {
            i++;
            continue;
        }
        while (i + n < bs->nr_pages &&
               (nuksm_page_flags(bs, i + n) & NUKSM_PAGE_REMAPPED)) {
            n++;
        }
        if (!nuksm_remap_register_store(c->uffd,
                                        rb->host + i * NUKSM_PAGE_SIZE,
                                        n * NUKSM_PAGE_SIZE, &err)) {
            warn_report_err(err);
            err = NULL;
        }
        i += n;
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

    QEMU_LOCK_GUARD(&c->uffd_lock);
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
    if (!nuksm_control_is_active(c->s->control) || c->uffd >= 0) {
        qemu_mutex_unlock(&c->pages->lock);
        close(uffd);
        return;
    }
    qatomic_set(&c->uffd, uffd);
    nuksm_ram_foreach_resolved(c->s, nuksm_commit_register, c);
    /* Without it merging goes on, hashing every page on every pass. */
    qatomic_set(&c->writes, nuksm_writes_start(c->s, uffd));
    qemu_mutex_unlock(&c->pages->lock);
}

void nuksm_commit_release_uffd(NuksmCommit *c)
{
    NuksmWrites *writes;
    int uffd;

    QEMU_LOCK_GUARD(&c->uffd_lock);
    qemu_mutex_lock(&c->pages->lock);
    uffd = c->uffd;
    writes = c->writes;
    qatomic_set(&c->uffd, -1);
    qatomic_set(&c->writes, NULL);
    qemu_mutex_unlock(&c->pages->lock);
    /* Stopped without page_lock, which it may be waiting for. */
    if (writes) {
        nuksm_writes_stop(writes);
    }
    if (uffd >= 0) {
        /* Closing unregisters every range and wakes any waiter. */
        close(uffd);
    }
}

/* Are stable pages write-protected to tell when they are written? */
bool nuksm_commit_tracks_writes(NuksmCommit *c)
{
    return qatomic_read(&c->writes) != NULL;
}

/*
 * Write-protect the @len bytes at @host to tell when they are written;
 * false if they could not be.
 */
bool nuksm_commit_track(NuksmCommit *c, void *host, size_t len)
{
    return !nuksm_remap_track(c->uffd, host, len, true);
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
    nuksm_control_wake(c->s->control);
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

bool nuksm_commit_rebuild_huge(NuksmCommit *c, RAMBlock *rb,
                               NuksmBlockState *bs, uint64_t idx)
{
    const size_t len = NUKSM_TRACK_STRETCH * NUKSM_PAGE_SIZE;
    uint64_t first = QEMU_ALIGN_DOWN(idx, NUKSM_TRACK_STRETCH);
    uint8_t *host = rb->host + first * NUKSM_PAGE_SIZE;
    bool zero[NUKSM_TRACK_STRETCH];
    uint8_t *stage;
    int64_t edges;
    bool huge;
    int ret;

    if (c->uffd < 0) {
        return false;
    }
    for (unsigned i = 0; i < NUKSM_TRACK_STRETCH; i++) {
        zero[i] = nuksm_page_flags(bs, first + i) & NUKSM_PAGE_ZERO;
    }
    ret = nuksm_remap_huge_stage(c->uffd, host, len, zero, &stage);
    if (ret < 0) {
        trace_nuksm_commit_rebuild_failed(host, -ret);
        return false;
    }
    /* Without a huge page of its own the copy would rebuild nothing. */
    huge = nuksm_huge_is_huge(c->s->huge, stage);
    edges = nuksm_maps_window(bs, first, NUKSM_TRACK_STRETCH);
    ret = nuksm_remap_huge_place(c->uffd, host, len, stage, huge);
    if (ret < 0 || !huge) {
        trace_nuksm_commit_rebuild_failed(host, ret < 0 ? -ret : EAGAIN);
        return false;
    }
    for (unsigned i = 0; i < NUKSM_TRACK_STRETCH; i++) {
        bool hinted = nuksm_page_flags(bs, first + i) & NUKSM_PAGE_HINTED;

        nuksm_commit_forget(c, bs, first + i, NUKSM_STATUS_REBUILT);
        nuksm_pages_discarded(c->pages, bs, first + i);
        /*
         * Its content, unchanged, still came with a disk transfer: its
         * pair may come after the rebuild (another VM's walk finds it
         * later), and that merge is the hint's.
         */
        if (hinted) {
            nuksm_page_update(bs, first + i, 0, NUKSM_PAGE_HINTED);
        }
    }
    /* The anonymous mapping gives back the mappings it replaced. */
    nuksm_maps_account(c, nuksm_maps_window(bs, first, NUKSM_TRACK_STRETCH) -
                          edges);
    return true;
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
    nuksm_commit_flush_unmerged(c, nuksm_control_epoch(c->s->control));
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
    qemu_mutex_init(&c->uffd_lock);
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
    qemu_mutex_destroy(&c->uffd_lock);
    qemu_mutex_destroy(&c->lock);
    g_free(c);
}
