/*
 * nuksmd merge domains.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <string.h>

#include "domains.h"
#include "log.h"

typedef struct Domain {
    char key[STORE_KEY_LEN + 1];
    char name[NUKSM_NAME_LEN];   /* "" until a VM of it joins */
    Quota quotas[QUOTA__COUNT];  /* its name's */
    uint32_t record_key;
    uint16_t id;
    unsigned users;
    DomainStats stats;
    char *limits[QUOTA__COUNT];  /* why it is at each quota, or NULL */
} Domain;

static void domain_free(gpointer p)
{
    Domain *dom = p;

    for (unsigned k = 0; k < QUOTA__COUNT; k++) {
        g_free(dom->limits[k]);
    }
    g_free(dom);
}

void domains_init(Domains *d, Store *store, const AssignConfig *assign,
                  const void *secret, size_t secret_len)
{
    d->by_key = g_hash_table_new_full(g_str_hash, g_str_equal, NULL,
                                      domain_free);
    d->by_id = g_ptr_array_new();
    d->secret = g_bytes_new(secret, secret_len);
    d->store = store;
    d->assign = assign;
}

/* Domain @dom is named @name: its quotas are that name's. */
static void set_name(const Domains *d, Domain *dom, const char *name)
{
    g_strlcpy(dom->name, name, sizeof(dom->name));
    for (unsigned k = 0; k < QUOTA__COUNT; k++) {
        dom->quotas[k] = assign_quota(d->assign, name, k);
    }
}

void domains_destroy(Domains *d)
{
    g_clear_pointer(&d->by_key, g_hash_table_destroy);
    g_clear_pointer(&d->by_id, g_ptr_array_unref);
    g_clear_pointer(&d->secret, g_bytes_unref);
}

/* HMAC-SHA256 of @name, as STORE_KEY_LEN hex digits. */
static void make_key(const Domains *d, const char *name, char *key)
{
    gsize secret_len;
    const guchar *secret = g_bytes_get_data(d->secret, &secret_len);
    g_autofree char *hex = g_compute_hmac_for_string(G_CHECKSUM_SHA256,
                                                     secret, secret_len,
                                                     name, -1);

    g_strlcpy(key, hex, STORE_KEY_LEN + 1);
}

/* The first 32 bits of @key, never 0. */
static uint32_t record_key_of(const char *key)
{
    char head[9];
    uint32_t value;

    g_strlcpy(head, key, sizeof(head));
    value = g_ascii_strtoull(head, NULL, 16);
    return value ? value : 1;
}

/* The domain of @key, with a new id and its files open; NULL if not. */
static Domain *domain_new(Domains *d, const char *key)
{
    Domain *dom;
    guint id;

    for (id = 0; id < d->by_id->len; id++) {
        if (!g_ptr_array_index(d->by_id, id)) {
            break;
        }
    }
    if (id > UINT16_MAX) {
        log_warning("too many merge domains (%u)", id);
        return NULL;
    }
    if (!store_open_domain(d->store, id, key)) {
        return NULL;
    }
    if (id == d->by_id->len) {
        g_ptr_array_add(d->by_id, NULL);
    }
    dom = g_new0(Domain, 1);
    g_strlcpy(dom->key, key, sizeof(dom->key));
    dom->record_key = record_key_of(key);
    dom->id = id;
    set_name(d, dom, "");
    g_ptr_array_index(d->by_id, id) = dom;
    g_hash_table_insert(d->by_key, dom->key, dom);
    return dom;
}

static bool get(Domains *d, const char *key, uint16_t *id)
{
    Domain *dom = g_hash_table_lookup(d->by_key, key);

    if (!dom) {
        dom = domain_new(d, key);
        if (!dom) {
            return false;
        }
    }
    dom->users++;
    *id = dom->id;
    return true;
}

static Domain *domain_of(const Domains *d, uint16_t id)
{
    Domain *dom = g_ptr_array_index(d->by_id, id);

    g_assert(dom);
    return dom;
}

bool domains_get(Domains *d, const char *name, uint16_t *id)
{
    char key[STORE_KEY_LEN + 1];

    make_key(d, name, key);
    if (!get(d, key, id)) {
        return false;
    }
    set_name(d, domain_of(d, *id), name);
    return true;
}

bool domains_get_key(Domains *d, const char *key, uint16_t *id)
{
    return get(d, key, id);
}

void domains_hold(Domains *d, uint16_t id)
{
    domain_of(d, id)->users++;
}

void domains_put(Domains *d, uint16_t id)
{
    Domain *dom = domain_of(d, id);

    if (--dom->users) {
        return;
    }
    /* No slot of it is in use: its files hold no page. */
    store_close_domain(d->store, id, true);
    g_ptr_array_index(d->by_id, id) = NULL;
    g_hash_table_remove(d->by_key, dom->key);
}

uint32_t domains_record_key(const Domains *d, uint16_t id)
{
    return domain_of(d, id)->record_key;
}

GArray *domains_ids(const Domains *d)
{
    GArray *ids = g_array_new(FALSE, FALSE, sizeof(uint16_t));

    for (guint i = 0; i < d->by_id->len; i++) {
        uint16_t id = i;

        if (g_ptr_array_index(d->by_id, i)) {
            g_array_append_val(ids, id);
        }
    }
    return ids;
}

DomainStats *domains_stats(Domains *d, uint16_t id)
{
    return &domain_of(d, id)->stats;
}

const char *domains_name(const Domains *d, uint16_t id)
{
    return domain_of(d, id)->name;
}

Quota domains_quota(const Domains *d, uint16_t id, QuotaKind kind)
{
    return domain_of(d, id)->quotas[kind];
}

const char *domains_limit(const Domains *d, uint16_t id, QuotaKind kind)
{
    return domain_of(d, id)->limits[kind];
}

void domains_set_limit(Domains *d, uint16_t id, QuotaKind kind,
                       char *reason)
{
    Domain *dom = domain_of(d, id);

    g_free(dom->limits[kind]);
    dom->limits[kind] = reason;
}

char *domains_limits_text(const Domains *d, uint16_t id)
{
    const Domain *dom = domain_of(d, id);
    GString *text = NULL;

    for (unsigned k = 0; k < QUOTA__COUNT; k++) {
        if (!dom->limits[k]) {
            continue;
        }
        if (text) {
            g_string_append_printf(text, "; %s", dom->limits[k]);
        } else {
            text = g_string_new(dom->limits[k]);
        }
    }
    return text ? g_string_free(text, FALSE) : NULL;
}
