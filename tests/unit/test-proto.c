/*
 * Unit tests of the nuksm wire protocol: packing and validation.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <string.h>

#include <glib.h>

#include "nuksm-proto.h"

/* Datagram buffer, 8-byte aligned like a receiver's, with room to spare. */
static uint64_t buf_words[NUKSM_MSG_MAX / 8 + 2];
#define BUF ((void *)buf_words)

static NuksmMsgHeader *hdr_of(void *buf)
{
    return buf;
}

static void *payload_of(void *buf)
{
    return (char *)buf + sizeof(NuksmMsgHeader);
}

static void assert_valid(const void *buf, size_t size)
{
    const char *problem = nuksm_msg_check(buf, size);

    g_assert_null(problem);
}

static void assert_rejected(const void *buf, size_t size, const char *why)
{
    const char *problem = nuksm_msg_check(buf, size);

    g_assert_nonnull(problem);
    if (!strstr(problem, why)) {
        g_error("rejected for '%s', expected '%s'", problem, why);
    }
}

static NuksmMsgHello vm_hello(void)
{
    NuksmMsgHello h = {
        .version = NUKSM_PROTO_VERSION,
        .role = NUKSM_ROLE_VM,
        .priority = 100,
    };

    nuksm_strfield_set(h.domain, sizeof(h.domain), "default");
    nuksm_strfield_set(h.vm_name, sizeof(h.vm_name), "vm1");
    nuksm_strfield_set(h.object_id, sizeof(h.object_id), "dedup0");
    return h;
}

static NuksmMsgHelloAck hello_ack(void)
{
    NuksmMsgHelloAck a = {
        .version = NUKSM_PROTO_VERSION,
        .client_id = 7,
        .policy = NUKSM_POLICY_ID_FAIR,
        .nr_nodes = 2,
    };

    nuksm_strfield_set(a.agent_version, sizeof(a.agent_version), "0.1.0");
    return a;
}

static NuksmMsgInfo info_msg(void)
{
    NuksmMsgInfo i = {
        .policy = NUKSM_POLICY_ID_LOCAL,
        .vms = 3,
        .vms_reading = 3,
        .nr_nodes = 4,
        .pages_shared = 10,
        .pages_sharing = 30,
        .store_pages = { 1, 2, 3, 4 },
    };

    nuksm_strfield_set(i.agent_version, sizeof(i.agent_version), "0.1.0");
    return i;
}

/* Pack a VMS message with @count entries and the given @total. */
static size_t pack_vms(void *buf, uint32_t count, uint32_t total)
{
    size_t len = sizeof(NuksmMsgVms) + count * sizeof(NuksmVmEntry);
    g_autofree NuksmMsgVms *v = g_malloc0(len);
    NuksmVmEntry *e = (NuksmVmEntry *)(v + 1);

    v->count = count;
    v->total = total;
    for (uint32_t n = 0; n < count; n++) {
        e[n].client_id = n + 1;
        e[n].pid = 1000 + n;
        e[n].priority = 1;
        nuksm_strfield_set(e[n].domain, sizeof(e[n].domain), "default");
        nuksm_strfield_set(e[n].vm_name, sizeof(e[n].vm_name), "vm");
        nuksm_strfield_set(e[n].object_id, sizeof(e[n].object_id), "obj");
        e[n].merged_pages = n * 100;
        e[n].plan_verdict = NUKSM_PLAN__MAX;
        e[n].share = (NuksmMsgShare) { .reason = NUKSM_SHARE_OFF,
                                       .pace = 1 };
    }
    return nuksm_msg_pack(buf, NUKSM_MSG_VMS, 42, v, len);
}

static NuksmVmEntry *entries_of_vms(void *buf)
{
    return (NuksmVmEntry *)((NuksmMsgVms *)payload_of(buf) + 1);
}

/*
 * Pack a batch message of @count entries: NuksmCandidate for CANDIDATES,
 * else NuksmSlotRef with a status valid for @type, and @count pages of
 * content for UPLOAD.
 */
static size_t pack_batch(void *buf, NuksmMsgType type, uint32_t seq,
                         uint32_t count)
{
    bool candidates = type == NUKSM_MSG_CANDIDATES;
    bool moves = type == NUKSM_MSG_MOVE || type == NUKSM_MSG_MOVED;
    size_t entry = candidates ? sizeof(NuksmCandidate) :
                   moves ? sizeof(NuksmMove) : sizeof(NuksmSlotRef);
    size_t item = type == NUKSM_MSG_UPLOAD ? NUKSM_PAGE_SIZE : 0;
    size_t len = sizeof(NuksmMsgBatch) + count * (entry + item);
    g_autofree NuksmMsgBatch *b = g_malloc0(len);
    NuksmCandidate *c = (NuksmCandidate *)(b + 1);
    NuksmSlotRef *r = (NuksmSlotRef *)(b + 1);
    NuksmMove *m = (NuksmMove *)(b + 1);
    uint8_t *pages = (uint8_t *)(b + 1) + count * entry;

    b->count = count;
    for (uint32_t n = 0; n < count; n++) {
        if (candidates) {
            c[n].page = 0x1000 + n;
            c[n].digest = 0xfeedface00000000ull | n;
            continue;
        }
        if (moves) {
            m[n].from = (NuksmSlotRef) { .page = 0x3000 + n, .node = 1,
                                         .slot = 10 + n, .gen = 3 };
            m[n].to = (NuksmSlotRef) { .page = 0x3000 + n, .node = 0,
                                       .slot = 20 + n, .gen = 4 };
            if (type == NUKSM_MSG_MOVED) {
                m[n].to.status = NUKSM_STATUS_MERGED + n % 4;
            }
            continue;
        }
        r[n].page = 0x2000 + n;
        r[n].node = n % NUKSM_MAX_NODES;
        r[n].slot = 100 + n;
        r[n].gen = 7 + n;
        if (type == NUKSM_MSG_MERGED) {
            r[n].status = NUKSM_STATUS_MERGED + n % 4;
        } else if (type == NUKSM_MSG_UNMERGED) {
            r[n].status = NUKSM_STATUS_COW + n % 3;
        }
    }
    memset(pages, 0xa5, count * item);
    return nuksm_msg_pack(buf, type, seq, b, len);
}

/* Pack a READS of @count regions, 7, 8, ..., read 0, 1, ... samples ago. */
static size_t pack_reads(void *buf, uint32_t seq, uint32_t count)
{
    size_t len = sizeof(NuksmMsgReads) + count * sizeof(NuksmReadRegion);
    g_autofree NuksmMsgReads *m = g_malloc0(len);
    NuksmReadRegion *r = (NuksmReadRegion *)(m + 1);

    m->count = count;
    m->window_ms = 1000;
    m->reads_local = 30;
    m->reads_remote = 12;
    for (uint32_t n = 0; n < count; n++) {
        r[n].region = 7 + n;
        r[n].idle = n % (NUKSM_IDLE_NEVER + 1);
    }
    return nuksm_msg_pack(buf, NUKSM_MSG_READS, seq, m, len);
}

/* Pack a SIMILARITY of two VMs, 3 and 9, and their one pair. */
static size_t pack_similarity(void *buf, uint32_t seq)
{
    struct {
        NuksmMsgSimilarity m;
        NuksmSimilarityVm vms[2];
        NuksmSimilarityPair pair;
    } s = {
        .m = { .nr_vms = 2, .total_vms = 2, .nr_pairs = 1, .total_pairs = 1 },
        .vms = { { .client_id = 3, .sampled = 100, .pages = 100 },
                 { .client_id = 9, .shift = 1, .sampled = 50, .pages = 100 } },
        .pair = { .a = 3, .b = 9, .similarity_pm = 400, .shift = 1,
                  .sampled_a = 50, .alike_a = 20, .sampled_b = 50,
                  .alike_b = 20, .merged_a = 40, .merged_b = 41 },
    };

    return nuksm_msg_pack(buf, NUKSM_MSG_SIMILARITY, seq, &s, sizeof(s));
}

/* Pack a PLAN of two moves of group 0: one planned, one refused. */
static size_t pack_plan(void *buf, uint32_t seq)
{
    struct {
        NuksmMsgPlan m;
        NuksmPlanMove moves[2];
    } p = {
        .m = { .count = 2, .total = 2, .vms = 3, .groups = 1,
               .threshold_pm = 400, .vcpus_per_cpu = 1,
               .min_gain_pages = 4096 },
        .moves = {
            { .client_id = 4, .from = 1, .to = 0, .vcpus = 2,
              .pages = 32768, .gain_pages = 8192, .remote_pages = 8000 },
            { .client_id = 5, .from = 1, .to = 0,
              .verdict = NUKSM_PLAN_PINNED },
        },
    };

    return nuksm_msg_pack(buf, NUKSM_MSG_PLAN, seq, &p, sizeof(p));
}

/* Pack a SKETCH of three fingerprints, 5, 9 and 12, 1, 2 and 1 pages. */
static size_t pack_sketch(void *buf, uint32_t seq)
{
    struct {
        NuksmMsgSketch m;
        uint64_t entries[3];
    } s = {
        .m = { .client_id = 3, .shift = 2, .pages = 16, .count = 3 },
        .entries = { 5ull << 24 | 1, 9ull << 24 | 2, 12ull << 24 | 1 },
    };

    return nuksm_msg_pack(buf, NUKSM_MSG_SKETCH, seq, &s, sizeof(s));
}

static NuksmPlanMove *plan_moves_of(void *buf)
{
    return (NuksmPlanMove *)((NuksmMsgPlan *)payload_of(buf) + 1);
}

static NuksmMsgSimilarity *similarity_of(void *buf)
{
    return payload_of(buf);
}

static NuksmMsgReads *reads_of(void *buf)
{
    return payload_of(buf);
}

static NuksmReadRegion *regions_of(void *buf)
{
    return (NuksmReadRegion *)(reads_of(buf) + 1);
}

/* Two guest nodes, the second bound to host node 1, three vCPUs. */
static NuksmMsgTopology *topology_msg(void)
{
    NuksmMsgTopology *t = g_new0(NuksmMsgTopology, 1);

    t->nr_gnodes = 2;
    t->gnodes[1].host_nodes = 1u << 1;
    t->gnodes[1].policy = NUKSM_MEMPOLICY_BIND;
    t->nr_vcpus = 3;
    for (uint32_t v = 0; v < 3; v++) {
        t->vcpus[v].tid = 1000 + v;
        t->vcpus[v].gnode = v % 2;
    }
    t->nr_ranges = 2;
    t->ranges[0] = (NuksmPageRange) { .first = 0, .count = 256 };
    t->ranges[1] = (NuksmPageRange) { .first = 256, .count = 256,
                                      .gnode = 1 };
    return t;
}

static NuksmMsgHome home_msg(void)
{
    NuksmMsgHome h = { .nr_gnodes = 2 };

    h.home[1] = NUKSM_MAX_NODES - 1;
    h.source[0] = NUKSM_HOME_DEFAULT;
    h.source[1] = NUKSM_HOME__MAX - 1;
    return h;
}

static NuksmMsgBatch *batch_of(void *buf)
{
    return payload_of(buf);
}

static NuksmSlotRef *refs_of(void *buf)
{
    return (NuksmSlotRef *)(batch_of(buf) + 1);
}

/* Pack @type with a valid payload of its kind; returns the size. */
static size_t pack_valid(void *buf, NuksmMsgType type, uint32_t seq)
{
    switch (type) {
    case NUKSM_MSG_HELLO: {
        NuksmMsgHello h = vm_hello();
        return nuksm_msg_pack(buf, type, seq, &h, sizeof(h));
    }
    case NUKSM_MSG_HELLO_ACK: {
        NuksmMsgHelloAck a = hello_ack();
        return nuksm_msg_pack(buf, type, seq, &a, sizeof(a));
    }
    case NUKSM_MSG_ERROR: {
        NuksmMsgError e = { .code = NUKSM_ERR_BAD_MESSAGE };
        nuksm_strfield_set(e.message, sizeof(e.message), "oops");
        return nuksm_msg_pack(buf, type, seq, &e, sizeof(e));
    }
    case NUKSM_MSG_SET_POLICY:
    case NUKSM_MSG_POLICY: {
        NuksmMsgPolicy p = { .policy = NUKSM_POLICY_ID_ADAPTIVE };
        return nuksm_msg_pack(buf, type, seq, &p, sizeof(p));
    }
    case NUKSM_MSG_SET_PRIORITY: {
        NuksmMsgPriority p = { .priority = NUKSM_PRIORITY_MAX };
        return nuksm_msg_pack(buf, type, seq, &p, sizeof(p));
    }
    case NUKSM_MSG_GET_POLICY:
    case NUKSM_MSG_GET_INFO:
    case NUKSM_MSG_GET_SIMILARITY:
    case NUKSM_MSG_GET_PLAN:
        return nuksm_msg_pack(buf, type, seq, NULL, 0);
    case NUKSM_MSG_LIST_VMS: {
        NuksmMsgListVms l = { .from_id = 77 };
        return nuksm_msg_pack(buf, type, seq, &l, sizeof(l));
    }
    case NUKSM_MSG_SIMILARITY:
        return pack_similarity(buf, seq);
    case NUKSM_MSG_PLAN:
        return pack_plan(buf, seq);
    case NUKSM_MSG_GET_SKETCH: {
        NuksmMsgGetSketch g = { .client_id = 3 };
        return nuksm_msg_pack(buf, type, seq, &g, sizeof(g));
    }
    case NUKSM_MSG_SKETCH:
        return pack_sketch(buf, seq);
    case NUKSM_MSG_COLOCATION: {
        NuksmMsgColocation c = { .twin_pm = 750, .plan_to = 1,
                                 .plan_verdict = NUKSM_PLAN_PLANNED };
        nuksm_strfield_set(c.twin, sizeof(c.twin), "web2");
        return nuksm_msg_pack(buf, type, seq, &c, sizeof(c));
    }
    case NUKSM_MSG_VM_STATS: {
        NuksmMsgVmStats v = { .eligible_pages = 32768, .pages_scanned = 9,
                              .full_scans = 2, .max_cpu_pm = 200 };
        return nuksm_msg_pack(buf, type, seq, &v, sizeof(v));
    }
    case NUKSM_MSG_SHARE: {
        NuksmMsgShare sh = { .max_cpu_ppm = 50000,
                             .reason = NUKSM_SHARE_YIELDING, .pace = 1,
                             .vms = 3, .budget_ppm = 200000,
                             .yield = 4000 };
        return nuksm_msg_pack(buf, type, seq, &sh, sizeof(sh));
    }
    case NUKSM_MSG_SET_RUN: {
        NuksmMsgSetRun r = { .run = NUKSM_RUN_PRESSURE };
        return nuksm_msg_pack(buf, type, seq, &r, sizeof(r));
    }
    case NUKSM_MSG_PRUNE: {
        NuksmMsgPrune p = { .rate = 65536, .vms = 2 };
        nuksm_strfield_set(p.domain, sizeof(p.domain), "blue");
        return nuksm_msg_pack(buf, type, seq, &p, sizeof(p));
    }
    case NUKSM_MSG_APPLY_MOVE: {
        NuksmMsgApplyMove m = { .client_id = 3, .to = 1 };
        return nuksm_msg_pack(buf, type, seq, &m, sizeof(m));
    }
    case NUKSM_MSG_APPLIED: {
        NuksmMsgApplied a = { .client_id = 3, .to = 1,
                              .how = NUKSM_APPLY_AGENT, .threads = 4,
                              .mems = 2, .memory_moved = 1,
                              .cpus = { 0xf0 } };
        return nuksm_msg_pack(buf, type, seq, &a, sizeof(a));
    }
    case NUKSM_MSG_INFO: {
        NuksmMsgInfo i = info_msg();
        return nuksm_msg_pack(buf, type, seq, &i, sizeof(i));
    }
    case NUKSM_MSG_VMS: {
        size_t size = pack_vms(buf, 3, 5);
        hdr_of(buf)->seq = seq;
        return size;
    }
    case NUKSM_MSG_STORE: {
        NuksmMsgStore st = { .node = 1, .size = 64ull << 30 };
        return nuksm_msg_pack(buf, type, seq, &st, sizeof(st));
    }
    case NUKSM_MSG_CANDIDATES:
    case NUKSM_MSG_UPLOAD_REQ:
    case NUKSM_MSG_MERGE:
    case NUKSM_MSG_MERGED:
    case NUKSM_MSG_UNMERGED:
    case NUKSM_MSG_RESTORE:
    case NUKSM_MSG_REFUSED:
    case NUKSM_MSG_RETRY:
        return pack_batch(buf, type, seq, 5);
    case NUKSM_MSG_UPLOAD:
        return pack_batch(buf, type, seq, 2);
    case NUKSM_MSG_MOVE:
    case NUKSM_MSG_MOVED:
        return pack_batch(buf, type, seq, 5);
    case NUKSM_MSG_TOPOLOGY: {
        g_autofree NuksmMsgTopology *t = topology_msg();
        return nuksm_msg_pack(buf, type, seq, t, sizeof(*t));
    }
    case NUKSM_MSG_HOME: {
        NuksmMsgHome h = home_msg();
        return nuksm_msg_pack(buf, type, seq, &h, sizeof(h));
    }
    case NUKSM_MSG_VM_LIMIT: {
        NuksmMsgVmLimit l = { .limit = NUKSM_VM_LIMIT_USERFAULTFD };
        nuksm_strfield_set(l.reason, sizeof(l.reason), "no userfaultfd");
        return nuksm_msg_pack(buf, type, seq, &l, sizeof(l));
    }
    case NUKSM_MSG_CONDITION: {
        NuksmMsgCondition c = { .conditions = NUKSM_COND_ALL };
        nuksm_strfield_set(c.reason, sizeof(c.reason), "store full");
        return nuksm_msg_pack(buf, type, seq, &c, sizeof(c));
    }
    case NUKSM_MSG_CHARGE: {
        NuksmMsgCharge c = { .cpu_ns = NUKSM_CHARGE_MIN_NS };
        return nuksm_msg_pack(buf, type, seq, &c, sizeof(c));
    }
    case NUKSM_MSG_READS:
        return pack_reads(buf, seq, 5);
    case NUKSM_MSG_WANTED: {
        NuksmMsgWanted w = { .fragments = { 0b110, [1023] = 1ull << 63 } };
        return nuksm_msg_pack(buf, type, seq, &w, sizeof(w));
    }
    default:
        g_assert_not_reached();
    }
}

static void test_roundtrip(gconstpointer data)
{
    NuksmMsgType type = GPOINTER_TO_UINT(data);
    static uint64_t copy_words[NUKSM_MSG_MAX / 8];
    size_t size = pack_valid(BUF, type, 0xdeadbeef);
    NuksmMsgHeader hdr;

    /* What arrives is a byte copy of what was sent. */
    memcpy(copy_words, BUF, size);
    assert_valid(copy_words, size);

    memcpy(&hdr, copy_words, sizeof(hdr));
    g_assert_cmpuint(hdr.magic, ==, NUKSM_PROTO_MAGIC);
    g_assert_cmpuint(hdr.type, ==, type);
    g_assert_cmpuint(hdr.flags, ==, 0);
    g_assert_cmpuint(hdr.seq, ==, 0xdeadbeef);
    g_assert_cmpuint(hdr.len, ==, size - sizeof(hdr));
    g_assert_true(nuksm_msg_payload(copy_words) ==
                  (char *)copy_words + sizeof(hdr));
    g_assert_cmpmem(nuksm_msg_payload(copy_words), hdr.len,
                    payload_of(BUF), hdr.len);
}

static void test_payload_values(void)
{
    NuksmMsgHello h = vm_hello();
    const NuksmMsgHello *rh;
    const NuksmMsgInfo *ri;
    const NuksmMsgVms *rv;
    const NuksmVmEntry *re;
    size_t size;

    size = nuksm_msg_pack(BUF, NUKSM_MSG_HELLO, 1, &h, sizeof(h));
    assert_valid(BUF, size);
    rh = nuksm_msg_payload(BUF);
    g_assert_cmpuint(rh->priority, ==, 100);
    g_assert_cmpstr(rh->domain, ==, "default");
    g_assert_cmpstr(rh->vm_name, ==, "vm1");
    g_assert_cmpstr(rh->object_id, ==, "dedup0");

    size = pack_valid(BUF, NUKSM_MSG_INFO, 2);
    assert_valid(BUF, size);
    ri = nuksm_msg_payload(BUF);
    g_assert_cmpuint(ri->nr_nodes, ==, 4);
    g_assert_cmpuint(ri->pages_sharing, ==, 30);
    g_assert_cmpuint(ri->store_pages[3], ==, 4);

    size = pack_vms(BUF, 2, 2);
    assert_valid(BUF, size);
    rv = nuksm_msg_payload(BUF);
    re = (const NuksmVmEntry *)(rv + 1);
    g_assert_cmpuint(rv->count, ==, 2);
    g_assert_cmpuint(re[1].pid, ==, 1001);
    g_assert_cmpuint(re[1].merged_pages, ==, 100);
    g_assert_cmpstr(re[1].object_id, ==, "obj");
}

static void test_control_hello(void)
{
    NuksmMsgHello h = {
        .version = NUKSM_PROTO_VERSION,
        .role = NUKSM_ROLE_CONTROL,
    };
    size_t size = nuksm_msg_pack(BUF, NUKSM_MSG_HELLO, 1, &h, sizeof(h));

    /* Control clients have neither a priority nor a domain. */
    assert_valid(BUF, size);
}

static void test_reject_short(void)
{
    size_t size = pack_valid(BUF, NUKSM_MSG_GET_INFO, 1);

    g_assert_cmpuint(size, ==, sizeof(NuksmMsgHeader));
    assert_rejected(BUF, 0, "shorter than its header");
    assert_rejected(BUF, sizeof(NuksmMsgHeader) - 1,
                    "shorter than its header");

    /* A datagram cut inside its payload. */
    size = pack_valid(BUF, NUKSM_MSG_HELLO, 1);
    assert_rejected(BUF, size - 1, "payload length does not match");
}

static void test_reject_oversized(void)
{
    NuksmMsgHeader *hdr = hdr_of(BUF);

    pack_valid(BUF, NUKSM_MSG_LIST_VMS, 1);
    hdr->len = NUKSM_MSG_MAX + 1 - sizeof(*hdr);
    assert_rejected(BUF, NUKSM_MSG_MAX + 1, "larger than NUKSM_MSG_MAX");
}

static void test_reject_magic(void)
{
    size_t size = pack_valid(BUF, NUKSM_MSG_GET_INFO, 1);

    hdr_of(BUF)->magic = 0x4d534b4f;
    assert_rejected(BUF, size, "bad magic");
    hdr_of(BUF)->magic = GUINT32_SWAP_LE_BE(NUKSM_PROTO_MAGIC);
    assert_rejected(BUF, size, "bad magic");
}

static void test_reject_flags(void)
{
    size_t size = pack_valid(BUF, NUKSM_MSG_GET_POLICY, 1);

    for (unsigned bit = 0; bit < 16; bit++) {
        hdr_of(BUF)->flags = 1u << bit;
        assert_rejected(BUF, size, "unknown flags");
    }
}

static void test_reject_len_mismatch(void)
{
    size_t size = pack_valid(BUF, NUKSM_MSG_SET_POLICY, 1);

    hdr_of(BUF)->len = sizeof(NuksmMsgPolicy) + 1;
    assert_rejected(BUF, size, "payload length does not match");
    hdr_of(BUF)->len = sizeof(NuksmMsgPolicy) - 1;
    assert_rejected(BUF, size, "payload length does not match");
    hdr_of(BUF)->len = UINT32_MAX;
    assert_rejected(BUF, size, "payload length does not match");
}

static void test_reject_unknown_type(void)
{
    static const uint16_t types[] = { 0, NUKSM_MSG__MAX, 0x100, 0xffff };
    size_t size = pack_valid(BUF, NUKSM_MSG_GET_INFO, 1);

    for (size_t i = 0; i < G_N_ELEMENTS(types); i++) {
        hdr_of(BUF)->type = types[i];
        assert_rejected(BUF, size, "unknown message type");
    }
}

static void test_reject_wrong_size(void)
{
    uint64_t zeros[64] = { 0 };
    static const NuksmMsgType fixed[] = {
        NUKSM_MSG_HELLO, NUKSM_MSG_HELLO_ACK, NUKSM_MSG_ERROR,
        NUKSM_MSG_SET_POLICY, NUKSM_MSG_POLICY, NUKSM_MSG_SET_PRIORITY,
        NUKSM_MSG_INFO, NUKSM_MSG_STORE, NUKSM_MSG_CHARGE,
        NUKSM_MSG_LIST_VMS,
    };
    static const NuksmMsgType empty[] = {
        NUKSM_MSG_GET_POLICY, NUKSM_MSG_GET_INFO,
    };
    size_t size;

    for (size_t i = 0; i < G_N_ELEMENTS(fixed); i++) {
        /* One byte short and one byte long of the fixed layout. */
        size_t len = pack_valid(BUF, fixed[i], 1) - sizeof(NuksmMsgHeader);
        g_autofree void *payload = g_malloc0(len + 1);

        memcpy(payload, payload_of(BUF), len);
        size = nuksm_msg_pack(BUF, fixed[i], 1, payload, len - 1);
        assert_rejected(BUF, size, "wrong payload size");
        size = nuksm_msg_pack(BUF, fixed[i], 1, payload, len + 1);
        assert_rejected(BUF, size, "wrong payload size");
        size = nuksm_msg_pack(BUF, fixed[i], 1, NULL, 0);
        assert_rejected(BUF, size, "wrong payload size");
    }
    for (size_t i = 0; i < G_N_ELEMENTS(empty); i++) {
        size = nuksm_msg_pack(BUF, empty[i], 1, zeros, 4);
        assert_rejected(BUF, size, "unexpected payload");
    }
}

static void test_reject_unterminated(void)
{
    NuksmMsgHello h;
    NuksmMsgHelloAck a = hello_ack();
    NuksmMsgError e = { .code = NUKSM_ERR_BAD_MESSAGE };
    NuksmMsgInfo i = info_msg();
    NuksmVmEntry *entries;
    size_t size;

    h = vm_hello();
    memset(h.domain, 'd', sizeof(h.domain));
    size = nuksm_msg_pack(BUF, NUKSM_MSG_HELLO, 1, &h, sizeof(h));
    assert_rejected(BUF, size, "unterminated string in HELLO");
    h = vm_hello();
    memset(h.vm_name, 'n', sizeof(h.vm_name));
    size = nuksm_msg_pack(BUF, NUKSM_MSG_HELLO, 1, &h, sizeof(h));
    assert_rejected(BUF, size, "unterminated string in HELLO");
    h = vm_hello();
    memset(h.object_id, 'o', sizeof(h.object_id));
    size = nuksm_msg_pack(BUF, NUKSM_MSG_HELLO, 1, &h, sizeof(h));
    assert_rejected(BUF, size, "unterminated string in HELLO");

    /* The terminator may be the very last byte of the field. */
    h = vm_hello();
    memset(h.vm_name, 'n', sizeof(h.vm_name) - 1);
    size = nuksm_msg_pack(BUF, NUKSM_MSG_HELLO, 1, &h, sizeof(h));
    assert_valid(BUF, size);

    memset(a.agent_version, 'v', sizeof(a.agent_version));
    size = nuksm_msg_pack(BUF, NUKSM_MSG_HELLO_ACK, 1, &a, sizeof(a));
    assert_rejected(BUF, size, "unterminated string in HELLO_ACK");

    memset(e.message, 'e', sizeof(e.message));
    size = nuksm_msg_pack(BUF, NUKSM_MSG_ERROR, 1, &e, sizeof(e));
    assert_rejected(BUF, size, "unterminated string in ERROR");

    memset(i.agent_version, 'v', sizeof(i.agent_version));
    size = nuksm_msg_pack(BUF, NUKSM_MSG_INFO, 1, &i, sizeof(i));
    assert_rejected(BUF, size, "unterminated string in INFO");

    i = info_msg();
    i.vms_reading = i.vms + 1;
    size = nuksm_msg_pack(BUF, NUKSM_MSG_INFO, 1, &i, sizeof(i));
    assert_rejected(BUF, size,
                    "more VMs sampling reads or resting than VMs in INFO");
    i = info_msg();
    i.vms_resting = i.vms + 1;
    size = nuksm_msg_pack(BUF, NUKSM_MSG_INFO, 1, &i, sizeof(i));
    assert_rejected(BUF, size,
                    "more VMs sampling reads or resting than VMs in INFO");

    size = pack_vms(BUF, 3, 3);
    entries = (NuksmVmEntry *)((NuksmMsgVms *)payload_of(BUF) + 1);
    memset(entries[2].object_id, 'o', sizeof(entries[2].object_id));
    assert_rejected(BUF, size, "unterminated string in VMS");

    size = pack_vms(BUF, 3, 3);
    entries = (NuksmVmEntry *)((NuksmMsgVms *)payload_of(BUF) + 1);
    memset(entries[1].limit_reason, 'r', sizeof(entries[1].limit_reason));
    assert_rejected(BUF, size, "unterminated limit reason");
}

static void test_vm_limit(void)
{
    NuksmMsgVmLimit l = { .limit = NUKSM_VM_LIMIT_MAP_COUNT };
    NuksmVmEntry *entries;
    size_t size;

    nuksm_strfield_set(l.reason, sizeof(l.reason), "65000 of 65530");
    size = nuksm_msg_pack(BUF, NUKSM_MSG_VM_LIMIT, 0, &l, sizeof(l));
    assert_valid(BUF, size);
    l.limit = NUKSM_VM_LIMIT__MAX;
    size = nuksm_msg_pack(BUF, NUKSM_MSG_VM_LIMIT, 0, &l, sizeof(l));
    assert_rejected(BUF, size, "unknown VM limit");
    l.limit = NUKSM_VM_LIMIT_NONE;
    l.reserved = 1;
    size = nuksm_msg_pack(BUF, NUKSM_MSG_VM_LIMIT, 0, &l, sizeof(l));
    assert_rejected(BUF, size, "reserved field set in VM_LIMIT");
    l.reserved = 0;
    memset(l.reason, 'r', sizeof(l.reason));
    size = nuksm_msg_pack(BUF, NUKSM_MSG_VM_LIMIT, 0, &l, sizeof(l));
    assert_rejected(BUF, size, "unterminated limit reason");

    size = pack_vms(BUF, 2, 2);
    entries = (NuksmVmEntry *)((NuksmMsgVms *)payload_of(BUF) + 1);
    entries[1].limit = UINT32_MAX;
    assert_rejected(BUF, size, "unknown VM limit");

    g_assert_cmpstr(nuksm_vm_limit_name(NUKSM_VM_LIMIT_USERFAULTFD), ==,
                    "userfaultfd");
    g_assert_cmpstr(nuksm_vm_limit_name(NUKSM_VM_LIMIT_MAP_COUNT), ==,
                    "map-count");
    g_assert_null(nuksm_vm_limit_name(NUKSM_VM_LIMIT_NONE));
    g_assert_null(nuksm_vm_limit_name(NUKSM_VM_LIMIT__MAX));
}

static void test_reject_policy(void)
{
    NuksmMsgPolicy p = { .policy = NUKSM_POLICY_ID__MAX };
    NuksmMsgHelloAck a = hello_ack();
    NuksmMsgInfo i = info_msg();
    size_t size;

    size = nuksm_msg_pack(BUF, NUKSM_MSG_SET_POLICY, 1, &p, sizeof(p));
    assert_rejected(BUF, size, "unknown policy");
    size = nuksm_msg_pack(BUF, NUKSM_MSG_POLICY, 1, &p, sizeof(p));
    assert_rejected(BUF, size, "unknown policy");
    p.policy = UINT32_MAX;
    size = nuksm_msg_pack(BUF, NUKSM_MSG_SET_POLICY, 1, &p, sizeof(p));
    assert_rejected(BUF, size, "unknown policy");

    a.policy = NUKSM_POLICY_ID__MAX;
    size = nuksm_msg_pack(BUF, NUKSM_MSG_HELLO_ACK, 1, &a, sizeof(a));
    assert_rejected(BUF, size, "unknown policy in HELLO_ACK");

    i.policy = NUKSM_POLICY_ID__MAX;
    size = nuksm_msg_pack(BUF, NUKSM_MSG_INFO, 1, &i, sizeof(i));
    assert_rejected(BUF, size, "unknown policy in INFO");

    /* Every defined policy passes. */
    for (uint32_t n = 0; n < NUKSM_POLICY_ID__MAX; n++) {
        p.policy = n;
        size = nuksm_msg_pack(BUF, NUKSM_MSG_SET_POLICY, 1, &p, sizeof(p));
        assert_valid(BUF, size);
    }
}

static void test_reject_priority(void)
{
    static const uint32_t bad[] = {
        0, NUKSM_PRIORITY_MAX + 1, UINT32_MAX,
    };
    static const uint32_t good[] = {
        NUKSM_PRIORITY_MIN, 500, NUKSM_PRIORITY_MAX,
    };
    NuksmMsgHello h = vm_hello();
    NuksmMsgPriority p;
    size_t size;

    for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
        h.priority = bad[i];
        size = nuksm_msg_pack(BUF, NUKSM_MSG_HELLO, 1, &h, sizeof(h));
        assert_rejected(BUF, size, "priority out of range in HELLO");
        p.priority = bad[i];
        size = nuksm_msg_pack(BUF, NUKSM_MSG_SET_PRIORITY, 1, &p, sizeof(p));
        assert_rejected(BUF, size, "priority out of range");
    }
    for (size_t i = 0; i < G_N_ELEMENTS(good); i++) {
        h.priority = good[i];
        size = nuksm_msg_pack(BUF, NUKSM_MSG_HELLO, 1, &h, sizeof(h));
        assert_valid(BUF, size);
        p.priority = good[i];
        size = nuksm_msg_pack(BUF, NUKSM_MSG_SET_PRIORITY, 1, &p, sizeof(p));
        assert_valid(BUF, size);
    }
}

static void test_reject_hello_fields(void)
{
    static const uint32_t roles[] = { 0, 3, UINT32_MAX };
    NuksmMsgHello h;
    size_t size;

    for (size_t i = 0; i < G_N_ELEMENTS(roles); i++) {
        h = vm_hello();
        h.role = roles[i];
        size = nuksm_msg_pack(BUF, NUKSM_MSG_HELLO, 1, &h, sizeof(h));
        assert_rejected(BUF, size, "unknown client role");
    }

    h = vm_hello();
    h.domain[0] = '\0';
    size = nuksm_msg_pack(BUF, NUKSM_MSG_HELLO, 1, &h, sizeof(h));
    assert_rejected(BUF, size, "empty domain");

    h = vm_hello();
    h.reserved = 1;
    size = nuksm_msg_pack(BUF, NUKSM_MSG_HELLO, 1, &h, sizeof(h));
    assert_rejected(BUF, size, "reserved field");
}

static void test_reject_nodes(void)
{
    static const uint32_t bad[] = { 0, NUKSM_MAX_NODES + 1, UINT32_MAX };
    NuksmMsgHelloAck a = hello_ack();
    NuksmMsgInfo i = info_msg();
    size_t size;

    for (size_t n = 0; n < G_N_ELEMENTS(bad); n++) {
        a.nr_nodes = bad[n];
        size = nuksm_msg_pack(BUF, NUKSM_MSG_HELLO_ACK, 1, &a, sizeof(a));
        assert_rejected(BUF, size, "node count out of range in HELLO_ACK");
        i.nr_nodes = bad[n];
        size = nuksm_msg_pack(BUF, NUKSM_MSG_INFO, 1, &i, sizeof(i));
        assert_rejected(BUF, size, "node count out of range in INFO");
    }
    a.nr_nodes = NUKSM_MAX_NODES;
    size = nuksm_msg_pack(BUF, NUKSM_MSG_HELLO_ACK, 1, &a, sizeof(a));
    assert_valid(BUF, size);
    i.nr_nodes = 1;
    size = nuksm_msg_pack(BUF, NUKSM_MSG_INFO, 1, &i, sizeof(i));
    assert_valid(BUF, size);
}

static void test_reject_vms_count(void)
{
    NuksmMsgVms v = { .count = 0, .total = 0 };
    size_t size;

    /* Count claims more or fewer entries than the payload carries. */
    size = pack_vms(BUF, 2, 2);
    ((NuksmMsgVms *)payload_of(BUF))->count = 3;
    assert_rejected(BUF, size, "VMS size does not match its count");
    ((NuksmMsgVms *)payload_of(BUF))->count = 1;
    assert_rejected(BUF, size, "VMS size does not match its count");
    ((NuksmMsgVms *)payload_of(BUF))->count = UINT32_MAX;
    assert_rejected(BUF, size, "VMS size does not match its count");

    /* A trailing partial entry. */
    size = pack_vms(BUF, 2, 2);
    hdr_of(BUF)->len -= 8;
    assert_rejected(BUF, size - 8, "VMS size does not match its count");

    /* Shorter than the fixed part. */
    size = nuksm_msg_pack(BUF, NUKSM_MSG_VMS, 1, &v, sizeof(v) - 1);
    assert_rejected(BUF, size, "VMS size does not match its count");

    size = pack_vms(BUF, 2, 1);
    assert_rejected(BUF, size, "VMS count exceeds total");

    /* Empty and truncated lists are fine. */
    size = nuksm_msg_pack(BUF, NUKSM_MSG_VMS, 1, &v, sizeof(v));
    assert_valid(BUF, size);
    size = pack_vms(BUF, 1, 1000);
    assert_valid(BUF, size);

    /* Co-location: a similarity, a verdict and a node in range. */
    size = pack_vms(BUF, 1, 1);
    entries_of_vms(BUF)->plan_verdict = NUKSM_PLAN__MAX + 1;
    assert_rejected(BUF, size, "co-location out of range in VMS");
    size = pack_vms(BUF, 1, 1);
    entries_of_vms(BUF)->twin_pm = 1001;
    assert_rejected(BUF, size, "co-location out of range in VMS");
    size = pack_vms(BUF, 1, 1);
    entries_of_vms(BUF)->plan_to = NUKSM_MAX_NODES;
    assert_rejected(BUF, size, "co-location out of range in VMS");

    /* A share as SHARE takes it: no pace is not one. */
    size = pack_vms(BUF, 1, 1);
    entries_of_vms(BUF)->share.pace = 0;
    assert_rejected(BUF, size, "scan budget share out of range in VMS");
}

static void test_batch_values(void)
{
    const NuksmCandidate *c;
    const NuksmSlotRef *r;
    const uint8_t *content;
    size_t size;

    size = pack_batch(BUF, NUKSM_MSG_CANDIDATES, 1, 3);
    assert_valid(BUF, size);
    c = (const NuksmCandidate *)((const NuksmMsgBatch *)
                                 nuksm_msg_payload(BUF) + 1);
    g_assert_cmpuint(batch_of(BUF)->count, ==, 3);
    g_assert_cmpuint(c[2].page, ==, 0x1002);
    g_assert_cmphex(c[2].digest, ==, 0xfeedface00000002ull);

    size = pack_batch(BUF, NUKSM_MSG_UPLOAD, 1, 3);
    assert_valid(BUF, size);
    r = refs_of(BUF);
    content = (const uint8_t *)(r + 3);
    g_assert_cmpuint(r[1].page, ==, 0x2001);
    g_assert_cmpuint(r[1].node, ==, 1);
    g_assert_cmpuint(r[1].slot, ==, 101);
    g_assert_cmpuint(r[1].gen, ==, 8);
    g_assert_cmpuint(content[0], ==, 0xa5);
    g_assert_cmpuint(content[3 * NUKSM_PAGE_SIZE - 1], ==, 0xa5);
    g_assert_cmpuint(size, ==, sizeof(NuksmMsgHeader) +
                     sizeof(NuksmMsgBatch) +
                     3 * (sizeof(NuksmSlotRef) + NUKSM_PAGE_SIZE));

    /* Empty batches are fine. */
    size = pack_batch(BUF, NUKSM_MSG_MERGE, 1, 0);
    assert_valid(BUF, size);
    size = pack_batch(BUF, NUKSM_MSG_UPLOAD, 1, 0);
    assert_valid(BUF, size);
}

/* The largest batch of each kind fits a datagram; one more entry not. */
static void test_batch_max(void)
{
    static const struct {
        NuksmMsgType type;
        size_t max;
    } kinds[] = {
        { NUKSM_MSG_CANDIDATES, NUKSM_CANDIDATES_MAX },
        { NUKSM_MSG_MERGE,      NUKSM_SLOTREFS_MAX },
        { NUKSM_MSG_MERGED,     NUKSM_SLOTREFS_MAX },
        { NUKSM_MSG_UPLOAD,     NUKSM_UPLOAD_MAX },
    };

    for (size_t i = 0; i < G_N_ELEMENTS(kinds); i++) {
        size_t size = pack_batch(BUF, kinds[i].type, 1, kinds[i].max);
        size_t entry = size - sizeof(NuksmMsgHeader) -
                       sizeof(NuksmMsgBatch);

        entry /= kinds[i].max;
        g_assert_cmpuint(size, <=, NUKSM_MSG_MAX);
        g_assert_cmpuint(size + entry, >, NUKSM_MSG_MAX);
        assert_valid(BUF, size);
    }
}

static void test_reject_batch_size(void)
{
    static const NuksmMsgType batches[] = {
        NUKSM_MSG_CANDIDATES, NUKSM_MSG_UPLOAD_REQ, NUKSM_MSG_UPLOAD,
        NUKSM_MSG_MERGE, NUKSM_MSG_MERGED, NUKSM_MSG_UNMERGED,
        NUKSM_MSG_RESTORE, NUKSM_MSG_REFUSED, NUKSM_MSG_RETRY,
    };
    NuksmMsgBatch empty = { 0 };

    for (size_t i = 0; i < G_N_ELEMENTS(batches); i++) {
        NuksmMsgType type = batches[i];
        size_t size;

        /* Count claims more or fewer entries than the payload carries. */
        size = pack_batch(BUF, type, 1, 3);
        batch_of(BUF)->count = 4;
        assert_rejected(BUF, size, "does not match its count");
        batch_of(BUF)->count = 2;
        assert_rejected(BUF, size, "does not match its count");
        batch_of(BUF)->count = UINT32_MAX;
        assert_rejected(BUF, size, "does not match its count");

        /* A trailing partial entry, or page of content. */
        size = pack_batch(BUF, type, 1, 3);
        hdr_of(BUF)->len -= 8;
        assert_rejected(BUF, size - 8, "does not match its count");

        /* Shorter than the batch header. */
        size = nuksm_msg_pack(BUF, type, 1, &empty, sizeof(empty) - 1);
        assert_rejected(BUF, size, "does not match its count");
        size = nuksm_msg_pack(BUF, type, 1, NULL, 0);
        assert_rejected(BUF, size, "does not match its count");

        /* The reserved field. */
        size = pack_batch(BUF, type, 1, 1);
        batch_of(BUF)->reserved = 1;
        assert_rejected(BUF, size, "does not match its count");
    }

    /* UPLOAD without its content. */
    {
        NuksmMsgBatch *b = g_malloc0(sizeof(*b) + sizeof(NuksmSlotRef));
        size_t size;

        b->count = 1;
        size = nuksm_msg_pack(BUF, NUKSM_MSG_UPLOAD, 1, b,
                              sizeof(*b) + sizeof(NuksmSlotRef));
        assert_rejected(BUF, size, "UPLOAD size does not match its count");
        g_free(b);
    }
}

static void test_reject_slot_refs(void)
{
    static const struct {
        NuksmMsgType type;
        uint32_t min, max;       /* valid statuses */
    } kinds[] = {
        { NUKSM_MSG_UPLOAD_REQ, NUKSM_STATUS_NONE,   NUKSM_STATUS_NONE },
        { NUKSM_MSG_UPLOAD,     NUKSM_STATUS_NONE,   NUKSM_STATUS_NONE },
        { NUKSM_MSG_MERGE,      NUKSM_STATUS_NONE,   NUKSM_STATUS_NONE },
        { NUKSM_MSG_RESTORE,    NUKSM_STATUS_NONE,   NUKSM_STATUS_NONE },
        { NUKSM_MSG_REFUSED,    NUKSM_STATUS_NONE,   NUKSM_STATUS_NONE },
        { NUKSM_MSG_RETRY,      NUKSM_STATUS_NONE,   NUKSM_STATUS_NONE },
        { NUKSM_MSG_MERGED,     NUKSM_STATUS_MERGED, NUKSM_STATUS_FAILED },
        { NUKSM_MSG_UNMERGED,   NUKSM_STATUS_COW,    NUKSM_STATUS_REBUILT },
    };

    for (size_t i = 0; i < G_N_ELEMENTS(kinds); i++) {
        size_t size = pack_batch(BUF, kinds[i].type, 1, 3);
        NuksmSlotRef *r = refs_of(BUF);

        /* Any entry is checked, the last one too. */
        r[2].node = NUKSM_MAX_NODES;
        assert_rejected(BUF, size, "node out of range in slot reference");
        r[2].node = UINT32_MAX;
        assert_rejected(BUF, size, "node out of range in slot reference");
        r[2].node = NUKSM_MAX_NODES - 1;
        assert_valid(BUF, size);

        for (uint32_t st = 0; st <= NUKSM_STATUS__MAX; st++) {
            r[2].status = st;
            if (st >= kinds[i].min && st <= kinds[i].max) {
                assert_valid(BUF, size);
            } else {
                assert_rejected(BUF, size,
                                "status out of range in slot reference");
            }
        }
        r[2].status = UINT32_MAX;
        assert_rejected(BUF, size, "status out of range in slot reference");
    }
}

static void test_reject_topology(void)
{
    g_autofree NuksmMsgTopology *t = topology_msg();
    size_t size;

#define CHECK_TOPOLOGY(field, bad, why) do {                            \
        typeof(t->field) saved = t->field;                              \
        t->field = (bad);                                               \
        size = nuksm_msg_pack(BUF, NUKSM_MSG_TOPOLOGY, 1, t, sizeof(*t)); \
        assert_rejected(BUF, size, why);                                \
        t->field = saved;                                               \
    } while (0)

    size = nuksm_msg_pack(BUF, NUKSM_MSG_TOPOLOGY, 1, t, sizeof(*t));
    assert_valid(BUF, size);
    CHECK_TOPOLOGY(nr_gnodes, 0, "guest node count out of range");
    CHECK_TOPOLOGY(nr_gnodes, NUKSM_MAX_GNODES + 1,
                   "guest node count out of range");
    CHECK_TOPOLOGY(nr_vcpus, NUKSM_MAX_VCPUS + 1, "vCPU count out of range");
    CHECK_TOPOLOGY(gnodes[1].policy, NUKSM_MEMPOLICY_INTERLEAVE + 1,
                   "bad guest node");
    CHECK_TOPOLOGY(gnodes[0].reserved, 1, "bad guest node");
    /* Entries past the counts must be zero. */
    CHECK_TOPOLOGY(gnodes[2].host_nodes, 1, "bad guest node");
    CHECK_TOPOLOGY(vcpus[3].tid, 5, "bad vCPU");
    CHECK_TOPOLOGY(vcpus[2].gnode, 2, "bad vCPU");
    CHECK_TOPOLOGY(vcpus[0].tid, 0, "bad vCPU");
    CHECK_TOPOLOGY(nr_ranges, NUKSM_MAX_RANGES + 1, "range count");
    CHECK_TOPOLOGY(ranges[1].gnode, 2, "bad RAM range");
    CHECK_TOPOLOGY(ranges[1].first, UINT64_MAX, "bad RAM range");
    CHECK_TOPOLOGY(ranges[2].count, 1, "bad RAM range");
#undef CHECK_TOPOLOGY
}

static void test_reject_home(void)
{
    NuksmMsgHome h = home_msg();
    size_t size = nuksm_msg_pack(BUF, NUKSM_MSG_HOME, 1, &h, sizeof(h));

    assert_valid(BUF, size);
    h.home[1] = NUKSM_MAX_NODES;
    size = nuksm_msg_pack(BUF, NUKSM_MSG_HOME, 1, &h, sizeof(h));
    assert_rejected(BUF, size, "bad home node");
    h = home_msg();
    h.source[0] = NUKSM_HOME__MAX;
    size = nuksm_msg_pack(BUF, NUKSM_MSG_HOME, 1, &h, sizeof(h));
    assert_rejected(BUF, size, "bad home node");
    h = home_msg();
    h.home[2] = 1;
    size = nuksm_msg_pack(BUF, NUKSM_MSG_HOME, 1, &h, sizeof(h));
    assert_rejected(BUF, size, "bad home node");
    h = home_msg();
    h.nr_gnodes = 0;
    size = nuksm_msg_pack(BUF, NUKSM_MSG_HOME, 1, &h, sizeof(h));
    assert_rejected(BUF, size, "bad guest node count");
}

static void test_reject_condition(void)
{
    NuksmMsgCondition c = { .conditions = NUKSM_COND_STORE_FULL };
    size_t size = nuksm_msg_pack(BUF, NUKSM_MSG_CONDITION, 0, &c, sizeof(c));
    NuksmMsgInfo i = info_msg();

    assert_valid(BUF, size);
    c.conditions = NUKSM_COND_ALL + 1;
    size = nuksm_msg_pack(BUF, NUKSM_MSG_CONDITION, 0, &c, sizeof(c));
    assert_rejected(BUF, size, "unknown condition");
    c.conditions = 0;
    c.reserved = 1;
    size = nuksm_msg_pack(BUF, NUKSM_MSG_CONDITION, 0, &c, sizeof(c));
    assert_rejected(BUF, size, "reserved field");
    c.reserved = 0;
    memset(c.reason, 'x', sizeof(c.reason));
    size = nuksm_msg_pack(BUF, NUKSM_MSG_CONDITION, 0, &c, sizeof(c));
    assert_rejected(BUF, size, "unterminated string");

    i.conditions = 1u << 31;
    size = nuksm_msg_pack(BUF, NUKSM_MSG_INFO, 0, &i, sizeof(i));
    assert_rejected(BUF, size, "unknown condition in INFO");
}

static void test_reject_moves(void)
{
    for (NuksmMsgType type = NUKSM_MSG_MOVE; type <= NUKSM_MSG_MOVED;
         type++) {
        size_t size = pack_batch(BUF, type, 1, 3);
        NuksmMove *m = (NuksmMove *)(batch_of(BUF) + 1);
        NuksmMove saved = m[2];

        assert_valid(BUF, size);
        m[2].to.page++;
        assert_rejected(BUF, size, "move between two pages");
        m[2] = saved;
        m[2].to.node = NUKSM_MAX_NODES;
        assert_rejected(BUF, size, "node out of range in move");
        m[2] = saved;
        m[2].from.status = NUKSM_STATUS_MERGED;
        assert_rejected(BUF, size, "status out of range in move");
        m[2] = saved;
        m[2].to.status = type == NUKSM_MSG_MOVE ? NUKSM_STATUS_MERGED :
                         NUKSM_STATUS_COW;
        assert_rejected(BUF, size, "status out of range in move");
    }
}

static void test_reject_candidates(void)
{
    size_t size = pack_batch(BUF, NUKSM_MSG_CANDIDATES, 1, 3);
    NuksmCandidate *c = (NuksmCandidate *)(batch_of(BUF) + 1);

    c[2].gnode = NUKSM_MAX_GNODES - 1;
    c[2].idle = 255;
    assert_valid(BUF, size);
    c[2].gnode = NUKSM_MAX_GNODES;
    assert_rejected(BUF, size, "guest node out of range");
    c[2].gnode = 0;
    c[2].flags = NUKSM_CANDIDATE_WANTED;
    assert_valid(BUF, size);
    c[2].flags = NUKSM_CANDIDATE_LANDING;
    assert_valid(BUF, size);
    c[2].flags = 4;
    assert_rejected(BUF, size, "unknown flag in CANDIDATES");
    c[2].flags = 0;
    c[2].reserved[4] = 1;
    assert_rejected(BUF, size, "reserved field set in CANDIDATES");
}

/* WANTED: any fragment but 0, which no digest has. */
static void test_reject_wanted(void)
{
    NuksmMsgWanted w = { .fragments = { 2 } };
    size_t size = nuksm_msg_pack(BUF, NUKSM_MSG_WANTED, 0, &w, sizeof(w));

    assert_valid(BUF, size);
    w.fragments[0] = 1;
    size = nuksm_msg_pack(BUF, NUKSM_MSG_WANTED, 0, &w, sizeof(w));
    assert_rejected(BUF, size, "WANTED names fragment 0");
}

static void test_reads(void)
{
    const NuksmReadRegion *r;
    size_t size = pack_reads(BUF, 0, 3);

    assert_valid(BUF, size);
    g_assert_cmpuint(reads_of(BUF)->window_ms, ==, 1000);
    g_assert_cmpuint(reads_of(BUF)->reads_local, ==, 30);
    g_assert_cmpuint(reads_of(BUF)->reads_remote, ==, 12);
    r = regions_of(BUF);
    g_assert_cmpuint(r[2].region, ==, 9);
    g_assert_cmpuint(r[2].idle, ==, 2);

    /* Any count of samples, never read included; no region at all. */
    regions_of(BUF)[1].idle = NUKSM_IDLE_NEVER;
    assert_valid(BUF, size);
    assert_valid(BUF, pack_reads(BUF, 0, 0));

    /* The largest fits a datagram; one more region does not. */
    size = pack_reads(BUF, 0, NUKSM_READS_MAX);
    g_assert_cmpuint(size, <=, NUKSM_MSG_MAX);
    g_assert_cmpuint(size + sizeof(NuksmReadRegion), >, NUKSM_MSG_MAX);
    assert_valid(BUF, size);
}

static void test_reject_reads(void)
{
    /* The last region whose pages a 64-bit RAM address space holds. */
    const uint64_t last = UINT64_MAX / NUKSM_PAGE_SIZE /
                          NUKSM_READ_REGION_PAGES;
    NuksmMsgReads head = { .count = 0 };
    size_t size;

    /* The count claims more or fewer regions than the payload carries. */
    size = pack_reads(BUF, 0, 3);
    reads_of(BUF)->count = 4;
    assert_rejected(BUF, size, "READS size does not match its count");
    reads_of(BUF)->count = 2;
    assert_rejected(BUF, size, "READS size does not match its count");
    reads_of(BUF)->count = UINT32_MAX;
    assert_rejected(BUF, size, "READS size does not match its count");
    size = pack_reads(BUF, 0, 3);
    hdr_of(BUF)->len -= 8;
    assert_rejected(BUF, size - 8, "READS size does not match its count");
    /* Shorter than its head. */
    size = nuksm_msg_pack(BUF, NUKSM_MSG_READS, 0, &head, sizeof(head) - 1);
    assert_rejected(BUF, size, "READS size does not match its count");
    size = nuksm_msg_pack(BUF, NUKSM_MSG_READS, 0, NULL, 0);
    assert_rejected(BUF, size, "READS size does not match its count");

    /* Any reserved byte of any region, the last one too. */
    for (size_t b = 0; b < sizeof(regions_of(BUF)->reserved); b++) {
        size = pack_reads(BUF, 0, 3);
        regions_of(BUF)[2].reserved[b] = 0x80;
        assert_rejected(BUF, size, "reserved field set in READS");
    }

    /* A region beyond the RAM address space. */
    size = pack_reads(BUF, 0, 3);
    regions_of(BUF)[2].region = last;
    assert_valid(BUF, size);
    regions_of(BUF)[2].region = last + 1;
    assert_rejected(BUF, size, "region out of range in READS");
    regions_of(BUF)[2].region = UINT64_MAX;
    assert_rejected(BUF, size, "region out of range in READS");
}

/* SIMILARITY: counts that match its size and totals, figures in range. */
static void test_reject_similarity(void)
{
    NuksmSimilarityPair *pair;
    size_t size = pack_similarity(BUF, 0);

    assert_valid(BUF, size);
    similarity_of(BUF)->nr_vms = 1;
    assert_rejected(BUF, size, "SIMILARITY size does not match its counts");
    size = pack_similarity(BUF, 0);
    similarity_of(BUF)->total_pairs = 0;
    assert_rejected(BUF, size, "SIMILARITY counts exceed their totals");
    size = pack_similarity(BUF, 0);
    pair = (NuksmSimilarityPair *)((NuksmSimilarityVm *)
                                   (similarity_of(BUF) + 1) + 2);
    pair->similarity_pm = 1001;
    assert_rejected(BUF, size, "SIMILARITY pair out of range");
    size = pack_similarity(BUF, 0);
    pair->alike_b = pair->sampled_b + 1;
    assert_rejected(BUF, size, "SIMILARITY pair out of range");
}

/* PLAN: a count that matches its size, verdicts, nodes, groups. */
static void test_reject_plan(void)
{
    size_t size = pack_plan(BUF, 0);

    assert_valid(BUF, size);
    ((NuksmMsgPlan *)payload_of(BUF))->count = 1;
    assert_rejected(BUF, size, "PLAN size does not match its count");
    size = pack_plan(BUF, 0);
    ((NuksmMsgPlan *)payload_of(BUF))->total = 1;
    assert_rejected(BUF, size, "PLAN counts out of range");
    size = pack_plan(BUF, 0);
    plan_moves_of(BUF)[1].verdict = NUKSM_PLAN__MAX;
    assert_rejected(BUF, size, "PLAN move out of range");
    size = pack_plan(BUF, 0);
    plan_moves_of(BUF)[0].to = NUKSM_MAX_NODES;
    assert_rejected(BUF, size, "PLAN move out of range");
    size = pack_plan(BUF, 0);
    plan_moves_of(BUF)[0].group = 1;
    assert_rejected(BUF, size, "PLAN move out of range");
    g_assert_cmpstr(nuksm_plan_verdict_name(NUKSM_PLAN_NO_ROOM), ==,
                    "no-room");
    g_assert_null(nuksm_plan_verdict_name(NUKSM_PLAN__MAX));
}

/* COLOCATION: figures in range, a terminated name. */
static void test_reject_colocation(void)
{
    NuksmMsgColocation c = { .plan_verdict = NUKSM_PLAN__MAX };
    size_t size;

    size = nuksm_msg_pack(BUF, NUKSM_MSG_COLOCATION, 0, &c, sizeof(c));
    assert_valid(BUF, size);
    c.twin_pm = 1001;
    size = nuksm_msg_pack(BUF, NUKSM_MSG_COLOCATION, 0, &c, sizeof(c));
    assert_rejected(BUF, size, "COLOCATION out of range");
    c.twin_pm = 0;
    c.plan_verdict = NUKSM_PLAN__MAX + 1;
    size = nuksm_msg_pack(BUF, NUKSM_MSG_COLOCATION, 0, &c, sizeof(c));
    assert_rejected(BUF, size, "COLOCATION out of range");
    c.plan_verdict = NUKSM_PLAN_PINNED;
    c.scheme = NUKSM_SCHEME_ID__MAX;
    size = nuksm_msg_pack(BUF, NUKSM_MSG_COLOCATION, 0, &c, sizeof(c));
    assert_rejected(BUF, size, "COLOCATION out of range");
    c.scheme = NUKSM_SCHEME_ID_HOT_LOCAL;
    memset(c.twin, 'x', sizeof(c.twin));
    size = nuksm_msg_pack(BUF, NUKSM_MSG_COLOCATION, 0, &c, sizeof(c));
    assert_rejected(BUF, size, "unterminated twin name in COLOCATION");
    g_assert_cmpstr(nuksm_scheme_name(NUKSM_SCHEME_ID_HOT_LOCAL), ==,
                    "hot-local");
    g_assert_null(nuksm_scheme_name(NUKSM_SCHEME_ID__MAX));
}

/* VM_STATS: a CPU budget of at most 100 cores, a known state. */
static void test_reject_vm_stats(void)
{
    NuksmMsgVmStats v = { .max_cpu_pm = 100000,
                          .state = NUKSM_VM_STATE_LIMITED };
    size_t size;

    size = nuksm_msg_pack(BUF, NUKSM_MSG_VM_STATS, 0, &v, sizeof(v));
    assert_valid(BUF, size);
    v.max_cpu_pm = 100001;
    size = nuksm_msg_pack(BUF, NUKSM_MSG_VM_STATS, 0, &v, sizeof(v));
    assert_rejected(BUF, size, "VM_STATS out of range");
    v.max_cpu_pm = 0;
    v.state = NUKSM_VM_STATE__MAX;
    size = nuksm_msg_pack(BUF, NUKSM_MSG_VM_STATS, 0, &v, sizeof(v));
    assert_rejected(BUF, size, "VM_STATS out of range");
    g_assert_cmpstr(nuksm_vm_state_name(NUKSM_VM_STATE_PAUSED), ==,
                    "paused");
}

/*
 * SHARE: a part of at most the budget, a known reason, a pace of 1 to
 * NUKSM_SHARE_PACE_MAX; a part but with OFF, and only then none.
 */
static void test_reject_share(void)
{
    NuksmMsgShare sh = { .max_cpu_ppm = 200000,
                         .reason = NUKSM_SHARE_RESTING,
                         .pace = NUKSM_SHARE_PACE_MAX, .vms = 2,
                         .budget_ppm = 200000 };
    NuksmMsgShare bad;
    size_t size;

    size = nuksm_msg_pack(BUF, NUKSM_MSG_SHARE, 0, &sh, sizeof(sh));
    assert_valid(BUF, size);
    bad = sh;
    bad.max_cpu_ppm = sh.budget_ppm + 1;
    size = nuksm_msg_pack(BUF, NUKSM_MSG_SHARE, 0, &bad, sizeof(bad));
    assert_rejected(BUF, size, "SHARE out of range");
    bad = sh;
    bad.pace = NUKSM_SHARE_PACE_MAX + 1;
    size = nuksm_msg_pack(BUF, NUKSM_MSG_SHARE, 0, &bad, sizeof(bad));
    assert_rejected(BUF, size, "SHARE out of range");
    bad = sh;
    bad.reason = NUKSM_SHARE__MAX;
    size = nuksm_msg_pack(BUF, NUKSM_MSG_SHARE, 0, &bad, sizeof(bad));
    assert_rejected(BUF, size, "SHARE out of range");
    bad = sh;
    bad.reason = NUKSM_SHARE_OFF;
    size = nuksm_msg_pack(BUF, NUKSM_MSG_SHARE, 0, &bad, sizeof(bad));
    assert_rejected(BUF, size, "SHARE out of range");
    bad = sh;
    bad.max_cpu_ppm = 0;
    size = nuksm_msg_pack(BUF, NUKSM_MSG_SHARE, 0, &bad, sizeof(bad));
    assert_rejected(BUF, size, "SHARE out of range");
    g_assert_cmpstr(nuksm_share_reason_name(NUKSM_SHARE_SIGNALLED), ==,
                    "signalled");
    g_assert_null(nuksm_share_reason_name(NUKSM_SHARE__MAX));
}

/* SET_RUN: a known mode; PRUNE: a terminated domain, a rate in range. */
static void test_reject_run_and_prune(void)
{
    NuksmMsgSetRun run = { .run = NUKSM_RUN__MAX };
    NuksmMsgPrune prune = { .rate = NUKSM_PRUNE_RATE_MAX };
    size_t size;

    size = nuksm_msg_pack(BUF, NUKSM_MSG_SET_RUN, 1, &run, sizeof(run));
    assert_rejected(BUF, size, "SET_RUN out of range");
    run = (NuksmMsgSetRun) { .run = NUKSM_RUN_OFF, .reserved = 1 };
    size = nuksm_msg_pack(BUF, NUKSM_MSG_SET_RUN, 1, &run, sizeof(run));
    assert_rejected(BUF, size, "SET_RUN out of range");

    size = nuksm_msg_pack(BUF, NUKSM_MSG_PRUNE, 1, &prune, sizeof(prune));
    assert_valid(BUF, size);
    prune.rate = 0;
    size = nuksm_msg_pack(BUF, NUKSM_MSG_PRUNE, 1, &prune, sizeof(prune));
    assert_rejected(BUF, size, "PRUNE rate out of range");
    prune.rate = NUKSM_PRUNE_RATE_MAX + 1;
    size = nuksm_msg_pack(BUF, NUKSM_MSG_PRUNE, 1, &prune, sizeof(prune));
    assert_rejected(BUF, size, "PRUNE rate out of range");
    prune.rate = 1;
    memset(prune.domain, 'a', sizeof(prune.domain));
    size = nuksm_msg_pack(BUF, NUKSM_MSG_PRUNE, 1, &prune, sizeof(prune));
    assert_rejected(BUF, size, "unterminated domain name in PRUNE");
}

/* APPLY_MOVE and APPLIED: nodes, ways and flags in range. */
static void test_reject_apply(void)
{
    NuksmMsgApplyMove m = { .client_id = 1, .to = NUKSM_MAX_NODES };
    NuksmMsgApplied a = { .to = 1, .how = NUKSM_APPLY__MAX };
    size_t size;

    size = nuksm_msg_pack(BUF, NUKSM_MSG_APPLY_MOVE, 0, &m, sizeof(m));
    assert_rejected(BUF, size, "APPLY_MOVE node out of range");
    size = nuksm_msg_pack(BUF, NUKSM_MSG_APPLIED, 0, &a, sizeof(a));
    assert_rejected(BUF, size, "APPLIED out of range");
    a.how = NUKSM_APPLY_LIBVIRT;
    a.memory_moved = 2;
    size = nuksm_msg_pack(BUF, NUKSM_MSG_APPLIED, 0, &a, sizeof(a));
    assert_rejected(BUF, size, "APPLIED out of range");
    a.memory_moved = 0;
    size = nuksm_msg_pack(BUF, NUKSM_MSG_APPLIED, 0, &a, sizeof(a));
    assert_valid(BUF, size);
}

/* SKETCH: its count, its range, fingerprints strictly ascending. */
static void test_reject_sketch(void)
{
    NuksmMsgGetSketch get = { .client_id = 1, .reserved = 1 };
    size_t size = pack_sketch(BUF, 0);
    uint64_t *entries = (uint64_t *)((NuksmMsgSketch *)payload_of(BUF) + 1);

    assert_valid(BUF, size);
    ((NuksmMsgSketch *)payload_of(BUF))->count = 2;
    assert_rejected(BUF, size, "SKETCH size does not match its count");
    size = pack_sketch(BUF, 0);
    ((NuksmMsgSketch *)payload_of(BUF))->shift = 41;
    assert_rejected(BUF, size, "SKETCH out of range");
    size = pack_sketch(BUF, 0);
    entries[2] = 9ull << 24 | 1;
    assert_rejected(BUF, size, "SKETCH fingerprints not ascending");
    size = nuksm_msg_pack(BUF, NUKSM_MSG_GET_SKETCH, 1, &get, sizeof(get));
    assert_rejected(BUF, size, "reserved field set in GET_SKETCH");
}

static void test_reject_store(void)
{
    NuksmMsgStore st = { .node = NUKSM_MAX_NODES, .size = 1ull << 30 };
    size_t size;

    size = nuksm_msg_pack(BUF, NUKSM_MSG_STORE, 1, &st, sizeof(st));
    assert_rejected(BUF, size, "node out of range in STORE");
    st.node = NUKSM_MAX_NODES - 1;
    size = nuksm_msg_pack(BUF, NUKSM_MSG_STORE, 1, &st, sizeof(st));
    assert_valid(BUF, size);

    st.size = (1ull << 30) + 1;
    size = nuksm_msg_pack(BUF, NUKSM_MSG_STORE, 1, &st, sizeof(st));
    assert_rejected(BUF, size, "bad size in STORE");
    st.size = 0;
    size = nuksm_msg_pack(BUF, NUKSM_MSG_STORE, 1, &st, sizeof(st));
    assert_rejected(BUF, size, "bad size in STORE");

    st.size = NUKSM_PAGE_SIZE;
    st.reserved = 1;
    size = nuksm_msg_pack(BUF, NUKSM_MSG_STORE, 1, &st, sizeof(st));
    assert_rejected(BUF, size, "reserved field set in STORE");
}

static void test_vms_max_entries(void)
{
    size_t size = pack_vms(BUF, NUKSM_VMS_MAX_ENTRIES,
                           NUKSM_VMS_MAX_ENTRIES + 1);

    g_assert_cmpuint(size, <=, NUKSM_MSG_MAX);
    g_assert_cmpuint(size + sizeof(NuksmVmEntry), >, NUKSM_MSG_MAX);
    assert_valid(BUF, size);
}

static void test_policy_names(void)
{
    g_auto(GStrv) names = g_strsplit(nuksm_policy_names(), ", ", -1);

    g_assert_cmpuint(g_strv_length(names), ==, NUKSM_POLICY_ID__MAX);
    for (int i = 0; i < NUKSM_POLICY_ID__MAX; i++) {
        const char *name = nuksm_policy_name(i);

        g_assert_nonnull(name);
        g_assert_cmpstr(name, ==, names[i]);
        g_assert_cmpint(nuksm_policy_parse(name), ==, i);
    }
    g_assert_cmpstr(nuksm_policy_name(NUKSM_POLICY_ID_KSM_ORDER), ==,
                    "ksm-order");
    g_assert_null(nuksm_policy_name(NUKSM_POLICY_ID__MAX));
    g_assert_null(nuksm_policy_name(UINT32_MAX));
    g_assert_cmpint(nuksm_policy_parse("Global"), ==, -1);
    g_assert_cmpint(nuksm_policy_parse("fair "), ==, -1);
    g_assert_cmpint(nuksm_policy_parse(""), ==, -1);
    g_assert_cmpint(nuksm_policy_parse(NULL), ==, -1);
}

static void test_msg_type_names(void)
{
    g_assert_cmpstr(nuksm_msg_type_name(NUKSM_MSG_HELLO), ==, "HELLO");
    g_assert_cmpstr(nuksm_msg_type_name(NUKSM_MSG_VMS), ==, "VMS");
    g_assert_cmpstr(nuksm_msg_type_name(NUKSM_MSG_UPLOAD_REQ), ==,
                    "UPLOAD_REQ");
    g_assert_cmpstr(nuksm_msg_type_name(NUKSM_MSG_RESTORE), ==, "RESTORE");
    for (uint32_t t = 1; t < NUKSM_MSG__MAX; t++) {
        g_assert_nonnull(nuksm_msg_type_name(t));
    }
    g_assert_null(nuksm_msg_type_name(0));
    g_assert_null(nuksm_msg_type_name(NUKSM_MSG__MAX));
}

static void test_strfield_set(void)
{
    char field[8];

    memset(field, 'x', sizeof(field));
    nuksm_strfield_set(field, sizeof(field), "abc");
    g_assert_cmpstr(field, ==, "abc");
    g_assert_cmpint(field[7], ==, '\0');

    nuksm_strfield_set(field, sizeof(field), "0123456789");
    g_assert_cmpstr(field, ==, "0123456");

    nuksm_strfield_set(field, sizeof(field), NULL);
    g_assert_cmpstr(field, ==, "");
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);

    for (uint32_t t = 1; t < NUKSM_MSG__MAX; t++) {
        g_autofree char *path =
            g_strdup_printf("/proto/roundtrip/%s", nuksm_msg_type_name(t));

        g_test_add_data_func(path, GUINT_TO_POINTER(t), test_roundtrip);
    }
    g_test_add_func("/proto/payload-values", test_payload_values);
    g_test_add_func("/proto/vm-limit", test_vm_limit);
    g_test_add_func("/proto/control-hello", test_control_hello);
    g_test_add_func("/proto/reject/short", test_reject_short);
    g_test_add_func("/proto/reject/oversized", test_reject_oversized);
    g_test_add_func("/proto/reject/magic", test_reject_magic);
    g_test_add_func("/proto/reject/flags", test_reject_flags);
    g_test_add_func("/proto/reject/len-mismatch", test_reject_len_mismatch);
    g_test_add_func("/proto/reject/unknown-type", test_reject_unknown_type);
    g_test_add_func("/proto/reject/wrong-size", test_reject_wrong_size);
    g_test_add_func("/proto/reject/unterminated", test_reject_unterminated);
    g_test_add_func("/proto/reject/policy", test_reject_policy);
    g_test_add_func("/proto/reject/priority", test_reject_priority);
    g_test_add_func("/proto/reject/hello-fields", test_reject_hello_fields);
    g_test_add_func("/proto/reject/nodes", test_reject_nodes);
    g_test_add_func("/proto/reject/vms-count", test_reject_vms_count);
    g_test_add_func("/proto/batch-values", test_batch_values);
    g_test_add_func("/proto/batch-max", test_batch_max);
    g_test_add_func("/proto/reject/batch-size", test_reject_batch_size);
    g_test_add_func("/proto/reject/slot-refs", test_reject_slot_refs);
    g_test_add_func("/proto/reject/store", test_reject_store);
    g_test_add_func("/proto/reject/topology", test_reject_topology);
    g_test_add_func("/proto/reject/home", test_reject_home);
    g_test_add_func("/proto/reject/candidates", test_reject_candidates);
    g_test_add_func("/proto/reject/wanted", test_reject_wanted);
    g_test_add_func("/proto/reject/moves", test_reject_moves);
    g_test_add_func("/proto/reject/condition", test_reject_condition);
    g_test_add_func("/proto/reads", test_reads);
    g_test_add_func("/proto/reject/reads", test_reject_reads);
    g_test_add_func("/proto/reject/similarity", test_reject_similarity);
    g_test_add_func("/proto/reject/plan", test_reject_plan);
    g_test_add_func("/proto/reject/sketch", test_reject_sketch);
    g_test_add_func("/proto/reject/colocation", test_reject_colocation);
    g_test_add_func("/proto/reject/apply", test_reject_apply);
    g_test_add_func("/proto/reject/vm-stats", test_reject_vm_stats);
    g_test_add_func("/proto/reject/share", test_reject_share);
    g_test_add_func("/proto/reject/run-and-prune",
                    test_reject_run_and_prune);
    g_test_add_func("/proto/vms-max-entries", test_vms_max_entries);
    g_test_add_func("/proto/policy-names", test_policy_names);
    g_test_add_func("/proto/msg-type-names", test_msg_type_names);
    g_test_add_func("/proto/strfield-set", test_strfield_set);
    return g_test_run();
}
