/*
 * nuksmd page references: which slot each page of one VM uses, and in
 * what state (the ledger's PageState), as an array per chunk of
 * PAGE_REFS_CHUNK consecutive pages rather than as a hash table entry per
 * page.
 *
 * A chunk is allocated when its first page gets a reference and freed
 * when its last one loses it; a directory of chunks, open addressing by
 * the keyed hash of the chunk number, finds it.  Merged pages come in
 * runs (a guest's duplicates are its kernel's, its libraries', its page
 * cache's): a chunk in use costs 5.25 bytes per page of it, where a hash
 * table entry cost 16 bytes per merged page at a load of 3/8 to 3/4,
 * and looking a page up hashes a chunk number that the page's
 * neighbours share (the last chunk found is tried first).
 *
 * A page that moves to another copy (relocate.h) has a second
 * reference meanwhile, kept in a small hash table: moves are few and
 * short-lived.
 *
 * A reference's address stays valid until its page's reference is
 * removed (only its own chunk may be freed then), whatever other pages
 * are added meanwhile.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_PAGEREFS_H
#define NUKSMD_PAGEREFS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "keymap.h"

/* Pages per chunk: 256 KiB of guest memory, 336 bytes of chunk. */
#define PAGE_REFS_CHUNK 64u

/*
 * A page's reference; state 0 means it has none.  Packed: 5 bytes, not
 * 8, for each page of a chunk (accesses through a PageRef * are fine;
 * the address of a member is not to be taken).
 */
typedef struct __attribute__((packed)) PageRef {
    uint32_t slot;           /* the SlotId it maps or is about to */
    uint8_t state;           /* the ledger's PageState, 0: none */
} PageRef;

typedef struct PageChunk {
    uint64_t number;         /* its first page / PAGE_REFS_CHUNK */
    uint32_t count;          /* references in use */
    PageRef refs[PAGE_REFS_CHUNK];
} PageChunk;

/* A directory entry: the chunk's number beside it, so that a probe
 * reads no chunk but the one it finds. */
typedef struct PageDirEntry {
    uint64_t number;
    PageChunk *chunk;        /* NULL: empty */
} PageDirEntry;

typedef struct PageRefs {
    PageDirEntry *dir;       /* dir_size entries */
    size_t dir_size;         /* 0 or a power of two */
    size_t chunks;           /* chunks in dir */
    size_t count;            /* pages with a reference */
    uint64_t seed;           /* keys the directory's hash */
    PageChunk *last;         /* the last chunk looked up, or NULL */
    /* page -> (value: SlotId, tag: PageState) of the slot it moves to */
    KeyMap moves;
} PageRefs;

void pagerefs_init(PageRefs *r, uint64_t seed);

/* Free everything; @r is empty and reusable afterwards. */
void pagerefs_destroy(PageRefs *r);

/* Move everything of @from to @to, which must be empty; @from is empty. */
void pagerefs_take(PageRefs *to, PageRefs *from);

/* @page's reference, or NULL if it has none. */
PageRef *pagerefs_lookup(PageRefs *r, uint64_t page);

/* Give @page, which has none, a reference to @slot in @state (not 0). */
PageRef *pagerefs_add(PageRefs *r, uint64_t page, uint32_t slot,
                      uint8_t state);

/* Take @page's reference away; it must have one. */
void pagerefs_remove(PageRefs *r, uint64_t page);

/*
 * The first reference at or after *@pos (0 to start), its page in
 * *@page, moving *@pos past it; NULL at the end.  The way to walk them:
 *
 *     for (size_t pos = 0; (ref = pagerefs_next(r, &pos, &page));)
 *
 * A reference may be changed in place (its state not to 0); none may be
 * added or removed meanwhile (pagerefs_retain() removes).  The order is
 * the directory's, not the pages'.
 */
PageRef *pagerefs_next(const PageRefs *r, size_t *pos, uint64_t *page);

/*
 * Keep the references for which @keep returns true, remove the others.
 * @keep sees every reference once, and may change it; @r is not changed
 * otherwise until every reference was seen.
 */
typedef bool PageRefKeepFn(PageRef *ref, uint64_t page, void *opaque);
void pagerefs_retain(PageRefs *r, PageRefKeepFn *keep, void *opaque);

/* Pages with a reference, and moves under way. */
static inline size_t pagerefs_entries(const PageRefs *r)
{
    return r->count + r->moves.count;
}

/* Bytes of the chunks, the directory and the moves' table. */
size_t pagerefs_bytes(const PageRefs *r);

#endif /* NUKSMD_PAGEREFS_H */
