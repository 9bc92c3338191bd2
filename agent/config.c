/*
 * nuksmd configuration: command line and [nuksmd] key file.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <unistd.h>

#include "config.h"
#include "nuksm-config.h"

#define CONFIG_GROUP "nuksmd"
/* [domain NAME]: a merge domain the operator assigns VMs to */
#define RULE_GROUP_PREFIX "domain "

/* Longest --restore-grace: a day. */
#define RESTORE_GRACE_MAX 86400
/* --cold-windows: QEMU's idle counters saturate there. */
#define COLD_WINDOWS_MAX NUKSM_IDLE_NEVER
/* --replace-rate: pages moved per second, at most. */
#define REPLACE_RATE_MAX 1000000
/* --colocate-min-gain: MiB a move must gain, at most 1 TiB. */
#define COLOCATE_MIN_GAIN_MAX (1u << 20)
/* --colocate-vcpus-per-cpu: overcommit a plan may go to, at most. */
#define COLOCATE_VCPUS_PER_CPU_MAX 64
/* --metrics-interval: seconds between two writes of the metrics. */
#define METRICS_INTERVAL_MAX 3600
/* --forget-after: seconds a page seen waits for a twin before forgotten. */
#define FORGET_AFTER_MAX 3600
/* Who reads the metrics by default: node_exporter's user on Debian. */
#define METRICS_GROUP "prometheus"
/* --memory-max: MiB of heap for nuksmd's tables, 16 MiB to 1 TiB. */
#define MEMORY_MAX_MIN 16
#define MEMORY_MAX_MAX (1u << 20)

/*
 * A setter validates one value and stores it; @origin ("--policy" or
 * "FILE: policy") prefixes the message when the value is rejected.
 */
typedef bool (*SettingSetter)(NuksmdConfig *cfg, const char *origin,
                              const char *value);

static void G_GNUC_PRINTF(2, 3)
usage_error(const char *origin, const char *fmt, ...)
{
    g_autofree char *text = NULL;
    va_list ap;

    va_start(ap, fmt);
    text = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    fprintf(stderr, "nuksmd: %s: %s\n", origin, text);
}

static bool set_socket(NuksmdConfig *cfg, const char *origin,
                       const char *value)
{
    size_t max = sizeof(((struct sockaddr_un *)NULL)->sun_path) - 1;

    if (value[0] == '\0') {
        usage_error(origin, "socket path must not be empty");
        return false;
    }
    if (strlen(value) > max) {
        usage_error(origin, "socket path too long (%zu bytes, max %zu)",
                    strlen(value), max);
        return false;
    }
    g_free(cfg->socket_path);
    cfg->socket_path = g_strdup(value);
    return true;
}

static bool set_policy(NuksmdConfig *cfg, const char *origin,
                       const char *value)
{
    int policy = nuksm_policy_parse(value);

    if (policy < 0) {
        usage_error(origin, "unknown policy '%s' (allowed: %s)",
                    value, nuksm_policy_names());
        return false;
    }
    cfg->policy = policy;
    return true;
}

/*
 * A decimal number in [@min, @max] into *@out; else a usage error naming
 * @what and the range, then @unit (" seconds", or "").
 */
static bool parse_number(const char *origin, const char *value,
                         uint32_t min, uint32_t max, const char *what,
                         const char *unit, uint32_t *out)
{
    guint64 number;

    if (!g_ascii_string_to_unsigned(value, 10, min, max, &number, NULL)) {
        usage_error(origin, "invalid %s '%s' (allowed: %u..%u%s)", what,
                    value, min, max, unit);
        return false;
    }
    *out = number;
    return true;
}

static bool set_fake_numa(NuksmdConfig *cfg, const char *origin,
                          const char *value)
{
    return parse_number(origin, value, 1, NUKSM_MAX_NODES, "node count", "",
                        &cfg->fake_numa);
}

static bool set_log_level(NuksmdConfig *cfg, const char *origin,
                          const char *value)
{
    if (!log_parse_level(value, &cfg->log_level)) {
        usage_error(origin, "unknown log level '%s' (allowed: %s)",
                    value, log_level_names());
        return false;
    }
    return true;
}

/* Set the directory *@dir to @value, which names @what and is not empty. */
static bool set_dir(char **dir, const char *origin, const char *value,
                    const char *what)
{
    if (value[0] == '\0') {
        usage_error(origin, "%s must not be empty", what);
        return false;
    }
    g_free(*dir);
    *dir = g_strdup(value);
    return true;
}

static bool set_state_dir(NuksmdConfig *cfg, const char *origin,
                          const char *value)
{
    return set_dir(&cfg->state_dir, origin, value, "state directory");
}

/* Set *@gid to group @value's, whose members are @role (for errors). */
static bool set_group(gid_t *gid, const char *origin, const char *value,
                      const char *role)
{
    struct group *gr = getgrnam(value);

    if (!gr) {
        usage_error(origin, "no group '%s' on this host (a group whose "
                    "members %s)", value, role);
        return false;
    }
    *gid = gr->gr_gid;
    return true;
}

static bool set_socket_group(NuksmdConfig *cfg, const char *origin,
                             const char *value)
{
    return set_group(&cfg->socket_gid, origin, value,
                     "may connect, e.g. kvm");
}

static bool set_admin_group(NuksmdConfig *cfg, const char *origin,
                            const char *value)
{
    return set_group(&cfg->admin_gid, origin, value,
                     "administer nuksmd besides root");
}

static bool set_isolation(NuksmdConfig *cfg, const char *origin,
                          const char *value)
{
    if (!assign_parse_isolation(value, &cfg->assign.isolation)) {
        usage_error(origin, "unknown isolation '%s' (allowed: shared, vm)",
                    value);
        return false;
    }
    return true;
}

static bool set_vm_domains(NuksmdConfig *cfg, const char *origin,
                           const char *value)
{
    if (!assign_parse_requests(value, &cfg->assign.vm_domains)) {
        usage_error(origin, "unknown value '%s' (allowed: ignore, refuse, "
                    "allow)", value);
        return false;
    }
    return true;
}

static bool parse_bool(const char *origin, const char *value, bool *out)
{
    if (g_str_equal(value, "true") || g_str_equal(value, "yes") ||
        g_str_equal(value, "1")) {
        *out = true;
    } else if (g_str_equal(value, "false") || g_str_equal(value, "no") ||
               g_str_equal(value, "0")) {
        *out = false;
    } else {
        usage_error(origin, "invalid value '%s' (allowed: true, false)",
                    value);
        return false;
    }
    return true;
}

static bool set_vm_set_policy(NuksmdConfig *cfg, const char *origin,
                              const char *value)
{
    return parse_bool(origin, value, &cfg->vm_set_policy);
}

static bool set_libvirt_dir(NuksmdConfig *cfg, const char *origin,
                            const char *value)
{
    return set_dir(&cfg->libvirt_dir, origin, value,
                   "libvirt registry directory");
}

static bool set_restore_grace(NuksmdConfig *cfg, const char *origin,
                              const char *value)
{
    return parse_number(origin, value, 0, RESTORE_GRACE_MAX, "grace period",
                        " seconds", &cfg->restore_grace);
}

static bool set_cold_windows(NuksmdConfig *cfg, const char *origin,
                             const char *value)
{
    return parse_number(origin, value, 1, COLD_WINDOWS_MAX, "window count",
                        "", &cfg->cold_windows);
}

static bool set_replace_rate(NuksmdConfig *cfg, const char *origin,
                             const char *value)
{
    return parse_number(origin, value, 0, REPLACE_RATE_MAX, "rate",
                        " pages per second, 0: never move merged pages",
                        &cfg->replace_rate);
}

static bool set_forget_after(NuksmdConfig *cfg, const char *origin,
                             const char *value)
{
    return parse_number(origin, value, 1, FORGET_AFTER_MAX, "time",
                        " seconds", &cfg->forget_after);
}

static bool set_memory_max(NuksmdConfig *cfg, const char *origin,
                           const char *value)
{
    return parse_number(origin, value, MEMORY_MAX_MIN, MEMORY_MAX_MAX,
                        "memory budget", " MiB", &cfg->memory_max_mib);
}

/* A quota in MiB: at most 1 TiB, as --memory-max. */
#define QUOTA_MIB_MAX (1u << 20)

/*
 * A domain's quota @value of @kind, "N%" (1..100 percent of the whole)
 * or "N" (MiB; not for cpu-max, a share of a core), into *@quota; else a
 * usage error naming the allowed forms.
 */
static bool parse_quota(const char *origin, const char *value,
                        QuotaKind kind, Quota *quota)
{
    g_autofree char *number = g_strdup(value);
    size_t len = strlen(number);
    bool percent = len && number[len - 1] == '%';
    guint64 n;

    if (percent) {
        number[len - 1] = '\0';
    }
    if (kind == QUOTA_CPU) {
        if (!percent || !g_ascii_string_to_unsigned(number, 10, 1, 100, &n,
                                                    NULL)) {
            usage_error(origin, "invalid CPU quota '%s' (allowed: 1%%..100%% "
                        "of a core)", value);
            return false;
        }
    } else if (!g_ascii_string_to_unsigned(number, 10, 1,
                                           percent ? 100 : QUOTA_MIB_MAX,
                                           &n, NULL)) {
        usage_error(origin, "invalid quota '%s' (allowed: 1%%..100%% of the "
                    "host's, or 1..%u MiB)", value, QUOTA_MIB_MAX);
        return false;
    }
    *quota = (Quota) { .value = n, .percent = percent };
    return true;
}

static bool set_domain_store_max(NuksmdConfig *cfg, const char *origin,
                                 const char *value)
{
    return parse_quota(origin, value, QUOTA_STORE,
                       &cfg->assign.quotas[QUOTA_STORE]);
}

static bool set_domain_unstable_max(NuksmdConfig *cfg, const char *origin,
                                    const char *value)
{
    return parse_quota(origin, value, QUOTA_UNSTABLE,
                       &cfg->assign.quotas[QUOTA_UNSTABLE]);
}

static bool set_domain_queue_max(NuksmdConfig *cfg, const char *origin,
                                 const char *value)
{
    return parse_quota(origin, value, QUOTA_QUEUE,
                       &cfg->assign.quotas[QUOTA_QUEUE]);
}

static bool set_max_cpu(NuksmdConfig *cfg, const char *origin,
                        const char *value)
{
    Quota q;

    if (!parse_quota(origin, value, QUOTA_CPU, &q)) {
        return false;
    }
    cfg->max_cpu = q.value;
    return true;
}

/*
 * --scan-budget's default, percent of one core: two VMs at the default
 * governor's 10% each, as before the budget; a third and more share it.
 * It is what the benchmark's many-VMs series measures against KSM's
 * defaults and its advisor (docs/benchmarks.rst).
 */
#define SCAN_BUDGET_DEFAULT_PERCENT 20

/*
 * --pressure-available and --pressure-stall's defaults, percent: below
 * 20% available, as ksmtuned, oVirt MOM and KubeVirt switch KSM on; and
 * tasks stalled a tenth of the time.
 */
#define PRESSURE_AVAILABLE_DEFAULT_PERCENT 20
#define PRESSURE_STALL_DEFAULT_PERCENT 10

/* "20%", "20" or "2.5%": percent of one core, 0 for no budget. */
static bool set_scan_budget(NuksmdConfig *cfg, const char *origin,
                            const char *value)
{
    char *end;
    double percent = g_ascii_strtod(value, &end);

    if (end != value && *end == '%') {
        end++;
    }
    /* Written so that NaN fails too. */
    if (end == value || *end || !(percent == 0 ||
        (percent >= NUKSM_SHARE_MIN_PPM / 1e4 && percent <= 102400))) {
        usage_error(origin, "invalid scan budget '%s' (allowed: 0 for "
                    "none, or %g%%..102400%% of one core)", value,
                    NUKSM_SHARE_MIN_PPM / 1e4);
        return false;
    }
    cfg->scan_budget_ppm = percent * 1e4;
    return true;
}

static bool set_run(NuksmdConfig *cfg, const char *origin,
                    const char *value)
{
    for (uint32_t r = 0; r < NUKSM_RUN__MAX; r++) {
        if (g_str_equal(value, nuksm_run_name(r))) {
            cfg->run = r;
            return true;
        }
    }
    usage_error(origin, "unknown run mode '%s' (allowed: always, pressure, "
                "off)", value);
    return false;
}

/* "20%" or "20": a percentage, kept per mille. */
static bool set_percent_pm(const char *origin, const char *value,
                           uint32_t min, uint32_t max, const char *what,
                           uint32_t *out_pm)
{
    g_autofree char *number = g_strdup(value);
    size_t len = strlen(number);
    uint32_t percent;

    if (len && number[len - 1] == '%') {
        number[len - 1] = '\0';
    }
    if (!parse_number(origin, number, min, max, what, "%", &percent)) {
        return false;
    }
    *out_pm = percent * 10;
    return true;
}

static bool set_pressure_available(NuksmdConfig *cfg, const char *origin,
                                   const char *value)
{
    return set_percent_pm(origin, value, 1, 99, "share of memory",
                          &cfg->pressure_available_pm);
}

static bool set_pressure_stall(NuksmdConfig *cfg, const char *origin,
                               const char *value)
{
    return set_percent_pm(origin, value, 0, 100, "share of time stalled",
                          &cfg->pressure_stall_pm);
}

static bool set_pressure_cgroup(NuksmdConfig *cfg, const char *origin,
                                const char *value)
{
    return set_dir(&cfg->pressure_cgroup, origin, value, "cgroup");
}

static bool set_colocate_threshold(NuksmdConfig *cfg, const char *origin,
                                   const char *value)
{
    return parse_number(origin, value, 1, 100, "similarity", "%",
                        &cfg->colocate_threshold);
}

static bool set_colocate_min_gain(NuksmdConfig *cfg, const char *origin,
                                  const char *value)
{
    return parse_number(origin, value, 0, COLOCATE_MIN_GAIN_MAX, "gain",
                        " MiB", &cfg->colocate_min_gain_mib);
}

static bool set_colocate_domain_room(NuksmdConfig *cfg, const char *origin,
                                     const char *value)
{
    return parse_number(origin, value, 1, 100, "share of a node's room",
                        "%", &cfg->colocate_domain_room);
}

static bool set_colocate_pins(NuksmdConfig *cfg, const char *origin,
                              const char *value)
{
    if (g_str_equal(value, "keep") || g_str_equal(value, "move")) {
        cfg->colocate_move_pinned = g_str_equal(value, "move");
        return true;
    }
    usage_error(origin, "unknown value '%s' (allowed: keep, move)", value);
    return false;
}

static bool set_colocate_apply(NuksmdConfig *cfg, const char *origin,
                               const char *value)
{
    static const char *const names[COLOCATE_APPLY__MAX] = {
        [COLOCATE_APPLY_NONE] = "none",
        [COLOCATE_APPLY_LIBVIRT] = "libvirt",
        [COLOCATE_APPLY_ALL] = "all",
    };

    for (int i = 0; i < COLOCATE_APPLY__MAX; i++) {
        if (g_str_equal(value, names[i])) {
            cfg->colocate_apply = i;
            return true;
        }
    }
    usage_error(origin, "unknown value '%s' (allowed: none, libvirt, all)",
                value);
    return false;
}

/* METRICS_GROUP's gid, or -1 if there is no such group. */
static gid_t default_metrics_gid(void)
{
    struct group *gr = getgrnam(METRICS_GROUP);

    return gr ? gr->gr_gid : (gid_t)-1;
}

static bool set_metrics_dir(NuksmdConfig *cfg, const char *origin,
                            const char *value)
{
    if (g_str_equal(value, "none")) {
        g_clear_pointer(&cfg->metrics_dir, g_free);
        return true;
    }
    return set_dir(&cfg->metrics_dir, origin, value, "metrics directory");
}

static bool set_metrics_interval(NuksmdConfig *cfg, const char *origin,
                                 const char *value)
{
    return parse_number(origin, value, 1, METRICS_INTERVAL_MAX, "interval",
                        " seconds", &cfg->metrics_interval);
}

static bool set_metrics_group(NuksmdConfig *cfg, const char *origin,
                              const char *value)
{
    return set_group(&cfg->metrics_gid, origin, value,
                     "may read the metrics, e.g. prometheus");
}

static bool set_colocate_vcpus_per_cpu(NuksmdConfig *cfg,
                                       const char *origin,
                                       const char *value)
{
    return parse_number(origin, value, 0, COLOCATE_VCPUS_PER_CPU_MAX,
                        "overcommit", " vCPUs per CPU, 0: no limit",
                        &cfg->colocate_vcpus_per_cpu);
}

static bool set_domain_cpu_max(NuksmdConfig *cfg, const char *origin,
                               const char *value)
{
    return parse_quota(origin, value, QUOTA_CPU,
                       &cfg->assign.quotas[QUOTA_CPU]);
}

/* A quarter of the host's memory, in MiB, within the allowed range. */
static uint32_t default_memory_max(void)
{
    uint64_t bytes = (uint64_t)sysconf(_SC_PHYS_PAGES) *
                     sysconf(_SC_PAGESIZE);

    return CLAMP(bytes / 4 >> 20, MEMORY_MAX_MIN, MEMORY_MAX_MAX);
}

/*
 * The settings: key file keys, each also the command-line option "--" +
 * key, with its --help text.  The one list of them: config_load() makes
 * its options, and the --help list of keys, from it.
 */
static const struct {
    const char *key;
    SettingSetter set;
    GOptionArg arg;          /* G_OPTION_ARG_NONE: a flag, "true" if given */
    const char *help;
    const char *arg_description;
} settings[] = {
    { "socket", set_socket, G_OPTION_ARG_FILENAME,
      "Listen on PATH (default " NUKSM_DEFAULT_SOCKET ")",
      "PATH" },
    { "policy", set_policy, G_OPTION_ARG_STRING,
      "Initial placement policy (default global)",
      "NAME" },
    { "fake-numa", set_fake_numa, G_OPTION_ARG_STRING,
      "Pretend the host has N NUMA nodes (1..64)",
      "N" },
    { "log-level", set_log_level, G_OPTION_ARG_STRING,
      "error, warning, info (default) or debug",
      "LEVEL" },
    { "state-dir", set_state_dir, G_OPTION_ARG_FILENAME,
      "Keep the store files in DIR, on tmpfs (default "
      NUKSM_DEFAULT_STATE_DIR ")",
      "DIR" },
    { "restore-grace", set_restore_grace, G_OPTION_ARG_STRING,
      "Seconds VMs have to restore their merged pages after a "
      "restart (default 10)",
      "SECONDS" },
    { "cold-windows", set_cold_windows, G_OPTION_ARG_STRING,
      "A page is cold after N hotness windows without a write "
      "(1..255, default 3)",
      "N" },
    { "replace-rate", set_replace_rate, G_OPTION_ARG_STRING,
      "Move at most N merged pages per second when placement "
      "changes (default 1000, 0: never)",
      "N" },
    { "forget-after", set_forget_after, G_OPTION_ARG_STRING,
      "Forget a page seen that paired with no other after N to 2N "
      "seconds, keeping only a filter of its content (1..3600, "
      "default 30)",
      "N" },
    { "memory-max", set_memory_max, G_OPTION_ARG_STRING,
      "Hold back new merges while nuksmd's tables use more than MIB "
      "(16..1048576, default a quarter of the host's memory)",
      "MIB" },
    { "max-cpu", set_max_cpu, G_OPTION_ARG_STRING,
      "Take at most N% of a core for the VMs' messages, reading them "
      "more slowly past it (default 100%: no cap)",
      "N%" },
    { "scan-budget", set_scan_budget, G_OPTION_ARG_STRING,
      "The VMs' scanners take at most N% of a core in all, shared by "
      "what each merges (e.g. 20%; default 0: none, each VM its own "
      "governor's)",
      "N%" },
    { "run", set_run, G_OPTION_ARG_STRING,
      "When to merge: always (default), pressure (while memory is "
      "short: --pressure-available, --pressure-stall) or off (merged "
      "pages stay merged)",
      "MODE" },
    { "pressure-available", set_pressure_available, G_OPTION_ARG_STRING,
      "With --run=pressure, memory is short while less than N% of it "
      "is available (1..99, default "
      G_STRINGIFY(PRESSURE_AVAILABLE_DEFAULT_PERCENT) "%)",
      "N%" },
    { "pressure-stall", set_pressure_stall, G_OPTION_ARG_STRING,
      "With --run=pressure, memory is short too while tasks stall on it "
      "more than N% of the time (PSI; 0..100, default "
      G_STRINGIFY(PRESSURE_STALL_DEFAULT_PERCENT) "%, 0: not looked at)",
      "N%" },
    { "pressure-cgroup", set_pressure_cgroup, G_OPTION_ARG_FILENAME,
      "With --run=pressure, look at this cgroup's memory (its limit, "
      "usage and, in cgroup v2, memory.pressure), e.g. the one the VMs "
      "run in, instead of the host's",
      "DIR" },
    { "libvirt-dir", set_libvirt_dir, G_OPTION_ARG_FILENAME,
      "Read libvirt's domain registrations (its nuksm hook) from DIR "
      "(default " NUKSM_DEFAULT_LIBVIRT_DIR ")",
      "DIR" },
    { "socket-group", set_socket_group, G_OPTION_ARG_STRING,
      "Give the socket this group, whose members may connect "
      "(not with systemd's socket)",
      "GROUP" },
    { "admin-group", set_admin_group, G_OPTION_ARG_STRING,
      "Members of GROUP may change host-wide settings (the policy), "
      "as root may",
      "GROUP" },
    { "isolation", set_isolation, G_OPTION_ARG_STRING,
      "Where VMs the operator assigned no domain go: shared (one "
      "domain, the default) or vm (a domain each)",
      "MODE" },
    { "vm-domains", set_vm_domains, G_OPTION_ARG_STRING,
      "What a VM's own domain request does: ignore (default), refuse "
      "or allow",
      "WHAT" },
    { "vm-set-policy", set_vm_set_policy, G_OPTION_ARG_NONE,
      "Let VMs set the host-wide policy (QMP nuksm-set-policy)",
      NULL },
    { "domain-store-max", set_domain_store_max, G_OPTION_ARG_STRING,
      "A merge domain's copies may take at most N% of the store's "
      "file system, or N MiB (default 50%; [domain NAME] store-max "
      "sets one domain's)",
      "N%|N" },
    { "domain-unstable-max", set_domain_unstable_max, G_OPTION_ARG_STRING,
      "A merge domain's pages waiting for a partner may take at most "
      "N% of the unstable table, or N MiB of it (default 50%; "
      "[domain NAME] unstable-max sets one domain's)",
      "N%|N" },
    { "domain-queue-max", set_domain_queue_max, G_OPTION_ARG_STRING,
      "The replies a merge domain's VMs leave unread may take at most "
      "N% of --memory-max, or N MiB (default 50%; [domain NAME] "
      "queue-max sets one domain's)",
      "N%|N" },
    { "domain-cpu-max", set_domain_cpu_max, G_OPTION_ARG_STRING,
      "While VMs of another merge domain wait, a domain's VMs may take "
      "at most N% of a core of nuksmd (default 50%; [domain NAME] "
      "cpu-max sets one domain's)",
      "N%" },
    { "colocate-threshold", set_colocate_threshold, G_OPTION_ARG_STRING,
      "VMs are similar, for the co-location plan, from N% of the "
      "smaller's pages alike (1..100, default 40)",
      "N" },
    { "colocate-min-gain", set_colocate_min_gain, G_OPTION_ARG_STRING,
      "The plan moves a VM only to merge at least MIB more locally "
      "(default 16)",
      "MIB" },
    { "colocate-vcpus-per-cpu", set_colocate_vcpus_per_cpu, G_OPTION_ARG_STRING,
      "The plan moves VMs to a node only while it has at most N vCPUs "
      "per CPU (default 1, 0: no limit)",
      "N" },
    { "colocate-domain-room", set_colocate_domain_room, G_OPTION_ARG_STRING,
      "While VMs of several merge domains are weighed, each domain's "
      "plan takes at most N% of each node's free memory and vCPU "
      "slots (1..100, default 50)",
      "N" },
    { "colocate-pins", set_colocate_pins, G_OPTION_ARG_STRING,
      "A VM its operator pinned to a node: keep it there (default) "
      "or let the plan move it",
      "keep|move" },
    { "colocate-apply", set_colocate_apply, G_OPTION_ARG_STRING,
      "Which planned moves `nuksmctl plan --apply` may carry out: "
      "none, libvirt domains' (through libvirt; the default) or all "
      "(nuksmd moves other QEMUs' threads and memory itself)",
      "none|libvirt|all" },
    { "metrics-dir", set_metrics_dir, G_OPTION_ARG_STRING,
      "Write Prometheus metrics to DIR/nuksm.prom for node_exporter's "
      "textfile collector (default " NUKSM_DEFAULT_METRICS_DIR
      "; none: do not)",
      "DIR|none" },
    { "metrics-interval", set_metrics_interval, G_OPTION_ARG_STRING,
      "Write them every N seconds (1..3600, default 15)",
      "N" },
    { "metrics-group", set_metrics_group, G_OPTION_ARG_STRING,
      "Members of GROUP may read them (default prometheus, if there "
      "is such a group)",
      "GROUP" },
};

enum { NR_SETTINGS = G_N_ELEMENTS(settings) };

/* "socket, policy, ..., libvirt-dir": the allowed keys, for errors. */
static char *setting_names(void)
{
    g_autoptr(GString) names = g_string_new(NULL);

    for (int i = 0; i < NR_SETTINGS; i++) {
        g_string_append_printf(names, "%s%s", i ? ", " : "", settings[i].key);
    }
    return g_string_free(g_steal_pointer(&names), FALSE);
}

static int setting_index(const char *key)
{
    for (int i = 0; i < NR_SETTINGS; i++) {
        if (g_str_equal(key, settings[i].key)) {
            return i;
        }
    }
    return -1;
}

/* A uid or gid: a number, or a name @lookup finds; else -1. */
static int64_t parse_id(const char *text, bool user)
{
    guint64 number;

    if (g_ascii_string_to_unsigned(text, 10, 0, UINT32_MAX - 1, &number,
                                   NULL)) {
        return number;
    }
    if (user) {
        struct passwd *pw = getpwnam(text);

        return pw ? (int64_t)pw->pw_uid : -1;
    }
    struct group *gr = getgrnam(text);

    return gr ? (int64_t)gr->gr_gid : -1;
}

/* The ids of the list @key of @group into @ids. */
static bool load_ids(GKeyFile *kf, const char *path, const char *group,
                     const char *key, bool user, GArray *ids)
{
    g_auto(GStrv) names = g_key_file_get_string_list(kf, group, key, NULL,
                                                     NULL);

    for (char **n = names; n && *n; n++) {
        int64_t id = parse_id(g_strstrip(*n), user);
        uint32_t value = id;

        if (id < 0) {
            usage_error(path, "[%s] %s: no %s '%s' on this host", group, key,
                        user ? "user" : "group", *n);
            return false;
        }
        g_array_append_val(ids, value);
    }
    return true;
}

/*
 * The ';'-separated globs of @key, as written: systemd's cgroup names
 * hold backslashes ("machine-qemu\x2d1\x2dweb.scope") that a key
 * file's escapes would reject.
 */
static char **load_globs(GKeyFile *kf, const char *group, const char *key)
{
    g_autofree char *value = g_key_file_get_value(kf, group, key, NULL);
    g_autoptr(GPtrArray) globs = g_ptr_array_new_with_free_func(g_free);
    g_auto(GStrv) parts = value ? g_strsplit(value, ";", -1) : NULL;

    for (char **p = parts; p && *p; p++) {
        if (*g_strstrip(*p)) {
            g_ptr_array_add(globs, g_strdup(*p));
        }
    }
    if (!globs->len) {
        return NULL;
    }
    g_ptr_array_add(globs, NULL);
    return (char **)g_ptr_array_steal(globs, NULL);
}

static const char *const rule_keys[] = {
    "users", "groups", "cgroups", "libvirt-names", "max-priority",
    "store-max", "unstable-max", "queue-max", "cpu-max", NULL,
};

/*
 * A [domain NAME] group: which VMs go into domain NAME (assign.h), the
 * highest priority its VMs may have and its quotas.
 */
static bool load_rule(NuksmdConfig *cfg, GKeyFile *kf, const char *path,
                      const char *group)
{
    const char *name = group + strlen(RULE_GROUP_PREFIX);
    g_auto(GStrv) keys = g_key_file_get_keys(kf, group, NULL, NULL);
    g_autofree char *max = NULL;
    DomainRule *rule;

    if (!nuksm_domain_name_valid(name)) {
        usage_error(path, "[%s]: '%s' is not a domain name (1 to %u "
                    "characters from [A-Za-z0-9._-])", group, name,
                    NUKSM_NAME_LEN - 1);
        return false;
    }
    for (char **key = keys; *key; key++) {
        if (!g_strv_contains(rule_keys, *key)) {
            g_autofree char *allowed = g_strjoinv(", ", (char **)rule_keys);

            usage_error(path, "unknown key '%s' in [%s] (allowed: %s)", *key,
                        group, allowed);
            return false;
        }
    }
    rule = assign_add_rule(&cfg->assign, name);
    if (!load_ids(kf, path, group, "users", true, rule->uids) ||
        !load_ids(kf, path, group, "groups", false, rule->gids)) {
        return false;
    }
    rule->cgroups = load_globs(kf, group, "cgroups");
    rule->libvirt_names = load_globs(kf, group, "libvirt-names");
    for (unsigned k = 0; k < QUOTA__COUNT; k++) {
        const char *key = assign_quota_keys[k];
        g_autofree char *value = g_key_file_get_string(kf, group, key, NULL);
        g_autofree char *origin = g_strdup_printf("%s: [%s] %s", path, group,
                                                  key);

        if (value && !parse_quota(origin, value, k, &rule->quotas[k])) {
            return false;
        }
    }
    max = g_key_file_get_string(kf, group, "max-priority", NULL);
    if (max) {
        g_autofree char *origin = g_strdup_printf("%s: [%s] max-priority",
                                                  path, group);

        return parse_number(origin, max, NUKSM_PRIORITY_MIN,
                            NUKSM_PRIORITY_MAX, "priority", "",
                            &rule->max_priority);
    }
    return true;
}

/* Apply every key of @path's [nuksmd] group. */
static bool load_settings(NuksmdConfig *cfg, GKeyFile *kf, const char *path)
{
    g_autoptr(GError) err = NULL;
    g_auto(GStrv) keys = NULL;

    keys = g_key_file_get_keys(kf, CONFIG_GROUP, NULL, NULL);
    for (char **key = keys; *key; key++) {
        int i = setting_index(*key);
        g_autofree char *origin = g_strdup_printf("%s: %s", path, *key);
        g_autofree char *value = NULL;

        if (i < 0) {
            g_autofree char *allowed = setting_names();

            usage_error(path, "unknown key '%s' in [" CONFIG_GROUP "] "
                        "(allowed: %s)", *key, allowed);
            return false;
        }
        value = g_key_file_get_string(kf, CONFIG_GROUP, *key, &err);
        if (!value) {
            usage_error(origin, "%s", err->message);
            return false;
        }
        if (!settings[i].set(cfg, origin, value)) {
            return false;
        }
    }
    return true;
}

/* Apply @path: its [nuksmd] group, then its [domain NAME] groups. */
static bool load_key_file(NuksmdConfig *cfg, const char *path)
{
    g_autoptr(GKeyFile) kf = g_key_file_new();
    g_autoptr(GError) err = NULL;
    g_auto(GStrv) groups = NULL;

    if (!g_key_file_load_from_file(kf, path, G_KEY_FILE_NONE, &err)) {
        usage_error("--config", "cannot load %s: %s", path, err->message);
        return false;
    }
    if (!g_key_file_has_group(kf, CONFIG_GROUP)) {
        usage_error("--config", "%s has no [" CONFIG_GROUP "] group", path);
        return false;
    }
    if (!load_settings(cfg, kf, path)) {
        return false;
    }
    groups = g_key_file_get_groups(kf, NULL);
    for (char **group = groups; *group; group++) {
        if (g_str_equal(*group, CONFIG_GROUP)) {
            continue;
        }
        if (!g_str_has_prefix(*group, RULE_GROUP_PREFIX)) {
            usage_error(path, "unknown group [%s] (allowed: [" CONFIG_GROUP
                        "], [" RULE_GROUP_PREFIX "NAME])", *group);
            return false;
        }
        if (!load_rule(cfg, kf, path, *group)) {
            return false;
        }
    }
    return true;
}

/*
 * The options: one of each setting, then --config, --foreground and
 * --version.  A flag's value goes to @flags, any other's to @cli.
 */
static GOptionEntry *option_entries(char **cli, gboolean *flags,
                                    char **config_path, gboolean *foreground,
                                    gboolean *version)
{
    GOptionEntry *entries = g_new0(GOptionEntry, NR_SETTINGS + 4);
    int i;

    for (i = 0; i < NR_SETTINGS; i++) {
        bool flag = settings[i].arg == G_OPTION_ARG_NONE;

        entries[i] = (GOptionEntry) {
            .long_name = settings[i].key,
            .arg = settings[i].arg,
            .arg_data = flag ? (gpointer)&flags[i] : (gpointer)&cli[i],
            .description = settings[i].help,
            .arg_description = settings[i].arg_description,
        };
    }
    entries[i++] = (GOptionEntry) {
        "config", 0, 0, G_OPTION_ARG_FILENAME, config_path,
        "Read settings from the [nuksmd] group of FILE", "FILE" };
    entries[i++] = (GOptionEntry) {
        "foreground", 0, 0, G_OPTION_ARG_NONE, foreground,
        "Run in the foreground (nuksmd never daemonises)", NULL };
    entries[i++] = (GOptionEntry) {
        "version", 0, 0, G_OPTION_ARG_NONE, version,
        "Print the version and exit", NULL };
    return entries;
}

/* --help's description: the policies and the keys of a --config FILE. */
static char *help_description(void)
{
    g_autofree char *keys = setting_names();
    g_autofree char *rules = g_strjoinv(", ", (char **)rule_keys);
    g_autofree char *wrapped = g_strdup_printf(
        "Policies: %s.  The --config FILE takes the keys %s in a "
        "[" CONFIG_GROUP "] group, and merge domains VMs are assigned to "
        "in [" RULE_GROUP_PREFIX "NAME] groups (%s); command-line options "
        "override it.", nuksm_policy_names(), keys, rules);
    g_auto(GStrv) words = g_strsplit(wrapped, " ", -1);
    g_autoptr(GString) text = g_string_new(NULL);
    g_autoptr(GString) line = g_string_new(NULL);

    for (char **w = words; *w; w++) {
        if (line->len && line->len + 1 + strlen(*w) > 66) {
            g_string_append_printf(text, "%s\n", line->str);
            g_string_truncate(line, 0);
        }
        g_string_append_printf(line, "%s%s", line->len ? " " : "", *w);
    }
    g_string_append_printf(text, "%s\n", line->str);
    return g_string_free(g_steal_pointer(&text), FALSE);
}

bool config_load(NuksmdConfig *cfg, int argc, char **argv)
{
    g_autofree char *config_path = NULL;
    char *cli[NR_SETTINGS] = { NULL };  /* values of settings[i], as typed */
    gboolean flags[NR_SETTINGS] = { FALSE };  /* ... of flags, given */
    gboolean foreground = FALSE;
    gboolean version = FALSE;
    g_autofree GOptionEntry *entries = option_entries(cli, flags,
                                                      &config_path,
                                                      &foreground, &version);
    g_autofree char *description = help_description();
    g_autoptr(GOptionContext) ctx = NULL;
    g_autoptr(GError) err = NULL;
    bool ok = false;

    *cfg = (NuksmdConfig) {
        .socket_path = g_strdup(NUKSM_DEFAULT_SOCKET),
        .policy = NUKSM_POLICY_ID_GLOBAL,
        .fake_numa = 0,
        .log_level = NUKSMD_LOG_INFO,
        .state_dir = g_strdup(NUKSM_DEFAULT_STATE_DIR),
        .restore_grace = 10,
        .cold_windows = 3,
        .replace_rate = 1000,
        .forget_after = 30,
        .memory_max_mib = default_memory_max(),
        .max_cpu = 100,
        .scan_budget_ppm = SCAN_BUDGET_DEFAULT_PERCENT * 10000,
        .run = NUKSM_RUN_ALWAYS,
        .pressure_available_pm = PRESSURE_AVAILABLE_DEFAULT_PERCENT * 10,
        .pressure_stall_pm = PRESSURE_STALL_DEFAULT_PERCENT * 10,
        .colocate_threshold = 40,
        .colocate_min_gain_mib = 16,
        .colocate_vcpus_per_cpu = 1,
        .colocate_domain_room = 50,
        .colocate_apply = COLOCATE_APPLY_LIBVIRT,
        .metrics_dir = g_strdup(NUKSM_DEFAULT_METRICS_DIR),
        .metrics_interval = 15,
        .metrics_gid = default_metrics_gid(),
        .libvirt_dir = g_strdup(NUKSM_DEFAULT_LIBVIRT_DIR),
        .socket_gid = (gid_t)-1,
        .admin_gid = (gid_t)-1,
    };
    assign_config_init(&cfg->assign);

    ctx = g_option_context_new("- nuksm host agent");
    g_option_context_add_main_entries(ctx, entries, NULL);
    g_option_context_set_description(ctx, description);
    if (!g_option_context_parse(ctx, &argc, &argv, &err)) {
        fprintf(stderr, "nuksmd: %s (see --help)\n", err->message);
        goto out;
    }
    if (version) {
        printf("nuksmd %s\n", NUKSM_VERSION);
        exit(0);
    }
    if (argc > 1) {
        fprintf(stderr, "nuksmd: unexpected argument '%s' (see --help)\n",
                argv[1]);
        goto out;
    }
    if (config_path && !load_key_file(cfg, config_path)) {
        goto out;
    }
    for (int i = 0; i < NR_SETTINGS; i++) {
        if (flags[i]) {
            cli[i] = g_strdup("true");
        }
    }
    for (int i = 0; i < NR_SETTINGS; i++) {
        g_autofree char *origin = g_strconcat("--", settings[i].key, NULL);

        if (cli[i] && !settings[i].set(cfg, origin, cli[i])) {
            goto out;
        }
    }
    ok = true;

out:
    for (int i = 0; i < NR_SETTINGS; i++) {
        g_free(cli[i]);
    }
    return ok;
}

void config_clear(NuksmdConfig *cfg)
{
    g_clear_pointer(&cfg->socket_path, g_free);
    g_clear_pointer(&cfg->state_dir, g_free);
    g_clear_pointer(&cfg->libvirt_dir, g_free);
    g_clear_pointer(&cfg->metrics_dir, g_free);
    g_clear_pointer(&cfg->pressure_cgroup, g_free);
    assign_config_clear(&cfg->assign);
}
