/*
 * nuksmd request handling: validation, handshake and one handler per
 * request type.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_DISPATCH_H
#define NUKSMD_DISPATCH_H

#include <stddef.h>

#include "agent.h"

/*
 * Handle one datagram of @size bytes received from @client; @buf holds
 * its first min(@size, NUKSM_MSG_MAX) bytes.  Protocol violations get an
 * ERROR reply and mark @client dead.  Returns true if it was a merge
 * message of a VM, whose cost the VM bears (dispatch_charge()).
 */
bool dispatch_message(NuksmAgent *agent, NuksmClient *client,
                      const void *buf, size_t size);

/*
 * Receiving and handling merge messages of VM @client cost nuksmd @ns of
 * CPU: the VM is told in CHARGE, by the millisecond, to count it in its
 * own budget (max-cpu).
 */
void dispatch_charge(NuksmClient *client, uint64_t ns);

#endif /* NUKSMD_DISPATCH_H */
