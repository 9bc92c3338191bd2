/*
 * nuksmd vCPU threads.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <glib.h>

#include "vcpus.h"

/* The CPU thread @tid of @pid last ran on, or -1. */
static int last_cpu(pid_t pid, uint32_t tid)
{
    g_autofree char *path = g_strdup_printf("/proc/%d/task/%u/stat", pid,
                                            tid);
    g_autofree char *stat = NULL;
    const char *p;
    int field = 2;

    if (!g_file_get_contents(path, &stat, NULL, NULL)) {
        return -1;
    }
    /* The command name may hold anything, ')' too: skip to the last. */
    p = strrchr(stat, ')');
    while (p && field < 39) {
        p = strchr(p + 1, ' ');
        field++;
    }
    return p ? atoi(p + 1) : -1;
}

/* A node number of a node list, below 64; advances *@p past it. */
static bool parse_node(const char **p, uint32_t *node)
{
    const char *s = *p;
    uint32_t n = 0;

    if (!g_ascii_isdigit(*s)) {
        return false;
    }
    do {
        n = n * 10 + (*s++ - '0');
        if (n >= 64) {
            return false;
        }
    } while (g_ascii_isdigit(*s));
    *p = s;
    *node = n;
    return true;
}

bool vcpus_parse_nodes(const char *list, uint64_t *nodes)
{
    const char *p = list;
    uint64_t set = 0;

    while (g_ascii_isspace(*p)) {
        p++;
    }
    while (*p && !g_ascii_isspace(*p)) {
        uint32_t first, last;

        if (!parse_node(&p, &first)) {
            return false;
        }
        last = first;
        if (*p == '-') {
            p++;
            if (!parse_node(&p, &last) || last < first) {
                return false;
            }
        }
        set |= (UINT64_MAX >> (63 - last)) & (UINT64_MAX << first);
        if (*p == ',') {
            p++;
            if (!g_ascii_isdigit(*p)) {
                return false;       /* "0,", "0,,1" */
            }
        } else if (*p && !g_ascii_isspace(*p)) {
            return false;
        }
    }
    while (g_ascii_isspace(*p)) {
        p++;
    }
    if (*p) {
        return false;
    }
    *nodes = set;
    return true;
}

/*
 * The nodes thread @tid of @pid may allocate memory on, its cpuset's mems
 * (Mems_allowed_list), into *@nodes: all 64 if the list does not parse,
 * so that the memory source does not apply.  False if there is nothing to
 * read (the thread ended, a kernel without cpusets).
 */
static bool mems_allowed(pid_t pid, uint32_t tid, uint64_t *nodes)
{
    static const char key[] = "\nMems_allowed_list:";
    g_autofree char *path = g_strdup_printf("/proc/%d/task/%u/status", pid,
                                            tid);
    g_autofree char *status = NULL;
    char *line, *end;

    if (!g_file_get_contents(path, &status, NULL, NULL) ||
        !(line = strstr(status, key))) {
        return false;
    }
    line += sizeof(key) - 1;
    end = strchr(line, '\n');
    if (end) {
        *end = '\0';
    }
    if (!vcpus_parse_nodes(line, nodes)) {
        *nodes = UINT64_MAX;
    }
    return true;
}

void vcpus_observe(const Topology *topo, pid_t pid, uint32_t tid,
                   VcpuSeen *seen)
{
    cpu_set_t cpus;
    int cpu;

    *seen = (VcpuSeen) { .node = -1 };
    if (sched_getaffinity(tid, sizeof(cpus), &cpus) == 0) {
        seen->allowed = topology_nodes_of(topo, &cpus);
    }
    if (!topo->fake) {
        mems_allowed(pid, tid, &seen->mems);
    }
    cpu = last_cpu(pid, tid);
    if (cpu >= 0) {
        seen->node = topology_cpu_node(topo, cpu);
    }
}

bool vcpus_own_thread(pid_t pid, uint32_t tid)
{
    g_autofree char *path = g_strdup_printf("/proc/%d/task/%u", pid, tid);

    return access(path, F_OK) == 0;
}
