/*
 * nuksmd effects: what handling an event decided to do, carried out in
 * one place once the event is done.
 *
 * The modules that keep the books send and free nothing on their own:
 * they queue entries for VMs in the outbox (outbox.h), mark clients dead
 * (transport.h) and queue unused slots to be freed (ledger_free()).
 * effects_settle() then sends the queued batches (which may find more
 * clients dead), frees the dead clients (which queues slots but sends
 * nothing) and punches the queued slots out of the store, in that order,
 * so that the outbox never points to a freed client; the slots kept as
 * orphans instead are looked at later (recovery_watch_orphans()).
 *
 * The server flushes (sends and frees, but frees no client) after each
 * message of a client, so that a message's effects are out before the
 * next is read, and settles after each batch of them; for timers and
 * process watches, a GSource settles before the main loop polls again.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_EFFECTS_H
#define NUKSMD_EFFECTS_H

#include "agent.h"

void effects_settle(NuksmAgent *agent);

/*
 * effects_settle() but for freeing the dead clients: a client being
 * served stays valid.
 */
void effects_flush(NuksmAgent *agent);

/* Settle whatever a timer or a process watch left, before each poll. */
void effects_start(NuksmAgent *agent);
void effects_stop(NuksmAgent *agent);

#endif /* NUKSMD_EFFECTS_H */
