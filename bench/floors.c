/*
 * The physical floors of merging one page on this machine: what each
 * stage of the merge path costs at the least, measured with nothing
 * around it, for docs/benchmarks.rst's cost model (bench/stages.py puts
 * them beside what each stage costs in nuksm).  Prints one JSON object,
 * nanoseconds per operation, each the median of ROUNDS rounds:
 *
 *   hash       XXH3 of a page (nuksm_page_digest()), pages streamed from
 *              a buffer far larger than the caches, as a scan reads them
 *   lookup     a read that misses every cache: a pointer chase through
 *              a table far larger than them, as a hash table probe
 *   copy       memcpy of a page from such a buffer into another: an
 *              upload through shared memory
 *   store_page a new page of a tmpfs file, allocated and zeroed by
 *              MADV_POPULATE_WRITE in runs of 2 MiB: what a slot's page
 *              costs before its content is written (KSM has no such
 *              cost: its merged page is one of the guests')
 *   socket     a page through a SOCK_SEQPACKET socket pair, sent and
 *              received: an upload in a message
 *   compare    memcmp of two equal pages from two such buffers
 *   remap_run  mapping a 2 MiB run of a tmpfs file privately over
 *              anonymous memory (one mmap with MAP_FIXED) and reading
 *              each page, per page
 *   remap_page the same for runs of one page
 *   message    a datagram of NUKSM_CANDIDATES_MAX candidate entries
 *              sent and received, per entry
 *   wakeup     one thread waking another through an eventfd, then
 *              waiting for its answer, halved: a wake-up of a poll loop
 *
 *     bench-floors
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "nuksm-digest.h"
#include "nuksm-proto.h"

#define PAGE 4096ul
/* Far larger than the caches: every page read comes from memory. */
#define BIG (256ul << 20)
#define BIG_PAGES (BIG / PAGE)
#define ROUNDS 7
#define RUN_PAGES 512ul

static void die(const char *what)
{
    fprintf(stderr, "bench-floors: %s: %s\n", what, strerror(errno));
    exit(1);
}

static double now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

/* Anonymous memory of @size bytes, every page written (and distinct). */
static uint8_t *big_buffer(size_t size, uint64_t seed)
{
    uint8_t *buf = mmap(NULL, size, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

    if (buf == MAP_FAILED) {
        die("mmap");
    }
    for (size_t p = 0; p < size / PAGE; p++) {
        memset(buf + p * PAGE, 0x5a, PAGE);
        memcpy(buf + p * PAGE, &(uint64_t){ seed ^ p }, sizeof(uint64_t));
    }
    return buf;
}

static int compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

static double median(double *v)
{
    qsort(v, ROUNDS, sizeof(*v), compare_doubles);
    return v[ROUNDS / 2];
}

/* Keeps the compiler from dropping what is measured. */
static volatile uint64_t sink;

static double hash_ns(const uint8_t *big)
{
    double t[ROUNDS];

    for (int r = 0; r < ROUNDS; r++) {
        double start = now_ns();
        uint64_t acc = 0;

        for (size_t p = 0; p < BIG_PAGES; p++) {
            acc ^= nuksm_page_digest(big + p * PAGE, PAGE);
        }
        sink = acc;
        t[r] = (now_ns() - start) / BIG_PAGES;
    }
    return median(t);
}

/* A random cyclic permutation through the @slots of @table. */
static void make_chase(uint64_t *table, size_t slots)
{
    uint64_t *order = malloc(slots * sizeof(*order));

    if (!order) {
        die("malloc");
    }
    for (size_t i = 0; i < slots; i++) {
        order[i] = i;
    }
    srand(1);
    for (size_t i = slots - 1; i > 0; i--) {
        size_t j = ((size_t)rand() << 16 ^ rand()) % (i + 1);
        uint64_t tmp = order[i];

        order[i] = order[j];
        order[j] = tmp;
    }
    for (size_t i = 0; i < slots; i++) {
        table[order[i]] = order[(i + 1) % slots];
    }
    free(order);
}

static double lookup_ns(const uint64_t *table)
{
    const size_t steps = 1u << 22;
    double t[ROUNDS];
    uint64_t at = 0;

    for (int r = 0; r < ROUNDS; r++) {
        double start = now_ns();

        for (size_t i = 0; i < steps; i++) {
            at = table[at];
        }
        sink = at;
        t[r] = (now_ns() - start) / steps;
    }
    return median(t);
}

static double copy_ns(const uint8_t *from, uint8_t *to)
{
    double t[ROUNDS];

    for (int r = 0; r < ROUNDS; r++) {
        double start = now_ns();

        for (size_t p = 0; p < BIG_PAGES; p++) {
            memcpy(to + p * PAGE, from + p * PAGE, PAGE);
        }
        t[r] = (now_ns() - start) / BIG_PAGES;
    }
    return median(t);
}

static double store_page_ns(void)
{
    const size_t pages = 64 * RUN_PAGES;
    int fd = memfd_create("floors-store", 0);
    uint8_t *file;
    double t[ROUNDS];

    if (fd < 0 || ftruncate(fd, pages * PAGE) < 0) {
        die("memfd");
    }
    file = mmap(NULL, pages * PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                0);
    if (file == MAP_FAILED) {
        die("mmap");
    }
    for (int r = 0; r < ROUNDS; r++) {
        double start = now_ns();

        for (size_t p = 0; p < pages; p += RUN_PAGES) {
            if (madvise(file + p * PAGE, RUN_PAGES * PAGE,
                        MADV_POPULATE_WRITE) < 0) {
                die("MADV_POPULATE_WRITE");
            }
        }
        t[r] = (now_ns() - start) / pages;
        /* Holes again for the next round, as freed slots are. */
        if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
                      pages * PAGE) < 0) {
            die("fallocate");
        }
    }
    munmap(file, pages * PAGE);
    close(fd);
    return median(t);
}

static double compare_ns(const uint8_t *a, const uint8_t *b)
{
    double t[ROUNDS];

    for (int r = 0; r < ROUNDS; r++) {
        double start = now_ns();
        int acc = 0;

        for (size_t p = 0; p < BIG_PAGES; p++) {
            acc |= memcmp(a + p * PAGE, b + p * PAGE, PAGE);
        }
        sink = acc;
        t[r] = (now_ns() - start) / BIG_PAGES;
    }
    return median(t);
}

/* @size bytes sent and received through a seqpacket pair, @count times. */
static double socket_ns(const uint8_t *big, size_t size, size_t count)
{
    int sv[2];
    uint8_t *rx = malloc(size);
    double t[ROUNDS];

    if (!rx || socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv) < 0) {
        die("socketpair");
    }
    setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &(int){ 4 << 20 }, sizeof(int));
    for (int r = 0; r < ROUNDS; r++) {
        double start = now_ns();

        for (size_t i = 0; i < count; i++) {
            const uint8_t *msg = big + (i * size) % (BIG - size);

            if (send(sv[0], msg, size, 0) != (ssize_t)size ||
                recv(sv[1], rx, size, 0) != (ssize_t)size) {
                die("send/recv");
            }
        }
        t[r] = (now_ns() - start) / count;
    }
    close(sv[0]);
    close(sv[1]);
    free(rx);
    return median(t);
}

/*
 * Map runs of @run pages of a tmpfs file privately over anonymous
 * memory and read each page: ns per page.
 */
static double remap_ns(size_t run)
{
    const size_t pages = 64 * RUN_PAGES;
    int fd = memfd_create("floors", 0);
    uint8_t *file, *guest;
    double t[ROUNDS];

    if (fd < 0 || ftruncate(fd, pages * PAGE) < 0) {
        die("memfd");
    }
    file = mmap(NULL, pages * PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                0);
    guest = mmap(NULL, pages * PAGE, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (file == MAP_FAILED || guest == MAP_FAILED) {
        die("mmap");
    }
    memset(file, 0x5a, pages * PAGE);
    for (int r = 0; r < ROUNDS; r++) {
        double start;
        uint64_t acc = 0;

        memset(guest, 0x5a, pages * PAGE);  /* guest RAM, resident */
        start = now_ns();
        for (size_t p = 0; p < pages; p += run) {
            if (mmap(guest + p * PAGE, run * PAGE, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_FIXED, fd, p * PAGE) == MAP_FAILED) {
                die("mmap over guest");
            }
            for (size_t q = p; q < p + run; q++) {
                acc += guest[q * PAGE];
            }
        }
        sink = acc;
        t[r] = (now_ns() - start) / pages;
        /* Back to one anonymous mapping for the next round. */
        if (mmap(guest, pages * PAGE, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) ==
            MAP_FAILED) {
            die("mmap back");
        }
    }
    munmap(file, pages * PAGE);
    munmap(guest, pages * PAGE);
    close(fd);
    return median(t);
}

typedef struct Pingpong {
    int to_peer, to_main;
    size_t count;
} Pingpong;

static void *pong(void *opaque)
{
    Pingpong *pp = opaque;
    uint64_t v;

    for (size_t i = 0; i < pp->count; i++) {
        if (read(pp->to_peer, &v, sizeof(v)) != sizeof(v) ||
            write(pp->to_main, &v, sizeof(v)) != sizeof(v)) {
            die("pong");
        }
    }
    return NULL;
}

static double wakeup_ns(void)
{
    Pingpong pp = { eventfd(0, 0), eventfd(0, 0), 20000 };
    double t[ROUNDS];

    if (pp.to_peer < 0 || pp.to_main < 0) {
        die("eventfd");
    }
    for (int r = 0; r < ROUNDS; r++) {
        pthread_t thread;
        uint64_t v = 1;
        double start = now_ns();

        pthread_create(&thread, NULL, pong, &pp);
        for (size_t i = 0; i < pp.count; i++) {
            if (write(pp.to_peer, &v, sizeof(v)) != sizeof(v) ||
                read(pp.to_main, &v, sizeof(v)) != sizeof(v)) {
                die("ping");
            }
        }
        pthread_join(thread, NULL);
        t[r] = (now_ns() - start) / pp.count / 2;
    }
    close(pp.to_peer);
    close(pp.to_main);
    return median(t);
}

int main(void)
{
    uint8_t *a = big_buffer(BIG, 0), *b = big_buffer(BIG, 0);
    size_t batch = NUKSM_CANDIDATES_MAX * sizeof(NuksmCandidate);

    printf("{\"hash\": %.1f", hash_ns(a));
    printf(", \"compare\": %.1f", compare_ns(a, b));
    printf(", \"copy\": %.1f", copy_ns(a, b));
    printf(", \"store_page\": %.1f", store_page_ns());
    printf(", \"socket\": %.1f", socket_ns(a, PAGE, 1u << 16));
    printf(", \"message\": %.2f", socket_ns(a, batch, 1u << 12) /
           NUKSM_CANDIDATES_MAX);
    printf(", \"remap_run\": %.1f", remap_ns(RUN_PAGES));
    printf(", \"remap_page\": %.1f", remap_ns(1));
    printf(", \"wakeup\": %.1f", wakeup_ns());
    make_chase((uint64_t *)a, BIG / sizeof(uint64_t));
    printf(", \"lookup\": %.1f}\n", lookup_ns((uint64_t *)a));
    return 0;
}
