/*
 * nuksmd carries out a planned co-location move (APPLY_MOVE, from
 * `nuksmctl plan --apply`; administrators only).
 *
 * A move is carried out only as a fresh look plans it: a VM the plan no
 * longer moves, or moves elsewhere, or refuses to move (pinned by its
 * operator, no room, too small a gain) is refused with the reason.
 * --colocate-apply says which moves nuksmd may carry out:
 *
 *   none      none: the plan is only shown
 *   libvirt   a libvirt domain's (the default): nuksmd answers with the
 *             target node's CPUs and memory nodes, and nuksmctl moves it
 *             through libvirt (virsh numatune, vcpupin, emulatorpin), so
 *             that libvirt's own record of the domain stays true
 *   all       and any other QEMU's: nuksmd sets the CPU affinity of each
 *             of its threads to the target node's CPUs (restoring them
 *             all if one fails: a cpuset that forbids those CPUs says
 *             no), then moves its memory there with migrate_pages(2), in
 *             a thread of its own so that merging goes on meanwhile.
 *             Pages other processes map too (merged pages, shared
 *             memory) stay: migrate_pages moves a process's own pages
 *
 * Either way nuksmd acts on the VM's pid only while the pidfd it took
 * when the VM connected says that process still runs: checked right
 * before each thread's affinity changes, and before and after
 * migrate_pages.  Everything the plan weighs is the VM's claim, so a
 * VM may get its own move planned; a pid it left to another process
 * must never be moved for it.
 *
 * The VM then counts as on its new node, and the pins that hold it there
 * as nuksm's own, not its operator's (colocation.c), until its home node
 * changes.  nuksmd forgets this when it restarts: the pins then look
 * like its operator's, and the plan leaves the VM where it is.
 *
 * With logical nodes (--fake-numa), a node's memory nodes are the real
 * nodes its CPUs are on: on a one-node host nothing of the memory moves.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_APPLY_H
#define NUKSMD_APPLY_H

#include "agent.h"

void apply_handle_apply_move(NuksmAgent *agent, NuksmClient *client,
                             uint32_t seq, const void *payload);

#endif /* NUKSMD_APPLY_H */
