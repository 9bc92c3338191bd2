/*
 * nuksmd configuration: command line and [nuksmd] key file.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_CONFIG_H
#define NUKSMD_CONFIG_H

#include <sys/types.h>

#include <glib.h>

#include "assign.h"
#include "colocate.h"
#include "log.h"
#include "nuksm-proto.h"

typedef struct NuksmdConfig {
    char *socket_path;
    NuksmPolicyId policy;
    uint32_t fake_numa;        /* 0: use the host's NUMA topology */
    NuksmdLogLevel log_level;
    char *state_dir;           /* store files, on tmpfs */
    uint32_t restore_grace;    /* seconds for VMs to restore after a restart */
    uint32_t cold_windows;     /* hotness windows before a page is cold */
    uint32_t replace_rate;     /* merged pages moved per second, at most */
    uint32_t forget_after;     /* seconds before pages seen that paired */
                               /* with none are forgotten (wanted.h) */
    uint32_t memory_max_mib;   /* heap budget of nuksmd's tables */
    uint32_t max_cpu;          /* percent of a core its VMs' messages */
                               /* may take: 100 is no cap */
    uint32_t scan_budget_ppm;  /* the VMs' scanners' budget, millionths */
                               /* of a core; 0: none (budget.h) */
    NuksmRunId run;            /* when to merge (budget.h) */
    uint32_t pressure_available_pm;    /* run=pressure: memory short */
    uint32_t pressure_stall_pm;        /* below/above these, per mille */
    char *pressure_cgroup;     /* whose memory, NULL: the host's */
    uint32_t colocate_threshold;       /* similar from this percent on */
    uint32_t colocate_min_gain_mib;    /* a planned move gains at least */
    uint32_t colocate_vcpus_per_cpu;   /* 0: no limit */
    uint32_t colocate_domain_room;     /* percent of a node's room each */
                                       /* merge domain's plan may take */
    bool colocate_move_pinned;         /* --colocate-pins=move */
    ColocateApply colocate_apply;      /* --colocate-apply */
    char *metrics_dir;         /* NULL: no metrics written */
    uint32_t metrics_interval; /* seconds */
    gid_t metrics_gid;         /* may read them, or -1: only we may */
    char *libvirt_dir;         /* libvirt hook's registrations */
    gid_t socket_gid;          /* group of the socket, or -1: ours */
    gid_t admin_gid;           /* its members administer, or -1: none */
    bool vm_set_policy;        /* VMs may set the host-wide policy */
    AssignConfig assign;       /* isolation, vm-domains, [domain NAME] */
} NuksmdConfig;

/*
 * Fill @cfg from the command line and, with --config, from its key file;
 * command-line options win.  Returns false after printing a usage error
 * (the caller exits 2); exits 0 itself for --help and --version.
 */
bool config_load(NuksmdConfig *cfg, int argc, char **argv);

void config_clear(NuksmdConfig *cfg);

#endif /* NUKSMD_CONFIG_H */
