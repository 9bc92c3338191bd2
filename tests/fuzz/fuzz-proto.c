/*
 * libFuzzer target: the protocol decoder, nuksm_msg_check(), and what a
 * receiver reads of a payload once it passed.
 *
 * The input is one datagram.  It is copied to a heap buffer of exactly
 * its size, so that reading past the datagram is an ASan report.  When
 * nuksm_msg_check() accepts it, every field a receiver may use is read
 * the way nuksmd, nuksmctl and QEMU read it (batches by their count,
 * strings up to their NUL) and the guarantees nuksm-proto.h gives are
 * checked; a broken one aborts.  Packing the payload again must give the
 * same bytes.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nuksm-proto.h"

#define REQUIRE(cond)                                                     \
    do {                                                                  \
        if (!(cond)) {                                                    \
            fprintf(stderr, "fuzz-proto: %s:%d: accepted message breaks " \
                    "'%s'\n", __FILE__, __LINE__, #cond);                 \
            abort();                                                      \
        }                                                                 \
    } while (0)

/* Whatever is read ends here, so that no read is optimised away. */
static volatile uint64_t sink;

/* A fixed-size string field: terminated within the field. */
static void read_string(const char *field, size_t len)
{
    REQUIRE(memchr(field, '\0', len) != NULL);
    sink += strlen(field);
}

static void read_slot_refs(const NuksmSlotRef *r, uint32_t count,
                           uint32_t min_status, uint32_t max_status)
{
    for (uint32_t i = 0; i < count; i++) {
        REQUIRE(r[i].node < NUKSM_MAX_NODES);
        REQUIRE(r[i].status >= min_status && r[i].status <= max_status);
        sink += r[i].page + r[i].slot + r[i].gen;
    }
}

static void read_moves(const NuksmMove *m, uint32_t count,
                       uint32_t min_status, uint32_t max_status)
{
    for (uint32_t i = 0; i < count; i++) {
        REQUIRE(m[i].from.page == m[i].to.page);
        REQUIRE(m[i].from.status == NUKSM_STATUS_NONE);
        read_slot_refs(&m[i].from, 1, NUKSM_STATUS_NONE, NUKSM_STATUS_NONE);
        read_slot_refs(&m[i].to, 1, min_status, max_status);
    }
}

/* A batch: @count entries of @entry bytes (and as many @item bytes). */
static uint32_t batch_count(const void *payload, uint32_t len, size_t entry,
                            size_t item)
{
    const NuksmMsgBatch *b = payload;

    REQUIRE(len >= sizeof(*b));
    REQUIRE(b->reserved == 0);
    REQUIRE(len - sizeof(*b) == (uint64_t)b->count * (entry + item));
    return b->count;
}

static void read_topology(const NuksmMsgTopology *t)
{
    REQUIRE(t->nr_gnodes >= 1 && t->nr_gnodes <= NUKSM_MAX_GNODES);
    REQUIRE(t->nr_vcpus <= NUKSM_MAX_VCPUS);
    REQUIRE(t->nr_ranges <= NUKSM_MAX_RANGES);
    for (uint32_t g = 0; g < t->nr_gnodes; g++) {
        REQUIRE(t->gnodes[g].policy <= NUKSM_MEMPOLICY_INTERLEAVE);
        sink += t->gnodes[g].host_nodes;
    }
    for (uint32_t v = 0; v < t->nr_vcpus; v++) {
        REQUIRE(t->vcpus[v].tid != 0);
        REQUIRE(t->vcpus[v].gnode < t->nr_gnodes);
    }
    for (uint32_t r = 0; r < t->nr_ranges; r++) {
        const NuksmPageRange *pr = &t->ranges[r];

        REQUIRE(pr->gnode < t->nr_gnodes);
        REQUIRE(pr->first + pr->count >= pr->first);
    }
}

static void read_payload(uint16_t type, const void *p, uint32_t len)
{
    switch (type) {
    case NUKSM_MSG_HELLO: {
        const NuksmMsgHello *h = p;

        read_string(h->domain, sizeof(h->domain));
        read_string(h->vm_name, sizeof(h->vm_name));
        read_string(h->object_id, sizeof(h->object_id));
        REQUIRE(h->role == NUKSM_ROLE_VM || h->role == NUKSM_ROLE_CONTROL);
        if (h->role == NUKSM_ROLE_VM) {
            REQUIRE(h->priority >= NUKSM_PRIORITY_MIN &&
                    h->priority <= NUKSM_PRIORITY_MAX);
            REQUIRE(h->domain[0] != '\0');
        }
        break;
    }
    case NUKSM_MSG_HELLO_ACK: {
        const NuksmMsgHelloAck *a = p;

        read_string(a->agent_version, sizeof(a->agent_version));
        REQUIRE(nuksm_policy_name(a->policy) != NULL);
        REQUIRE(a->nr_nodes >= 1 && a->nr_nodes <= NUKSM_MAX_NODES);
        break;
    }
    case NUKSM_MSG_ERROR: {
        const NuksmMsgError *e = p;

        read_string(e->message, sizeof(e->message));
        break;
    }
    case NUKSM_MSG_SET_POLICY:
    case NUKSM_MSG_POLICY:
        REQUIRE(nuksm_policy_name(((const NuksmMsgPolicy *)p)->policy));
        break;
    case NUKSM_MSG_SET_PRIORITY: {
        uint32_t priority = ((const NuksmMsgPriority *)p)->priority;

        REQUIRE(priority >= NUKSM_PRIORITY_MIN &&
                priority <= NUKSM_PRIORITY_MAX);
        break;
    }
    case NUKSM_MSG_GET_POLICY:
    case NUKSM_MSG_GET_INFO:
    case NUKSM_MSG_GET_SIMILARITY:
    case NUKSM_MSG_GET_PLAN:
        REQUIRE(len == 0);
        break;
    case NUKSM_MSG_LIST_VMS:
        REQUIRE(!((const NuksmMsgListVms *)p)->reserved);
        break;
    case NUKSM_MSG_GET_SKETCH:
        REQUIRE(!((const NuksmMsgGetSketch *)p)->reserved);
        break;
    case NUKSM_MSG_COLOCATION: {
        const NuksmMsgColocation *c = p;

        read_string(c->twin, sizeof(c->twin));
        REQUIRE(c->twin_pm <= 1000 && c->plan_verdict <= NUKSM_PLAN__MAX);
        REQUIRE(nuksm_scheme_name(c->scheme) != NULL);
        break;
    }
    case NUKSM_MSG_APPLY_MOVE:
        REQUIRE(((const NuksmMsgApplyMove *)p)->to < NUKSM_MAX_NODES);
        break;
    case NUKSM_MSG_VM_STATS: {
        const NuksmMsgVmStats *v = p;

        REQUIRE(v->max_cpu_pm <= 100000);
        REQUIRE(nuksm_vm_state_name(v->state) != NULL);
        sink += v->pages_scanned + v->scan_cpu_ns;
        break;
    }
    case NUKSM_MSG_SHARE: {
        const NuksmMsgShare *sh = p;

        REQUIRE(nuksm_share_reason_name(sh->reason) != NULL);
        REQUIRE(sh->pace >= 1 && sh->pace <= NUKSM_SHARE_PACE_MAX);
        REQUIRE(sh->max_cpu_ppm <= sh->budget_ppm ||
                sh->max_cpu_ppm <= NUKSM_SHARE_MIN_PPM);
        break;
    }
    case NUKSM_MSG_SET_RUN:
        REQUIRE(nuksm_run_name(((const NuksmMsgSetRun *)p)->run) != NULL);
        break;
    case NUKSM_MSG_PRUNE: {
        const NuksmMsgPrune *m = p;

        read_string(m->domain, sizeof(m->domain));
        REQUIRE(m->rate >= 1 && m->rate <= NUKSM_PRUNE_RATE_MAX);
        break;
    }
    case NUKSM_MSG_APPLIED: {
        const NuksmMsgApplied *a = p;

        REQUIRE(a->how < NUKSM_APPLY__MAX && a->to < NUKSM_MAX_NODES);
        sink += a->pages_left + a->mems + a->cpus[0];
        break;
    }
    case NUKSM_MSG_SKETCH: {
        const NuksmMsgSketch *m = p;
        const uint64_t *e = (const uint64_t *)(m + 1);

        REQUIRE(len >= sizeof(*m));
        REQUIRE(len - sizeof(*m) == (uint64_t)m->count * sizeof(*e));
        for (uint32_t n = 1; n < m->count; n++) {
            REQUIRE(e[n] >> 24 > e[n - 1] >> 24);
        }
        break;
    }
    case NUKSM_MSG_PLAN: {
        const NuksmMsgPlan *m = p;
        const NuksmPlanMove *mv = (const NuksmPlanMove *)(m + 1);

        REQUIRE(len >= sizeof(*m));
        REQUIRE(len - sizeof(*m) == (uint64_t)m->count * sizeof(*mv));
        for (uint32_t n = 0; n < m->count; n++) {
            REQUIRE(nuksm_plan_verdict_name(mv[n].verdict) != NULL);
            REQUIRE(mv[n].group < m->groups);
            sink += mv[n].pages + mv[n].gain_pages + mv[n].remote_pages;
        }
        break;
    }
    case NUKSM_MSG_SIMILARITY: {
        const NuksmMsgSimilarity *m = p;
        const NuksmSimilarityVm *v = (const NuksmSimilarityVm *)(m + 1);
        const NuksmSimilarityPair *pr =
            (const NuksmSimilarityPair *)(v + m->nr_vms);

        REQUIRE(len >= sizeof(*m));
        REQUIRE(len - sizeof(*m) == (uint64_t)m->nr_vms * sizeof(*v) +
                                    (uint64_t)m->nr_pairs * sizeof(*pr));
        for (uint32_t n = 0; n < m->nr_vms; n++) {
            sink += v[n].pages + v[n].sampled;
        }
        for (uint32_t n = 0; n < m->nr_pairs; n++) {
            REQUIRE(pr[n].similarity_pm <= 1000);
            sink += pr[n].merged_a + pr[n].merged_b;
        }
        break;
    }
    case NUKSM_MSG_INFO: {
        const NuksmMsgInfo *i = p;

        read_string(i->agent_version, sizeof(i->agent_version));
        read_string(i->condition_reason, sizeof(i->condition_reason));
        REQUIRE(!(i->conditions & ~NUKSM_COND_ALL));
        REQUIRE(nuksm_policy_name(i->policy) != NULL);
        REQUIRE(i->nr_nodes >= 1 && i->nr_nodes <= NUKSM_MAX_NODES);
        REQUIRE(nuksm_run_name(i->run) != NULL && i->held <= 1);
        for (uint32_t n = 0; n < i->nr_nodes; n++) {
            sink += i->store_pages[n];
        }
        break;
    }
    case NUKSM_MSG_VMS: {
        const NuksmMsgVms *v = p;
        const NuksmVmEntry *e = (const NuksmVmEntry *)(v + 1);

        REQUIRE(len >= sizeof(*v));
        REQUIRE(len - sizeof(*v) == (uint64_t)v->count * sizeof(*e));
        REQUIRE(v->count <= v->total);
        for (uint32_t n = 0; n < v->count; n++) {
            read_string(e[n].domain, sizeof(e[n].domain));
            read_string(e[n].vm_name, sizeof(e[n].vm_name));
            read_string(e[n].object_id, sizeof(e[n].object_id));
            REQUIRE(e[n].nr_gnodes <= NUKSM_MAX_GNODES);
            REQUIRE(e[n].limit < NUKSM_VM_LIMIT__MAX);
            REQUIRE(e[n].share.pace >= 1 &&
                    (e[n].share.max_cpu_ppm <= e[n].share.budget_ppm ||
                     e[n].share.max_cpu_ppm <= NUKSM_SHARE_MIN_PPM));
            read_string(e[n].limit_reason, sizeof(e[n].limit_reason));
            for (uint32_t g = 0; g < e[n].nr_gnodes; g++) {
                sink += e[n].home[g];
            }
        }
        break;
    }
    case NUKSM_MSG_STORE: {
        const NuksmMsgStore *st = p;

        REQUIRE(st->node < NUKSM_MAX_NODES);
        REQUIRE(st->size && st->size % NUKSM_PAGE_SIZE == 0);
        break;
    }
    case NUKSM_MSG_CANDIDATES: {
        const NuksmCandidate *c = (const void *)((const char *)p +
                                                 sizeof(NuksmMsgBatch));
        uint32_t count = batch_count(p, len, sizeof(*c), 0);

        for (uint32_t i = 0; i < count; i++) {
            REQUIRE(c[i].gnode < NUKSM_MAX_GNODES);
            sink += c[i].page + c[i].digest + c[i].idle;
        }
        break;
    }
    case NUKSM_MSG_UPLOAD: {
        const NuksmSlotRef *r = (const void *)((const char *)p +
                                               sizeof(NuksmMsgBatch));
        uint32_t count = batch_count(p, len, sizeof(*r), NUKSM_PAGE_SIZE);
        const uint8_t *pages = (const uint8_t *)(r + count);

        read_slot_refs(r, count, NUKSM_STATUS_NONE, NUKSM_STATUS_NONE);
        for (uint32_t i = 0; i < count; i++) {
            sink += pages[(size_t)i * NUKSM_PAGE_SIZE] +
                    pages[(size_t)i * NUKSM_PAGE_SIZE + NUKSM_PAGE_SIZE - 1];
        }
        break;
    }
    case NUKSM_MSG_WANTED: {
        const NuksmMsgWanted *w = p;

        for (size_t i = 0; i < NUKSM_FRAGMENTS / 64; i++) {
            sink += w->fragments[i];
        }
        break;
    }
    case NUKSM_MSG_UPLOAD_REQ:
    case NUKSM_MSG_MERGE:
    case NUKSM_MSG_RESTORE:
    case NUKSM_MSG_REFUSED:
    case NUKSM_MSG_RETRY:
    case NUKSM_MSG_MERGED:
    case NUKSM_MSG_UNMERGED: {
        const NuksmSlotRef *r = (const void *)((const char *)p +
                                               sizeof(NuksmMsgBatch));
        uint32_t count = batch_count(p, len, sizeof(*r), 0);

        if (type == NUKSM_MSG_MERGED) {
            read_slot_refs(r, count, NUKSM_STATUS_MERGED,
                           NUKSM_STATUS_FAILED);
        } else if (type == NUKSM_MSG_UNMERGED) {
            read_slot_refs(r, count, NUKSM_STATUS_COW,
                           NUKSM_STATUS_REBUILT);
        } else {
            read_slot_refs(r, count, NUKSM_STATUS_NONE, NUKSM_STATUS_NONE);
        }
        break;
    }
    case NUKSM_MSG_MOVE:
    case NUKSM_MSG_MOVED: {
        const NuksmMove *m = (const void *)((const char *)p +
                                            sizeof(NuksmMsgBatch));
        uint32_t count = batch_count(p, len, sizeof(*m), 0);

        if (type == NUKSM_MSG_MOVE) {
            read_moves(m, count, NUKSM_STATUS_NONE, NUKSM_STATUS_NONE);
        } else {
            read_moves(m, count, NUKSM_STATUS_MERGED, NUKSM_STATUS_FAILED);
        }
        break;
    }
    case NUKSM_MSG_TOPOLOGY:
        read_topology(p);
        break;
    case NUKSM_MSG_HOME: {
        const NuksmMsgHome *h = p;

        REQUIRE(h->nr_gnodes >= 1 && h->nr_gnodes <= NUKSM_MAX_GNODES);
        for (uint32_t g = 0; g < h->nr_gnodes; g++) {
            REQUIRE(h->home[g] < NUKSM_MAX_NODES);
            REQUIRE(h->source[g] < NUKSM_HOME__MAX);
        }
        break;
    }
    case NUKSM_MSG_VM_LIMIT: {
        const NuksmMsgVmLimit *l = p;

        REQUIRE(l->limit < NUKSM_VM_LIMIT__MAX && !l->reserved);
        sink += !!nuksm_vm_limit_name(l->limit);
        read_string(l->reason, sizeof(l->reason));
        break;
    }
    case NUKSM_MSG_CHARGE:
        sink += ((const NuksmMsgCharge *)p)->cpu_ns;
        break;
    case NUKSM_MSG_READS: {
        const NuksmMsgReads *m = p;
        const NuksmReadRegion *r = (const NuksmReadRegion *)(m + 1);

        REQUIRE(len >= sizeof(*m));
        REQUIRE(len - sizeof(*m) == (uint64_t)m->count * sizeof(*r));
        sink += m->window_ms + m->reads_local + m->reads_remote;
        for (uint32_t i = 0; i < m->count; i++) {
            /* Its pages are pages of a 64-bit RAM address space. */
            REQUIRE(r[i].region < (UINT64_MAX / NUKSM_PAGE_SIZE + 1) /
                                  NUKSM_READ_REGION_PAGES);
            for (size_t b = 0; b < sizeof(r[i].reserved); b++) {
                REQUIRE(!r[i].reserved[b]);
            }
            sink += r[i].idle;
        }
        break;
    }
    case NUKSM_MSG_CONDITION: {
        const NuksmMsgCondition *c = p;

        REQUIRE(!(c->conditions & ~NUKSM_COND_ALL));
        for (uint32_t bit = 1; bit & NUKSM_COND_ALL; bit <<= 1) {
            REQUIRE(nuksm_condition_name(bit));
            sink += !!(c->conditions & bit);
        }
        read_string(c->reason, sizeof(c->reason));
        break;
    }
    default:
        REQUIRE(!"a message of an unknown type passed the check");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *msg = malloc(size ? size : 1);
    NuksmMsgHeader hdr;
    uint8_t *packed;

    memcpy(msg, data, size);
    if (nuksm_msg_check(msg, size)) {
        free(msg);
        return 0;
    }

    REQUIRE(size >= sizeof(hdr) && size <= NUKSM_MSG_MAX);
    memcpy(&hdr, msg, sizeof(hdr));
    REQUIRE(hdr.len == size - sizeof(hdr));
    REQUIRE(nuksm_msg_type_name(hdr.type) != NULL);
    read_payload(hdr.type, nuksm_msg_payload(msg), hdr.len);

    packed = malloc(size);
    REQUIRE(nuksm_msg_pack(packed, hdr.type, hdr.seq, nuksm_msg_payload(msg),
                           hdr.len) == size);
    REQUIRE(memcmp(packed, msg, size) == 0);
    free(packed);
    free(msg);
    return 0;
}
