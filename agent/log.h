/*
 * nuksmd logging: leveled, one line per message on stderr.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_LOG_H
#define NUKSMD_LOG_H

#include <stdbool.h>

#include <glib.h>

typedef enum NuksmdLogLevel {
    NUKSMD_LOG_ERROR,
    NUKSMD_LOG_WARNING,
    NUKSMD_LOG_INFO,
    NUKSMD_LOG_DEBUG,
} NuksmdLogLevel;

void log_set_level(NuksmdLogLevel level);

/* Level for @name ("error", ..., "debug"); false if @name is not one. */
bool log_parse_level(const char *name, NuksmdLogLevel *level);

/* "error, warning, info, debug" for error messages. */
const char *log_level_names(void);

void log_msg(NuksmdLogLevel level, const char *fmt, ...) G_GNUC_PRINTF(2, 3);

/*
 * A message that a client or a full store could make repeat: logged at
 * most once per @interval, saying how many were held back meanwhile.
 */
typedef struct LogLimit {
    gint64 last;             /* g_get_monotonic_time() of the last one */
    unsigned held;           /* held back since */
} LogLimit;

/* The interval of the messages a client could make repeat. */
#define LOG_LIMIT_SECONDS 10

void log_limited(LogLimit *limit, unsigned interval, NuksmdLogLevel level,
                 const char *fmt, ...) G_GNUC_PRINTF(4, 5);

#define log_error(...)   log_msg(NUKSMD_LOG_ERROR, __VA_ARGS__)
#define log_warning(...) log_msg(NUKSMD_LOG_WARNING, __VA_ARGS__)
#define log_info(...)    log_msg(NUKSMD_LOG_INFO, __VA_ARGS__)
#define log_debug(...)   log_msg(NUKSMD_LOG_DEBUG, __VA_ARGS__)

#endif /* NUKSMD_LOG_H */
