/*
 * nuksmd metrics (metrics.h).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent.h"
#include "budget.h"
#include "conditions.h"
#include "ledger.h"
#include "libvirt.h"
#include "log.h"
#include "metrics.h"
#include "nuksm-config.h"

/* "# HELP" and "# TYPE" of a metric family. */
static void family(GString *out, const char *name, const char *type,
                   const char *help)
{
    g_string_append_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help,
                           name, type);
}

/*
 * @value as a label value: valid UTF-8, with \, " and newline escaped,
 * and any other control character (a VM names itself: CR, ESC, BEL would
 * act on a terminal that shows the file) shown as '?', as nuksmctl does.
 */
static void label_value(GString *out, const char *value)
{
    g_autofree char *valid = g_utf8_make_valid(value, -1);

    g_string_append_c(out, '"');
    for (const char *p = valid; *p; p = g_utf8_next_char(p)) {
        gunichar c = g_utf8_get_char(p);

        if (c == '\\') {
            g_string_append(out, "\\\\");
        } else if (c == '"') {
            g_string_append(out, "\\\"");
        } else if (c == '\n') {
            g_string_append(out, "\\n");
        } else if (g_unichar_iscntrl(c)) {
            g_string_append_c(out, '?');
        } else {
            g_string_append_unichar(out, c);
        }
    }
    g_string_append_c(out, '"');
}

/* A sample NAME{LABELS} VALUE; @labels "" for none. */
static void sample(GString *out, const char *name, const char *labels,
                   double value)
{
    g_string_append(out, name);
    if (*labels) {
        g_string_append_printf(out, "{%s}", labels);
    }
    g_string_append_printf(out, " %.17g\n", value);
}

/* A sample whose labels are @labels and one more, KEY="VALUE". */
static void sample_with(GString *out, const char *name, const char *labels,
                        const char *key, const char *value, double v)
{
    g_autoptr(GString) all = g_string_new(labels);

    g_string_append_printf(all, "%s%s=", *labels ? "," : "", key);
    label_value(all, value);
    sample(out, name, all->str, v);
}

/* One VM as the per-VM families see it. */
typedef struct VmRow {
    NuksmClient *vm;
    char *labels;            /* vm, id, libvirt_uuid, merge_domain */
    uint64_t local, remote;  /* merged pages by where their copy is */
} VmRow;

static void vm_row_clear(gpointer p)
{
    g_free(((VmRow *)p)->labels);
}

/* The VMs, with their labels: a libvirt domain by libvirt's name. */
static GArray *vm_rows(NuksmAgent *agent)
{
    g_autoptr(GPtrArray) vms = clients_list_vms(&agent->clients);
    g_autoptr(GHashTable) libvirt = libvirt_registry_read(agent->libvirt_dir);
    GArray *rows = g_array_sized_new(FALSE, FALSE, sizeof(VmRow), vms->len);

    g_array_set_clear_func(rows, vm_row_clear);
    for (guint i = 0; i < vms->len; i++) {
        NuksmClient *vm = g_ptr_array_index(vms, i);
        const LibvirtDomain *dom =
            g_hash_table_lookup(libvirt, GINT_TO_POINTER(vm->pid));
        g_autoptr(GString) labels = g_string_new("vm=");
        VmRow row = { .vm = vm };

        label_value(labels, dom ? dom->name : vm->vm_name);
        g_string_append_printf(labels, ",id=\"%u\",libvirt_uuid=", vm->id);
        label_value(labels, dom ? dom->uuid : "");
        g_string_append(labels, ",merge_domain=");
        label_value(labels, vm->domain);
        row.labels = g_string_free(g_steal_pointer(&labels), FALSE);
        ledger_locality(vm, &row.local, &row.remote);
        g_array_append_val(rows, row);
    }
    return rows;
}

static const char *const limit_names[NUKSM_VM_LIMIT__MAX] = {
    [NUKSM_VM_LIMIT_USERFAULTFD] = "userfaultfd",
    [NUKSM_VM_LIMIT_MAP_COUNT] = "map-count",
    [NUKSM_VM_LIMIT_DOMAIN_QUOTA] = "domain-quota",
};

/* A figure of a VM's scanner (VM_STATS), one family each. */
typedef struct ScannerFigure {
    const char *name, *type, *help;
    size_t offset;           /* in NuksmMsgVmStats */
    size_t size;             /* of the field: 4 or 8 */
    double scale;            /* to the metric's unit */
} ScannerFigure;

#define FIELD(f) offsetof(NuksmMsgVmStats, f), \
                 sizeof(((NuksmMsgVmStats *)0)->f)

static const ScannerFigure scanner_figures[] = {
    { "nuksm_vm_eligible_pages", "gauge",
      "The VM's guest RAM its scanner looks at, in pages.",
      FIELD(eligible_pages), 1 },
    { "nuksm_vm_pages_scanned_total", "counter",
      "Pages the VM's scanner hashed.", FIELD(pages_scanned), 1 },
    { "nuksm_vm_full_scans_total", "counter",
      "Passes of the VM's scanner over all its eligible pages (KSM: "
      "full_scans).", FIELD(full_scans), 1 },
    { "nuksm_vm_zero_pages", "gauge",
      "The VM's pages dropped as zeros (KSM: ksm_stat's ksm_zero_pages).",
      FIELD(zero_pages), 1 },
    { "nuksm_vm_pages_volatile", "gauge",
      "The VM's pages changing too often to be offered (KSM: "
      "pages_volatile).", FIELD(pages_volatile), 1 },
    { "nuksm_vm_cow_breaks_total", "counter",
      "The VM's merged pages written, and so unmerged.",
      FIELD(cow_breaks), 1 },
    { "nuksm_vm_tracked_writes_total", "counter",
      "Writes to pages the VM's scanner had found stable (write "
      "tracking), each 2 MiB stretch once a pass at most.",
      FIELD(tracked_writes), 1 },
    { "nuksm_vm_huge_pages_kept", "gauge",
      "The VM's huge pages kept whole, their duplicates held back: too few "
      "to pay for splitting them (huge-split).", FIELD(huge_kept), 1 },
    { "nuksm_vm_huge_held_pages", "gauge",
      "The VM's duplicate pages held back to keep huge pages whole.",
      FIELD(huge_held_pages), 1 },
    { "nuksm_vm_huge_splits_total", "counter",
      "The VM's huge pages split for merging, as enough of their pages "
      "were duplicates to pay for it.", FIELD(huge_splits), 1 },
    { "nuksm_vm_huge_rebuilt_total", "counter",
      "The VM's huge pages rebuilt once writes or unmerges left too few "
      "of their pages merged to pay for the split.", FIELD(huge_rebuilt),
      1 },
    { "nuksm_vm_scan_rate_max", "gauge",
      "Pages per second the VM's scanner may hash, 0 for no cap (KSM: "
      "pages_to_scan per sleep).", FIELD(scan_rate), 1 },
    { "nuksm_vm_rest_seconds", "gauge",
      "The VM's scanner's rest between passes (KSM: sleep_millisecs).",
      FIELD(rest_ms), 1e-3 },
    { "nuksm_vm_scanner_cpu_max_ratio", "gauge",
      "The VM's scanner's CPU budget, in cores.", FIELD(max_cpu_pm), 1e-3 },
    { "nuksm_vm_scanner_cpu_seconds_total", "counter",
      "CPU the VM's scanner thread took.", FIELD(scan_cpu_ns), 1e-9 },
};

static double scanner_figure(const NuksmMsgVmStats *stats,
                             const ScannerFigure *fig)
{
    const char *field = (const char *)stats + fig->offset;
    uint64_t raw;

    if (fig->size == sizeof(uint32_t)) {
        uint32_t narrow;

        memcpy(&narrow, field, sizeof(narrow));
        raw = narrow;
    } else {
        memcpy(&raw, field, sizeof(raw));
    }
    return raw * fig->scale;
}

/* Each VmRow *r of @rows (whose data is NULL while it is empty). */
#define EACH_VM(r) \
    for (VmRow *r = (VmRow *)(void *)rows->data, \
         *end_ = r ? r + rows->len : NULL; r != end_; r++)

static void vm_families(NuksmAgent *agent, GArray *rows, GString *out)
{
    family(out, "nuksm_vm_merged_pages", "gauge",
           "The VM's pages that map a merged copy, by whether the copy is "
           "on the home node of the page's guest node (KSM: ksm_stat's "
           "ksm_merging_pages).");
    EACH_VM(r) {
        sample_with(out, "nuksm_vm_merged_pages", r->labels, "copy",
                    "local", r->local);
        sample_with(out, "nuksm_vm_merged_pages", r->labels, "copy",
                    "remote", r->remote);
    }
    family(out, "nuksm_vm_saved_bytes", "gauge",
           "The VM's merged pages in bytes, memory they no longer take in "
           "the VM (KSM: ksm_stat's ksm_process_profit, without the "
           "metadata).");
    EACH_VM(r) {
        sample(out, "nuksm_vm_saved_bytes", r->labels,
               (double)r->vm->merged_pages * NUKSM_PAGE_SIZE);
    }
    family(out, "nuksm_vm_reads_total", "counter",
           "Reads of the VM's merged pages its read sampling caught, by "
           "whether the copy read was local (the NUMA tax in accesses).");
    EACH_VM(r) {
        sample_with(out, "nuksm_vm_reads_total", r->labels, "copy", "local",
                    r->vm->reads.local);
        sample_with(out, "nuksm_vm_reads_total", r->labels, "copy",
                    "remote", r->vm->reads.remote);
    }
    family(out, "nuksm_vm_read_hot_regions", "gauge",
           "The VM's read regions of merged pages read lately (hot).");
    EACH_VM(r) {
        sample(out, "nuksm_vm_read_hot_regions", r->labels,
               r->vm->reads.hot_regions);
    }
    family(out, "nuksm_vm_limited", "gauge",
           "1 while the VM's merging is held back for the reason given.");
    EACH_VM(r) {
        char *quota = domains_limits_text(&agent->domains, r->vm->domain_id);

        for (uint32_t l = 1; l < NUKSM_VM_LIMIT__MAX; l++) {
            bool held = r->vm->limit.limit == l ||
                        (l == NUKSM_VM_LIMIT_DOMAIN_QUOTA && quota);

            sample_with(out, "nuksm_vm_limited", r->labels, "reason",
                        limit_names[l], held);
        }
        g_free(quota);
    }
    family(out, "nuksm_vm_state", "gauge",
           "1 for the VM's state as its query-nuksm shows it (active, "
           "paused for a migration or snapshot, disabled, limited).");
    EACH_VM(r) {
        for (uint32_t st = NUKSM_VM_STATE_ACTIVE; st < NUKSM_VM_STATE__MAX;
             st++) {
            sample_with(out, "nuksm_vm_state", r->labels, "state",
                        nuksm_vm_state_name(st), r->vm->scanner.state == st);
        }
    }
    family(out, "nuksm_vm_priority", "gauge",
           "The VM's placement priority in force (1..1000).");
    EACH_VM(r) {
        sample(out, "nuksm_vm_priority", r->labels,
               MIN(r->vm->priority, r->vm->priority_limit));
    }
    family(out, "nuksm_vm_agent_cpu_seconds_total", "counter",
           "CPU nuksmd spent on the VM's messages.");
    EACH_VM(r) {
        sample(out, "nuksm_vm_agent_cpu_seconds_total", r->labels,
               r->vm->cpu.used_ns / 1e9);
    }
    for (size_t f = 0; f < G_N_ELEMENTS(scanner_figures); f++) {
        const ScannerFigure *fig = &scanner_figures[f];

        family(out, fig->name, fig->type, fig->help);
        EACH_VM(r) {
            sample(out, fig->name, r->labels,
                   scanner_figure(&r->vm->scanner, fig));
        }
    }
    family(out, "nuksm_vm_scan_share_ratio", "gauge",
           "The VM's part of the host's scan budget, in cores, by why it "
           "has it (new, yielding, signalled, resting, idle; off: no "
           "budget, its own governor's).");
    EACH_VM(r) {
        NuksmMsgShare share;

        budget_told(r->vm, &share);
        sample_with(out, "nuksm_vm_scan_share_ratio", r->labels, "reason",
                    nuksm_share_reason_name(share.reason),
                    share.max_cpu_ppm / 1e6);
    }
    family(out, "nuksm_vm_io_hint_pages_total", "counter",
           "Pages the VM's I/O hints named (hinted), that its scanner "
           "hashed first for them (served), and that merged so (merged).");
    EACH_VM(r) {
        sample_with(out, "nuksm_vm_io_hint_pages_total", r->labels, "state",
                    "hinted", r->vm->scanner.hints_received);
        sample_with(out, "nuksm_vm_io_hint_pages_total", r->labels, "state",
                    "served", r->vm->scanner.hints_served);
        sample_with(out, "nuksm_vm_io_hint_pages_total", r->labels, "state",
                    "merged", r->vm->scanner.hints_merged);
    }
    family(out, "nuksm_vm_throttled_seconds_total", "counter",
           "How long its merge domain's CPU quota left the VM's messages "
           "unread.");
    EACH_VM(r) {
        sample(out, "nuksm_vm_throttled_seconds_total", r->labels,
               r->vm->cpu.throttled_ns / 1e9);
    }
}

/* One merge domain as the per-domain families see it. */
typedef struct DomainRow {
    const DomainStats *stats;
    char *labels;            /* merge_domain */
} DomainRow;

static void domain_row_clear(gpointer p)
{
    g_free(((DomainRow *)p)->labels);
}

/* The merge domains a VM joined since nuksmd started. */
static GArray *domain_rows(NuksmAgent *agent)
{
    g_autoptr(GArray) ids = domains_ids(&agent->domains);
    GArray *rows = g_array_new(FALSE, FALSE, sizeof(DomainRow));

    g_array_set_clear_func(rows, domain_row_clear);
    for (guint i = 0; i < ids->len; i++) {
        uint16_t id = g_array_index(ids, uint16_t, i);
        const char *name = domains_name(&agent->domains, id);
        g_autoptr(GString) labels = g_string_new("merge_domain=");
        DomainRow row = { .stats = domains_stats(&agent->domains, id) };

        if (!*name) {
            continue;       /* its pages are orphans, counted as such */
        }
        label_value(labels, name);
        row.labels = g_string_free(g_steal_pointer(&labels), FALSE);
        g_array_append_val(rows, row);
    }
    return rows;
}

static void domain_families(NuksmAgent *agent, GString *out)
{
    g_autoptr(GArray) rows = domain_rows(agent);

/* Each DomainRow *r of @rows (whose data is NULL while it is empty). */
#define EACH_DOMAIN(r) \
    for (DomainRow *r = (DomainRow *)(void *)rows->data, \
         *end_ = r ? r + rows->len : NULL; r != end_; r++)

    family(out, "nuksm_domain_vms", "gauge",
           "VMs of the merge domain connected.");
    EACH_DOMAIN(r) {
        sample(out, "nuksm_domain_vms", r->labels, r->stats->vms);
    }
    family(out, "nuksm_domain_pages_shared", "gauge",
           "The merge domain's merged copies that pages map.");
    EACH_DOMAIN(r) {
        sample(out, "nuksm_domain_pages_shared", r->labels,
               r->stats->pages_shared);
    }
    family(out, "nuksm_domain_saved_bytes", "gauge",
           "Memory merging saves the merge domain: pages mapping its "
           "copies, less one per copy.");
    EACH_DOMAIN(r) {
        sample(out, "nuksm_domain_saved_bytes", r->labels,
               (double)r->stats->pages_sharing * NUKSM_PAGE_SIZE);
    }
    family(out, "nuksm_domain_store_pages", "gauge",
           "The merge domain's store pages in use, by NUMA node.");
    EACH_DOMAIN(r) {
        for (uint32_t n = 0; n < agent->nr_nodes; n++) {
            g_autofree char *node = g_strdup_printf("%u", n);

            sample_with(out, "nuksm_domain_store_pages", r->labels, "node",
                        node, r->stats->store_pages[n]);
        }
    }
    family(out, "nuksm_domain_pages_moved_total", "counter",
           "The merge domain's merged pages re-placement moved.");
    EACH_DOMAIN(r) {
        sample(out, "nuksm_domain_pages_moved_total", r->labels,
               r->stats->pages_moved);
    }
#undef EACH_DOMAIN
}

/*
 * @total + @claim, at most UINT64_MAX: a VM's figures are its claims,
 * and a host total must never wrap below an honest VM's own, nor fall
 * as a counter reset would.
 */
static uint64_t add_saturating(uint64_t total, uint64_t claim)
{
    uint64_t sum;

    return __builtin_add_overflow(total, claim, &sum) ? UINT64_MAX : sum;
}

/*
 * The host's figures, as KSM's sysfs gives its own, and per node; the
 * VMs' scanners' summed from @rows.
 */
static void host_families(NuksmAgent *agent, GArray *rows, GString *out)
{
    uint64_t shared = 0, sharing = 0, volatile_pages = 0, full_scans = 0;
    uint64_t remote_hot[NUKSM_MAX_NODES] = { 0 };
    bool held = agent->conditions.held & (NUKSM_COND_STORE_FULL |
                                          NUKSM_COND_AGENT_MEMORY);

    for (uint32_t n = 0; n < agent->nr_nodes; n++) {
        shared += agent->ledger.slots[n].shared;
        sharing += agent->ledger.slots[n].sharing;
    }
    EACH_VM(r) {
        volatile_pages = add_saturating(volatile_pages,
                                        r->vm->scanner.pages_volatile);
        full_scans = add_saturating(full_scans, r->vm->scanner.full_scans);
        ledger_remote_hot(r->vm, agent->placement.cold_windows, remote_hot);
    }
    family(out, "nuksm_pages_shared", "gauge",
           "Merged copies that pages map (KSM: pages_shared).");
    sample(out, "nuksm_pages_shared", "", shared);
    family(out, "nuksm_pages_sharing", "gauge",
           "Pages mapping merged copies, less one per copy: the pages "
           "saved (KSM: pages_sharing).");
    sample(out, "nuksm_pages_sharing", "", sharing);
    family(out, "nuksm_pages_unshared", "gauge",
           "Candidate pages waiting for a partner of the same content, "
           "the unstable table's entries (KSM: pages_unshared).");
    sample(out, "nuksm_pages_unshared", "", agent->contents.seen);
    family(out, "nuksm_pages_forgotten", "gauge",
           "Candidate pages that paired with none for --forget-after "
           "seconds, forgotten but for a filter of their contents.");
    sample(out, "nuksm_pages_forgotten", "",
           agent->wanted.forgotten.keys);
    family(out, "nuksm_contents_wanted_total", "counter",
           "Contents forgotten that a new candidate had, asked of the "
           "VMs of its merge domain again (WANTED).");
    sample(out, "nuksm_contents_wanted_total", "",
           agent->wanted.wanted_total);
    family(out, "nuksm_forgotten_cleared_total", "counter",
           "Times the filter of forgotten contents filled up and was "
           "cleared: the pages forgotten until then merge only when "
           "offered again.");
    sample(out, "nuksm_forgotten_cleared_total", "",
           agent->wanted.cleared_total);
    family(out, "nuksm_pages_volatile", "gauge",
           "The VMs' pages changing too often to be offered (KSM: "
           "pages_volatile).");
    sample(out, "nuksm_pages_volatile", "", volatile_pages);
    family(out, "nuksm_full_scans_total", "counter",
           "Full passes of the VMs' scanners, summed over the VMs "
           "connected (KSM: full_scans; it falls when a VM goes).");
    sample(out, "nuksm_full_scans_total", "", full_scans);
    family(out, "nuksm_general_profit_bytes", "gauge",
           "Memory saved less what nuksmd's tables take (KSM: "
           "general_profit).");
    sample(out, "nuksm_general_profit_bytes", "",
           (double)sharing * NUKSM_PAGE_SIZE -
           (double)conditions_heap_bytes());
    family(out, "nuksm_run", "gauge",
           "1 while nuksmd merges, 0 while a condition of its own (store "
           "full, memory budget) holds every merge back or merging rests "
           "(--run=off, or pressure with memory to spare) (KSM: run).");
    sample(out, "nuksm_run", "", !held && !budget_held(agent));
    if (agent->budget.cfg.run == NUKSM_RUN_PRESSURE) {
        NuksmMsgInfo info = { .scope = NUKSM_INFO_NONE };

        budget_info(agent, &info);
        family(out, "nuksm_memory_available_ratio", "gauge",
               "The share of memory available, as --run=pressure reads "
               "it (the host's, or --pressure-cgroup's).");
        sample(out, "nuksm_memory_available_ratio", "",
               info.available_pm / 1e3);
        family(out, "nuksm_memory_stall_ratio", "gauge",
               "The share of time tasks stalled on memory over the last "
               "10 s (PSI some avg10), as --run=pressure reads it.");
        sample(out, "nuksm_memory_stall_ratio", "", info.stall_pm / 1e3);
    }
    family(out, "nuksm_scan_budget_ratio", "gauge",
           "The CPU budget the VMs' scanners share, in cores; 0: none, "
           "each VM its own governor's (--scan-budget).");
    sample(out, "nuksm_scan_budget_ratio", "",
           agent->budget.cfg.budget_ppm / 1e6);
    family(out, "nuksm_merge_across_nodes", "gauge",
           "1 if the placement policy lets pages of different NUMA nodes "
           "share a copy (KSM: merge_across_nodes).");
    sample(out, "nuksm_merge_across_nodes", "",
           agent->placement.policy != NUKSM_POLICY_ID_LOCAL);
    family(out, "nuksm_pages_moved_total", "counter",
           "Merged pages re-placement moved to another node's copy.");
    sample(out, "nuksm_pages_moved_total", "", agent->relocator.moved);
    family(out, "nuksm_moves_pending", "gauge",
           "Moves of merged pages planned, not started yet.");
    sample(out, "nuksm_moves_pending", "", relocate_pending(agent));
    family(out, "nuksm_orphan_pages", "gauge",
           "Store pages no VM has claimed since nuksmd started, kept while "
           "a process may map them.");
    sample(out, "nuksm_orphan_pages", "", agent->orphans.pages);
    family(out, "nuksm_node_remote_hot_pages", "gauge",
           "Merged pages read lately (hot) that map a copy on this node "
           "from a VM whose home is another: the hot copies read "
           "remotely.");
    for (uint32_t n = 0; n < agent->nr_nodes; n++) {
        g_autofree char *node = g_strdup_printf("%u", n);

        sample_with(out, "nuksm_node_remote_hot_pages", "", "node", node,
                    remote_hot[n]);
    }
    family(out, "nuksm_node_store_pages", "gauge",
           "Store pages in use (merged copies and pages on their way), by "
           "NUMA node.");
    for (uint32_t n = 0; n < agent->nr_nodes; n++) {
        g_autofree char *node = g_strdup_printf("%u", n);

        sample_with(out, "nuksm_node_store_pages", "", "node", node,
                    agent->ledger.slots[n].nr_used);
    }
}

static const char *const condition_names[NUKSM_COND_COUNT] = {
    "store-full", "agent-memory", "domain-quota",
};

/* nuksmd itself. */
static void agent_families(NuksmAgent *agent, GString *out)
{
    const AgentCounters *c = &agent->counters;
    g_autoptr(GString) info = g_string_new("version=");
    struct rusage ru;
    unsigned vms = clients_count_vms(&agent->clients);

    getrusage(RUSAGE_SELF, &ru);
    family(out, "nuksm_agent_info", "gauge",
           "nuksmd's version and placement policy, as labels.");
    label_value(info, NUKSM_VERSION);
    g_string_append(info, ",policy=");
    label_value(info, nuksm_policy_name(agent->placement.policy));
    sample(out, "nuksm_agent_info", info->str, 1);
    family(out, "nuksm_agent_start_time_seconds", "gauge",
           "When nuksmd started, in seconds since the epoch.");
    sample(out, "nuksm_agent_start_time_seconds", "",
           c->started_at / 1e6);
    family(out, "nuksm_agent_condition", "gauge",
           "1 while the condition holds merging back (a domain's quota: "
           "for some domain).");
    for (int i = 0; i < NUKSM_COND_COUNT; i++) {
        sample_with(out, "nuksm_agent_condition", "", "condition",
                    condition_names[i],
                    !!(agent->conditions.held & (1u << i)));
    }
    family(out, "nuksm_agent_heap_bytes", "gauge",
           "The heap nuksmd's tables take (what --memory-max limits).");
    sample(out, "nuksm_agent_heap_bytes", "", conditions_heap_bytes());
    family(out, "nuksm_agent_heap_max_bytes", "gauge",
           "--memory-max.");
    sample(out, "nuksm_agent_heap_max_bytes", "",
           agent->conditions.memory_max);
    family(out, "nuksm_agent_resident_bytes", "gauge",
           "nuksmd's resident memory, at most (its peak RSS).");
    sample(out, "nuksm_agent_resident_bytes", "", ru.ru_maxrss * 1024.0);
    family(out, "nuksm_agent_cpu_seconds_total", "counter",
           "CPU nuksmd used, user and system.");
    sample(out, "nuksm_agent_cpu_seconds_total", "",
           ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
           ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6);
    family(out, "nuksm_agent_clients", "gauge",
           "Clients connected, by role.");
    sample_with(out, "nuksm_agent_clients", "", "role", "vm", vms);
    sample_with(out, "nuksm_agent_clients", "", "role", "control",
                clients_count(&agent->clients) - vms);
    family(out, "nuksm_agent_protocol_errors_total", "counter",
           "Clients disconnected for a message nuksmd does not accept.");
    sample(out, "nuksm_agent_protocol_errors_total", "", c->protocol_errors);
    family(out, "nuksm_agent_refused_connections_total", "counter",
           "Connections refused before their handshake (too many from "
           "one user, bad credentials).");
    sample(out, "nuksm_agent_refused_connections_total", "",
           c->refused_connections);
    family(out, "nuksm_agent_restored_pages_total", "counter",
           "Merged pages VMs took back after nuksmd restarted (RESTORE).");
    sample(out, "nuksm_agent_restored_pages_total", "", c->restored_pages);
    family(out, "nuksm_agent_refused_restores_total", "counter",
           "RESTORE entries refused (not the slot's generation or "
           "domain).");
    sample(out, "nuksm_agent_refused_restores_total", "",
           c->refused_restores);
}

GString *metrics_text(NuksmAgent *agent)
{
    GString *out = g_string_sized_new(16384);
    g_autoptr(GArray) rows = vm_rows(agent);

    host_families(agent, rows, out);
    domain_families(agent, out);
    vm_families(agent, rows, out);
    agent_families(agent, out);
    return out;
}

static char *metrics_path(const NuksmAgent *agent)
{
    return g_build_filename(agent->metrics.dir, METRICS_FILE, NULL);
}

/*
 * Write the metrics to the file, atomically: a temporary file of the
 * directory, readable by the owner and the metrics group only, renamed
 * over it.  Logged once a failure starts, and once it ends.
 */
static void write_file(NuksmAgent *agent)
{
    AgentMetrics *m = &agent->metrics;
    g_autoptr(GString) text = metrics_text(agent);
    g_autofree char *path = metrics_path(agent);
    g_autofree char *tmp = g_build_filename(m->dir, "." METRICS_FILE
                                            ".XXXXXX", NULL);
    int fd = g_mkstemp_full(tmp, O_WRONLY | O_CLOEXEC, 0600);
    int err = 0;

    if (fd < 0) {
        err = errno;
    } else {
        errno = 0;
        if ((m->gid != (gid_t)-1 &&
             (fchown(fd, (uid_t)-1, m->gid) < 0 || fchmod(fd, 0640) < 0)) ||
            write(fd, text->str, text->len) != (ssize_t)text->len) {
            err = errno ? errno : EIO;      /* a short write sets none */
        }
        if (close(fd) < 0 && !err) {
            err = errno;
        }
        if (!err && rename(tmp, path) < 0) {
            err = errno;
        }
        if (err) {
            unlink(tmp);
        }
    }
    if (err == ENOENT && !m->failing) {
        /* No node_exporter here, most likely: not a fault of ours. */
        log_info("metrics: no directory %s: none written until there is "
                 "(--metrics-dir)", m->dir);
    } else if (err && !m->failing) {
        log_warning("metrics: cannot write %s: %s (trying again every "
                    "%u s)", path, g_strerror(err), m->interval_s);
    } else if (!err && m->failing) {
        log_info("metrics: %s written again", path);
    }
    m->failing = err != 0;
}

static gboolean on_write(gpointer opaque)
{
    write_file(opaque);
    return G_SOURCE_CONTINUE;
}

void metrics_start(NuksmAgent *agent)
{
    AgentMetrics *m = &agent->metrics;

    if (!m->dir) {
        return;
    }
    write_file(agent);
    m->timer = g_timeout_add_seconds(m->interval_s, on_write, agent);
}

void metrics_stop(NuksmAgent *agent)
{
    g_autofree char *path = NULL;

    if (!agent->metrics.timer) {
        return;
    }
    g_clear_handle_id(&agent->metrics.timer, g_source_remove);
    path = metrics_path(agent);
    unlink(path);
}
