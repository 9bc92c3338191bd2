/*
 * nuksmctl's connection to nuksmd and its output helpers (ctl.h).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "ctl.h"


void die(int status, const char *fmt, ...)
{
    char *text;
    va_list ap;

    va_start(ap, fmt);
    text = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    fprintf(stderr, "nuksmctl: %s\n", text);
    /* exit() skips g_autofree: LeakSanitizer would report the text. */
    g_free(text);
    exit(status);
}

void ctl_set_reply_timeout(Ctl *ctl, int seconds)
{
    struct timeval tv = { .tv_sec = seconds };

    if (setsockopt(ctl->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0 ||
        setsockopt(ctl->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0) {
        die(1, "cannot set socket timeouts: %s", g_strerror(errno));
    }
    ctl->reply_timeout = seconds;
}

void ctl_connect(Ctl *ctl)
{
    struct sockaddr_un addr = { .sun_family = AF_UNIX };

    if (strlen(ctl->socket_path) >= sizeof(addr.sun_path)) {
        die(2, "--socket: path too long (max %zu bytes)",
            sizeof(addr.sun_path) - 1);
    }
    strcpy(addr.sun_path, ctl->socket_path);

    ctl->fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (ctl->fd < 0) {
        die(1, "cannot create socket: %s", g_strerror(errno));
    }
    if (connect(ctl->fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
        die(1, "cannot connect to nuksmd at %s: %s", ctl->socket_path,
            g_strerror(errno));
    }
    ctl_set_reply_timeout(ctl, REPLY_TIMEOUT_SECONDS);
}

static void G_GNUC_NORETURN die_on_error_reply(Ctl *ctl)
{
    const NuksmMsgError *err = nuksm_msg_payload(ctl->buf);

    die(1, "nuksmd: %s", err->message);
}

/*
 * nuksmd may have sent ERROR and closed the connection before our request
 * went out (e.g. when it has too many clients): report that ERROR rather
 * than the failed send.
 */
static void die_on_pending_error(Ctl *ctl)
{
    ssize_t n = recv(ctl->fd, ctl->buf, NUKSM_MSG_MAX,
                     MSG_TRUNC | MSG_DONTWAIT);
    NuksmMsgHeader hdr;

    if (n > 0 && !nuksm_msg_check(ctl->buf, n)) {
        memcpy(&hdr, ctl->buf, sizeof(hdr));
        if (hdr.type == NUKSM_MSG_ERROR) {
            die_on_error_reply(ctl);
        }
    }
}

const void *ctl_try_request(Ctl *ctl, NuksmMsgType type,
                            const void *payload, uint32_t len,
                            NuksmMsgType reply_type, const char **error)
{
    /* HELLO is the largest request. */
    char req[sizeof(NuksmMsgHeader) + sizeof(NuksmMsgHello)];
    NuksmMsgHeader hdr;
    const char *problem;
    size_t size;
    ssize_t n;

    g_assert(len <= sizeof(NuksmMsgHello));
    size = nuksm_msg_pack(req, type, ++ctl->seq, payload, len);
    if (send(ctl->fd, req, size, MSG_NOSIGNAL) < 0) {
        int err = errno;

        die_on_pending_error(ctl);
        die(1, "cannot send %s to nuksmd: %s", nuksm_msg_type_name(type),
            g_strerror(err));
    }

    for (;;) {
        n = recv(ctl->fd, ctl->buf, NUKSM_MSG_MAX, MSG_TRUNC);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            die(1, "no reply from nuksmd within %d s", ctl->reply_timeout);
        }
        if (n < 0) {
            die(1, "cannot receive from nuksmd: %s", g_strerror(errno));
        }
        if (n == 0) {
            die(1, "nuksmd closed the connection");
        }
        problem = nuksm_msg_check(ctl->buf, n);
        if (problem) {
            die(1, "invalid reply from nuksmd: %s", problem);
        }
        memcpy(&hdr, ctl->buf, sizeof(hdr));
        /* Policy broadcasts (seq 0) are not replies to us. */
        if (hdr.type == NUKSM_MSG_POLICY && hdr.seq == 0) {
            continue;
        }
        break;
    }

    if (hdr.type == NUKSM_MSG_ERROR) {
        if (hdr.seq != ctl->seq) {
            die_on_error_reply(ctl);
        }
        *error = ((const NuksmMsgError *)nuksm_msg_payload(ctl->buf))->message;
        return NULL;
    }
    if (hdr.type != reply_type || hdr.seq != ctl->seq) {
        die(1, "unexpected %s (seq %u) from nuksmd in reply to %s (seq %u)",
            nuksm_msg_type_name(hdr.type), hdr.seq,
            nuksm_msg_type_name(type), ctl->seq);
    }
    return nuksm_msg_payload(ctl->buf);
}

const void *ctl_request(Ctl *ctl, NuksmMsgType type, const void *payload,
                        uint32_t len, NuksmMsgType reply_type)
{
    const char *error;
    const void *reply = ctl_try_request(ctl, type, payload, len, reply_type,
                                        &error);

    if (!reply) {
        die(1, "nuksmd: %s", error);
    }
    return reply;
}

void ctl_hello(Ctl *ctl)
{
    NuksmMsgHello hello = {
        .version = NUKSM_PROTO_VERSION,
        .role = NUKSM_ROLE_CONTROL,
    };

    ctl_request(ctl, NUKSM_MSG_HELLO, &hello, sizeof(hello),
                NUKSM_MSG_HELLO_ACK);
}

void json_string(GString *out, const char *s)
{
    g_autofree char *valid = g_utf8_make_valid(s, -1);

    g_string_append_c(out, '"');
    for (const char *p = valid; *p; p++) {
        switch (*p) {
        case '"':
            g_string_append(out, "\\\"");
            break;
        case '\\':
            g_string_append(out, "\\\\");
            break;
        case '\n':
            g_string_append(out, "\\n");
            break;
        case '\r':
            g_string_append(out, "\\r");
            break;
        case '\t':
            g_string_append(out, "\\t");
            break;
        default:
            if ((unsigned char)*p < 0x20) {
                g_string_append_printf(out, "\\u%04x", (unsigned char)*p);
            } else {
                g_string_append_c(out, *p);
            }
        }
    }
    g_string_append_c(out, '"');
}

void print_json(GString *out)
{
    g_string_append_c(out, '\n');
    fputs(out->str, stdout);
}

NuksmMsgVms *ctl_list_vms(Ctl *ctl)
{
    g_autoptr(GByteArray) entries = g_byte_array_new();
    NuksmMsgListVms req = { .from_id = 0 };
    const NuksmMsgVms *page;
    NuksmMsgVms head = { 0 };

    do {
        const NuksmVmEntry *e;

        page = ctl_request(ctl, NUKSM_MSG_LIST_VMS, &req, sizeof(req),
                           NUKSM_MSG_VMS);
        e = (const NuksmVmEntry *)(page + 1);
        g_byte_array_append(entries, (const guint8 *)e,
                            page->count * sizeof(*e));
        head.count += page->count;
        if (page->count) {
            req.from_id = e[page->count - 1].client_id + 1;
        }
    } while (page->count == NUKSM_VMS_MAX_ENTRIES);
    /* Those listed: a VM that left while it paged is not among them. */
    head.total = head.count;
    g_byte_array_prepend(entries, (const guint8 *)&head, sizeof(head));
    return (NuksmMsgVms *)g_byte_array_free(g_steal_pointer(&entries), FALSE);
}

const NuksmVmEntry *ctl_vm_entry(const NuksmMsgVms *list, uint32_t id)
{
    const NuksmVmEntry *e = (const NuksmVmEntry *)(list + 1);

    for (uint32_t i = 0; i < list->count; i++) {
        if (e[i].client_id == id) {
            return &e[i];
        }
    }
    return NULL;
}

char *ctl_vm_label(const NuksmMsgVms *list, uint32_t id)
{
    const NuksmVmEntry *e = ctl_vm_entry(list, id);

    return e && e->vm_name[0] ? table_text(e->vm_name)
                              : g_strdup_printf("client %u", id);
}

char *table_text(const char *s)
{
    g_autofree char *valid = g_utf8_make_valid(s[0] ? s : "-", -1);
    GString *text = g_string_new(NULL);

    for (const char *p = valid; *p; p = g_utf8_next_char(p)) {
        gunichar c = g_utf8_get_char(p);

        if (g_unichar_iscntrl(c)) {
            g_string_append_c(text, '?');
        } else {
            g_string_append_unichar(text, c);
        }
    }
    return g_string_free(text, FALSE);
}

void ctl_table(GString *out, const char *const *header, int columns,
               GPtrArray *rows)
{
    g_autofree size_t *widths = g_new(size_t, columns);

    for (int c = 0; c < columns; c++) {
        widths[c] = g_utf8_strlen(header[c], -1);
        for (guint r = 0; r < rows->len; r++) {
            char **row = g_ptr_array_index(rows, r);

            widths[c] = MAX(widths[c], (size_t)g_utf8_strlen(row[c], -1));
        }
    }
    for (guint r = 0; r <= rows->len; r++) {
        const char *const *cells = r ? g_ptr_array_index(rows, r - 1)
                                     : (gpointer)header;

        for (int c = 0; c < columns; c++) {
            g_string_append(out, cells[c]);
            if (c < columns - 1) {
                g_string_append_printf(out, "%*s", (int)(widths[c] -
                                       g_utf8_strlen(cells[c], -1)) + 2, "");
            }
        }
        g_string_append_c(out, '\n');
    }
}

char *ctl_share_text(const NuksmMsgShare *share)
{
    if (share->reason == NUKSM_SHARE_OFF) {
        return g_strdup("-");
    }
    return share->pace > 1 ?
           g_strdup_printf("%.3g%%(%s,x%u)", share->max_cpu_ppm / 1e4,
                           nuksm_share_reason_name(share->reason),
                           share->pace) :
           g_strdup_printf("%.3g%%(%s)", share->max_cpu_ppm / 1e4,
                           nuksm_share_reason_name(share->reason));
}
