/*
 * nuksmd's view of libvirt (libvirt.h).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <glib.h>

#include "libvirt.h"
#include "log.h"

bool libvirt_registration_parse(const char *text, LibvirtDomain *out)
{
    g_autoptr(GKeyFile) kf = g_key_file_new();
    g_autofree char *name = NULL;
    g_autofree char *uuid = NULL;
    g_autofree char *pid = NULL;
    char *end;
    long value;

    if (!g_key_file_load_from_data(kf, text, -1, G_KEY_FILE_NONE, NULL)) {
        return false;
    }
    name = g_key_file_get_string(kf, "vm", "name", NULL);
    uuid = g_key_file_get_string(kf, "vm", "uuid", NULL);
    pid = g_key_file_get_string(kf, "vm", "pid", NULL);
    if (!name || !uuid || !pid || !*name ||
        strlen(uuid) >= sizeof(out->uuid)) {
        return false;
    }
    errno = 0;
    value = strtol(pid, &end, 10);
    if (errno || end == pid || *end || value <= 0 || value > INT32_MAX) {
        return false;
    }
    memset(out, 0, sizeof(*out));
    out->pid = value;
    g_strlcpy(out->name, name, sizeof(out->name));
    g_strlcpy(out->uuid, uuid, sizeof(out->uuid));
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

GHashTable *libvirt_registry_read(const char *dir)
{
    GHashTable *domains = g_hash_table_new_full(NULL, NULL, NULL, g_free);
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
        g_hash_table_replace(domains, GINT_TO_POINTER(dom.pid),
                             g_memdup2(&dom, sizeof(dom)));
    }
    return domains;
}
