/*
 * A boot sector for the benchmark of huge pages (bench/huge_pages.py):
 * in 32-bit protected mode without paging, so that the only address
 * translation is the host's (KVM's EPT, on 2 MiB pages where the host
 * gives guest RAM huge pages, on 4 KiB pages where a merge split them),
 * it
 *   1. fills 128 MiB from 4 MiB: 32 hot stretches of 2 MiB, then 32
 *      cold ones.  Dword i of page p is SALT << 25 | p << 10 | i, where
 *      SALT is ALIKE for a page alike in every VM (every page of the
 *      cold stretches, the first DUPS of each hot one: duplicates that
 *      cluster in cold memory and scatter thinly through hot memory, as
 *      page cache and application heaps do) and, for the VM's own
 *      pages, the low 7 bits of the byte at offset 509 (GUEST_BYTE_AT,
 *      1..127 but ALIKE; the benchmark patches it per VM); prints 'F' on
 *      the debug console (port 0xe9);
 *   2. then, if bit 7 of that byte is set, reads dwords at random
 *      (xorshift32) in the hot stretches, each address depending on the
 *      dword read before, so that every TLB miss costs the guest its
 *      walk, and counts its reads, in units of 2^14, in the dword at
 *      3 MiB; else halts.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#define REGION_START 0x00400000
#define HOT_END      0x04400000      /* 32 hot stretches of 2 MiB */
#define REGION_END   0x08400000      /* and 32 cold ones */
#define HOT_MASK     0x03fffffc      /* a dword of the hot stretches */
#define DUPS         8               /* alike pages of a hot stretch */
#define ALIKE        0x2d
#define READS        0x00300000      /* reads done, in units of 2^14 */
#define DEBUGCON     0xe9

#include "protected-mode.inc"

    mov $REGION_START, %edi
    xor %ebx, %ebx              /* page index p */
fill_page:
    cmp $HOT_END, %edi
    jae alike                   /* a cold page */
    mov %ebx, %eax
    and $511, %eax
    cmp $DUPS, %eax
    jb alike                    /* one of a hot stretch's first DUPS */
    movzbl guest_byte, %edx
    and $0x7f, %edx
    jmp salted
alike:
    mov $ALIKE, %edx
salted:
    shl $25, %edx
    mov %ebx, %eax
    shl $10, %eax
    or %eax, %edx
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
    movl $0, READS
    mov $'F', %al
    out %al, $DEBUGCON
    testb $0x80, guest_byte
    jz idle

    mov $0x2545f491, %eax       /* xorshift32's state */
    xor %ecx, %ecx              /* reads since READS last went up */
read:
    mov %eax, %edx
    shl $13, %edx
    xor %edx, %eax
    mov %eax, %edx
    shr $17, %edx
    xor %edx, %eax
    mov %eax, %edx
    shl $5, %edx
    xor %edx, %eax
    mov %eax, %esi
    and $HOT_MASK, %esi
    mov REGION_START(%esi), %edx
    and $0, %edx                /* not an idiom: the next address */
    add %edx, %eax              /* waits for this read */
    inc %ecx
    test $0x3fff, %ecx
    jnz read
    incl READS
    jmp read
idle:
    hlt
    jmp idle

    .org 509
guest_byte:                     /* GUEST_BYTE_AT: 0x80 reads | salt */
    .byte 0x81
    .byte 0x55, 0xaa
