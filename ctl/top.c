/*
 * nuksmctl top (top.h).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

#include "top.h"

static const char *const sort_names[TOP_SORT__MAX] = {
    [TOP_SORT_SAVED] = "saved",
    [TOP_SORT_REMOTE] = "remote",
    [TOP_SORT_CPU] = "cpu",
    [TOP_SORT_NAME] = "name",
};

int top_sort_parse(const char *name)
{
    for (int i = 0; i < TOP_SORT__MAX; i++) {
        if (g_str_equal(name, sort_names[i])) {
            return i;
        }
    }
    return -1;
}

const char *top_sort_names(void)
{
    return "saved, remote, cpu, name";
}

/* One look at the agent: its INFO and its VMS with their entries. */
typedef struct Sample {
    NuksmMsgInfo info;
    NuksmMsgVms *vms;
    gint64 at;               /* monotonic us */
} Sample;

static void sample_take(Ctl *ctl, Sample *s)
{
    const NuksmMsgInfo *info = ctl_request(ctl, NUKSM_MSG_GET_INFO, NULL, 0,
                                           NUKSM_MSG_INFO);

    s->info = *info;
    g_free(s->vms);
    s->vms = ctl_list_vms(ctl);
    s->at = g_get_monotonic_time();
}

/* A VM as the view shows it: its entry and its rates over the interval. */
typedef struct VmView {
    const NuksmVmEntry *e;
    double scanned_per_s;
    double scan_cpu;         /* percent of a core */
    double agent_cpu;
    uint64_t reads, reads_remote;    /* sampled over the interval */
} VmView;

static double per_s(uint64_t now, uint64_t then, double seconds)
{
    return now >= then && seconds > 0 ? (now - then) / seconds : 0;
}

static VmView view_of(const NuksmVmEntry *e, const Sample *before,
                      double seconds)
{
    const NuksmVmEntry *b = ctl_vm_entry(before->vms, e->client_id);
    VmView v = { .e = e };

    if (!b) {
        return v;           /* new since: no rates yet */
    }
    v.scanned_per_s = per_s(e->scanner.pages_scanned,
                            b->scanner.pages_scanned, seconds);
    v.scan_cpu = per_s(e->scanner.scan_cpu_ns, b->scanner.scan_cpu_ns,
                       seconds) / 1e7;
    v.agent_cpu = per_s(e->agent_cpu_ns, b->agent_cpu_ns, seconds) / 1e7;
    if (e->reads_local >= b->reads_local &&
        e->reads_remote >= b->reads_remote) {
        v.reads_remote = e->reads_remote - b->reads_remote;
        v.reads = e->reads_local - b->reads_local + v.reads_remote;
    }
    return v;
}

static int compare_views(gconstpointer a, gconstpointer b, gpointer opaque)
{
    const VmView *x = a, *y = b;
    TopSort sort = GPOINTER_TO_INT(opaque);

    switch (sort) {
    case TOP_SORT_REMOTE:
        if (x->e->merged_remote != y->e->merged_remote) {
            return x->e->merged_remote > y->e->merged_remote ? -1 : 1;
        }
        break;
    case TOP_SORT_CPU:
        if (x->scan_cpu != y->scan_cpu) {
            return x->scan_cpu > y->scan_cpu ? -1 : 1;
        }
        break;
    case TOP_SORT_NAME:
        return strcmp(x->e->vm_name, y->e->vm_name) ?:
               (x->e->client_id > y->e->client_id) -
               (x->e->client_id < y->e->client_id);
    default:
        if (x->e->merged_pages != y->e->merged_pages) {
            return x->e->merged_pages > y->e->merged_pages ? -1 : 1;
        }
        break;
    }
    return (x->e->client_id > y->e->client_id) -
           (x->e->client_id < y->e->client_id);
}

static double mib(uint64_t pages)
{
    return pages * (double)NUKSM_PAGE_SIZE / (1 << 20);
}

static char *share_text(uint64_t part, uint64_t whole)
{
    return whole ? g_strdup_printf("%.0f%%", 100.0 * part / whole)
                 : g_strdup("-");
}

/* The agent and the host. */
static void frame_head(GString *out, const Sample *now, unsigned interval_s,
                       TopSort sort)
{
    const NuksmMsgInfo *i = &now->info;
    g_autoptr(GString) conditions = g_string_new(NULL);

    for (uint32_t bit = 1; bit & NUKSM_COND_ALL; bit <<= 1) {
        if (i->conditions & bit) {
            g_string_append_printf(conditions, "%s%s",
                                   conditions->len ? ", " : "",
                                   nuksm_condition_name(bit));
        }
    }
    g_string_append_printf(out, "nuksmd %s, policy %s, %u NUMA node%s; "
                           "conditions: %s; every %u s, VMs by %s\n",
                           i->agent_version, nuksm_policy_name(i->policy),
                           i->nr_nodes, i->nr_nodes == 1 ? "" : "s",
                           conditions->len ? conditions->str : "none",
                           interval_s, sort_names[sort]);
    if (i->scan_budget_ppm) {
        g_string_append_printf(out, "scan budget %g%% of a core, shared by "
                               "what each VM merges",
                               i->scan_budget_ppm / 1e4);
        if (i->scope == NUKSM_INFO_HOST) {
            g_string_append_printf(out, "; %u of %u VMs resting",
                                   i->vms_resting, i->vms);
        }
        g_string_append_c(out, '\n');
    }
    if (i->scope == NUKSM_INFO_NONE) {
        g_string_append(out, "host: its counters are for administrators\n");
        return;
    }
    g_string_append_printf(out, "%s: %.1f MiB saved (%" PRIu64 " pages), %"
                           PRIu64 " copies; store pages per node:",
                           i->scope == NUKSM_INFO_HOST ? "host"
                                                       : "your domain",
                           mib(i->pages_sharing), i->pages_sharing,
                           i->pages_shared);
    for (uint32_t n = 0; n < i->nr_nodes && n < NUKSM_MAX_NODES; n++) {
        g_string_append_printf(out, " %" PRIu64, i->store_pages[n]);
    }
    g_string_append_printf(out, "; %" PRIu64 " moves pending\n",
                           i->moves_pending);
}

enum { DOMAIN_COLUMNS = 6 };

/* Each merge domain, from its VMs. */
static void frame_domains(GString *out, GArray *views)
{
    static const char *const header[DOMAIN_COLUMNS] = {
        "DOMAIN", "VMS", "MERGED MiB", "REMOTE MiB", "READS REMOTE",
        "SCAN CPU",
    };
    g_autoptr(GPtrArray) rows = g_ptr_array_new_with_free_func(
        (GDestroyNotify)g_strfreev);
    g_autoptr(GHashTable) seen = g_hash_table_new(g_str_hash, g_str_equal);

    for (guint i = 0; i < views->len; i++) {
        const char *domain = g_array_index(views, VmView, i).e->domain;
        uint64_t vms = 0, merged = 0, remote = 0, reads = 0, far = 0;
        double cpu = 0;
        char **row;

        if (!g_hash_table_add(seen, (gpointer)domain)) {
            continue;
        }
        for (guint j = i; j < views->len; j++) {
            const VmView *v = &g_array_index(views, VmView, j);

            if (g_str_equal(v->e->domain, domain)) {
                vms++;
                merged += v->e->merged_pages;
                remote += v->e->merged_remote;
                reads += v->reads;
                far += v->reads_remote;
                cpu += v->scan_cpu;
            }
        }
        row = g_new0(char *, DOMAIN_COLUMNS + 1);
        row[0] = table_text(domain);
        row[1] = g_strdup_printf("%" PRIu64, vms);
        row[2] = g_strdup_printf("%.1f", mib(merged));
        row[3] = g_strdup_printf("%.1f", mib(remote));
        row[4] = share_text(far, reads);
        row[5] = g_strdup_printf("%.1f%%", cpu);
        g_ptr_array_add(rows, row);
    }
    ctl_table(out, header, DOMAIN_COLUMNS, rows);
}

enum { VM_COLUMNS = 14 };

static void frame_vms(GString *out, GArray *views)
{
    static const char *const header[VM_COLUMNS] = {
        "ID", "NAME", "DOMAIN", "MERGED MiB", "REMOTE MiB", "READS REMOTE",
        "ZERO", "SCANNED/s", "FULL SCANS", "COW", "SCAN CPU", "AGENT CPU",
        "SHARE", "LIMIT",
    };
    g_autoptr(GPtrArray) rows = g_ptr_array_new_with_free_func(
        (GDestroyNotify)g_strfreev);

    for (guint i = 0; i < views->len; i++) {
        const VmView *v = &g_array_index(views, VmView, i);
        const NuksmVmEntry *e = v->e;
        char **row = g_new0(char *, VM_COLUMNS + 1);

        row[0] = g_strdup_printf("%u", e->client_id);
        row[1] = table_text(e->libvirt_name[0] ? e->libvirt_name
                                               : e->vm_name);
        row[2] = table_text(e->domain);
        row[3] = g_strdup_printf("%.1f", mib(e->merged_pages));
        row[4] = g_strdup_printf("%.1f", mib(e->merged_remote));
        row[5] = share_text(v->reads_remote, v->reads);
        row[6] = g_strdup_printf("%" PRIu64, e->scanner.zero_pages);
        row[7] = g_strdup_printf("%.0f", v->scanned_per_s);
        row[8] = g_strdup_printf("%" PRIu64, e->scanner.full_scans);
        row[9] = g_strdup_printf("%" PRIu64, e->scanner.cow_breaks);
        row[10] = g_strdup_printf("%.1f%%", v->scan_cpu);
        row[11] = g_strdup_printf("%.1f%%", v->agent_cpu);
        row[12] = ctl_share_text(&e->share);
        row[13] = g_strdup(nuksm_vm_limit_name(e->limit) ?: "-");
        g_ptr_array_add(rows, row);
    }
    ctl_table(out, header, VM_COLUMNS, rows);
}

static void frame(GString *out, const Sample *before, const Sample *now,
                  unsigned interval_s, TopSort sort)
{
    const NuksmVmEntry *e = (const NuksmVmEntry *)(now->vms + 1);
    double seconds = (now->at - before->at) / 1e6;
    g_autoptr(GArray) views = g_array_new(FALSE, FALSE, sizeof(VmView));

    for (uint32_t i = 0; i < now->vms->count; i++) {
        VmView v = view_of(&e[i], before, seconds);

        g_array_append_val(views, v);
    }
    g_array_sort_with_data(views, compare_views, GINT_TO_POINTER(sort));
    frame_head(out, now, interval_s, sort);
    g_string_append_c(out, '\n');
    frame_domains(out, views);
    g_string_append_c(out, '\n');
    frame_vms(out, views);
}

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
    stop = 1;
}

/* The sort a key asks for, -1 if none; 'q' sets *@quit. */
static int key_sort(char key, bool *quit)
{
    static const char keys[TOP_SORT__MAX] = {
        [TOP_SORT_SAVED] = 's', [TOP_SORT_REMOTE] = 'r',
        [TOP_SORT_CPU] = 'c', [TOP_SORT_NAME] = 'n',
    };

    *quit = key == 'q';
    for (int i = 0; i < TOP_SORT__MAX; i++) {
        if (keys[i] == key) {
            return i;
        }
    }
    return -1;
}

/*
 * Wait @ms for a key on a terminal: a sort key changes *@sort; true if
 * the view must end (q, or a signal).
 */
static bool wait_key(int ms, TopSort *sort)
{
    struct pollfd p = { .fd = STDIN_FILENO, .events = POLLIN };
    gint64 until = g_get_monotonic_time() + ms * 1000ll;
    bool quit = false;
    char key;

    while (!stop && !quit) {
        gint64 left = until - g_get_monotonic_time();
        int n, s;

        if (left <= 0) {
            return false;
        }
        n = poll(&p, 1, left / 1000 + 1);
        if (n < 0 && errno != EINTR) {
            return true;
        }
        if (n > 0 && read(STDIN_FILENO, &key, 1) == 1) {
            s = key_sort(key, &quit);
            if (s >= 0) {
                *sort = s;
                return false;       /* redraw at once, sorted anew */
            }
        } else if (n > 0) {
            return true;            /* the terminal went away */
        }
    }
    return true;
}

int cmd_top(Ctl *ctl, unsigned interval_s, TopSort sort, bool once)
{
    Sample before = { 0 }, now = { 0 };
    bool terminal = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
    struct termios saved, raw;
    struct sigaction sa = { .sa_handler = on_signal };

    sample_take(ctl, &before);
    if (once) {
        g_autoptr(GString) out = g_string_new(NULL);

        g_usleep(interval_s * G_USEC_PER_SEC);
        sample_take(ctl, &now);
        frame(out, &before, &now, interval_s, sort);
        fputs(out->str, stdout);
        g_free(before.vms);
        g_free(now.vms);
        return 0;
    }
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    if (terminal && tcgetattr(STDIN_FILENO, &saved) == 0) {
        raw = saved;
        raw.c_lflag &= ~(ICANON | ECHO);
        raw.c_cc[VMIN] = 1;
        raw.c_cc[VTIME] = 0;
        tcsetattr(STDIN_FILENO, TCSANOW, &raw);
    } else {
        terminal = false;
    }
    now = before;
    now.vms = g_memdup2(before.vms, sizeof(*before.vms) +
                        before.vms->count * sizeof(NuksmVmEntry));
    for (;;) {
        g_autoptr(GString) out = g_string_new(terminal ? "\033[H\033[2J"
                                                       : NULL);
        bool done;

        frame(out, &before, &now, interval_s, sort);
        fputs(out->str, stdout);
        if (!terminal) {
            putchar('\n');
        }
        fflush(stdout);
        done = terminal ? wait_key(interval_s * 1000, &sort)
                        : (g_usleep(interval_s * G_USEC_PER_SEC), stop);
        if (done || stop) {
            break;
        }
        g_free(before.vms);
        before = now;
        now.vms = NULL;
        sample_take(ctl, &now);
    }
    if (terminal) {
        tcsetattr(STDIN_FILENO, TCSANOW, &saved);
    }
    g_free(before.vms);
    g_free(now.vms);
    return 0;
}
