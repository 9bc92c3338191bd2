/*
 * qtest-reader: a VM that keeps reading some of its memory, for the NUMA
 * lab's placement by reads (tests/numa-lab/lab.sh).
 *
 *   qtest-reader SOCKET ADDR:SIZE...
 *       Connect to the qtest socket of a VM (QEMU -qtest
 *       unix:SOCKET,server=on,wait=off) and read one byte of each page
 *       of each guest-physical range ADDR:SIZE (hex or decimal), range
 *       after range, over and over, until killed, printing how long
 *       each round took.  QEMU serves the reads in its main loop, as it
 *       serves a device's DMA: read sampling catches them as it catches
 *       a vCPU's.
 *
 * Exit 2 on usage or connection errors, 1 if QEMU answers a read with
 * anything but OK.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096u
#define BATCH 64u               /* reads sent before their answers */

typedef struct Range {
    uint64_t addr;
    uint64_t size;
} Range;

static int connect_qtest(const char *path)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

    if (fd < 0 || strlen(path) >= sizeof(sa.sun_path)) {
        return -1;
    }
    strcpy(sa.sun_path, path);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static double now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int parse_range(const char *arg, Range *r)
{
    char *end;

    errno = 0;
    r->addr = strtoull(arg, &end, 0);
    if (errno || *end != ':') {
        return -1;
    }
    r->size = strtoull(end + 1, &end, 0);
    return errno || *end || !r->size ? -1 : 0;
}

int main(int argc, char **argv)
{
    Range *ranges;
    FILE *in, *out;
    char line[128];
    int fd;

    if (argc < 3) {
        fprintf(stderr, "usage: qtest-reader SOCKET ADDR:SIZE...\n");
        return 2;
    }
    ranges = calloc(argc - 2, sizeof(*ranges));
    for (int i = 2; i < argc; i++) {
        if (!ranges || parse_range(argv[i], &ranges[i - 2]) < 0) {
            fprintf(stderr, "qtest-reader: bad range '%s' (ADDR:SIZE)\n",
                    argv[i]);
            return 2;
        }
    }
    fd = connect_qtest(argv[1]);
    if (fd < 0) {
        fprintf(stderr, "qtest-reader: cannot connect to %s: %s\n", argv[1],
                strerror(errno));
        return 2;
    }
    in = fdopen(fd, "r");
    out = fdopen(dup(fd), "w");
    if (!in || !out) {
        fprintf(stderr, "qtest-reader: %s\n", strerror(errno));
        return 2;
    }
    for (unsigned round = 1;; round++) {
        double began = now_ms();

        for (int i = 0; i < argc - 2; i++) {
            /* A batch of reads, then their answers: not a round trip each. */
            for (uint64_t off = 0; off < ranges[i].size; off += BATCH * PAGE) {
                unsigned n = 0;

                for (; n < BATCH && off + n * PAGE < ranges[i].size; n++) {
                    fprintf(out, "readb 0x%" PRIx64 "\n",
                            ranges[i].addr + off + n * PAGE);
                }
                fflush(out);
                while (n--) {
                    if (!fgets(line, sizeof(line), in)) {
                        return 0;       /* the VM is gone */
                    }
                    if (strncmp(line, "OK ", 3)) {
                        fprintf(stderr, "qtest-reader: readb answered: %s",
                                line);
                        return 1;
                    }
                }
            }
        }
        printf("round %u: %.0f ms\n", round, now_ms() - began);
        fflush(stdout);
    }
}
