/*
 * nuksmd CPU quotas: how much of nuksmd's one thread the VMs of one merge
 * domain may take while VMs of another domain want it too.
 *
 * Each message of a VM is charged to its domain as server.c handles it:
 * the CPU it took, which the VM is also told (CHARGE).  A domain has a
 * balance that fills at its cpu-max (default 50% of a core) up to what
 * THROTTLE_PERIOD_US gives it, and that its messages drain.  Once it
 * is below zero while a VM of another domain was served within the last
 * THROTTLE_PERIOD_US, its VMs' sockets are left unread until the balance
 * is back at zero: at most THROTTLE_PERIOD_US at a time, far below a
 * QEMU's request timeout.  The domain waits; nothing it sent is lost or
 * refused.  Alone, a domain takes what it needs and runs up no debt: the
 * quota never leaves the agent idle while somebody waits.
 *
 * The agent as a whole takes at most --max-cpu of a core for its VMs'
 * messages (default 100%: no cap), a balance alike: past it, every VM's
 * socket is left unread until the balance is back at zero, whether or
 * not other domains wait.
 *
 * A domain whose sockets were left unread more than
 * THROTTLE_LIMITED_PERCENT of a second is limited, which its VMs alone
 * are told (CONDITION with NUKSM_COND_DOMAIN_QUOTA: query-nuksm's limit
 * domain-quota), logged once when it starts and once when it ends: after
 * a second in which its sockets were never left unread.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_THROTTLE_H
#define NUKSMD_THROTTLE_H

#include "agent.h"

/* The longest a domain's sockets are left unread at a time, in us. */
#define THROTTLE_PERIOD_US (100 * 1000)

/* Left unread more than this part of a second, in percent: limited. */
#define THROTTLE_LIMITED_PERCENT 25

/* Which VMs are to be left unread, and until when. */
typedef struct ThrottleVerdict {
    gint64 until;            /* monotonic us; 0: none */
    bool every_vm;           /* every VM (--max-cpu), else its domain's */
} ThrottleVerdict;

/*
 * Charge @ns of nuksmd's CPU to @client, a VM that joined, to its domain
 * and to the agent.
 */
ThrottleVerdict throttle_charge(NuksmAgent *agent, NuksmClient *client,
                                uint64_t ns);

/* Stop looking at the limited domains. */
void throttle_destroy(NuksmAgent *agent);

#endif /* NUKSMD_THROTTLE_H */
