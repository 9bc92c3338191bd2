/*
 * nuksmd memory cgroup.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "memcg.h"

#define CGROUP_ROOT "/sys/fs/cgroup"

/* A number from @dir/@file ("max" and absurd values: none), or false. */
static bool read_number(const char *dir, const char *file, uint64_t *out)
{
    g_autofree char *path = g_build_filename(dir, file, NULL);
    g_autofree char *text = NULL;

    if (!g_file_get_contents(path, &text, NULL, NULL) ||
        !g_ascii_string_to_unsigned(g_strstrip(text), 10, 0, UINT64_MAX,
                                    out, NULL)) {
        return false;
    }
    return *out < (1ull << 62);
}

/* v1's memory.stat line "hierarchical_memory_limit N". */
static bool read_v1_limit(const char *dir, uint64_t *out)
{
    g_autofree char *path = g_build_filename(dir, "memory.stat", NULL);
    g_autofree char *text = NULL;
    const char *line;

    if (!g_file_get_contents(path, &text, NULL, NULL) ||
        !(line = strstr(text, "hierarchical_memory_limit "))) {
        return false;
    }
    return sscanf(line, "hierarchical_memory_limit %" SCNu64, out) == 1 &&
           *out < (1ull << 62);
}

void memcg_init(Memcg *m)
{
    g_autofree char *text = NULL;
    g_auto(GStrv) lines = NULL;
    const char *v1 = NULL, *v2 = NULL;

    *m = (Memcg) { .dirs = g_ptr_array_new_with_free_func(g_free) };
    if (!g_file_get_contents("/proc/self/cgroup", &text, NULL, NULL)) {
        return;
    }
    lines = g_strsplit(text, "\n", -1);
    for (char **l = lines; *l; l++) {
        char **f = g_strsplit(*l, ":", 3);

        if (g_strv_length(f) == 3) {
            g_auto(GStrv) controllers = g_strsplit(f[1], ",", -1);

            if (g_strv_contains((const char *const *)controllers,
                                "memory")) {
                v1 = strstr(*l, f[2]);
            } else if (!*f[1] && !strcmp(f[0], "0")) {
                v2 = strstr(*l, f[2]);
            }
        }
        g_strfreev(f);
    }
    if (v1) {
        m->v1 = true;
        g_ptr_array_add(m->dirs, g_build_filename(CGROUP_ROOT, "memory", v1,
                                                  NULL));
        return;
    }
    /* v2: the limits of every ancestor apply. */
    if (v2 && g_file_test(CGROUP_ROOT "/cgroup.controllers",
                          G_FILE_TEST_EXISTS)) {
        g_autofree char *dir = g_strdup(v2);

        while (strcmp(dir, "/") && strcmp(dir, ".")) {
            char *parent = g_path_get_dirname(dir);

            g_ptr_array_add(m->dirs,
                            g_build_filename(CGROUP_ROOT, dir, NULL));
            g_free(dir);
            dir = parent;
        }
    }
}

void memcg_destroy(Memcg *m)
{
    g_clear_pointer(&m->dirs, g_ptr_array_unref);
}

/* Read the room below every limit that applies; UINT64_MAX for none. */
static void read_room(Memcg *m)
{
    m->room = UINT64_MAX;
    m->limit = 0;
    for (guint i = 0; i < m->dirs->len; i++) {
        const char *dir = g_ptr_array_index(m->dirs, i);
        uint64_t limit, usage, headroom;
        bool limited = m->v1 ? read_v1_limit(dir, &limit)
                             : read_number(dir, "memory.max", &limit);

        if (!limited ||
            !read_number(dir, m->v1 ? "memory.usage_in_bytes"
                                    : "memory.current", &usage)) {
            continue;
        }
        headroom = MAX(MEMCG_HEADROOM_MIN, limit / MEMCG_HEADROOM_SHARE);
        if (usage + headroom >= limit) {
            m->room = 0;
            m->limit = limit;
        } else if (limit - usage - headroom < m->room) {
            m->room = limit - usage - headroom;
            m->limit = limit;
        }
    }
    m->read_at = g_get_monotonic_time();
}

uint64_t memcg_room(Memcg *m, uint64_t *limit)
{
    if (m->dirs->len &&
        (!m->read_at ||
         g_get_monotonic_time() - m->read_at > MEMCG_READ_MS * 1000)) {
        read_room(m);
    }
    *limit = m->limit;
    return m->dirs->len ? m->room : UINT64_MAX;
}

void memcg_charge(Memcg *m, uint64_t bytes)
{
    if (m->room != UINT64_MAX) {
        m->room -= MIN(m->room, bytes);
    }
}
