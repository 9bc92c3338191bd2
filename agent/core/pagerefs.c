/*
 * nuksmd page references: an array per chunk of pages.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <glib.h>

#include "pagerefs.h"

_Static_assert(sizeof(PageRef) == 5, "a page's reference is 5 bytes");
_Static_assert(sizeof(PageChunk) == 336, "a chunk is 336 bytes");

/* Smallest directory; it grows at 1/2 load and shrinks below 1/8. */
#define DIR_MIN_SIZE 16u

void pagerefs_init(PageRefs *r, uint64_t seed)
{
    *r = (PageRefs) { .seed = seed };
    keymap_init(&r->moves, seed);
}

void pagerefs_destroy(PageRefs *r)
{
    for (size_t i = 0; i < r->dir_size; i++) {
        g_free(r->dir[i].chunk);
    }
    g_free(r->dir);
    keymap_destroy(&r->moves);
    pagerefs_init(r, r->seed);
}

void pagerefs_take(PageRefs *to, PageRefs *from)
{
    g_assert(!pagerefs_entries(to));
    pagerefs_destroy(to);
    *to = *from;
    pagerefs_init(from, from->seed);
}

static size_t home_of(const PageRefs *r, uint64_t number)
{
    return key_hash(r->seed, number, 0) & (r->dir_size - 1);
}

/* Where chunk @number is in the directory, or the empty entry ending
 * its probe: the directory is never full. */
static size_t dir_index(const PageRefs *r, uint64_t number)
{
    size_t i = home_of(r, number);

    while (r->dir[i].chunk && r->dir[i].number != number) {
        i = (i + 1) & (r->dir_size - 1);
    }
    return i;
}

static void resize(PageRefs *r, size_t size)
{
    PageDirEntry *old = r->dir;
    size_t old_size = r->dir_size;

    r->dir = g_new0(PageDirEntry, size);
    r->dir_size = size;
    for (size_t i = 0; i < old_size; i++) {
        if (old[i].chunk) {
            r->dir[dir_index(r, old[i].number)] = old[i];
        }
    }
    g_free(old);
}

/* The directory's size for @chunks after a shrink: at most 1/2 load. */
static size_t dir_size_for(size_t chunks)
{
    size_t size = DIR_MIN_SIZE;

    if (!chunks) {
        return 0;
    }
    while (size < 2 * chunks) {
        size *= 2;
    }
    return size;
}

static PageChunk *chunk_of(PageRefs *r, uint64_t number)
{
    PageChunk *c;

    if (r->last && r->last->number == number) {
        return r->last;
    }
    if (!r->chunks) {
        return NULL;
    }
    c = r->dir[dir_index(r, number)].chunk;
    if (c) {
        r->last = c;
    }
    return c;
}

static PageChunk *new_chunk(PageRefs *r, uint64_t number)
{
    PageChunk *c = g_new0(PageChunk, 1);

    if (2 * (r->chunks + 1) > r->dir_size) {
        resize(r, MAX(DIR_MIN_SIZE, 2 * r->dir_size));
    }
    c->number = number;
    r->dir[dir_index(r, number)] = (PageDirEntry) { number, c };
    r->chunks++;
    return c;
}

/* Free @c, which holds no reference, and take it out of the directory. */
static void drop_chunk(PageRefs *r, PageChunk *c)
{
    size_t hole = dir_index(r, c->number);

    /* Backward-shift deletion: no entry is left past a hole it needs. */
    for (size_t i = (hole + 1) & (r->dir_size - 1); r->dir[i].chunk;
         i = (i + 1) & (r->dir_size - 1)) {
        size_t home = home_of(r, r->dir[i].number);

        if (((i - home) & (r->dir_size - 1)) >=
            ((i - hole) & (r->dir_size - 1))) {
            r->dir[hole] = r->dir[i];
            hole = i;
        }
    }
    r->dir[hole] = (PageDirEntry) { 0 };
    r->chunks--;
    if (r->last == c) {
        r->last = NULL;
    }
    g_free(c);
    if (r->dir_size > DIR_MIN_SIZE && 8 * r->chunks < r->dir_size) {
        resize(r, r->dir_size / 2);
    }
}

PageRef *pagerefs_lookup(PageRefs *r, uint64_t page)
{
    PageChunk *c = chunk_of(r, page / PAGE_REFS_CHUNK);
    PageRef *ref;

    if (!c) {
        return NULL;
    }
    ref = &c->refs[page % PAGE_REFS_CHUNK];
    return ref->state ? ref : NULL;
}

PageRef *pagerefs_add(PageRefs *r, uint64_t page, uint32_t slot,
                      uint8_t state)
{
    uint64_t number = page / PAGE_REFS_CHUNK;
    PageChunk *c = chunk_of(r, number);
    PageRef *ref;

    g_assert(state);
    if (!c) {
        c = new_chunk(r, number);
        r->last = c;
    }
    ref = &c->refs[page % PAGE_REFS_CHUNK];
    g_assert(!ref->state);
    *ref = (PageRef) { .slot = slot, .state = state };
    c->count++;
    r->count++;
    return ref;
}

void pagerefs_remove(PageRefs *r, uint64_t page)
{
    PageChunk *c = chunk_of(r, page / PAGE_REFS_CHUNK);
    PageRef *ref;

    g_assert(c);
    ref = &c->refs[page % PAGE_REFS_CHUNK];
    g_assert(ref->state);
    *ref = (PageRef) { 0 };
    r->count--;
    if (!--c->count) {
        drop_chunk(r, c);
    }
}

PageRef *pagerefs_next(const PageRefs *r, size_t *pos, uint64_t *page)
{
    while (*pos < r->dir_size * PAGE_REFS_CHUNK) {
        const PageChunk *c = r->dir[*pos / PAGE_REFS_CHUNK].chunk;
        size_t i = *pos % PAGE_REFS_CHUNK;

        if (!c) {
            *pos += PAGE_REFS_CHUNK - i;
            continue;
        }
        (*pos)++;
        if (c->refs[i].state) {
            *page = c->number * PAGE_REFS_CHUNK + i;
            return (PageRef *)&c->refs[i];
        }
    }
    return NULL;
}

void pagerefs_retain(PageRefs *r, PageRefKeepFn *keep, void *opaque)
{
    bool emptied = false;

    for (size_t d = 0; d < r->dir_size; d++) {
        PageChunk *c = r->dir[d].chunk;

        for (size_t i = 0; c && i < PAGE_REFS_CHUNK; i++) {
            if (c->refs[i].state &&
                !keep(&c->refs[i], c->number * PAGE_REFS_CHUNK + i,
                      opaque)) {
                c->refs[i] = (PageRef) { 0 };
                c->count--;
                r->count--;
                emptied |= !c->count;
            }
        }
    }
    if (!emptied) {
        return;
    }
    /* Every reference was seen: now the empty chunks go. */
    for (size_t d = 0; d < r->dir_size; d++) {
        if (r->dir[d].chunk && !r->dir[d].chunk->count) {
            g_clear_pointer(&r->dir[d].chunk, g_free);
            r->chunks--;
        }
    }
    r->last = NULL;
    resize(r, dir_size_for(r->chunks));
}

size_t pagerefs_bytes(const PageRefs *r)
{
    return r->chunks * sizeof(PageChunk) + r->dir_size * sizeof(PageDirEntry) +
           keymap_bytes(&r->moves);
}
