/*
 * nuksmd logging.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <stdio.h>

#include "log.h"

static const char *const level_names[] = {
    [NUKSMD_LOG_ERROR]   = "error",
    [NUKSMD_LOG_WARNING] = "warning",
    [NUKSMD_LOG_INFO]    = "info",
    [NUKSMD_LOG_DEBUG]   = "debug",
};

static NuksmdLogLevel max_level = NUKSMD_LOG_INFO;

void log_set_level(NuksmdLogLevel level)
{
    max_level = level;
}

bool log_parse_level(const char *name, NuksmdLogLevel *level)
{
    for (size_t i = 0; i < G_N_ELEMENTS(level_names); i++) {
        if (g_str_equal(name, level_names[i])) {
            *level = i;
            return true;
        }
    }
    return false;
}

const char *log_level_names(void)
{
    return "error, warning, info, debug";
}

void log_msg(NuksmdLogLevel level, const char *fmt, ...)
{
    g_autofree char *text = NULL;
    g_autofree char *line = NULL;
    va_list ap;

    if (level > max_level) {
        return;
    }
    va_start(ap, fmt);
    text = g_strdup_vprintf(fmt, ap);
    va_end(ap);

    /* Format the whole line first so it reaches stderr in one write. */
    line = g_strdup_printf("nuksmd: %s: %s\n", level_names[level], text);
    fputs(line, stderr);
}
