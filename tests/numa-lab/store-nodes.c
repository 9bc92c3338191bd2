/*
 * store-nodes: on which physical NUMA node does each page of a nuksmd
 * store file sit?  Part of the NUMA lab (tests/numa-lab/lab.sh), which
 * runs it inside a guest with two real (virtual) NUMA nodes.
 *
 *   store-nodes FILE...
 *       For each FILE (a store file, DIR/store-node<N>): find the pages
 *       that exist (SEEK_DATA/SEEK_HOLE, then mincore()), map them
 *       read-only (MAP_SHARED), read each one, and ask move_pages() for
 *       its node.  Prints one line per file:
 *
 *           FILE pages=P node0=A node1=B ... errors=E
 *
 *       with one nodeK= field per node the system has.  Exit 0 if every
 *       page was found on some node, 1 if some page could not be placed
 *       (errors > 0), 2 on usage or system errors.
 *
 *   store-nodes --blob FILE PAGES [FIRST]
 *       Write PAGES pages of 4 KiB, each one distinct and non-zero, to
 *       FILE: the identical content the lab loads into two VMs.  The
 *       pages are numbered from FIRST (default 0): blobs whose numbers
 *       do not overlap have no page alike.
 *
 * Holes are never touched: a read fault on a hole of a tmpfs file maps
 * a freshly allocated page into the file, which would add a page to the
 * store behind nuksmd's back.  A page punched out between mincore() and
 * the read is the one (harmless, and unlikely once merging has settled)
 * race left.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <numa.h>
#include <numaif.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define PAGE 4096UL
/* Pages per mmap()/move_pages() batch. */
#define BATCH 4096UL
#define MAX_NODES 64

typedef struct Counts {
    uint64_t pages;
    uint64_t node[MAX_NODES];
    uint64_t other;             /* a node number >= MAX_NODES */
    uint64_t errors;            /* move_pages() status < 0 */
    int first_error;            /* its -status */
} Counts;

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static int write_blob(const char *path, const char *pages_arg,
                      const char *first_arg)
{
    char *end;
    unsigned long long pages = strtoull(pages_arg, &end, 10);
    unsigned long long first;
    uint64_t buf[PAGE / 8];
    FILE *f;

    if (*pages_arg == '\0' || *end != '\0' || pages == 0) {
        fprintf(stderr, "store-nodes: --blob: bad page count '%s'\n",
                pages_arg);
        return 2;
    }
    first = strtoull(first_arg, &end, 10);
    if (*first_arg == '\0' || *end != '\0' || first > (1ULL << 40)) {
        fprintf(stderr, "store-nodes: --blob: bad first page '%s'\n",
                first_arg);
        return 2;
    }
    f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "store-nodes: %s: %s\n", path, strerror(errno));
        return 2;
    }
    for (unsigned long long p = first; p < first + pages; p++) {
        uint64_t seed = 0x6e756b736dULL ^ (p << 20);

        for (size_t w = 0; w < PAGE / 8; w++) {
            buf[w] = splitmix64(&seed) | 1;     /* never zero */
        }
        /* The page number in clear text at the start, for debugging. */
        buf[0] = 0x6e756b736d000000ULL | p;
        if (fwrite(buf, PAGE, 1, f) != 1) {
            fprintf(stderr, "store-nodes: %s: %s\n", path, strerror(errno));
            fclose(f);
            return 2;
        }
    }
    if (fclose(f) != 0) {
        fprintf(stderr, "store-nodes: %s: %s\n", path, strerror(errno));
        return 2;
    }
    return 0;
}

/* Which node each of @n resident pages at @addrs sits on. */
static int locate(void **addrs, unsigned long n, Counts *c)
{
    static int status[BATCH];

    for (unsigned long i = 0; i < n; i++) {
        /* A read fault maps the page into our page table. */
        (void)*(volatile const char *)addrs[i];
        status[i] = -1;
    }
    if (move_pages(0, n, addrs, NULL, status, 0) < 0) {
        fprintf(stderr, "store-nodes: move_pages: %s\n", strerror(errno));
        return -1;
    }
    for (unsigned long i = 0; i < n; i++) {
        c->pages++;
        if (status[i] < 0) {
            if (!c->errors++) {
                c->first_error = -status[i];
            }
        } else if (status[i] < MAX_NODES) {
            c->node[status[i]]++;
        } else {
            c->other++;
        }
    }
    return 0;
}

/* Count the resident pages of [start, end) of @fd by node. */
static int scan_extent(int fd, const char *path, off_t start, off_t end,
                       Counts *c)
{
    static void *addrs[BATCH];
    static unsigned char vec[BATCH];

    while (start < end) {
        size_t len = end - start;
        unsigned long n = 0;
        char *map;

        if (len > BATCH * PAGE) {
            len = BATCH * PAGE;
        }
        map = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, start);
        if (map == MAP_FAILED) {
            fprintf(stderr, "store-nodes: mmap %s at %jd: %s\n", path,
                    (intmax_t)start, strerror(errno));
            return -1;
        }
        if (mincore(map, len, vec) < 0) {
            fprintf(stderr, "store-nodes: mincore %s: %s\n", path,
                    strerror(errno));
            munmap(map, len);
            return -1;
        }
        for (size_t i = 0; i < len / PAGE; i++) {
            if (vec[i] & 1) {
                addrs[n++] = map + i * PAGE;
            }
        }
        if (n && locate(addrs, n, c) < 0) {
            munmap(map, len);
            return -1;
        }
        munmap(map, len);
        start += len;
    }
    return 0;
}

static int scan_file(const char *path, int nodes)
{
    Counts c = { 0 };
    struct stat sb;
    off_t pos = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    int ret = 0;

    if (fd < 0 || fstat(fd, &sb) < 0) {
        fprintf(stderr, "store-nodes: %s: %s\n", path, strerror(errno));
        if (fd >= 0) {
            close(fd);
        }
        return 2;
    }
    for (;;) {
        off_t data = lseek(fd, pos, SEEK_DATA);
        off_t hole;

        if (data < 0) {
            if (errno == ENXIO) {
                break;          /* no data after pos */
            }
            fprintf(stderr, "store-nodes: SEEK_DATA %s: %s\n", path,
                    strerror(errno));
            ret = 2;
            break;
        }
        hole = lseek(fd, data, SEEK_HOLE);
        if (hole < 0) {
            fprintf(stderr, "store-nodes: SEEK_HOLE %s: %s\n", path,
                    strerror(errno));
            ret = 2;
            break;
        }
        data &= ~(off_t)(PAGE - 1);
        hole = (hole + PAGE - 1) & ~(off_t)(PAGE - 1);
        if (hole > sb.st_size) {
            hole = (sb.st_size + PAGE - 1) & ~(off_t)(PAGE - 1);
        }
        if (scan_extent(fd, path, data, hole, &c) < 0) {
            ret = 2;
            break;
        }
        pos = hole;
    }
    close(fd);

    printf("%s pages=%" PRIu64, path, c.pages);
    for (int i = 0; i < nodes && i < MAX_NODES; i++) {
        printf(" node%d=%" PRIu64, i, c.node[i]);
    }
    for (int i = nodes; i < MAX_NODES; i++) {
        if (c.node[i]) {
            printf(" node%d=%" PRIu64, i, c.node[i]);
        }
    }
    if (c.other) {
        printf(" node-other=%" PRIu64, c.other);
    }
    printf(" errors=%" PRIu64 "\n", c.errors);
    if (c.errors) {
        fprintf(stderr, "store-nodes: %s: %" PRIu64 " pages not located, "
                "first error: %s\n", path, c.errors,
                strerror(c.first_error));
        if (!ret) {
            ret = 1;
        }
    }
    fflush(stdout);
    return ret;
}

int main(int argc, char **argv)
{
    int nodes = 1;
    int ret = 0;

    if ((argc == 4 || argc == 5) && strcmp(argv[1], "--blob") == 0) {
        return write_blob(argv[2], argv[3], argc == 5 ? argv[4] : "0");
    }
    if (argc < 2 || argv[1][0] == '-') {
        fprintf(stderr, "usage: store-nodes FILE...\n"
                        "       store-nodes --blob FILE PAGES [FIRST]\n");
        return 2;
    }
    if (numa_available() >= 0) {
        nodes = numa_max_node() + 1;
    }
    for (int i = 1; i < argc; i++) {
        int r = scan_file(argv[i], nodes);

        if (r > ret) {
            ret = r;
        }
    }
    return ret;
}
