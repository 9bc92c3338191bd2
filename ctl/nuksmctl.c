/*
 * nuksmctl: query and steer a running nuksmd.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <glib.h>

#include "ctl.h"
#include "nuksm-config.h"
#include "nuksm-proto.h"
#include "plan.h"
#include "run.h"
#include "similarity.h"
#include "top.h"

/* INFO's scope, as nuksmctl status names it. */
static const char *scope_name(uint32_t scope)
{
    switch (scope) {
    case NUKSM_INFO_HOST:   return "host";
    case NUKSM_INFO_DOMAIN: return "domain";
    default:                return "none";
    }
}

static void cmd_status(Ctl *ctl, bool json)
{
    const NuksmMsgInfo *info = ctl_request(ctl, NUKSM_MSG_GET_INFO, NULL, 0,
                                           NUKSM_MSG_INFO);
    const char *policy = nuksm_policy_name(info->policy);

    if (json) {
        g_autoptr(GString) out = g_string_new("{\"agent_version\": ");

        json_string(out, info->agent_version);
        g_string_append(out, ", \"policy\": ");
        json_string(out, policy);
        g_string_append(out, ", \"scope\": ");
        json_string(out, scope_name(info->scope));
        g_string_append_printf(out,
            ", \"nodes\": %u, \"vms\": %u, \"vms_reading\": %u"
            ", \"scan_budget\": %g, \"vms_resting\": %u"
            ", \"run\": \"%s\", \"held\": %s"
            ", \"memory_available\": %g, \"memory_stall\": %g"
            ", \"pages_shared\": %" PRIu64
            ", \"pages_sharing\": %" PRIu64 ", \"pages_moved\": %" PRIu64
            ", \"moves_pending\": %" PRIu64 ", \"orphan_pages\": %" PRIu64
            ", \"store_pages\": [",
            info->nr_nodes, info->vms, info->vms_reading,
            info->scan_budget_ppm / 1e6, info->vms_resting,
            nuksm_run_name(info->run), info->held ? "true" : "false",
            info->available_pm / 1e3, info->stall_pm / 1e3,
            info->pages_shared,
            info->pages_sharing, info->pages_moved, info->moves_pending,
            info->orphan_pages);
        for (uint32_t i = 0; i < info->nr_nodes; i++) {
            g_string_append_printf(out, "%s%" PRIu64, i ? ", " : "",
                                   info->store_pages[i]);
        }
        g_string_append(out, "], \"conditions\": [");
        for (uint32_t bit = 1, n = 0; bit & NUKSM_COND_ALL; bit <<= 1) {
            if (info->conditions & bit) {
                g_string_append(out, n++ ? ", " : "");
                json_string(out, nuksm_condition_name(bit));
            }
        }
        g_string_append(out, "], \"condition_reason\": ");
        json_string(out, info->condition_reason);
        g_string_append(out, "}");
        print_json(out);
        return;
    }

    printf("agent version:  %s\n", info->agent_version);
    printf("policy:         %s\n", policy);
    printf("NUMA nodes:     %u\n", info->nr_nodes);
    printf("merging:        %s\n", info->conditions ?
           info->condition_reason : "not held back");
    if (info->scan_budget_ppm) {
        printf("scan budget:    %g%% of a core, shared by the VMs\n",
               info->scan_budget_ppm / 1e4);
    } else {
        printf("scan budget:    none: each VM its own governor's\n");
    }
    printf("run:            %s: %s", nuksm_run_name(info->run),
           info->held ? "merging rests" : "merging works");
    if (info->run == NUKSM_RUN_PRESSURE) {
        printf(" (%.1f%% of memory available, tasks stalled %.1f%% of "
               "the time)", info->available_pm / 10.0,
               info->stall_pm / 10.0);
    }
    printf("\n");
    if (info->scope != NUKSM_INFO_HOST) {
        printf("(the host's counters are for administrators: root, "
               "nuksmd's user or its admin-group)\n");
        return;
    }
    printf("VMs:            %u\n", info->vms);
    printf("resting VMs:    %u\n", info->vms_resting);
    /* A VM not sampling says why in its query-nuksm (hotness.reads.note). */
    printf("read hotness:   %u of %u VMs sample reads (minor faults)\n",
           info->vms_reading, info->vms);
    printf("pages shared:   %" PRIu64 "\n", info->pages_shared);
    printf("pages sharing:  %" PRIu64 "\n", info->pages_sharing);
    printf("pages moved:    %" PRIu64 " (%" PRIu64 " pending)\n",
           info->pages_moved, info->moves_pending);
    printf("orphan pages:   %" PRIu64 "\n", info->orphan_pages);
    printf("store pages:\n");
    for (uint32_t i = 0; i < info->nr_nodes; i++) {
        g_autofree char *node = g_strdup_printf("node %u:", i);

        printf("  %-14s%" PRIu64 "\n", node, info->store_pages[i]);
    }
}


enum { VM_COLUMNS = 21 };

/* "0" or "0,1": the home node of each guest node; "-" before TOPOLOGY. */
static char *home_text(const NuksmVmEntry *e)
{
    GString *text = g_string_new(e->nr_gnodes ? NULL : "-");

    for (uint32_t g = 0; g < e->nr_gnodes; g++) {
        g_string_append_printf(text, "%s%u", g ? "," : "", e->home[g]);
    }
    return g_string_free(text, FALSE);
}

/*
 * The NUMA tax in reads (docs/placement.rst): each read of a merged page
 * costs the local or the remote latency (AdaptMD Table I, as
 * scripts/numa_tax.py has them), against all of them local.
 */
#define LOCAL_NS 82.0
#define REMOTE_NS 132.0

/* @e's slowdown by its sampled reads; false if it has none. */
static bool read_slowdown(const NuksmVmEntry *e, double *slowdown)
{
    double reads = (double)e->reads_local + (double)e->reads_remote;

    if (!reads) {
        return false;
    }
    *slowdown = (LOCAL_NS * e->reads_local + REMOTE_NS * e->reads_remote) /
                (LOCAL_NS * reads);
    return true;
}

/*
 * nuKSM §5.2's fairness over the VMs of @entries with sampled reads: the
 * least slowdown over the most, 1 when all pay alike.  The VMs it is
 * over, 0 if none (then no figure).
 */
static uint32_t read_fairness(const NuksmVmEntry *entries, uint32_t count,
                              double *fairness)
{
    double least = 0, most = 0, slowdown;
    uint32_t vms = 0;

    for (uint32_t i = 0; i < count; i++) {
        if (read_slowdown(&entries[i], &slowdown)) {
            least = vms ? MIN(least, slowdown) : slowdown;
            most = vms ? MAX(most, slowdown) : slowdown;
            vms++;
        }
    }
    *fairness = vms ? least / most : 0;
    return vms;
}

/* "local/remote" sampled reads of merged pages; "-" before a READS. */
static char *reads_text(const NuksmVmEntry *e)
{
    if (!e->read_window_ms) {
        return g_strdup("-");
    }
    return g_strdup_printf("%" PRIu64 "/%" PRIu64, e->reads_local,
                           e->reads_remote);
}

/* The agent's conditions, which hold back every VM's merging. */
typedef struct AgentConditions {
    uint32_t bits;           /* NuksmCondition */
    char *reason;
} AgentConditions;

/*
 * What holds back a VM's merging, as its query-nuksm limit: its own
 * (VM_LIMIT) first, else the agent's first condition, else its domain's
 * quota; NULL if nothing.
 */
static bool own_limit(const NuksmVmEntry *e)
{
    return e->limit && e->limit != NUKSM_VM_LIMIT_DOMAIN_QUOTA;
}

static const char *vm_limit_name(const NuksmVmEntry *e,
                                 const AgentConditions *agent)
{
    if (own_limit(e)) {
        return nuksm_vm_limit_name(e->limit);
    }
    for (uint32_t bit = 1; bit & NUKSM_COND_ALL; bit <<= 1) {
        if (agent->bits & bit) {
            return nuksm_condition_name(bit);
        }
    }
    return nuksm_vm_limit_name(e->limit);
}

static const char *vm_limit_reason(const NuksmVmEntry *e,
                                   const AgentConditions *agent)
{
    return own_limit(e) || !agent->bits ? e->limit_reason : agent->reason;
}

/* The fairness figure, if a VM listed has sampled reads. */
static void print_read_fairness(const NuksmMsgVms *vms,
                                const NuksmVmEntry *entries)
{
    double fairness;
    uint32_t over = read_fairness(entries, vms->count, &fairness);

    if (over) {
        printf("NUMA-tax fairness by sampled reads (min/max slowdown, "
               "nuKSM 5.2): %.3f over %u VM%s\n", fairness, over,
               over == 1 ? "" : "s");
    }
}

/*
 * "to 1" for a planned move, "pinned" for a refused one, "moved 1" for
 * one carried out, else "-".
 */
static char *plan_text(const NuksmVmEntry *e)
{
    if (e->plan_verdict == NUKSM_PLAN_PLANNED) {
        return g_strdup_printf("to %u", e->plan_to);
    }
    if (e->plan_verdict == NUKSM_PLAN__MAX &&
        e->applied_to < NUKSM_MAX_NODES) {
        return g_strdup_printf("moved %u", e->applied_to);
    }
    return g_strdup(nuksm_plan_verdict_name(e->plan_verdict) ?: "-");
}

static void print_vms_table(const NuksmMsgVms *vms,
                            const NuksmVmEntry *entries,
                            const AgentConditions *agent)
{
    static const char *const header[VM_COLUMNS] = {
        "ID", "PID", "UID", "DOMAIN", "FROM", "NAME", "OBJECT", "PRIORITY",
        "MERGED", "LOCAL", "REMOTE", "READS", "WINDOW", "HOT", "HOME",
        "LIMIT", "LIBVIRT", "UPLOADS", "TWIN", "PLAN", "SHARE",
    };
    g_autoptr(GPtrArray) rows = g_ptr_array_new_with_free_func(
        (GDestroyNotify)g_strfreev);
    g_autoptr(GString) table = g_string_new(NULL);

    for (uint32_t i = 0; i < vms->count; i++) {
        const NuksmVmEntry *e = &entries[i];
        char **row = g_new0(char *, VM_COLUMNS + 1);

        row[0] = g_strdup_printf("%u", e->client_id);
        row[1] = g_strdup_printf("%u", e->pid);
        row[2] = g_strdup_printf("%u", e->uid);
        row[3] = table_text(e->domain);
        row[4] = g_strdup(nuksm_domain_source_name(e->domain_source));
        row[5] = table_text(e->vm_name);
        row[6] = table_text(e->object_id);
        row[7] = g_strdup_printf("%u", e->priority);
        row[8] = g_strdup_printf("%" PRIu64, e->merged_pages);
        row[9] = g_strdup_printf("%" PRIu64, e->merged_local);
        row[10] = g_strdup_printf("%" PRIu64, e->merged_remote);
        /* Reads of its merged pages, the read window, hot read regions. */
        row[11] = reads_text(e);
        row[12] = e->read_window_ms ?
                  g_strdup_printf("%ums", e->read_window_ms) : g_strdup("-");
        row[13] = e->read_window_ms ?
                  g_strdup_printf("%u", e->read_hot_regions) : g_strdup("-");
        row[14] = home_text(e);
        row[15] = g_strdup(vm_limit_name(e, agent) ?: "-");
        row[16] = e->libvirt_name[0] ? table_text(e->libvirt_name)
                                     : g_strdup("-");
        /* How its new slots get their content: read by the agent or sent. */
        row[17] = g_strdup(e->read_errno ? "sent" : "read");
        /* Co-location: its most similar VM, and where the plan moves it. */
        row[18] = e->twin_id ? g_strdup_printf("%u:%.0f%%", e->twin_id,
                                               e->twin_pm / 10.0)
                             : g_strdup("-");
        row[19] = plan_text(e);
        row[20] = ctl_share_text(&e->share);
        g_ptr_array_add(rows, row);
    }

    ctl_table(table, header, VM_COLUMNS, rows);
    fputs(table->str, stdout);
    for (uint32_t i = 0; i < vms->count; i++) {
        const NuksmVmEntry *e = &entries[i];
        g_autofree char *reason = NULL;

        if (vm_limit_name(e, agent)) {
            reason = table_text(vm_limit_reason(e, agent));
            printf("VM %u limited by %s: %s\n", e->client_id,
                   vm_limit_name(e, agent), reason);
        }
        if (e->read_errno) {
            printf("VM %u sends its uploads: nuksmd cannot read its memory "
                   "(%s)\n", e->client_id, g_strerror(e->read_errno));
        }
    }
    print_read_fairness(vms, entries);
}

static void cmd_vms(Ctl *ctl, bool json)
{
    const NuksmMsgInfo *info = ctl_request(ctl, NUKSM_MSG_GET_INFO, NULL, 0,
                                           NUKSM_MSG_INFO);
    g_autofree char *agent_reason =
        g_strdup_printf("agent: %s", info->condition_reason);
    AgentConditions agent = { info->conditions, agent_reason };
    /* Replies share one buffer: INFO is not to be read from here on. */
    g_autofree NuksmMsgVms *vms = ctl_list_vms(ctl);
    const NuksmVmEntry *entries = (const NuksmVmEntry *)(vms + 1);
    g_autoptr(GString) out = NULL;
    double fairness, slowdown;

    if (!json) {
        print_vms_table(vms, entries, &agent);
        return;
    }

    out = g_string_new(NULL);
    g_string_append_printf(out, "{\"total\": %u, \"read_fairness\": ",
                           vms->total);
    if (read_fairness(entries, vms->count, &fairness)) {
        g_string_append_printf(out, "%.4f", fairness);
    } else {
        g_string_append(out, "null");
    }
    g_string_append(out, ", \"vms\": [");
    for (uint32_t i = 0; i < vms->count; i++) {
        const NuksmVmEntry *e = &entries[i];

        g_string_append_printf(out,
            "%s{\"id\": %u, \"pid\": %u, \"uid\": %u, \"domain\": ",
            i ? ", " : "", e->client_id, e->pid, e->uid);
        json_string(out, e->domain);
        g_string_append(out, ", \"domain_source\": ");
        json_string(out, nuksm_domain_source_name(e->domain_source));
        g_string_append(out, ", \"requested_domain\": ");
        json_string(out, e->requested_domain);
        g_string_append(out, ", \"name\": ");
        json_string(out, e->vm_name);
        g_string_append(out, ", \"object\": ");
        json_string(out, e->object_id);
        g_string_append_printf(out,
            ", \"priority\": %u, \"priority_limit\": %u"
            ", \"merged_pages\": %" PRIu64
            ", \"merged_local\": %" PRIu64 ", \"merged_remote\": %" PRIu64
            ", \"home\": [", e->priority, e->priority_limit,
            e->merged_pages, e->merged_local, e->merged_remote);
        for (uint32_t g = 0; g < e->nr_gnodes; g++) {
            g_string_append_printf(out, "%s%u", g ? ", " : "", e->home[g]);
        }
        g_string_append(out, "], \"limit\": ");
        if (vm_limit_name(e, &agent)) {
            json_string(out, vm_limit_name(e, &agent));
            g_string_append(out, ", \"limit_reason\": ");
            json_string(out, vm_limit_reason(e, &agent));
        } else {
            g_string_append(out, "null, \"limit_reason\": null");
        }
        /* The libvirt domain its hook registered for this pid. */
        g_string_append(out, ", \"libvirt\": ");
        if (e->libvirt_name[0]) {
            g_string_append(out, "{\"name\": ");
            json_string(out, e->libvirt_name);
            g_string_append(out, ", \"uuid\": ");
            json_string(out, e->libvirt_uuid);
            g_string_append_c(out, '}');
        } else {
            g_string_append(out, "null");
        }
        g_string_append_printf(out, ", \"agent_cpu_seconds\": %.6f"
                               ", \"throttled_seconds\": %.6f"
                               ", \"uploads_read\": %" PRIu64
                               ", \"uploads_sent\": %" PRIu64
                               ", \"read_error\": ",
                               e->agent_cpu_ns / 1e9, e->throttled_ns / 1e9,
                               e->uploads_read, e->uploads_sent);
        if (e->read_errno) {
            json_string(out, g_strerror(e->read_errno));
        } else {
            g_string_append(out, "null");
        }
        /* The reads of its merged pages its sampling caught (READS). */
        g_string_append_printf(out, ", \"reads_local\": %" PRIu64
                               ", \"reads_remote\": %" PRIu64
                               ", \"read_window_ms\": %u"
                               ", \"read_hot_regions\": %u"
                               ", \"read_slowdown\": ",
                               e->reads_local, e->reads_remote,
                               e->read_window_ms, e->read_hot_regions);
        if (read_slowdown(e, &slowdown)) {
            g_string_append_printf(out, "%.4f", slowdown);
        } else {
            g_string_append(out, "null");
        }
        /* Co-location's last look: twin, and the plan's move. */
        g_string_append(out, ", \"twin\": ");
        if (e->twin_id) {
            g_string_append_printf(out, "{\"id\": %u, \"similarity\": "
                                   "%.3f}", e->twin_id, e->twin_pm / 1000.0);
        } else {
            g_string_append(out, "null");
        }
        g_string_append(out, ", \"plan\": ");
        if (e->plan_verdict < NUKSM_PLAN__MAX) {
            g_string_append_printf(out, "{\"to\": %u, \"verdict\": \"%s\"}",
                                   e->plan_to,
                                   nuksm_plan_verdict_name(e->plan_verdict));
        } else {
            g_string_append(out, "null");
        }
        g_string_append_printf(out, ", \"scheme\": \"%s\", \"moved_to\": ",
                               nuksm_scheme_name(e->scheme));
        if (e->applied_to < NUKSM_MAX_NODES) {
            g_string_append_printf(out, "%u", e->applied_to);
        } else {
            g_string_append(out, "null");
        }
        /* What its scanner counts (VM_STATS), as query-nuksm has it. */
        g_string_append_printf(out,
            ", \"scanner\": {\"eligible_pages\": %" PRIu64
            ", \"pages_scanned\": %" PRIu64 ", \"full_scans\": %" PRIu64
            ", \"zero_pages\": %" PRIu64 ", \"cow_breaks\": %" PRIu64
            ", \"pages_volatile\": %" PRIu64 ", \"cpu_seconds\": %.3f}",
            e->scanner.eligible_pages, e->scanner.pages_scanned,
            e->scanner.full_scans, e->scanner.zero_pages,
            e->scanner.cow_breaks, e->scanner.pages_volatile,
            e->scanner.scan_cpu_ns / 1e9);
        /* Its part of the host's scan budget (SHARE). */
        g_string_append(out, ", \"share\": {\"reason\": ");
        json_string(out, nuksm_share_reason_name(e->share.reason));
        g_string_append_printf(out, ", \"max_cpu\": %g, \"pace\": %u"
                               ", \"yield\": %u}}",
                               e->share.max_cpu_ppm / 1e6, e->share.pace,
                               e->share.yield);
    }
    g_string_append(out, "]}");
    print_json(out);
}

/* Show the policy in force, after setting it to @policy if >= 0. */
static void cmd_policy(Ctl *ctl, int policy, bool json)
{
    const NuksmMsgPolicy *reply;
    const char *name;

    if (policy >= 0) {
        NuksmMsgPolicy req = { .policy = policy };

        reply = ctl_request(ctl, NUKSM_MSG_SET_POLICY, &req, sizeof(req),
                            NUKSM_MSG_POLICY);
    } else {
        reply = ctl_request(ctl, NUKSM_MSG_GET_POLICY, NULL, 0,
                            NUKSM_MSG_POLICY);
    }
    name = nuksm_policy_name(reply->policy);

    if (json) {
        g_autoptr(GString) out = g_string_new("{\"policy\": ");

        json_string(out, name);
        g_string_append_c(out, '}');
        print_json(out);
    } else {
        printf("%s\n", name);
    }
}

/*
 * nuksmctl libvirt ...: the domain XML editor, a Python program that
 * make install puts in PREFIX/lib/nuksm beside PREFIX/bin/nuksmctl
 * (libvirt-hooks/nuksm-libvirt), run with the arguments after "libvirt".
 */
static void G_GNUC_NORETURN run_libvirt_helper(char **argv)
{
    g_autofree char *self = g_file_read_link("/proc/self/exe", NULL);
    g_autofree char *bindir = self ? g_path_get_dirname(self) : NULL;
    g_autofree char *helper = NULL;

    if (!bindir) {
        die(2, "libvirt: cannot find where nuksmctl is installed");
    }
    helper = g_build_filename(bindir, "..", "lib", "nuksm", "nuksm-libvirt",
                              NULL);
    argv[0] = helper;
    execv(helper, argv);
    die(2, "libvirt: cannot run %s: %s (the installed nuksmctl has it: "
        "make install)", helper, g_strerror(errno));
}

int main(int argc, char **argv)
{
    g_autofree char *socket_path = NULL;
    gboolean json = FALSE;
    gboolean sketches = FALSE;
    gboolean apply = FALSE;
    gboolean once = FALSE;
    int interval = 2;
    g_autofree char *sort_name = NULL;
    int sort = TOP_SORT_SAVED;
    gboolean version = FALSE;
    gboolean no_wait = FALSE;
    int rate_mib = PRUNE_RATE_DEFAULT_MIB;
    GOptionEntry entries[] = {
        { "socket", 0, 0, G_OPTION_ARG_FILENAME, &socket_path,
          "nuksmd socket (default " NUKSM_DEFAULT_SOCKET ")", "PATH" },
        { "json", 0, 0, G_OPTION_ARG_NONE, &json,
          "Print JSON instead of text", NULL },
        { "sketches", 0, 0, G_OPTION_ARG_NONE, &sketches,
          "With similarity and --json: every VM's content sketch, to "
          "compare VMs across hosts", NULL },
        { "apply", 0, 0, G_OPTION_ARG_NONE, &apply,
          "With plan: carry out the planned moves, of the VMs named or "
          "all (through libvirt for libvirt domains)", NULL },
        { "interval", 0, 0, G_OPTION_ARG_INT, &interval,
          "With top: refresh every N seconds (1..3600, default 2)", "N" },
        { "sort", 0, 0, G_OPTION_ARG_STRING, &sort_name,
          "With top: sort the VMs by saved (default), remote, cpu or name",
          "KEY" },
        { "once", 0, 0, G_OPTION_ARG_NONE, &once,
          "With top: print one frame, after one interval, and exit", NULL },
        { "rate", 0, 0, G_OPTION_ARG_INT, &rate_mib,
          "With prune: unmerge at most N MiB per second per VM (1..65536, "
          "default " G_STRINGIFY(PRUNE_RATE_DEFAULT_MIB) ")", "N" },
        { "no-wait", 0, 0, G_OPTION_ARG_NONE, &no_wait,
          "With prune: return at once instead of showing what is left "
          "until no page is merged", NULL },
        { "version", 0, 0, G_OPTION_ARG_NONE, &version,
          "Print the version and exit", NULL },
        { NULL },
    };
    g_autoptr(GOptionContext) octx = NULL;
    g_autoptr(GError) err = NULL;
    Ctl ctl = { .fd = -1 };
    const char *cmd;
    int max_argc;
    int policy = -1;
    int run = -1;
    int status = 0;

    if (argc >= 2 && g_str_equal(argv[1], "libvirt")) {
        run_libvirt_helper(argv + 1);
    }

    octx = g_option_context_new(
        "status|vms|top|similarity|plan [--apply [VM...]]|policy [NAME]|"
        "run MODE|prune [DOMAIN]|libvirt ...");
    g_option_context_set_summary(octx,
        "  status         agent version, policy, nodes, VMs, page counts\n"
        "  vms            the connected VMs, their merged pages and the\n"
        "                 reads of them, and the NUMA-tax fairness\n"
        "  top            a live view of the agent, each merge domain and\n"
        "                 each VM, refreshed in place (keys: s r c n sort,\n"
        "                 q quits)\n"
        "  similarity     how much of their memory the VMs of each merge\n"
        "                 domain hold alike (administrators only)\n"
        "  plan           the moves that would bring similar VMs onto one\n"
        "                 node, and why others are refused (administrators\n"
        "                 only)\n"
        "  plan --apply [VM...]\n"
        "                 carry out the planned moves, of the VMs named\n"
        "                 or of all\n"
        "  policy         the placement policy in force\n"
        "  policy NAME    switch every VM to policy NAME\n"
        "  run MODE       merge always, only while memory is short\n"
        "                 (pressure) or never (off), from now on; ends a\n"
        "                 prune (administrators only)\n"
        "  prune [DOMAIN] stop merging in merge domain DOMAIN, or on the\n"
        "                 host, and unmerge every merged page there, at\n"
        "                 most --rate MiB/s per VM, until nuksmctl run\n"
        "                 (administrators only)\n"
        "  libvirt attach|detach DOMAIN ...\n"
        "                 add the nuksm object to a libvirt domain, or\n"
        "                 remove it (nuksmctl libvirt --help)");
    g_option_context_set_description(octx,
        "Policies: global, ksm-order, local, fair, priority, adaptive,\n"
        "auto.\n");
    g_option_context_add_main_entries(octx, entries, NULL);
    if (!g_option_context_parse(octx, &argc, &argv, &err)) {
        die(2, "%s (see --help)", err->message);
    }
    if (version) {
        printf("nuksmctl %s\n", NUKSM_VERSION);
        return 0;
    }
    if (argc < 2) {
        die(2, "missing command (allowed: status, vms, top, similarity, "
            "plan, policy, run, prune, libvirt)");
    }

    cmd = argv[1];
    if (g_str_equal(cmd, "policy") || g_str_equal(cmd, "prune")) {
        max_argc = 3;
    } else if (g_str_equal(cmd, "run")) {
        if (argc < 3) {
            die(2, "run: missing MODE (allowed: always, pressure, off)");
        }
        max_argc = 3;
    } else if (g_str_equal(cmd, "plan") && apply) {
        max_argc = argc;
    } else if (g_str_equal(cmd, "status") || g_str_equal(cmd, "vms") ||
               g_str_equal(cmd, "top") || g_str_equal(cmd, "similarity") ||
               g_str_equal(cmd, "plan")) {
        max_argc = 2;
    } else {
        die(2, "unknown command '%s' (allowed: status, vms, top, "
            "similarity, plan, policy, run, prune, libvirt)", cmd);
    }
    if ((rate_mib != PRUNE_RATE_DEFAULT_MIB || no_wait) &&
        !g_str_equal(cmd, "prune")) {
        die(2, "--rate and --no-wait go with prune");
    }
    if (rate_mib < 1 || rate_mib > 65536) {
        die(2, "--rate: %d is out of range (allowed: 1..65536 MiB/s)",
            rate_mib);
    }
    if ((once || sort_name || interval != 2) && !g_str_equal(cmd, "top")) {
        die(2, "--interval, --sort and --once go with top");
    }
    if (interval < 1 || interval > 3600) {
        die(2, "--interval: %d is out of range (allowed: 1..3600)",
            interval);
    }
    if (sort_name) {
        sort = top_sort_parse(sort_name);
        if (sort < 0) {
            die(2, "--sort: unknown key '%s' (allowed: %s)", sort_name,
                top_sort_names());
        }
    }
    if (sketches && (!g_str_equal(cmd, "similarity") || !json)) {
        die(2, "--sketches goes with --json similarity");
    }
    if (apply && !g_str_equal(cmd, "plan")) {
        die(2, "--apply goes with plan");
    }
    if (argc > max_argc) {
        die(2, "unexpected argument '%s' (see --help)", argv[max_argc]);
    }
    if (argc == 3 && g_str_equal(cmd, "policy")) {
        /* Reject a bad name here, without bothering nuksmd. */
        policy = nuksm_policy_parse(argv[2]);
        if (policy < 0) {
            die(2, "unknown policy '%s' (allowed: %s)", argv[2],
                nuksm_policy_names());
        }
    }

    if (g_str_equal(cmd, "run")) {
        for (uint32_t r = 0; r < NUKSM_RUN__MAX; r++) {
            if (g_str_equal(argv[2], nuksm_run_name(r))) {
                run = r;
            }
        }
        if (run < 0) {
            die(2, "run: unknown mode '%s' (allowed: always, pressure, off)",
                argv[2]);
        }
    }
    if (g_str_equal(cmd, "prune") && argc == 3 &&
        strlen(argv[2]) >= NUKSM_NAME_LEN) {
        die(2, "prune: domain name '%s' is too long (at most %u bytes)",
            argv[2], NUKSM_NAME_LEN - 1);
    }

    ctl.socket_path = socket_path ? socket_path : NUKSM_DEFAULT_SOCKET;
    ctl.buf = g_malloc(NUKSM_MSG_MAX);
    ctl_connect(&ctl);
    ctl_hello(&ctl);

    if (g_str_equal(cmd, "status")) {
        cmd_status(&ctl, json);
    } else if (g_str_equal(cmd, "vms")) {
        cmd_vms(&ctl, json);
    } else if (g_str_equal(cmd, "top")) {
        status = cmd_top(&ctl, interval, sort, once);
    } else if (g_str_equal(cmd, "similarity") && sketches) {
        cmd_sketches(&ctl);
    } else if (g_str_equal(cmd, "similarity")) {
        cmd_similarity(&ctl, json);
    } else if (g_str_equal(cmd, "plan") && apply) {
        status = cmd_plan_apply(&ctl, argc > 2 ? argv + 2 : NULL, json);
    } else if (g_str_equal(cmd, "plan")) {
        cmd_plan(&ctl, json);
    } else if (g_str_equal(cmd, "run")) {
        cmd_run(&ctl, run, json);
    } else if (g_str_equal(cmd, "prune")) {
        status = cmd_prune(&ctl, argc > 2 ? argv[2] : NULL, rate_mib,
                           !no_wait, json);
    } else {
        cmd_policy(&ctl, policy, json);
    }

    close(ctl.fd);
    g_free(ctl.buf);
    return status;
}
