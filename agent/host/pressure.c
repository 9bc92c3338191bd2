/*
 * nuksmd memory pressure (pressure.h).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <glib.h>

#include "pressure.h"

/* The "kB" figure of @key in /proc/meminfo's @text, in bytes. */
static bool meminfo_field(const char *text, const char *key, uint64_t *out)
{
    const char *at = strstr(text, key);
    uint64_t kib;

    if (!at || sscanf(at + strlen(key), " %" SCNu64 " kB", &kib) != 1) {
        return false;
    }
    *out = kib << 10;
    return true;
}

/* A file's first number, or "max" as UINT64_MAX. */
static bool read_number(const char *path, uint64_t *out)
{
    g_autofree char *text = NULL;

    if (!g_file_get_contents(path, &text, NULL, NULL)) {
        return false;
    }
    if (g_str_has_prefix(text, "max")) {
        *out = UINT64_MAX;
        return true;
    }
    return sscanf(text, "%" SCNu64, out) == 1;
}

/* PSI's "some avg10=X.YZ", per mille; 0 where the kernel has none. */
static uint32_t stall_pm(const char *path)
{
    g_autofree char *text = NULL;
    double avg10;

    if (!g_file_get_contents(path, &text, NULL, NULL) ||
        sscanf(text, "some avg10=%lf", &avg10) != 1) {
        return 0;
    }
    return CLAMP(avg10 * 10, 0, 1000);
}

static bool read_host(PressureSample *s, char **error)
{
    g_autofree char *text = NULL;

    if (!g_file_get_contents("/proc/meminfo", &text, NULL, NULL) ||
        !meminfo_field(text, "MemTotal:", &s->total) ||
        !meminfo_field(text, "MemAvailable:", &s->available)) {
        *error = g_strdup("cannot read MemTotal and MemAvailable from "
                          "/proc/meminfo");
        return false;
    }
    s->stall_pm = stall_pm("/proc/pressure/memory");
    return true;
}

/* cgroup v1's "no limit": the largest page-aligned long. */
#define CGROUP_V1_UNLIMITED (INT64_MAX & ~4095ull)

static bool read_cgroup(const char *dir, PressureSample *s, char **error)
{
    g_autofree char *max_path = g_build_filename(dir, "memory.max", NULL);
    g_autofree char *cur_path = g_build_filename(dir, "memory.current",
                                                 NULL);
    g_autofree char *psi_path = g_build_filename(dir, "memory.pressure",
                                                 NULL);
    uint64_t current;

    /* cgroup v1: its limit and usage; no stalls are counted there. */
    if (!g_file_test(max_path, G_FILE_TEST_EXISTS)) {
        g_free(max_path);
        g_free(cur_path);
        max_path = g_build_filename(dir, "memory.limit_in_bytes", NULL);
        cur_path = g_build_filename(dir, "memory.usage_in_bytes", NULL);
    }
    if (!read_number(max_path, &s->total) ||
        !read_number(cur_path, &current)) {
        *error = g_strdup_printf("cannot read %s and %s", max_path,
                                 cur_path);
        return false;
    }
    if (s->total == UINT64_MAX || s->total >= CGROUP_V1_UNLIMITED) {
        *error = g_strdup_printf("%s sets no limit: the cgroup has none to "
                                 "be short of", max_path);
        return false;
    }
    s->available = s->total > current ? s->total - current : 0;
    s->stall_pm = stall_pm(psi_path);
    return true;
}

bool pressure_read(const char *cgroup, PressureSample *sample, char **error)
{
    *sample = (PressureSample) { 0 };
    return cgroup ? read_cgroup(cgroup, sample, error)
                  : read_host(sample, error);
}
