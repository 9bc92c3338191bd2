/*
 * nuksmd merge domains.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <string.h>

#include "clients.h"
#include "domains.h"

/* Every VM could bring its own domain: ids must cover CLIENTS_MAX. */
_Static_assert(CLIENTS_MAX < UINT16_MAX, "domain ids are 16 bits");

typedef struct Domain {
    char *name;
    uint16_t id;
    uint32_t key;
    unsigned users;
} Domain;

static void domain_free(gpointer p)
{
    Domain *dom = p;

    g_free(dom->name);
    g_free(dom);
}

void domains_init(Domains *d, const void *secret, size_t secret_len)
{
    d->by_name = g_hash_table_new_full(g_str_hash, g_str_equal, NULL,
                                       domain_free);
    d->by_id = g_ptr_array_new();
    d->secret = g_bytes_new(secret, secret_len);
}

void domains_destroy(Domains *d)
{
    g_clear_pointer(&d->by_name, g_hash_table_destroy);
    g_clear_pointer(&d->by_id, g_ptr_array_unref);
    g_clear_pointer(&d->secret, g_bytes_unref);
}

/* HMAC-SHA256 of @name, cut to 32 bits. */
static uint32_t make_key(const Domains *d, const char *name)
{
    gsize secret_len, len;
    const guchar *secret = g_bytes_get_data(d->secret, &secret_len);
    g_autoptr(GHmac) hmac = g_hmac_new(G_CHECKSUM_SHA256, secret,
                                       secret_len);
    uint8_t digest[32];
    uint32_t key;

    len = sizeof(digest);
    g_hmac_update(hmac, (const guchar *)name, strlen(name));
    g_hmac_get_digest(hmac, digest, &len);
    memcpy(&key, digest, sizeof(key));
    return key ? key : 1;
}

uint16_t domains_get(Domains *d, const char *name)
{
    Domain *dom = g_hash_table_lookup(d->by_name, name);
    guint id;

    if (dom) {
        dom->users++;
        return dom->id;
    }
    for (id = 0; id < d->by_id->len; id++) {
        if (!g_ptr_array_index(d->by_id, id)) {
            break;
        }
    }
    if (id == d->by_id->len) {
        g_ptr_array_add(d->by_id, NULL);
    }
    dom = g_new0(Domain, 1);
    dom->name = g_strdup(name);
    dom->id = id;
    dom->key = make_key(d, name);
    dom->users = 1;
    g_ptr_array_index(d->by_id, id) = dom;
    g_hash_table_insert(d->by_name, dom->name, dom);
    return id;
}

uint32_t domains_key(const Domains *d, uint16_t id)
{
    const Domain *dom = g_ptr_array_index(d->by_id, id);

    return dom->key;
}

void domains_put(Domains *d, uint16_t id)
{
    Domain *dom = g_ptr_array_index(d->by_id, id);

    if (--dom->users == 0) {
        g_ptr_array_index(d->by_id, id) = NULL;
        g_hash_table_remove(d->by_name, dom->name);
    }
}
