/*
 * A boot sector for the KVM tests of read sampling
 * (tests/integration/test_kvm.py): in 32-bit protected mode it
 *   1. fills five regions P0..P4 of 2 MiB from 4 MiB (pages 0..2559 of
 *      it; dword i of page p is 0x5a000000 | p << 10 | i: every page its
 *      own content, the same in every VM) and prints 'F' on the debug
 *      console (port 0xe9);
 *   2. then reads the first dword of every page of the regions whose bit
 *      is set in the byte at offset 509 of this sector (READ_MASK; the
 *      tests patch it per VM), over and over, counting the sweeps in
 *      the dword at 16 MiB.
 * Once the pages merged, every read goes to a shared copy: the vCPU's
 * reads, through KVM, are what read sampling must catch.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#define REGION_START 0x00400000
#define REGION_SIZE  0x00200000
#define REGION_END   0x00e00000      /* five regions */
#define SWEEPS       0x01000000
#define DEBUGCON     0xe9

#include "protected-mode.inc"

    mov $REGION_START, %edi
    xor %ebx, %ebx              /* page index p */
fill_page:
    mov %ebx, %edx
    shl $10, %edx
    or $0x5a000000, %edx
    xor %ecx, %ecx
fill_dword:
    mov %edx, %eax
    or %ecx, %eax
    mov %eax, (%edi, %ecx, 4)
    inc %ecx
    cmp $1024, %ecx
    jne fill_dword
    add $4096, %edi
    inc %ebx
    cmp $REGION_END, %edi
    jne fill_page
    movl $0, SWEEPS
    mov $'F', %al
    out %al, $DEBUGCON

    movzbl read_mask, %ebx
sweep:
    mov $REGION_START, %esi
    mov $1, %ecx                /* the bit of the region at %esi */
region:
    test %ecx, %ebx
    jz next_region
    lea REGION_SIZE(%esi), %edi
read_page:
    add (%esi), %edx
    add $4096, %esi
    cmp %edi, %esi
    jne read_page
    jmp region_done
next_region:
    add $REGION_SIZE, %esi
region_done:
    shl $1, %ecx
    cmp $REGION_END, %esi
    jne region
    incl SWEEPS
    jmp sweep

    .org 509
read_mask:                      /* READ_MASK: regions read, bit k: Pk */
    .byte 0x1f
    .byte 0x55, 0xaa
