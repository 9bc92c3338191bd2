/*
 * nuksmctl plan (plan.h).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

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

/* Is entry @i of @list the first of its merge domain there? */
static bool first_of_domain(const NuksmMsgVms *list, uint32_t i)
{
    const NuksmVmEntry *e = (const NuksmVmEntry *)(list + 1);

    for (uint32_t j = 0; j < i; j++) {
        if (g_str_equal(e[j].domain, e[i].domain)) {
            return false;
        }
    }
    return true;
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
    for (uint32_t i = 0; i < list->count; i++) {
        const NuksmVmEntry *e = &((const NuksmVmEntry *)(list + 1))[i];
        g_autofree char *domain = table_text(e->domain);

        if (first_of_domain(list, i)) {
            printf("adaptive scheme (policy auto), merge domain %s: %s\n",
                   domain, nuksm_scheme_name(e->scheme));
        }
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
    g_string_append(out, "], \"schemes\": {");
    for (uint32_t i = 0, n = 0; i < list->count; i++) {
        const NuksmVmEntry *e = &((const NuksmVmEntry *)(list + 1))[i];

        if (first_of_domain(list, i)) {
            g_string_append(out, n++ ? ", " : "");
            json_string(out, e->domain);
            g_string_append_printf(out, ": \"%s\"",
                                   nuksm_scheme_name(e->scheme));
        }
    }
    g_string_append(out, "}}");
    print_json(out);
}

/* The plan nuksmd makes now, a copy of its reply. */
static NuksmMsgPlan *fetch_plan(Ctl *ctl)
{
    const NuksmMsgPlan *reply = ctl_request(ctl, NUKSM_MSG_GET_PLAN, NULL,
                                            0, NUKSM_MSG_PLAN);

    return g_memdup2(reply, sizeof(*reply) +
                            reply->count * sizeof(NuksmPlanMove));
}

void cmd_plan(Ctl *ctl, bool json)
{
    g_autofree NuksmMsgPlan *plan = fetch_plan(ctl);
    const NuksmPlanMove *moves = (const NuksmPlanMove *)(plan + 1);
    /* For names */
    g_autofree NuksmMsgVms *list = ctl_list_vms(ctl);

    if (json) {
        print_json_plan(plan, moves, list);
    } else {
        print_text(plan, moves, list);
    }
}

/* A planned move's memory move may take minutes for a large VM. */
#define APPLY_TIMEOUT_SECONDS 600

/* "0-3,8" for a bitmap of @words 64-bit words. */
static char *list_text(const uint64_t *bits, size_t words)
{
    GString *out = g_string_new(NULL);
    size_t n = words * 64;

    for (size_t i = 0; i < n; i++) {
        size_t j = i;

        if (!(bits[i / 64] & (1ull << (i % 64)))) {
            continue;
        }
        while (j + 1 < n && (bits[(j + 1) / 64] & (1ull << ((j + 1) % 64)))) {
            j++;
        }
        g_string_append_printf(out, out->len ? ",%zu" : "%zu", i);
        if (j > i) {
            g_string_append_printf(out, "-%zu", j);
        }
        i = j;
    }
    return g_string_free(out, FALSE);
}

/* Was VM @e named on the command line (@names: NULL for every VM)? */
static bool named(char **names, const NuksmVmEntry *e)
{
    if (!names || !names[0]) {
        return true;
    }
    for (char **n = names; *n; n++) {
        g_autofree char *id = g_strdup_printf("%u", e->client_id);

        if (g_str_equal(*n, e->vm_name) || g_str_equal(*n, e->libvirt_name) ||
            g_str_equal(*n, id)) {
            return true;
        }
    }
    return false;
}

/* Run @argv (virsh), its command line into @commands; false if it failed. */
static bool run(GPtrArray *argv, GString *commands, GString *problem)
{
    g_autofree char *line = NULL;
    g_autofree char *err_text = NULL;
    g_autoptr(GError) err = NULL;
    int status;

    g_ptr_array_add(argv, NULL);
    line = g_strjoinv(" ", (char **)argv->pdata);
    g_string_append_printf(commands, "%s%s", commands->len ? "\n" : "",
                           line);
    if (!g_spawn_sync(NULL, (char **)argv->pdata, NULL,
                      G_SPAWN_SEARCH_PATH | G_SPAWN_STDOUT_TO_DEV_NULL, NULL,
                      NULL, NULL, &err_text, &status, &err) ||
        !g_spawn_check_wait_status(status, &err)) {
        g_string_printf(problem, "%s: %s%s%s", line,
                        err ? err->message : "failed",
                        err_text && *err_text ? ": " : "",
                        err_text ? g_strstrip(err_text) : "");
        return false;
    }
    return true;
}

/*
 * Run `virsh CMD UUID ARGS... --live` (ARGS NULL-terminated), its
 * command line into @commands; false if it failed.
 */
static bool G_GNUC_NULL_TERMINATED virsh_live(GString *commands,
                                             GString *problem,
                                             const char *cmd,
                                             const char *uuid, ...)
{
    g_autoptr(GPtrArray) argv = g_ptr_array_new_with_free_func(g_free);
    const char *arg;
    va_list ap;

    g_ptr_array_add(argv, g_strdup("virsh"));
    g_ptr_array_add(argv, g_strdup(cmd));
    g_ptr_array_add(argv, g_strdup(uuid));
    va_start(ap, uuid);
    while ((arg = va_arg(ap, const char *))) {
        g_ptr_array_add(argv, g_strdup(arg));
    }
    va_end(ap);
    g_ptr_array_add(argv, g_strdup("--live"));
    return run(argv, commands, problem);
}

/*
 * Move libvirt domain @uuid with @vcpus vCPUs as @a says, through
 * libvirt, live: each vCPU and the emulator threads to node @a->to's
 * CPUs, then its memory to the node's memory (the memory moves along).
 */
static bool move_through_libvirt(const char *uuid, uint32_t vcpus,
                                 const NuksmMsgApplied *a, GString *commands,
                                 GString *problem)
{
    g_autofree char *cpus = list_text(a->cpus, NUKSM_APPLY_CPU_WORDS);
    g_autofree char *mems = list_text(&a->mems, 1);

    for (uint32_t v = 0; v < vcpus; v++) {
        g_autofree char *vcpu = g_strdup_printf("%u", v);

        if (!virsh_live(commands, problem, "vcpupin", uuid, "--vcpu", vcpu,
                        "--cpulist", cpus, NULL)) {
            return false;
        }
    }
    return virsh_live(commands, problem, "emulatorpin", uuid, "--cpulist",
                      cpus, NULL) &&
           virsh_live(commands, problem, "numatune", uuid, "--nodeset",
                      mems, NULL);
}

/* One planned move carried out, or why not. */
typedef struct Applied {
    uint32_t id;
    char *name;
    uint32_t from, to;
    const char *how;         /* "libvirt", "nuksmd", NULL if refused */
    GString *commands;       /* virsh's command lines */
    GString *problem;        /* empty if it worked */
    NuksmMsgApplied reply;
} Applied;

static void applied_clear(Applied *a)
{
    g_free(a->name);
    g_string_free(a->commands, TRUE);
    g_string_free(a->problem, TRUE);
}

static void apply_move(Ctl *ctl, const NuksmPlanMove *mv,
                       const NuksmVmEntry *e, Applied *out)
{
    NuksmMsgApplyMove req = { .client_id = mv->client_id, .to = mv->to };
    const NuksmMsgApplied *reply;
    const char *error;

    *out = (Applied) {
        .id = mv->client_id, .from = mv->from, .to = mv->to,
        .name = g_strdup(e->vm_name[0] ? e->vm_name : e->libvirt_name),
        .commands = g_string_new(NULL), .problem = g_string_new(NULL),
    };
    if (mv->verdict != NUKSM_PLAN_PLANNED) {
        g_string_printf(out->problem, "refused (%s): %s",
                        nuksm_plan_verdict_name(mv->verdict),
                        refusal_text(mv->verdict));
        return;
    }
    reply = ctl_try_request(ctl, NUKSM_MSG_APPLY_MOVE, &req, sizeof(req),
                            NUKSM_MSG_APPLIED, &error);
    if (!reply) {
        g_string_assign(out->problem, error);
        return;
    }
    out->reply = *reply;
    if (reply->how == NUKSM_APPLY_AGENT) {
        out->how = "nuksmd";
        return;
    }
    out->how = "libvirt";
    move_through_libvirt(e->libvirt_uuid, mv->vcpus, &out->reply,
                         out->commands, out->problem);
}

static void print_applied_text(const Applied *a)
{
    g_autofree char *name = table_text(a->name);
    g_autofree char *cpus = list_text(a->reply.cpus, NUKSM_APPLY_CPU_WORDS);

    printf("%s, node %u -> node %u: ", name, a->from, a->to);
    if (!a->how) {
        printf("not moved: %s\n", a->problem->str);
        return;
    }
    if (a->commands->len) {
        g_auto(GStrv) lines = g_strsplit(a->commands->str, "\n", -1);

        printf("through libvirt:\n");
        for (char **l = lines; *l; l++) {
            printf("  $ %s\n", *l);
        }
    }
    if (a->problem->len) {
        printf("  failed: %s\n", a->problem->str);
    } else if (a->reply.how == NUKSM_APPLY_AGENT) {
        printf("moved by nuksmd: %u threads to CPUs %s; %s\n",
               a->reply.threads, cpus, a->reply.memory_moved ?
               "memory moved" : "its memory had no other node to leave");
        if (a->reply.pages_left) {
            printf("  %" PRIu64 " pages stayed behind (shared, or busy)\n",
                   a->reply.pages_left);
        }
    } else {
        printf("  moved\n");
    }
}

static void json_applied(GString *out, const Applied *a)
{
    g_string_append_printf(out, "{\"id\": %u, \"name\": ", a->id);
    json_string(out, a->name);
    g_string_append_printf(out, ", \"from\": %u, \"to\": %u, \"how\": ",
                           a->from, a->to);
    if (a->how) {
        json_string(out, a->how);
    } else {
        g_string_append(out, "null");
    }
    g_string_append(out, ", \"commands\": ");
    json_string(out, a->commands->str);
    g_string_append(out, ", \"error\": ");
    if (a->problem->len) {
        json_string(out, a->problem->str);
    } else {
        g_string_append(out, "null");
    }
    g_string_append_printf(out, ", \"threads\": %u, \"memory_moved\": %s}",
                           a->reply.threads,
                           a->reply.memory_moved ? "true" : "false");
}

/* Does the plan move, or refuse to move, the VM called @name? */
static bool plan_names(const NuksmMsgPlan *plan, const NuksmPlanMove *moves,
                       const NuksmMsgVms *list, const char *name)
{
    char *one[] = { (char *)name, NULL };

    for (uint32_t i = 0; i < plan->count; i++) {
        const NuksmVmEntry *e = ctl_vm_entry(list, moves[i].client_id);

        if (e && named(one, e)) {
            return true;
        }
    }
    return false;
}

int cmd_plan_apply(Ctl *ctl, char **names, bool json)
{
    g_autofree NuksmMsgPlan *plan = fetch_plan(ctl);
    const NuksmPlanMove *moves = (const NuksmPlanMove *)(plan + 1);
    g_autofree NuksmMsgVms *list = ctl_list_vms(ctl);
    g_autoptr(GString) out = g_string_new("{\"applied\": [");
    guint found = 0;
    int failed = 0;

    ctl_set_reply_timeout(ctl, APPLY_TIMEOUT_SECONDS);
    for (uint32_t i = 0; i < plan->count; i++) {
        const NuksmVmEntry *e = ctl_vm_entry(list, moves[i].client_id);
        Applied a;

        if (!e || !named(names, e) ||
            (!names && moves[i].verdict != NUKSM_PLAN_PLANNED)) {
            continue;
        }
        apply_move(ctl, &moves[i], e, &a);
        failed |= !a.how || a.problem->len;
        if (json) {
            g_string_append(out, found ? ", " : "");
            json_applied(out, &a);
        } else {
            print_applied_text(&a);
        }
        found++;
        applied_clear(&a);
    }
    if (json) {
        g_string_append(out, "]}");
        print_json(out);
    } else if (!found && !names) {
        printf("nothing to move: the plan moves no VM\n");
    }
    for (char **n = names; n && *n; n++) {
        if (!plan_names(plan, moves, list, *n)) {
            fprintf(stderr, "nuksmctl: %s: the plan moves no such VM (see "
                    "nuksmctl plan)\n", *n);
            failed = 1;
        }
    }
    return failed;
}
