/*
 * nuksmd slot lines: where a VM's new slots go, so that its guest pages
 * and their slots stay in line.
 *
 * QEMU maps a window of guest pages onto consecutive slots with one
 * mapping, copying the pages between its merged ones into it
 * (nuksm_remap_merge_window()).  That only works if, within the window,
 * slot - page is the same for every merged page.  So each VM keeps, per
 * 2 MiB of its guest memory and store node, a line: the slot that page 0
 * of that stretch would have.  A new slot for one of its pages goes
 * where the line says if that slot is free, and a page that had to go
 * elsewhere starts a new line there.
 *
 * Duplicates that lie in another order in each VM (shuffled page cache)
 * cannot be in line with both sharers; they can be with one, which then
 * maps whole windows while the others pay a mapping per page.  For that
 * a new line's stretch of slots is reserved (slots_reserve_range()): the
 * VM owns the line, and the slots stay free for its later pages however
 * the other VMs' pairs form (merge.c says which VM gets to own it).  An
 * owned line does not move.  Scattered duplicates so leave holes in
 * their line's range, which other slots take only once nothing else is
 * free.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_LINES_H
#define NUKSMD_LINES_H

#include <stdbool.h>
#include <stdint.h>

#include <glib.h>

/* Guest pages per line: QEMU's longest window. */
#define LINE_PAGES 512u

typedef struct SlotLines {
    GHashTable *lines;       /* (stretch, node) -> slot of its page 0 */
    GHashTable *owned;       /* (stretch, node) of the lines it owns */
} SlotLines;

void lines_init(SlotLines *l);
void lines_destroy(SlotLines *l);

/*
 * The slot of @node in line with guest page @page: false if none, or if
 * the line puts it outside [0, @capacity).
 */
bool lines_slot(const SlotLines *l, uint64_t page, uint32_t node,
                uint32_t capacity, uint32_t *slot);

/*
 * Guest page @page maps @slot of @node: its stretch's line goes there,
 * unless the VM owns that line.
 */
void lines_set(SlotLines *l, uint64_t page, uint32_t node, uint32_t slot);

/* True if the VM owns the line of @page's stretch on @node. */
bool lines_owns(const SlotLines *l, uint64_t page, uint32_t node);

/*
 * The VM owns the line of @page's stretch on @node, whose page 0 has slot
 * @start (a multiple of LINE_PAGES, the start of a reserved range).
 */
void lines_own(SlotLines *l, uint64_t page, uint32_t node, uint32_t start);

/*
 * Give up every line the VM owns: @release(node, start, @opaque) ends
 * the reservation of each.  Its lines stay, as lines it follows.
 */
void lines_disown(SlotLines *l,
                  void (*release)(uint32_t node, uint32_t start,
                                  gpointer opaque),
                  gpointer opaque);

/* Lines held (for the tests and the agent's memory figures). */
unsigned lines_count(const SlotLines *l);

#endif /* NUKSMD_LINES_H */
