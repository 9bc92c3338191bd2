/*
 * nuksmd merge domains.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "clients.h"
#include "domains.h"

/* Every VM could bring its own domain: ids must cover CLIENTS_MAX. */
_Static_assert(CLIENTS_MAX < UINT16_MAX, "domain ids are 16 bits");

typedef struct Domain {
    char *name;
    uint16_t id;
    unsigned users;
} Domain;

static void domain_free(gpointer p)
{
    Domain *dom = p;

    g_free(dom->name);
    g_free(dom);
}

void domains_init(Domains *d)
{
    d->by_name = g_hash_table_new_full(g_str_hash, g_str_equal, NULL,
                                       domain_free);
    d->by_id = g_ptr_array_new();
}

void domains_destroy(Domains *d)
{
    g_clear_pointer(&d->by_name, g_hash_table_destroy);
    g_clear_pointer(&d->by_id, g_ptr_array_unref);
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
    dom->users = 1;
    g_ptr_array_index(d->by_id, id) = dom;
    g_hash_table_insert(d->by_name, dom->name, dom);
    return id;
}

void domains_put(Domains *d, uint16_t id)
{
    Domain *dom = g_ptr_array_index(d->by_id, id);

    if (--dom->users == 0) {
        g_ptr_array_index(d->by_id, id) = NULL;
        g_hash_table_remove(d->by_name, dom->name);
    }
}
