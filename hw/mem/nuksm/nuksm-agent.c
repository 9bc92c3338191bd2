/*
 * nuksm: connection to the host agent (nuksmd).
 *
 * Everything here runs in the main loop under the BQL.  The socket is
 * non-blocking: connecting to a unix socket either succeeds or fails at
 * once, and a message goes out through the outbox (nuksm-outbox.c),
 * which sends it at once from the thread that posts it or else keeps it
 * until the socket is writable, so neither a vCPU nor the main loop ever
 * waits for the agent.  What the agent sends goes to the unit
 * that acts on it: merge requests to the commit unit, HOME to
 * nuksm-numa.c, CHARGE to the scanner's control; the connection's own
 * changes to nuksm-state.c, which runs the scanner to match them and
 * reports limits.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include <poll.h>
#include <sys/un.h>
#include "qapi/error.h"
#include "qapi/qapi-events-nuksm.h"
#include "qemu/coroutine.h"
#include "qemu/error-report.h"
#include "qemu/main-loop.h"
#include "qemu/sockets.h"
#include "system/system.h"
#include "nuksm-agent.h"
#include "nuksm-commit.h"
#include "nuksm-control.h"
#include "nuksm-governor.h"
#include "nuksm-landing.h"
#include "nuksm-numa.h"
#include "nuksm-outbox.h"
#include "nuksm-report.h"
#include "nuksm-state.h"
#include "trace.h"

#define NUKSM_BACKOFF_MIN_MS   100
#define NUKSM_BACKOFF_MAX_MS   5000
/*
 * QMP handles one command at a time across all monitors, so a request
 * waiting on a hung agent holds up every monitor: keep the wait short.  A
 * healthy agent answers in microseconds.
 */
#define NUKSM_REQUEST_TIMEOUT_MS 1000

/* A request sent from a QMP coroutine, waiting for its reply. */
struct NuksmRequest {
    uint32_t seq;
    NuksmMsgType reply_type;
    void *reply;
    uint32_t reply_len;
    Coroutine *co;
    QEMUTimer *timeout;
    bool done;
    Error *err;
    QLIST_ENTRY(NuksmRequest) next;
};

static void nuksm_agent_schedule_retry(Nuksm *s);

static void nuksm_request_finish(NuksmRequest *req, Error *err)
{
    if (req->done) {
        error_free(err);
        return;
    }
    req->done = true;
    req->err = err;
    QLIST_REMOVE(req, next);
    timer_del(req->timeout);
    /* Resume later: the caller may still be using the object. */
    aio_co_schedule(qemu_get_aio_context(), req->co);
}

static void nuksm_agent_set_error(Nuksm *s, const char *reason)
{
    g_free(s->conn.last_error);
    s->conn.last_error = g_strdup(reason);
}

/* Forget what the agent decided for us (HELLO_ACK, COLOCATION). */
static void nuksm_agent_clear_assignment(NuksmAgentConn *c)
{
    g_clear_pointer(&c->merge_domain, g_free);
    c->domain_source = NUKSM_DOMAIN_SOURCE_SHARED;
    c->priority_limit = 0;
    c->colocation = (NuksmMsgColocation) {
        .plan_verdict = NUKSM_PLAN__MAX,
    };
    c->share = (NuksmMsgShare) { .reason = NUKSM_SHARE_OFF, .pace = 1 };
}

/*
 * Drop the connection.  @reason says why, for the event and for
 * query-nuksm; pending requests fail with it.
 */
static void nuksm_agent_disconnect(Nuksm *s, const char *reason)
{
    NuksmAgentConn *c = &s->conn;
    bool was_ready = c->ready;
    NuksmRequest *req, *tmp;

    if (c->fd < 0) {
        return;
    }
    trace_nuksm_agent_disconnect(s->id, reason);
    /* Before the descriptor can be reused: no thread sends to it then. */
    nuksm_outbox_disconnect(&s->outbox);
    qemu_set_fd_handler(c->fd, NULL, NULL, NULL);
    close(c->fd);
    c->fd = -1;
    c->ready = false;
    /* No answer will come for the pages that wait to land. */
    if (s->landing) {
        nuksm_landing_settle(s->landing, true);
    }
    /* The next agent says what holds then, and where it puts us. */
    c->conditions = 0;
    g_clear_pointer(&c->condition_reason, g_free);
    nuksm_agent_clear_assignment(c);
    nuksm_agent_set_error(s, reason);
    /* Without the agent, the VM's own budget alone holds. */
    nuksm_governor_apply(s);

    QLIST_FOREACH_SAFE(req, &c->requests, next, tmp) {
        Error *err = NULL;
        error_setg(&err, "nuksm '%s': lost the agent: %s", s->id, reason);
        nuksm_request_finish(req, err);
    }

    if (was_ready) {
        qapi_event_send_nuksm_agent_disconnected(s->id, s->agent_path, reason);
    }
    nuksm_update_activity(s);
    nuksm_agent_schedule_retry(s);
}

static bool nuksm_agent_send(Nuksm *s, NuksmMsgType type, uint32_t seq,
                             const void *payload, uint32_t len,
                             Error **errp)
{
    g_autofree uint8_t *buf = g_malloc(sizeof(NuksmMsgHeader) + len);
    size_t size = nuksm_msg_pack(buf, type, seq, payload, len);
    ssize_t n;

    do {
        n = send(s->conn.fd, buf, size, MSG_NOSIGNAL | MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    if (n != size) {
        error_setg_errno(errp, n < 0 ? errno : EMSGSIZE,
                         "nuksm '%s': cannot send to the agent", s->id);
        return false;
    }
    return true;
}

static void nuksm_agent_read(void *opaque);

/* Send what the outbox holds until the socket is full (main loop). */
static void nuksm_agent_flush(void *opaque)
{
    Nuksm *s = opaque;
    NuksmAgentConn *c = &s->conn;
    bool pending;
    const char *failed = nuksm_outbox_send(&s->outbox, &pending);

    if (failed) {
        nuksm_agent_disconnect(s, failed);
    } else if (c->fd >= 0) {
        qemu_set_fd_handler(c->fd, nuksm_agent_read,
                            pending ? nuksm_agent_flush : NULL, s);
    }
}

/*
 * Keep what the agent decided for us: the merge domain it put us in (our
 * domain property is only a request), where that came from, and the
 * operator's ceiling on our priority.  nuksm_msg_check() checked the
 * source and the priorities.
 */
static void nuksm_agent_handle_assignment(Nuksm *s,
                                          const NuksmMsgHelloAck *a)
{
    NuksmAgentConn *c = &s->conn;

    g_free(c->merge_domain);
    c->merge_domain = g_strdup(a->domain);
    c->domain_source = a->domain_source;
    c->priority_limit = a->priority_limit;
    trace_nuksm_agent_assigned(s->id, a->domain,
                               NuksmDomainSource_str(c->domain_source),
                               s->domain, a->priority, a->priority_limit);
    /*
     * Asking for a domain and getting another one changes which VMs this
     * one shares pages with: say so.  Asking for none is asking for
     * whatever the agent assigns.
     */
    if (!g_str_equal(s->domain, NUKSM_DEFAULT_DOMAIN) &&
        !g_str_equal(s->domain, a->domain)) {
        warn_report("nuksm '%s': the agent put this VM in merge domain "
                    "'%s' (%s), not in '%s' as property 'domain' asks",
                    s->id, a->domain,
                    NuksmDomainSource_str(c->domain_source), s->domain);
    }
}

/* @uffd_dev: /dev/userfaultfd from the agent, or -1; taken over. */
static void nuksm_agent_handle_hello_ack(Nuksm *s, const NuksmMsgHelloAck *a,
                                         int uffd_dev)
{
    NuksmAgentConn *c = &s->conn;

    if (a->version != NUKSM_PROTO_VERSION) {
        if (uffd_dev >= 0) {
            close(uffd_dev);
        }
        g_autofree char *reason = g_strdup_printf(
            "protocol version mismatch: QEMU speaks %u, nuksmd speaks %u",
            NUKSM_PROTO_VERSION, a->version);
        error_report("nuksm '%s': %s", s->id, reason);
        c->backoff_ms = NUKSM_BACKOFF_MAX_MS;
        nuksm_agent_disconnect(s, reason);
        return;
    }
    c->ready = true;
    c->epoch++;
    nuksm_outbox_connect(&s->outbox, c->fd, c->epoch);
    c->nr_nodes = a->nr_nodes;
    c->policy = a->policy;
    c->backoff_ms = NUKSM_BACKOFF_MIN_MS;
    g_clear_pointer(&c->last_error, g_free);
    trace_nuksm_agent_connected(s->id, a->client_id, a->nr_nodes,
                                a->agent_version);
    nuksm_agent_handle_assignment(s, a);
    qapi_event_send_nuksm_agent_connected(s->id, s->agent_path);
    /* Before the scanner runs for this connection and tries it. */
    nuksm_commit_set_uffd_device(s->commit, uffd_dev);
    nuksm_numa_send_topology(s);
    c->vm_limit_sent = NUKSM_VM_LIMIT__MAX;
    nuksm_limit_changed(s);
    nuksm_update_activity(s);
    /* The new agent learns our state now, not at our pace. */
    nuksm_report_soon(s);
}

static void nuksm_agent_handle_reply(Nuksm *s, const NuksmMsgHeader *hdr,
                                     const void *payload)
{
    NuksmRequest *req;

    QLIST_FOREACH(req, &s->conn.requests, next) {
        if (req->seq == hdr->seq) {
            break;
        }
    }
    if (!req) {
        /* The request timed out already; its late reply is harmless. */
        trace_nuksm_agent_stale_reply(s->id, hdr->seq);
        return;
    }

    if (hdr->type == NUKSM_MSG_ERROR) {
        const NuksmMsgError *e = payload;
        Error *err = NULL;
        error_setg(&err, "nuksm '%s': the agent refused: %s", s->id,
                   e->message);
        nuksm_request_finish(req, err);
    } else if (hdr->type != req->reply_type || hdr->len != req->reply_len) {
        nuksm_agent_disconnect(s, "agent answered with the wrong message "
                               "type");
    } else {
        memcpy(req->reply, payload, req->reply_len);
        nuksm_request_finish(req, NULL);
    }
}

/* Requests of the merge engine, for the commit unit (scanner thread). */
static bool nuksm_agent_handle_merge(Nuksm *s, const NuksmMsgHeader *hdr,
                                     const void *payload, int fd)
{
    if (hdr->type == NUKSM_MSG_STORE) {
        if (fd < 0 ||
            ((const NuksmMsgStore *)payload)->node >= s->conn.nr_nodes) {
            return false;
        }
    } else if (fd >= 0) {
        return false;
    }
    nuksm_commit_queue(s->commit, hdr->type, s->conn.epoch, payload,
                       hdr->len, fd);
    return true;
}

/* What holds back merging agent-wide: kept for query-nuksm. */
static void nuksm_agent_handle_condition(Nuksm *s,
                                         const NuksmMsgCondition *msg)
{
    NuksmAgentConn *c = &s->conn;

    if (msg->conditions != c->conditions) {
        trace_nuksm_agent_condition(s->id, msg->conditions, msg->reason);
    }
    /* What a condition that ended turned away is offered again. */
    if (c->conditions & ~msg->conditions) {
        nuksm_commit_reoffer(s->commit);
    }
    c->conditions = msg->conditions;
    g_free(c->condition_reason);
    c->condition_reason = msg->conditions ? g_strdup(msg->reason) : NULL;
    nuksm_limit_changed(s);
}

static void nuksm_agent_handle_message(Nuksm *s, const void *buf, size_t size,
                                       int fd)
{
    NuksmAgentConn *c = &s->conn;
    const char *bad = nuksm_msg_check(buf, size);
    const NuksmMsgHeader *hdr = buf;
    const void *payload = nuksm_msg_payload(buf);

    if (bad) {
        g_autofree char *reason =
            g_strdup_printf("agent sent a bad message: %s", bad);
        if (fd >= 0) {
            close(fd);
        }
        nuksm_agent_disconnect(s, reason);
        return;
    }
    trace_nuksm_agent_recv(s->id, hdr->type, hdr->seq, hdr->len);
    /*
     * While the VM is incoming, it offers only pages that land: their
     * answers are for the landing, in the loading thread's turn.
     */
    if (c->ready && fd < 0 && runstate_check(RUN_STATE_INMIGRATE) &&
        (hdr->type == NUKSM_MSG_MERGE || hdr->type == NUKSM_MSG_RETRY)) {
        if (hdr->type == NUKSM_MSG_MERGE) {
            nuksm_landing_merge(s->landing, c->epoch, payload);
        } else {
            nuksm_landing_retry(s->landing, payload);
        }
        return;
    }
    if (c->ready && (hdr->type == NUKSM_MSG_STORE ||
                     hdr->type == NUKSM_MSG_UPLOAD_REQ ||
                     hdr->type == NUKSM_MSG_MERGE ||
                     hdr->type == NUKSM_MSG_MOVE ||
                     hdr->type == NUKSM_MSG_REFUSED ||
                     hdr->type == NUKSM_MSG_RETRY ||
                     hdr->type == NUKSM_MSG_WANTED)) {
        if (!nuksm_agent_handle_merge(s, hdr, payload, fd)) {
            if (fd >= 0) {
                close(fd);
            }
            nuksm_agent_disconnect(s, "agent sent a malformed merge request");
        }
        return;
    }
    if (!c->ready && hdr->type == NUKSM_MSG_HELLO_ACK) {
        nuksm_agent_handle_hello_ack(s, payload, fd);
        return;
    }
    if (fd >= 0) {
        close(fd);
        nuksm_agent_disconnect(s, "agent sent an unexpected descriptor");
        return;
    }

    if (!c->ready) {
        if (hdr->type == NUKSM_MSG_ERROR) {
            const NuksmMsgError *e = payload;
            g_autofree char *reason =
                g_strdup_printf("agent refused the handshake: %s",
                                e->message);
            error_report("nuksm '%s': %s", s->id, reason);
            c->backoff_ms = NUKSM_BACKOFF_MAX_MS;
            nuksm_agent_disconnect(s, reason);
        } else {
            nuksm_agent_disconnect(s, "agent did not start with HELLO_ACK");
        }
        return;
    }

    if (hdr->type == NUKSM_MSG_HOME && hdr->seq == 0) {
        nuksm_numa_handle_home(s, payload);
        return;
    }
    if (hdr->type == NUKSM_MSG_POLICY && hdr->seq == 0) {
        const NuksmMsgPolicy *p = payload;
        trace_nuksm_agent_policy(s->id, NuksmPolicy_str(p->policy));
        if (c->policy != p->policy) {
            nuksm_commit_reoffer(s->commit);
        }
        c->policy = p->policy;
        return;
    }
    if (hdr->type == NUKSM_MSG_POLICY) {
        c->policy = ((const NuksmMsgPolicy *)payload)->policy;
    }
    if (hdr->type == NUKSM_MSG_CONDITION && hdr->seq == 0) {
        nuksm_agent_handle_condition(s, payload);
        return;
    }
    if (hdr->type == NUKSM_MSG_COLOCATION && hdr->seq == 0) {
        const NuksmMsgColocation *co = payload;

        trace_nuksm_agent_colocation(s->id, co->twin, co->twin_pm,
                                     co->plan_to, co->plan_verdict,
                                     co->scheme);
        c->colocation = *co;
        return;
    }
    if (hdr->type == NUKSM_MSG_SHARE && hdr->seq == 0) {
        const NuksmMsgShare *share = payload;
        bool released = c->share.reason == NUKSM_SHARE_HELD &&
                        share->reason != NUKSM_SHARE_HELD;
        bool signalled = c->share.reason != NUKSM_SHARE_SIGNALLED &&
                         share->reason == NUKSM_SHARE_SIGNALLED;
        bool quicker = share->pace < c->share.pace;

        trace_nuksm_agent_share(s->id, share->max_cpu_ppm,
                                nuksm_share_reason_name(share->reason),
                                share->pace);
        c->share = *share;
        nuksm_governor_apply(s);
        /* Memory is short again: look now, not after the held rest. */
        if (released) {
            nuksm_control_kick(s->control);
        } else if (signalled) {
            /* The agent saw signs of new duplicates: a pass soon. */
            nuksm_control_nudge(s->control);
        }
        /*
         * The next report was timed at the slower pace: the agent, which
         * judges the VM by it, would see what it does that much later.
         */
        if (quicker) {
            nuksm_report_soon(s);
        }
        return;
    }
    if (hdr->type == NUKSM_MSG_PRUNE && hdr->seq == 0) {
        const NuksmMsgPrune *prune = payload;

        trace_nuksm_agent_prune(s->id, prune->rate);
        nuksm_control_prune(s->control, prune->rate);
        return;
    }
    if (hdr->type == NUKSM_MSG_CHARGE && hdr->seq == 0) {
        nuksm_control_charge(s->control,
                             ((const NuksmMsgCharge *)payload)->cpu_ns);
        return;
    }
    nuksm_agent_handle_reply(s, hdr, payload);
}

/*
 * Receive one datagram and the descriptor it may carry (else *fd = -1).
 * Returns the datagram's full size, as recv(MSG_TRUNC).
 */
static ssize_t nuksm_agent_recv(int sock, void *buf, int *fd)
{
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int))];
    } control;
    struct iovec iov = { .iov_base = buf, .iov_len = NUKSM_MSG_MAX };
    struct msghdr msg = {
        .msg_iov = &iov,
        .msg_iovlen = 1,
        .msg_control = control.buf,
        .msg_controllen = sizeof(control.buf),
    };
    struct cmsghdr *cmsg;
    ssize_t n;

    *fd = -1;
    n = recvmsg(sock, &msg, MSG_DONTWAIT | MSG_TRUNC | MSG_CMSG_CLOEXEC);
    for (cmsg = CMSG_FIRSTHDR(&msg); n >= 0 && cmsg;
         cmsg = CMSG_NXTHDR(&msg, cmsg)) {
        if (cmsg->cmsg_level == SOL_SOCKET && cmsg->cmsg_type == SCM_RIGHTS &&
            cmsg->cmsg_len == CMSG_LEN(sizeof(int))) {
            memcpy(fd, CMSG_DATA(cmsg), sizeof(int));
        }
    }
    if (n >= 0 && (msg.msg_flags & MSG_CTRUNC)) {
        /* More than one descriptor: close the one we got, refuse it. */
        if (*fd >= 0) {
            close(*fd);
        }
        *fd = -1;
        errno = EPROTO;
        return -1;
    }
    return n;
}

static void nuksm_agent_read(void *opaque)
{
    Nuksm *s = opaque;
    g_autofree uint8_t *buf = g_malloc(NUKSM_MSG_MAX);
    ssize_t n;
    int fd;

    /* Drain what is queued; the handler may disconnect (fd becomes -1). */
    while (s->conn.fd >= 0) {
        n = nuksm_agent_recv(s->conn.fd, buf, &fd);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 && errno == EAGAIN) {
            return;
        }
        /*
         * A unix socket whose peer closed with our messages unread says
         * ECONNRESET instead of end of file: the same to us.
         */
        if (n == 0 || (n < 0 && errno == ECONNRESET)) {
            nuksm_agent_disconnect(s, "agent closed the connection");
            return;
        }
        if (n < 0) {
            g_autofree char *reason =
                g_strdup_printf("receive failed: %s", strerror(errno));
            nuksm_agent_disconnect(s, reason);
            return;
        }
        if (n > NUKSM_MSG_MAX) {
            if (fd >= 0) {
                close(fd);
            }
            nuksm_agent_disconnect(s, "agent sent an oversized message");
            return;
        }
        nuksm_agent_handle_message(s, buf, n, fd);
    }
}

bool nuksm_agent_pump(Nuksm *s, int timeout_ms)
{
    struct pollfd pfd = { .fd = s->conn.fd, .events = POLLIN };

    if (pfd.fd < 0) {
        return false;
    }
    nuksm_agent_flush(s);
    if (s->conn.fd < 0 || poll(&pfd, 1, timeout_ms) <= 0) {
        return false;
    }
    nuksm_agent_read(s);
    return true;
}

static void nuksm_agent_connect(Nuksm *s)
{
    NuksmAgentConn *c = &s->conn;
    struct sockaddr_un addr = { .sun_family = AF_UNIX };
    NuksmMsgHello hello = {
        .version = NUKSM_PROTO_VERSION,
        .role = NUKSM_ROLE_VM,
        .priority = s->priority,
    };
    Error *err = NULL;
    int fd;

    assert(c->fd < 0);
    trace_nuksm_agent_connect(s->id, s->agent_path);
    if (strlen(s->agent_path) >= sizeof(addr.sun_path)) {
        nuksm_agent_set_error(s, "agent socket path is too long");
        return;  /* complete() rejects this; nothing to retry */
    }
    strcpy(addr.sun_path, s->agent_path);

    fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
        g_autofree char *reason =
            g_strdup_printf("cannot connect to %s: %s", s->agent_path,
                            strerror(errno));
        if (fd >= 0) {
            close(fd);
        }
        nuksm_agent_set_error(s, reason);
        trace_nuksm_agent_connect_failed(s->id, reason);
        nuksm_agent_schedule_retry(s);
        return;
    }
    c->fd = fd;
    qemu_set_fd_handler(fd, nuksm_agent_read, NULL, s);

    nuksm_strfield_set(hello.domain, sizeof(hello.domain), s->domain);
    nuksm_strfield_set(hello.vm_name, sizeof(hello.vm_name),
                       qemu_get_vm_name());
    nuksm_strfield_set(hello.object_id, sizeof(hello.object_id), s->id);
    if (!nuksm_agent_send(s, NUKSM_MSG_HELLO, c->next_seq++, &hello,
                          sizeof(hello), &err)) {
        nuksm_agent_disconnect(s, error_get_pretty(err));
        error_free(err);
    }
}

static void nuksm_agent_retry_cb(void *opaque)
{
    Nuksm *s = opaque;

    if (s->conn.fd < 0) {
        nuksm_agent_connect(s);
    }
}

static void nuksm_agent_schedule_retry(Nuksm *s)
{
    NuksmAgentConn *c = &s->conn;

    if (!s->completed) {
        return;  /* the object is going away */
    }
    timer_mod(c->retry_timer,
              qemu_clock_get_ms(QEMU_CLOCK_REALTIME) + c->backoff_ms);
    c->backoff_ms = MIN(c->backoff_ms * 2, NUKSM_BACKOFF_MAX_MS);
}

void nuksm_agent_init(Nuksm *s)
{
    NuksmAgentConn *c = &s->conn;

    c->fd = -1;
    c->policy = -1;
    c->next_seq = 1;
    nuksm_agent_clear_assignment(c);
    c->backoff_ms = NUKSM_BACKOFF_MIN_MS;
    QLIST_INIT(&c->requests);
    nuksm_outbox_init(&s->outbox);
}

void nuksm_agent_start(Nuksm *s)
{
    s->conn.retry_timer = timer_new_ms(QEMU_CLOCK_REALTIME,
                                       nuksm_agent_retry_cb, s);
    nuksm_outbox_start(&s->outbox, nuksm_agent_flush, s);
    nuksm_agent_connect(s);
}

void nuksm_agent_cleanup(Nuksm *s)
{
    NuksmAgentConn *c = &s->conn;

    /* Requests hold a reference to the object, so none can be pending. */
    assert(QLIST_EMPTY(&c->requests));
    if (c->fd >= 0) {
        qemu_set_fd_handler(c->fd, NULL, NULL, NULL);
        close(c->fd);
        c->fd = -1;
    }
    if (c->retry_timer) {
        timer_free(c->retry_timer);
        c->retry_timer = NULL;
    }
    nuksm_outbox_cleanup(&s->outbox);
    g_clear_pointer(&c->last_error, g_free);
    g_clear_pointer(&c->condition_reason, g_free);
    nuksm_agent_clear_assignment(c);
}

void nuksm_agent_send_priority(Nuksm *s)
{
    NuksmMsgPriority msg = { .priority = s->priority };

    if (!s->conn.ready) {
        return;  /* the next HELLO carries it */
    }
    nuksm_outbox_queue(&s->outbox, s->conn.epoch, NUKSM_MSG_SET_PRIORITY,
                       s->conn.next_seq++, &msg, sizeof(msg));
}

static void nuksm_request_timeout_cb(void *opaque)
{
    NuksmRequest *req = opaque;
    Error *err = NULL;

    error_setg(&err, "nuksm: the agent did not answer within %d ms",
               NUKSM_REQUEST_TIMEOUT_MS);
    nuksm_request_finish(req, err);
}

int coroutine_fn nuksm_agent_request(Nuksm *s, NuksmMsgType type,
                                     const void *payload, uint32_t len,
                                     NuksmMsgType reply_type,
                                     void *reply, uint32_t reply_len,
                                     Error **errp)
{
    NuksmAgentConn *c = &s->conn;
    NuksmRequest req = {
        .reply_type = reply_type,
        .reply = reply,
        .reply_len = reply_len,
        .co = qemu_coroutine_self(),
    };

    if (!c->ready) {
        error_setg(errp, "nuksm '%s' is not connected to the agent at %s%s%s",
                   s->id, s->agent_path,
                   c->last_error ? ": " : "",
                   c->last_error ? c->last_error : "");
        return -ENOTCONN;
    }
    req.seq = c->next_seq++;
    if (c->next_seq == 0) {
        c->next_seq = 1;  /* seq 0 marks notifications */
    }
    /* Behind what the scanner queued: the socket may be full. */
    nuksm_outbox_queue(&s->outbox, c->epoch, type, req.seq, payload, len);

    object_ref(OBJECT(s));
    req.timeout = timer_new_ms(QEMU_CLOCK_REALTIME, nuksm_request_timeout_cb,
                               &req);
    timer_mod(req.timeout, qemu_clock_get_ms(QEMU_CLOCK_REALTIME) +
              NUKSM_REQUEST_TIMEOUT_MS);
    QLIST_INSERT_HEAD(&c->requests, &req, next);
    while (!req.done) {
        qemu_coroutine_yield();
    }
    timer_free(req.timeout);
    object_unref(OBJECT(s));

    if (req.err) {
        error_propagate(errp, req.err);
        return -EIO;
    }
    return 0;
}
