/*
 * nuksmd mappers.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <glib/gstdio.h>

#include "log.h"
#include "mappers.h"

/* Processes that exited are dropped as the list doubles from this. */
#define PRUNE_MIN 64

/* Field 22 of /proc/@pid/stat: when the process started, in ticks. */
static bool start_time(pid_t pid, guint64 *ticks)
{
    g_autofree char *path = g_strdup_printf("/proc/%ld/stat", (long)pid);
    g_autofree char *stat = NULL;
    const char *p;

    if (!g_file_get_contents(path, &stat, NULL, NULL)) {
        return false;
    }
    /* The command name may hold anything but ends at the last ')'. */
    p = strrchr(stat, ')');
    if (!p) {
        return false;
    }
    /* Fields 3 to 21, then the start time. */
    return sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u "
                  "%*u %*d %*d %*d %*d %*d %*d %" SCNu64, ticks) == 1;
}

static bool alive(pid_t pid, guint64 ticks)
{
    guint64 now;

    return start_time(pid, &now) && now == ticks;
}

static void save(Mappers *m)
{
    g_autoptr(GString) text = g_string_new(NULL);
    g_autoptr(GError) err = NULL;
    GHashTableIter it;
    gpointer pid, ticks;

    g_hash_table_iter_init(&it, m->procs);
    while (g_hash_table_iter_next(&it, &pid, &ticks)) {
        g_string_append_printf(text, "%u %" PRIu64 "\n",
                               GPOINTER_TO_UINT(pid), *(guint64 *)ticks);
    }
    /* Atomic: a crash leaves the old list or the new one. */
    if (!g_file_set_contents_full(m->path, text->str, text->len,
                                  G_FILE_SET_CONTENTS_CONSISTENT, 0600,
                                  &err)) {
        log_warning("cannot save %s: %s", m->path, err->message);
    }
}

static void insert(Mappers *m, pid_t pid, guint64 ticks)
{
    g_hash_table_insert(m->procs, GUINT_TO_POINTER(pid),
                        g_memdup2(&ticks, sizeof(ticks)));
}

void mappers_open(Mappers *m, const char *dir)
{
    g_autofree char *text = NULL;
    g_auto(GStrv) lines = NULL;

    m->path = g_build_filename(dir, "mappers", NULL);
    m->procs = g_hash_table_new_full(NULL, NULL, NULL, g_free);
    m->prune_at = PRUNE_MIN;
    if (!g_file_get_contents(m->path, &text, NULL, NULL)) {
        return;
    }
    lines = g_strsplit(text, "\n", -1);
    for (char **l = lines; *l; l++) {
        unsigned pid;
        guint64 ticks;

        if (sscanf(*l, "%u %" SCNu64, &pid, &ticks) == 2 &&
            alive(pid, ticks)) {
            insert(m, pid, ticks);
        }
    }
    save(m);
}

void mappers_close(Mappers *m)
{
    g_clear_pointer(&m->procs, g_hash_table_destroy);
    g_clear_pointer(&m->path, g_free);
}

bool mappers_add(Mappers *m, pid_t pid)
{
    guint64 ticks, *known;

    if (!start_time(pid, &ticks)) {
        return false;
    }
    if (g_hash_table_size(m->procs) >= m->prune_at) {
        g_array_unref(mappers_live(m));
        m->prune_at = 2 * g_hash_table_size(m->procs) + PRUNE_MIN;
    }
    known = g_hash_table_lookup(m->procs, GUINT_TO_POINTER(pid));
    if (!known || *known != ticks) {
        insert(m, pid, ticks);
        save(m);
    }
    return true;
}

static gint compare_pids(gconstpointer a, gconstpointer b)
{
    pid_t x = *(const pid_t *)a, y = *(const pid_t *)b;

    return x < y ? -1 : x > y;
}

GArray *mappers_live(Mappers *m)
{
    GArray *pids = g_array_new(FALSE, FALSE, sizeof(pid_t));
    GHashTableIter it;
    gpointer pid, ticks;
    bool gone = false;

    g_hash_table_iter_init(&it, m->procs);
    while (g_hash_table_iter_next(&it, &pid, &ticks)) {
        if (alive(GPOINTER_TO_UINT(pid), *(guint64 *)ticks)) {
            pid_t p = GPOINTER_TO_UINT(pid);

            g_array_append_val(pids, p);
        } else {
            g_hash_table_iter_remove(&it);
            gone = true;
        }
    }
    if (gone) {
        save(m);
    }
    g_array_sort(pids, compare_pids);
    return pids;
}
