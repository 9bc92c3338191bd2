/*
 * nuksmd re-placement (relocate): moving merged pages to the copy their
 * placement now asks for, after the policy changed, a VM's home node
 * did, or who reads which merged pages did (reads.h).
 *
 * A pass looks at every merged page, grouped by the copy (slot) it maps,
 * and plans moves under the policy in force.  A merged page is never
 * written (a write ends its sharing): it is hot when its VM read its
 * read region lately (policy_page_hot(), client_read_idle()).
 *
 *   local      each page to a copy on its own home node
 *   ksm-order  every page of a copy to the node KSM's order picks
 *   priority   every page of a copy to the node the priority draw picks,
 *              among the hot owners if any
 *   fair       every page of a copy to a hot owner's node (the content
 *              draws between several), else to the emptier node of its
 *              owners when nodes are unbalanced
 *   auto       each page warm away from home, and the pages of a copy
 *              none of whose pages is at home there, to their homes
 *   global,    nothing: copies stay where they were made
 *   adaptive
 *
 * A pass skips pages a MOVE is still under way for: where they land is
 * known only once they do.  If it skipped any, another pass looks at
 * them once its plan is carried out (after RELOCATE_RECHECK_MS if it
 * planned nothing), and so on while fewer pages are moving each time;
 * and, while the last pass skipped some, each MOVED answered asks for a
 * pass once no plan is being carried out: a VM's move while its pages
 * were moving would otherwise leave them where the old plan sent them
 * (a slow VM's answers may not come faster than the passes), and a VM
 * that never answers costs no pass.
 *
 * The moves are then carried out gradually, at most --replace-rate pages
 * per second: the agent copies the content to a slot on the target node
 * (or finds the copy there) and asks each VM to MOVE its page, which it
 * remaps after comparing the content under write protection, as for a
 * merge.  A slot left by its last page is freed.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_RELOCATE_H
#define NUKSMD_RELOCATE_H

#include <stdbool.h>
#include <stdint.h>

#include <glib.h>

struct NuksmAgent;
struct NuksmClient;

/* Moves are carried out this often, each time a tenth of the rate. */
#define RELOCATE_TICK_MS 100
/* A pass waits this long for more reasons to come (policy, homes, reads) */
#define RELOCATE_DEBOUNCE_MS 200
/* A pass that skipped moving pages looks again after this long. */
#define RELOCATE_RECHECK_MS 1000

typedef struct Relocator {
    uint32_t rate;           /* pages moved per second, at most */
    guint pass_timer;        /* a pass is due */
    guint tick_timer;        /* moves are being carried out */
    GArray *plan;            /* RelocateMove, in slot order */
    guint next;              /* first move of @plan not carried out */
    uint64_t moved;          /* pages moved (MOVED, MERGED) */
    bool recheck;            /* the last pass skipped moving pages, */
                             /* fewer than the one before */
    uint64_t moving;         /* pages the last pass skipped */
} Relocator;

void relocate_init(struct NuksmAgent *agent, uint32_t rate);
void relocate_destroy(struct NuksmAgent *agent);

/* Plan a pass soon, because of @why (for the log). */
void relocate_request(struct NuksmAgent *agent, const char *why);

/* Moves planned and not carried out yet. */
uint64_t relocate_pending(const struct NuksmAgent *agent);

/* MOVED from a VM: payload passed nuksm_msg_check. */
void relocate_handle_moved(struct NuksmAgent *agent,
                           struct NuksmClient *client, uint32_t seq,
                           const void *payload);

#endif /* NUKSMD_RELOCATE_H */
