/*
 * nuksmd store: one file per NUMA node in the state directory, holding
 * the merged pages.  Slot s of node n is the page at offset
 * s * NUKSM_PAGE_SIZE of <state-dir>/store-node<n>.
 *
 * Files, not anonymous memfds, so that a restarted agent finds the pages
 * that VMs still map and can punch out the ones nobody maps any more.
 * Beside each store file, <state-dir>/slots-node<n> keeps a SlotRecord
 * per slot VMs were told to map, so that a restarted agent knows each
 * page's generation and domain instead of believing what clients claim.
 * They must live on tmpfs: merged pages are memory, never written back.
 * Each file has a fixed sparse size, so that QEMU maps it once.  The
 * agent is the only writer; VMs get read-only descriptors.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_STORE_H
#define NUKSMD_STORE_H

#include <stdbool.h>
#include <stdint.h>

#include "nuksm-proto.h"
#include "slots.h"

/* Bytes of the state directory's secret, which keys domain names. */
#define STORE_SECRET_LEN 32

/* Pages and bytes of a store file: 2^24 pages, 64 GiB, all sparse. */
#define STORE_SLOTS NUKSM_SLOTS_PER_NODE
#define STORE_SIZE  ((uint64_t)STORE_SLOTS * NUKSM_PAGE_SIZE)

/*
 * What a restarted agent must know of a slot's content, at offset
 * slot * sizeof(SlotRecord) of the node's record file (mode 0600, never
 * given to VMs).  All zero: no record.
 */
typedef struct SlotRecord {
    uint32_t gen;            /* the generation VMs were told */
    uint32_t domain_key;     /* domains_key() of its domain, never 0 */
} SlotRecord;

typedef struct StoreFile {
    int fd;                  /* read-write, the agent's own */
    int records_fd;          /* SlotRecords, read-write */
    int ro_fd;               /* read-only, what VMs receive */
    void *map;               /* STORE_SIZE bytes, shared: carries the */
                             /* node binding, never accessed */
} StoreFile;

typedef struct Store {
    char *dir;
    int lock_fd;             /* flock()ed: one agent per state directory */
    uint8_t secret[STORE_SECRET_LEN];  /* <state-dir>/secret */
    uint32_t nr_nodes;
    StoreFile files[NUKSM_MAX_NODES];
} Store;

/*
 * Open or create the state directory @dir (0700, on tmpfs) and a store
 * file per node (0600), keeping the content of existing ones.  With
 * @bind, each file's pages are bound to the host node of the same
 * number.  Logs and returns false on failure.
 */
bool store_open(Store *st, const char *dir, uint32_t nr_nodes, bool bind);

void store_close(Store *st);

/*
 * Write the page of a slot: 0 or an errno.  Writes go through the file,
 * not the mapping: a full tmpfs (ENOSPC) or memory cgroup (ENOMEM) then
 * fails the write instead of killing the agent with SIGBUS.
 */
int store_write(Store *st, uint32_t node, uint32_t slot,
                const void *content);

/* Read the page of a slot; logs and returns false on failure. */
bool store_read(const Store *st, uint32_t node, uint32_t slot,
                void *content);

/*
 * The record of a slot that holds content.  store_set_record() goes
 * through the file like store_write(), and fails the same way.
 */
int store_set_record(Store *st, uint32_t node, uint32_t slot,
                     const SlotRecord *rec);
bool store_get_record(const Store *st, uint32_t node, uint32_t slot,
                      SlotRecord *rec);

/*
 * Give the pages of @count slots from @slot back to the system, and
 * clear their records.
 */
void store_punch(Store *st, uint32_t node, uint32_t slot, uint32_t count);

/*
 * The first run of slots holding content at or after @from, as
 * [*start, *end); false if there is none.
 */
bool store_next_data(const Store *st, uint32_t node, uint32_t from,
                     uint32_t *start, uint32_t *end);

#endif /* NUKSMD_STORE_H */
