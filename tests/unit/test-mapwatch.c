/*
 * Unit tests of nuksmd's map watch: parsing /proc/<pid>/maps, and which
 * slots of a file a real process maps privately and still reads.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <glib.h>
#include <glib/gstdio.h>

#include "mapwatch.h"

#define PAGE 4096u

static void test_parse(void)
{
    MapsLine m;

    g_assert_true(mapwatch_parse_line(
        "7f12a0000000-7f12a0003000 rw-p 00005000 00:1a 123456   "
        "/dev/shm/nuksm state/store-node0\n", &m));
    g_assert_cmphex(m.start, ==, 0x7f12a0000000);
    g_assert_cmphex(m.end, ==, 0x7f12a0003000);
    g_assert_cmphex(m.offset, ==, 0x5000);
    g_assert_cmpuint(m.dev_major, ==, 0);
    g_assert_cmpuint(m.dev_minor, ==, 0x1a);
    g_assert_cmpuint(m.inode, ==, 123456);
    g_assert_true(m.private);

    g_assert_true(mapwatch_parse_line(
        "7f12a0000000-7f12a0003000 r--s 00000000 fd:01 77 /x\n", &m));
    g_assert_false(m.private);
    g_assert_cmpuint(m.dev_major, ==, 0xfd);

    /* Anonymous memory: no device, no inode. */
    g_assert_true(mapwatch_parse_line(
        "55d0c0000000-55d0c0021000 rw-p 00000000 00:00 0   [heap]\n", &m));
    g_assert_cmpuint(m.inode, ==, 0);

    g_assert_false(mapwatch_parse_line("", &m));
    g_assert_false(mapwatch_parse_line("garbage\n", &m));
    g_assert_false(mapwatch_parse_line(
        "7f12a0003000-7f12a0000000 rw-p 00000000 00:1a 1 /x\n", &m));
}

/* Map @count pages of @fd from page @first, privately or shared. */
static uint8_t *map_pages(int fd, uint32_t first, uint32_t count, int flags)
{
    void *p = mmap(NULL, count * PAGE, PROT_READ | PROT_WRITE, flags, fd,
                   (off_t)first * PAGE);

    g_assert_true(p != MAP_FAILED);
    return p;
}

/* Whether some range of @ranges maps slot @slot of @file with a page
 * that still reads it. */
static bool reads(const GArray *ranges, uint32_t file, uint32_t slot)
{
    for (guint i = 0; i < ranges->len; i++) {
        const SlotRange *r = &g_array_index(ranges, SlotRange, i);

        bool read;

        if (r->file == file && slot >= r->first && slot < r->end) {
            mapwatch_reads_slots(r, slot, 1, PAGE, &read);
            if (read) {
                return true;
            }
        }
    }
    return false;
}

static void test_scan(void)
{
    g_autofree char *path = g_strdup_printf("%s/nuksm-mapwatch-XXXXXX",
                                            g_get_tmp_dir());
    g_autoptr(GArray) ranges = g_array_new(FALSE, FALSE, sizeof(SlotRange));
    int fd = g_mkstemp(path);
    int ready[2];
    struct stat files[2];
    pid_t child, pids[2];
    char byte;

    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(ftruncate(fd, 64 * PAGE), ==, 0);
    g_assert_cmpint(fstat(fd, &files[1]), ==, 0);
    /* File 0 is another file that nobody maps. */
    g_assert_cmpint(stat(g_get_tmp_dir(), &files[0]), ==, 0);
    g_assert_cmpint(pipe(ready), ==, 0);

    child = fork();
    g_assert_cmpint(child, >=, 0);
    if (!child) {
        uint8_t *p;

        prctl(PR_SET_PDEATHSIG, SIGKILL);
        /* Pages 3..7 (two overlapping mappings), 9 shared, 12 private. */
        map_pages(fd, 3, 2, MAP_PRIVATE);
        p = map_pages(fd, 4, 4, MAP_PRIVATE);
        map_pages(fd, 9, 1, MAP_SHARED);
        map_pages(fd, 12, 1, MAP_PRIVATE);
        /* Page 6 read (its PTE maps the file), page 7 copied on write. */
        byte = p[2 * PAGE];
        p[3 * PAGE] = byte + 1;
        if (write(ready[1], "x", 1) != 1) {
            _exit(1);
        }
        pause();
        _exit(0);
    }
    g_assert_cmpint(read(ready[0], &byte, 1), ==, 1);
    /* Ours, seen only when asked for. */
    map_pages(fd, 20, 1, MAP_PRIVATE);
    pids[0] = child;
    pids[1] = getpid();

    g_assert_true(mapwatch_scan(files, 2, PAGE, pids, 1, ranges));
    g_assert_cmpuint(ranges->len, ==, 3);
    for (uint32_t s = 0; s < 32; s++) {
        bool read = (s >= 3 && s < 7) || s == 12;

        g_assert_cmpint(reads(ranges, 1, s), ==, read);
        g_assert_false(reads(ranges, 0, s));
    }

    /* A whole range at once says the same. */
    for (guint i = 0; i < ranges->len; i++) {
        const SlotRange *r = &g_array_index(ranges, SlotRange, i);
        bool read[8];

        if (r->first == 4) {
            mapwatch_reads_slots(r, 4, 4, PAGE, read);
            g_assert_true(read[0] && read[1] && read[2] && !read[3]);
        }
    }

    g_array_set_size(ranges, 0);
    g_assert_true(mapwatch_scan(files, 2, PAGE, pids, 2, ranges));
    g_assert_true(reads(ranges, 1, 20));
    g_assert_true(reads(ranges, 1, 12));

    /* Once the process is gone, nothing of it is mapped. */
    kill(child, SIGKILL);
    g_assert_cmpint(waitpid(child, NULL, 0), ==, child);
    g_array_set_size(ranges, 0);
    g_assert_true(mapwatch_scan(files, 2, PAGE, pids, 1, ranges));
    g_assert_cmpuint(ranges->len, ==, 0);

    close(ready[0]);
    close(ready[1]);
    close(fd);
    g_unlink(path);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/mapwatch/parse", test_parse);
    g_test_add_func("/mapwatch/scan", test_scan);
    return g_test_run();
}
