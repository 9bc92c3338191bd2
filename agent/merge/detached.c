/*
 * nuksmd detached VMs.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <inttypes.h>
#include <unistd.h>

#include <glib-unix.h>

#include "detached.h"
#include "ledger.h"
#include "log.h"

typedef struct Detached {
    NuksmAgent *agent;
    pid_t pid;
    int pidfd;
    guint watch;             /* pidfd readable: the process exited */
    uint16_t domain_id;      /* a domains_get() reference */
    PageRefs pages;          /* page -> SlotId, PAGE_MAPPED or MERGING */
} Detached;

/* Forget @d; its references must have been dropped or handed over. */
static void detached_free(NuksmAgent *agent, Detached *d)
{
    g_queue_remove(&agent->detached, d);
    if (d->watch) {
        g_source_remove(d->watch);
    }
    close(d->pidfd);
    pagerefs_destroy(&d->pages);
    g_free(d);
}

/* The process is gone: nobody maps the pages any more. */
static void detached_drop(NuksmAgent *agent, Detached *d)
{
    size_t parked = pagerefs_entries(&d->pages);

    log_info("pid %ld exited: dropping the %zu parked page%s of its "
             "connection", (long)d->pid, parked, parked == 1 ? "" : "s");
    ledger_release(agent, &d->pages, false);
    domains_put(&agent->domains, d->domain_id);
    detached_free(agent, d);
}

static gboolean on_process_exit(int fd, GIOCondition cond, gpointer opaque)
{
    Detached *d = opaque;
    NuksmAgent *agent = d->agent;

    d->watch = 0;
    detached_drop(agent, d);
    return G_SOURCE_REMOVE;
}

/*
 * @client leaves without a watch on its process: the slots that only its
 * pages used become orphans, freed once no process maps them (clients
 * leave in effects_settle(), which then has the orphans looked at).
 */
static void leave_unwatched(NuksmAgent *agent, NuksmClient *client)
{
    PageRefs keep;

    pagerefs_init(&keep, client->pages.seed);
    ledger_client_leave(agent, client, &keep);
    ledger_release(agent, &keep, true);
}

void detached_client_leave(NuksmAgent *agent, NuksmClient *client)
{
    uint64_t merged = client->merged_pages;
    Detached *d;

    if (client->pidfd < 0 || client->pid <= 0) {
        leave_unwatched(agent, client);
        return;
    }
    if (!pidfd_process_alive(client->pidfd)) {
        ledger_client_leave(agent, client, NULL);
        return;
    }
    if (agent->detached.length >= DETACHED_MAX) {
        log_warning("%s: too many detached VMs (limit %u): the pages only "
                    "it merged stay in the store until its process no "
                    "longer maps them", client->label, DETACHED_MAX);
        leave_unwatched(agent, client);
        return;
    }

    d = g_new0(Detached, 1);
    d->agent = agent;
    d->pid = client->pid;
    d->domain_id = client->domain_id;
    domains_hold(&agent->domains, d->domain_id);
    pagerefs_init(&d->pages, client->pages.seed);
    ledger_client_leave(agent, client, &d->pages);
    if (!pagerefs_entries(&d->pages)) {
        domains_put(&agent->domains, d->domain_id);
        g_free(d);
        return;
    }
    d->pidfd = client->pidfd;
    client->pidfd = -1;
    g_clear_handle_id(&client->exit_watch, g_source_remove);
    d->watch = g_unix_fd_add(d->pidfd, G_IO_IN, on_process_exit, d);
    g_queue_push_tail(&agent->detached, d);
    log_info("%s: its process runs on, keeping its %" PRIu64 " merged "
             "page%s and %" PRIu64 " unanswered MERGE%s until it "
             "reconnects or exits", client->label, merged,
             merged == 1 ? "" : "s", pagerefs_entries(&d->pages) - merged,
             pagerefs_entries(&d->pages) - merged == 1 ? "" : "s");
}

void detached_adopt(NuksmAgent *agent, NuksmClient *client)
{
    for (GList *l = agent->detached.head; l; l = l->next) {
        Detached *d = l->data;

        if (d->pid != client->pid || d->domain_id != client->domain_id) {
            continue;
        }
        if (!pidfd_process_alive(d->pidfd)) {
            /* The pid names another process now. */
            detached_drop(agent, d);
            return;
        }
        ledger_adopt(client, &d->pages);
        log_info("%s: took back %" PRIu64 " merged page%s and %" PRIu64
                 " unanswered MERGE%s of its previous connection, awaiting "
                 "their RESTORE", client->label, client->merged_pages,
                 client->merged_pages == 1 ? "" : "s",
                 client->parked_pages - client->merged_pages,
                 client->parked_pages - client->merged_pages == 1 ? "" : "s");
        domains_put(&agent->domains, d->domain_id);
        detached_free(agent, d);
        return;
    }
}

void detached_restore_end(NuksmAgent *agent, NuksmClient *client)
{
    log_info("%s: dropping %" PRIu64 " parked page%s it did not restore",
             client->label, client->parked_pages,
             client->parked_pages == 1 ? "" : "s");
    ledger_drop_parked(agent, client);
}

void detached_destroy(NuksmAgent *agent)
{
    while (agent->detached.head) {
        detached_free(agent, agent->detached.head->data);
    }
}
