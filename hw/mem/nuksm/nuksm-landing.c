/*
 * nuksm: landing (nuksm-landing.h).
 *
 * An incoming migration writes each page it receives into fresh guest
 * RAM.  While nuksm may land them (nuksm_may_land()), a page is read
 * into a buffer of ours instead (qemu-patches/0009), hashed once and
 * offered to the agent, marked as landing: it answers with a slot of
 * the same content in the VM's merge domain (MERGE), which the commit
 * unit maps in place of the page, or with RETRY, and the page is
 * written into guest RAM as the migration would have.  Until then the
 * guest page is left as it was.  A page the stream loads otherwise
 * (zero, XBZRLE) is written first, so that it reads as sent; at the end
 * of each section of the stream every page still waiting is written,
 * so that neither what follows (device state) nor the guest reads a
 * page not in place.  A page sent again while it waits takes its
 * buffer: whatever answer comes is checked against the content then.
 *
 * A page that came as a digest (capability nuksm-digests) waits with
 * no buffer: there is nothing to write, and no section's end need wait
 * for it, since the source sends it in full in its last stage unless it
 * landed.  A copy the agent names lands once its salted SHA-256 is the
 * digest's; a page the agent has no copy of, or whose copy does not
 * match, is answered to the source as lacking (nuksm-digests.c), which
 * sends it again in full.  A page sent again in full, or loaded
 * otherwise, answers its digest as held: the source need not send it,
 * the stream now says what it is.
 *
 * Only the loading thread writes guest RAM while the VM is incoming,
 * and it runs this unit: the agent's answers are handled in it too
 * (the loading thread reads them between pages, nuksm.c), so a page
 * changes under none of them and needs no write protection.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/cutils.h"
#include "qemu/madvise.h"
#include "exec/ramblock.h"
#include "libnuksm/nuksm-digest.h"
#include "nuksm-commit.h"
#include "nuksm-digests.h"
#include "nuksm-landing.h"
#include "nuksm-outbox.h"
#include "trace.h"

/* Offers sent as one batch: the answers of the first come meanwhile. */
#define NUKSM_LANDING_BATCH 128

#define NUKSM_LANDING_ARENA ((size_t)NUKSM_LANDING_PAGES * NUKSM_PAGE_SIZE)

/* A page that waits for the agent, in a buffer or as a digest. */
typedef struct NuksmLandingPage {
    uint64_t page;              /* in the VM's RAM address space */
    uint8_t *host;              /* where it goes in guest RAM */
    uint8_t *buf;               /* its content as sent, in the arena; */
                                /* NULL if it came as a digest */
    bool reading;               /* the stream is filling @buf: the */
                                /* loading coroutine may yield meanwhile */
    uint64_t seq;               /* a digest: its record, and what */
    uint8_t strong[NUKSM_DIGEST_STRONG];    /* the copy must match */
} NuksmLandingPage;

struct NuksmLanding {
    Nuksm *s;
    GHashTable *waiting;        /* &page -> NuksmLandingPage */
    /*
     * The buffers, mapped once and given back to the host after each
     * section: they cost memory only while pages wait in them.
     */
    uint8_t *arena;
    unsigned nr_spare;          /* buffers never used since given back */
    GPtrArray *spare;           /* buffers used and free again */
    unsigned nr_digests;        /* pages waiting that came as digests */
    GArray *offers;             /* NuksmCandidate, not yet sent */
    NuksmLandingStats stats;
};

NuksmLanding *nuksm_landing_new(Nuksm *s)
{
    NuksmLanding *l = g_new0(NuksmLanding, 1);

    l->s = s;
    l->waiting = g_hash_table_new_full(g_int64_hash, g_int64_equal, NULL,
                                       g_free);
    l->arena = mmap(NULL, NUKSM_LANDING_ARENA, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (l->arena == MAP_FAILED) {
        l->arena = NULL;
    }
    l->nr_spare = l->arena ? NUKSM_LANDING_PAGES : 0;
    l->spare = g_ptr_array_new();
    l->offers = g_array_new(false, false, sizeof(NuksmCandidate));
    return l;
}

void nuksm_landing_free(NuksmLanding *l)
{
    g_hash_table_destroy(l->waiting);
    if (l->arena) {
        munmap(l->arena, NUKSM_LANDING_ARENA);
    }
    g_ptr_array_free(l->spare, true);
    g_array_free(l->offers, true);
    g_free(l);
}

static uint64_t nuksm_landing_page_of(RAMBlock *rb, uint64_t offset)
{
    return (rb->offset + offset) / NUKSM_PAGE_SIZE;
}

bool nuksm_landing_full(NuksmLanding *l)
{
    return !l->nr_spare && !l->spare->len;
}

/* Pages waiting in buffers. */
static unsigned nuksm_landing_buffered(NuksmLanding *l)
{
    return l->arena ? NUKSM_LANDING_PAGES - l->nr_spare - l->spare->len : 0;
}

bool nuksm_landing_digests_full(NuksmLanding *l)
{
    return l->nr_digests >= NUKSM_LANDING_DIGESTS;
}

bool nuksm_landing_waiting(NuksmLanding *l)
{
    return g_hash_table_size(l->waiting) > 0;
}

/* The page waits no more: its buffer, if any, is free for the next. */
static void nuksm_landing_done(NuksmLanding *l, NuksmLandingPage *p)
{
    if (p->buf) {
        g_ptr_array_add(l->spare, p->buf);
    } else {
        l->nr_digests--;
    }
    g_hash_table_remove(l->waiting, &p->page);
}

/* A digest that waits is answered: the page landed, or it @lacks. */
static void nuksm_landing_answer(NuksmLanding *l, NuksmLandingPage *p,
                                 bool lacks)
{
    nuksm_digests_answered(p->seq, lacks);
    if (lacks) {
        l->stats.digests_lacking++;
    }
    nuksm_landing_done(l, p);
}

/* The page waiting for @page, created if none waits. */
static NuksmLandingPage *nuksm_landing_page(NuksmLanding *l, RAMBlock *rb,
                                            uint64_t offset)
{
    uint64_t page = nuksm_landing_page_of(rb, offset);
    NuksmLandingPage *p = g_hash_table_lookup(l->waiting, &page);

    if (!p) {
        p = g_new0(NuksmLandingPage, 1);
        p->page = page;
        p->host = rb->host + offset;
        g_hash_table_insert(l->waiting, &p->page, p);
    }
    return p;
}

void *nuksm_landing_buffer(NuksmLanding *l, RAMBlock *rb, uint64_t offset)
{
    uint64_t page = nuksm_landing_page_of(rb, offset);
    NuksmLandingPage *p = g_hash_table_lookup(l->waiting, &page);

    /* Its digest waits: this version of the page replaces it. */
    if (p && !p->buf) {
        nuksm_landing_answer(l, p, false);
        p = NULL;
    }
    if (!p && nuksm_landing_full(l)) {
        l->stats.passed++;
        return NULL;
    }
    p = nuksm_landing_page(l, rb, offset);
    if (!p->buf) {
        p->buf = l->spare->len ?
                 g_ptr_array_steal_index_fast(l->spare, l->spare->len - 1) :
                 l->arena + (size_t)--l->nr_spare * NUKSM_PAGE_SIZE;
    }
    p->reading = true;
    return p->buf;
}

/*
 * Put page @p, which waits in a buffer, into guest RAM, as the
 * migration would have; @zero: the buffer holds zeros.
 */
static void nuksm_landing_put(NuksmLanding *l, NuksmLandingPage *p,
                              bool zero)
{
    /* A zero page over a page never written takes no memory. */
    if (!zero) {
        memcpy(p->host, p->buf, NUKSM_PAGE_SIZE);
    } else if (!buffer_is_zero(p->host, NUKSM_PAGE_SIZE)) {
        memset(p->host, 0, NUKSM_PAGE_SIZE);
    }
    nuksm_landing_done(l, p);
}

/*
 * ... a page offered, which did not land; or answer its digest as
 * lacking.
 */
static void nuksm_landing_write(NuksmLanding *l, NuksmLandingPage *p)
{
    if (!p->buf) {
        nuksm_landing_answer(l, p, true);
        return;
    }
    l->stats.written++;
    /* Zero pages are never offered (nuksm_landing_arrived()). */
    nuksm_landing_put(l, p, false);
}

bool nuksm_landing_send(NuksmLanding *l)
{
    if (l->offers->len) {
        trace_nuksm_landing_offer(l->s->id, l->offers->len);
        nuksm_outbox_post_batches(&l->s->outbox, l->s->conn.epoch,
                                  NUKSM_MSG_CANDIDATES, l->offers->data,
                                  sizeof(NuksmCandidate), l->offers->len,
                                  NUKSM_CANDIDATES_MAX);
        g_array_set_size(l->offers, 0);
    }
    return nuksm_landing_buffered(l) > 0;
}

/* Offer @page, of content @key, sending a full batch: true if one went. */
static bool nuksm_landing_offer(NuksmLanding *l, uint64_t page, uint8_t gnode,
                                uint64_t key)
{
    NuksmCandidate c = {
        .page = page,
        .digest = key,
        .gnode = gnode,
        .idle = NUKSM_IDLE_NEVER,
        .flags = NUKSM_CANDIDATE_LANDING,
    };

    g_array_append_val(l->offers, c);
    if (l->offers->len < NUKSM_LANDING_BATCH) {
        return false;
    }
    nuksm_landing_send(l);
    return true;
}

bool nuksm_landing_arrived(NuksmLanding *l, RAMBlock *rb, uint64_t offset,
                           uint8_t gnode, void *buf)
{
    uint64_t page = nuksm_landing_page_of(rb, offset);
    NuksmLandingPage *p = g_hash_table_lookup(l->waiting, &page);
    bool zero;

    g_assert(p && p->buf == buf && p->reading);
    p->reading = false;
    /*
     * Zero pages merge locally, never through the agent; and with the
     * agent gone no answer would come.
     */
    zero = buffer_is_zero(buf, NUKSM_PAGE_SIZE);
    if (zero || !l->s->conn.ready) {
        nuksm_landing_put(l, p, zero);
        return false;
    }
    l->stats.offered++;
    return nuksm_landing_offer(l, page, gnode,
                               nuksm_page_digest(buf, NUKSM_PAGE_SIZE));
}

bool nuksm_landing_digest(NuksmLanding *l, RAMBlock *rb, uint64_t offset,
                          uint8_t gnode, uint64_t seq, uint64_t key,
                          const uint8_t *strong)
{
    uint64_t page = nuksm_landing_page_of(rb, offset);
    NuksmLandingPage *p = g_hash_table_lookup(l->waiting, &page);

    l->stats.digests++;
    /* An older version waits: this one replaces it. */
    if (p && p->buf) {
        nuksm_landing_done(l, p);
    } else if (p) {
        nuksm_landing_answer(l, p, false);
    }
    p = nuksm_landing_page(l, rb, offset);
    p->seq = seq;
    memcpy(p->strong, strong, NUKSM_DIGEST_STRONG);
    l->nr_digests++;
    if (!l->s->conn.ready || l->nr_digests > NUKSM_LANDING_DIGESTS) {
        nuksm_landing_answer(l, p, true);
        return false;
    }
    return nuksm_landing_offer(l, page, gnode, key);
}

void nuksm_landing_touch(NuksmLanding *l, RAMBlock *rb, uint64_t offset)
{
    uint64_t page = nuksm_landing_page_of(rb, offset);
    NuksmLandingPage *p = g_hash_table_lookup(l->waiting, &page);

    if (p && !p->buf) {
        /* Loaded otherwise now: the digest is moot. */
        nuksm_landing_answer(l, p, false);
    } else if (p) {
        nuksm_landing_write(l, p);
    }
}

void nuksm_landing_settle(NuksmLanding *l, bool all)
{
    g_autoptr(GPtrArray) due = g_ptr_array_new();
    GHashTableIter it;
    gpointer value;

    g_hash_table_iter_init(&it, l->waiting);
    while (g_hash_table_iter_next(&it, NULL, &value)) {
        NuksmLandingPage *p = value;

        /* Still being read (the agent went meanwhile): arrives later. */
        if (!p->reading && (p->buf || all)) {
            g_ptr_array_add(due, p);
        }
    }
    trace_nuksm_landing_settle(l->s->id, due->len);
    for (guint i = 0; i < due->len; i++) {
        nuksm_landing_write(l, g_ptr_array_index(due, i));
    }
    if (all) {
        g_array_set_size(l->offers, 0);
    }
    nuksm_digests_flush();
    /* No buffer waits: their memory goes back to the host. */
    if (l->arena && !nuksm_landing_buffered(l) &&
        l->nr_spare < NUKSM_LANDING_PAGES) {
        qemu_madvise(l->arena, NUKSM_LANDING_ARENA, QEMU_MADV_DONTNEED);
        l->nr_spare = NUKSM_LANDING_PAGES;
        g_ptr_array_set_size(l->spare, 0);
    }
}

/* Land the page of @r, which waits as @p (NULL if it does not). */
static NuksmSlotStatus nuksm_landing_check(NuksmLanding *l, uint32_t epoch,
                                          const NuksmSlotRef *r,
                                          NuksmLandingPage *p)
{
    NuksmLandCheck check = {
        .content = p ? p->buf : NULL,
        .match = nuksm_digests_match,
        .strong = p ? p->strong : NULL,
    };

    /* A page written already lands as it is now in guest RAM. */
    return nuksm_commit_land(l->s->commit, epoch, r, p ? &check : NULL);
}

void nuksm_landing_merge(NuksmLanding *l, uint32_t epoch,
                         const NuksmMsgBatch *batch)
{
    const NuksmSlotRef *in = (const NuksmSlotRef *)(batch + 1);
    g_autofree NuksmSlotRef *out = g_memdup2(in, batch->count * sizeof(*in));

    for (uint32_t i = 0; i < batch->count; i++) {
        NuksmLandingPage *p = g_hash_table_lookup(l->waiting, &out[i].page);

        /* Sent again, and not read in full yet: its new content will be. */
        if (p && p->reading) {
            out[i].status = NUKSM_STATUS_CHANGED;
            continue;
        }
        out[i].status = nuksm_landing_check(l, epoch, &out[i], p);
        if (!p) {
            continue;
        }
        if (out[i].status == NUKSM_STATUS_MERGED && !p->buf) {
            l->stats.digests_landed++;
            nuksm_landing_answer(l, p, false);
        } else if (out[i].status == NUKSM_STATUS_MERGED) {
            l->stats.landed++;
            nuksm_landing_done(l, p);
        } else {
            /* Written, or for a digest the copy did not match: lacking. */
            nuksm_landing_write(l, p);
        }
    }
    nuksm_digests_flush();
    nuksm_outbox_post_batches(&l->s->outbox, epoch, NUKSM_MSG_MERGED, out,
                              sizeof(*out), batch->count, NUKSM_SLOTREFS_MAX);
}

void nuksm_landing_retry(NuksmLanding *l, const NuksmMsgBatch *batch)
{
    const NuksmSlotRef *r = (const NuksmSlotRef *)(batch + 1);

    for (uint32_t i = 0; i < batch->count; i++) {
        NuksmLandingPage *p = g_hash_table_lookup(l->waiting, &r[i].page);

        if (p && !p->reading) {
            nuksm_landing_write(l, p);
        }
    }
    nuksm_digests_flush();
}

void nuksm_landing_get_stats(NuksmLanding *l, NuksmLandingStats *stats)
{
    *stats = l->stats;
}
