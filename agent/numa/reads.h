/*
 * nuksmd read hotness: which merged pages each VM reads, from its READS.
 *
 * Merged pages are only ever read (a write ends their sharing), so the
 * placement policies see them hot only through reads.  QEMU samples the
 * reads of a VM's merged pages by read region (NUKSM_READ_REGION_PAGES
 * pages) and sends READS with the regions whose count changed: the
 * samples since one of its merged pages was seen read.  The agent keeps
 * that count for every region below NUKSM_IDLE_NEVER (client_read_idle()
 * answers for a page), the VM's read window and its counts of local and
 * remote reads (LIST_VMS, nuksmctl vms).  A region is hot while
 * policy_page_hot() says so of its count (--cold-windows).
 *
 * A VM may report only regions that hold some of the RAM its TOPOLOGY
 * reported: any other region gets it disconnected, and the message
 * changes nothing.  What a process keeps is bounded over all its VM
 * connections by READS_REGIONS_MAX, and nothing new is kept while the
 * agent's memory budget is used (conditions.h): such a region counts
 * as never read.
 *
 * When a READS turns a region of a VM with merged pages warm, or ends
 * its warmth (policy_page_warm(): read within POLICY_WARM_FACTOR times
 * --cold-windows samples), and the policy places copies by who reads
 * them (fair, priority), the agent asks for a re-placement pass
 * (relocate.h) READS_REPLACE_SECONDS later, so that the READS of all the
 * VMs sharing the copies are weighed together.  A region turns
 * warm with its first read, and stays warm for four times as long as it
 * stays hot: that, and the pass's delay, is the hysteresis of placement
 * by reads; the moves then go at --replace-rate.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_READS_H
#define NUKSMD_READS_H

#include "agent.h"
#include "ledger.h"

/*
 * Read regions one process keeps over all its VM connections: as many
 * as hold the most pages it may have merged (LEDGER_CLIENT_PAGES_MAX),
 * 16 bytes or so each in the table.
 */
#define READS_REGIONS_MAX (LEDGER_CLIENT_PAGES_MAX / NUKSM_READ_REGION_PAGES)

/*
 * A re-placement pass asked for by reads comes this long after the
 * first READS that asks, and at most this often: a VM's read samples
 * may change every read window (a second or so), the VMs sharing copies
 * report the same merges each in its own window, and a pass looks at
 * every merged page of the host.
 */
#define READS_REPLACE_SECONDS 5

/* READS from a VM: payload passed nuksm_msg_check. */
void reads_handle_reads(NuksmAgent *agent, NuksmClient *client,
                        uint32_t seq, const void *payload);

/* Forget a pass held back, at shutdown. */
void reads_stop(NuksmAgent *agent);

/* A joining VM's read hotness, none; freed by reads_client_destroy(). */
void reads_client_init(ClientReads *reads, uint64_t seed);
void reads_client_destroy(ClientReads *reads);

#endif /* NUKSMD_READS_H */
