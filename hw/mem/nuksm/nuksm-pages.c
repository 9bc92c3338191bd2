/*
 * nuksm: the per-page table (see nuksm-pages.h for its lock rules and the
 * legal flag combinations).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "exec/ramblock.h"
#include "nuksm-pages.h"
#include "nuksm-regions.h"

static void nuksm_pages_refs_free(NuksmBlockState *bs)
{
    for (uint64_t r = 0; bs->refs && r < DIV_ROUND_UP(bs->nr_pages,
                                                      NUKSM_REF_REGION); r++) {
        g_free(bs->refs[r]);
    }
    g_free(bs->refs);
    bs->refs = NULL;
}

static void nuksm_pages_block_free(gpointer p)
{
    NuksmBlockState *bs = p;

    nuksm_pages_refs_free(bs);
    g_free(bs->digest);
    g_free(bs->flags);
    g_free(bs->idle);
    g_free(bs->regions);
    g_free(bs->read_idle);
    g_free(bs);
}

void nuksm_pages_init(NuksmPages *p)
{
    qemu_mutex_init(&p->lock);
    p->blocks = g_hash_table_new_full(g_str_hash, g_str_equal, g_free,
                                      nuksm_pages_block_free);
}

void nuksm_pages_destroy(NuksmPages *p)
{
    g_hash_table_destroy(p->blocks);
    qemu_mutex_destroy(&p->lock);
}

NuksmBlockState *nuksm_pages_block(NuksmPages *p, RAMBlock *rb,
                                   uint8_t gnode)
{
    NuksmBlockState *bs = g_hash_table_lookup(p->blocks, rb->idstr);
    uint64_t nr_pages = rb->used_length / NUKSM_PAGE_SIZE;
    uint64_t first;

    if (!bs) {
        bs = g_new0(NuksmBlockState, 1);
        g_hash_table_insert(p->blocks, g_strdup(rb->idstr), bs);
    }
    if (bs->nr_pages != nr_pages || bs->first_page !=
        rb->offset / NUKSM_PAGE_SIZE) {
        /*
         * New or resized block: forget what we knew of it.  Only device
         * RAM, which nuksm never touches, is ever resized.
         */
        nuksm_pages_refs_free(bs);
        g_free(bs->digest);
        g_free(bs->flags);
        g_free(bs->idle);
        g_free(bs->regions);
        g_free(bs->read_idle);
        bs->digest = g_new0(uint32_t, nr_pages);
        bs->flags = g_new0(uint8_t, nr_pages);
        bs->idle = g_malloc(nr_pages);
        memset(bs->idle, NUKSM_HOT_IDLE_MAX, nr_pages);
        /* New memory starts at the bottom: it has to prove worth more. */
        bs->regions = nuksm_regions_new(nr_pages, p->distilling ? 0 :
                                        NUKSM_REGION_TOP);
        memset(bs->merged_per_node, 0, sizeof(bs->merged_per_node));
        bs->nr_pages = nr_pages;
        bs->first_page = rb->offset / NUKSM_PAGE_SIZE;
        bs->gnode = gnode;
        bs->read_idle = g_malloc(nuksm_pages_read_regions(bs, &first));
        memset(bs->read_idle, NUKSM_IDLE_NEVER,
               nuksm_pages_read_regions(bs, &first));
    }
    return bs;
}

NuksmBlockState *nuksm_pages_find(NuksmPages *p, RAMBlock *rb)
{
    return g_hash_table_lookup(p->blocks, rb->idstr);
}

NuksmBlockState *nuksm_pages_find_page(NuksmPages *p, uint64_t page,
                                       uint64_t *idx)
{
    GHashTableIter it;
    NuksmBlockState *bs;

    g_hash_table_iter_init(&it, p->blocks);
    while (g_hash_table_iter_next(&it, NULL, (gpointer *)&bs)) {
        if (page >= bs->first_page && page - bs->first_page < bs->nr_pages) {
            *idx = page - bs->first_page;
            return bs;
        }
    }
    return NULL;
}

void nuksm_pages_foreach(NuksmPages *p, NuksmPagesBlockFn *fn, void *opaque)
{
    GHashTableIter it;
    NuksmBlockState *bs;

    g_hash_table_iter_init(&it, p->blocks);
    while (g_hash_table_iter_next(&it, NULL, (gpointer *)&bs)) {
        fn(bs, opaque);
    }
}

static void nuksm_pages_clear_block(NuksmBlockState *bs, void *opaque)
{
    uint8_t flags = *(uint8_t *)opaque;

    for (uint64_t i = 0; i < bs->nr_pages; i++) {
        nuksm_page_update(bs, i, flags, 0);
    }
}

void nuksm_pages_clear_all(NuksmPages *p, uint8_t flags)
{
    nuksm_pages_foreach(p, nuksm_pages_clear_block, &flags);
}

NuksmSlotRef nuksm_page_ref(const NuksmBlockState *bs, uint64_t idx)
{
    uint64_t v = bs->refs[idx / NUKSM_REF_REGION][idx % NUKSM_REF_REGION];

    return (NuksmSlotRef) {
        .page = bs->first_page + idx,
        .node = v & 0xff,
        .slot = (v >> 8) & (NUKSM_REF_MAX_SLOT - 1),
        .gen = v >> 32,
        .status = NUKSM_STATUS_NONE,
    };
}

bool nuksm_page_maps(const NuksmBlockState *bs, uint64_t idx,
                     const NuksmSlotRef *r)
{
    NuksmSlotRef cur;

    if (!(bs->flags[idx] & NUKSM_PAGE_MERGED)) {
        return false;
    }
    cur = nuksm_page_ref(bs, idx);
    return cur.node == r->node && cur.slot == r->slot && cur.gen == r->gen;
}

bool nuksm_page_store_pos(const NuksmBlockState *bs, uint64_t idx,
                          uint8_t *node, uint64_t *slot)
{
    NuksmSlotRef r;

    if (!(bs->flags[idx] & NUKSM_PAGE_REMAPPED) || !bs->refs ||
        !bs->refs[idx / NUKSM_REF_REGION]) {
        return false;
    }
    r = nuksm_page_ref(bs, idx);
    *node = r.node;
    *slot = r.slot;
    return true;
}

bool nuksm_pages_any_remapped(const NuksmBlockState *bs, uint64_t first,
                              uint64_t count)
{
    for (uint64_t i = 0; i < count && first + i < bs->nr_pages; i++) {
        if (bs->flags[first + i] & NUKSM_PAGE_REMAPPED) {
            return true;
        }
    }
    return false;
}

/* Page @idx is now mapped from the store at @r: REMAPPED, counted. */
static void nuksm_pages_remapped(NuksmPages *p, NuksmBlockState *bs,
                                 uint64_t idx, const NuksmSlotRef *r)
{
    uint64_t **region;

    if (!bs->refs) {
        bs->refs = g_new0(uint64_t *,
                          DIV_ROUND_UP(bs->nr_pages, NUKSM_REF_REGION));
    }
    region = &bs->refs[idx / NUKSM_REF_REGION];
    if (!*region) {
        *region = g_new(uint64_t, NUKSM_REF_REGION);
    }
    (*region)[idx % NUKSM_REF_REGION] =
        (uint64_t)r->gen << 32 | (uint64_t)r->slot << 8 | r->node;
    if (!(bs->flags[idx] & NUKSM_PAGE_REMAPPED)) {
        p->remapped_pages++;
    }
    nuksm_page_update(bs, idx, 0, NUKSM_PAGE_REMAPPED);
}

void nuksm_pages_windowed(NuksmPages *p, NuksmBlockState *bs, uint64_t idx,
                          uint8_t node, uint64_t slot)
{
    NuksmSlotRef r = { .node = node, .slot = slot };

    nuksm_pages_remapped(p, bs, idx, &r);
}

void nuksm_pages_merged(NuksmPages *p, NuksmBlockState *bs, uint64_t idx,
                        const NuksmSlotRef *r)
{
    if (bs->flags[idx] & NUKSM_PAGE_HINTED) {
        p->hinted_merged++;
    }
    nuksm_pages_remapped(p, bs, idx, r);
    nuksm_page_update(bs, idx, NUKSM_PAGE_HINTED, NUKSM_PAGE_MERGED);
    p->merged_pages++;
    p->merged_per_node[r->node]++;
    bs->merged_per_node[r->node]++;
    nuksm_region_merged(bs, idx);
}

NuksmSlotRef nuksm_pages_unmerged(NuksmPages *p, NuksmBlockState *bs,
                                  uint64_t idx, uint8_t clear)
{
    NuksmSlotRef r = nuksm_page_ref(bs, idx);

    assert(bs->flags[idx] & NUKSM_PAGE_MERGED);
    nuksm_page_update(bs, idx, NUKSM_PAGE_MERGED | clear, 0);
    p->merged_pages--;
    p->merged_per_node[r.node]--;
    bs->merged_per_node[r.node]--;
    return r;
}

void nuksm_pages_zeroed(NuksmPages *p, NuksmBlockState *bs, uint64_t idx)
{
    nuksm_page_update(bs, idx, 0, NUKSM_PAGE_ZERO);
    p->zero_pages++;
    nuksm_region_merged(bs, idx);
}

void nuksm_pages_unzeroed(NuksmPages *p, NuksmBlockState *bs, uint64_t idx)
{
    nuksm_page_update(bs, idx, NUKSM_PAGE_ZERO, 0);
    p->zero_pages--;
}

void nuksm_pages_discarded(NuksmPages *p, NuksmBlockState *bs, uint64_t idx)
{
    uint8_t flags = bs->flags[idx];

    assert(!(flags & NUKSM_PAGE_MERGED));
    if (flags & NUKSM_PAGE_ZERO) {
        p->zero_pages--;
    }
    if (flags & NUKSM_PAGE_REMAPPED) {
        p->remapped_pages--;
    }
    bs->flags[idx] = 0;
    bs->digest[idx] = 0;
}

bool nuksm_pages_has_remapped(NuksmPages *p)
{
    bool remapped;

    qemu_mutex_lock(&p->lock);
    remapped = p->remapped_pages > 0;
    qemu_mutex_unlock(&p->lock);
    return remapped;
}

static void nuksm_pages_regions_to_top(NuksmBlockState *bs, void *opaque)
{
    nuksm_regions_to_top(bs);
}

void nuksm_pages_set_distilling(NuksmPages *p, bool on)
{
    qemu_mutex_lock(&p->lock);
    p->distilling = on;
    if (!on) {
        nuksm_pages_foreach(p, nuksm_pages_regions_to_top, NULL);
    }
    qemu_mutex_unlock(&p->lock);
}

static void nuksm_pages_count_block(NuksmBlockState *bs, void *opaque)
{
    nuksm_regions_count(bs, opaque);
}

void nuksm_pages_count_regions(NuksmPages *p, uint64_t *counts)
{
    memset(counts, 0, NUKSM_REGION_LEVELS * sizeof(counts[0]));
    qemu_mutex_lock(&p->lock);
    nuksm_pages_foreach(p, nuksm_pages_count_block, counts);
    qemu_mutex_unlock(&p->lock);
}

void nuksm_pages_map_regions(NuksmPages *p, NuksmPagesRegionsFn *fn,
                             void *opaque)
{
    GHashTableIter it;
    const char *name;
    NuksmBlockState *bs;

    qemu_mutex_lock(&p->lock);
    g_hash_table_iter_init(&it, p->blocks);
    while (g_hash_table_iter_next(&it, (gpointer *)&name, (gpointer *)&bs)) {
        g_autofree char *levels = nuksm_regions_levels(bs);

        fn(name, bs->nr_pages, levels, opaque);
    }
    qemu_mutex_unlock(&p->lock);
}

void nuksm_pages_get_stats(NuksmPages *p, NuksmStats *stats)
{
    qemu_mutex_lock(&p->lock);
    stats->merged_pages = p->merged_pages;
    stats->zero_pages = p->zero_pages;
    stats->hints_merged = p->hinted_merged;
    memcpy(stats->merged_per_node, p->merged_per_node,
           sizeof(stats->merged_per_node));
    qemu_mutex_unlock(&p->lock);
}
