/*
 * libFuzzer target: nuksmd's message handling behind a valid handshake.
 *
 * Each input runs a real agent in this process (agent_start() with
 * --fake-numa 2, its state directory on tmpfs under /dev/shm) with
 * three clients connected to its socket: VMs A (priority 1) and B
 * (priority 10), both past HELLO in domain "default", and C, which has
 * not sent anything.  The input is a script of records, each an op byte
 * and, for the ops that send, a 16-bit little-endian length and that
 * many bytes (fewer if the input ends first):
 *
 *   op % 7 == 0, 1, 2  client A, B or C sends the bytes as one datagram
 *             3, 4     A or B disconnects and connects again (HELLO):
 *                      its process runs on, so its pages are parked
 *             5        the agent's timers fire now (re-placement pass,
 *                      one held back for reads, and moves, home nodes,
 *                      the look at orphans)
 *             6        the agent stops and starts again on its state
 *                      directory; A, B and C connect again
 *
 * An input ends early once it made MAX_CONNECTIONS connections (a start
 * makes three): repeated reconnections would only make it slow.
 *
 * After each record the main context runs until nothing is ready and
 * the clients read everything they were sent, which must pass
 * nuksm_msg_check().  A client the agent threw out connects again (A and
 * B with their HELLO) before it sends anything more.  At the end the
 * agent stops and its state directory is emptied: every input starts
 * from the same state, and LeakSanitizer sees what an input leaked.
 *
 * So that inputs get past the checks that depend on values the agent
 * chose, two fields of datagrams that pass nuksm_msg_check() are filled
 * in before they are sent: generation 0 in a slot reference becomes the
 * slot's current generation (its record's, for an orphan), and vCPU thread id 1 in TOPOLOGY becomes
 * this process's pid, a thread of the client's process.  Generations
 * come from GLib's random generator, seeded alike for every input.
 *
 * NUKSM_FUZZ_TRACE=1 prints what the clients send and receive, to check
 * what a seed (tests/fuzz/corpus/agent/) reaches; NUKSM_FUZZ_LOG=LEVEL
 * sets nuksmd's log level (default error).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <glib.h>
#include <glib/gstdio.h>

#include "agent.h"
#include "config.h"
#include "lifecycle.h"
#include "log.h"
#include "metrics.h"

#define NR_CLIENTS 3
enum { CLIENT_A, CLIENT_B, CLIENT_C };

enum {
    OP_SEND_A, OP_SEND_B, OP_SEND_C, OP_RECONNECT_A, OP_RECONNECT_B,
    OP_TIMERS, OP_RESTART, NR_OPS,
};

/* Connections an input may make, the start's included. */
#define MAX_CONNECTIONS 100

/* The TOPOLOGY vCPU thread id that stands for the client's own pid. */
#define OWN_TID 1

typedef struct Client {
    const char *name;
    int fd;                  /* -1: connect before sending */
    uint32_t priority;       /* VM role with HELLO; 0: no HELLO */
} Client;

static char *top_dir;        /* /dev/shm/nuksm-fuzz-XXXXXX */
static char *metrics_dir;    /* its metrics/, where nuksmd writes its */
                             /* metrics at each start (metrics.h) */
static NuksmdConfig cfg;
static NuksmAgent agent;
static Client clients[NR_CLIENTS] = {
    { .name = "a", .fd = -1, .priority = 1 },
    { .name = "b", .fd = -1, .priority = 10 },
    { .name = "c", .fd = -1, .priority = 0 },
};
static bool trace;
static void *rx_buf;
static unsigned connections;     /* made by the current input */

#define FAIL(...)                                                         \
    do {                                                                  \
        fprintf(stderr, "fuzz-agent: " __VA_ARGS__);                      \
        fputc('\n', stderr);                                              \
        abort();                                                          \
    } while (0)

/* Remove the store files and the lock nuksmd left in its state dir. */
static void empty_state_dir(void)
{
    g_autoptr(GDir) dir = g_dir_open(cfg.state_dir, 0, NULL);
    const char *name;

    while (dir && (name = g_dir_read_name(dir))) {
        g_autofree char *path = g_build_filename(cfg.state_dir, name, NULL);

        g_unlink(path);
    }
}

static void remove_top_dir(void)
{
    empty_state_dir();
    g_rmdir(cfg.state_dir);
    g_rmdir(metrics_dir);
    g_rmdir(top_dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    const char *level = getenv("NUKSM_FUZZ_LOG");
    NuksmdLogLevel log_level = NUKSMD_LOG_ERROR;
    g_autofree char *sock = NULL;
    g_autofree char *state = NULL;
    char *args[11];

    top_dir = g_strdup("/dev/shm/nuksm-fuzz-XXXXXX");
    if (!g_mkdtemp(top_dir)) {
        FAIL("cannot create %s: %s", top_dir, g_strerror(errno));
    }
    atexit(remove_top_dir);
    sock = g_build_filename(top_dir, "nuksmd.sock", NULL);
    state = g_build_filename(top_dir, "state", NULL);
    metrics_dir = g_build_filename(top_dir, "metrics", NULL);
    if (g_mkdir(metrics_dir, 0700) < 0) {
        FAIL("cannot create %s: %s", metrics_dir, g_strerror(errno));
    }

    /* nuksmd's own option parsing, so that the defaults are nuksmd's. */
    args[0] = "nuksmd";
    args[1] = "--socket";
    args[2] = sock;
    args[3] = "--state-dir";
    args[4] = state;
    args[5] = "--fake-numa";
    args[6] = "2";
    args[7] = "--metrics-dir";
    args[8] = metrics_dir;
    args[9] = NULL;
    if (!config_load(&cfg, 9, args)) {
        FAIL("bad nuksmd options");
    }
    if (level && !log_parse_level(level, &log_level)) {
        FAIL("NUKSM_FUZZ_LOG: unknown level '%s'", level);
    }
    log_set_level(log_level);
    trace = getenv("NUKSM_FUZZ_TRACE") != NULL;
    rx_buf = g_malloc(NUKSM_MSG_MAX);
    return 0;
}

/* Run the main context until no source is ready. */
static bool run_main_context(void)
{
    bool any = false;

    while (g_main_context_iteration(NULL, FALSE)) {
        any = true;
    }
    return any;
}

static void disconnect(Client *c)
{
    if (c->fd >= 0) {
        close(c->fd);
        c->fd = -1;
    }
}

/* Read what the agent sent @c; true if there was anything. */
static bool drain(Client *c)
{
    bool any = false;

    while (c->fd >= 0) {
        union {
            struct cmsghdr align;
            char buf[CMSG_SPACE(4 * sizeof(int))];
        } control;
        struct iovec iov = { .iov_base = rx_buf, .iov_len = NUKSM_MSG_MAX };
        struct msghdr msg = {
            .msg_iov = &iov, .msg_iovlen = 1,
            .msg_control = control.buf, .msg_controllen = sizeof(control),
        };
        ssize_t n = recvmsg(c->fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        const char *problem;
        NuksmMsgHeader hdr;

        if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
            break;
        }
        any = true;
        if (n <= 0) {
            if (trace) {
                fprintf(stderr, "trace: %s: disconnected\n", c->name);
            }
            disconnect(c);
            break;
        }
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm;
             cm = CMSG_NXTHDR(&msg, cm)) {
            if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
                int *fds = (int *)CMSG_DATA(cm);
                size_t nfds = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);

                for (size_t i = 0; i < nfds; i++) {
                    close(fds[i]);
                }
            }
        }
        if ((msg.msg_flags & MSG_TRUNC) ||
            (problem = nuksm_msg_check(rx_buf, n))) {
            FAIL("nuksmd sent %s a malformed message (%zd bytes): %s",
                 c->name, n, msg.msg_flags & MSG_TRUNC ? "truncated"
                                                       : problem);
        }
        memcpy(&hdr, rx_buf, sizeof(hdr));
        if (trace) {
            fprintf(stderr, "trace: %s: received %s seq %u, %u bytes\n",
                    c->name, nuksm_msg_type_name(hdr.type), hdr.seq,
                    hdr.len);
        }
    }
    return any;
}

/* Let the agent handle everything and the clients read every reply. */
static void settle(void)
{
    bool busy;

    do {
        busy = run_main_context();
        for (int i = 0; i < NR_CLIENTS; i++) {
            busy |= drain(&clients[i]);
        }
    } while (busy);
}

static void send_datagram(Client *c, const void *buf, size_t size)
{
    if (trace) {
        NuksmMsgHeader hdr = { 0 };

        memcpy(&hdr, buf, MIN(size, sizeof(hdr)));
        fprintf(stderr, "trace: %s: sends %zu bytes (%s, type %u)\n",
                c->name, size, nuksm_msg_check(buf, size) ? "malformed"
                                                          : "valid",
                hdr.type);
    }
    /* The agent may have hung up meanwhile: that is its right. */
    if (send(c->fd, buf, size, MSG_DONTWAIT | MSG_NOSIGNAL) < 0 &&
        errno != EPIPE && errno != ECONNRESET) {
        FAIL("%s cannot send: %s", c->name, g_strerror(errno));
    }
    settle();
}

/* Connect @c, with its HELLO if it has one, and read the agent's answer. */
static void connect_client(Client *c)
{
    struct sockaddr_un addr = { .sun_family = AF_UNIX };
    NuksmMsgHello hello = {
        .version = NUKSM_PROTO_VERSION,
        .role = NUKSM_ROLE_VM,
        .priority = c->priority,
    };
    uint8_t buf[sizeof(NuksmMsgHeader) + sizeof(hello)];
    size_t size;

    disconnect(c);
    connections++;
    c->fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    g_strlcpy(addr.sun_path, cfg.socket_path, sizeof(addr.sun_path));
    if (c->fd < 0 ||
        connect(c->fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
        FAIL("%s cannot connect to %s: %s", c->name, cfg.socket_path,
             g_strerror(errno));
    }
    settle();
    if (!c->priority) {
        return;
    }
    nuksm_strfield_set(hello.domain, sizeof(hello.domain), "default");
    nuksm_strfield_set(hello.vm_name, sizeof(hello.vm_name), c->name);
    nuksm_strfield_set(hello.object_id, sizeof(hello.object_id), "dedup0");
    size = nuksm_msg_pack(buf, NUKSM_MSG_HELLO, 1, &hello, sizeof(hello));
    send_datagram(c, buf, size);
    if (c->fd < 0) {
        FAIL("nuksmd refused the HELLO of %s", c->name);
    }
}

/* The slot's generation: from its record while it is an orphan. */
static uint32_t current_gen(uint32_t node, uint32_t slot)
{
    const Slot *s;
    SlotRecord rec;

    if (node >= agent.nr_nodes || slot >= agent.ledger.slots[node].top) {
        return 0;
    }
    s = slots_get(&agent.ledger.slots[node], slot);
    if (s->state == SLOT_ORPHAN &&
        store_get_record(&agent.store, node, slot, &rec)) {
        return rec.gen;
    }
    return s->gen;
}

static void fill_in_ref(NuksmSlotRef *r)
{
    if (!r->gen) {
        r->gen = current_gen(r->node, r->slot);
    }
}

/* The fields a valid datagram of this harness's may leave to it. */
static void fill_in(void *buf, size_t size)
{
    NuksmMsgHeader hdr;
    void *p = (char *)buf + sizeof(hdr);
    NuksmMsgBatch *batch = p;

    if (nuksm_msg_check(buf, size)) {
        return;
    }
    memcpy(&hdr, buf, sizeof(hdr));
    switch (hdr.type) {
    case NUKSM_MSG_UPLOAD:
    case NUKSM_MSG_MERGED:
    case NUKSM_MSG_UNMERGED:
    case NUKSM_MSG_RESTORE:
        for (uint32_t i = 0; i < batch->count; i++) {
            fill_in_ref(&((NuksmSlotRef *)(batch + 1))[i]);
        }
        break;
    case NUKSM_MSG_MOVED:
        for (uint32_t i = 0; i < batch->count; i++) {
            fill_in_ref(&((NuksmMove *)(batch + 1))[i].from);
            fill_in_ref(&((NuksmMove *)(batch + 1))[i].to);
        }
        break;
    case NUKSM_MSG_TOPOLOGY: {
        NuksmMsgTopology *t = p;

        for (uint32_t i = 0; i < t->nr_vcpus; i++) {
            if (t->vcpus[i].tid == OWN_TID) {
                t->vcpus[i].tid = getpid();
            }
        }
        break;
    }
    default:
        break;
    }
}

static void send_bytes(Client *c, const uint8_t *data, size_t size)
{
    /* Exactly @size bytes: an overread is an ASan report. */
    g_autofree uint8_t *buf = g_malloc(size ? size : 1);

    memcpy(buf, data, size);
    fill_in(buf, size);
    if (c->fd < 0) {
        connect_client(c);
    }
    send_datagram(c, buf, size);
}

/* Fire the agent's pending timers now rather than when they are due. */
static void fire_timers(void)
{
    guint ids[] = {
        agent.relocator.pass_timer, agent.relocator.tick_timer,
        agent.placement.home_timer, agent.orphans.timer,
        agent.uploads.timer, agent.conditions.probe_timer,
        agent.conditions.quota_timer, agent.placement.reads_pass_timer,
    };

    if (trace) {
        fprintf(stderr, "trace: timers fire\n");
    }
    for (size_t i = 0; i < G_N_ELEMENTS(ids); i++) {
        GSource *source = ids[i] ?
            g_main_context_find_source_by_id(NULL, ids[i]) : NULL;

        if (source) {
            g_source_set_ready_time(source, 0);
        }
    }
    settle();
}

static void start(void)
{
    /* The generations and hash seeds of nuksmd come from it. */
    g_random_set_seed(1);
    if (!agent_start(&agent, &cfg)) {
        FAIL("nuksmd did not start (NUKSM_FUZZ_LOG=error says why)");
    }
    for (int i = 0; i < NR_CLIENTS; i++) {
        connect_client(&clients[i]);
    }
}

static void stop(void)
{
    /* The metrics of whatever the input left: every family has rows. */
    g_string_free(metrics_text(&agent), TRUE);
    for (int i = 0; i < NR_CLIENTS; i++) {
        disconnect(&clients[i]);
    }
    agent_stop(&agent);
    settle();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t pos = 0;

    connections = 0;
    start();
    while (pos < size && connections < MAX_CONNECTIONS) {
        uint8_t op = data[pos++] % NR_OPS;
        size_t len;

        switch (op) {
        case OP_SEND_A:
        case OP_SEND_B:
        case OP_SEND_C:
            len = pos + 2 <= size ? data[pos] | data[pos + 1] << 8 : 0;
            pos = MIN(pos + 2, size);
            len = MIN(len, size - pos);
            send_bytes(&clients[op - OP_SEND_A], data + pos, len);
            pos += len;
            break;
        case OP_RECONNECT_A:
        case OP_RECONNECT_B:
            if (trace) {
                fprintf(stderr, "trace: %s reconnects\n",
                        clients[op - OP_RECONNECT_A].name);
            }
            connect_client(&clients[op - OP_RECONNECT_A]);
            break;
        case OP_TIMERS:
            fire_timers();
            break;
        case OP_RESTART:
            if (trace) {
                fprintf(stderr, "trace: nuksmd restarts\n");
            }
            stop();
            start();
            break;
        }
    }
    stop();
    empty_state_dir();      /* the next input starts afresh */
    return 0;
}
