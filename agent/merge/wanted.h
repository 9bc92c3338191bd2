/*
 * nuksmd pages seen once: no state kept for them, and their contents
 * wanted again when a second page has one.
 *
 * A page seen (contents.h) that pairs with no other for between one and
 * two ages (--forget-after) is forgotten: its key goes into a filter
 * (forgotten.h), and the agent keeps nothing else of it.  A candidate
 * that then finds neither a copy nor a page seen, but whose key the
 * filter may hold, is remembered, and its content is wanted: every VM of
 * its domain is sent a WANTED with the digest's fragment, at most once a
 * second, and offers again the pages it offered with that fragment; the
 * forgotten twin among them pairs with the candidate.
 *
 * A VM's candidates make at most WANTED_CAUSED_MAX contents wanted a
 * second; past that, a candidate whose content is wanted is offered
 * again later (RETRY), not remembered.  A VM is asked for at most
 * WANTED_FRAGMENTS_MAX fragments at once, else for every page it
 * offered.  When the filter holds as many keys as the content table may
 * hold pages seen, four times over, it is cleared, and every VM offers
 * again every page it offered.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_WANTED_H
#define NUKSMD_WANTED_H

#include <stdbool.h>
#include <stdint.h>

#include <glib.h>

#include "clients.h"
#include "forgotten.h"

struct NuksmAgent;

#define WANTED_CAUSED_MAX 4096u
#define WANTED_FRAGMENTS_MAX 4096u

/* The agent's: what it forgot, and when it next forgets. */
typedef struct Wanted {
    Forgotten forgotten;
    uint32_t forget_after;   /* seconds: one age */
    guint age_timer;
    guint send_timer;        /* sends WANTED while any is to be sent */
    uint64_t forgotten_total;    /* pages seen forgotten */
    uint64_t wanted_total;       /* contents wanted */
} Wanted;

/* Forget pages seen after @forget_after to 2 * @forget_after seconds. */
void wanted_start(struct NuksmAgent *agent, uint32_t forget_after);
void wanted_stop(struct NuksmAgent *agent);

void wanted_client_init(ClientWanted *w);
void wanted_client_destroy(ClientWanted *w);

/*
 * @v's candidate @page of @digest found neither copy nor page seen
 * under any of the @n keys it probed: if a page of its content may have
 * been forgotten, want the content.  False if @v is to offer the page
 * again later (RETRY, queued) instead of its being remembered.
 */
bool wanted_unseen(struct NuksmAgent *agent, NuksmClient *v,
                   uint64_t page, uint64_t digest, const uint64_t *keys,
                   size_t n);

#endif /* NUKSMD_WANTED_H */
