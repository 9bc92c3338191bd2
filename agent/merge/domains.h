/*
 * nuksmd merge domains.  Only VMs of one domain ever share pages, and
 * each domain has store files of its own (host/store.h), so that the
 * read-only descriptors a VM holds show its own domain's pages and no
 * other's.  Which domain a VM is in is decided by core/assign.h.
 *
 * A domain has a small id for the index and the slots, and a key that
 * names it in the state directory: a keyed hash of its name, so that
 * the key outlives the agent (a restarted agent finds each domain's
 * files and records) and no client can pick a name whose key is another
 * domain's.  A domain lives while anything uses it: a connected or
 * detached VM of it (detached.h), or a slot of its store that is not
 * free yet.  When the last goes, its files, empty by then, are removed.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_DOMAINS_H
#define NUKSMD_DOMAINS_H

#include <stdbool.h>
#include <stdint.h>

#include <glib.h>

#include "assign.h"
#include "nuksm-proto.h"
#include "store.h"

/* What a VM of a domain is told of it (INFO with NUKSM_INFO_DOMAIN). */
typedef struct DomainStats {
    uint32_t vms;            /* connected VMs */
    uint64_t pages_shared;   /* its slots that pages map */
    uint64_t pages_sharing;  /* pages mapping them, less one a slot */
    uint64_t pages_moved;    /* its merged pages re-placement moved */
    uint64_t moves_pending;  /* its moves planned, not started yet */
    uint64_t store_pages[NUKSM_MAX_NODES];  /* its slots not free */
} DomainStats;

typedef struct Domains {
    GHashTable *by_key;      /* key -> Domain */
    GPtrArray *by_id;        /* id -> Domain, NULL if unused */
    GBytes *secret;          /* keys the names */
    Store *store;            /* holds each domain's files */
    const AssignConfig *assign;  /* each domain's quotas */
} Domains;

/*
 * Keys are made with @secret, the state directory's (store.h); quotas
 * come from @assign.
 */
void domains_init(Domains *d, Store *store, const AssignConfig *assign,
                  const void *secret, size_t secret_len);
void domains_destroy(Domains *d);

/*
 * The id of domain @name, taking a reference on it; its store files are
 * opened, or made.  False, logged, if they cannot be.
 */
bool domains_get(Domains *d, const char *name, uint16_t *id);

/*
 * The id of the domain whose files have key @key (store_list_domains()
 * after a restart), taking a reference.  False, logged, if its files
 * cannot be opened.
 */
bool domains_get_key(Domains *d, const char *key, uint16_t *id);

/* Another reference on @id, which has one. */
void domains_hold(Domains *d, uint16_t id);

/* Drop a reference: the last removes the domain and its files. */
void domains_put(Domains *d, uint16_t id);

/*
 * The 32 bits of domain @id's key that the store's slot records keep:
 * the same for every agent with the same secret, never 0.
 */
uint32_t domains_record_key(const Domains *d, uint16_t id);

DomainStats *domains_stats(Domains *d, uint16_t id);

/* The ids of the domains that live now, ascending (uint16_t). */
GArray *domains_ids(const Domains *d);

/* The name of @id: "" if no VM of it joined since nuksmd started. */
const char *domains_name(const Domains *d, uint16_t id);

/*
 * @id's quota of @kind (assign_quota() of its name; every domain's
 * until a VM of it joins).
 */
Quota domains_quota(const Domains *d, uint16_t id, QuotaKind kind);

/*
 * Why @id is at its quota of @kind (merge/quotas.h, merge/throttle.h),
 * or NULL.
 */
const char *domains_limit(const Domains *d, uint16_t id, QuotaKind kind);

/* @id is at its quota of @kind for @reason (taken), or no longer if NULL. */
void domains_set_limit(Domains *d, uint16_t id, QuotaKind kind,
                       char *reason);

/* Why @id is at any of its quotas, "; " between them, or NULL: g_free(). */
char *domains_limits_text(const Domains *d, uint16_t id);

#endif /* NUKSMD_DOMAINS_H */
