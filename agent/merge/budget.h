/*
 * nuksmd scan budget: one budget of CPU for every VM's scanner, shared by
 * what each yields (core/shares.h), as one ksmd scans for all of a
 * host's VMs.
 *
 * Every BUDGET_LOOK_S the agent looks at what each VM did since the
 * last look: the pages it merged (MERGED), the CPU that took (its
 * scanner's, from VM_STATS, and the agent's for its messages) and the
 * signs of new duplicates: I/O hints, writes that broke merged pages
 * and writes to pages tracked as stable (VM_STATS), the candidates its
 * scanner found (not those WANTED asked for again), and its process's
 * memory in RAM growing by BUDGET_GROWTH_PAGES or more
 * (host/resident.h: what its guest writes where it never wrote; read
 * for BUDGET_RESIDENT_PER_LOOK VMs a look, in turn).  From
 * that each VM asks for a part (NuksmShareReasonId): new until its
 * second pass is over, yielding while it merged in the last
 * BUDGET_QUIET_LOOKS looks, signalled while signs come (once more than
 * BUDGET_DOUBT_LOOKS looks signalled went without a merge, not until
 * as many looks without signs wore that off), resting otherwise, idle
 * while it does not scan.  It looks again soon
 * (BUDGET_SOON_MS) after a VM joins, its own budget or state changes,
 * or a sign comes for a VM that rests: a resting VM written into gets
 * its part at once.  Its part is sent to it (SHARE) when it changes by
 * more than an eighth or its reason or pace changes; QEMU keeps its
 * scanner within the smaller of the part and its own governor's
 * budget, which stays a cap.
 *
 * --scan-budget=0 turns the budget off: every VM works within its own
 * governor's budget, as before protocol 18.
 *
 * nuksmctl run (SET_RUN) changes --run at run time; nuksmctl prune
 * (PRUNE) holds a merge domain, or the host, and has its VMs unmerge
 * every merged page, at a bounded rate, until SET_RUN.
 *
 * --run says when merging works at all: always (the default), never
 * (off), or while memory is short (pressure, host/pressure.h): while
 * the memory available is below --pressure-available of the total or
 * tasks stall on memory more than --pressure-stall of the time; it
 * ends once BUDGET_SPARE_PM more is available and they stall less than
 * half that.  While merging rests (held), every VM is told so (SHARE
 * reason HELD, the least part, the longest pace): its scanner and
 * samplers all but stop, what is merged stays merged, and the next
 * look that finds memory short, within BUDGET_LOOK_S, lets them go.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_BUDGET_H
#define NUKSMD_BUDGET_H

#include "agent.h"

#define BUDGET_LOOK_S 2
#define BUDGET_SOON_MS 100
#define BUDGET_QUIET_LOOKS 3
#define BUDGET_DOUBT_LOOKS 3
#define BUDGET_SPARE_PM 50
#define BUDGET_GROWTH_PAGES 256
/*
 * VMs whose memory in RAM one periodic look reads, at most (each VM in
 * its turn): an idle host's cost must grow no faster than its VMs, and
 * memory growing is seen within as many looks as there are times this
 * many VMs.
 */
#define BUDGET_RESIDENT_PER_LOOK 32

/* Share the budget, and merge when @cfg says, from now on. */
void budget_start(NuksmAgent *agent, const BudgetConfig *cfg);
void budget_stop(NuksmAgent *agent);

/* Merging rests host-wide now (run=off, or pressure with memory to spare). */
bool budget_held(const NuksmAgent *agent);

/* Merging rests for @vm now: host-wide, or in its domain since a PRUNE. */
bool budget_vm_held(const NuksmAgent *agent, const NuksmClient *vm);

/* SET_RUN by @by: merge when @run says from now on; prunes end. */
void budget_set_run(NuksmAgent *agent, NuksmRunId run, const char *by);

/*
 * PRUNE by @by: merging rests in merge domain @domain, or host-wide for
 * "" (run=off), and each of its VMs is told to unmerge every merged page
 * at most @rate pages per second.  Returns how many VMs were told.
 */
uint32_t budget_prune(NuksmAgent *agent, const char *domain, uint32_t rate,
                      const char *by);

/* A VM joined, or its own budget or state changed: look again soon. */
void budget_changed(NuksmAgent *agent);

/* A sign of new duplicates came for @vm: look again soon if it rests. */
void budget_signed(NuksmAgent *agent, const NuksmClient *vm);

/*
 * The budget, when merging works and why for INFO, whatever its scope;
 * with the host's, how many VMs were last told they rest, are idle or
 * are held.
 */
void budget_info(NuksmAgent *agent, NuksmMsgInfo *info);

/* What @vm was last told (LIST_VMS, metrics): OFF before any SHARE. */
void budget_told(const NuksmClient *vm, NuksmMsgShare *share);

#endif /* NUKSMD_BUDGET_H */
