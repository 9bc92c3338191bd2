/*
 * nuksmd metrics, in Prometheus's text exposition format, for
 * node_exporter's textfile collector: every --metrics-interval seconds
 * nuksmd writes DIR/nuksm.prom (--metrics-dir, Debian's
 * /var/lib/prometheus/node-exporter by default), atomically (a
 * temporary file renamed over it), readable by its owner and by
 * --metrics-group (default "prometheus", node_exporter's user on
 * Debian; the file is its owner's alone if there is no such group).  It
 * removes the file when it stops, so that a stopped agent's figures do
 * not linger (node_exporter's node_textfile_mtime_seconds tells a stale
 * file; nuksm_agent_start_time_seconds a restart).
 *
 * What the metrics say (docs/operations.rst, "Monitoring", has the table
 * and the mapping to node_exporter's node_ksmd_* and to
 * /proc/PID/ksm_stat):
 *
 *   nuksm_pages_*, nuksm_run, nuksm_merge_across_nodes,
 *   nuksm_general_profit_bytes    the host, as KSM's sysfs counts it
 *   nuksm_node_*                  per NUMA node
 *   nuksm_domain_*                per merge domain
 *   nuksm_vm_*                    per VM, labelled vm, id, libvirt_uuid,
 *                                 merge_domain
 *   nuksm_agent_*                 nuksmd itself
 *
 * A VM's series go with it.  Cardinality: 30 series per VM, 4 plus one
 * per node per merge domain, two per node, about 30 for the host and the
 * agent.  Label values are escaped as the format asks; names a
 * VM gives itself are made valid UTF-8.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_METRICS_H
#define NUKSMD_METRICS_H

#include <glib.h>

struct NuksmAgent;

/* The file's name in the metrics directory. */
#define METRICS_FILE "nuksm.prom"

/* The metrics now, in the text exposition format. */
GString *metrics_text(struct NuksmAgent *agent);

/* Write them every agent->metrics.interval_s, if a directory is set. */
void metrics_start(struct NuksmAgent *agent);

/* Stop writing them, and remove the file. */
void metrics_stop(struct NuksmAgent *agent);

#endif /* NUKSMD_METRICS_H */
