/*
 * nuksm: digests (nuksm-digests.h).
 *
 * With migration capability nuksm-digests, a page the source holds
 * merged goes as a record (RAM_NUKSM_DIGEST_SIZE bytes): the key its
 * content is indexed by (nuksm_page_digest()), then the SHA-256 of a
 * salt and the content.  The destination offers the key as a landing
 * page would be (nuksm-landing.c); a copy the agent names maps only if
 * its own salted SHA-256 is the record's, so a key that collides, or a
 * copy that changed, never lands.  The salt is the destination's, new
 * for each migration and sent to the source on the return path before
 * any digest (HELLO); a destination that cannot land pages (no object
 * may, or postcopy is advised) declines (DECLINE).  The source waits
 * for either once, a round trip, before its first merged page.
 *
 * Records are numbered in the order of the stream.  The destination
 * answers on the return path with ANSWERS: every record below a number
 * is answered, and these ones among them it lacks.  The return path
 * thread only notes them: the migration thread, which holds the dirty
 * bitmap, marks a lacking page dirty again to send it in full, when it
 * next sends a digest or weighs what is left to send.  Records not
 * answered count as still to send, so that the migration converges
 * only once they are.  The last stage sends every page not in place
 * again, in full: whatever answer comes later is moot.
 *
 * Return path messages, big-endian, at most 512 bytes:
 *   HELLO    u8 1, salt[16]
 *   ANSWERS  u8 2, u64 upto, u64 lacking[] (increasing, each < upto)
 *   DECLINE  u8 3
 *
 * What a digest reveals, and to whom: docs/security.rst.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/bitmap.h"
#include "qemu/bswap.h"
#include "qemu/lockable.h"
#include "qemu/timer.h"
#include "qapi/error.h"
#include "crypto/hash.h"
#include "crypto/random.h"
#include "exec/ramblock.h"
#include "migration/misc.h"
#include "migration/options.h"
#include "libnuksm/nuksm-digest.h"
#include "nuksm-digests.h"
#include "nuksm-pages.h"
#include "trace.h"

#define NUKSM_DIGEST_SALT 16

QEMU_BUILD_BUG_ON(8 + NUKSM_DIGEST_STRONG != RAM_NUKSM_DIGEST_SIZE);

enum {
    NUKSM_DIGESTS_HELLO = 1,
    NUKSM_DIGESTS_ANSWERS = 2,
    NUKSM_DIGESTS_DECLINE = 3,
};

/* How long the source waits for HELLO or DECLINE, at most. */
#define NUKSM_DIGESTS_HELLO_MS 1000

/* What MIG_RP_MSG_NUKSM carries at most (the source's buffer). */
#define NUKSM_DIGESTS_MSG_MAX 512
#define NUKSM_DIGESTS_LACKING_MAX ((NUKSM_DIGESTS_MSG_MAX - 9) / 8)

typedef struct NuksmDigestMember {
    Nuksm *s;
    NuksmDigestStats stats;
} NuksmDigestMember;

/* A record sent and not answered yet. */
typedef struct NuksmDigestSent {
    RAMBlock *rb;
    uint64_t offset;
    NuksmDigestMember *m;
} NuksmDigestSent;

/*
 * The source: one outgoing migration at a time.  The migration thread
 * takes the lock with the migration's dirty bitmap locked; the return
 * path thread never locks that bitmap.
 */
static struct {
    QemuMutex lock;
    QemuCond said;              /* the destination said HELLO or DECLINE */
    GPtrArray *members;         /* NuksmDigestMember, of every object */
    bool waited;                /* for its word, done */
    bool ready;                 /* the destination sent its salt */
    uint8_t salt[NUKSM_DIGEST_SALT];
    uint64_t next;              /* the next record's number */
    uint64_t base;              /* the number of sent[0] */
    GArray *sent;               /* NuksmDigestSent, base..next-1 */
    GArray *lacking;            /* NuksmDigestSent, answered lacking, */
                                /* not yet marked dirty again */
    GHashTable *full;           /* RAMBlock -> bitmap of pages to send */
                                /* in full, for lack of a copy there */
} src;

/* The destination, in the main loop. */
static struct {
    bool ready;                 /* HELLO sent: records may come */
    uint8_t salt[NUKSM_DIGEST_SALT];
    uint64_t next;              /* the next record's number */
    uint64_t answered;          /* every record below it is answered */
    GHashTable *ahead;          /* answers above it: seq -> lacks */
    GArray *lacking;            /* below it, lacking, not yet sent */
    bool unsent;                /* answered moved since the last ANSWERS */
} dst;

static void __attribute__((constructor)) nuksm_digests_init(void)
{
    qemu_mutex_init(&src.lock);
    qemu_cond_init(&src.said);
    src.members = g_ptr_array_new_with_free_func(g_free);
    src.sent = g_array_new(false, false, sizeof(NuksmDigestSent));
    src.lacking = g_array_new(false, false, sizeof(NuksmDigestSent));
    src.full = g_hash_table_new_full(NULL, NULL, NULL, g_free);
    dst.ahead = g_hash_table_new(g_int64_hash, g_int64_equal);
    dst.lacking = g_array_new(false, false, sizeof(uint64_t));
}

static void nuksm_digests_strong(const uint8_t *salt, const void *page,
                                 uint8_t *strong)
{
    struct iovec iov[] = {
        { .iov_base = (void *)salt, .iov_len = NUKSM_DIGEST_SALT },
        { .iov_base = (void *)page, .iov_len = NUKSM_PAGE_SIZE },
    };
    size_t len = NUKSM_DIGEST_STRONG;

    /* SHA-256 is in every build of QEMU's crypto (glib's at least). */
    qcrypto_hash_bytesv(QCRYPTO_HASH_ALGO_SHA256, iov, ARRAY_SIZE(iov),
                        &strong, &len, &error_abort);
}

void nuksm_digests_join(Nuksm *s)
{
    NuksmDigestMember *m = g_new0(NuksmDigestMember, 1);

    m->s = s;
    QEMU_LOCK_GUARD(&src.lock);
    g_ptr_array_add(src.members, m);
}

static NuksmDigestMember *nuksm_digests_member(Nuksm *s)
{
    for (guint i = 0; i < src.members->len; i++) {
        NuksmDigestMember *m = g_ptr_array_index(src.members, i);

        if (m->s == s) {
            return m;
        }
    }
    return NULL;
}

/* The records of @records that count for @m count for nobody now. */
static void nuksm_digests_disown(GArray *records, NuksmDigestMember *m)
{
    for (guint i = 0; i < records->len; i++) {
        NuksmDigestSent *d = &g_array_index(records, NuksmDigestSent, i);

        if (d->m == m) {
            d->m = NULL;
        }
    }
}

void nuksm_digests_leave(Nuksm *s)
{
    NuksmDigestMember *m;

    QEMU_LOCK_GUARD(&src.lock);
    m = nuksm_digests_member(s);
    /* A record of its RAM not in place yet: its RAM is going too. */
    nuksm_digests_disown(src.sent, m);
    nuksm_digests_disown(src.lacking, m);
    g_ptr_array_remove(src.members, m);
}

void nuksm_digests_get_stats(Nuksm *s, NuksmDigestStats *stats)
{
    NuksmDigestMember *m;

    QEMU_LOCK_GUARD(&src.lock);
    m = nuksm_digests_member(s);
    *stats = m ? m->stats : (NuksmDigestStats) {};
}

/* The member whose object holds @rb merged at page @idx, if any. */
static NuksmDigestMember *nuksm_digests_merged(RAMBlock *rb, uint64_t idx)
{
    for (guint i = 0; i < src.members->len; i++) {
        NuksmDigestMember *m = g_ptr_array_index(src.members, i);
        NuksmPages *pages = m->s->pages;
        NuksmBlockState *bs;
        bool merged;

        qemu_mutex_lock(&pages->lock);
        bs = nuksm_pages_find(pages, rb);
        merged = bs && idx < bs->nr_pages &&
                 nuksm_page_flags(bs, idx) & NUKSM_PAGE_MERGED;
        qemu_mutex_unlock(&pages->lock);
        if (bs) {
            return merged ? m : NULL;
        }
    }
    return NULL;
}

/* Send the page of @d again, in full: the destination lacks it. */
static void nuksm_digests_resend(NuksmDigestSent *d)
{
    unsigned long *full = g_hash_table_lookup(src.full, d->rb);

    if (!full) {
        full = bitmap_new(d->rb->used_length / NUKSM_PAGE_SIZE);
        g_hash_table_insert(src.full, d->rb, full);
    }
    set_bit(d->offset / NUKSM_PAGE_SIZE, full);
    ram_save_redirty(d->rb, d->offset);
}

/* Send the pages the destination lacks again (dirty bitmap locked). */
static void nuksm_digests_resend_lacking(void)
{
    for (guint i = 0; i < src.lacking->len; i++) {
        nuksm_digests_resend(&g_array_index(src.lacking, NuksmDigestSent, i));
    }
    g_array_set_size(src.lacking, 0);
}

/*
 * Before the first merged page: the destination's word (HELLO or
 * DECLINE) is a round trip away from the stream's start.
 */
static void nuksm_digests_wait_word(void)
{
    int64_t end = qemu_clock_get_ms(QEMU_CLOCK_REALTIME) +
                  NUKSM_DIGESTS_HELLO_MS;
    int64_t left;

    while (!src.waited &&
           (left = end - qemu_clock_get_ms(QEMU_CLOCK_REALTIME)) > 0) {
        qemu_cond_timedwait(&src.said, &src.lock, left);
    }
    src.waited = true;
}

bool nuksm_digests_send(RAMBlock *rb, uint64_t offset, const void *host,
                        uint8_t *record)
{
    uint8_t page[NUKSM_PAGE_SIZE];
    uint64_t idx = offset / NUKSM_PAGE_SIZE;
    NuksmDigestSent d = { .rb = rb, .offset = offset };
    unsigned long *full;

    QEMU_LOCK_GUARD(&src.lock);
    d.m = nuksm_digests_merged(rb, idx);
    if (!d.m) {
        return false;
    }
    nuksm_digests_wait_word();
    if (!src.ready) {
        return false;
    }
    nuksm_digests_resend_lacking();
    full = g_hash_table_lookup(src.full, rb);
    if (full && test_bit(idx, full)) {
        return false;
    }
    /* One version of the page for both digests, whatever writes it now. */
    memcpy(page, host, sizeof(page));
    stq_be_p(record, nuksm_page_digest(page, sizeof(page)));
    nuksm_digests_strong(src.salt, page, record + 8);
    g_array_append_val(src.sent, d);
    src.next++;
    d.m->stats.sent++;
    return true;
}

/* Records below @upto are answered: those not resent were held. */
static void nuksm_digests_drop(uint64_t upto)
{
    for (uint64_t seq = src.base; seq < upto; seq++) {
        NuksmDigestSent *d = &g_array_index(src.sent, NuksmDigestSent,
                                            seq - src.base);

        if (d->m && d->rb) {
            d->m->stats.held++;
        }
    }
    g_array_remove_range(src.sent, 0, upto - src.base);
    src.base = upto;
}

static bool nuksm_digests_hello(const uint8_t *msg, size_t len,
                                Error **errp)
{
    if (len != 1 + NUKSM_DIGEST_SALT || src.ready) {
        error_setg(errp, "nuksm-digests: unexpected HELLO of %zu bytes", len);
        return false;
    }
    memcpy(src.salt, msg + 1, NUKSM_DIGEST_SALT);
    src.ready = src.waited = true;
    qemu_cond_broadcast(&src.said);
    trace_nuksm_digests_hello(true);
    return true;
}

static bool nuksm_digests_answers(const uint8_t *msg, size_t len,
                                  Error **errp)
{
    uint64_t upto, last = 0;
    size_t n;

    if (len < 9 || (len - 9) % 8) {
        error_setg(errp, "nuksm-digests: ANSWERS of %zu bytes", len);
        return false;
    }
    upto = ldq_be_p(msg + 1);
    n = (len - 9) / 8;
    if (upto > src.next) {
        error_setg(errp, "nuksm-digests: answers up to record %" PRIu64
                   " of %" PRIu64 " sent", upto, src.next);
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        uint64_t seq = ldq_be_p(msg + 9 + 8 * i);

        if (seq >= upto || (i && seq <= last)) {
            error_setg(errp, "nuksm-digests: record %" PRIu64 " lacking, "
                       "out of order or not below %" PRIu64, seq, upto);
            return false;
        }
        last = seq;
        /* Below base: the last stage sent it again already. */
        if (seq >= src.base) {
            NuksmDigestSent *d = &g_array_index(src.sent, NuksmDigestSent,
                                                seq - src.base);

            g_array_append_val(src.lacking, *d);
            if (d->m) {
                d->m->stats.lacked++;
            }
            d->rb = NULL;       /* not held */
        }
    }
    if (upto > src.base) {
        nuksm_digests_drop(upto);
    }
    trace_nuksm_digests_answers(upto, n);
    return true;
}

bool nuksm_digests_answer(const uint8_t *msg, size_t len, Error **errp)
{
    QEMU_LOCK_GUARD(&src.lock);
    if (len && msg[0] == NUKSM_DIGESTS_HELLO) {
        return nuksm_digests_hello(msg, len, errp);
    }
    if (len && msg[0] == NUKSM_DIGESTS_ANSWERS && src.ready) {
        return nuksm_digests_answers(msg, len, errp);
    }
    if (len == 1 && msg[0] == NUKSM_DIGESTS_DECLINE && !src.ready) {
        src.waited = true;
        qemu_cond_broadcast(&src.said);
        trace_nuksm_digests_hello(false);
        return true;
    }
    error_setg(errp, "nuksm-digests: unexpected message of %zu bytes", len);
    return false;
}

uint64_t nuksm_digests_outstanding(void)
{
    QEMU_LOCK_GUARD(&src.lock);
    nuksm_digests_resend_lacking();
    return src.next - src.base;
}

void nuksm_digests_complete(void)
{
    QEMU_LOCK_GUARD(&src.lock);
    trace_nuksm_digests_complete(src.next - src.base);
    nuksm_digests_resend_lacking();
    for (guint i = 0; i < src.sent->len; i++) {
        NuksmDigestSent *d = &g_array_index(src.sent, NuksmDigestSent, i);

        if (d->rb) {
            nuksm_digests_resend(d);
            if (d->m) {
                d->m->stats.unanswered++;
            }
        }
    }
    g_array_set_size(src.sent, 0);
    src.base = src.next;
    /* No digest goes in the last stage: ram.c sends none. */
}

void nuksm_digests_end(void)
{
    QEMU_LOCK_GUARD(&src.lock);
    src.ready = src.waited = false;
    src.next = src.base = 0;
    g_array_set_size(src.sent, 0);
    g_array_set_size(src.lacking, 0);
    g_hash_table_remove_all(src.full);
}

void nuksm_digests_begin(bool landing)
{
    uint8_t hello[1 + NUKSM_DIGEST_SALT] = { NUKSM_DIGESTS_HELLO };
    uint8_t decline = NUKSM_DIGESTS_DECLINE;

    dst.ready = false;
    dst.next = dst.answered = 0;
    dst.unsent = false;
    g_hash_table_remove_all(dst.ahead);
    g_array_set_size(dst.lacking, 0);
    if (!migrate_nuksm_digests()) {
        return;
    }
    if (!landing) {
        migrate_send_rp_nuksm(&decline, 1);
        return;
    }
    qcrypto_random_bytes(dst.salt, sizeof(dst.salt), &error_abort);
    memcpy(hello + 1, dst.salt, sizeof(dst.salt));
    dst.ready = migrate_send_rp_nuksm(hello, sizeof(hello)) == 0;
}

bool nuksm_digests_taken(void)
{
    return dst.ready;
}

uint64_t nuksm_digests_arrived(const uint8_t *record, uint64_t *key,
                               uint8_t *strong)
{
    *key = ldq_be_p(record);
    memcpy(strong, record + 8, NUKSM_DIGEST_STRONG);
    return dst.next++;
}

void nuksm_digests_answered(uint64_t seq, bool lacks)
{
    g_assert(seq >= dst.answered && seq < dst.next);
    g_hash_table_insert(dst.ahead, g_memdup2(&seq, sizeof(seq)),
                        GINT_TO_POINTER(lacks + 1));
    for (;;) {
        gpointer key, value;

        if (!g_hash_table_lookup_extended(dst.ahead, &dst.answered, &key,
                                          &value)) {
            break;
        }
        if (GPOINTER_TO_INT(value) == 2) {
            g_array_append_val(dst.lacking, dst.answered);
        }
        g_hash_table_remove(dst.ahead, key);
        g_free(key);
        dst.answered++;
        dst.unsent = true;
    }
}

void nuksm_digests_flush(void)
{
    uint8_t msg[NUKSM_DIGESTS_MSG_MAX] = { NUKSM_DIGESTS_ANSWERS };
    const uint64_t *lacking = (const uint64_t *)dst.lacking->data;
    guint done = 0;

    while (dst.unsent) {
        guint n = MIN(dst.lacking->len - done, NUKSM_DIGESTS_LACKING_MAX);
        /* Up to the next lacking record not in this message, if any. */
        uint64_t upto = done + n < dst.lacking->len ? lacking[done + n] :
                        dst.answered;

        stq_be_p(msg + 1, upto);
        for (guint i = 0; i < n; i++) {
            stq_be_p(msg + 9 + 8 * i, lacking[done + i]);
        }
        done += n;
        dst.unsent = done < dst.lacking->len;
        /* The source is gone: the migration fails without our answers. */
        if (migrate_send_rp_nuksm(msg, 9 + 8 * n) < 0) {
            break;
        }
    }
    trace_nuksm_digests_flush(dst.answered, dst.lacking->len);
    g_array_set_size(dst.lacking, 0);
    dst.unsent = false;
}

bool nuksm_digests_match(const void *page, const uint8_t *strong)
{
    uint8_t mine[NUKSM_DIGEST_STRONG];

    nuksm_digests_strong(dst.salt, page, mine);
    return !memcmp(mine, strong, sizeof(mine));
}
