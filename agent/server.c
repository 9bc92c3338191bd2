/*
 * nuksmd listening socket and per-client socket I/O.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <glib-unix.h>

#include "dispatch.h"
#include "log.h"
#include "server.h"

/* Seconds to stop accepting after running out of file descriptors. */
#define ACCEPT_RETRY_SECONDS 1

static void fill_addr(struct sockaddr_un *addr, const char *path)
{
    memset(addr, 0, sizeof(*addr));
    addr->sun_family = AF_UNIX;
    g_strlcpy(addr->sun_path, path, sizeof(addr->sun_path));
}

/*
 * Remove a socket file left behind by an agent that died, but never one
 * that somebody still listens on, nor anything that is not a socket.
 */
static bool remove_stale_socket(const char *path)
{
    struct sockaddr_un addr;
    struct stat st;
    int fd, rc, err;

    if (lstat(path, &st) < 0) {
        if (errno == ENOENT) {
            return true;
        }
        log_error("cannot stat %s: %s", path, g_strerror(errno));
        return false;
    }
    if (!S_ISSOCK(st.st_mode)) {
        log_error("%s exists and is not a socket, refusing to replace it",
                  path);
        return false;
    }

    /*
     * Non-blocking, so that a wedged agent with a full backlog cannot hang
     * us: EAGAIN also means somebody listens.
     */
    fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        log_error("cannot create socket: %s", g_strerror(errno));
        return false;
    }
    fill_addr(&addr, path);
    rc = connect(fd, (struct sockaddr *)&addr, sizeof(addr));
    err = errno;
    close(fd);
    if (rc == 0 || err == EAGAIN) {
        log_error("another nuksmd is already listening on %s", path);
        return false;
    }
    if (err == ENOENT) {
        return true;            /* gone since lstat() */
    }
    if (err != ECONNREFUSED) {
        log_error("cannot tell whether %s is in use: %s", path,
                  g_strerror(err));
        return false;
    }
    if (unlink(path) < 0 && errno != ENOENT) {
        log_error("cannot remove stale socket %s: %s", path,
                  g_strerror(errno));
        return false;
    }
    log_info("removed stale socket %s", path);
    return true;
}

static bool send_datagram(NuksmAgent *agent, int fd, NuksmMsgType type,
                          uint32_t seq, const void *payload, uint32_t len)
{
    size_t size = nuksm_msg_pack(agent->tx_buf, type, seq, payload, len);
    ssize_t n;

    do {
        n = send(fd, agent->tx_buf, size, MSG_DONTWAIT | MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    /* SOCK_SEQPACKET sends a datagram whole or not at all. */
    return n >= 0;
}

bool server_send(NuksmAgent *agent, NuksmClient *client, NuksmMsgType type,
                 uint32_t seq, const void *payload, uint32_t len)
{
    if (client->dead) {
        return false;
    }
    if (!send_datagram(agent, client->fd, type, seq, payload, len)) {
        log_warning("%s: cannot send %s: %s, disconnecting", client->label,
                    nuksm_msg_type_name(type), g_strerror(errno));
        client->dead = true;
        return false;
    }
    log_debug("%s: sent %s seq %u", client->label,
              nuksm_msg_type_name(type), seq);
    return true;
}

static void fill_error(NuksmMsgError *msg, NuksmErrorCode code,
                       const char *text)
{
    memset(msg, 0, sizeof(*msg));
    msg->code = code;
    nuksm_strfield_set(msg->message, sizeof(msg->message), text);
}

void server_reject(NuksmAgent *agent, NuksmClient *client, uint32_t seq,
                   NuksmErrorCode code, const char *fmt, ...)
{
    g_autofree char *text = NULL;
    NuksmMsgError msg;
    va_list ap;

    va_start(ap, fmt);
    text = g_strdup_vprintf(fmt, ap);
    va_end(ap);

    log_warning("%s: %s, disconnecting", client->label, text);
    fill_error(&msg, code, text);
    server_send(agent, client, NUKSM_MSG_ERROR, seq, &msg, sizeof(msg));
    client->dead = true;
}

/* Free the clients marked dead while handling the current event. */
static void reap_clients(NuksmAgent *agent)
{
    GList *l = agent->clients.list.head;

    while (l) {
        NuksmClient *client = l->data;

        l = l->next;
        if (client->dead) {
            clients_remove(&agent->clients, client);
        }
    }
}

static gboolean on_client_ready(int fd, GIOCondition cond, gpointer opaque)
{
    NuksmClient *client = opaque;
    NuksmAgent *agent = client->agent;
    ssize_t n;

    /*
     * MSG_TRUNC makes recv() return the full datagram size, so that an
     * oversized datagram is rejected rather than silently cut.
     */
    n = recv(fd, agent->rx_buf, NUKSM_MSG_MAX, MSG_TRUNC | MSG_DONTWAIT);
    if (n < 0) {
        if (errno == EAGAIN || errno == EINTR) {
            return G_SOURCE_CONTINUE;
        }
        log_warning("%s: receive failed: %s, disconnecting", client->label,
                    g_strerror(errno));
        client->dead = true;
    } else if (n == 0) {
        log_info("%s disconnected", client->label);
        client->dead = true;
    } else {
        dispatch_message(agent, client, agent->rx_buf, n);
    }

    /*
     * This may destroy the source being dispatched, which GLib allows;
     * the return value is then ignored.
     */
    reap_clients(agent);
    return G_SOURCE_CONTINUE;
}

static gboolean on_listen_ready(int fd, GIOCondition cond, gpointer opaque);

static gboolean resume_accept(gpointer opaque)
{
    NuksmAgent *agent = opaque;

    agent->accept_retry = 0;
    agent->listen_watch = g_unix_fd_add(agent->listen_fd, G_IO_IN,
                                        on_listen_ready, agent);
    return G_SOURCE_REMOVE;
}

/* Send ERROR to a connection we will not serve, then close it. */
static void refuse_connection(NuksmAgent *agent, int fd, const char *text)
{
    NuksmMsgError msg;

    fill_error(&msg, NUKSM_ERR_HANDSHAKE, text);
    send_datagram(agent, fd, NUKSM_MSG_ERROR, 0, &msg, sizeof(msg));
    close(fd);
}

static gboolean on_listen_ready(int fd, GIOCondition cond, gpointer opaque)
{
    NuksmAgent *agent = opaque;
    struct ucred cred = { 0 };
    socklen_t cred_len = sizeof(cred);
    NuksmClient *client;
    int cfd;

    cfd = accept4(fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (cfd < 0) {
        if (errno == EMFILE || errno == ENFILE ||
            errno == ENOBUFS || errno == ENOMEM) {
            /*
             * The connection stays queued and the fd stays readable:
             * back off instead of spinning on it.
             */
            log_warning("cannot accept connections: %s, retrying in %d s",
                        g_strerror(errno), ACCEPT_RETRY_SECONDS);
            agent->listen_watch = 0;
            agent->accept_retry = g_timeout_add_seconds(ACCEPT_RETRY_SECONDS,
                                                        resume_accept, agent);
            return G_SOURCE_REMOVE;
        }
        if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) {
            log_warning("accept failed: %s", g_strerror(errno));
        }
        return G_SOURCE_CONTINUE;
    }

    if (getsockopt(cfd, SOL_SOCKET, SO_PEERCRED, &cred, &cred_len) < 0) {
        log_warning("cannot get peer credentials: %s", g_strerror(errno));
    }
    if (clients_count(&agent->clients) >= CLIENTS_MAX) {
        g_autofree char *text =
            g_strdup_printf("too many clients (limit %u)", CLIENTS_MAX);

        log_warning("refusing connection from pid %ld: %s",
                    (long)cred.pid, text);
        refuse_connection(agent, cfd, text);
        return G_SOURCE_CONTINUE;
    }

    client = clients_add(&agent->clients, agent, cfd,
                         cred.pid, cred.uid, cred.gid);
    client->watch = g_unix_fd_add(cfd, G_IO_IN, on_client_ready, client);
    log_info("connection from pid %ld uid %u gid %u", (long)cred.pid,
             (unsigned)cred.uid, (unsigned)cred.gid);
    return G_SOURCE_CONTINUE;
}

bool server_start(NuksmAgent *agent, const char *path)
{
    g_autofree char *dir = g_path_get_dirname(path);
    struct sockaddr_un addr;
    struct stat st;
    mode_t old_umask;
    int fd, rc;

    if (g_mkdir_with_parents(dir, 0755) < 0) {
        log_error("cannot create directory %s: %s", dir, g_strerror(errno));
        return false;
    }
    if (!remove_stale_socket(path)) {
        return false;
    }

    fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        log_error("cannot create socket: %s", g_strerror(errno));
        return false;
    }
    fill_addr(&addr, path);

    /*
     * Create the file 0660 from the start: no window where others could
     * connect.  chmod() below still covers directories with default ACLs,
     * where the umask does not apply.
     */
    old_umask = umask(0117);
    rc = bind(fd, (struct sockaddr *)&addr, sizeof(addr));
    umask(old_umask);
    if (rc < 0) {
        log_error("cannot bind %s: %s", path, g_strerror(errno));
        close(fd);
        return false;
    }
    if (chmod(path, 0660) < 0 || stat(path, &st) < 0 ||
        listen(fd, SOMAXCONN) < 0) {
        log_error("cannot listen on %s: %s", path, g_strerror(errno));
        unlink(path);
        close(fd);
        return false;
    }

    agent->socket_path = g_strdup(path);
    agent->socket_dev = st.st_dev;
    agent->socket_ino = st.st_ino;
    agent->listen_fd = fd;
    agent->rx_buf = g_malloc(NUKSM_MSG_MAX);
    agent->tx_buf = g_malloc(NUKSM_MSG_MAX);
    agent->listen_watch = g_unix_fd_add(fd, G_IO_IN, on_listen_ready, agent);
    return true;
}

void server_stop(NuksmAgent *agent)
{
    struct stat st;

    while (agent->clients.list.head) {
        clients_remove(&agent->clients, agent->clients.list.head->data);
    }
    if (agent->listen_watch) {
        g_source_remove(agent->listen_watch);
        agent->listen_watch = 0;
    }
    if (agent->accept_retry) {
        g_source_remove(agent->accept_retry);
        agent->accept_retry = 0;
    }
    close(agent->listen_fd);
    agent->listen_fd = -1;

    /* Another agent may have replaced the file meanwhile: leave it be. */
    if (stat(agent->socket_path, &st) == 0 &&
        st.st_dev == agent->socket_dev && st.st_ino == agent->socket_ino) {
        unlink(agent->socket_path);
    }
    g_clear_pointer(&agent->socket_path, g_free);
    g_clear_pointer(&agent->rx_buf, g_free);
    g_clear_pointer(&agent->tx_buf, g_free);
}
