/*
 * nuksm: landing, the pages of an incoming migration put where the
 * host already holds their content (nuksm-landing.c).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef HW_MEM_NUKSM_LANDING_H
#define HW_MEM_NUKSM_LANDING_H

#include "nuksm.h"

/* Pages a landing holds in buffers at once, waiting for the agent. */
#define NUKSM_LANDING_PAGES 1024
/* ... and pages that came as digests (about 100 bytes each). */
#define NUKSM_LANDING_DIGESTS 16384

/* Counters of a landing, in pages, since the object was created. */
typedef struct NuksmLandingStats {
    uint64_t offered;           /* read into a buffer and offered */
    uint64_t landed;            /* ... mapped onto a copy the host held */
    uint64_t written;           /* ... written into guest RAM instead */
    uint64_t passed;            /* read straight into guest RAM: no */
                                /* buffer free, or not offered */
    uint64_t digests;           /* came as digests (nuksm-digests.c) */
    uint64_t digests_landed;    /* ... mapped onto a copy the host held */
    uint64_t digests_lacking;   /* ... answered as lacking */
} NuksmLandingStats;

/* Main loop (BQL), all of them. */
NuksmLanding *nuksm_landing_new(Nuksm *s);
void nuksm_landing_free(NuksmLanding *l);

/*
 * The loading thread, while nuksm_may_land(): where to read the page at
 * @offset of @rb, which nuksm may deduplicate: a buffer, or NULL to read
 * it into guest RAM.  A page sent again while it waits gets its buffer.
 */
void *nuksm_landing_buffer(NuksmLanding *l, RAMBlock *rb, uint64_t offset);
/*
 * The page was read into @buf: offer it.  True when a batch of offers
 * went to the agent, whose answers are then worth reading.
 */
bool nuksm_landing_arrived(NuksmLanding *l, RAMBlock *rb, uint64_t offset,
                           uint8_t gnode, void *buf);
/*
 * The page at @offset of @rb came as digest record @seq (nuksm-digests.c):
 * the content key @key and salted SHA-256 @strong.  Offer it, or if
 * NUKSM_LANDING_DIGESTS wait already, answer it as lacking; true when a
 * batch of offers went to the agent.
 */
bool nuksm_landing_digest(NuksmLanding *l, RAMBlock *rb, uint64_t offset,
                          uint8_t gnode, uint64_t seq, uint64_t key,
                          const uint8_t *strong);
/* Is every buffer taken? */
bool nuksm_landing_full(NuksmLanding *l);
/* Do NUKSM_LANDING_DIGESTS pages that came as digests wait? */
bool nuksm_landing_digests_full(NuksmLanding *l);
/* The page at @offset of @rb is loaded otherwise: write what waits. */
void nuksm_landing_touch(NuksmLanding *l, RAMBlock *rb, uint64_t offset);
/* Send the offers not sent yet; do pages wait in buffers? */
bool nuksm_landing_send(NuksmLanding *l);
/*
 * Write every page still waiting in a buffer into guest RAM, and free
 * the buffers.  Pages that came as digests wait on, for the source
 * sends them in full in its last stage unless they landed; with @all
 * (the stream ended, or the agent went: no answer will come), they are
 * answered as lacking too.
 */
void nuksm_landing_settle(NuksmLanding *l, bool all);
/* Do pages wait in buffers? */
bool nuksm_landing_waiting(NuksmLanding *l);

/*
 * The agent's answers, while the migration is the only writer of guest
 * RAM (runstate inmigrate): MERGE (map each page onto its slot if its
 * content is the slot's, answering MERGED) and RETRY (write the page,
 * or answer its digest as lacking).
 */
void nuksm_landing_merge(NuksmLanding *l, uint32_t epoch,
                         const NuksmMsgBatch *batch);
void nuksm_landing_retry(NuksmLanding *l, const NuksmMsgBatch *batch);

void nuksm_landing_get_stats(NuksmLanding *l, NuksmLandingStats *stats);

#endif /* HW_MEM_NUKSM_LANDING_H */
