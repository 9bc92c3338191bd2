/*
 * nuksmd merge domains: the HELLO domain names of connected VMs, as small
 * ids for the index.  Only VMs of one domain ever share pages.  An id
 * lives while a VM of its domain is connected; every slot and index
 * entry of a domain belongs to such VMs, so none outlives its id.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_DOMAINS_H
#define NUKSMD_DOMAINS_H

#include <stdint.h>

#include <glib.h>

typedef struct Domains {
    GHashTable *by_name;     /* name -> Domain */
    GPtrArray *by_id;        /* id -> Domain, NULL if unused */
} Domains;

void domains_init(Domains *d);
void domains_destroy(Domains *d);

/* The id of @name, taking a reference on it. */
uint16_t domains_get(Domains *d, const char *name);

/* Drop a reference taken by domains_get(). */
void domains_put(Domains *d, uint16_t id);

#endif /* NUKSMD_DOMAINS_H */
