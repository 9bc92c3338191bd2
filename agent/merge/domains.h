/*
 * nuksmd merge domains: the HELLO domain names of connected VMs, as small
 * ids for the index.  Only VMs of one domain ever share pages.  An id
 * lives while a VM of its domain is connected or detached (its process
 * runs on after its connection went, keeping its merged pages: see
 * detached.h); every slot and index entry of a domain belongs to such
 * VMs, so none outlives its id.
 * A domain's key outlives it and the agent: it names the domain in the
 * store's records (store.h).
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
    GBytes *secret;          /* keys the names */
} Domains;

/* Keys are made with @secret, the state directory's (store.h). */
void domains_init(Domains *d, const void *secret, size_t secret_len);
void domains_destroy(Domains *d);

/* The id of @name, taking a reference on it. */
uint16_t domains_get(Domains *d, const char *name);

/*
 * The key of domain @id: the same for every agent with the same secret,
 * never 0.  A keyed hash, so that no client can pick a name whose key is
 * another domain's.
 */
uint32_t domains_key(const Domains *d, uint16_t id);

/* Drop a reference taken by domains_get(). */
void domains_put(Domains *d, uint16_t id);

#endif /* NUKSMD_DOMAINS_H */
