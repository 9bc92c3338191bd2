/*
 * nuksmd map watch.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysmacros.h>

#include "mapwatch.h"

bool mapwatch_parse_line(const char *line, MapsLine *out)
{
    char perms[5];

    if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %4s %" SCNx64 " %x:%x %"
               SCNu64, &out->start, &out->end, perms, &out->offset,
               &out->dev_major, &out->dev_minor, &out->inode) != 7 ||
        strlen(perms) != 4 || out->end < out->start) {
        return false;
    }
    out->private = perms[3] == 'p';
    return true;
}

/* Add the ranges of @pid; false if its mappings could not be read. */
static bool scan_process(pid_t pid, const struct stat *files,
                         uint32_t nr_files, uint32_t page_size,
                         GArray *ranges)
{
    g_autofree char *path = g_strdup_printf("/proc/%ld/maps", (long)pid);
    g_autofree char *line = NULL;
    size_t size = 0;
    bool ok;
    FILE *f = fopen(path, "re");

    if (!f) {
        /* Gone: it maps nothing any more. */
        return errno == ENOENT || errno == ESRCH;
    }
    while (getline(&line, &size, f) > 0) {
        MapsLine m;

        if (!mapwatch_parse_line(line, &m) || !m.private || !m.inode) {
            continue;
        }
        for (uint32_t i = 0; i < nr_files; i++) {
            if (m.inode == files[i].st_ino &&
                m.dev_major == major(files[i].st_dev) &&
                m.dev_minor == minor(files[i].st_dev)) {
                SlotRange r = {
                    .file = i,
                    .first = m.offset / page_size,
                    .end = m.offset / page_size +
                           (m.end - m.start) / page_size,
                };

                g_array_append_val(ranges, r);
                break;
            }
        }
    }
    /* A process that exits while we read it leaves its maps empty. */
    ok = !ferror(f) || errno == ESRCH;
    fclose(f);
    return ok;
}

static gint compare_ranges(gconstpointer a, gconstpointer b)
{
    const SlotRange *x = a, *y = b;

    if (x->file != y->file) {
        return x->file < y->file ? -1 : 1;
    }
    return x->first < y->first ? -1 : x->first > y->first;
}

/* Sort @ranges and merge those that overlap or touch. */
static void normalise(GArray *ranges)
{
    guint out = 0;

    g_array_sort(ranges, compare_ranges);
    for (guint i = 0; i < ranges->len; i++) {
        SlotRange *r = &g_array_index(ranges, SlotRange, i);
        SlotRange *last = out ? &g_array_index(ranges, SlotRange, out - 1)
                              : NULL;

        if (last && last->file == r->file && r->first <= last->end) {
            last->end = MAX(last->end, r->end);
        } else {
            g_array_index(ranges, SlotRange, out++) = *r;
        }
    }
    g_array_set_size(ranges, out);
}

bool mapwatch_scan(const struct stat *files, uint32_t nr_files,
                   uint32_t page_size, const pid_t *pids, guint nr_pids,
                   GArray *ranges)
{
    bool complete = true;

    for (guint i = 0; i < nr_pids; i++) {
        complete &= scan_process(pids[i], files, nr_files, page_size,
                                 ranges);
    }
    normalise(ranges);
    return complete;
}

bool mapwatch_covers(const GArray *ranges, uint32_t file, uint32_t slot)
{
    guint lo = 0, hi = ranges->len;
    const SlotRange *r;

    /*
     * The last range starting at or before (file, slot) is the only one
     * that can hold it: they do not overlap.
     */
    while (lo < hi) {
        guint mid = lo + (hi - lo) / 2;
        r = &g_array_index(ranges, SlotRange, mid);
        if (r->file < file || (r->file == file && r->first <= slot)) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    if (!lo) {
        return false;
    }
    r = &g_array_index(ranges, SlotRange, lo - 1);
    return r->file == file && slot < r->end;
}
