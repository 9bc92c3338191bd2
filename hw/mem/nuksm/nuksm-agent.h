/*
 * nuksm: the connection to the host agent, nuksmd (nuksm-agent.c).
 * Main loop (BQL) only; messages to the agent go through the outbox
 * (nuksm-outbox.h).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef HW_MEM_NUKSM_AGENT_H
#define HW_MEM_NUKSM_AGENT_H

#include "nuksm.h"

/* When the object is created: no connection yet. */
void nuksm_agent_init(Nuksm *s);
/* When it is complete: connect, and reconnect whenever the agent goes. */
void nuksm_agent_start(Nuksm *s);
void nuksm_agent_cleanup(Nuksm *s);
/* Tell the agent our new priority property, if connected. */
void nuksm_agent_send_priority(Nuksm *s);
/*
 * Send what waits for the agent and read what it sent, waiting up to
 * @timeout_ms for it: for a thread that keeps the main loop from
 * running, as an incoming migration's load does.  True if something
 * came.
 */
bool nuksm_agent_pump(Nuksm *s, int timeout_ms);
/*
 * From a QMP coroutine: send a request and wait for its reply, of
 * @reply_type and @reply_len bytes, a disconnection or a timeout (1 s).
 */
int coroutine_fn nuksm_agent_request(Nuksm *s, NuksmMsgType type,
                                     const void *payload, uint32_t len,
                                     NuksmMsgType reply_type,
                                     void *reply, uint32_t reply_len,
                                     Error **errp);

#endif /* HW_MEM_NUKSM_AGENT_H */
