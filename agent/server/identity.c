/*
 * nuksmd's view of who a client is (identity.h).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "identity.h"

/* /proc/@pid/@file into *@text (NULL if it cannot be read). */
static void proc_text(pid_t pid, const char *file, char **text)
{
    g_autofree char *path = g_strdup_printf("/proc/%ld/%s", (long)pid, file);

    *text = NULL;
    g_file_get_contents(path, text, NULL, NULL);
}

/* "Groups:" of /proc/PID/status. */
static GArray *read_groups(const char *status)
{
    GArray *groups = g_array_new(FALSE, FALSE, sizeof(gid_t));
    const char *line = status ? strstr(status, "\nGroups:") : NULL;
    char *end;

    if (!line) {
        return groups;
    }
    line += strlen("\nGroups:");
    for (;;) {
        unsigned long gid = strtoul(line, &end, 10);
        gid_t value = gid;

        if (end == line) {
            break;
        }
        g_array_append_val(groups, value);
        line = end;
    }
    return groups;
}

/*
 * The paths of /proc/PID/cgroup's lines ("ID:CONTROLLERS:PATH"), each
 * once: cgroup v2's, and v1's hierarchies.
 */
static char **read_cgroups(const char *text)
{
    g_autoptr(GPtrArray) paths = g_ptr_array_new_with_free_func(g_free);
    g_auto(GStrv) lines = g_strsplit(text ? text : "", "\n", -1);

    for (char **l = lines; *l; l++) {
        char *path = strchr(*l, ':');

        path = path ? strchr(path + 1, ':') : NULL;
        if (!path || !path[1]) {
            continue;
        }
        path++;
        if (!g_ptr_array_find_with_equal_func(paths, path, g_str_equal,
                                              NULL)) {
            g_ptr_array_add(paths, g_strdup(path));
        }
    }
    g_ptr_array_add(paths, NULL);
    return (char **)g_ptr_array_steal(paths, NULL);
}

/* Field 22 of /proc/PID/stat: when the process started, in ticks. */
static bool read_starttime(const char *stat, unsigned long long *start)
{
    /* The command, field 2, is in parentheses and may hold anything. */
    const char *p = stat ? strrchr(stat, ')') : NULL;

    if (!p) {
        return false;
    }
    /* Each turn finds the space before field @field, the third first. */
    for (int field = 3; field <= 22; field++) {
        p = strchr(p + 1, ' ');
        if (!p) {
            return false;
        }
    }
    return sscanf(p + 1, "%llu", start) == 1;
}

/*
 * The process @pidfd names still runs: the pid was not reused.  Signal 0
 * only checks; another user's process answers EPERM, a gone one ESRCH.
 */
static bool still_there(int pidfd)
{
    return pidfd < 0 ||
           syscall(SYS_pidfd_send_signal, pidfd, 0, NULL, 0) == 0 ||
           errno != ESRCH;
}

bool identity_read(ClientIdentity *id, pid_t pid, int pidfd, uid_t uid,
                   gid_t gid, char **error)
{
    g_autofree char *status = NULL;
    g_autofree char *cgroup = NULL;
    g_autofree char *stat = NULL;

    proc_text(pid, "status", &status);
    proc_text(pid, "cgroup", &cgroup);
    proc_text(pid, "stat", &stat);
    *id = (ClientIdentity) { .pid = pid, .uid = uid, .gid = gid };
    id->groups = read_groups(status);
    id->cgroups = read_cgroups(cgroup);
    if (!status || !cgroup || !read_starttime(stat, &id->start) ||
        !still_there(pidfd)) {
        *error = g_strdup_printf("cannot tell who process %ld is: it is "
                                 "gone or unreadable", (long)pid);
        return false;
    }
    return true;
}

void identity_read_vm(ClientIdentity *id, const char *libvirt_dir)
{
    id->registered = libvirt_registry_find(libvirt_dir, id->pid,
                                           (const char *const *)id->cgroups,
                                           &id->libvirt);
    if (id->registered) {
        id->private_name = g_strdup_printf("vm:%s", id->libvirt.uuid);
    } else {
        id->private_name = g_strdup_printf("vm:%ld.%llu", (long)id->pid,
                                           id->start);
    }
}

void identity_clear(ClientIdentity *id)
{
    g_clear_pointer(&id->groups, g_array_unref);
    g_clear_pointer(&id->cgroups, g_strfreev);
    g_clear_pointer(&id->private_name, g_free);
}

void identity_peer(const ClientIdentity *id, PeerIdentity *peer)
{
    *peer = (PeerIdentity) {
        .uid = id->uid,
        .gid = id->gid,
        .groups = (const gid_t *)id->groups->data,
        .nr_groups = id->groups->len,
        .cgroups = (const char *const *)id->cgroups,
        .private_name = id->private_name,
        .libvirt_name = id->registered ? id->libvirt.name : NULL,
        .libvirt_domain = id->registered ? id->libvirt.domain : "",
        .libvirt_priority = id->registered ? id->libvirt.priority : 0,
    };
}

bool identity_is_admin(const ClientIdentity *id, gid_t admin_gid)
{
    if (id->uid == 0 || id->uid == geteuid()) {
        return true;
    }
    if (admin_gid == (gid_t)-1) {
        return false;
    }
    if (id->gid == admin_gid) {
        return true;
    }
    for (guint i = 0; i < id->groups->len; i++) {
        if (g_array_index(id->groups, gid_t, i) == admin_gid) {
            return true;
        }
    }
    return false;
}
