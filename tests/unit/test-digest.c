/*
 * Unit tests of nuksm page digests and zero-page detection.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <string.h>

#include <glib.h>

#include "nuksm-digest.h"

#define PAGE_SIZE 4096

/* Page-aligned like guest RAM, plus slack for unaligned views. */
static uint8_t page_buf[2 * PAGE_SIZE] __attribute__((aligned(PAGE_SIZE)));

static void fill_pattern(uint8_t *page, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        page[i] = (uint8_t)(i * 31 + 7);
    }
}

static void test_digest_known_answer(void)
{
    /*
     * QEMU and nuksmd must agree bit for bit, across versions: pin the
     * algorithm to XXH3-64 with seed 0 by its published empty-input value.
     */
    g_assert_cmphex(nuksm_page_digest("", 0), ==, 0x2d06800538d394c2ull);
}

static void test_digest_stable(void)
{
    uint8_t *page = page_buf;
    g_autofree uint8_t *copy = NULL;
    uint64_t d;

    fill_pattern(page, PAGE_SIZE);
    d = nuksm_page_digest(page, PAGE_SIZE);
    g_assert_cmphex(nuksm_page_digest(page, PAGE_SIZE), ==, d);

    /* Same content at another address gives the same digest. */
    copy = g_memdup2(page, PAGE_SIZE);
    g_assert_cmphex(nuksm_page_digest(copy, PAGE_SIZE), ==, d);
    memmove(page_buf + 1, page_buf, PAGE_SIZE);
    g_assert_cmphex(nuksm_page_digest(page_buf + 1, PAGE_SIZE), ==, d);
}

static void test_digest_bit_flip(void)
{
    static const size_t offsets[] = { 0, 1, 63, 64, 2048, PAGE_SIZE - 1 };
    uint8_t *page = page_buf;
    uint64_t d;

    fill_pattern(page, PAGE_SIZE);
    d = nuksm_page_digest(page, PAGE_SIZE);
    for (size_t i = 0; i < G_N_ELEMENTS(offsets); i++) {
        for (unsigned bit = 0; bit < 8; bit++) {
            page[offsets[i]] ^= 1u << bit;
            g_assert_cmphex(nuksm_page_digest(page, PAGE_SIZE), !=, d);
            page[offsets[i]] ^= 1u << bit;
        }
    }
    g_assert_cmphex(nuksm_page_digest(page, PAGE_SIZE), ==, d);

    /* The length is part of what is hashed. */
    memset(page, 0, PAGE_SIZE);
    g_assert_cmphex(nuksm_page_digest(page, PAGE_SIZE), !=,
                    nuksm_page_digest(page, PAGE_SIZE - 1));
}

static uint64_t sampled(const uint8_t *page, unsigned lines)
{
    return nuksm_sample_digest(nuksm_sample_continue(page,
                                                     nuksm_sample_start(),
                                                     0, lines));
}

static void test_sample_progressive(void)
{
    uint8_t *page = page_buf;

    fill_pattern(page, PAGE_SIZE);
    for (unsigned lines = 1; lines <= NUKSM_PAGE_LINES; lines *= 2) {
        uint64_t weak = nuksm_sample_continue(page, nuksm_sample_start(),
                                              0, lines / 2);

        /* Continuing a weaker digest gives the stronger one. */
        g_assert_cmphex(nuksm_sample_digest(
                            nuksm_sample_continue(page, weak, lines / 2,
                                                  lines)),
                        ==, sampled(page, lines));
        /* The same content elsewhere gives the same digest. */
        memmove(page_buf + PAGE_SIZE, page, PAGE_SIZE);
        g_assert_cmphex(sampled(page_buf + PAGE_SIZE, lines), ==,
                        sampled(page, lines));
    }
}

/*
 * A change in a line read changes the digest; a change elsewhere does
 * not: the first 4 lines read are lines 0, 32, 16 and 48.
 */
static void test_sample_lines(void)
{
    static const unsigned read[] = { 0, 32, 16, 48 };
    static const unsigned unread[] = { 1, 8, 24, 63 };
    uint8_t *page = page_buf;
    uint64_t d;

    fill_pattern(page, PAGE_SIZE);
    d = sampled(page, 4);
    for (size_t i = 0; i < G_N_ELEMENTS(read); i++) {
        for (unsigned byte = 0; byte < 64; byte += 21) {
            page[read[i] * 64 + byte] ^= 0x10;
            g_assert_cmphex(sampled(page, 4), !=, d);
            page[read[i] * 64 + byte] ^= 0x10;
        }
    }
    for (size_t i = 0; i < G_N_ELEMENTS(unread); i++) {
        uint64_t every_line = sampled(page, NUKSM_PAGE_LINES);

        page[unread[i] * 64 + 5] ^= 0x10;
        g_assert_cmphex(sampled(page, 4), ==, d);
        /* A digest of every line sees it. */
        g_assert_cmphex(sampled(page, NUKSM_PAGE_LINES), !=, every_line);
        page[unread[i] * 64 + 5] ^= 0x10;
    }
    g_assert_cmphex(sampled(page, 4), ==, d);

    /* More lines, another digest, even of the same content. */
    g_assert_cmphex(sampled(page, 8), !=, d);
}

static void test_zero_page(void)
{
    uint8_t *page = page_buf;

    memset(page, 0, PAGE_SIZE);
    g_assert_true(nuksm_page_is_zero(page, PAGE_SIZE));
    g_assert_true(nuksm_page_is_zero(page, 0));
}

static void test_zero_every_byte(void)
{
    uint8_t *page = page_buf;

    /* A single non-zero byte anywhere, including the last, is found. */
    memset(page, 0, PAGE_SIZE);
    for (size_t i = 0; i < PAGE_SIZE; i++) {
        page[i] = 0x80;
        g_assert_false(nuksm_page_is_zero(page, PAGE_SIZE));
        page[i] = 0;
    }
    page[PAGE_SIZE - 1] = 1;
    g_assert_false(nuksm_page_is_zero(page, PAGE_SIZE));
    g_assert_true(nuksm_page_is_zero(page, PAGE_SIZE - 1));
}

static void test_zero_unaligned(void)
{
    /* Every start offset and odd lengths take the head and tail paths. */
    memset(page_buf, 0, sizeof(page_buf));
    for (size_t start = 0; start < 16; start++) {
        for (size_t len = 1; len < 200; len++) {
            uint8_t *p = page_buf + start;

            g_assert_true(nuksm_page_is_zero(p, len));
            p[len - 1] = 1;
            g_assert_false(nuksm_page_is_zero(p, len));
            g_assert_true(nuksm_page_is_zero(p, len - 1));
            p[len - 1] = 0;
            p[0] = 1;
            g_assert_false(nuksm_page_is_zero(p, len));
            p[0] = 0;
            /* Bytes just outside the range do not count. */
            p[len] = 1;
            g_assert_true(nuksm_page_is_zero(p, len));
            p[len] = 0;
        }
    }
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/digest/known-answer", test_digest_known_answer);
    g_test_add_func("/digest/stable", test_digest_stable);
    g_test_add_func("/digest/bit-flip", test_digest_bit_flip);
    g_test_add_func("/digest/sample-progressive", test_sample_progressive);
    g_test_add_func("/digest/sample-lines", test_sample_lines);
    g_test_add_func("/digest/zero-page", test_zero_page);
    g_test_add_func("/digest/zero-every-byte", test_zero_every_byte);
    g_test_add_func("/digest/zero-unaligned", test_zero_unaligned);
    return g_test_run();
}
