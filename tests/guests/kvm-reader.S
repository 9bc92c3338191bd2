/*
 * A boot sector for the KVM test of read sampling
 * (tests/integration/test_kvm.py): in 32-bit protected mode it
 *   1. fills 4..6 MiB with 512 identical pages (dword i of each page is
 *      0x5a5a0000 | i) and prints 'F' on the debug console (port 0xe9);
 *   2. then reads the first dword of every page of that region, over and
 *      over, counting the sweeps in the dword at 16 MiB.
 * Once the pages merged, every read goes to a shared copy: the vCPU's
 * reads, through KVM, are what read sampling must catch.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#define REGION_START 0x00400000
#define REGION_END   0x00600000
#define SWEEPS       0x01000000
#define DEBUGCON     0xe9

    .code16
    .globl start
start:
    cli
    xor %ax, %ax
    mov %ax, %ds
    lgdtl gdt_desc
    mov %cr0, %eax
    or $1, %eax
    mov %eax, %cr0
    ljmpl $8, $protected

    .code32
protected:
    mov $16, %ax
    mov %ax, %ds
    mov %ax, %es
    mov %ax, %ss
    in $0x92, %al            /* fast A20 */
    or $2, %al
    out %al, $0x92

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
    movl $0, SWEEPS
    mov $'F', %al
    out %al, $DEBUGCON

sweep:
    mov $REGION_START, %esi
read_page:
    add (%esi), %edx
    add $4096, %esi
    cmp $REGION_END, %esi
    jne read_page
    incl SWEEPS
    jmp sweep

    .p2align 3
gdt:
    .quad 0
    .quad 0x00cf9a000000ffff     /* code: base 0, 4 GiB, 32-bit */
    .quad 0x00cf92000000ffff     /* data: base 0, 4 GiB */
gdt_desc:
    .word gdt_desc - gdt - 1
    .long gdt

    .org 510
    .byte 0x55, 0xaa
