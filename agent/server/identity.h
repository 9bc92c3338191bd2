/*
 * nuksmd's view of who a client is: what the kernel and root vouch for
 * about the process at the other end of a connection, never what the
 * client says about itself.  The domain assignment (core/assign.h) and
 * the roles (dispatch.c) are decided from it.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_IDENTITY_H
#define NUKSMD_IDENTITY_H

#include <stdbool.h>
#include <sys/types.h>

#include <glib.h>

#include "assign.h"
#include "libvirt.h"

typedef struct ClientIdentity {
    pid_t pid;               /* SO_PEERCRED */
    unsigned long long start;    /* when it started, /proc/PID/stat */
    uid_t uid;
    gid_t gid;
    GArray *groups;          /* gid_t: supplementary, /proc/PID/status */
    char **cgroups;          /* its cgroup paths, /proc/PID/cgroup */
    /* A VM's (identity_read_vm()) */
    char *private_name;      /* "vm:" + libvirt uuid, or + pid.start */
    bool registered;         /* libvirt registered it: */
    LibvirtDomain libvirt;   /* what root's hook wrote */
} ClientIdentity;

/*
 * Read what @pid's process is (its pidfd @pidfd, or -1) with the
 * credentials the kernel gave for its connection.  False, with *@error
 * set, if the process is gone or changed meanwhile: it cannot be told
 * apart from one that reused its pid.
 */
bool identity_read(ClientIdentity *id, pid_t pid, int pidfd, uid_t uid,
                   gid_t gid, char **error);

/*
 * What only a VM needs: its libvirt registration in @libvirt_dir, and
 * the name of the private domain it would have.
 */
void identity_read_vm(ClientIdentity *id, const char *libvirt_dir);

void identity_clear(ClientIdentity *id);

/* @id as core/assign.h takes it. */
void identity_peer(const ClientIdentity *id, PeerIdentity *peer);

/* True if @id is root, nuksmd's own user, or in group @admin_gid. */
bool identity_is_admin(const ClientIdentity *id, gid_t admin_gid);

#endif /* NUKSMD_IDENTITY_H */
