/*
 * nuksmctl plan: the co-location plan (AdaptMD-S) nuksmd would carry
 * out now, each move with what it gains, or why it is refused.
 *
 * nuksmctl plan --apply [VM...]: carry out the planned moves (of the VMs
 * named, by VM name, libvirt name or client id; else every planned
 * move).  nuksmd checks each against a fresh plan (agent/numa/apply.h);
 * a libvirt domain nuksmctl then moves through libvirt, live, with
 * virsh (its default connection: as root qemu:///system, or
 * LIBVIRT_DEFAULT_URI): `virsh vcpupin` of each vCPU and `virsh
 * emulatorpin` to the target node's CPUs, then `virsh numatune
 * --nodeset` to its memory nodes, which moves the memory along.  Exits 1
 * if any move was refused or failed, or a VM named has no move.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMCTL_PLAN_H
#define NUKSMCTL_PLAN_H

#include <stdbool.h>

#include "ctl.h"

void cmd_plan(Ctl *ctl, bool json);

/* The exit status: 0 if every move it tried was carried out. */
int cmd_plan_apply(Ctl *ctl, char **names, bool json);

#endif
