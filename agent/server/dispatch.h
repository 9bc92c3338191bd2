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
 * ERROR reply and mark @client dead.
 */
void dispatch_message(NuksmAgent *agent, NuksmClient *client,
                      const void *buf, size_t size);

#endif /* NUKSMD_DISPATCH_H */
