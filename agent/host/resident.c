/*
 * nuksmd resident memory (resident.h).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <unistd.h>

#include "resident.h"

bool resident_pages(pid_t pid, uint64_t *pages)
{
    char path[32], text[128];
    ssize_t len;
    int fd;

    snprintf(path, sizeof(path), "/proc/%d/statm", (int)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return false;
    }
    len = read(fd, text, sizeof(text) - 1);
    close(fd);
    if (len <= 0) {
        return false;
    }
    text[len] = '\0';
    /* size resident shared text lib data dt, in pages */
    return sscanf(text, "%*s %" SCNu64, pages) == 1;
}
