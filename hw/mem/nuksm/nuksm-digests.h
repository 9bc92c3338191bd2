/*
 * nuksm: digests, the merged pages that migration capability
 * nuksm-digests sends as what the destination needs to find them
 * (nuksm-digests.c).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef HW_MEM_NUKSM_DIGESTS_H
#define HW_MEM_NUKSM_DIGESTS_H

#include "nuksm.h"

/* A page's salted SHA-256, which proves the copy a destination maps. */
#define NUKSM_DIGEST_STRONG 32

/* Counters of one object, in pages, since it was created. */
typedef struct NuksmDigestStats {
    uint64_t sent;              /* source: sent as digests */
    uint64_t held;              /* ... that the destination held */
    uint64_t lacked;            /* ... that it lacked: sent again in full */
    uint64_t unanswered;        /* ... not answered by the last stage, */
                                /* which sent them again in full */
} NuksmDigestStats;

/* An object takes part (main loop): its merged pages may go as digests. */
void nuksm_digests_join(Nuksm *s);
/* ... no more: it is going. */
void nuksm_digests_leave(Nuksm *s);
void nuksm_digests_get_stats(Nuksm *s, NuksmDigestStats *stats);

/*
 * The source, as migration calls it (RAMSaveDigests in
 * include/migration/misc.h, which says which thread calls what).
 */
bool nuksm_digests_send(RAMBlock *rb, uint64_t offset, const void *host,
                        uint8_t *record);
bool nuksm_digests_answer(const uint8_t *msg, size_t len, Error **errp);
uint64_t nuksm_digests_outstanding(void);
void nuksm_digests_complete(void);
void nuksm_digests_end(void);

/*
 * The destination (main loop).  An incoming migration's RAM begins:
 * with the capability on, tell the source to send digests, with the
 * salt it is to use, if @landing (some object may land pages), or not.
 */
void nuksm_digests_begin(bool landing);
/* Did the destination ask for digests (HELLO)? */
bool nuksm_digests_taken(void);
/*
 * A record arrived: its number in the stream, and what it says: the
 * content's key (nuksm_page_digest()) and its salted SHA-256.
 */
uint64_t nuksm_digests_arrived(const uint8_t *record, uint64_t *key,
                               uint8_t *strong);
/* Record @seq is answered: the destination holds its page, or @lacks it. */
void nuksm_digests_answered(uint64_t seq, bool lacks);
/* Send the answers that the records' order lets go. */
void nuksm_digests_flush(void);
/* Is @page's salted SHA-256 @strong? */
bool nuksm_digests_match(const void *page, const uint8_t *strong);

#endif /* HW_MEM_NUKSM_DIGESTS_H */
