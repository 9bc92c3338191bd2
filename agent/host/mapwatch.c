/*
 * nuksmd map watch.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "mapwatch.h"
#include "nuksm-pagemap.h"

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
                    .pid = pid,
                    .file = i,
                    .first = m.offset / page_size,
                    .end = m.offset / page_size +
                           (m.end - m.start) / page_size,
                    .addr = m.start,
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

bool mapwatch_scan(const struct stat *files, uint32_t nr_files,
                   uint32_t page_size, const pid_t *pids, guint nr_pids,
                   GArray *ranges)
{
    bool complete = true;

    for (guint i = 0; i < nr_pids; i++) {
        complete &= scan_process(pids[i], files, nr_files, page_size,
                                 ranges);
    }
    return complete;
}

void mapwatch_reads_slots(const SlotRange *r, uint32_t first,
                          uint32_t count, uint32_t page_size, bool *reads)
{
    g_autofree char *path = g_strdup_printf("/proc/%ld/pagemap",
                                            (long)r->pid);
    g_autofree uint64_t *pm = g_new(uint64_t, count);
    uint64_t addr = r->addr + (uint64_t)(first - r->first) * page_size;
    size_t bytes = count * sizeof(*pm);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    bool ok = fd >= 0 &&
              pread(fd, pm, bytes, addr / page_size * sizeof(*pm)) ==
              (ssize_t)bytes;

    if (fd >= 0) {
        close(fd);
    }
    for (uint32_t i = 0; i < count; i++) {
        reads[i] = !ok || nuksm_pagemap_reads_file(pm[i]);
    }
}
