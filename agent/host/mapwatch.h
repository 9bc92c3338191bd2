/*
 * nuksmd map watch: which store slots live processes map, read from
 * /proc/<pid>/maps and /proc/<pid>/pagemap.
 *
 * A VM maps a merged page as a private mapping of its slot over guest
 * RAM (QEMU's own read-only view of the whole store is a shared mapping,
 * and so is the agent's).  A slot that some process maps privately must
 * keep its content, whatever the agent knows of that process: after an
 * agent restart, a stopped or slow VM has not restored its pages yet.
 * The kernel's view is the only one no client can lie about.
 *
 * A mapping outlives the sharing of its page: after copy-on-write the
 * page is the process's own (anonymous) and the slot is no longer read
 * through it, though the mapping still names the slot.  The page's
 * pagemap entry tells the two apart.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_MAPWATCH_H
#define NUKSMD_MAPWATCH_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <glib.h>

/*
 * A private mapping of store file @file by process @pid: its slots
 * [first, end), the first at address @addr.
 */
typedef struct SlotRange {
    pid_t pid;
    uint32_t file;
    uint32_t first;
    uint32_t end;
    uint64_t addr;
} SlotRange;

/* One line of /proc/<pid>/maps. */
typedef struct MapsLine {
    uint64_t start, end;     /* addresses */
    uint64_t offset;         /* in the file */
    uint32_t dev_major, dev_minor;
    uint64_t inode;
    bool private;            /* MAP_PRIVATE ('p'), not shared ('s') */
} MapsLine;

/* Parse @line; false if it is not a maps line. */
bool mapwatch_parse_line(const char *line, MapsLine *out);

/*
 * Append to @ranges (of SlotRange) the private mappings of the files
 * @files (index = SlotRange.file) that the processes @pids have,
 * @page_size bytes a slot.  False if the mappings of one of them that
 * lives could not be read: @ranges is then incomplete.
 */
bool mapwatch_scan(const struct stat *files, uint32_t nr_files,
                   uint32_t page_size, const pid_t *pids, guint nr_pids,
                   GArray *ranges);

/*
 * Whether the pages of @r's process that map slots [@first, @first +
 * @count) (inside @r) still read them: @reads[i] for slot @first + i,
 * false once copy-on-write made the page the process's own.  True
 * wherever that cannot be told.
 */
void mapwatch_reads_slots(const SlotRange *r, uint32_t first,
                          uint32_t count, uint32_t page_size, bool *reads);

#endif /* NUKSMD_MAPWATCH_H */
