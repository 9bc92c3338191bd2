/*
 * Writes the wire protocol of nuksm-proto.h to stdout as a Python module
 * (nuksm_proto.py in the build tree) for the integration tests, which
 * keep no copy of it: every constant, the names of the message types and
 * policies, and a struct.Struct format for every message layout.
 *
 * Each format is built from the compiler's own layout (offsetof, sizeof)
 * and checked against it: a member that does not fill its place exactly,
 * a member left out or padding the compiler added fails the build, naming
 * the struct.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nuksm-proto.h"

/* One member: its struct.Struct code ("I", "64s", "6x", ...) and place. */
typedef struct Member {
    const char *code;
    size_t offset;
    size_t size;
} Member;

#define MEMBER(type, member, code) \
    { code, offsetof(type, member), sizeof(((type *)0)->member) }

/*
 * The members of a NuksmMsgVmStats, in @type at @prefix (empty, or
 * "scanner." within a NuksmVmEntry).
 */
#define VM_STATS_MEMBERS(type, prefix) \
    MEMBER(type, prefix eligible_pages, "Q"), \
    MEMBER(type, prefix pages_scanned, "Q"), \
    MEMBER(type, prefix full_scans, "Q"), \
    MEMBER(type, prefix zero_pages, "Q"), \
    MEMBER(type, prefix cow_breaks, "Q"), \
    MEMBER(type, prefix pages_volatile, "Q"), \
    MEMBER(type, prefix scan_rate, "Q"), \
    MEMBER(type, prefix scan_cpu_ns, "Q"), \
    MEMBER(type, prefix hints_received, "Q"), \
    MEMBER(type, prefix hints_served, "Q"), \
    MEMBER(type, prefix hints_merged, "Q"), \
    MEMBER(type, prefix tracked_writes, "Q"), \
    MEMBER(type, prefix huge_held_pages, "Q"), \
    MEMBER(type, prefix huge_kept, "Q"), \
    MEMBER(type, prefix huge_splits, "Q"), \
    MEMBER(type, prefix huge_rebuilt, "Q"), \
    MEMBER(type, prefix rest_ms, "I"), \
    MEMBER(type, prefix max_cpu_pm, "I"), \
    MEMBER(type, prefix state, "I"), \
    MEMBER(type, prefix reserved, "I")

/* The members of a NuksmMsgShare, as VM_STATS_MEMBERS. */
#define SHARE_MEMBERS(type, prefix) \
    MEMBER(type, prefix max_cpu_ppm, "I"), \
    MEMBER(type, prefix reason, "I"), \
    MEMBER(type, prefix pace, "I"), \
    MEMBER(type, prefix vms, "I"), \
    MEMBER(type, prefix budget_ppm, "I"), \
    MEMBER(type, prefix yield, "I")

static int failures;

/* Bytes a struct.Struct code takes with "=" (no alignment). */
static size_t code_size(const char *code)
{
    size_t count = isdigit((unsigned char)*code) ? strtoul(code, NULL, 10)
                                                 : 1;
    char letter = code[strspn(code, "0123456789")];

    switch (letter) {
    case 'Q':
        return count * 8;
    case 'I':
        return count * 4;
    case 'H':
        return count * 2;
    case 'B': case 's': case 'x':
        return count;
    default:
        fprintf(stderr, "nuksm-proto-py: unknown code '%s'\n", code);
        exit(1);
    }
}

static void emit_struct(const char *name, size_t size, const Member *m,
                        size_t n)
{
    char format[256] = "=";
    size_t at = 0;

    for (size_t i = 0; i < n; i++) {
        if (m[i].offset != at || code_size(m[i].code) != m[i].size) {
            fprintf(stderr, "nuksm-proto-py: %s: member %zu ('%s') is at "
                    "%zu with %zu bytes, the format says %zu with %zu: "
                    "a member is missing or its code is wrong\n", name, i,
                    m[i].code, m[i].offset, m[i].size, at,
                    code_size(m[i].code));
            failures++;
        }
        strcat(format, m[i].code);
        at = m[i].offset + m[i].size;
    }
    if (at != size) {
        fprintf(stderr, "nuksm-proto-py: %s: %zu bytes, the format %zu\n",
                name, size, at);
        failures++;
    }
    printf("%s = struct.Struct(\"%s\")\n", name, format);
}

/* The first @size bytes of a message, its members listed in order. */
#define STRUCT_PART(name, size, ...)                                      \
    do {                                                                  \
        const Member m_[] = { __VA_ARGS__ };                              \
        emit_struct(name, size, m_, sizeof(m_) / sizeof(m_[0]));          \
    } while (0)

#define STRUCT(name, type, ...) STRUCT_PART(name, sizeof(type), __VA_ARGS__)

#define CONST(pyname, value) \
    printf("%s = %llu\n", pyname, (unsigned long long)(value))

/* A list of the names @name() gives the ids 0..@count-1. */
static void emit_names(const char *pyname, const char *(*name)(uint32_t),
                  uint32_t count)
{
    printf("%s = [", pyname);
    for (uint32_t i = 0; i < count; i++) {
        printf("%s\"%s\"", i ? ", " : "", name(i));
    }
    printf("]\n");
}

static void emit_constants(void)
{
    CONST("PROTO_MAGIC", NUKSM_PROTO_MAGIC);
    CONST("PROTO_VERSION", NUKSM_PROTO_VERSION);
    CONST("MSG_MAX", NUKSM_MSG_MAX);
    CONST("FRAGMENTS", NUKSM_FRAGMENTS);
    CONST("CANDIDATE_WANTED", NUKSM_CANDIDATE_WANTED);
    CONST("CANDIDATE_LANDING", NUKSM_CANDIDATE_LANDING);
    CONST("NUKSM_PAGE_SIZE", NUKSM_PAGE_SIZE);
    CONST("NAME_LEN", NUKSM_NAME_LEN);
    CONST("MAX_NODES", NUKSM_MAX_NODES);
    CONST("MAX_GNODES", NUKSM_MAX_GNODES);
    CONST("MAX_VCPUS", NUKSM_MAX_VCPUS);
    CONST("MAX_RANGES", NUKSM_MAX_RANGES);
    CONST("PRIORITY_MIN", NUKSM_PRIORITY_MIN);
    CONST("PRIORITY_MAX", NUKSM_PRIORITY_MAX);
    CONST("IDLE_NEVER", NUKSM_IDLE_NEVER);
    CONST("SLOT_BITS", NUKSM_SLOT_BITS);
    CONST("CANDIDATES_MAX", NUKSM_CANDIDATES_MAX);
    CONST("SLOTREFS_MAX", NUKSM_SLOTREFS_MAX);
    CONST("MOVES_MAX", NUKSM_MOVES_MAX);
    CONST("UPLOAD_MAX", NUKSM_UPLOAD_MAX);
    CONST("READS_MAX", NUKSM_READS_MAX);
    CONST("READ_REGION_PAGES", NUKSM_READ_REGION_PAGES);
    CONST("VMS_MAX_ENTRIES", NUKSM_VMS_MAX_ENTRIES);

    for (uint32_t t = 1; t < NUKSM_MSG__MAX; t++) {
        printf("MSG_%s = %u\n", nuksm_msg_type_name(t), t);
    }
    CONST("ERR_VERSION", NUKSM_ERR_VERSION);
    CONST("ERR_BAD_MESSAGE", NUKSM_ERR_BAD_MESSAGE);
    CONST("ERR_HANDSHAKE", NUKSM_ERR_HANDSHAKE);
    CONST("ERR_DENIED", NUKSM_ERR_DENIED);
    CONST("INFO_HOST", NUKSM_INFO_HOST);
    CONST("INFO_DOMAIN", NUKSM_INFO_DOMAIN);
    CONST("INFO_NONE", NUKSM_INFO_NONE);
    CONST("ROLE_VM", NUKSM_ROLE_VM);
    CONST("ROLE_CONTROL", NUKSM_ROLE_CONTROL);
    CONST("COND_STORE_FULL", NUKSM_COND_STORE_FULL);
    CONST("COND_AGENT_MEMORY", NUKSM_COND_AGENT_MEMORY);
    CONST("COND_DOMAIN_QUOTA", NUKSM_COND_DOMAIN_QUOTA);
    CONST("VM_LIMIT_NONE", NUKSM_VM_LIMIT_NONE);
    CONST("VM_LIMIT_USERFAULTFD", NUKSM_VM_LIMIT_USERFAULTFD);
    CONST("VM_LIMIT_MAP_COUNT", NUKSM_VM_LIMIT_MAP_COUNT);
    CONST("STATUS_NONE", NUKSM_STATUS_NONE);
    CONST("STATUS_MERGED", NUKSM_STATUS_MERGED);
    CONST("STATUS_CHANGED", NUKSM_STATUS_CHANGED);
    CONST("STATUS_GONE", NUKSM_STATUS_GONE);
    CONST("STATUS_FAILED", NUKSM_STATUS_FAILED);
    CONST("STATUS_COW", NUKSM_STATUS_COW);
    CONST("STATUS_DISCARDED", NUKSM_STATUS_DISCARDED);
    CONST("STATUS_PRUNED", NUKSM_STATUS_PRUNED);
    CONST("STATUS_REBUILT", NUKSM_STATUS_REBUILT);
    CONST("MEMPOLICY_DEFAULT", NUKSM_MEMPOLICY_DEFAULT);
    CONST("MEMPOLICY_PREFERRED", NUKSM_MEMPOLICY_PREFERRED);
    CONST("MEMPOLICY_BIND", NUKSM_MEMPOLICY_BIND);
    CONST("MEMPOLICY_INTERLEAVE", NUKSM_MEMPOLICY_INTERLEAVE);
    CONST("HOME_DEFAULT", NUKSM_HOME_DEFAULT);
    CONST("HOME_PINNED", NUKSM_HOME_PINNED);
    CONST("HOME_BACKEND", NUKSM_HOME_BACKEND);
    CONST("HOME_RUNNING", NUKSM_HOME_RUNNING);
    CONST("HOME_MEMORY", NUKSM_HOME_MEMORY);

    emit_names("DOMAIN_SOURCES", nuksm_domain_source_name, NUKSM_DOMAIN__MAX);
    printf("DEFAULT_DOMAIN = \"%s\"\n", NUKSM_DEFAULT_DOMAIN);
    emit_names("SHARE_REASONS", nuksm_share_reason_name, NUKSM_SHARE__MAX);
    CONST("SHARE_MIN_PPM", NUKSM_SHARE_MIN_PPM);
    CONST("SHARE_PACE_MAX", NUKSM_SHARE_PACE_MAX);
    emit_names("RUNS", nuksm_run_name, NUKSM_RUN__MAX);
    emit_names("POLICIES", nuksm_policy_name, NUKSM_POLICY_ID__MAX);
}

static void emit_structs(void)
{
    STRUCT("HEADER", NuksmMsgHeader,
           MEMBER(NuksmMsgHeader, magic, "I"),
           MEMBER(NuksmMsgHeader, type, "H"),
           MEMBER(NuksmMsgHeader, flags, "H"),
           MEMBER(NuksmMsgHeader, seq, "I"),
           MEMBER(NuksmMsgHeader, len, "I"));
    STRUCT("HELLO", NuksmMsgHello,
           MEMBER(NuksmMsgHello, version, "I"),
           MEMBER(NuksmMsgHello, role, "I"),
           MEMBER(NuksmMsgHello, priority, "I"),
           MEMBER(NuksmMsgHello, reserved, "I"),
           MEMBER(NuksmMsgHello, domain, "64s"),
           MEMBER(NuksmMsgHello, vm_name, "64s"),
           MEMBER(NuksmMsgHello, object_id, "64s"));
    STRUCT("HELLO_ACK", NuksmMsgHelloAck,
           MEMBER(NuksmMsgHelloAck, version, "I"),
           MEMBER(NuksmMsgHelloAck, client_id, "I"),
           MEMBER(NuksmMsgHelloAck, policy, "I"),
           MEMBER(NuksmMsgHelloAck, nr_nodes, "I"),
           MEMBER(NuksmMsgHelloAck, agent_version, "32s"),
           MEMBER(NuksmMsgHelloAck, domain_source, "I"),
           MEMBER(NuksmMsgHelloAck, priority, "I"),
           MEMBER(NuksmMsgHelloAck, priority_limit, "I"),
           MEMBER(NuksmMsgHelloAck, admin, "I"),
           MEMBER(NuksmMsgHelloAck, domain, "64s"));
    STRUCT("ERROR", NuksmMsgError,
           MEMBER(NuksmMsgError, code, "I"),
           MEMBER(NuksmMsgError, reserved, "I"),
           MEMBER(NuksmMsgError, message, "256s"));
    STRUCT("POLICY", NuksmMsgPolicy,
           MEMBER(NuksmMsgPolicy, policy, "I"));
    STRUCT("PRIORITY", NuksmMsgPriority,
           MEMBER(NuksmMsgPriority, priority, "I"));
    STRUCT("INFO", NuksmMsgInfo,
           MEMBER(NuksmMsgInfo, agent_version, "32s"),
           MEMBER(NuksmMsgInfo, policy, "I"),
           MEMBER(NuksmMsgInfo, vms, "I"),
           MEMBER(NuksmMsgInfo, nr_nodes, "I"),
           MEMBER(NuksmMsgInfo, conditions, "I"),
           MEMBER(NuksmMsgInfo, scope, "I"),
           MEMBER(NuksmMsgInfo, vms_reading, "I"),
           MEMBER(NuksmMsgInfo, scan_budget_ppm, "I"),
           MEMBER(NuksmMsgInfo, vms_resting, "I"),
           MEMBER(NuksmMsgInfo, run, "I"),
           MEMBER(NuksmMsgInfo, held, "I"),
           MEMBER(NuksmMsgInfo, available_pm, "I"),
           MEMBER(NuksmMsgInfo, stall_pm, "I"),
           MEMBER(NuksmMsgInfo, pages_shared, "Q"),
           MEMBER(NuksmMsgInfo, pages_sharing, "Q"),
           MEMBER(NuksmMsgInfo, pages_moved, "Q"),
           MEMBER(NuksmMsgInfo, moves_pending, "Q"),
           MEMBER(NuksmMsgInfo, orphan_pages, "Q"),
           MEMBER(NuksmMsgInfo, store_pages, "64Q"),
           MEMBER(NuksmMsgInfo, condition_reason, "256s"));
    STRUCT("LIST_VMS", NuksmMsgListVms,
           MEMBER(NuksmMsgListVms, from_id, "I"),
           MEMBER(NuksmMsgListVms, reserved, "I"));
    STRUCT("VMS", NuksmMsgVms,
           MEMBER(NuksmMsgVms, count, "I"),
           MEMBER(NuksmMsgVms, total, "I"));
    STRUCT("VM_ENTRY", NuksmVmEntry,
           MEMBER(NuksmVmEntry, client_id, "I"),
           MEMBER(NuksmVmEntry, pid, "I"),
           MEMBER(NuksmVmEntry, uid, "I"),
           MEMBER(NuksmVmEntry, priority, "I"),
           MEMBER(NuksmVmEntry, domain, "64s"),
           MEMBER(NuksmVmEntry, vm_name, "64s"),
           MEMBER(NuksmVmEntry, object_id, "64s"),
           MEMBER(NuksmVmEntry, requested_domain, "64s"),
           MEMBER(NuksmVmEntry, domain_source, "I"),
           MEMBER(NuksmVmEntry, priority_limit, "I"),
           MEMBER(NuksmVmEntry, merged_pages, "Q"),
           MEMBER(NuksmVmEntry, merged_local, "Q"),
           MEMBER(NuksmVmEntry, merged_remote, "Q"),
           MEMBER(NuksmVmEntry, nr_gnodes, "I"),
           MEMBER(NuksmVmEntry, limit, "I"),
           MEMBER(NuksmVmEntry, home, "64s"),
           MEMBER(NuksmVmEntry, limit_reason, "128s"),
           MEMBER(NuksmVmEntry, libvirt_name, "64s"),
           MEMBER(NuksmVmEntry, libvirt_uuid, "40s"),
           MEMBER(NuksmVmEntry, agent_cpu_ns, "Q"),
           MEMBER(NuksmVmEntry, throttled_ns, "Q"),
           MEMBER(NuksmVmEntry, uploads_read, "Q"),
           MEMBER(NuksmVmEntry, uploads_sent, "Q"),
           MEMBER(NuksmVmEntry, read_errno, "I"),
           MEMBER(NuksmVmEntry, reserved2, "I"),
           MEMBER(NuksmVmEntry, reads_local, "Q"),
           MEMBER(NuksmVmEntry, reads_remote, "Q"),
           MEMBER(NuksmVmEntry, read_window_ms, "I"),
           MEMBER(NuksmVmEntry, read_hot_regions, "I"),
           MEMBER(NuksmVmEntry, twin_id, "I"),
           MEMBER(NuksmVmEntry, twin_pm, "I"),
           MEMBER(NuksmVmEntry, plan_to, "I"),
           MEMBER(NuksmVmEntry, plan_verdict, "I"),
           MEMBER(NuksmVmEntry, scheme, "I"),
           MEMBER(NuksmVmEntry, applied_to, "I"),
           VM_STATS_MEMBERS(NuksmVmEntry, scanner.),
           SHARE_MEMBERS(NuksmVmEntry, share.));
    STRUCT("VM_STATS", NuksmMsgVmStats, VM_STATS_MEMBERS(NuksmMsgVmStats, ));
    STRUCT("SHARE", NuksmMsgShare, SHARE_MEMBERS(NuksmMsgShare, ));
    STRUCT("SET_RUN", NuksmMsgSetRun,
           MEMBER(NuksmMsgSetRun, run, "I"),
           MEMBER(NuksmMsgSetRun, reserved, "I"));
    STRUCT("PRUNE", NuksmMsgPrune,
           MEMBER(NuksmMsgPrune, domain, "64s"),
           MEMBER(NuksmMsgPrune, rate, "I"),
           MEMBER(NuksmMsgPrune, vms, "I"));
    CONST("PRUNE_RATE_MAX", NUKSM_PRUNE_RATE_MAX);
    STRUCT("APPLY_MOVE", NuksmMsgApplyMove,
           MEMBER(NuksmMsgApplyMove, client_id, "I"),
           MEMBER(NuksmMsgApplyMove, to, "I"));
    STRUCT("VM_LIMIT", NuksmMsgVmLimit,
           MEMBER(NuksmMsgVmLimit, limit, "I"),
           MEMBER(NuksmMsgVmLimit, reserved, "I"),
           MEMBER(NuksmMsgVmLimit, reason, "128s"));
    STRUCT("CHARGE", NuksmMsgCharge,
           MEMBER(NuksmMsgCharge, cpu_ns, "Q"));
    STRUCT("CONDITION", NuksmMsgCondition,
           MEMBER(NuksmMsgCondition, conditions, "I"),
           MEMBER(NuksmMsgCondition, reserved, "I"),
           MEMBER(NuksmMsgCondition, reason, "256s"));
    STRUCT("STORE", NuksmMsgStore,
           MEMBER(NuksmMsgStore, node, "I"),
           MEMBER(NuksmMsgStore, reserved, "I"),
           MEMBER(NuksmMsgStore, size, "Q"));
    /* TOPOLOGY: this head, then MAX_GNODES GUEST_NODE, MAX_VCPUS VCPU */
    /* and MAX_RANGES PAGE_RANGE */
    STRUCT_PART("TOPOLOGY_HEAD", offsetof(NuksmMsgTopology, gnodes),
                MEMBER(NuksmMsgTopology, nr_gnodes, "I"),
                MEMBER(NuksmMsgTopology, nr_vcpus, "I"),
                MEMBER(NuksmMsgTopology, nr_ranges, "I"),
                MEMBER(NuksmMsgTopology, reserved, "I"));
    STRUCT("GUEST_NODE", NuksmGuestNode,
           MEMBER(NuksmGuestNode, host_nodes, "Q"),
           MEMBER(NuksmGuestNode, policy, "I"),
           MEMBER(NuksmGuestNode, reserved, "I"));
    STRUCT("VCPU", NuksmVcpu,
           MEMBER(NuksmVcpu, tid, "I"),
           MEMBER(NuksmVcpu, gnode, "I"));
    STRUCT("PAGE_RANGE", NuksmPageRange,
           MEMBER(NuksmPageRange, first, "Q"),
           MEMBER(NuksmPageRange, count, "Q"),
           MEMBER(NuksmPageRange, host, "Q"),
           MEMBER(NuksmPageRange, gnode, "I"),
           MEMBER(NuksmPageRange, reserved, "I"));
    STRUCT("HOME", NuksmMsgHome,
           MEMBER(NuksmMsgHome, nr_gnodes, "I"),
           MEMBER(NuksmMsgHome, reserved, "I"),
           MEMBER(NuksmMsgHome, home, "64s"),
           MEMBER(NuksmMsgHome, source, "64s"));
    STRUCT("BATCH", NuksmMsgBatch,
           MEMBER(NuksmMsgBatch, count, "I"),
           MEMBER(NuksmMsgBatch, reserved, "I"));
    STRUCT("CANDIDATE", NuksmCandidate,
           MEMBER(NuksmCandidate, page, "Q"),
           MEMBER(NuksmCandidate, digest, "Q"),
           MEMBER(NuksmCandidate, gnode, "B"),
           MEMBER(NuksmCandidate, idle, "B"),
           MEMBER(NuksmCandidate, flags, "B"),
           MEMBER(NuksmCandidate, reserved, "5x"));
    /* READS: this head, then count READ_REGION */
    STRUCT("READS", NuksmMsgReads,
           MEMBER(NuksmMsgReads, count, "I"),
           MEMBER(NuksmMsgReads, window_ms, "I"),
           MEMBER(NuksmMsgReads, reads_local, "Q"),
           MEMBER(NuksmMsgReads, reads_remote, "Q"));
    STRUCT("READ_REGION", NuksmReadRegion,
           MEMBER(NuksmReadRegion, region, "Q"),
           MEMBER(NuksmReadRegion, idle, "B"),
           MEMBER(NuksmReadRegion, reserved, "7x"));
    STRUCT("SLOTREF", NuksmSlotRef,
           MEMBER(NuksmSlotRef, page, "Q"),
           MEMBER(NuksmSlotRef, node, "I"),
           MEMBER(NuksmSlotRef, slot, "I"),
           MEMBER(NuksmSlotRef, gen, "I"),
           MEMBER(NuksmSlotRef, status, "I"));
}

int main(void)
{
    printf("# Generated from libnuksm/nuksm-proto.h by nuksm-proto-py: "
           "do not edit.\n"
           "# SPDX-License-Identifier: GPL-2.0-or-later\n\n"
           "import struct\n\n");
    emit_constants();
    printf("\n");
    emit_structs();
    return failures ? 1 : 0;
}
