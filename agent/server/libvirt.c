/*
 * nuksmd's view of libvirt (libvirt.h).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <glib.h>

#include "libvirt.h"
#include "log.h"

#define HOSTNAME_CHARS "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ" \
                       "0123456789"

/*
 * libvirt (virDomainDriverGenerateMachineName()) names a system QEMU
 * domain's machine "qemu-" ID "-" NAME, NAME the domain name's hostname
 * characters, at most 64 in all, with no '.' or '-' leading or trailing
 * (it drops those, and the "-" before an empty NAME).
 */
bool libvirt_machine_name_valid(const char *machine)
{
    size_t len = strlen(machine);
    const char *p;

    if (len >= LIBVIRT_MACHINE_LEN || !g_str_has_prefix(machine, "qemu-")) {
        return false;
    }
    p = machine + strlen("qemu-");
    /* The id: %d of a positive int. */
    if (*p < '1' || *p > '9' || strspn(p, "0123456789") > 10) {
        return false;
    }
    p += strspn(p, "0123456789");
    if (!*p) {
        return true;
    }
    if (*p++ != '-' || !*p ||
        strspn(p, HOSTNAME_CHARS ".-") != strlen(p)) {
        return false;
    }
    return !strchr(".-", p[0]) && !strchr(".-", machine[len - 1]);
}

/*
 * systemd's unit name escaping (systemd-escape) of a machine name: '-'
 * is "\x2d", and nothing else of a machine name's characters changes.
 * Only what systemd-machined would make is unescaped.
 */
static bool unescape_unit(const char *escaped, size_t len, char *out,
                          size_t size)
{
    size_t n = 0;

    for (size_t i = 0; i < len; i++) {
        char c = escaped[i];

        if (c == '\\') {
            if (len - i < 4 || strncmp(escaped + i, "\\x2d", 4) != 0) {
                return false;
            }
            c = '-';
            i += 3;
        } else if (!strchr(HOSTNAME_CHARS ".", c)) {
            return false;       /* '-' itself among them */
        }
        if (n + 1 >= size) {
            return false;
        }
        out[n++] = c;
    }
    out[n] = '\0';
    return true;
}

/* Whether @s is @prefix, something, then @suffix. */
static bool is_around(const char *s, const char *prefix, const char *suffix)
{
    return strlen(s) > strlen(prefix) + strlen(suffix) &&
           g_str_has_prefix(s, prefix) && g_str_has_suffix(s, suffix);
}

bool libvirt_machine_of_cgroup(const char *path, char *machine, size_t size)
{
    g_auto(GStrv) parts = NULL;
    char name[LIBVIRT_MACHINE_LEN];
    const char *group;
    size_t i = 1;

    if (path[0] != '/') {
        return false;
    }
    parts = g_strsplit(path + 1, "/", -1);
    if (!parts[0]) {
        return false;
    }
    if (g_str_equal(parts[0], "machine")) {
        /* libvirt's own cgroups (no systemd): its custom partitions are
         * NAME.partition, the domain's group MACHINE.libvirt-qemu. */
        while (parts[i] && is_around(parts[i], "", ".partition")) {
            i++;
        }
        group = parts[i];
        if (!group || !is_around(group, "", ".libvirt-qemu") ||
            strlen(group) - strlen(".libvirt-qemu") >= sizeof(name)) {
            return false;
        }
        g_strlcpy(name, group, strlen(group) - strlen(".libvirt-qemu") + 1);
    } else if (g_str_equal(parts[0], "machine.slice")) {
        /* systemd-machined's: partitions are slices, the domain's group
         * the scope machine-MACHINE.scope, MACHINE escaped. */
        while (parts[i] && is_around(parts[i], "machine-", ".slice")) {
            i++;
        }
        group = parts[i];
        if (!group || !is_around(group, "machine-", ".scope") ||
            !unescape_unit(group + strlen("machine-"),
                           strlen(group) - strlen("machine-") -
                           strlen(".scope"), name, sizeof(name))) {
            return false;
        }
    } else {
        return false;
    }
    if (!libvirt_machine_name_valid(name) || strlen(name) >= size) {
        return false;
    }
    strcpy(machine, name);
    return true;
}

/* @text as a pid: 1..INT32_MAX. */
static bool parse_pid(const char *text, pid_t *pid)
{
    char *end;
    long value;

    errno = 0;
    value = strtol(text, &end, 10);
    if (errno || end == text || *end || value <= 0 || value > INT32_MAX) {
        return false;
    }
    *pid = value;
    return true;
}

bool libvirt_registration_parse(const char *text, LibvirtDomain *out)
{
    g_autoptr(GKeyFile) kf = g_key_file_new();
    g_autofree char *name = NULL;
    g_autofree char *uuid = NULL;
    g_autofree char *pid = NULL;
    g_autofree char *machine = NULL;
    g_autofree char *domain = NULL;
    g_autofree char *priority = NULL;
    LibvirtDomain dom = { 0 };

    if (!g_key_file_load_from_data(kf, text, -1, G_KEY_FILE_NONE, NULL)) {
        return false;
    }
    name = g_key_file_get_string(kf, "vm", "name", NULL);
    uuid = g_key_file_get_string(kf, "vm", "uuid", NULL);
    pid = g_key_file_get_string(kf, "vm", "pid", NULL);
    machine = g_key_file_get_string(kf, "vm", "machine", NULL);
    domain = g_key_file_get_string(kf, "vm", "domain", NULL);
    priority = g_key_file_get_string(kf, "vm", "priority", NULL);
    if (!name || !uuid || !*name || !*uuid ||
        strlen(uuid) >= sizeof(dom.uuid)) {
        return false;
    }
    /* Before libvirt's "started", the hook knows no pid yet. */
    if (pid && !parse_pid(pid, &dom.pid)) {
        return false;
    }
    g_strlcpy(dom.name, name, sizeof(dom.name));
    g_strlcpy(dom.uuid, uuid, sizeof(dom.uuid));
    if (machine && libvirt_machine_name_valid(machine)) {
        g_strlcpy(dom.machine, machine, sizeof(dom.machine));
    }
    /* The settings as QEMU's nuksm object takes them, else none. */
    if (domain && nuksm_domain_name_valid(domain)) {
        g_strlcpy(dom.domain, domain, sizeof(dom.domain));
    }
    if (priority) {
        char *end;
        unsigned long value;

        errno = 0;
        value = strtoul(priority, &end, 10);
        if (!errno && end != priority && !*end && priority[0] != '-' &&
            value >= NUKSM_PRIORITY_MIN && value <= NUKSM_PRIORITY_MAX) {
            dom.priority = value;
        }
    }
    *out = dom;
    return true;
}

/*
 * @path's text if root wrote it and only root may change it: the hook
 * runs as root, and a file anyone else could write would let them name
 * VMs.  False if not, or if it is gone (its domain stopped meanwhile).
 */
static bool read_registration(const char *path, char **text)
{
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    char buf[4096];
    ssize_t len;

    if (fd < 0) {
        return false;
    }
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != 0 ||
        (st.st_mode & (S_IWGRP | S_IWOTH))) {
        log_debug("%s: not a regular file only root may write, ignored",
                  path);
        close(fd);
        return false;
    }
    len = read(fd, buf, sizeof(buf) - 1);  /* a registration is ~200 B */
    close(fd);
    if (len < 0) {
        return false;
    }
    buf[len] = '\0';
    *text = g_strdup(buf);
    return true;
}

/* Each registration of @dir that root wrote and that parses, in @fn. */
static void registry_foreach(const char *dir,
                             void (*fn)(const char *path,
                                        const LibvirtDomain *dom,
                                        void *opaque),
                             void *opaque)
{
    g_autoptr(GDir) d = g_dir_open(dir, 0, NULL);
    const char *entry;

    while (d && (entry = g_dir_read_name(d))) {
        g_autofree char *path = NULL;
        g_autofree char *text = NULL;
        LibvirtDomain dom;

        if (!g_str_has_suffix(entry, ".conf")) {
            continue;           /* the hook's .tmp files, say */
        }
        path = g_build_filename(dir, entry, NULL);
        if (!read_registration(path, &text)) {
            continue;
        }
        if (!libvirt_registration_parse(text, &dom)) {
            /* Debug: every LIST_VMS would repeat a warning. */
            log_debug("%s: not a libvirt registration (see "
                      "libvirt-hooks/qemu.d/nuksm), ignored", path);
            continue;
        }
        fn(path, &dom, opaque);
    }
}

static void add_by_pid(const char *path, const LibvirtDomain *dom,
                       void *opaque)
{
    if (dom->pid) {
        g_hash_table_replace(opaque, GINT_TO_POINTER(dom->pid),
                             g_memdup2(dom, sizeof(*dom)));
    }
}

GHashTable *libvirt_registry_read(const char *dir)
{
    GHashTable *domains = g_hash_table_new_full(NULL, NULL, NULL, g_free);

    registry_foreach(dir, add_by_pid, domains);
    return domains;
}

typedef struct FindState {
    pid_t pid;
    const char *machine;        /* of the pid's cgroups, "" if none */
    unsigned by_pid;            /* files with pid=PID */
    unsigned by_machine;        /* files with machine=MACHINE */
    LibvirtDomain pid_match;
    LibvirtDomain machine_match;
    char pid_path[PATH_MAX];
    char machine_path[PATH_MAX];
} FindState;

static void find_one(const char *path, const LibvirtDomain *dom,
                     void *opaque)
{
    FindState *s = opaque;
    bool same_machine = s->machine[0] && g_str_equal(dom->machine, s->machine);

    if (s->pid > 0 && dom->pid == s->pid) {
        if (dom->machine[0] && s->machine[0] && !same_machine) {
            /* A registration of another domain whose QEMU had this
             * pid: not this process's. */
            log_debug("%s: registered for pid %d in machine %s, but pid "
                      "%d is in %s: ignored", path, (int)dom->pid,
                      dom->machine, (int)s->pid, s->machine);
            return;
        }
        if (s->by_pid++ == 0) {
            s->pid_match = *dom;
            g_strlcpy(s->pid_path, path, sizeof(s->pid_path));
        }
    }
    if (same_machine && s->by_machine++ == 0) {
        s->machine_match = *dom;
        g_strlcpy(s->machine_path, path, sizeof(s->machine_path));
    }
}

bool libvirt_registry_find(const char *dir, pid_t pid,
                           const char *const *cgroups, LibvirtDomain *out)
{
    char machine[LIBVIRT_MACHINE_LEN] = "";
    FindState s = { .pid = pid, .machine = machine };

    for (size_t i = 0; cgroups && cgroups[i]; i++) {
        char found[LIBVIRT_MACHINE_LEN];

        if (!libvirt_machine_of_cgroup(cgroups[i], found, sizeof(found))) {
            continue;
        }
        if (machine[0] && !g_str_equal(machine, found)) {
            log_warning("pid %d is in the cgroups of two libvirt machines, "
                        "%s and %s: no libvirt domain for it", (int)pid,
                        machine, found);
            return false;
        }
        g_strlcpy(machine, found, sizeof(machine));
    }
    if (pid <= 0 && !machine[0]) {
        return false;
    }
    registry_foreach(dir, find_one, &s);

    if (s.by_pid > 1) {
        log_warning("%u libvirt registrations in %s claim pid %d (one is "
                    "%s): no libvirt domain for it", s.by_pid, dir, (int)pid,
                    s.pid_path);
        return false;
    }
    if (s.by_pid == 1) {
        *out = s.pid_match;
        return true;
    }
    if (s.by_machine > 1) {
        log_warning("%u libvirt registrations in %s claim machine %s (one "
                    "is %s): no libvirt domain for pid %d", s.by_machine,
                    dir, machine, s.machine_path, (int)pid);
        return false;
    }
    if (s.by_machine == 1) {
        if (s.machine_match.pid) {
            /* Its QEMU is another process: a helper of the domain in
             * its cgroup is not the VM. */
            log_debug("%s: machine %s is pid %d's, not pid %d's",
                      s.machine_path, machine, (int)s.machine_match.pid,
                      (int)pid);
            return false;
        }
        *out = s.machine_match;
        return true;
    }
    return false;
}
