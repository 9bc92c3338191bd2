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

static void log_text(NuksmdLogLevel level, const char *text)
{
    /* Format the whole line first so it reaches stderr in one write. */
    g_autofree char *line = g_strdup_printf("nuksmd: %s: %s\n",
                                            level_names[level], text);

    fputs(line, stderr);
}

void log_msg(NuksmdLogLevel level, const char *fmt, ...)
{
    g_autofree char *text = NULL;
    va_list ap;

    if (level > max_level) {
        return;
    }
    va_start(ap, fmt);
    text = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    log_text(level, text);
}

void log_limited(LogLimit *limit, unsigned interval, NuksmdLogLevel level,
                 const char *fmt, ...)
{
    gint64 now = g_get_monotonic_time();
    g_autofree char *text = NULL;
    va_list ap;

    if (limit->last &&
        now - limit->last < (gint64)interval * G_USEC_PER_SEC) {
        limit->held++;
        return;
    }
    va_start(ap, fmt);
    text = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    if (limit->held) {
        g_autofree char *more = g_strdup_printf(
            "%s (and %u more like it in the last %u s)", text, limit->held,
            interval);

        g_free(text);
        text = g_steal_pointer(&more);
    }
    limit->last = now;
    limit->held = 0;
    if (level <= max_level) {
        log_text(level, text);
    }
}
