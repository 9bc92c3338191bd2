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
 * elsewhere starts a new line there.  Scattered duplicates then fill the
 * slots of a line with holes between them, which the next line's pages
 * fill in turn (next-fit starts from the first hole).
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
} SlotLines;

void lines_init(SlotLines *l);
void lines_destroy(SlotLines *l);

/*
 * The slot of @node in line with guest page @page: false if none, or if
 * the line puts it outside [0, @capacity).
 */
bool lines_slot(const SlotLines *l, uint64_t page, uint32_t node,
                uint32_t capacity, uint32_t *slot);

/* Guest page @page maps @slot of @node: its stretch's line goes there. */
void lines_set(SlotLines *l, uint64_t page, uint32_t node, uint32_t slot);

/* Lines held (for the tests and the agent's memory figures). */
unsigned lines_count(const SlotLines *l);

#endif /* NUKSMD_LINES_H */
