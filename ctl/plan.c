/*
 * nuksmctl plan (plan.h).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <inttypes.h>
#include <stdio.h>

#include "plan.h"

/* Why a move is refused, for a reader. */
static const char *refusal_text(uint32_t verdict)
{
    switch (verdict) {
    case NUKSM_PLAN_PINNED:
        return "its operator pinned it to its node";
    case NUKSM_PLAN_NO_ROOM:
        return "no node has room for its group (memory, or vCPUs per CPU)";
    case NUKSM_PLAN_SMALL_GAIN:
        return "it would merge too little more locally";
    default:
        return "?";
    }
}

static double mib(uint64_t pages)
{
    return pages * (double)NUKSM_PAGE_SIZE / (1 << 20);
}

static void print_text(const NuksmMsgPlan *plan, const NuksmPlanMove *mv,
                       const NuksmMsgVms *list)
{
    printf("co-location plan: %u VM%s weighed, %u group%s of similar VMs "
           "(from %.0f%% alike; a move must merge %.1f MiB more locally; "
           "vCPUs per CPU: ", plan->vms, plan->vms == 1 ? "" : "s",
           plan->groups, plan->groups == 1 ? "" : "s",
           plan->threshold_pm / 10.0, mib(plan->min_gain_pages));
    if (plan->vcpus_per_cpu) {
        printf("at most %u)\n", plan->vcpus_per_cpu);
    } else {
        printf("no limit)\n");
    }
    if (!plan->count) {
        printf("nothing to move: %s\n", plan->groups ?
               "each group of similar VMs is on one node" :
               "no two VMs are similar");
        return;
    }
    for (uint32_t i = 0; i < plan->count; i++) {
        g_autofree char *name = ctl_vm_label(list, mv[i].client_id);

        printf("  group %u: %s, node %u -> node %u: ", mv[i].group, name,
               mv[i].from, mv[i].to);
        if (mv[i].verdict == NUKSM_PLAN_PLANNED) {
            printf("planned, %.1f MiB alike merge locally there; moves "
                   "%.1f MiB and %u vCPU%s; %.1f MiB of its merged pages "
                   "are remote now\n", mib(mv[i].gain_pages),
                   mib(mv[i].pages), mv[i].vcpus,
                   mv[i].vcpus == 1 ? "" : "s", mib(mv[i].remote_pages));
        } else {
            printf("refused (%s): %s\n",
                   nuksm_plan_verdict_name(mv[i].verdict),
                   refusal_text(mv[i].verdict));
        }
    }
    if (plan->count < plan->total) {
        printf("(%u of %u moves: the rest did not fit one reply)\n",
               plan->count, plan->total);
    }
}

static void print_json_plan(const NuksmMsgPlan *plan,
                            const NuksmPlanMove *mv, const NuksmMsgVms *list)
{
    g_autoptr(GString) out = g_string_new(NULL);

    g_string_append_printf(out,
        "{\"vms\": %u, \"groups\": %u, \"threshold\": %.3f, "
        "\"min_gain_pages\": %" PRIu64 ", \"vcpus_per_cpu\": %u, "
        "\"total\": %u, \"moves\": [", plan->vms, plan->groups,
        plan->threshold_pm / 1000.0, plan->min_gain_pages,
        plan->vcpus_per_cpu, plan->total);
    for (uint32_t i = 0; i < plan->count; i++) {
        const NuksmVmEntry *e = ctl_vm_entry(list, mv[i].client_id);

        g_string_append_printf(out, "%s{\"id\": %u, \"name\": ",
                               i ? ", " : "", mv[i].client_id);
        json_string(out, e ? e->vm_name : "");
        g_string_append_printf(out,
            ", \"group\": %u, \"from\": %u, \"to\": %u, \"verdict\": \"%s\", "
            "\"pages\": %" PRIu64 ", \"vcpus\": %u, \"gain_pages\": %" PRIu64
            ", \"remote_pages\": %" PRIu64 "}", mv[i].group, mv[i].from,
            mv[i].to, nuksm_plan_verdict_name(mv[i].verdict), mv[i].pages,
            mv[i].vcpus, mv[i].gain_pages, mv[i].remote_pages);
    }
    g_string_append(out, "]}");
    print_json(out);
}

void cmd_plan(Ctl *ctl, bool json)
{
    const NuksmMsgPlan *reply = ctl_request(ctl, NUKSM_MSG_GET_PLAN, NULL,
                                            0, NUKSM_MSG_PLAN);
    g_autofree NuksmMsgPlan *plan =
        g_memdup2(reply, sizeof(*reply) +
                         reply->count * sizeof(NuksmPlanMove));
    const NuksmPlanMove *moves = (const NuksmPlanMove *)(plan + 1);
    /* For names: the reply buffer is LIST_VMS's from here. */
    const NuksmMsgVms *list = ctl_request(ctl, NUKSM_MSG_LIST_VMS, NULL, 0,
                                          NUKSM_MSG_VMS);

    if (json) {
        print_json_plan(plan, moves, list);
    } else {
        print_text(plan, moves, list);
    }
}
