/*
 * nuksm wire protocol: message packing and validation.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <string.h>

#include "nuksm-proto.h"

_Static_assert(sizeof(NuksmMsgHeader) == 16, "header layout");
_Static_assert(sizeof(NuksmMsgHello) == 16 + 3 * NUKSM_NAME_LEN,
               "hello layout");
_Static_assert(sizeof(NuksmMsgInfo) % 8 == 0, "info layout");
_Static_assert(sizeof(NuksmVmEntry) % 8 == 0, "vm entry layout");
_Static_assert(sizeof(NuksmSlotRef) == 24, "slot ref layout");
_Static_assert(sizeof(NuksmCandidate) == 24, "candidate layout");
_Static_assert(sizeof(NuksmMove) == 48, "move layout");
_Static_assert(sizeof(NuksmMsgTopology) <= NUKSM_MSG_MAX - 16,
               "topology fits a datagram");
_Static_assert(NUKSM_MAX_NODES <= 256 && NUKSM_MAX_GNODES <= 256,
               "nodes fit a byte");

static const char *const policy_names[NUKSM_POLICY_ID__MAX] = {
    [NUKSM_POLICY_ID_GLOBAL]    = "global",
    [NUKSM_POLICY_ID_KSM_ORDER] = "ksm-order",
    [NUKSM_POLICY_ID_LOCAL]     = "local",
    [NUKSM_POLICY_ID_FAIR]      = "fair",
    [NUKSM_POLICY_ID_PRIORITY]  = "priority",
    [NUKSM_POLICY_ID_ADAPTIVE]  = "adaptive",
    [NUKSM_POLICY_ID_AUTO]      = "auto",
};

static const char *const msg_type_names[NUKSM_MSG__MAX] = {
    [NUKSM_MSG_HELLO]        = "HELLO",
    [NUKSM_MSG_HELLO_ACK]    = "HELLO_ACK",
    [NUKSM_MSG_ERROR]        = "ERROR",
    [NUKSM_MSG_SET_POLICY]   = "SET_POLICY",
    [NUKSM_MSG_POLICY]       = "POLICY",
    [NUKSM_MSG_GET_POLICY]   = "GET_POLICY",
    [NUKSM_MSG_SET_PRIORITY] = "SET_PRIORITY",
    [NUKSM_MSG_GET_INFO]     = "GET_INFO",
    [NUKSM_MSG_INFO]         = "INFO",
    [NUKSM_MSG_LIST_VMS]     = "LIST_VMS",
    [NUKSM_MSG_GET_SIMILARITY] = "GET_SIMILARITY",
    [NUKSM_MSG_SIMILARITY]   = "SIMILARITY",
    [NUKSM_MSG_GET_PLAN]     = "GET_PLAN",
    [NUKSM_MSG_PLAN]         = "PLAN",
    [NUKSM_MSG_GET_SKETCH]   = "GET_SKETCH",
    [NUKSM_MSG_SKETCH]       = "SKETCH",
    [NUKSM_MSG_COLOCATION]   = "COLOCATION",
    [NUKSM_MSG_APPLY_MOVE]   = "APPLY_MOVE",
    [NUKSM_MSG_APPLIED]      = "APPLIED",
    [NUKSM_MSG_VM_STATS]     = "VM_STATS",
    [NUKSM_MSG_SHARE]        = "SHARE",
    [NUKSM_MSG_SET_RUN]      = "SET_RUN",
    [NUKSM_MSG_PRUNE]        = "PRUNE",
    [NUKSM_MSG_VMS]          = "VMS",
    [NUKSM_MSG_STORE]        = "STORE",
    [NUKSM_MSG_CANDIDATES]   = "CANDIDATES",
    [NUKSM_MSG_UPLOAD_REQ]   = "UPLOAD_REQ",
    [NUKSM_MSG_UPLOAD]       = "UPLOAD",
    [NUKSM_MSG_MERGE]        = "MERGE",
    [NUKSM_MSG_MERGED]       = "MERGED",
    [NUKSM_MSG_UNMERGED]     = "UNMERGED",
    [NUKSM_MSG_RESTORE]      = "RESTORE",
    [NUKSM_MSG_TOPOLOGY]     = "TOPOLOGY",
    [NUKSM_MSG_HOME]         = "HOME",
    [NUKSM_MSG_MOVE]         = "MOVE",
    [NUKSM_MSG_MOVED]        = "MOVED",
    [NUKSM_MSG_REFUSED]      = "REFUSED",
    [NUKSM_MSG_CONDITION]    = "CONDITION",
    [NUKSM_MSG_VM_LIMIT]     = "VM_LIMIT",
    [NUKSM_MSG_RETRY]        = "RETRY",
    [NUKSM_MSG_CHARGE]       = "CHARGE",
    [NUKSM_MSG_READS]        = "READS",
    [NUKSM_MSG_WANTED]       = "WANTED",
};

const char *nuksm_msg_type_name(uint32_t type)
{
    return type > 0 && type < NUKSM_MSG__MAX ? msg_type_names[type] : NULL;
}

const char *nuksm_policy_name(uint32_t policy)
{
    return policy < NUKSM_POLICY_ID__MAX ? policy_names[policy] : NULL;
}

int nuksm_policy_parse(const char *name)
{
    for (int i = 0; i < NUKSM_POLICY_ID__MAX; i++) {
        if (name && strcmp(name, policy_names[i]) == 0) {
            return i;
        }
    }
    return -1;
}

const char *nuksm_policy_names(void)
{
    return "global, ksm-order, local, fair, priority, adaptive, auto";
}

void nuksm_strfield_set(char *field, size_t field_len, const char *src)
{
    memset(field, 0, field_len);
    if (src) {
        strncpy(field, src, field_len - 1);
    }
}

size_t nuksm_msg_pack(void *buf, NuksmMsgType type, uint32_t seq,
                      const void *payload, uint32_t len)
{
    NuksmMsgHeader hdr = {
        .magic = NUKSM_PROTO_MAGIC,
        .type = type,
        .flags = 0,
        .seq = seq,
        .len = len,
    };

    memcpy(buf, &hdr, sizeof(hdr));
    if (len) {
        memcpy((char *)buf + sizeof(hdr), payload, len);
    }
    return sizeof(hdr) + len;
}

static bool strfield_ok(const char *field, size_t len)
{
    return memchr(field, '\0', len) != NULL;
}

const char *nuksm_vm_limit_name(uint32_t limit)
{
    switch (limit) {
    case NUKSM_VM_LIMIT_USERFAULTFD: return "userfaultfd";
    case NUKSM_VM_LIMIT_MAP_COUNT:   return "map-count";
    case NUKSM_VM_LIMIT_DOMAIN_QUOTA: return "domain-quota";
    default:                         return NULL;
    }
}

const char *nuksm_domain_source_name(uint32_t source)
{
    switch (source) {
    case NUKSM_DOMAIN_SHARED:  return "shared";
    case NUKSM_DOMAIN_PRIVATE: return "private";
    case NUKSM_DOMAIN_LIBVIRT: return "libvirt";
    case NUKSM_DOMAIN_RULE:    return "rule";
    case NUKSM_DOMAIN_REQUEST: return "request";
    default:                   return NULL;
    }
}

const char *nuksm_plan_verdict_name(uint32_t verdict)
{
    switch (verdict) {
    case NUKSM_PLAN_PLANNED:    return "planned";
    case NUKSM_PLAN_PINNED:     return "pinned";
    case NUKSM_PLAN_NO_ROOM:    return "no-room";
    case NUKSM_PLAN_SMALL_GAIN: return "small-gain";
    default:                    return NULL;
    }
}

const char *nuksm_share_reason_name(uint32_t reason)
{
    switch (reason) {
    case NUKSM_SHARE_OFF:       return "off";
    case NUKSM_SHARE_NEW:       return "new";
    case NUKSM_SHARE_YIELDING:  return "yielding";
    case NUKSM_SHARE_SIGNALLED: return "signalled";
    case NUKSM_SHARE_RESTING:   return "resting";
    case NUKSM_SHARE_IDLE:      return "idle";
    case NUKSM_SHARE_HELD:      return "held";
    default:                    return NULL;
    }
}

const char *nuksm_run_name(uint32_t run)
{
    switch (run) {
    case NUKSM_RUN_ALWAYS:   return "always";
    case NUKSM_RUN_PRESSURE: return "pressure";
    case NUKSM_RUN_OFF:      return "off";
    default:                 return NULL;
    }
}

const char *nuksm_vm_state_name(uint32_t state)
{
    switch (state) {
    case NUKSM_VM_STATE_DISCONNECTED: return "disconnected";
    case NUKSM_VM_STATE_ACTIVE:       return "active";
    case NUKSM_VM_STATE_PAUSED:       return "paused";
    case NUKSM_VM_STATE_DISABLED:     return "disabled";
    case NUKSM_VM_STATE_LIMITED:      return "limited";
    default:                          return NULL;
    }
}

const char *nuksm_scheme_name(uint32_t scheme)
{
    switch (scheme) {
    case NUKSM_SCHEME_ID_GLOBAL:    return "global";
    case NUKSM_SCHEME_ID_COLOCATE:  return "colocate";
    case NUKSM_SCHEME_ID_HOT_LOCAL: return "hot-local";
    default:                        return NULL;
    }
}

bool nuksm_domain_name_valid(const char *name)
{
    size_t len = strlen(name);

    return len >= 1 && len < NUKSM_NAME_LEN &&
           strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                  "0123456789._-") == len;
}

/* A VM's limit and its reason, in VM_LIMIT and VMS. */
static const char *check_vm_limit(uint32_t limit, const char *reason,
                                  size_t reason_size)
{
    if (limit >= NUKSM_VM_LIMIT__MAX) {
        return "unknown VM limit";
    }
    if (!strfield_ok(reason, reason_size)) {
        return "unterminated limit reason";
    }
    return NULL;
}

/* Payload size every fixed-size message type must have; 0 = none. */
static size_t fixed_payload_size(uint16_t type)
{
    switch (type) {
    case NUKSM_MSG_HELLO:        return sizeof(NuksmMsgHello);
    case NUKSM_MSG_HELLO_ACK:    return sizeof(NuksmMsgHelloAck);
    case NUKSM_MSG_ERROR:        return sizeof(NuksmMsgError);
    case NUKSM_MSG_SET_POLICY:   return sizeof(NuksmMsgPolicy);
    case NUKSM_MSG_POLICY:       return sizeof(NuksmMsgPolicy);
    case NUKSM_MSG_SET_PRIORITY: return sizeof(NuksmMsgPriority);
    case NUKSM_MSG_INFO:         return sizeof(NuksmMsgInfo);
    case NUKSM_MSG_STORE:        return sizeof(NuksmMsgStore);
    case NUKSM_MSG_TOPOLOGY:     return sizeof(NuksmMsgTopology);
    case NUKSM_MSG_HOME:         return sizeof(NuksmMsgHome);
    case NUKSM_MSG_CONDITION:    return sizeof(NuksmMsgCondition);
    case NUKSM_MSG_VM_LIMIT:     return sizeof(NuksmMsgVmLimit);
    case NUKSM_MSG_CHARGE:       return sizeof(NuksmMsgCharge);
    case NUKSM_MSG_GET_SKETCH:   return sizeof(NuksmMsgGetSketch);
    case NUKSM_MSG_LIST_VMS:     return sizeof(NuksmMsgListVms);
    case NUKSM_MSG_COLOCATION:   return sizeof(NuksmMsgColocation);
    case NUKSM_MSG_APPLY_MOVE:   return sizeof(NuksmMsgApplyMove);
    case NUKSM_MSG_APPLIED:      return sizeof(NuksmMsgApplied);
    case NUKSM_MSG_VM_STATS:     return sizeof(NuksmMsgVmStats);
    case NUKSM_MSG_SHARE:        return sizeof(NuksmMsgShare);
    case NUKSM_MSG_SET_RUN:      return sizeof(NuksmMsgSetRun);
    case NUKSM_MSG_PRUNE:        return sizeof(NuksmMsgPrune);
    case NUKSM_MSG_WANTED:       return sizeof(NuksmMsgWanted);
    default:                     return 0;
    }
}

/*
 * A batch of @len bytes holds a NuksmMsgBatch, count entries of
 * @entry_size bytes and count trailing items of @item_size bytes.
 */
static bool check_batch(const void *p, size_t len, size_t entry_size,
                        size_t item_size)
{
    const NuksmMsgBatch *b = p;

    return len >= sizeof(*b) && !b->reserved &&
           len - sizeof(*b) == (size_t)b->count * (entry_size + item_size);
}

/* Slot references: node in range, status within [@min, @max]. */
static const char *check_slot_refs(const void *p, uint32_t min, uint32_t max)
{
    const NuksmMsgBatch *b = p;
    const NuksmSlotRef *r = (const NuksmSlotRef *)(b + 1);

    for (uint32_t n = 0; n < b->count; n++) {
        if (r[n].node >= NUKSM_MAX_NODES) {
            return "node out of range in slot reference";
        }
        if (r[n].status < min || r[n].status > max) {
            return "status out of range in slot reference";
        }
    }
    return NULL;
}

static bool all_zero(const void *p, size_t len)
{
    const uint8_t *b = p;

    for (size_t i = 0; i < len; i++) {
        if (b[i]) {
            return false;
        }
    }
    return true;
}

static const char *check_candidates(const void *p)
{
    const NuksmMsgBatch *b = p;
    const NuksmCandidate *c = (const NuksmCandidate *)(b + 1);

    for (uint32_t n = 0; n < b->count; n++) {
        if (c[n].gnode >= NUKSM_MAX_GNODES) {
            return "guest node out of range in CANDIDATES";
        }
        if (c[n].flags & ~NUKSM_CANDIDATE_FLAGS) {
            return "unknown flag in CANDIDATES";
        }
        if (!all_zero(c[n].reserved, sizeof(c[n].reserved))) {
            return "reserved field set in CANDIDATES";
        }
    }
    return NULL;
}

static const char *check_reads(const void *p, size_t len)
{
    const NuksmMsgReads *m = p;
    const NuksmReadRegion *r = (const NuksmReadRegion *)(m + 1);

    if (len < sizeof(*m) ||
        len - sizeof(*m) != (size_t)m->count * sizeof(*r)) {
        return "READS size does not match its count";
    }
    for (uint32_t n = 0; n < m->count; n++) {
        if (r[n].region >= UINT64_MAX / NUKSM_PAGE_SIZE /
                           NUKSM_READ_REGION_PAGES + 1) {
            return "region out of range in READS";
        }
        if (!all_zero(r[n].reserved, sizeof(r[n].reserved))) {
            return "reserved field set in READS";
        }
    }
    return NULL;
}

/* Moves: one page, both nodes in range; @to's status in [@min, @max]. */
static const char *check_moves(const void *p, uint32_t min, uint32_t max)
{
    const NuksmMsgBatch *b = p;
    const NuksmMove *m = (const NuksmMove *)(b + 1);

    for (uint32_t n = 0; n < b->count; n++) {
        if (m[n].from.page != m[n].to.page) {
            return "move between two pages";
        }
        if (m[n].from.node >= NUKSM_MAX_NODES ||
            m[n].to.node >= NUKSM_MAX_NODES) {
            return "node out of range in move";
        }
        if (m[n].from.status != NUKSM_STATUS_NONE ||
            m[n].to.status < min || m[n].to.status > max) {
            return "status out of range in move";
        }
    }
    return NULL;
}

static const char *check_topology(const NuksmMsgTopology *t)
{
    if (t->nr_gnodes < 1 || t->nr_gnodes > NUKSM_MAX_GNODES) {
        return "guest node count out of range in TOPOLOGY";
    }
    if (t->nr_vcpus > NUKSM_MAX_VCPUS) {
        return "vCPU count out of range in TOPOLOGY";
    }
    if (t->nr_ranges > NUKSM_MAX_RANGES || t->reserved) {
        return "range count out of range in TOPOLOGY";
    }
    for (uint32_t r = 0; r < NUKSM_MAX_RANGES; r++) {
        const NuksmPageRange *pr = &t->ranges[r];

        if (r >= t->nr_ranges ? !all_zero(pr, sizeof(*pr)) :
            pr->gnode >= t->nr_gnodes || pr->reserved ||
            pr->first + pr->count < pr->first) {
            return "bad RAM range in TOPOLOGY";
        }
    }
    for (uint32_t g = 0; g < NUKSM_MAX_GNODES; g++) {
        const NuksmGuestNode *gn = &t->gnodes[g];

        if (g >= t->nr_gnodes ? !all_zero(gn, sizeof(*gn)) :
            gn->policy > NUKSM_MEMPOLICY_INTERLEAVE || gn->reserved) {
            return "bad guest node in TOPOLOGY";
        }
    }
    for (uint32_t v = 0; v < NUKSM_MAX_VCPUS; v++) {
        const NuksmVcpu *vc = &t->vcpus[v];

        if (v >= t->nr_vcpus ? !all_zero(vc, sizeof(*vc)) :
            !vc->tid || vc->gnode >= t->nr_gnodes) {
            return "bad vCPU in TOPOLOGY";
        }
    }
    return NULL;
}

static const char *check_home(const NuksmMsgHome *h)
{
    if (h->nr_gnodes < 1 || h->nr_gnodes > NUKSM_MAX_GNODES ||
        h->reserved) {
        return "bad guest node count in HOME";
    }
    for (uint32_t g = 0; g < NUKSM_MAX_GNODES; g++) {
        if (g >= h->nr_gnodes ? h->home[g] || h->source[g] :
            h->home[g] >= NUKSM_MAX_NODES ||
            h->source[g] >= NUKSM_HOME__MAX) {
            return "bad home node in HOME";
        }
    }
    return NULL;
}

static const char *check_hello(const void *p)
{
    const NuksmMsgHello *h = p;

    if (!strfield_ok(h->domain, sizeof(h->domain)) ||
        !strfield_ok(h->vm_name, sizeof(h->vm_name)) ||
        !strfield_ok(h->object_id, sizeof(h->object_id))) {
        return "unterminated string in HELLO";
    }
    if (h->reserved != 0) {
        return "reserved field set in HELLO";
    }
    if (h->role != NUKSM_ROLE_VM && h->role != NUKSM_ROLE_CONTROL) {
        return "unknown client role in HELLO";
    }
    if (h->role == NUKSM_ROLE_VM &&
        (h->priority < NUKSM_PRIORITY_MIN ||
         h->priority > NUKSM_PRIORITY_MAX)) {
        return "priority out of range in HELLO";
    }
    if (h->role == NUKSM_ROLE_VM && h->domain[0] == '\0') {
        return "empty domain in HELLO";
    }
    return NULL;
}

static const char *check_hello_ack(const void *p)
{
    const NuksmMsgHelloAck *a = p;

    if (!strfield_ok(a->agent_version, sizeof(a->agent_version)) ||
        !strfield_ok(a->domain, sizeof(a->domain))) {
        return "unterminated string in HELLO_ACK";
    }
    if (a->domain_source >= NUKSM_DOMAIN__MAX) {
        return "unknown domain source in HELLO_ACK";
    }
    if (a->priority > NUKSM_PRIORITY_MAX ||
        a->priority_limit > NUKSM_PRIORITY_MAX || a->admin > 1) {
        return "value out of range in HELLO_ACK";
    }
    if (a->policy >= NUKSM_POLICY_ID__MAX) {
        return "unknown policy in HELLO_ACK";
    }
    if (a->nr_nodes < 1 || a->nr_nodes > NUKSM_MAX_NODES) {
        return "node count out of range in HELLO_ACK";
    }
    return NULL;
}

static const char *check_info(const void *p)
{
    const NuksmMsgInfo *i = p;

    if (!strfield_ok(i->agent_version, sizeof(i->agent_version)) ||
        !strfield_ok(i->condition_reason, sizeof(i->condition_reason))) {
        return "unterminated string in INFO";
    }
    if (i->policy >= NUKSM_POLICY_ID__MAX) {
        return "unknown policy in INFO";
    }
    if (i->nr_nodes < 1 || i->nr_nodes > NUKSM_MAX_NODES) {
        return "node count out of range in INFO";
    }
    if (i->conditions & ~NUKSM_COND_ALL) {
        return "unknown condition in INFO";
    }
    if (i->scope >= NUKSM_INFO__MAX) {
        return "unknown scope in INFO";
    }
    if (i->vms_reading > i->vms || i->vms_resting > i->vms) {
        return "more VMs sampling reads or resting than VMs in INFO";
    }
    if (i->run >= NUKSM_RUN__MAX || i->held > 1 || i->available_pm > 1000 ||
        i->stall_pm > 1000) {
        return "run state out of range in INFO";
    }
    return NULL;
}

static const char *check_vm_limit_msg(const void *p)
{
    const NuksmMsgVmLimit *l = p;

    if (l->reserved) {
        return "reserved field set in VM_LIMIT";
    }
    return check_vm_limit(l->limit, l->reason, sizeof(l->reason));
}

static const char *check_condition(const void *p)
{
    const NuksmMsgCondition *c = p;

    if (c->conditions & ~NUKSM_COND_ALL) {
        return "unknown condition in CONDITION";
    }
    if (c->reserved) {
        return "reserved field set in CONDITION";
    }
    if (!strfield_ok(c->reason, sizeof(c->reason))) {
        return "unterminated string in CONDITION";
    }
    return NULL;
}

static const char *check_similarity(const void *p, size_t len)
{
    const NuksmMsgSimilarity *m = p;
    const NuksmSimilarityPair *pairs;

    if (len < sizeof(*m) ||
        len - sizeof(*m) != (size_t)m->nr_vms * sizeof(NuksmSimilarityVm) +
                            (size_t)m->nr_pairs * sizeof(NuksmSimilarityPair)) {
        return "SIMILARITY size does not match its counts";
    }
    if (m->nr_vms > m->total_vms || m->nr_pairs > m->total_pairs) {
        return "SIMILARITY counts exceed their totals";
    }
    pairs = (const NuksmSimilarityPair *)((const NuksmSimilarityVm *)(m + 1) +
                                          m->nr_vms);
    for (uint32_t n = 0; n < m->nr_pairs; n++) {
        if (pairs[n].similarity_pm > 1000 ||
            pairs[n].alike_a > pairs[n].sampled_a ||
            pairs[n].alike_b > pairs[n].sampled_b) {
            return "SIMILARITY pair out of range";
        }
    }
    return NULL;
}

static const char *check_colocation(const NuksmMsgColocation *m)
{
    if (m->twin_pm > 1000 || m->plan_verdict > NUKSM_PLAN__MAX ||
        m->plan_to >= NUKSM_MAX_NODES || m->scheme >= NUKSM_SCHEME_ID__MAX) {
        return "COLOCATION out of range";
    }
    return strfield_ok(m->twin, sizeof(m->twin)) ? NULL :
           "unterminated twin name in COLOCATION";
}

/*
 * A part of at most the budget (or the least part), of at most 1024
 * cores, a reason and a pace of those there are; none but with OFF.
 */
static const char *check_share(const NuksmMsgShare *m)
{
    if (m->reason >= NUKSM_SHARE__MAX || m->pace < 1 ||
        m->pace > NUKSM_SHARE_PACE_MAX || m->budget_ppm > 1024000000u ||
        (m->max_cpu_ppm > m->budget_ppm &&
         m->max_cpu_ppm > NUKSM_SHARE_MIN_PPM) ||
        (m->reason == NUKSM_SHARE_OFF) != (m->max_cpu_ppm == 0)) {
        return "SHARE out of range";
    }
    return NULL;
}

/* A run mode of those there are. */
static const char *check_set_run(const NuksmMsgSetRun *m)
{
    return m->run >= NUKSM_RUN__MAX || m->reserved ?
           "SET_RUN out of range" : NULL;
}

/* A terminated domain name, a rate of 1..NUKSM_PRUNE_RATE_MAX. */
static const char *check_prune(const NuksmMsgPrune *m)
{
    if (!strfield_ok(m->domain, sizeof(m->domain))) {
        return "unterminated domain name in PRUNE";
    }
    return m->rate < 1 || m->rate > NUKSM_PRUNE_RATE_MAX ?
           "PRUNE rate out of range" : NULL;
}

/* A CPU budget of at most 100 cores, a state of those there are. */
static const char *check_vm_stats(const NuksmMsgVmStats *m)
{
    if (m->max_cpu_pm > 100000 || m->state >= NUKSM_VM_STATE__MAX ||
        m->reserved) {
        return "VM_STATS out of range";
    }
    return NULL;
}

static const char *check_applied(const NuksmMsgApplied *m)
{
    if (m->to >= NUKSM_MAX_NODES || m->how >= NUKSM_APPLY__MAX ||
        m->memory_moved > 1 || m->reserved) {
        return "APPLIED out of range";
    }
    return NULL;
}

static const char *check_sketch(const void *p, size_t len)
{
    const NuksmMsgSketch *m = p;
    const uint64_t *e = (const uint64_t *)(m + 1);

    if (len < sizeof(*m) ||
        len - sizeof(*m) != (size_t)m->count * sizeof(uint64_t)) {
        return "SKETCH size does not match its count";
    }
    if (m->count > NUKSM_SKETCH_MAX_ENTRIES || m->shift > 40 ||
        m->reserved) {
        return "SKETCH out of range";
    }
    for (uint32_t n = 1; n < m->count; n++) {
        if (e[n] >> 24 <= e[n - 1] >> 24) {
            return "SKETCH fingerprints not ascending";
        }
    }
    return NULL;
}

static const char *check_plan(const void *p, size_t len)
{
    const NuksmMsgPlan *m = p;
    const NuksmPlanMove *mv = (const NuksmPlanMove *)(m + 1);

    if (len < sizeof(*m) ||
        len - sizeof(*m) != (size_t)m->count * sizeof(NuksmPlanMove)) {
        return "PLAN size does not match its count";
    }
    if (m->count > m->total || m->threshold_pm > 1000) {
        return "PLAN counts out of range";
    }
    for (uint32_t n = 0; n < m->count; n++) {
        if (mv[n].verdict >= NUKSM_PLAN__MAX ||
            mv[n].from >= NUKSM_MAX_NODES || mv[n].to >= NUKSM_MAX_NODES ||
            mv[n].group >= m->groups) {
            return "PLAN move out of range";
        }
    }
    return NULL;
}

static const char *check_vms(const void *p, size_t len)
{
    const NuksmMsgVms *v = p;
    const NuksmVmEntry *e;

    if (len < sizeof(*v) ||
        (len - sizeof(*v)) != (size_t)v->count * sizeof(NuksmVmEntry)) {
        return "VMS size does not match its count";
    }
    if (v->count > v->total) {
        return "VMS count exceeds total";
    }
    e = (const NuksmVmEntry *)(v + 1);
    for (uint32_t n = 0; n < v->count; n++) {
        const char *bad;

        if (e[n].nr_gnodes > NUKSM_MAX_GNODES) {
            return "bad guest node count in VMS";
        }
        if (e[n].twin_pm > 1000 || e[n].plan_verdict > NUKSM_PLAN__MAX ||
            e[n].plan_to >= NUKSM_MAX_NODES ||
            e[n].scheme >= NUKSM_SCHEME_ID__MAX ||
            e[n].applied_to > NUKSM_MAX_NODES) {
            return "co-location out of range in VMS";
        }
        if (check_vm_stats(&e[n].scanner)) {
            return "scanner figures out of range in VMS";
        }
        if (check_share(&e[n].share)) {
            return "scan budget share out of range in VMS";
        }
        if (!strfield_ok(e[n].domain, sizeof(e[n].domain)) ||
            !strfield_ok(e[n].vm_name, sizeof(e[n].vm_name)) ||
            !strfield_ok(e[n].object_id, sizeof(e[n].object_id)) ||
            !strfield_ok(e[n].requested_domain,
                         sizeof(e[n].requested_domain))) {
            return "unterminated string in VMS";
        }
        if (e[n].domain_source >= NUKSM_DOMAIN__MAX) {
            return "unknown domain source in VMS";
        }
        bad = check_vm_limit(e[n].limit, e[n].limit_reason,
                             sizeof(e[n].limit_reason));
        if (bad) {
            return bad;
        }
    }
    return NULL;
}

static const char *check_store(const void *p)
{
    const NuksmMsgStore *st = p;

    if (st->node >= NUKSM_MAX_NODES) {
        return "node out of range in STORE";
    }
    if (!st->size || st->size % NUKSM_PAGE_SIZE) {
        return "bad size in STORE";
    }
    if (st->reserved) {
        return "reserved field set in STORE";
    }
    return NULL;
}

static const char *check_payload(uint16_t type, const void *p, size_t len)
{
    switch (type) {
    case NUKSM_MSG_HELLO:
        return check_hello(p);
    case NUKSM_MSG_HELLO_ACK:
        return check_hello_ack(p);
    case NUKSM_MSG_ERROR: {
        const NuksmMsgError *e = p;
        return strfield_ok(e->message, sizeof(e->message)) ?
               NULL : "unterminated string in ERROR";
    }
    case NUKSM_MSG_SET_POLICY:
    case NUKSM_MSG_POLICY: {
        const NuksmMsgPolicy *pol = p;
        return pol->policy < NUKSM_POLICY_ID__MAX ? NULL : "unknown policy";
    }
    case NUKSM_MSG_SET_PRIORITY: {
        const NuksmMsgPriority *pri = p;
        return pri->priority >= NUKSM_PRIORITY_MIN &&
               pri->priority <= NUKSM_PRIORITY_MAX ?
               NULL : "priority out of range";
    }
    case NUKSM_MSG_GET_POLICY:
    case NUKSM_MSG_GET_INFO:
    case NUKSM_MSG_GET_SIMILARITY:
    case NUKSM_MSG_GET_PLAN:
        return len == 0 ? NULL : "unexpected payload";
    case NUKSM_MSG_SIMILARITY:
        return check_similarity(p, len);
    case NUKSM_MSG_PLAN:
        return check_plan(p, len);
    case NUKSM_MSG_GET_SKETCH:
        return ((const NuksmMsgGetSketch *)p)->reserved ?
               "reserved field set in GET_SKETCH" : NULL;
    case NUKSM_MSG_LIST_VMS:
        return ((const NuksmMsgListVms *)p)->reserved ?
               "reserved field set in LIST_VMS" : NULL;
    case NUKSM_MSG_SKETCH:
        return check_sketch(p, len);
    case NUKSM_MSG_COLOCATION:
        return check_colocation(p);
    case NUKSM_MSG_APPLY_MOVE:
        return ((const NuksmMsgApplyMove *)p)->to < NUKSM_MAX_NODES ? NULL :
               "APPLY_MOVE node out of range";
    case NUKSM_MSG_APPLIED:
        return check_applied(p);
    case NUKSM_MSG_VM_STATS:
        return check_vm_stats(p);
    case NUKSM_MSG_SHARE:
        return check_share(p);
    case NUKSM_MSG_SET_RUN:
        return check_set_run(p);
    case NUKSM_MSG_PRUNE:
        return check_prune(p);
    case NUKSM_MSG_INFO:
        return check_info(p);
    case NUKSM_MSG_VM_LIMIT:
        return check_vm_limit_msg(p);
    case NUKSM_MSG_CHARGE:
        return NULL;            /* any amount */
    case NUKSM_MSG_CONDITION:
        return check_condition(p);
    case NUKSM_MSG_VMS:
        return check_vms(p, len);
    case NUKSM_MSG_STORE:
        return check_store(p);
    case NUKSM_MSG_CANDIDATES:
        if (!check_batch(p, len, sizeof(NuksmCandidate), 0)) {
            return "CANDIDATES size does not match its count";
        }
        return check_candidates(p);
    case NUKSM_MSG_READS:
        return check_reads(p, len);
    case NUKSM_MSG_MOVE:
        if (!check_batch(p, len, sizeof(NuksmMove), 0)) {
            return "MOVE size does not match its count";
        }
        return check_moves(p, NUKSM_STATUS_NONE, NUKSM_STATUS_NONE);
    case NUKSM_MSG_MOVED:
        if (!check_batch(p, len, sizeof(NuksmMove), 0)) {
            return "MOVED size does not match its count";
        }
        return check_moves(p, NUKSM_STATUS_MERGED, NUKSM_STATUS_FAILED);
    case NUKSM_MSG_TOPOLOGY:
        return check_topology(p);
    case NUKSM_MSG_HOME:
        return check_home(p);
    case NUKSM_MSG_UPLOAD:
        if (!check_batch(p, len, sizeof(NuksmSlotRef), NUKSM_PAGE_SIZE)) {
            return "UPLOAD size does not match its count";
        }
        return check_slot_refs(p, NUKSM_STATUS_NONE, NUKSM_STATUS_NONE);
    case NUKSM_MSG_UPLOAD_REQ:
    case NUKSM_MSG_MERGE:
    case NUKSM_MSG_RESTORE:
    case NUKSM_MSG_REFUSED:
    case NUKSM_MSG_RETRY:
        if (!check_batch(p, len, sizeof(NuksmSlotRef), 0)) {
            return "batch size does not match its count";
        }
        return check_slot_refs(p, NUKSM_STATUS_NONE, NUKSM_STATUS_NONE);
    case NUKSM_MSG_WANTED:
        return ((const NuksmMsgWanted *)p)->fragments[0] & 1 ?
               "WANTED names fragment 0" : NULL;
    case NUKSM_MSG_MERGED:
        if (!check_batch(p, len, sizeof(NuksmSlotRef), 0)) {
            return "MERGED size does not match its count";
        }
        return check_slot_refs(p, NUKSM_STATUS_MERGED, NUKSM_STATUS_FAILED);
    case NUKSM_MSG_UNMERGED:
        if (!check_batch(p, len, sizeof(NuksmSlotRef), 0)) {
            return "UNMERGED size does not match its count";
        }
        return check_slot_refs(p, NUKSM_STATUS_COW, NUKSM_STATUS_REBUILT);
    default:
        return "unknown message type";
    }
}

const char *nuksm_condition_name(NuksmCondition cond)
{
    switch (cond) {
    case NUKSM_COND_STORE_FULL:   return "store-full";
    case NUKSM_COND_AGENT_MEMORY: return "agent-memory";
    case NUKSM_COND_DOMAIN_QUOTA: return "domain-quota";
    default:                      return NULL;
    }
}

const char *nuksm_msg_check(const void *buf, size_t size)
{
    NuksmMsgHeader hdr;
    size_t fixed;

    if (size < sizeof(hdr)) {
        return "message shorter than its header";
    }
    if (size > NUKSM_MSG_MAX) {
        return "message larger than NUKSM_MSG_MAX";
    }
    memcpy(&hdr, buf, sizeof(hdr));
    if (hdr.magic != NUKSM_PROTO_MAGIC) {
        return "bad magic";
    }
    if (hdr.flags != 0) {
        return "unknown flags";
    }
    if (hdr.len != size - sizeof(hdr)) {
        return "payload length does not match datagram size";
    }
    if (hdr.type == 0 || hdr.type >= NUKSM_MSG__MAX) {
        return "unknown message type";
    }
    fixed = fixed_payload_size(hdr.type);
    if (fixed && hdr.len != fixed) {
        return "wrong payload size for message type";
    }
    return check_payload(hdr.type, nuksm_msg_payload(buf), hdr.len);
}
