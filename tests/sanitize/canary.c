/*
 * Canary of a sanitized build: "address" writes past a heap block,
 * "leak" loses one, "undefined" overflows a signed int.  Each must end
 * with a sanitizer report and a failed exit, as any such bug in nuksm
 * would under make check-sanitize (meson test expects them to fail).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *volatile lost;

static __attribute__((noinline)) void leak(void)
{
    lost = malloc(64);
    lost = NULL;
}

int main(int argc, char **argv)
{
    volatile int big = INT_MAX;
    volatile size_t size = 16;
    volatile char *block;

    if (argc != 2) {
        fprintf(stderr, "usage: %s address|leak|undefined\n", argv[0]);
        return 2;
    }
    if (strcmp(argv[1], "address") == 0) {
        block = malloc(size);
        block[size] = 1;
        printf("wrote past a %zu-byte block\n", size);
        free((char *)block);
    } else if (strcmp(argv[1], "leak") == 0) {
        leak();
        printf("lost a 64-byte block\n");
    } else if (strcmp(argv[1], "undefined") == 0) {
        printf("INT_MAX + 1 = %d\n", big + 1);
    } else {
        fprintf(stderr, "%s: unknown canary '%s'\n", argv[0], argv[1]);
        return 2;
    }
    return 0;
}
