/*
 * nuksmd read hotness (reads.h).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <inttypes.h>

#include "conditions.h"
#include "log.h"
#include "policy.h"
#include "reads.h"
#include "relocate.h"
#include "transport.h"

/* Does @client's read region @region hold RAM its TOPOLOGY reported? */
static bool region_reported(const NuksmClient *client, uint64_t region)
{
    const NuksmMsgTopology *t = client->home.topology;
    /* nuksm_msg_check() bounds @region: its pages fit 64 bits. */
    uint64_t first = region * NUKSM_READ_REGION_PAGES;
    uint64_t end = first + NUKSM_READ_REGION_PAGES;

    for (uint32_t r = 0; t && r < t->nr_ranges; r++) {
        const NuksmPageRange *range = &t->ranges[r];

        if (range->count && range->first < end &&
            first < range->first + range->count) {
            return true;
        }
    }
    return false;
}

/* Reject @client unless every region of @m is one it may report. */
static bool check_regions(NuksmClient *client, uint32_t seq,
                          const NuksmMsgReads *m)
{
    const NuksmReadRegion *r = (const NuksmReadRegion *)(m + 1);

    for (uint32_t i = 0; i < m->count; i++) {
        if (!region_reported(client, r[i].region)) {
            transport_reject(client, seq, NUKSM_ERR_BAD_MESSAGE,
                             "READS: region %#" PRIx64 " (pages %#" PRIx64
                             "..%#" PRIx64 ") holds no RAM its TOPOLOGY "
                             "reported", r[i].region,
                             r[i].region * NUKSM_READ_REGION_PAGES,
                             (r[i].region + 1) * NUKSM_READ_REGION_PAGES -
                             1);
            return false;
        }
    }
    return true;
}

/* The read regions @client's process keeps, over all its connections. */
static uint64_t process_regions(const NuksmClient *client)
{
    const NuksmClient *c = client;
    uint64_t regions = 0;

    do {
        regions += c->reads.regions.count;
        c = c->pid_next;
    } while (c != client);
    return regions;
}

/* May @client keep one more region?  @may_grow: the memory budget. */
static bool may_keep_region(NuksmClient *client, bool may_grow)
{
    if (may_grow && process_regions(client) < READS_REGIONS_MAX) {
        return true;
    }
    if (may_grow && !client->reads.capped) {
        log_warning("%s: its process keeps the %u read regions it may "
                    "(READS): others count as never read", client->label,
                    READS_REGIONS_MAX);
        client->reads.capped = true;
    }
    return false;
}

/*
 * @client's region @region was last seen read @idle samples ago: keep
 * that (forget it at NUKSM_IDLE_NEVER).  True if the region turned warm
 * or stopped being warm: what the draws of fair and priority weigh.
 */
static bool set_region(NuksmAgent *agent, NuksmClient *client,
                       uint64_t region, uint8_t idle, bool may_grow)
{
    uint32_t cold_windows = agent->placement.cold_windows;
    KeyMapEntry *e = keymap_lookup(&client->reads.regions, region, 0);
    bool was_hot = e && policy_page_hot(NUKSM_IDLE_NEVER, e->tag,
                                        cold_windows);
    bool was_warm = e && policy_page_warm(NUKSM_IDLE_NEVER, e->tag,
                                          cold_windows);
    bool hot = policy_page_hot(NUKSM_IDLE_NEVER, idle, cold_windows);
    bool warm = policy_page_warm(NUKSM_IDLE_NEVER, idle, cold_windows);
    bool added;

    if (idle == NUKSM_IDLE_NEVER) {
        if (e) {
            keymap_remove(&client->reads.regions, e);
        }
    } else if (e) {
        e->tag = idle;
    } else if (may_keep_region(client, may_grow)) {
        keymap_insert(&client->reads.regions, region, 0, &added)->tag = idle;
    } else {
        /* Not kept: never read, as far as we know. */
        hot = warm = false;
    }
    if (hot != was_hot) {
        client->reads.hot_regions += hot ? 1 : -1;
    }
    return warm != was_warm;
}

static gboolean on_pass_due(gpointer opaque)
{
    NuksmAgent *agent = opaque;

    agent->placement.reads_pass_timer = 0;
    relocate_request(agent, "the VMs' reads of merged pages changed");
    return G_SOURCE_REMOVE;
}

/*
 * A pass for reads, READS_REPLACE_SECONDS after the READS that first
 * asks for it: once for all the changes until then.  Not at once: the
 * VMs that share copies report the same merges each in its own read
 * window, and a pass that weighed one VM's READS before the others' came
 * would move copies to it, and the next pass move half of them back.
 */
static void request_pass(NuksmAgent *agent)
{
    AgentPlacement *p = &agent->placement;

    if (!p->reads_pass_timer) {
        p->reads_pass_timer = g_timeout_add(READS_REPLACE_SECONDS * 1000,
                                            on_pass_due, agent);
    }
}

void reads_handle_reads(NuksmAgent *agent, NuksmClient *client,
                        uint32_t seq, const void *payload)
{
    const NuksmMsgReads *m = payload;
    const NuksmReadRegion *r = (const NuksmReadRegion *)(m + 1);
    bool may_grow, changed = false;

    if (!check_regions(client, seq, m)) {
        return;
    }
    may_grow = conditions_memory_has_room(agent);
    for (uint32_t i = 0; i < m->count; i++) {
        changed |= set_region(agent, client, r[i].region, r[i].idle,
                              may_grow);
    }
    client->reads.window_ms = m->window_ms;
    client->reads.local = m->reads_local;
    client->reads.remote = m->reads_remote;
    /* QEMU samples only merged pages: a region it reports holds some. */
    if (changed && client->merged_pages &&
        policy_moves_by_hotness(agent->placement.policy)) {
        request_pass(agent);
    }
}

void reads_stop(NuksmAgent *agent)
{
    g_clear_handle_id(&agent->placement.reads_pass_timer, g_source_remove);
}

void reads_client_init(ClientReads *reads, uint64_t seed)
{
    keymap_init(&reads->regions, seed);
}

void reads_client_destroy(ClientReads *reads)
{
    keymap_destroy(&reads->regions);
}
