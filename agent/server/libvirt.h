/*
 * nuksmd's view of libvirt: which VM is which libvirt domain.
 *
 * libvirt's qemu hook (libvirt-hooks/qemu.d/nuksm) writes one key file
 * per running domain with a nuksm object into the registry directory
 * (--libvirt-dir, default /run/nuksm/libvirt):
 *
 *     [vm]
 *     name=web1
 *     uuid=2f6b...
 *     pid=1234              QEMU's pid, from libvirt's pidfile
 *     domain=tenant-a       from the domain's <nuksm:nuksm> metadata,
 *     priority=500          each optional
 *     max-cpu=20
 *
 * Only files root owns and only root may write count: the hook runs as
 * root.  A VM is the domain registered with the pid the kernel reports
 * for the VM's connection (SO_PEERCRED), not what its QEMU claims.
 * nuksmd reads the name, uuid and pid; the settings are there for the
 * operator to see.  The files are read when asked, so they outlive
 * agent restarts and the hook never waits for the agent.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_LIBVIRT_H
#define NUKSMD_LIBVIRT_H

#include <stdbool.h>
#include <sys/types.h>

#include <glib.h>

#include "nuksm-proto.h"

typedef struct LibvirtDomain {
    pid_t pid;
    char name[NUKSM_NAME_LEN];     /* cut to fit */
    char uuid[NUKSM_UUID_LEN];
} LibvirtDomain;

/*
 * The registered domains in @dir, keyed by pid (a GHashTable of
 * GINT_TO_POINTER(pid) -> LibvirtDomain *).  Files that do not parse
 * are skipped (logged at debug level); a missing @dir is an empty
 * registry.
 */
GHashTable *libvirt_registry_read(const char *dir);

/* Parse one registration (the key file's text); false if it is not one. */
bool libvirt_registration_parse(const char *text, LibvirtDomain *out);

#endif /* NUKSMD_LIBVIRT_H */
