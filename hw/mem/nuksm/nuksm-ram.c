/*
 * nuksm: which guest RAM may be deduplicated, and why the rest may not.
 *
 * nuksm only ever remaps private, anonymous, base-page guest RAM owned by
 * a memory backend.  Everything else is reported with a reason.
 *
 * Eligibility is QOM business (who owns a block), so it is decided in the
 * main loop, under the BQL: nuksm_ram_refresh() resolves the eligible
 * blocks and their guest NUMA nodes into plain data, published with RCU,
 * when the object completes, when the machine is built and whenever a RAM
 * block comes or goes.  The scanner thread walks that list
 * (nuksm_ram_foreach_resolved()) and never touches QOM.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qapi/error.h"
#include "exec/memory.h"
#include "exec/ramblock.h"
#include "exec/ramlist.h"
#include "hw/boards.h"
#include "hw/qdev-core.h"
#include "qemu/rcu.h"
#include "qemu/rcu_queue.h"
#include "qemu/main-loop.h"
#include "qemu/madvise.h"
#include "system/hostmem.h"
#include "system/numa.h"
#include "nuksm-ram.h"
#include "trace.h"

/* An eligible RAM block, as the main loop last resolved it. */
typedef struct NuksmRamEntry {
    RAMBlock *rb;               /* identity only, never dereferenced */
    uint8_t gnode;              /* its guest NUMA node */
} NuksmRamEntry;

struct NuksmRamList {
    struct rcu_head rcu;
    unsigned len;
    NuksmRamEntry entries[];
};

/* The memory backend owning @rb, or NULL for device RAM and ROM. */
static HostMemoryBackend *nuksm_ram_backend(RAMBlock *rb)
{
    Object *owner = memory_region_owner(rb->mr);

    return (HostMemoryBackend *)object_dynamic_cast(owner,
                                                    TYPE_MEMORY_BACKEND);
}

/* Name users know @rb by: the backend id, else the RAM block name. */
static const char *nuksm_ram_name(RAMBlock *rb)
{
    HostMemoryBackend *backend = nuksm_ram_backend(rb);

    if (backend) {
        return object_get_canonical_path_component(OBJECT(backend));
    }
    return rb->idstr;
}

uint8_t nuksm_ram_gnode(RAMBlock *rb)
{
    MachineState *ms = MACHINE(qdev_get_machine());
    Object *owner = memory_region_owner(rb->mr);
    uint32_t gnodes = ms->numa_state ?
                      MIN(ms->numa_state->num_nodes, NUKSM_MAX_GNODES) : 0;

    for (uint32_t g = 0; g < gnodes; g++) {
        if (OBJECT(ms->numa_state->nodes[g].node_memdev) == owner) {
            return g;
        }
    }
    /* Machine RAM without -numa, and DIMMs: the first guest node. */
    return 0;
}

static bool nuksm_ram_selected(Nuksm *s, RAMBlock *rb)
{
    return !s->memdev || nuksm_ram_backend(rb) == s->memdev_backend;
}

/*
 * Returns true when nuksm may deduplicate @rb; otherwise stores why not
 * in @reason.  Order matters: the first reason that applies is reported.
 * Discard, which page pinners disable, is the one condition that changes
 * while a block lives: nuksm_ram_foreach_resolved() checks it each time.
 */
static bool nuksm_ram_eligible(Nuksm *s, RAMBlock *rb,
                               NuksmExclusionReason *reason)
{
    HostMemoryBackend *backend = nuksm_ram_backend(rb);

    if (memory_region_is_rom(rb->mr) || memory_region_is_romd(rb->mr)) {
        *reason = NUKSM_EXCLUSION_REASON_ROM;
    } else if (!backend || memory_region_is_ram_device(rb->mr)) {
        *reason = NUKSM_EXCLUSION_REASON_DEVICE_RAM;
    } else if (!nuksm_ram_selected(s, rb)) {
        *reason = NUKSM_EXCLUSION_REASON_NOT_SELECTED;
    } else if (qemu_ram_is_shared(rb)) {
        *reason = NUKSM_EXCLUSION_REASON_SHARED;
    } else if (qemu_ram_pagesize(rb) != qemu_real_host_page_size()) {
        *reason = NUKSM_EXCLUSION_REASON_HUGE_PAGES;
    } else if (rb->fd >= 0) {
        *reason = NUKSM_EXCLUSION_REASON_FILE_BACKED;
    } else if (ram_block_discard_is_disabled()) {
        *reason = NUKSM_EXCLUSION_REASON_DISCARD_DISABLED;
    } else {
        return true;
    }
    return false;
}

void nuksm_ram_foreach_eligible(Nuksm *s, NuksmRamFn fn, void *opaque)
{
    NuksmExclusionReason reason;
    RAMBlock *rb;

    assert(bql_locked());
    RCU_READ_LOCK_GUARD();
    RAMBLOCK_FOREACH(rb) {
        if (nuksm_ram_eligible(s, rb, &reason) && !fn(s, rb, opaque)) {
            return;
        }
    }
}

static bool nuksm_ram_count(Nuksm *s, RAMBlock *rb, void *opaque)
{
    uint64_t *pages = opaque;

    *pages += rb->used_length / qemu_real_host_page_size();
    return true;
}

uint64_t nuksm_ram_eligible_pages(Nuksm *s)
{
    uint64_t pages = 0;

    nuksm_ram_foreach_eligible(s, nuksm_ram_count, &pages);
    return pages;
}

NuksmExclusionList *nuksm_ram_exclusions(Nuksm *s)
{
    NuksmExclusionList *head = NULL, **tail = &head;
    NuksmExclusionReason reason;
    RAMBlock *rb;

    RCU_READ_LOCK_GUARD();
    RAMBLOCK_FOREACH(rb) {
        NuksmExclusion *ex;

        if (nuksm_ram_eligible(s, rb, &reason)) {
            continue;
        }
        ex = g_new0(NuksmExclusion, 1);
        ex->memdev = g_strdup(nuksm_ram_name(rb));
        ex->reason = reason;
        ex->size = rb->used_length;
        QAPI_LIST_APPEND(tail, ex);
    }
    return head;
}

bool nuksm_ram_resolve_memdev(Nuksm *s, Error **errp)
{
    Object *obj;

    if (!s->memdev) {
        return true;
    }
    obj = object_resolve_path_component(object_get_objects_root(),
                                        s->memdev);
    if (!obj || !object_dynamic_cast(obj, TYPE_MEMORY_BACKEND)) {
        error_setg(errp, "nuksm '%s': property 'memdev': no memory backend "
                   "with id '%s'", s->id, s->memdev);
        return false;
    }
    s->memdev_backend = MEMORY_BACKEND(obj);
    return true;
}

static bool nuksm_ram_add_entry(Nuksm *s, RAMBlock *rb, void *opaque)
{
    NuksmRamEntry e = {
        .rb = rb,
        .gnode = nuksm_ram_gnode(rb),
    };

    g_array_append_val(opaque, e);
    return true;
}

void nuksm_ram_refresh(Nuksm *s)
{
    g_autoptr(GArray) entries = g_array_new(false, false,
                                            sizeof(NuksmRamEntry));
    NuksmRamList *list, *old;

    nuksm_ram_foreach_eligible(s, nuksm_ram_add_entry, entries);
    list = g_malloc(sizeof(*list) + entries->len * sizeof(NuksmRamEntry));
    list->len = entries->len;
    memcpy(list->entries, entries->data, entries->len * sizeof(NuksmRamEntry));
    old = qatomic_xchg(&s->ram, list);
    if (old) {
        g_free_rcu(old, rcu);
    }
}

void nuksm_ram_free(Nuksm *s)
{
    g_free(qatomic_xchg(&s->ram, NULL));
}

void nuksm_ram_foreach_resolved(Nuksm *s, NuksmRamResolvedFn fn,
                                void *opaque)
{
    NuksmRamList *list;
    RAMBlock *rb;

    RCU_READ_LOCK_GUARD();
    list = qatomic_rcu_read(&s->ram);
    if (!list || ram_block_discard_is_disabled()) {
        return;
    }
    RAMBLOCK_FOREACH(rb) {
        for (unsigned i = 0; i < list->len; i++) {
            if (list->entries[i].rb != rb) {
                continue;
            }
            if (!fn(rb, list->entries[i].gnode, opaque)) {
                return;
            }
            break;
        }
    }
}

static void nuksm_ram_block_name_free(gpointer p)
{
    NuksmRamBlockName *bn = p;

    g_free(bn->name);
    g_free(bn);
}

static bool nuksm_ram_add_name(RAMBlock *rb, uint8_t gnode, void *opaque)
{
    NuksmRamBlockName *bn = g_new(NuksmRamBlockName, 1);

    bn->name = g_strdup(rb->idstr);
    bn->gnode = gnode;
    g_ptr_array_add(opaque, bn);
    return true;
}

GPtrArray *nuksm_ram_resolved_names(Nuksm *s)
{
    GPtrArray *names = g_ptr_array_new_with_free_func(
        nuksm_ram_block_name_free);

    nuksm_ram_foreach_resolved(s, nuksm_ram_add_name, names);
    return names;
}

bool nuksm_ram_resolved_gnode(Nuksm *s, RAMBlock *rb, uint8_t *gnode)
{
    NuksmRamList *list = qatomic_rcu_read(&s->ram);

    if (!list || ram_block_discard_is_disabled()) {
        return false;
    }
    for (unsigned i = 0; i < list->len; i++) {
        if (list->entries[i].rb == rb) {
            *gnode = list->entries[i].gnode;
            return true;
        }
    }
    return false;
}

/*
 * QEMU advises every RAM block to use huge pages, and fills a ROM's
 * whole room at each reset, its content then zeros (rom_reset()): the
 * ACPI tables' block (etc/acpi/tables) holds about 128 KiB in its 2 MiB,
 * all of it resident, as a huge page.  nuksm never merges these blocks,
 * where KSM breaks such a page up for its zero pages, so a VM would
 * spend more with nuksm than with KSM.  A resizeable block gets small
 * pages, and what lies beyond its size is given back after each reset
 * (it reads zero, as rom_reset() left it).
 */
static bool nuksm_ram_is_trimmable(RAMBlock *rb)
{
    return (rb->flags & RAM_RESIZEABLE) && !qemu_ram_is_shared(rb) &&
           rb->host;
}

static void nuksm_ram_trim(RAMBlock *rb)
{
    if (rb->max_length > rb->used_length) {
        qemu_madvise(rb->host + rb->used_length,
                     rb->max_length - rb->used_length, QEMU_MADV_DONTNEED);
    }
    trace_nuksm_ram_trim(rb->idstr, rb->used_length, rb->max_length);
}

void nuksm_ram_added(void *host)
{
    ram_addr_t offset;
    RAMBlock *rb = qemu_ram_block_from_host(host, false, &offset);

    if (rb && nuksm_ram_is_trimmable(rb)) {
        qemu_madvise(rb->host, rb->max_length, QEMU_MADV_NOHUGEPAGE);
        nuksm_ram_trim(rb);
    }
}

static int nuksm_ram_trim_one(RAMBlock *rb, void *opaque)
{
    if (nuksm_ram_is_trimmable(rb)) {
        nuksm_ram_trim(rb);
    }
    return 0;
}

void nuksm_ram_trim_all(void)
{
    qemu_ram_foreach_block(nuksm_ram_trim_one, NULL);
}
