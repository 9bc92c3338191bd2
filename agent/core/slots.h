/*
 * nuksmd slot allocator: the pages of one node's store file, their
 * generation numbers and reference counts.
 *
 * Slots are handed out next-fit, so that consecutive guest pages get
 * consecutive slots: QEMU then maps a whole run with a single mmap(), its
 * main speed lever; or at a slot asked for, to stay in line with guest
 * pages further away (lines.h).  An aligned range of free slots can be
 * reserved for one line: next-fit passes over it as long as there are
 * other free slots, so that the line's later pages find theirs free.  A
 * slot's metadata lives in a dense array that grows with the highest
 * slot ever used.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_SLOTS_H
#define NUKSMD_SLOTS_H

#include <stdbool.h>
#include <stdint.h>

#include "nuksm-proto.h"

/*
 * A SlotId packs (node, slot) into 32 bits, which NUKSM_MAX_NODES nodes
 * of NUKSM_SLOTS_PER_NODE slots fit in.
 */
#define SLOT_BITS NUKSM_SLOT_BITS
typedef uint32_t SlotId;

_Static_assert(NUKSM_MAX_NODES <= (1ull << (32 - SLOT_BITS)),
               "SlotId cannot hold every node");

static inline SlotId slot_id(uint32_t node, uint32_t slot)
{
    return node << SLOT_BITS | slot;
}

static inline uint32_t slot_id_node(SlotId id)
{
    return id >> SLOT_BITS;
}

static inline uint32_t slot_id_slot(SlotId id)
{
    return id & ((1u << SLOT_BITS) - 1);
}

typedef enum SlotState {
    SLOT_FREE,               /* a hole in the store file */
    SLOT_ORPHAN,             /* content found at start, not restored yet */
    SLOT_UPLOADING,          /* allocated, content not written yet */
    SLOT_READY,              /* content written, immutable */
    SLOT_FREEING,            /* unused, to be punched and released */
} SlotState;

/*
 * A slot keeps no digest: its content's key is in the content table's
 * entry for it (contents.h), and ledger_slot_digest() finds the digest
 * again from the upload or the store.
 */
typedef struct Slot {
    uint32_t gen;            /* bumped on every free */
    uint32_t refs;           /* guest pages mapping the slot */
    uint32_t pending;        /* guest pages about to map or upload it */
    uint16_t domain;         /* merge domain id of its sharers */
    uint8_t state;           /* SlotState */
    bool restored;           /* taken back from the store after a start: */
                             /* processes that did not restore it may map */
                             /* it too, its references do not tell all */
} Slot;

typedef struct SlotTable {
    Slot *slots;             /* [0, top) valid */
    uint64_t *used;          /* bitmap: slot is not SLOT_FREE */
    uint64_t *reserved;      /* bitmap: slot is in a reserved range */
    uint32_t alloc;          /* slots[] and used[] have room for this many */
    uint32_t top;            /* slots >= top were never used */
    uint32_t capacity;       /* slots in the store file */
    uint32_t cursor;         /* next-fit position */
    uint32_t range_cursor;   /* where the next reserved range is sought */
    uint32_t nr_used;        /* slots not SLOT_FREE */
    uint32_t initial_gen;    /* gen of a slot when first used */
    uint64_t shared;         /* slots with refs >= 1 */
    uint64_t sharing;        /* sum of refs - 1 over those */
} SlotTable;

void slots_init(SlotTable *t, uint32_t capacity, uint32_t initial_gen);
void slots_destroy(SlotTable *t);

/* The slot, which must be below t->top. */
static inline Slot *slots_get(SlotTable *t, uint32_t slot)
{
    return &t->slots[slot];
}

/* True if @slot was ever used and is not free. */
bool slots_in_use(const SlotTable *t, uint32_t slot);

/*
 * The first span [*start, *end) of slots from @from (a multiple of 64,
 * or the end of the last span) to @limit (at most top) that holds free
 * slots: it starts and ends at
 * multiples of 64 (or @limit), and runs of used slots shorter than @gap
 * within it do not end it.  False if no slot there is free.  Walks the
 * bitmap of used slots: a store in use all over costs no look at it.
 */
bool slots_next_free_span(const SlotTable *t, uint32_t from, uint32_t limit,
                          uint32_t gap, uint32_t *start, uint32_t *end);

/*
 * Allocate a free slot as SLOT_UPLOADING with no refs or pending users,
 * next-fit outside the reserved ranges, or in one when nothing else is
 * free; false when the store is full.
 */
bool slots_alloc(SlotTable *t, uint32_t *slot);

/*
 * Reserve @len free slots (a multiple of 64) starting at a multiple of
 * @len, none of them in use or reserved: their start, or false if the
 * store has no such range.  The reservation only steers slots_alloc();
 * slots_alloc_at() takes reserved slots as any other.
 */
bool slots_reserve_range(SlotTable *t, uint32_t len, uint32_t *start);

/* End the reservation of [@start, @start + @len) from slots_reserve_range. */
void slots_unreserve_range(SlotTable *t, uint32_t start, uint32_t len);

/* True if @slot lies in a reserved range. */
bool slots_reserved(const SlotTable *t, uint32_t slot);

/*
 * Allocate @slot itself as slots_alloc() would, if it is free and the
 * store has room; false otherwise (lines.h says which slot to ask for).
 */
bool slots_alloc_at(SlotTable *t, uint32_t slot);

/* Claim a free @slot whose content survived a restart, as SLOT_ORPHAN. */
void slots_claim_orphan(SlotTable *t, uint32_t slot);

/*
 * Return @slot to the free pool and bump its generation.  The caller
 * punched its page out of the store first.
 */
void slots_release(SlotTable *t, uint32_t slot);

/*
 * References and pending users.  The put functions return true when the
 * slot has neither left: it is unused and must be freed.
 */
void slots_get_ref(SlotTable *t, uint32_t slot);
bool slots_put_ref(SlotTable *t, uint32_t slot);
void slots_get_pending(SlotTable *t, uint32_t slot);
bool slots_put_pending(SlotTable *t, uint32_t slot);

#endif /* NUKSMD_SLOTS_H */
