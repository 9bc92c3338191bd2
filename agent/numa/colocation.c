/*
 * nuksmd co-location (colocation.h).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "colocation.h"
#include "ledger.h"
#include "transport.h"

/* Was @vm's home node given by its operator, not by where it ran? */
static bool pinned_by_operator(const NuksmClient *vm)
{
    switch (vm->home_source[0]) {
    case NUKSM_HOME_PINNED:
    case NUKSM_HOME_BACKEND:
    case NUKSM_HOME_MEMORY:
        return true;
    default:
        return false;
    }
}

/* The RAM @vm's TOPOLOGY reports, in pages. */
static uint64_t vm_pages(const NuksmClient *vm)
{
    uint64_t pages = 0;

    for (uint32_t r = 0; r < vm->topology->nr_ranges; r++) {
        pages += vm->topology->ranges[r].count;
    }
    return pages;
}

/* The VMs the plan weighs: one guest node each, with a TOPOLOGY. */
static GPtrArray *plan_vms(NuksmAgent *agent)
{
    GPtrArray *vms = clients_list_vms(&agent->clients);

    for (guint i = vms->len; i-- > 0;) {
        const NuksmClient *vm = g_ptr_array_index(vms, i);

        if (!vm->topology || vm->topology->nr_gnodes != 1) {
            g_ptr_array_remove_index(vms, i);
        }
    }
    return vms;
}

/* Every pair of @vms of one merge domain, compared by their sketches. */
static GArray *plan_pairs(GPtrArray *vms)
{
    GArray *pairs = g_array_new(FALSE, FALSE, sizeof(ColocatePair));

    for (guint i = 0; i < vms->len; i++) {
        const NuksmClient *a = g_ptr_array_index(vms, i);

        for (guint j = i + 1; j < vms->len; j++) {
            const NuksmClient *b = g_ptr_array_index(vms, j);
            SketchOverlap o;
            ColocatePair pair;

            if (a->domain_id != b->domain_id) {
                continue;
            }
            sketch_compare(&a->sketch, &b->sketch, &o);
            pair = (ColocatePair) {
                .a = i, .b = j,
                .similarity_pm = sketch_similarity_pm(&o),
                .alike_a = o.alike_a << MIN(o.shift, 32u),
                .alike_b = o.alike_b << MIN(o.shift, 32u),
            };
            g_array_append_val(pairs, pair);
        }
    }
    return pairs;
}

void colocation_handle_get_plan(NuksmAgent *agent, NuksmClient *client,
                                uint32_t seq, const void *payload)
{
    g_autoptr(GPtrArray) vms = NULL;
    g_autoptr(GArray) pairs = NULL;
    g_autoptr(GArray) moves = NULL;
    g_autofree ColocateVm *cvms = NULL;
    g_autofree NuksmMsgPlan *msg = NULL;
    ColocateNode nodes[NUKSM_MAX_NODES] = { { 0 } };
    const ColocateParams *params = &agent->placement.colocate;
    NuksmPlanMove *out;
    uint32_t groups = 0, count;

    if (!client->admin) {
        transport_deny(client, seq,
                       "the co-location plan names every tenant's VMs: "
                       "administrators only (root, nuksmd's user or a "
                       "member of its admin-group)");
        return;
    }
    vms = plan_vms(agent);
    cvms = g_new0(ColocateVm, vms->len);
    for (uint32_t n = 0; n < agent->nr_nodes; n++) {
        nodes[n].free_pages = topology_node_free_pages(&agent->topology, n);
        nodes[n].cpus = topology_node_cpus(&agent->topology, n);
    }
    for (guint i = 0; i < vms->len; i++) {
        const NuksmClient *vm = g_ptr_array_index(vms, i);

        cvms[i] = (ColocateVm) {
            .id = vm->id,
            .domain = vm->domain_id,
            .node = client_home(vm, 0),
            .pages = vm_pages(vm),
            .vcpus = vm->topology->nr_vcpus,
            .pinned = !agent->placement.colocate_move_pinned &&
                      pinned_by_operator(vm),
        };
        if (cvms[i].node < agent->nr_nodes) {
            nodes[cvms[i].node].vcpus += cvms[i].vcpus;
        }
    }
    pairs = plan_pairs(vms);
    moves = colocate_plan(cvms, vms->len, nodes, agent->nr_nodes,
                          (const ColocatePair *)pairs->data, pairs->len,
                          params, &groups);
    count = MIN(moves->len, (NUKSM_MSG_MAX - sizeof(NuksmMsgHeader) -
                             sizeof(*msg)) / sizeof(NuksmPlanMove));
    msg = g_malloc0(sizeof(*msg) + count * sizeof(NuksmPlanMove));
    out = (NuksmPlanMove *)(msg + 1);
    for (uint32_t i = 0; i < count; i++) {
        const ColocateMove *mv = &g_array_index(moves, ColocateMove, i);
        const NuksmClient *vm = g_ptr_array_index(vms, mv->vm);
        uint64_t local;

        out[i] = (NuksmPlanMove) {
            .client_id = vm->id,
            .group = mv->group,
            .from = mv->from,
            .to = mv->to,
            .verdict = mv->verdict,
            .vcpus = cvms[mv->vm].vcpus,
            .pages = cvms[mv->vm].pages,
            .gain_pages = mv->gain_pages,
        };
        ledger_locality(vm, &local, &out[i].remote_pages);
    }
    *msg = (NuksmMsgPlan) {
        .count = count,
        .total = moves->len,
        .vms = vms->len,
        .groups = groups,
        .threshold_pm = params->threshold_pm,
        .vcpus_per_cpu = params->vcpus_per_cpu,
        .min_gain_pages = params->min_gain_pages,
    };
    transport_send(client, NUKSM_MSG_PLAN, seq, msg,
                   sizeof(*msg) + count * sizeof(NuksmPlanMove));
}
