/*
 * nuksmd similarity of VMs (similarity.h).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <string.h>

#include "ledger.h"
#include "similarity.h"
#include "transport.h"

static uint64_t pair_key(uint32_t v, uint32_t u)
{
    return (uint64_t)v << 32 | u;
}

typedef void (*MergedPageFn)(const NuksmClient *vm, SlotId slot,
                             void *opaque);

/* Call @fn for every merged page of @vms, VM after VM. */
static void foreach_merged_page(GPtrArray *vms, MergedPageFn fn,
                                void *opaque)
{
    for (guint i = 0; i < vms->len; i++) {
        const NuksmClient *vm = g_ptr_array_index(vms, i);
        const PageRef *e;
        uint64_t page;

        for (size_t pos = 0; (e = pagerefs_next(&vm->pages, &pos, &page));) {
            if (e->state == PAGE_MAPPED) {
                fn(vm, e->slot, opaque);
            }
        }
    }
}

/* Slot -> the VMs that map it, each once (VMs come one after the other). */
static void note_owner(const NuksmClient *vm, SlotId slot, void *owners)
{
    GArray *who = g_hash_table_lookup(owners, GUINT_TO_POINTER(slot));

    if (!who) {
        who = g_array_new(FALSE, FALSE, sizeof(uint32_t));
        g_hash_table_insert(owners, GUINT_TO_POINTER(slot), who);
    }
    if (!who->len || g_array_index(who, uint32_t, who->len - 1) != vm->id) {
        g_array_append_val(who, vm->id);
    }
}

typedef struct PairCounts {
    GHashTable *owners;      /* note_owner()'s */
    GHashTable *counts;      /* pair_key(v, u) -> uint64_t */
} PairCounts;

/* One more page of @vm that maps a copy each other owner maps too. */
static void count_pairs(const NuksmClient *vm, SlotId slot, void *opaque)
{
    PairCounts *pc = opaque;
    GArray *who = g_hash_table_lookup(pc->owners, GUINT_TO_POINTER(slot));

    for (guint o = 0; o < who->len; o++) {
        uint32_t u = g_array_index(who, uint32_t, o);
        uint64_t key = pair_key(vm->id, u);
        uint64_t *n;

        if (u == vm->id) {
            continue;
        }
        n = g_hash_table_lookup(pc->counts, &key);
        if (!n) {
            n = g_new0(uint64_t, 1);
            g_hash_table_insert(pc->counts, g_memdup2(&key, sizeof(key)), n);
        }
        ++*n;
    }
}

/*
 * The exact figures: for every two VMs v and u, how many of v's merged
 * pages map a copy that a page of u maps too (key pair_key(v, u)).  Two
 * walks of every merged page.
 */
static GHashTable *count_merged_pairs(GPtrArray *vms)
{
    g_autoptr(GHashTable) owners = g_hash_table_new_full(
        NULL, NULL, NULL, (GDestroyNotify)g_array_unref);
    PairCounts pc = {
        .owners = owners,
        .counts = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free,
                                        g_free),
    };

    foreach_merged_page(vms, note_owner, owners);
    foreach_merged_page(vms, count_pairs, &pc);
    return pc.counts;
}

static uint64_t merged_pair(GHashTable *counts, uint32_t v, uint32_t u)
{
    uint64_t key = pair_key(v, u);
    const uint64_t *n = g_hash_table_lookup(counts, &key);

    return n ? *n : 0;
}

/* The answer to a client that does not administer. */
static bool deny_unless_admin(NuksmClient *client, uint32_t seq)
{
    if (!client->admin) {
        transport_deny(client, seq,
                       "the similarity of VMs names every tenant's VMs: "
                       "administrators only (root, nuksmd's user or a "
                       "member of its admin-group)");
    }
    return !client->admin;
}

GPtrArray *similarity_exports(GPtrArray *vms)
{
    GPtrArray *exports = g_ptr_array_new_with_free_func(
        (GDestroyNotify)g_array_unref);

    for (guint i = 0; i < vms->len; i++) {
        const NuksmClient *vm = g_ptr_array_index(vms, i);

        g_ptr_array_add(exports, sketch_export(&vm->sketch));
    }
    return exports;
}

void similarity_handle_get_sketch(NuksmAgent *agent, NuksmClient *client,
                                  uint32_t seq, const void *payload)
{
    const NuksmMsgGetSketch *req = payload;
    NuksmClient *vm = ledger_client(agent, req->client_id);
    g_autoptr(GArray) entries = NULL;
    g_autofree NuksmMsgSketch *msg = NULL;
    size_t len;

    if (deny_unless_admin(client, seq)) {
        return;
    }
    if (!vm) {
        transport_send_error(client, seq, NUKSM_ERR_BAD_MESSAGE,
                             "GET_SKETCH: no VM has that client id");
        return;
    }
    entries = sketch_export(&vm->sketch);
    len = sizeof(*msg) + entries->len * sizeof(uint64_t);
    msg = g_malloc0(len);
    *msg = (NuksmMsgSketch) {
        .client_id = vm->id,
        .shift = vm->sketch.shift,
        .pages = sketch_pages(&vm->sketch),
        .count = entries->len,
    };
    memcpy(msg + 1, entries->data, entries->len * sizeof(uint64_t));
    transport_send(client, NUKSM_MSG_SKETCH, seq, msg, len);
}

void similarity_handle_get(NuksmAgent *agent, NuksmClient *client,
                           uint32_t seq, const void *payload)
{
    g_autoptr(GPtrArray) vms = clients_list_vms(&agent->clients);
    g_autoptr(GHashTable) merged = NULL;
    g_autoptr(GPtrArray) exports = NULL;
    g_autofree NuksmMsgSimilarity *msg = NULL;
    size_t room = NUKSM_MSG_MAX - sizeof(NuksmMsgHeader) - sizeof(*msg);
    NuksmSimilarityVm *out_vms;
    NuksmSimilarityPair *out_pairs;
    uint32_t nr_vms, nr_pairs = 0, total_pairs = 0;

    if (deny_unless_admin(client, seq)) {
        return;
    }
    nr_vms = MIN(vms->len, room / sizeof(NuksmSimilarityVm));
    room -= nr_vms * sizeof(NuksmSimilarityVm);
    msg = g_malloc0(NUKSM_MSG_MAX);
    out_vms = (NuksmSimilarityVm *)(msg + 1);
    out_pairs = (NuksmSimilarityPair *)(out_vms + nr_vms);
    for (uint32_t i = 0; i < nr_vms; i++) {
        const NuksmClient *vm = g_ptr_array_index(vms, i);

        out_vms[i] = (NuksmSimilarityVm) {
            .client_id = vm->id,
            .shift = vm->sketch.shift,
            .sampled = vm->sketch.pages.count,
            .pages = sketch_pages(&vm->sketch),
        };
    }
    merged = count_merged_pairs(vms);
    exports = similarity_exports(vms);
    for (uint32_t i = 0; i < nr_vms; i++) {
        const NuksmClient *a = g_ptr_array_index(vms, i);

        for (uint32_t j = i + 1; j < nr_vms; j++) {
            const NuksmClient *b = g_ptr_array_index(vms, j);
            SketchOverlap o;

            /* VMs of two domains never share: no pair. */
            if (a->domain_id != b->domain_id) {
                continue;
            }
            total_pairs++;
            if (room < sizeof(NuksmSimilarityPair)) {
                continue;
            }
            room -= sizeof(NuksmSimilarityPair);
            sketch_compare_samples(g_ptr_array_index(exports, i),
                                   a->sketch.shift,
                                   g_ptr_array_index(exports, j),
                                   b->sketch.shift, &o);
            out_pairs[nr_pairs++] = (NuksmSimilarityPair) {
                .a = a->id,
                .b = b->id,
                .similarity_pm = sketch_similarity_pm(&o),
                .shift = o.shift,
                .sampled_a = o.sampled_a,
                .alike_a = o.alike_a,
                .sampled_b = o.sampled_b,
                .alike_b = o.alike_b,
                .merged_a = merged_pair(merged, a->id, b->id),
                .merged_b = merged_pair(merged, b->id, a->id),
            };
        }
    }
    msg->nr_vms = nr_vms;
    msg->total_vms = vms->len;
    msg->nr_pairs = nr_pairs;
    msg->total_pairs = total_pairs;
    transport_send(client, NUKSM_MSG_SIMILARITY, seq, msg,
                   sizeof(*msg) + nr_vms * sizeof(NuksmSimilarityVm) +
                   nr_pairs * sizeof(NuksmSimilarityPair));
}
