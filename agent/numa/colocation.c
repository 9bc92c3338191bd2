/*
 * nuksmd co-location (colocation.h).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <string.h>

#include "colocation.h"
#include "nuksm-digest.h"
#include "ledger.h"
#include "similarity.h"
#include "transport.h"

/* What the plan weighed and decided, for one look. */
typedef struct Colocation {
    GPtrArray *vms;          /* NuksmClient *, by client id */
    ColocateVm *cvms;        /* the same, as the planner sees them */
    GArray *pairs;           /* ColocatePair */
    GArray *moves;           /* ColocateMove */
    uint32_t groups;
} Colocation;

/* The RAM @vm's TOPOLOGY reports, in pages. */
static uint64_t vm_pages(const NuksmClient *vm)
{
    uint64_t pages = 0;

    for (uint32_t r = 0; r < vm->home.topology->nr_ranges; r++) {
        pages += vm->home.topology->ranges[r].count;
    }
    return pages;
}

/* The VMs the plan weighs: one guest node each, with a TOPOLOGY. */
static GPtrArray *plan_vms(NuksmAgent *agent)
{
    GPtrArray *vms = clients_list_vms(&agent->clients);

    for (guint i = vms->len; i-- > 0;) {
        const NuksmClient *vm = g_ptr_array_index(vms, i);

        if (!vm->home.topology || vm->home.topology->nr_gnodes != 1) {
            g_ptr_array_remove_index(vms, i);
        }
    }
    return vms;
}

/*
 * What the pairs of @vms are compared from: the VMs, their merge
 * domains and their sketches' changes.  Idle VMs' sketches stay: their
 * pairs are not compared again, which would cost every look the square
 * of their number.
 */
static uint64_t pairs_key(GPtrArray *vms)
{
    uint64_t key = vms->len;

    for (guint i = 0; i < vms->len; i++) {
        const NuksmClient *vm = g_ptr_array_index(vms, i);

        key = nuksm_mix64(key ^ vm->id);
        key = nuksm_mix64(key ^ vm->domain_id);
        key = nuksm_mix64(key ^ vm->sketch.changes);
        key = nuksm_mix64(key ^ vm->sketch.shift);
    }
    return key;
}

/* Every pair of @vms of one merge domain, compared by their sketches. */
static GArray *compare_pairs(GPtrArray *vms)
{
    GArray *pairs = g_array_new(FALSE, FALSE, sizeof(ColocatePair));
    g_autoptr(GPtrArray) exports = similarity_exports(vms);

    for (guint i = 0; i < vms->len; i++) {
        const NuksmClient *a = g_ptr_array_index(vms, i);

        for (guint j = i + 1; j < vms->len; j++) {
            const NuksmClient *b = g_ptr_array_index(vms, j);
            SketchOverlap o;
            ColocatePair pair;

            if (a->domain_id != b->domain_id) {
                continue;
            }
            sketch_compare_samples(g_ptr_array_index(exports, i),
                                   a->sketch.shift,
                                   g_ptr_array_index(exports, j),
                                   b->sketch.shift, &o);
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

/* The pairs of @vms, compared again only if something changed. */
static GArray *plan_pairs(NuksmAgent *agent, GPtrArray *vms)
{
    AgentPlacement *pl = &agent->placement;
    uint64_t key = pairs_key(vms);

    if (!pl->colocate_pairs || pl->colocate_key != key) {
        g_clear_pointer(&pl->colocate_pairs, g_array_unref);
        pl->colocate_pairs = compare_pairs(vms);
        pl->colocate_key = key;
    }
    return g_array_ref(pl->colocate_pairs);
}

/* The plan for the VMs as they are now. */
static void colocation_look(NuksmAgent *agent, Colocation *c)
{
    ColocateNode nodes[NUKSM_MAX_NODES] = { { 0 } };

    c->vms = plan_vms(agent);
    c->cvms = g_new0(ColocateVm, c->vms->len);
    for (uint32_t n = 0; n < agent->nr_nodes; n++) {
        nodes[n].free_pages = topology_node_free_pages(&agent->topology, n);
        nodes[n].cpus = topology_node_cpus(&agent->topology, n);
    }
    for (guint i = 0; i < c->vms->len; i++) {
        const NuksmClient *vm = g_ptr_array_index(c->vms, i);
        ColocateVm *cv = &c->cvms[i];

        *cv = (ColocateVm) {
            .id = vm->id,
            .domain = vm->domain_id,
            .node = client_home(vm, 0),
            .pages = vm_pages(vm),
            .vcpus = vm->home.topology->nr_vcpus,
            .pinned = !agent->placement.colocate_move_pinned &&
                      colocate_pinned_by_operator(vm->home.source[0],
                                                  client_home(vm, 0),
                                                  vm->colocated_to),
        };
        if (cv->node < agent->nr_nodes) {
            nodes[cv->node].vcpus += cv->vcpus;
        }
    }
    c->pairs = plan_pairs(agent, c->vms);
    c->moves = colocate_plan(c->cvms, c->vms->len, nodes, agent->nr_nodes,
                             (const ColocatePair *)c->pairs->data,
                             c->pairs->len, &agent->placement.colocate,
                             &c->groups);
}

static void colocation_clear(Colocation *c)
{
    g_ptr_array_unref(c->vms);
    g_free(c->cvms);
    g_array_unref(c->pairs);
    g_array_unref(c->moves);
}

bool colocation_move_of(NuksmAgent *agent, const NuksmClient *vm,
                        ColocateMove *move)
{
    Colocation c;
    bool found = false;

    colocation_look(agent, &c);
    for (guint i = 0; i < c.moves->len && !found; i++) {
        const ColocateMove *mv = &g_array_index(c.moves, ColocateMove, i);

        if (g_ptr_array_index(c.vms, mv->vm) == vm) {
            *move = *mv;
            found = true;
        }
    }
    colocation_clear(&c);
    return found;
}

void colocation_handle_get_plan(NuksmAgent *agent, NuksmClient *client,
                                uint32_t seq, const void *payload)
{
    g_autofree NuksmMsgPlan *msg = NULL;
    const ColocateParams *params = &agent->placement.colocate;
    NuksmPlanMove *out;
    Colocation c;
    uint32_t count;

    if (!client->admin) {
        transport_deny(client, seq,
                       "the co-location plan names every tenant's VMs: "
                       "administrators only (root, nuksmd's user or a "
                       "member of its admin-group)");
        return;
    }
    colocation_look(agent, &c);
    count = MIN(c.moves->len, (NUKSM_MSG_MAX - sizeof(NuksmMsgHeader) -
                               sizeof(*msg)) / sizeof(NuksmPlanMove));
    msg = g_malloc0(sizeof(*msg) + count * sizeof(NuksmPlanMove));
    out = (NuksmPlanMove *)(msg + 1);
    for (uint32_t i = 0; i < count; i++) {
        const ColocateMove *mv = &g_array_index(c.moves, ColocateMove, i);
        const NuksmClient *vm = g_ptr_array_index(c.vms, mv->vm);
        uint64_t local;

        out[i] = (NuksmPlanMove) {
            .client_id = vm->id,
            .group = mv->group,
            .from = mv->from,
            .to = mv->to,
            .verdict = mv->verdict,
            .vcpus = c.cvms[mv->vm].vcpus,
            .pages = c.cvms[mv->vm].pages,
            .gain_pages = mv->gain_pages,
        };
        ledger_locality(vm, &local, &out[i].remote_pages);
    }
    *msg = (NuksmMsgPlan) {
        .count = count,
        .total = c.moves->len,
        .vms = c.vms->len,
        .groups = c.groups,
        .threshold_pm = params->threshold_pm,
        .vcpus_per_cpu = params->vcpus_per_cpu,
        .min_gain_pages = params->min_gain_pages,
    };
    transport_send(client, NUKSM_MSG_PLAN, seq, msg,
                   sizeof(*msg) + count * sizeof(NuksmPlanMove));
    colocation_clear(&c);
}

/* Tell @vm its twin and planned move (COLOCATION). */
static void tell(NuksmAgent *agent, NuksmClient *vm)
{
    const ClientColocation *co = &vm->colocation;
    NuksmClient *twin = co->twin_id ? ledger_client(agent, co->twin_id)
                                    : NULL;
    NuksmMsgColocation msg = {
        .twin_pm = co->twin_pm,
        .plan_to = co->plan_to,
        .plan_verdict = co->plan_verdict,
        .scheme = co->scheme,
    };

    if (twin) {
        memcpy(msg.twin, twin->vm_name, sizeof(msg.twin));
    }
    transport_send(vm, NUKSM_MSG_COLOCATION, 0, &msg, sizeof(msg));
}

/*
 * Each VM's best twin and planned move, from a fresh look: what
 * LIST_VMS shows of them, and what a VM is told when it changes.
 */
static gboolean on_refresh(gpointer opaque)
{
    NuksmAgent *agent = opaque;
    g_autoptr(GPtrArray) all = clients_list_vms(&agent->clients);
    g_autofree ClientColocation *before = NULL;
    Colocation c;

    if (++agent->placement.colocate_periods <
        (all->len + COLOCATION_VMS_PER_PERIOD - 1) /
        COLOCATION_VMS_PER_PERIOD) {
        return G_SOURCE_CONTINUE;
    }
    agent->placement.colocate_periods = 0;
    before = g_new(ClientColocation, all->len);
    for (guint i = 0; i < all->len; i++) {
        NuksmClient *vm = g_ptr_array_index(all, i);

        before[i] = vm->colocation;
        /* plan_to stays while no move: only a real change is told. */
        vm->colocation = (ClientColocation) {
            .plan_to = vm->colocation.plan_to,
            .plan_verdict = NUKSM_PLAN__MAX,
        };
    }
    colocation_look(agent, &c);
    for (guint i = 0; i < c.pairs->len; i++) {
        const ColocatePair *p = &g_array_index(c.pairs, ColocatePair, i);
        NuksmClient *a = g_ptr_array_index(c.vms, p->a);
        NuksmClient *b = g_ptr_array_index(c.vms, p->b);

        if (p->similarity_pm > a->colocation.twin_pm) {
            a->colocation.twin_id = b->id;
            a->colocation.twin_pm = p->similarity_pm;
        }
        if (p->similarity_pm > b->colocation.twin_pm) {
            b->colocation.twin_id = a->id;
            b->colocation.twin_pm = p->similarity_pm;
        }
    }
    for (guint i = 0; i < c.moves->len; i++) {
        const ColocateMove *mv = &g_array_index(c.moves, ColocateMove, i);
        NuksmClient *vm = g_ptr_array_index(c.vms, mv->vm);

        vm->colocation.plan_to = mv->to;
        vm->colocation.plan_verdict = mv->verdict;
    }
    for (guint i = 0; i < all->len; i++) {
        NuksmClient *vm = g_ptr_array_index(all, i);

        vm->colocation.scheme = colocate_scheme(c.moves, c.cvms,
                                                vm->domain_id);
    }
    colocation_clear(&c);
    for (guint i = 0; i < all->len; i++) {
        NuksmClient *vm = g_ptr_array_index(all, i);

        if (memcmp(&vm->colocation, &before[i], sizeof(before[i]))) {
            tell(agent, vm);
        }
    }
    return G_SOURCE_CONTINUE;
}

void colocation_start(NuksmAgent *agent)
{
    agent->placement.colocate_timer =
        g_timeout_add_seconds(COLOCATION_PERIOD_S, on_refresh, agent);
}

void colocation_stop(NuksmAgent *agent)
{
    g_clear_handle_id(&agent->placement.colocate_timer, g_source_remove);
    g_clear_pointer(&agent->placement.colocate_pairs, g_array_unref);
}
