/*
 * nuksmd memory cgroup: how much more the agent may allocate before its
 * memory cgroup's limit.  Store pages are charged to the agent (it writes
 * them), and at the limit the kernel's OOM killer would kill it rather
 * than fail the write, so the agent stops making slots a headroom before
 * (the store-full condition, conditions.h).  cgroup v2 (every ancestor's
 * memory.max) and v1 (hierarchical_memory_limit) are read.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_MEMCG_H
#define NUKSMD_MEMCG_H

#include <stdbool.h>
#include <stdint.h>

#include <glib.h>

/* Kept free below the limit: the larger of 16 MiB and 1/32 of it. */
#define MEMCG_HEADROOM_MIN (16ull << 20)
#define MEMCG_HEADROOM_SHARE 32

/* Milliseconds a reading is trusted for (writes since are counted). */
#define MEMCG_READ_MS 100

typedef struct Memcg {
    GPtrArray *dirs;         /* cgroup directories whose limits apply */
    bool v1;                 /* dirs[0] is a v1 memory cgroup */
    uint64_t room;           /* at the last reading, less the charges */
    uint64_t limit;          /* the limit that leaves the least room */
    gint64 read_at;          /* g_get_monotonic_time(), 0: never */
} Memcg;

/* Find the agent's memory cgroup (none: no limit ever applies). */
void memcg_init(Memcg *m);
void memcg_destroy(Memcg *m);

/*
 * Bytes the agent may still allocate before the headroom below its
 * cgroup's limit (0 once inside it), or UINT64_MAX without a limit;
 * *@limit is that limit.
 */
uint64_t memcg_room(Memcg *m, uint64_t *limit);

/* @bytes were allocated since the last reading. */
void memcg_charge(Memcg *m, uint64_t bytes);

#endif /* NUKSMD_MEMCG_H */
