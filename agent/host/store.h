/*
 * nuksmd store: the merged pages, in files of the state directory, one
 * per merge domain and NUMA node.  Slot s of node n is the page at
 * offset s * NUKSM_PAGE_SIZE of <state-dir>/store-<key>-node<n>, where
 * <key> names the slot's domain (merge/domains.h): slot numbers are
 * shared by a node's domains, and each slot's page is in its own
 * domain's file only, so that a VM, given its domain's files read-only,
 * can read no other domain's pages.
 *
 * Files, not anonymous memfds, so that a restarted agent finds the pages
 * that VMs still map and can punch out the ones nobody maps any more.
 * Beside them, <state-dir>/slots-node<n> keeps a SlotRecord per slot VMs
 * were told to map, so that a restarted agent knows each page's
 * generation and domain instead of believing what clients claim.
 * They must live on tmpfs: merged pages are memory, never written back.
 * Each store file has a fixed sparse size, so that QEMU maps it once.
 * The agent is the only writer; VMs get read-only descriptors.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef NUKSMD_STORE_H
#define NUKSMD_STORE_H

#include <stdbool.h>
#include <stdint.h>

#include <glib.h>

#include "nuksm-proto.h"
#include "slots.h"

/* Bytes of the state directory's secret, which keys domain names. */
#define STORE_SECRET_LEN 32

/* Hex digits of a domain's key in its files' names (128 bits). */
#define STORE_KEY_LEN 32

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
    uint32_t domain_key;     /* domains_record_key() of its domain */
} SlotRecord;

/* The store files of one merge domain. */
typedef struct StoreDomain {
    char key[STORE_KEY_LEN + 1];
    int fds[NUKSM_MAX_NODES];        /* read-write, the agent's own */
} StoreDomain;

typedef struct Store {
    char *dir;
    int lock_fd;             /* flock()ed: one agent per state directory */
    uint8_t secret[STORE_SECRET_LEN];  /* <state-dir>/secret */
    uint32_t nr_nodes;
    bool bind;               /* pages bound to their host node */
    int records_fds[NUKSM_MAX_NODES];  /* SlotRecords, read-write */
    GPtrArray *domains;      /* domain id -> StoreDomain, NULL if closed */
} Store;

/*
 * Open or create the state directory @dir (0700, on tmpfs) and its
 * record files (0600), keeping the content of existing ones.  With
 * @bind, each store file's pages are bound to the host node of the same
 * number.  Logs and returns false on failure.
 */
bool store_open(Store *st, const char *dir, uint32_t nr_nodes, bool bind);

void store_close(Store *st);

/*
 * The keys of the domains whose store files are in the state directory
 * (a previous agent's); free with g_ptr_array_unref().
 */
GPtrArray *store_list_domains(const Store *st);

/*
 * Open or create the files of domain @domain, named by @key, keeping
 * their content.  Logs and returns false on failure.
 */
bool store_open_domain(Store *st, uint16_t domain, const char *key);

/* Close the files of @domain and, with @remove, delete them. */
void store_close_domain(Store *st, uint16_t domain, bool remove);

/*
 * A new read-only descriptor of @domain's file of @node, for a VM of
 * it; -1, logged, on failure.
 */
int store_reader(const Store *st, uint16_t domain, uint32_t node);

/* The read-write descriptor of @domain's file of @node. */
int store_fd(const Store *st, uint16_t domain, uint32_t node);

/*
 * Write the page of a slot of @domain: 0 or an errno.  Writes go through
 * the file, not a mapping: a full tmpfs (ENOSPC) or memory cgroup
 * (ENOMEM) then fails the write instead of killing the agent with
 * SIGBUS.
 */
int store_write(Store *st, uint16_t domain, uint32_t node, uint32_t slot,
                const void *content);

/* Slots of a store window: 2 MiB of the file, aligned. */
#define STORE_WINDOW_SLOTS 512u

/* Windows a StoreWindows maps at most at once. */
#define STORE_WINDOWS_MAX 64u

/*
 * Windows of the store files mapped read-write, so that a system call
 * (process_vm_readv()) copies a VM's page straight into its slot, where
 * store_write() would copy it a second time.  Only the kernel may write
 * through them: its copy into a page that cannot be had (a full tmpfs,
 * a memory cgroup at its limit) fails with EFAULT, where the agent's own
 * store would die of SIGBUS.  The agent reads through them only pages
 * that were written.  Unmapped after each batch, so that the agent's page
 * tables keep nothing for the store.
 */
typedef struct StoreWindow {
    uint16_t domain;
    uint32_t node;
    uint32_t first;          /* the window's first slot */
    uint8_t *addr;
} StoreWindow;

typedef struct StoreWindows {
    StoreWindow w[STORE_WINDOWS_MAX];
    unsigned len;
} StoreWindows;

/*
 * The address of @domain's @slot of @node in a window of @ws, mapped if
 * need be; NULL, logged, if it cannot be mapped or @ws is full.
 */
uint8_t *store_window_slot(Store *st, StoreWindows *ws, uint16_t domain,
                           uint32_t node, uint32_t slot);

/*
 * Allocate and map the @n pages at @pages (from store_window_slot()),
 * each run of adjacent ones with one call, so that the copy into them
 * takes no fault of its own.  A page that cannot be had is left to fail
 * that copy.
 */
void store_windows_prefault(void *const *pages, size_t n);

/* Unmap the windows of @ws. */
void store_windows_unmap(StoreWindows *ws);

/* Read the page of a slot; logs and returns false on failure. */
bool store_read(const Store *st, uint16_t domain, uint32_t node,
                uint32_t slot, void *content);

/*
 * The records of the @count slots of @node from @slot, which hold
 * content: one write, through the file like store_write(), and failing
 * the same way.
 */
int store_set_records(Store *st, uint32_t node, uint32_t slot,
                      const SlotRecord *recs, uint32_t count);
bool store_get_record(const Store *st, uint32_t node, uint32_t slot,
                      SlotRecord *rec);

/*
 * Give the pages of @count slots of @domain from @slot back to the
 * system, and clear their records.
 */
void store_punch(Store *st, uint16_t domain, uint32_t node, uint32_t slot,
                 uint32_t count);

/*
 * The first run of slots of @domain holding content at or after @from,
 * as [*start, *end); false if there is none.
 */
bool store_next_data(const Store *st, uint16_t domain, uint32_t node,
                     uint32_t from, uint32_t *start, uint32_t *end);

/*
 * Which of the @count slots of @domain from @from hold a page in memory
 * (mincore(): a page swapped out does not count): @resident[i] bit 0 for
 * slot @from + i.  One call looks at the whole range, however scattered
 * the pages, where store_next_data() takes one per run.  False on error.
 */
bool store_resident(const Store *st, uint16_t domain, uint32_t node,
                    uint32_t from, uint32_t count, unsigned char *resident);

#endif /* NUKSMD_STORE_H */
