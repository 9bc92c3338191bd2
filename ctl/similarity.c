/*
 * nuksmctl similarity (similarity.h).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <inttypes.h>
#include <stdio.h>

#include "similarity.h"

/* A SIMILARITY reply, copied out of the shared reply buffer. */
typedef struct Similarity {
    NuksmMsgSimilarity *msg;
    const NuksmSimilarityVm *vms;
    const NuksmSimilarityPair *pairs;
} Similarity;

static const char *vm_domain(const NuksmMsgVms *list, uint32_t id)
{
    const NuksmVmEntry *e = ctl_vm_entry(list, id);

    return e ? e->domain : "";
}

static double percent(uint32_t pm)
{
    return pm / 10.0;
}

/* The pair of clients @a and @b, or NULL. */
static const NuksmSimilarityPair *find_pair(const Similarity *sim,
                                            uint32_t a, uint32_t b)
{
    for (uint32_t i = 0; i < sim->msg->nr_pairs; i++) {
        const NuksmSimilarityPair *p = &sim->pairs[i];

        if ((p->a == a && p->b == b) || (p->a == b && p->b == a)) {
            return p;
        }
    }
    return NULL;
}

/* One matrix per merge domain, then every pair's figures. */
static void print_text(const Similarity *sim, const NuksmMsgVms *list)
{
    g_autoptr(GHashTable) printed = g_hash_table_new(g_str_hash,
                                                     g_str_equal);

    printf("similarity: pages of the smaller VM whose content the other "
           "holds, over its pages\n");
    for (uint32_t i = 0; i < sim->msg->nr_vms; i++) {
        const char *domain = vm_domain(list, sim->vms[i].client_id);
        g_autoptr(GArray) ids = g_array_new(FALSE, FALSE, sizeof(uint32_t));
        g_autofree char *shown = NULL;

        if (g_hash_table_contains(printed, domain)) {
            continue;
        }
        g_hash_table_add(printed, (char *)domain);
        for (uint32_t j = i; j < sim->msg->nr_vms; j++) {
            if (g_str_equal(vm_domain(list, sim->vms[j].client_id), domain)) {
                g_array_append_val(ids, sim->vms[j].client_id);
            }
        }
        shown = table_text(domain);
        printf("\nmerge domain %s:\n  %-16s", shown, "");
        for (guint c = 0; c < ids->len; c++) {
            g_autofree char *l =
                ctl_vm_label(list, g_array_index(ids, uint32_t, c));
            printf(" %10.10s", l);
        }
        putchar('\n');
        for (guint r = 0; r < ids->len; r++) {
            uint32_t a = g_array_index(ids, uint32_t, r);
            g_autofree char *l = ctl_vm_label(list, a);

            printf("  %-16.16s", l);
            for (guint c = 0; c < ids->len; c++) {
                const NuksmSimilarityPair *p =
                    find_pair(sim, a, g_array_index(ids, uint32_t, c));

                if (r == c) {
                    printf(" %10s", "-");
                } else if (p) {
                    printf(" %9.1f%%", percent(p->similarity_pm));
                } else {
                    printf(" %10s", "?");
                }
            }
            putchar('\n');
        }
    }
    if (sim->msg->nr_pairs) {
        printf("\npairs (sampled pages alike; merged pages sharing a copy "
               "now):\n");
    }
    for (uint32_t i = 0; i < sim->msg->nr_pairs; i++) {
        const NuksmSimilarityPair *p = &sim->pairs[i];
        g_autofree char *a = ctl_vm_label(list, p->a);
        g_autofree char *b = ctl_vm_label(list, p->b);

        printf("  %s ~ %s: %.1f%%, sample 1/%" PRIu64 ": %" PRIu64 " of %"
               PRIu64 " and %" PRIu64 " of %" PRIu64 " alike; merged %"
               PRIu64 " and %" PRIu64 "\n", a, b,
               percent(p->similarity_pm), (uint64_t)1 << MIN(p->shift, 63),
               p->alike_a, p->sampled_a, p->alike_b, p->sampled_b,
               p->merged_a, p->merged_b);
    }
    if (sim->msg->nr_vms < sim->msg->total_vms ||
        sim->msg->nr_pairs < sim->msg->total_pairs) {
        printf("\n(%u of %u VMs, %u of %u pairs: the rest did not fit one "
               "reply)\n", sim->msg->nr_vms, sim->msg->total_vms,
               sim->msg->nr_pairs, sim->msg->total_pairs);
    }
}

static void print_json_reply(const Similarity *sim, const NuksmMsgVms *list)
{
    g_autoptr(GString) out = g_string_new(NULL);

    g_string_append_printf(out, "{\"total_vms\": %u, \"total_pairs\": %u, "
                           "\"vms\": [", sim->msg->total_vms,
                           sim->msg->total_pairs);
    for (uint32_t i = 0; i < sim->msg->nr_vms; i++) {
        const NuksmSimilarityVm *v = &sim->vms[i];
        const NuksmVmEntry *e = ctl_vm_entry(list, v->client_id);

        g_string_append_printf(out, "%s{\"id\": %u, \"name\": ",
                               i ? ", " : "", v->client_id);
        json_string(out, e ? e->vm_name : "");
        g_string_append(out, ", \"domain\": ");
        json_string(out, vm_domain(list, v->client_id));
        g_string_append_printf(out, ", \"pages\": %" PRIu64 ", \"sampled\": "
                               "%" PRIu64 ", \"shift\": %u}", v->pages,
                               v->sampled, v->shift);
    }
    g_string_append(out, "], \"pairs\": [");
    for (uint32_t i = 0; i < sim->msg->nr_pairs; i++) {
        const NuksmSimilarityPair *p = &sim->pairs[i];

        g_string_append_printf(out,
            "%s{\"a\": %u, \"b\": %u, \"similarity\": %.3f, \"shift\": %u, "
            "\"sampled_a\": %" PRIu64 ", \"alike_a\": %" PRIu64
            ", \"sampled_b\": %" PRIu64 ", \"alike_b\": %" PRIu64
            ", \"merged_a\": %" PRIu64 ", \"merged_b\": %" PRIu64 "}",
            i ? ", " : "", p->a, p->b, p->similarity_pm / 1000.0, p->shift,
            p->sampled_a, p->alike_a, p->sampled_b, p->alike_b,
            p->merged_a, p->merged_b);
    }
    g_string_append(out, "]}");
    print_json(out);
}

/* The format of nuksmctl --json similarity --sketches (docs/operations.rst). */
#define SKETCHES_FORMAT "nuksm-sketches"
#define SKETCHES_VERSION 1

/* One VM's entry of the export; false if it left meanwhile. */
static bool append_sketch(Ctl *ctl, GString *out, const NuksmVmEntry *e)
{
    NuksmMsgGetSketch req = { .client_id = e->client_id };
    const char *error;
    const NuksmMsgSketch *sk = ctl_try_request(ctl, NUKSM_MSG_GET_SKETCH,
                                               &req, sizeof(req),
                                               NUKSM_MSG_SKETCH, &error);
    const uint64_t *entries;

    if (!sk) {
        return false;
    }
    entries = (const uint64_t *)(sk + 1);
    g_string_append_printf(out, "{\"id\": %u, \"name\": ", e->client_id);
    json_string(out, e->vm_name);
    g_string_append(out, ", \"libvirt_uuid\": ");
    json_string(out, e->libvirt_uuid);
    g_string_append(out, ", \"domain\": ");
    json_string(out, e->domain);
    g_string_append_printf(out, ", \"pages\": %" PRIu64 ", \"shift\": %u, "
                           "\"sample\": [", sk->pages, sk->shift);
    for (uint32_t i = 0; i < sk->count; i++) {
        g_string_append_printf(out, "%s[%" PRIu64 ", %" PRIu64 "]",
                               i ? ", " : "", entries[i] >> 24,
                               entries[i] & 0xffffff);
    }
    g_string_append(out, "]}");
    return true;
}

void cmd_sketches(Ctl *ctl)
{
    g_autofree NuksmMsgVms *list = ctl_list_vms(ctl);
    const NuksmVmEntry *e = (const NuksmVmEntry *)(list + 1);
    g_autoptr(GString) out = g_string_new(NULL);
    bool first = true;

    g_string_append_printf(out, "{\"format\": \"%s\", \"version\": %d, "
                           "\"seed\": %" PRIu64 ", \"fingerprint_bits\": "
                           "%d, \"host\": ", SKETCHES_FORMAT,
                           SKETCHES_VERSION, (uint64_t)NUKSM_SKETCH_SEED,
                           NUKSM_SKETCH_FINGERPRINT_BITS);
    json_string(out, g_get_host_name());
    g_string_append(out, ", \"vms\": [");
    for (uint32_t i = 0; i < list->count; i++) {
        gsize mark = out->len;

        if (!first) {
            g_string_append(out, ", ");
        }
        if (append_sketch(ctl, out, &e[i])) {
            first = false;
        } else {
            g_string_truncate(out, mark);
        }
    }
    g_string_append(out, "]}");
    print_json(out);
}

void cmd_similarity(Ctl *ctl, bool json)
{
    const NuksmMsgSimilarity *reply = ctl_request(ctl,
        NUKSM_MSG_GET_SIMILARITY, NULL, 0, NUKSM_MSG_SIMILARITY);
    size_t len = sizeof(*reply) +
                 reply->nr_vms * sizeof(NuksmSimilarityVm) +
                 reply->nr_pairs * sizeof(NuksmSimilarityPair);
    Similarity sim = { .msg = g_memdup2(reply, len) };
    g_autofree NuksmMsgVms *list = NULL;

    sim.vms = (const NuksmSimilarityVm *)(sim.msg + 1);
    sim.pairs = (const NuksmSimilarityPair *)(sim.vms + sim.msg->nr_vms);
    /* For names and domains */
    list = ctl_list_vms(ctl);
    if (json) {
        print_json_reply(&sim, list);
    } else {
        print_text(&sim, list);
    }
    g_free(sim.msg);
}
