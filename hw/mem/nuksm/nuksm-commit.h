/*
 * nuksm: the commit unit, what changes the backing of guest pages.
 *
 * It owns the userfaultfd on guest RAM, the agent's store descriptors,
 * the queue of the agent's requests and the mapping budget, and carries
 * out the agent's decisions (nuksm-commit.c, with nuksm-remap.c for the
 * system calls and nuksm-maps.c for the budget).  Its requests are served
 * by the scanner thread between chunks; RAM discard enters it from
 * whichever thread discards.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef HW_MEM_NUKSM_COMMIT_H
#define HW_MEM_NUKSM_COMMIT_H

#include "qemu/thread.h"
#include "nuksm.h"
#include "nuksm-maps.h"
#include "nuksm-pages.h"
#include "nuksm-remap.h"
#include "nuksm-writes.h"

/* A node's store, as the agent handed it over (read-only). */
typedef struct NuksmStore {
    int fd;                     /* -1 if not received */
    uint64_t size;
} NuksmStore;

/* A request from the agent, queued by the main loop for the thread. */
typedef struct NuksmWork {
    NuksmMsgType type;
    uint32_t epoch;
    int fd;                     /* STORE only */
    uint32_t len;
    uint8_t payload[];
} NuksmWork;

struct NuksmCommit {
    Nuksm *s;
    NuksmPages *pages;          /* the table it changes (s->pages) */

    /*
     * Protected by @lock: what the main loop hands over and the scanner
     * thread takes.  After changing them the main loop wakes the thread
     * (nuksm_control_wake()).
     */
    QemuMutex lock;
    GQueue work;                /* NuksmWork *, from the agent */
    int uffd_dev;               /* /dev/userfaultfd from the agent, or -1 */
    bool uffd_retry;            /* a new connection: try userfaultfd again */
    char *uffd_error;           /* why we have no userfaultfd, or NULL */

    /*
     * Taken around taking and releasing userfaultfd, before page_lock:
     * a release returns once the descriptor is closed, whichever thread
     * asked first.
     */
    QemuMutex uffd_lock;

    /*
     * Protected by page_lock (@pages->lock): what backs guest pages.
     * @uffd and @writes are set only by the scanner thread, which may
     * read them without the lock (atomically).
     */
    int uffd;                   /* -1 while stepped aside */
    NuksmWrites *writes;        /* its write-fault thread, or NULL */
    NuksmStore stores[NUKSM_MAX_NODES];
    GArray *unmerged;           /* NuksmSlotRef, to send */
    bool restored;              /* RESTORE sent for @restored_epoch */
    uint32_t restored_epoch;
    NuksmMaps maps;
};

/* nuksm-commit.c: main loop (BQL) */
NuksmCommit *nuksm_commit_new(Nuksm *s, NuksmPages *pages);
void nuksm_commit_free(NuksmCommit *c);
void nuksm_commit_queue(NuksmCommit *c, NuksmMsgType type, uint32_t epoch,
                        const void *payload, uint32_t len, int fd);
/* On each connection to the agent, before the scanner runs for it. */
void nuksm_commit_set_uffd_device(NuksmCommit *c, int dev_fd);
/*
 * The agent's policy or our home nodes changed: pages kept apart may
 * merge now, so offer every page again in a pass that starts now.
 */
void nuksm_commit_reoffer(NuksmCommit *c);
/* Fill the userfaultfd and mapping figures of @stats. */
void nuksm_commit_get_stats(NuksmCommit *c, NuksmStats *stats);

/*
 * Map guest page @r->page onto the slot @r names (a MERGE of connection
 * @epoch) if it passes @check, what an incoming migration sent of it
 * (NULL: the page as it is in guest RAM), and the mapping budget
 * allows: MERGED, else why not.  Main loop, while the migration is the
 * only writer of guest RAM (nuksm-landing.c).
 */
NuksmSlotStatus nuksm_commit_land(NuksmCommit *c, uint32_t epoch,
                                  const NuksmSlotRef *r,
                                  const NuksmLandCheck *check);

/* nuksm-commit.c: any thread */
void nuksm_commit_release_uffd(NuksmCommit *c);
bool nuksm_commit_discard(NuksmCommit *c, RAMBlock *rb, void *host,
                          size_t len);

/* nuksm-commit.c: scanner thread, no lock held unless said otherwise */
bool nuksm_commit_has_uffd(NuksmCommit *c);
void nuksm_commit_take_uffd(NuksmCommit *c);
bool nuksm_commit_wants_uffd(NuksmCommit *c);
bool nuksm_commit_has_work(NuksmCommit *c);
NuksmWork *nuksm_commit_next(NuksmCommit *c);
void nuksm_commit_serve(NuksmCommit *c, NuksmWork *w, uint32_t epoch);
void nuksm_commit_start(NuksmCommit *c, uint32_t epoch);
void nuksm_commit_tick(NuksmCommit *c);
int64_t nuksm_commit_tick_due_ns(NuksmCommit *c);
/* ... with page_lock held */
bool nuksm_commit_tracks_writes(NuksmCommit *c);
bool nuksm_commit_track(NuksmCommit *c, void *host, size_t len);
void nuksm_commit_forget(NuksmCommit *c, NuksmBlockState *bs, uint64_t idx,
                         NuksmSlotStatus why);
void nuksm_commit_flush_unmerged(NuksmCommit *c, uint32_t epoch);
bool nuksm_commit_drop_zero(NuksmCommit *c, NuksmBlockState *bs,
                            uint64_t idx, uint8_t *host);
/*
 * Rebuild the huge page of the stretch of page @idx of @bs (in @rb),
 * whose merges no longer pay for its split (nuksm-huge.h): its content,
 * under write protection, moves into a huge page of fresh anonymous
 * memory; its merged pages are unmerged (UNMERGED, REBUILT) and its
 * pages all seen afresh.  False if nothing changed.
 */
bool nuksm_commit_rebuild_huge(NuksmCommit *c, RAMBlock *rb,
                               NuksmBlockState *bs, uint64_t idx);

#endif /* HW_MEM_NUKSM_COMMIT_H */
