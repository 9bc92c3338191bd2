/*
 * A boot sector for KVM tests (tests/integration/test_kvm.py): Linux
 * guests hang under nested KVM, this does not.  In 32-bit protected mode
 * it
 *   1. fills 4..6 MiB with 512 identical pages (dword i of each page is
 *      0x5a5a0000 | i), empties the keyboard controller and prints 'F' on
 *      the debug console (port 0xe9);
 *   2. waits for a key (QMP send-key), writes 0xc0de0000 | n to the first
 *      dword of every other page n of that region and prints 'W';
 *   3. increments the first dword of each of the 64 pages at 16 MiB,
 *      forever.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#define REGION_START 0x00400000
#define REGION_END   0x00600000
#define HOT_START    0x01000000
#define HOT_END      0x01040000
#define DEBUGCON     0xe9

#include "protected-mode.inc"

    mov $REGION_START, %edi
fill_page:
    xor %ecx, %ecx
fill_dword:
    mov %ecx, %eax
    or $0x5a5a0000, %eax
    mov %eax, (%edi, %ecx, 4)
    inc %ecx
    cmp $1024, %ecx
    jne fill_dword
    add $4096, %edi
    cmp $REGION_END, %edi
    jne fill_page

drain:                       /* what the firmware left in the controller */
    in $0x64, %al
    test $1, %al
    jz filled
    in $0x60, %al
    jmp drain
filled:
    mov $'F', %al
    out %al, $DEBUGCON

wait_key:
    in $0x64, %al
    test $1, %al
    jz wait_key
    in $0x60, %al

    mov $REGION_START, %edi
    xor %ebx, %ebx
write_every_other:
    mov %ebx, %eax
    or $0xc0de0000, %eax
    mov %eax, (%edi)
    add $8192, %edi
    add $2, %ebx
    cmp $REGION_END, %edi
    jb write_every_other
    mov $'W', %al
    out %al, $DEBUGCON

hot:
    mov $HOT_START, %edi
hot_page:
    incl (%edi)
    add $4096, %edi
    cmp $HOT_END, %edi
    jne hot_page
    jmp hot

    .org 510
    .byte 0x55, 0xaa
