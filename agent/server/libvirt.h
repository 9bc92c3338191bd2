/*
 * nuksmd's view of libvirt: which VM is which libvirt domain.
 *
 * libvirt's qemu hook (libvirt-hooks/qemu.d/nuksm) writes one key file
 * per domain with a nuksm object into the registry directory
 * (--libvirt-dir, default /run/nuksm/libvirt), REGISTRY/UUID.conf:
 *
 *     [vm]
 *     name=web1
 *     uuid=2f6b...
 *     machine=qemu-3-web1   libvirt's machine name: "qemu-" ID "-" NAME
 *                           (the name's hostname characters, at most 64
 *                           in all), as its cgroup shows it
 *     pid=1234              QEMU's pid, from libvirt's pidfile
 *     domain=tenant-a       from the domain's <nuksm:nuksm> metadata,
 *     priority=500          each optional
 *     max-cpu=20
 *
 * It writes the file twice: at libvirt's "start", before QEMU runs, with
 * the machine name and no pid (QEMU's nuksm object may connect before
 * libvirt's "started"); at "started" (and "reconnect", "attach") again
 * with QEMU's pid.  It removes it when the domain stops.
 *
 * Only files root owns and only root may write count: the hook runs as
 * root.  A VM is the domain registered either with the pid the kernel
 * reports for the VM's connection (SO_PEERCRED), or with the machine
 * name of the libvirt cgroup that pid is in: never what its QEMU claims.
 * A libvirt cgroup is one below the hierarchy's machine partition, which
 * only root can put processes in (see libvirt_machine_of_cgroup()).  The
 * files are read when asked, so they outlive agent restarts and the hook
 * never waits for the agent.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_LIBVIRT_H
#define NUKSMD_LIBVIRT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <glib.h>

#include "nuksm-proto.h"

/* libvirt's machine names have at most 64 characters. */
#define LIBVIRT_MACHINE_LEN 65

typedef struct LibvirtDomain {
    pid_t pid;                     /* 0: not known yet (before "started") */
    char name[NUKSM_NAME_LEN];     /* cut to fit */
    char uuid[NUKSM_UUID_LEN];
    char machine[LIBVIRT_MACHINE_LEN];  /* "qemu-3-web1", "" if unknown */
    char domain[NUKSM_NAME_LEN];   /* merge domain of its metadata, "" if */
                                   /* none or not a valid name */
    uint32_t priority;             /* 1..1000 of its metadata, 0 if none */
                                   /* or out of range */
} LibvirtDomain;

/*
 * The registered domains in @dir whose QEMU's pid is known, keyed by pid
 * (a GHashTable of GINT_TO_POINTER(pid) -> LibvirtDomain *).  Files that
 * do not parse are skipped (logged at debug level); a missing @dir is an
 * empty registry.
 */
GHashTable *libvirt_registry_read(const char *dir);

/*
 * The registration in @dir of the VM process @pid, whose cgroups are
 * @cgroups (NULL-terminated, the paths of its /proc/PID/cgroup lines;
 * NULL for none): into @out, true if found.
 *
 * First a file with pid=@pid; else a file with no pid yet, or pid=@pid,
 * whose machine= is the machine name of @pid's libvirt cgroup
 * (libvirt_machine_of_cgroup() of any of @cgroups).  A pid match whose
 * file names another machine than @pid's cgroup does is stale (a reused
 * pid) and does not count.  False if none matches, or if the answer is
 * ambiguous: two files claim it, or @cgroups name two machines (logged
 * at warning level).
 */
bool libvirt_registry_find(const char *dir, pid_t pid,
                           const char *const *cgroups, LibvirtDomain *out);

/*
 * Whether @path, one cgroup path as /proc/PID/cgroup shows it, is in the
 * cgroup libvirt made for a QEMU domain; its machine name (e.g.
 * "qemu-3-web1") into @machine (@size bytes, LIBVIRT_MACHINE_LEN is
 * enough) if so.  libvirt's two layouts, each from the top of the
 * hierarchy, which only root may change:
 *
 *   without systemd   /machine/qemu-3-web1.libvirt-qemu[/...]
 *   with systemd      /machine.slice/machine-qemu\x2d3\x2dweb1.scope[/...]
 *
 * with any of libvirt's sub-groups below (emulator, vcpu0, libvirt/...),
 * and custom resource partitions between (/machine/NAME.partition/...,
 * /machine.slice/machine-NAME.slice/...).  A path that only looks like
 * one further down (a user's delegated subtree, say) is not one.
 */
bool libvirt_machine_of_cgroup(const char *path, char *machine, size_t size);

/* Whether @machine is a machine name libvirt gives a QEMU domain. */
bool libvirt_machine_name_valid(const char *machine);

/* Parse one registration (the key file's text); false if it is not one. */
bool libvirt_registration_parse(const char *text, LibvirtDomain *out);

#endif /* NUKSMD_LIBVIRT_H */
