/*
 * nuksmd listening socket and per-client socket I/O.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <glib-unix.h>

#include "dispatch.h"
#include "effects.h"
#include "log.h"
#include "merge.h"
#include "server.h"
#include "throttle.h"
#include "transport.h"

/* Seconds to stop accepting after running out of file descriptors. */
#define ACCEPT_RETRY_SECONDS 1

/* Datagrams of a client handled per wakeup (on_client_ready()). */
#define RECV_BATCH 32

/*
 * CPU of the main loop between two clients' turns (waking up, polling,
 * timers) counted with the next VM's messages, up to this much: the
 * wakeup's cost, but not an hour of idle timers.
 */
#define LOOP_CHARGE_MAX_NS 1000000ull

/* Linux 6.5; older headers lack it. */
#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif

static void fill_addr(struct sockaddr_un *addr, const char *path)
{
    memset(addr, 0, sizeof(*addr));
    addr->sun_family = AF_UNIX;
    g_strlcpy(addr->sun_path, path, sizeof(addr->sun_path));
}

/*
 * A non-blocking seqpacket socket and *@addr for @path; -1 (logged) if
 * the socket cannot be made.
 */
static int new_socket(struct sockaddr_un *addr, const char *path)
{
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK,
                    0);

    if (fd < 0) {
        log_error("cannot create socket: %s", g_strerror(errno));
    }
    fill_addr(addr, path);
    return fd;
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
    fd = new_socket(&addr, path);
    if (fd < 0) {
        return false;
    }
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

static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

/* Does the datagram @buf of @size bytes ask for a reply (seq not 0)? */
static bool is_request(const void *buf, size_t size)
{
    NuksmMsgHeader hdr;

    if (size < sizeof(hdr)) {
        return false;
    }
    memcpy(&hdr, buf, sizeof(hdr));
    return hdr.seq != 0;
}

static gboolean on_client_ready(int fd, GIOCondition cond, gpointer opaque);

static gint compare_served(gconstpointer a, gconstpointer b)
{
    const NuksmClient *ca = *(NuksmClient *const *)a;
    const NuksmClient *cb = *(NuksmClient *const *)b;
    gint64 x = ca->cpu.served_at, y = cb->cpu.served_at;

    return (x > y) - (x < y);
}

/*
 * Read again the clients left unread whose time is up, and come back
 * for the next.  They are watched again in the order they were last
 * read, the longest ago first, which is the order the main loop serves
 * them in once their sockets are ready: so the first to spend what a
 * quota gives again is never the same one, and a VM that asks one thing
 * while others flood gets its turn.
 */
static gboolean on_resume(gpointer opaque)
{
    NuksmAgent *agent = opaque;
    gint64 now = g_get_monotonic_time();
    gint64 next = G_MAXINT64;
    g_autoptr(GPtrArray) due = g_ptr_array_new();

    for (GList *l = agent->clients.list.head; l; l = l->next) {
        NuksmClient *client = l->data;

        if (!client->cpu.paused_until) {
            continue;
        }
        if (client->cpu.paused_until > now) {
            next = MIN(next, client->cpu.paused_until);
            continue;
        }
        g_ptr_array_add(due, client);
    }
    g_ptr_array_sort(due, compare_served);
    for (guint i = 0; i < due->len; i++) {
        NuksmClient *client = g_ptr_array_index(due, i);

        client->cpu.throttled_ns += (now - client->cpu.paused_at) * 1000;
        client->cpu.paused_at = client->cpu.paused_until = 0;
        client->watch = g_unix_fd_add(client->fd, G_IO_IN, on_client_ready,
                                      client);
    }
    agent->server.resume_timer = 0;
    if (next != G_MAXINT64) {
        agent->server.resume_at = next;
        agent->server.resume_timer =
            g_timeout_add(MAX((next - now + 999) / 1000, 1), on_resume, agent);
    }
    return G_SOURCE_REMOVE;
}

/*
 * Leave the VMs of merge domain @domain, or every VM, unread as
 * @verdict says (merge/throttle.h).
 */
static void pause_vms(NuksmAgent *agent, ThrottleVerdict verdict,
                      uint16_t domain)
{
    gint64 now = g_get_monotonic_time(), until = verdict.until;

    for (GList *l = agent->clients.list.head; l; l = l->next) {
        NuksmClient *client = l->data;

        if (!clients_is_vm(client) || !client->joined || !client->watch ||
            (!verdict.every_vm && client->domain_id != domain)) {
            continue;
        }
        g_source_remove(client->watch);
        client->watch = 0;
        client->cpu.paused_at = now;
        client->cpu.paused_until = until;
    }
    if (agent->server.resume_timer && agent->server.resume_at <= until) {
        return;
    }
    if (agent->server.resume_timer) {
        g_source_remove(agent->server.resume_timer);
    }
    agent->server.resume_at = until;
    agent->server.resume_timer =
        g_timeout_add(MAX((until - now + 999) / 1000, 1), on_resume, agent);
}

/*
 * Receive and handle up to RECV_BATCH datagrams of @client, so that a
 * busy VM's messages cost one wakeup of the main loop per batch, not per
 * message, while the others wait for one batch at most.  A request ends
 * the batch: a process that has its reply and then writes to another
 * connection, then to this one, finds the agent reading them in that
 * order, as without batches.  A VM is charged for each merge message as
 * it is handled, receiving it included, and for the main loop's work
 * since the previous turn with the first; its domain for every message,
 * which may leave its VMs unread for a while (merge/throttle.h).
 */
static gboolean on_client_ready(int fd, GIOCondition cond, gpointer opaque)
{
    NuksmClient *client = opaque;
    NuksmAgent *agent = client->agent;
    uint64_t mark = thread_cpu_ns();
    uint64_t loop_ns = MIN(mark - agent->server.cpu_mark, LOOP_CHARGE_MAX_NS);
    ThrottleVerdict unread = { 0 };

    client->cpu.served_at = g_get_monotonic_time();

    for (unsigned i = 0; i < RECV_BATCH && !client->dead; i++) {
        /*
         * MSG_TRUNC makes recv() return the full datagram size, so that
         * an oversized datagram is rejected rather than silently cut.
         */
        ssize_t n = recv(fd, agent->server.rx_buf, NUKSM_MSG_MAX,
                         MSG_TRUNC | MSG_DONTWAIT);
        bool merge_message;
        uint64_t now, cost;

        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR) {
                break;
            }
            log_warning("%s: receive failed: %s, disconnecting",
                        client->label, g_strerror(errno));
            client->dead = true;
            break;
        }
        if (n == 0) {
            log_info("%s disconnected", client->label);
            client->dead = true;
            break;
        }
        merge_message = dispatch_message(agent, client,
                                         agent->server.rx_buf, n);
        /* All a message produced is done before the next is read. */
        effects_flush(agent);
        now = thread_cpu_ns();
        cost = now - mark;
        mark = now;
        if (merge_message) {
            cost += loop_ns;
            loop_ns = 0;
            dispatch_charge(client, cost);
        }
        if (clients_is_vm(client) && client->joined) {
            unread = throttle_charge(agent, client, cost);
        }
        if (unread.until || is_request(agent->server.rx_buf, n)) {
            break;
        }
    }
    agent->server.cpu_mark = thread_cpu_ns();
    if (unread.until) {
        pause_vms(agent, unread, client->domain_id);
    }

    /*
     * This may destroy the source being dispatched, which GLib allows;
     * the return value is then ignored.
     */
    effects_settle(agent);
    return G_SOURCE_CONTINUE;
}

static gboolean on_listen_ready(int fd, GIOCondition cond, gpointer opaque);

static gboolean on_hello_timeout(gpointer opaque)
{
    NuksmClient *client = opaque;

    client->hello_timer = 0;
    if (!client->hello_done && !client->dead) {
        transport_reject(client, 0, NUKSM_ERR_HANDSHAKE,
                         "no HELLO within %d s", HANDSHAKE_SECONDS);
        effects_settle(client->agent);
    }
    return G_SOURCE_REMOVE;
}

/*
 * Close @victim, a connection that has not sent HELLO, to make room for
 * a new one, for the reason @why.  Logged at most once a LOG_LIMIT_SECONDS:
 * a process that keeps connecting drops its own connections this way.
 */
static void drop_for_room(NuksmClient *victim, const char *why)
{
    static LogLimit drops;
    g_autofree char *text =
        g_strdup_printf("closed without HELLO to make room for a new "
                        "connection: %s", why);

    log_limited(&drops, LOG_LIMIT_SECONDS, NUKSMD_LOG_WARNING,
                "%s (uid %u): %s", victim->label, (unsigned)victim->uid,
                text);
    transport_send_error(victim, 0, NUKSM_ERR_HANDSHAKE, text);
    victim->dead = true;
}

/*
 * Make room for a connection of @cred: where its uid holds
 * CLIENT_HANDSHAKES_PER_UID connections that have not sent HELLO, or
 * the agent holds all the clients it serves, close one that has not
 * (clients_handshake_to_drop()).  Returns why the connection cannot be
 * served (the agent is full of clients past their HELLO), or NULL.
 */
static char *make_room(NuksmAgent *agent, const struct ucred *cred)
{
    unsigned limit = CLIENTS_MAX + (cred->uid == 0 ? CLIENTS_ROOT_RESERVE : 0);
    NuksmClient *victim;

    if (clients_count_handshakes(&agent->clients, cred->uid) >=
        CLIENT_HANDSHAKES_PER_UID) {
        g_autofree char *why =
            g_strdup_printf("uid %u holds the %u connections awaiting "
                            "their HELLO it may", (unsigned)cred->uid,
                            CLIENT_HANDSHAKES_PER_UID);

        drop_for_room(clients_handshake_to_drop(&agent->clients, false,
                                                cred->uid), why);
    }
    /* Dead clients still count until they are freed. */
    effects_settle(agent);
    if (clients_count(&agent->clients) < limit) {
        return NULL;
    }
    victim = clients_handshake_to_drop(&agent->clients, true, 0);
    if (!victim) {
        return g_strdup_printf("too many clients (limit %u)", CLIENTS_MAX);
    }
    drop_for_room(victim, "nuksmd serves as many clients as it may");
    effects_settle(agent);
    return NULL;
}

static gboolean resume_accept(gpointer opaque)
{
    NuksmAgent *agent = opaque;

    agent->server.accept_retry = 0;
    agent->server.listen_watch = g_unix_fd_add(agent->server.listen_fd,
                                               G_IO_IN, on_listen_ready,
                                               agent);
    return G_SOURCE_REMOVE;
}

/*
 * A pidfd of the process at the other end of @fd, whose pid is @pid, or
 * -1.  SO_PEERPIDFD names the very process that connected; pidfd_open()
 * of its pid, for older kernels, is right unless it exited meanwhile.
 */
static int peer_pidfd(int fd, pid_t pid)
{
    static bool warned;
    socklen_t len = sizeof(int);
    int pidfd;

    if (getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &len) == 0) {
        return pidfd;
    }
    if (pid <= 0) {
        return -1;
    }
    pidfd = syscall(SYS_pidfd_open, pid, 0);
    if (pidfd < 0 && errno != ESRCH && !warned) {
        warned = true;
        log_warning("cannot watch client processes (pidfd_open: %s): the "
                    "merged pages of a VM are dropped when it disconnects, "
                    "even if it still maps them", g_strerror(errno));
    }
    return pidfd;
}

/*
 * The process that connected exited.  Whatever still holds the
 * connection (a process it forked, or one it handed it to) is not the
 * process nuksmd knows as this client: what nuksmd does for a VM (read
 * its memory, pin its threads, move its memory) it does to that pid,
 * which may name another process by now.
 */
static gboolean on_process_exit(int fd, GIOCondition cond, gpointer opaque)
{
    NuksmClient *client = opaque;

    client->exit_watch = 0;
    if (!client->dead) {
        log_info("%s: its process exited, disconnecting", client->label);
        client->dead = true;
        effects_settle(client->agent);
    }
    return G_SOURCE_REMOVE;
}

static gboolean on_listen_ready(int fd, GIOCondition cond, gpointer opaque)
{
    NuksmAgent *agent = opaque;
    struct ucred cred = { 0 };
    socklen_t cred_len = sizeof(cred);
    g_autofree char *problem = NULL;
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
            agent->server.listen_watch = 0;
            agent->server.accept_retry =
                g_timeout_add_seconds(ACCEPT_RETRY_SECONDS, resume_accept,
                                      agent);
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
    problem = make_room(agent, &cred);
    if (problem) {
        static LogLimit refusals;

        log_limited(&refusals, LOG_LIMIT_SECONDS, NUKSMD_LOG_WARNING,
                    "refusing connection from pid %ld uid %u: %s",
                    (long)cred.pid, (unsigned)cred.uid, problem);
        transport_refuse(cfd, problem);
        transport_close_refused(cfd);
        agent->counters.refused_connections++;
        return G_SOURCE_CONTINUE;
    }

    client = clients_add(&agent->clients, agent, cfd, cred.pid,
                         peer_pidfd(cfd, cred.pid), cred.uid, cred.gid);
    client->watch = g_unix_fd_add(cfd, G_IO_IN, on_client_ready, client);
    if (client->pidfd >= 0) {
        client->exit_watch = g_unix_fd_add(client->pidfd, G_IO_IN,
                                           on_process_exit, client);
    }
    client->hello_timer = g_timeout_add_seconds(HANDSHAKE_SECONDS,
                                                on_hello_timeout, client);
    log_info("connection from pid %ld uid %u gid %u", (long)cred.pid,
             (unsigned)cred.uid, (unsigned)cred.gid);
    /*
     * A QEMU sends HELLO as it connects: take it now, so that the
     * connection is past its handshake before another can make room by
     * closing it.  May free @client.
     */
    on_client_ready(cfd, G_IO_IN, client);
    return G_SOURCE_CONTINUE;
}

/* The first descriptor systemd passes (sd_listen_fds(3)). */
#define LISTEN_FDS_START 3

/*
 * The listening socket systemd passed, socket activation's protocol
 * without libsystemd: LISTEN_PID is ours and LISTEN_FDS is 1.  Returns
 * its descriptor, -1 if none was passed, -2 if what was passed is not a
 * listening seqpacket socket (logged).
 */
static int activated_socket(void)
{
    const char *pid = g_getenv("LISTEN_PID");
    const char *fds = g_getenv("LISTEN_FDS");
    int type = 0, listening = 0, domain = 0;
    socklen_t len = sizeof(int);
    int fd = LISTEN_FDS_START;

    if (!pid || !fds || g_ascii_strtoll(pid, NULL, 10) != getpid()) {
        return -1;
    }
    /* Not for the processes we might start. */
    g_unsetenv("LISTEN_PID");
    g_unsetenv("LISTEN_FDS");
    g_unsetenv("LISTEN_FDNAMES");
    if (strcmp(fds, "1") != 0) {
        log_error("systemd passed %s sockets: nuksmd takes exactly one (a "
                  "ListenSequentialPacket= socket)", fds);
        return -2;
    }
    if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) < 0 ||
        getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) < 0 ||
        getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) < 0 ||
        domain != AF_UNIX || type != SOCK_SEQPACKET || !listening) {
        log_error("the socket systemd passed is not a listening unix "
                  "seqpacket socket (ListenSequentialPacket=)");
        return -2;
    }
    if (!g_unix_set_fd_nonblocking(fd, TRUE, NULL) ||
        fcntl(fd, F_SETFD, FD_CLOEXEC) < 0) {
        log_error("cannot set up the socket systemd passed: %s",
                  g_strerror(errno));
        return -2;
    }
    return fd;
}

/* Serve on @fd; @path names it in logs (and, if ours, is unlinked). */
static void server_listen(NuksmAgent *agent, int fd, const char *path)
{
    agent->server.path = g_strdup(path);
    agent->server.listen_fd = fd;
    agent->server.rx_buf = g_malloc(NUKSM_MSG_MAX);
    agent->server.cpu_mark = thread_cpu_ns();
    transport_init(effects_settle);
    agent->server.listen_watch = g_unix_fd_add(fd, G_IO_IN, on_listen_ready,
                                               agent);
}

bool server_start(NuksmAgent *agent, const char *path, gid_t group)
{
    g_autofree char *dir = g_path_get_dirname(path);
    struct sockaddr_un addr;
    struct stat st;
    mode_t old_umask;
    int fd, rc;

    fd = activated_socket();
    if (fd == -2) {
        return false;
    }
    if (fd >= 0) {
        struct sockaddr_un bound = { 0 };
        socklen_t len = sizeof(bound);

        /* systemd owns its file: the socket outlives us. */
        getsockname(fd, (struct sockaddr *)&bound, &len);
        server_listen(agent, fd, len > offsetof(struct sockaddr_un,
                                                sun_path) && bound.sun_path[0]
                                 ? bound.sun_path : "(socket from systemd)");
        agent->server.activated = true;
        return true;
    }

    if (g_mkdir_with_parents(dir, 0755) < 0) {
        log_error("cannot create directory %s: %s", dir, g_strerror(errno));
        return false;
    }
    if (!remove_stale_socket(path)) {
        return false;
    }

    fd = new_socket(&addr, path);
    if (fd < 0) {
        return false;
    }

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
    if (chmod(path, 0660) < 0 ||
        (group != (gid_t)-1 && chown(path, -1, group) < 0) ||
        stat(path, &st) < 0 || listen(fd, SOMAXCONN) < 0) {
        log_error("cannot listen on %s: %s", path, g_strerror(errno));
        unlink(path);
        close(fd);
        return false;
    }

    agent->server.dev = st.st_dev;
    agent->server.ino = st.st_ino;
    server_listen(agent, fd, path);
    return true;
}

void server_stop(NuksmAgent *agent)
{
    struct stat st;

    /*
     * Without merge_client_leave(): the VMs still map their merged pages,
     * which must stay in the store for the next agent.
     */
    while (agent->clients.list.head) {
        NuksmClient *client = agent->clients.list.head->data;

        merge_client_free(client);
        clients_remove(&agent->clients, client);
    }
    if (agent->server.listen_watch) {
        g_source_remove(agent->server.listen_watch);
        agent->server.listen_watch = 0;
    }
    if (agent->server.accept_retry) {
        g_source_remove(agent->server.accept_retry);
        agent->server.accept_retry = 0;
    }
    if (agent->server.resume_timer) {
        g_source_remove(agent->server.resume_timer);
        agent->server.resume_timer = 0;
    }
    close(agent->server.listen_fd);
    agent->server.listen_fd = -1;

    /*
     * Another agent may have replaced the file meanwhile: leave it be.
     * systemd's socket stays, for the next activation.
     */
    if (!agent->server.activated && stat(agent->server.path, &st) == 0 &&
        st.st_dev == agent->server.dev && st.st_ino == agent->server.ino) {
        unlink(agent->server.path);
    }
    g_clear_pointer(&agent->server.path, g_free);
    g_clear_pointer(&agent->server.rx_buf, g_free);
    transport_destroy();
}
