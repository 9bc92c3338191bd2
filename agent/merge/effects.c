/*
 * nuksmd effects.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <malloc.h>
#include <stdio.h>
#include <unistd.h>

#include "effects.h"
#include "ledger.h"
#include "log.h"
#include "merge.h"
#include "outbox.h"
#include "recovery.h"

/*
 * Giving memory back.  glibc returns freed heap to the system by itself
 * only from the top of the heap: what a flood's clients, queues, pages
 * and slots used would stay resident once they are gone, whichever way
 * they went (they left, were disconnected, or their uploads timed out
 * and their slots were freed), unless malloc_trim() releases the free
 * pages inside the heap.  So once clients are freed or slots punched,
 * the agent looks, at most once a TRIM_CHECK_MS, how much it holds
 * resident beyond what its heap uses (its anonymous RSS minus
 * mallinfo2()'s bytes in use), and trims once that grew by
 * TRIM_SLACK_BYTES since it last trimmed.  The growth, not the level:
 * free memory in pages still partly used cannot be given back, and a
 * heap that holds much of it is not trimmed again for nothing.
 *
 * The cost, measured with glibc 2.36 on this 2-core host: mallinfo2()
 * and malloc_trim() each walk the heap's free chunks.  On a 1 GiB heap
 * of 10 M chunks of 100 bytes, one in two freed, each takes 120 ms; of
 * 1 M chunks of 1000 bytes, 25 ms; on a heap of a few MiB, under a
 * millisecond.  Looking once a second while memory is freed costs at
 * worst 12% of a core, on that fragmented 1 GiB heap (where the memory
 * budget's mallinfo2() on every batch of candidates costs more); a trim
 * comes only once 4 MiB more can be given back, which is all an idle
 * agent may keep of its freed heap.
 */
#define TRIM_SLACK_BYTES (4 << 20)
#define TRIM_CHECK_MS 1000

static struct {
    guint timer;             /* the next look, if one is due */
    int64_t floor;           /* slack left after the last trim */
} trim;

/* Bytes the agent holds resident beyond what its heap uses. */
static int64_t heap_slack(void)
{
    struct mallinfo2 mi = mallinfo2();
    g_autofree char *statm = NULL;
    long resident, shared;

    if (!g_file_get_contents("/proc/self/statm", &statm, NULL, NULL) ||
        sscanf(statm, "%*d %ld %ld", &resident, &shared) != 2) {
        return 0;
    }
    /* statm's shared pages are those of files, the store's among them. */
    return (int64_t)(resident - shared) * sysconf(_SC_PAGESIZE) -
           (int64_t)(mi.uordblks + mi.hblkhd);
}

static gboolean on_trim_timer(gpointer opaque)
{
    int64_t slack = heap_slack();

    trim.timer = 0;
    if (slack < trim.floor + TRIM_SLACK_BYTES) {
        /* Memory taken again since lowers what the next trim starts from. */
        trim.floor = MIN(trim.floor, slack);
        return G_SOURCE_REMOVE;
    }
    malloc_trim(0);
    trim.floor = heap_slack();
    log_debug("gave %" G_GINT64_FORMAT " MiB of freed heap back",
              (slack - trim.floor) >> 20);
    return G_SOURCE_REMOVE;
}

/* Memory was freed: look whether to give it back, soon. */
static void trim_soon(void)
{
    if (!trim.timer) {
        trim.timer = g_timeout_add(TRIM_CHECK_MS, on_trim_timer, NULL);
    }
}

/* What a timer or a process watch left to do, checked before each poll. */
typedef struct SettleSource {
    GSource source;
    NuksmAgent *agent;
} SettleSource;

/* Free the clients marked dead. */
static void reap_clients(NuksmAgent *agent)
{
    GList *l = agent->clients.list.head;

    while (l) {
        NuksmClient *client = l->data;

        l = l->next;
        if (client->dead) {
            merge_client_leave(agent, client);
            merge_client_free(client);
            clients_remove(&agent->clients, client);
            trim_soon();
        }
    }
}

static gint compare_ids(gconstpointer a, gconstpointer b)
{
    SlotId x = *(const SlotId *)a, y = *(const SlotId *)b;

    return x < y ? -1 : x > y;
}

/* Punch out and release the slots freed since the last call. */
static void free_slots(NuksmAgent *agent)
{
    GArray *ids = agent->effects.freeing;
    guint i = 0;

    /* Sorted, consecutive slots of a domain are punched with one call. */
    g_array_sort(ids, compare_ids);
    while (i < ids->len) {
        SlotId first = g_array_index(ids, SlotId, i);
        uint16_t domain = ledger_slot(agent, first)->domain;
        guint n = 1;

        while (i + n < ids->len &&
               g_array_index(ids, SlotId, i + n) == first + n &&
               slot_id_node(first + n) == slot_id_node(first) &&
               ledger_slot(agent, first + n)->domain == domain) {
            n++;
        }
        store_punch(&agent->store, domain, slot_id_node(first),
                    slot_id_slot(first), n);
        for (guint k = 0; k < n; k++) {
            ledger_release_slot(agent, first + k);
        }
        i += n;
    }
    if (ids->len) {
        trim_soon();
    }
    g_array_set_size(ids, 0);
}

void effects_flush(NuksmAgent *agent)
{
    uploads_read_queued(agent);
    outbox_flush(agent);
    free_slots(agent);
}

void effects_settle(NuksmAgent *agent)
{
    uploads_read_queued(agent);
    outbox_flush(agent);
    reap_clients(agent);
    free_slots(agent);
    /* Slots the ledger kept as orphans are looked at in a while. */
    recovery_watch_orphans(agent);
}

static bool pending(const NuksmAgent *agent)
{
    return agent->effects.outbox->len || agent->effects.freeing->len;
}

static gboolean settle_prepare(GSource *source, gint *timeout)
{
    *timeout = -1;
    return pending(((SettleSource *)source)->agent);
}

static gboolean settle_check(GSource *source)
{
    return pending(((SettleSource *)source)->agent);
}

static gboolean settle_dispatch(GSource *source, GSourceFunc callback,
                                gpointer opaque)
{
    effects_settle(((SettleSource *)source)->agent);
    return G_SOURCE_CONTINUE;
}

static GSourceFuncs settle_funcs = {
    .prepare = settle_prepare,
    .check = settle_check,
    .dispatch = settle_dispatch,
};

void effects_start(NuksmAgent *agent)
{
    GSource *source = g_source_new(&settle_funcs, sizeof(SettleSource));

    ((SettleSource *)source)->agent = agent;
    g_source_set_name(source, "nuksmd effects");
    agent->effects.settle_source = g_source_attach(source, NULL);
    g_source_unref(source);
}

void effects_stop(NuksmAgent *agent)
{
    if (agent->effects.settle_source) {
        g_source_remove(agent->effects.settle_source);
        agent->effects.settle_source = 0;
    }
    if (trim.timer) {
        g_source_remove(trim.timer);
        trim.timer = 0;
    }
}
