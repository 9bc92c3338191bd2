/*
 * nuksmd pages seen once: no state kept for them, and their contents
 * wanted again when a second page has one.
 *
 * A page seen (contents.h) that pairs with no other for between one and
 * two ages (--forget-after) is forgotten: its key goes into a filter
 * (forgotten.h), and the agent keeps nothing else of it.  A candidate
 * that then finds neither a copy nor a page seen, but whose key the
 * filter may hold, is remembered, and its content is wanted: every VM of
 * its domain is sent a WANTED naming the digest's fragment, at most once
 * a second (after WANTED_LANDING_MS if the candidate lands a migration,
 * which waits in a buffer meanwhile), and offers again at once the pages
 * it offered with that fragment, marked; the forgotten twin among them
 * pairs with the candidate.  A marked candidate makes no content wanted: a page
 * offered again only because its fragment matched cannot start another
 * round.
 *
 * A VM's candidates make at most WANTED_CAUSED_MAX contents wanted a
 * second, or WANTED_LANDING_MAX while they land a migration; past that,
 * a candidate whose content is wanted is offered again later (RETRY),
 * not remembered.  When the filter holds
 * FORGOTTEN_PER_SEEN keys per page seen the content table may hold, it
 * is cleared: the pages forgotten until then merge only when offered
 * again for another reason.
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
/*
 * A migration's pages arrive at the stream's pace, and each waits for
 * its content while a VM holding it offers it again: at most as many
 * contents wanted a second as there are fragments, so that the VMs of
 * the domain offer again about all their pages at most once a second.
 */
#define WANTED_LANDING_MAX 65536u

/* How soon the contents a landing page wants are asked for. */
#define WANTED_LANDING_MS 10u
#define FORGOTTEN_PER_SEEN 4u

/* The agent's: what it forgot, and when it next forgets. */
typedef struct Wanted {
    Forgotten forgotten;
    guint age_timer;
    guint send_timer;        /* sends WANTED while any is to be sent */
    guint soon_timer;        /* sends it soon, for a landing page */
    uint64_t wanted_total;       /* contents wanted */
    uint64_t cleared_total;      /* times the filter was cleared */
} Wanted;

/* Forget pages seen after @forget_after to 2 * @forget_after seconds. */
void wanted_start(struct NuksmAgent *agent, uint32_t forget_after);
void wanted_stop(struct NuksmAgent *agent);

/* Free what a VM that is leaving was to be sent. */
void wanted_client_destroy(ClientWanted *w);

/* What became of a candidate that found nothing (wanted_unseen()). */
typedef enum WantedOutcome {
    WANTED_NOT,     /* to remember: nothing of its content was forgotten */
    WANTED_ASKED,   /* to remember: its content is wanted, a page may pair */
    WANTED_LATER,   /* to offer again later (RETRY, queued), not remember */
} WantedOutcome;

/*
 * @v's candidate @c found neither copy nor page seen under any of the
 * @n keys it probed: if a page of its content may have been forgotten,
 * want the content.
 */
WantedOutcome wanted_unseen(struct NuksmAgent *agent, NuksmClient *v,
                   const NuksmCandidate *c, const uint64_t *keys, size_t n);

#endif /* NUKSMD_WANTED_H */
