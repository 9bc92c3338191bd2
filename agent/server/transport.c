/*
 * nuksmd transport.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <glib-unix.h>

#include "agent.h"
#include "log.h"
#include "transport.h"

/*
 * A datagram the socket could not take yet, in its client's queue: one
 * malloc() each.  Not a GBytes in a GQueue: GLib before 2.76 takes those
 * from its slice allocator, which keeps what a flood of clients that do
 * not read queued in its own slabs once they are gone, where
 * malloc_trim() cannot give it back.
 */
typedef struct TxqEntry {
    struct TxqEntry *next;
    size_t size;
    uint8_t data[];
} TxqEntry;

/*
 * Bytes queued for the connections of one process whose sockets are
 * full, beyond which the one that would pass it counts as not reading
 * its messages: room for a burst of MERGE batches.  Each
 * datagram is counted with what queueing it costs besides its bytes (its
 * entry's header, malloc()'s own 8 bytes and its rounding up to 16), so
 * that many small messages hold no more than the limit says.
 */
#define CLIENT_TXQ_MAX (8u << 20)
#define TXQ_ENTRY_OVERHEAD (sizeof(TxqEntry) + 8 + 15)

static void *tx_buf;             /* NUKSM_MSG_MAX bytes */
static TransportDeadFn *dead_fn;

/*
 * Bytes queued for the VMs of each merge domain, by domain id: at most
 * its queue-max (quotas.h).  By id, not in the domain, since a VM that
 * left its domain may still hold queued bytes until it is freed.
 */
static uint64_t *queued_by_domain;

void transport_init(TransportDeadFn *on_dead)
{
    tx_buf = g_malloc(NUKSM_MSG_MAX);
    dead_fn = on_dead;
    /* 512 KiB of address space; only the ids ever used are touched. */
    queued_by_domain = g_new0(uint64_t, UINT16_MAX + 1);
}

void transport_destroy(void)
{
    g_clear_pointer(&tx_buf, g_free);
    g_clear_pointer(&queued_by_domain, g_free);
}

/*
 * Send one datagram without blocking, passing @pass_fd along if it is
 * not -1.  Returns 0 or an errno.  SOCK_SEQPACKET sends a datagram whole
 * or not at all.
 */
static int send_datagram(int fd, const void *buf, size_t size, int pass_fd)
{
    struct iovec iov = { .iov_base = (void *)buf, .iov_len = size };
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int))];
    } control;
    struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
    ssize_t n;

    if (pass_fd >= 0) {
        struct cmsghdr *cmsg;

        memset(&control, 0, sizeof(control));
        msg.msg_control = control.buf;
        msg.msg_controllen = sizeof(control.buf);
        cmsg = CMSG_FIRSTHDR(&msg);
        cmsg->cmsg_level = SOL_SOCKET;
        cmsg->cmsg_type = SCM_RIGHTS;
        cmsg->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cmsg), &pass_fd, sizeof(int));
    }
    do {
        n = sendmsg(fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    return n < 0 ? errno : 0;
}

static gboolean on_client_writable(int fd, GIOCondition cond,
                                   gpointer opaque);

/* Do @client's queued bytes count for its merge domain? */
static bool counts_for_domain(const NuksmClient *client)
{
    return client->hello_done && client->role == NUKSM_ROLE_VM;
}

/* What a datagram of @size bytes costs in a queue. */
static size_t queued_cost(size_t size)
{
    return size + TXQ_ENTRY_OVERHEAD;
}

/*
 * Why @cost more bytes may not be queued for @client, or NULL: its
 * process's connections hold CLIENT_TXQ_MAX, or a VM's merge domain its
 * queue-max, which one process, or a domain's many, cannot pass by
 * opening more connections.
 */
static char *queue_full(const NuksmClient *client, size_t cost)
{
    const NuksmClient *c = client;
    uint64_t process = 0, quota;

    do {
        process += c->txq.bytes;
        c = c->pid_next;
    } while (c != client);
    if (process + cost > CLIENT_TXQ_MAX) {
        return g_strdup_printf("it does not read its messages (%zu KiB "
                               "queued, %" PRIu64 " KiB over its process's "
                               "connections)", client->txq.bytes >> 10,
                               process >> 10);
    }
    if (!client->joined) {
        return NULL;
    }
    quota = client->queue_max;
    if (queued_by_domain[client->domain_id] + cost > quota) {
        return g_strdup_printf("its merge domain's VMs do not read their "
                               "messages (they hold its quota of %" PRIu64
                               " MiB, queue-max)", quota >> 20);
    }
    return NULL;
}

/* Account a change of @delta bytes in @client's queue. */
static void queue_account(NuksmClient *client, int64_t delta)
{
    client->txq.bytes += delta;
    if (counts_for_domain(client)) {
        queued_by_domain[client->domain_id] += delta;
    }
}

/*
 * Queue a datagram that the socket cannot take now; false, with why not
 * in *@why, if it may not be.
 */
static bool queue_datagram(NuksmClient *client, const void *buf,
                           size_t size, char **why)
{
    TxqEntry *entry;

    *why = queue_full(client, queued_cost(size));
    if (*why) {
        return false;
    }
    entry = g_malloc(sizeof(*entry) + size);
    entry->next = NULL;
    entry->size = size;
    memcpy(entry->data, buf, size);
    if (client->txq.tail) {
        client->txq.tail->next = entry;
    } else {
        client->txq.head = entry;
    }
    client->txq.tail = entry;
    queue_account(client, queued_cost(size));
    if (!client->txq.out_watch) {
        log_debug("%s: socket full, queueing messages", client->label);
        client->txq.out_watch = g_unix_fd_add(client->fd, G_IO_OUT,
                                          on_client_writable, client);
    }
    return true;
}

bool transport_send_fd(NuksmClient *client, NuksmMsgType type, uint32_t seq,
                       const void *payload, uint32_t len, int pass_fd)
{
    size_t size = nuksm_msg_pack(tx_buf, type, seq, payload, len);
    g_autofree char *why = NULL;
    int err = EAGAIN;

    if (client->dead) {
        return false;
    }
    /* Behind queued messages, this one must wait its turn. */
    if (!client->txq.head) {
        err = send_datagram(client->fd, tx_buf, size, pass_fd);
    }
    if (err == EAGAIN && pass_fd < 0 &&
        queue_datagram(client, tx_buf, size, &why)) {
        err = 0;
    }
    if (err) {
        log_warning("%s: cannot send %s: %s, disconnecting", client->label,
                    nuksm_msg_type_name(type),
                    why ? why : err == EAGAIN ? "it does not read its messages"
                                              : g_strerror(err));
        client->dead = true;
        return false;
    }
    log_debug("%s: sent %s seq %u", client->label,
              nuksm_msg_type_name(type), seq);
    return true;
}

bool transport_send(NuksmClient *client, NuksmMsgType type, uint32_t seq,
                    const void *payload, uint32_t len)
{
    return transport_send_fd(client, type, seq, payload, len, -1);
}

static void fill_error(NuksmMsgError *msg, NuksmErrorCode code,
                       const char *text)
{
    memset(msg, 0, sizeof(*msg));
    msg->code = code;
    nuksm_strfield_set(msg->message, sizeof(msg->message), text);
}

/*
 * The ERROR is lost if it has to queue behind other messages, since the
 * client is freed once the current event is handled.
 */
void transport_send_error(NuksmClient *client, uint32_t seq,
                          NuksmErrorCode code, const char *text)
{
    NuksmMsgError msg;

    fill_error(&msg, code, text);
    transport_send(client, NUKSM_MSG_ERROR, seq, &msg, sizeof(msg));
}

void transport_reject(NuksmClient *client, uint32_t seq, NuksmErrorCode code,
                      const char *fmt, ...)
{
    g_autofree char *text = NULL;
    va_list ap;

    va_start(ap, fmt);
    text = g_strdup_vprintf(fmt, ap);
    va_end(ap);

    log_warning("%s: %s, disconnecting", client->label, text);
    transport_send_error(client, seq, code, text);
    client->dead = true;
    client->agent->counters.protocol_errors++;
}

void transport_deny(NuksmClient *client, uint32_t seq, const char *text)
{
    transport_send_error(client, seq, NUKSM_ERR_DENIED, text);
}

void transport_denyf(NuksmClient *client, uint32_t seq, const char *fmt, ...)
{
    g_autofree char *text = NULL;
    va_list ap;

    va_start(ap, fmt);
    text = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    log_info("%s: denied: %s", client->label, text);
    transport_deny(client, seq, text);
}

/* Free the oldest queued datagram. */
static void pop_datagram(NuksmClient *client)
{
    TxqEntry *entry = client->txq.head;

    client->txq.head = entry->next;
    if (!client->txq.head) {
        client->txq.tail = NULL;
    }
    queue_account(client, -(int64_t)queued_cost(entry->size));
    g_free(entry);
}

void transport_clear_queue(NuksmClient *client)
{
    if (client->txq.out_watch) {
        g_source_remove(client->txq.out_watch);
        client->txq.out_watch = 0;
    }
    while (client->txq.head) {
        pop_datagram(client);
    }
}

/* Send queued datagrams until the socket is full or the queue empty. */
static gboolean on_client_writable(int fd, GIOCondition cond,
                                   gpointer opaque)
{
    NuksmClient *client = opaque;

    while (!client->dead && client->txq.head) {
        int err = send_datagram(fd, client->txq.head->data,
                                client->txq.head->size, -1);

        if (err == EAGAIN) {
            return G_SOURCE_CONTINUE;
        }
        if (err) {
            log_warning("%s: cannot send: %s, disconnecting", client->label,
                        g_strerror(err));
            client->dead = true;
            break;
        }
        pop_datagram(client);
    }
    if (!client->dead) {
        client->txq.out_watch = 0;
        return G_SOURCE_REMOVE;
    }
    /* Frees the client and removes this source; GLib allows that. */
    dead_fn(client->agent);
    return G_SOURCE_CONTINUE;
}

/*
 * Datagrams of a closing connection dropped at most: a bound on the loop
 * below should the peer still send (its socket's queue holds fewer,
 * net.unix.max_dgram_qlen).
 */
#define CLOSE_DRAIN_MAX 4096

void transport_close(int fd)
{
    char byte;

    /*
     * Shut for reading first: the peer's sends fail from now on (EPIPE),
     * so that none can slip in between the last recv() and close().
     */
    shutdown(fd, SHUT_RD);
    /* Each recv() takes one datagram whole, whatever it holds. */
    for (unsigned i = 0; i < CLOSE_DRAIN_MAX; i++) {
        if (recv(fd, &byte, sizeof(byte), MSG_DONTWAIT | MSG_TRUNC) <= 0) {
            break;
        }
    }
    close(fd);
}

/*
 * A connection refused as it came stays open for reading this long, so
 * that a peer that sends HELLO as it connects finds its socket open and
 * reads the ERROR: a send to a closed socket fails (EPIPE) before the
 * peer reads anything.  At most LINGER_MAX at once; past that they are
 * closed at once.
 */
#define LINGER_MS 1000
#define LINGER_MAX 64

static unsigned lingering;

static gboolean end_linger(gpointer opaque)
{
    transport_close(GPOINTER_TO_INT(opaque));
    lingering--;
    return G_SOURCE_REMOVE;
}

void transport_close_refused(int fd)
{
    if (lingering >= LINGER_MAX) {
        transport_close(fd);
        return;
    }
    /* The peer reads the ERROR, then end of file. */
    shutdown(fd, SHUT_WR);
    lingering++;
    g_timeout_add(LINGER_MS, end_linger, GINT_TO_POINTER(fd));
}

void transport_refuse(int fd, const char *text)
{
    NuksmMsgError msg;
    size_t size;

    fill_error(&msg, NUKSM_ERR_HANDSHAKE, text);
    size = nuksm_msg_pack(tx_buf, NUKSM_MSG_ERROR, 0, &msg, sizeof(msg));
    send_datagram(fd, tx_buf, size, -1);
}

