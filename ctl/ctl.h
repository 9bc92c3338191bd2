/*
 * nuksmctl's connection to nuksmd (one request at a time, each reply in
 * one buffer) and what its commands print with.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMCTL_CTL_H
#define NUKSMCTL_CTL_H

#include <stdint.h>

#include <glib.h>

#include "nuksm-proto.h"

/* How long to wait for any reply before giving up on nuksmd. */
#define REPLY_TIMEOUT_SECONDS 5

typedef struct Ctl {
    const char *socket_path;
    int fd;
    uint32_t seq;               /* of the last request */
    void *buf;                  /* NUKSM_MSG_MAX bytes */
    int reply_timeout;          /* seconds */
} Ctl;

/* Print "nuksmctl: " and the message on stderr, and exit with @status. */
void G_GNUC_NORETURN G_GNUC_PRINTF(2, 3) die(int status, const char *fmt,
                                             ...);

void ctl_connect(Ctl *ctl);

/* Wait at most @seconds for each reply from now on. */
void ctl_set_reply_timeout(Ctl *ctl, int seconds);

/*
 * Send a request and return the payload of its @reply_type reply, in
 * ctl->buf: the next request overwrites it.  An ERROR reply, or any
 * other failure, ends the program with its text.
 */
const void *ctl_request(Ctl *ctl, NuksmMsgType type, const void *payload,
                        uint32_t len, NuksmMsgType reply_type);

/*
 * ctl_request(), but an ERROR reply to this request returns NULL with
 * its text in *@error (valid until the next request).
 */
const void *ctl_try_request(Ctl *ctl, NuksmMsgType type,
                            const void *payload, uint32_t len,
                            NuksmMsgType reply_type, const char **error);

void ctl_hello(Ctl *ctl);

/* Append @s as a JSON string; invalid UTF-8 becomes U+FFFD. */
void json_string(GString *out, const char *s);

/* Print @out and a newline. */
void print_json(GString *out);

/* A client-supplied name made safe for a terminal; "-" when empty. */
char *table_text(const char *s);

/*
 * Append a table to @out: @header, then @rows (GStrv of @columns cells
 * each), every column as wide as its widest cell, two spaces apart.
 */
void ctl_table(GString *out, const char *const *header, int columns,
               GPtrArray *rows);

/*
 * Every VM the caller may see, page by page (LIST_VMS from ids on): a
 * NuksmMsgVms whose count entries follow it, for g_free().
 */
NuksmMsgVms *ctl_list_vms(Ctl *ctl);

/* The LIST_VMS entry of client @id, or NULL if it left meanwhile. */
const NuksmVmEntry *ctl_vm_entry(const NuksmMsgVms *list, uint32_t id);

/* What to call client @id: its VM name, else "client ID" (table_text). */
char *ctl_vm_label(const NuksmMsgVms *list, uint32_t id);

/*
 * A VM's part of the host's scan budget for a table, in one word:
 * "4.5%(yielding)", "0.01%(resting,x24)" with its pace, "-" without a
 * budget.
 */
char *ctl_share_text(const NuksmMsgShare *share);

#endif
