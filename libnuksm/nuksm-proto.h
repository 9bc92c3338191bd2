/*
 * nuksm wire protocol between QEMU (-object nuksm), nuksmctl and nuksmd.
 *
 * Transport: AF_UNIX SOCK_SEQPACKET, one message per datagram, host byte
 * order (both ends always run on the same host).  Every message starts with
 * a NuksmMsgHeader followed by exactly hdr.len bytes of payload; the payload
 * layout is fixed by hdr.type.  Strings are fixed-size, NUL-terminated
 * fields.  A receiver validates every message with nuksm_msg_check() before
 * looking at its payload.
 *
 * The rules both sides keep are written here and nowhere else; a side
 * that breaks one is a misbehaving peer (the agent answers ERROR and
 * disconnects it, QEMU disconnects).
 *
 * Order.  A client's first message is HELLO; the agent answers HELLO_ACK
 * (to a VM with /dev/userfaultfd attached when the agent has it) or ERROR,
 * and only then takes other requests.  The agent then sends a VM one STORE
 * per node (each with that node's store file, read-only) and a CONDITION.
 * The VM sends TOPOLOGY (again whenever its layout changes, and the agent
 * answers HOME), and one RESTORE, in batches, of every page it still maps
 * from a store, before its first merge message of the connection
 * (CANDIDATES, UPLOAD, MERGED, UNMERGED, MOVED): what the agent kept for it
 * from an earlier connection and it did not restore by then is dropped.
 * The agent handles a client's messages in order, and sends everything
 * one produced for that client before it handles the next.
 *
 * seq.  A request carries a seq that is not 0, chosen by its sender; the
 * reply (HELLO_ACK, POLICY, INFO, VMS, ERROR) echoes it.  seq 0 marks a
 * message that answers no request by seq: notifications (POLICY after
 * another client's SET_POLICY, CONDITION, HOME, STORE) and the merge
 * messages, which answer each other entry by entry (a page and a slot
 * reference), not by seq.
 *
 * Obligations of the merge messages (VM clients only):
 * - The agent sends UPLOAD_REQ only for pages of that VM's CANDIDATES,
 *   where it cannot read them from the VM's memory itself.  The VM sends
 *   UPLOAD only for entries of an UPLOAD_REQ, each at most once; an entry
 *   it cannot read goes unanswered.  An upload not in within 5 seconds
 *   passes to another page that shares the slot, and the late one, should
 *   it come, is ignored: no VM holds back another's merge.
 * - Every MERGE entry gets exactly one MERGED entry (its status says the
 *   outcome), and every MOVE entry exactly one MOVED entry, unless the
 *   connection ends first; the VM may have mapped the slot then, so the
 *   agent keeps it until the VM's RESTORE says, or no process maps it.
 * - A MERGED entry with status MERGED, a MOVED one with MERGED, and an
 *   accepted RESTORE entry each make a reference.  UNMERGED ends one, once,
 *   when a write or a discard made the page leave its slot; nothing else
 *   does while the connection lasts.
 *
 * Generations.  A slot's generation changes whenever the agent frees the
 * slot, and starts at a random value in each agent, so (node, slot, gen)
 * names one content for as long as anyone holds a reference to it.  The
 * agent frees a slot only when no page uses it: none maps it, none was
 * sent a MERGE or MOVE for it without its answer.  Each written slot has
 * a record beside it in the store (its generation and its domain's key),
 * which a restarted agent checks RESTORE entries against.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSM_PROTO_H
#define NUKSM_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NUKSM_PROTO_MAGIC   0x4d534b4eu   /* "NKSM" in little-endian memory */
#define NUKSM_PROTO_VERSION 22u

/* Largest datagram either side sends or accepts, header included. */
#define NUKSM_MSG_MAX       65536u

#define NUKSM_NAME_LEN      64u   /* domain, VM name, object id */
#define NUKSM_VERSION_LEN   32u   /* agent version string */
#define NUKSM_ERROR_LEN     256u  /* human-readable error text */
#define NUKSM_REASON_LEN    128u  /* why a VM holds back its merging */
#define NUKSM_UUID_LEN      40u   /* a UUID's 36 characters, NUL, padding */
#define NUKSM_MAX_NODES     64u   /* host NUMA nodes reported per message */
#define NUKSM_PAGE_SIZE     4096u /* the only page size nuksm deduplicates */
#define NUKSM_MAX_GNODES    64u   /* guest NUMA nodes a VM reports */
#define NUKSM_MAX_VCPUS     1024u /* vCPU threads a VM reports */
#define NUKSM_MAX_RANGES    128u  /* RAM ranges a VM reports */

/*
 * Slots per node's store: a slot number has NUKSM_SLOT_BITS bits (slot s
 * is the page at s * NUKSM_PAGE_SIZE of the node's store file).
 */
#define NUKSM_SLOT_BITS     24u
#define NUKSM_SLOTS_PER_NODE (1u << NUKSM_SLOT_BITS)

/*
 * A candidate's @idle: hotness windows since the page was last seen
 * written, saturating here; a page never seen written has it too.
 */
#define NUKSM_IDLE_NEVER    255u

typedef enum NuksmMsgType {
    NUKSM_MSG_HELLO        = 1,  /* client -> agent, first message */
    NUKSM_MSG_HELLO_ACK    = 2,  /* agent -> client, handshake accepted */
    NUKSM_MSG_ERROR        = 3,  /* agent -> client, reply to any request */
    NUKSM_MSG_SET_POLICY   = 4,  /* client -> agent; reply POLICY or ERROR */
    NUKSM_MSG_POLICY       = 5,  /* agent -> client; seq 0 = broadcast */
    NUKSM_MSG_GET_POLICY   = 6,  /* client -> agent; reply POLICY */
    NUKSM_MSG_SET_PRIORITY = 7,  /* VM client -> agent; no reply */
    NUKSM_MSG_GET_INFO     = 8,  /* client -> agent; reply INFO */
    NUKSM_MSG_INFO         = 9,  /* agent -> client */
    NUKSM_MSG_LIST_VMS     = 10, /* client -> agent; reply VMS */
    NUKSM_MSG_VMS          = 11, /* agent -> client */
    /* The merge engine (VM clients only) */
    NUKSM_MSG_STORE        = 12, /* agent -> VM + fd: a node's store */
    NUKSM_MSG_CANDIDATES   = 13, /* VM -> agent: pages with stable digests */
    NUKSM_MSG_UPLOAD_REQ   = 14, /* agent -> VM: send these pages' content */
    NUKSM_MSG_UPLOAD       = 15, /* VM -> agent: content for new slots */
    NUKSM_MSG_MERGE        = 16, /* agent -> VM: map these pages on slots */
    NUKSM_MSG_MERGED       = 17, /* VM -> agent: outcome of each MERGE */
    NUKSM_MSG_UNMERGED     = 18, /* VM -> agent: pages that left their slot */
    NUKSM_MSG_RESTORE      = 19, /* VM -> agent: merged pages, on reconnect */
    /* NUMA placement */
    NUKSM_MSG_TOPOLOGY     = 20, /* VM -> agent: guest nodes, vCPU threads */
    NUKSM_MSG_HOME         = 21, /* agent -> VM: home of each guest node */
    NUKSM_MSG_MOVE         = 22, /* agent -> VM: remap merged pages */
    NUKSM_MSG_MOVED        = 23, /* VM -> agent: outcome of each MOVE */
    /* Recovery */
    NUKSM_MSG_REFUSED      = 24, /* agent -> VM: RESTORE entries not taken */
    NUKSM_MSG_CONDITION    = 25, /* agent -> VM: what stops merging now */
    NUKSM_MSG_VM_LIMIT     = 26, /* VM -> agent: what stops its merging */
    NUKSM_MSG_RETRY        = 27, /* agent -> VM: offer these pages again */
    NUKSM_MSG_CHARGE       = 28, /* agent -> VM: CPU its messages cost */
    NUKSM_MSG_READS        = 29, /* VM -> agent: read hotness of merged */
                                 /* pages, by region (since protocol 13) */
    /* Similarity (since protocol 14) */
    NUKSM_MSG_GET_SIMILARITY = 30, /* control -> agent; reply SIMILARITY */
    NUKSM_MSG_SIMILARITY   = 31, /* agent -> control */
    NUKSM_MSG_GET_PLAN     = 32, /* control -> agent; reply PLAN */
    NUKSM_MSG_PLAN         = 33, /* agent -> control */
    NUKSM_MSG_GET_SKETCH   = 34, /* control -> agent; reply SKETCH */
    NUKSM_MSG_SKETCH       = 35, /* agent -> control */
    NUKSM_MSG_COLOCATION   = 36, /* agent -> VM: its twin, its planned */
                                 /* move */
    /* Co-location moves (since protocol 15) */
    NUKSM_MSG_APPLY_MOVE   = 37, /* control -> agent; reply APPLIED or */
                                 /* ERROR */
    NUKSM_MSG_APPLIED      = 38, /* agent -> control */
    NUKSM_MSG_VM_STATS     = 39, /* VM -> agent: its scanner's counters */
                                 /* (since protocol 16) */
    NUKSM_MSG_WANTED       = 40, /* agent -> VM: offer again your pages */
                                 /* of these contents (since protocol 17) */
    NUKSM_MSG_SHARE        = 41, /* agent -> VM: its part of the host's */
                                 /* scan budget (since protocol 18) */
    /* When merging works, at run time (since protocol 19) */
    NUKSM_MSG_SET_RUN      = 42, /* control -> agent; reply INFO or ERROR */
    NUKSM_MSG_PRUNE        = 43, /* control -> agent; reply PRUNE or */
                                 /* ERROR; agent -> VM (seq 0): unmerge */
                                 /* every merged page */
    NUKSM_MSG__MAX,
} NuksmMsgType;

typedef enum NuksmErrorCode {
    NUKSM_ERR_VERSION     = 1,   /* protocol version mismatch */
    NUKSM_ERR_BAD_MESSAGE = 2,   /* malformed or unexpected message */
    NUKSM_ERR_HANDSHAKE   = 3,   /* request before HELLO, or HELLO twice */
    NUKSM_ERR_DENIED      = 4,   /* the client's role or credentials do not */
                                 /* allow it (since protocol 8) */
} NuksmErrorCode;

/*
 * Placement policies.  The numbering is part of the protocol; the names
 * are the ones users type and match QAPI's NuksmPolicy enum.
 */
typedef enum NuksmPolicyId {
    NUKSM_POLICY_ID_GLOBAL    = 0,
    NUKSM_POLICY_ID_KSM_ORDER = 1,
    NUKSM_POLICY_ID_LOCAL     = 2,
    NUKSM_POLICY_ID_FAIR      = 3,
    NUKSM_POLICY_ID_PRIORITY  = 4,
    NUKSM_POLICY_ID_ADAPTIVE  = 5,
    NUKSM_POLICY_ID_AUTO      = 6,   /* since protocol 15 */
    NUKSM_POLICY_ID__MAX,
} NuksmPolicyId;

typedef enum NuksmClientRole {
    NUKSM_ROLE_VM      = 1,      /* a QEMU with -object nuksm */
    NUKSM_ROLE_CONTROL = 2,      /* nuksmctl and other management tools */
} NuksmClientRole;

/*
 * Where a VM's merge domain came from (HELLO_ACK, VMS).  The agent
 * decides it from what it can verify of the VM's process; the VM's own
 * HELLO domain is only a request (docs/security.rst).
 */
typedef enum NuksmDomainSourceId {
    NUKSM_DOMAIN_SHARED  = 0,    /* nothing assigned: the host's one */
                                 /* domain (isolation=shared) */
    NUKSM_DOMAIN_PRIVATE = 1,    /* nothing assigned: a domain of its own */
                                 /* (isolation=vm) */
    NUKSM_DOMAIN_LIBVIRT = 2,    /* its libvirt domain's nuksm metadata */
    NUKSM_DOMAIN_RULE    = 3,    /* a [domain NAME] rule of nuksmd.conf */
    NUKSM_DOMAIN_REQUEST = 4,    /* its own request (vm-domains=allow) */
    NUKSM_DOMAIN__MAX,
} NuksmDomainSourceId;

/* "shared", "private", "libvirt", "rule", "request"; NULL otherwise. */
const char *nuksm_domain_source_name(uint32_t source);

/*
 * The HELLO domain a VM sends when it asks for none: QEMU's default of
 * the nuksm object's domain property.
 */
#define NUKSM_DEFAULT_DOMAIN "default"

/*
 * A merge domain name a VM or an operator may give: 1 to NAME_LEN - 1
 * characters of [A-Za-z0-9._-].  The agent's own names for private
 * domains ("vm:...") are outside this set, so nobody can ask for one.
 */
bool nuksm_domain_name_valid(const char *name);

#define NUKSM_PRIORITY_MIN 1u
#define NUKSM_PRIORITY_MAX 1000u

typedef struct NuksmMsgHeader {
    uint32_t magic;      /* NUKSM_PROTO_MAGIC */
    uint16_t type;       /* NuksmMsgType */
    uint16_t flags;      /* must be 0 */
    uint32_t seq;        /* request id chosen by the sender, echoed in reply */
    uint32_t len;        /* payload bytes following the header */
} NuksmMsgHeader;

typedef struct NuksmMsgHello {
    uint32_t version;    /* NUKSM_PROTO_VERSION of the client */
    uint32_t role;       /* NuksmClientRole */
    uint32_t priority;   /* NUKSM_PRIORITY_MIN..MAX (VM role), else 0 */
    uint32_t reserved;   /* must be 0 */
    char domain[NUKSM_NAME_LEN];     /* merge domain (VM role) */
    char vm_name[NUKSM_NAME_LEN];    /* -name of the VM, may be empty */
    char object_id[NUKSM_NAME_LEN];  /* id of the nuksm object */
} NuksmMsgHello;

/*
 * HELLO_ACK to a VM carries a descriptor of /dev/userfaultfd (SCM_RIGHTS)
 * if the agent could open it: a QEMU that may not create a userfaultfd
 * itself (vm.unprivileged_userfaultfd=0, no CAP_SYS_PTRACE) creates its
 * own with ioctl(USERFAULTFD_IOC_NEW) on it.
 */
typedef struct NuksmMsgHelloAck {
    uint32_t version;    /* NUKSM_PROTO_VERSION of the agent */
    uint32_t client_id;  /* agent-assigned, unique while the agent runs */
    uint32_t policy;     /* NuksmPolicyId currently in force */
    uint32_t nr_nodes;   /* NUMA nodes the agent places on (1..MAX_NODES) */
    char agent_version[NUKSM_VERSION_LEN];
    /* VM role: what the agent decided for it (else zero) */
    uint32_t domain_source;   /* NuksmDomainSourceId */
    uint32_t priority;        /* in force: the VM's, at most the limit */
    uint32_t priority_limit;  /* the operator's ceiling, or PRIORITY_MAX */
    uint32_t admin;           /* control role: 1 if it may change */
                              /* host-wide settings (SET_POLICY) */
    char domain[NUKSM_NAME_LEN];  /* the merge domain it is in */
} NuksmMsgHelloAck;

typedef struct NuksmMsgError {
    uint32_t code;       /* NuksmErrorCode */
    uint32_t reserved;
    char message[NUKSM_ERROR_LEN];
} NuksmMsgError;

/* SET_POLICY, POLICY */
typedef struct NuksmMsgPolicy {
    uint32_t policy;     /* NuksmPolicyId */
} NuksmMsgPolicy;

/* SET_PRIORITY */
typedef struct NuksmMsgPriority {
    uint32_t priority;   /* NUKSM_PRIORITY_MIN..MAX */
} NuksmMsgPriority;

/*
 * Conditions of the agent that hold back new merges (pages still join
 * copies that exist): CONDITION, INFO.  The first two hold for every VM,
 * the third for the VMs of one merge domain.
 */
typedef enum NuksmCondition {
    NUKSM_COND_STORE_FULL   = 1u << 0,   /* the store takes no new page */
    NUKSM_COND_AGENT_MEMORY = 1u << 1,   /* nuksmd's memory budget is used */
    NUKSM_COND_DOMAIN_QUOTA = 1u << 2,   /* the VM's domain is at a quota */
} NuksmCondition;

#define NUKSM_COND_COUNT 3
#define NUKSM_COND_ALL ((1u << NUKSM_COND_COUNT) - 1)

/* "store-full", "agent-memory", "domain-quota"; NULL for anything else. */
const char *nuksm_condition_name(NuksmCondition cond);

/*
 * What holds back a VM's merging in QEMU itself (VM_LIMIT, VMS), as
 * query-nuksm's @limit; in VMS, nuksmd also says DOMAIN_QUOTA of a VM
 * that reports none while its merge domain is at a quota.
 */
typedef enum NuksmVmLimit {
    NUKSM_VM_LIMIT_NONE         = 0,
    NUKSM_VM_LIMIT_USERFAULTFD  = 1,  /* QEMU has no userfaultfd */
    NUKSM_VM_LIMIT_MAP_COUNT    = 2,  /* near vm.max_map_count */
    NUKSM_VM_LIMIT_DOMAIN_QUOTA = 3,  /* its domain is at a quota */
    NUKSM_VM_LIMIT__MAX,
} NuksmVmLimit;

/* "userfaultfd", "map-count", "domain-quota"; NULL for NONE and else. */
const char *nuksm_vm_limit_name(uint32_t limit);

/*
 * VM_LIMIT: sent by a VM after HELLO_ACK and whenever its own limit
 * changes (no reply).
 */
typedef struct NuksmMsgVmLimit {
    uint32_t limit;          /* NuksmVmLimit */
    uint32_t reserved;
    char reason[NUKSM_REASON_LEN];  /* for humans; empty with NONE */
} NuksmMsgVmLimit;

/*
 * CHARGE (seq 0): CPU time nuksmd spent handling the VM's messages
 * since the last CHARGE, sent once it reaches NUKSM_CHARGE_MIN_NS.  The
 * VM counts it against its own CPU budget (max-cpu), so that the budget
 * covers the VM's share of the agent's work.
 */
#define NUKSM_CHARGE_MIN_NS 1000000ull

typedef struct NuksmMsgCharge {
    uint64_t cpu_ns;
} NuksmMsgCharge;

/*
 * CONDITION: sent to every VM after its STOREs, and whenever the
 * conditions change (seq 0).
 */
typedef struct NuksmMsgCondition {
    uint32_t conditions;     /* NuksmCondition bits in force */
    uint32_t reserved;
    char reason[NUKSM_ERROR_LEN];   /* for humans, with figures; */
                                    /* empty when no condition holds */
} NuksmMsgCondition;

/*
 * What the counters of an INFO cover.  Only an administrator sees the
 * whole host; a VM sees its own merge domain; other control clients see
 * no counters (docs/security.rst).
 */
typedef enum NuksmInfoScopeId {
    NUKSM_INFO_HOST   = 0,
    NUKSM_INFO_DOMAIN = 1,   /* the counters of the client's domain; */
                             /* orphan_pages, counted host-wide only, 0 */
    NUKSM_INFO_NONE   = 2,   /* every counter 0 */
    NUKSM_INFO__MAX,
} NuksmInfoScopeId;

typedef struct NuksmMsgInfo {
    char agent_version[NUKSM_VERSION_LEN];
    uint32_t policy;         /* NuksmPolicyId */
    uint32_t vms;            /* connected VM clients */
    uint32_t nr_nodes;       /* 1..NUKSM_MAX_NODES */
    uint32_t conditions;     /* NuksmCondition bits in force */
    uint32_t scope;          /* NuksmInfoScopeId of the counters below */
    uint32_t vms_reading;    /* of @vms, those sampling reads (sent READS) */
    uint32_t scan_budget_ppm;    /* the VMs' scanners' budget, millionths */
                                 /* of a core; 0: none (since protocol 18) */
    uint32_t vms_resting;    /* of @vms, those its share has resting or */
                             /* idle (since protocol 18) */
    uint32_t run;            /* NuksmRunId (since protocol 18) */
    uint32_t held;           /* 1 while merging rests host-wide (run) */
    uint32_t available_pm;   /* memory available, per mille of the total */
                             /* (run=pressure; 0 otherwise) */
    uint32_t stall_pm;       /* tasks stalled on memory, per mille of */
                             /* the time (PSI some avg10; run=pressure) */
    uint64_t pages_shared;   /* store pages in use (KSM pages_shared) */
    uint64_t pages_sharing;  /* guest pages mapping them (KSM pages_sharing) */
    uint64_t pages_moved;    /* merged pages moved by re-placement */
    uint64_t moves_pending;  /* moves planned, not started yet */
    uint64_t orphan_pages;   /* store pages without a known reference, */
                             /* kept while a process may map them */
    uint64_t store_pages[NUKSM_MAX_NODES];  /* per node, nr_nodes valid */
    char condition_reason[NUKSM_ERROR_LEN]; /* as in CONDITION */
} NuksmMsgInfo;

/*
 * A VM's state as its query-nuksm shows it, numbered as QAPI's
 * NuksmState (checked where QEMU is built).
 */
typedef enum NuksmVmStateId {
    NUKSM_VM_STATE_DISCONNECTED = 0,
    NUKSM_VM_STATE_ACTIVE       = 1,
    NUKSM_VM_STATE_PAUSED       = 2,     /* migrating or snapshotting */
    NUKSM_VM_STATE_DISABLED     = 3,     /* property enabled=off */
    NUKSM_VM_STATE_LIMITED      = 4,
    NUKSM_VM_STATE__MAX,
} NuksmVmStateId;

/* "disconnected", "active", ...; NULL if unknown. */
const char *nuksm_vm_state_name(uint32_t state);

/*
 * VM_STATS (VM -> agent, seq 0, since protocol 16): what only the VM's
 * own scanner counts, as query-nuksm shows it, for the agent's metrics
 * (agent/server/metrics.h); sent at most once a second, when it changed.
 */
typedef struct NuksmMsgVmStats {
    uint64_t eligible_pages;     /* guest RAM the scanner looks at */
    uint64_t pages_scanned;      /* pages it hashed, ever */
    uint64_t full_scans;         /* passes over every eligible page */
    uint64_t zero_pages;         /* pages it dropped as zeros */
    uint64_t cow_breaks;         /* merged pages written, so unmerged */
    uint64_t pages_volatile;     /* pages changing too often to offer */
    uint64_t scan_rate;          /* pages per second it may hash, at */
                                 /* most; 0: no cap */
    uint64_t scan_cpu_ns;        /* CPU its scanner thread took */
    uint64_t hints_received;     /* pages I/O hints named */
    uint64_t hints_served;       /* of them, hashed first */
    uint64_t hints_merged;       /* merges of such pages */
    uint64_t tracked_writes;     /* writes to pages it tracked as stable */
                                 /* (write tracking): a stretch once a */
                                 /* pass at most */
    /* Since protocol 20: huge pages kept where merging does not pay */
    uint64_t huge_held_pages;    /* duplicates held back for them */
    uint64_t huge_kept;          /* huge pages kept so */
    uint64_t huge_splits;        /* huge pages split, as merging paid */
    /* Since protocol 21 */
    uint64_t huge_rebuilt;       /* huge pages rebuilt once it did not */
    uint32_t rest_ms;            /* its rest between passes */
    uint32_t max_cpu_pm;         /* its CPU budget, per mille of a core */
    uint32_t state;              /* NuksmVmStateId: its query-nuksm state */
    uint32_t reserved;
} NuksmMsgVmStats;

/*
 * Why a VM has the part of the host's scan budget it has
 * (agent/merge/budget.h).
 */
typedef enum NuksmShareReasonId {
    NUKSM_SHARE_OFF      = 0,    /* no host budget (--scan-budget=0): */
                                 /* its own governor alone */
    NUKSM_SHARE_NEW      = 1,    /* its first pass is not over */
    NUKSM_SHARE_YIELDING = 2,    /* it merged pages lately: by its yield */
    NUKSM_SHARE_SIGNALLED = 3,   /* I/O hints, writes, candidates or */
                                 /* its memory growing tell of new */
                                 /* duplicates */
    NUKSM_SHARE_RESTING  = 4,    /* it found nothing to merge lately */
    NUKSM_SHARE_IDLE     = 5,    /* it does not scan now (paused, */
                                 /* disabled, limited) */
    NUKSM_SHARE_HELD     = 6,    /* merging rests host-wide (run=off, */
                                 /* or run=pressure with memory to spare) */
    NUKSM_SHARE__MAX,
} NuksmShareReasonId;

/* "off", "new", "yielding", ...; NULL if unknown. */
const char *nuksm_share_reason_name(uint32_t reason);

/* The smallest part a VM is given, millionths of a core. */
#define NUKSM_SHARE_MIN_PPM 10u

/*
 * When nuksmd merges (--run): always, only while memory is short, or
 * never.
 */
typedef enum NuksmRunId {
    NUKSM_RUN_ALWAYS   = 0,
    NUKSM_RUN_PRESSURE = 1,
    NUKSM_RUN_OFF      = 2,
    NUKSM_RUN__MAX,
} NuksmRunId;

/* "always", "pressure", "off"; NULL if unknown. */
const char *nuksm_run_name(uint32_t run);

/*
 * SET_RUN (since protocol 19): when merging works from now on, as
 * nuksmd's --run; it also ends what PRUNE held.  Administrators only.
 */
typedef struct NuksmMsgSetRun {
    uint32_t run;            /* NuksmRunId */
    uint32_t reserved;
} NuksmMsgSetRun;

/*
 * PRUNE (since protocol 19), from a control client (administrators
 * only): stop merging in merge domain @domain, or on the whole host
 * ("": as run=off), and unmerge every page merged there, each VM at
 * most @rate pages per second; until SET_RUN.  The reply says how many
 * VMs were told (@vms).  To each of them the agent sends PRUNE (seq 0)
 * with its @rate, and the VM unmerges its merged pages, each a private
 * copy again, telling the agent (UNMERGED, PRUNED).
 */
typedef struct NuksmMsgPrune {
    char domain[NUKSM_NAME_LEN];  /* merge domain; "" = every one */
    uint32_t rate;           /* pages per second per VM; */
                             /* 1..NUKSM_PRUNE_RATE_MAX */
    uint32_t vms;            /* reply: VMs told to unmerge */
} NuksmMsgPrune;

#define NUKSM_PRUNE_RATE_MAX (1u << 24)  /* 64 GiB/s: no bound */

/*
 * SHARE (seq 0, since protocol 18): the VM's part of the host's scan
 * budget, sent when it changes.  Its scanner works at the smaller of its
 * own max-cpu and @max_cpu_ppm, and its periodic samplers (hotness and
 * read windows, counters told) run @pace times less often: a host of
 * resting VMs costs what one costs.
 */
typedef struct NuksmMsgShare {
    uint32_t max_cpu_ppm;    /* millionths of a core; 0 with OFF; at */
                             /* most the budget, or the least part */
    uint32_t reason;         /* NuksmShareReasonId */
    uint32_t pace;           /* 1: its samplers' own periods; N: N times */
                             /* longer (1..NUKSM_SHARE_PACE_MAX) */
    uint32_t vms;            /* VMs that share the budget */
    uint32_t budget_ppm;     /* the host's budget, millionths of a core */
    uint32_t yield;          /* pages it merged per CPU-second lately */
} NuksmMsgShare;

#define NUKSM_SHARE_PACE_MAX 1024u

typedef struct NuksmVmEntry {
    uint32_t client_id;
    uint32_t pid;            /* from SO_PEERCRED */
    uint32_t uid;            /* from SO_PEERCRED */
    uint32_t priority;
    char domain[NUKSM_NAME_LEN];     /* the agent's choice (HELLO_ACK) */
    char vm_name[NUKSM_NAME_LEN];
    char object_id[NUKSM_NAME_LEN];
    char requested_domain[NUKSM_NAME_LEN];  /* what its HELLO asked for */
    uint32_t domain_source;  /* NuksmDomainSourceId */
    uint32_t priority_limit; /* the operator's ceiling, or PRIORITY_MAX */
    uint64_t merged_pages;
    uint64_t merged_local;   /* copy on the home of the page's guest node */
    uint64_t merged_remote;
    uint32_t nr_gnodes;      /* 0 before its TOPOLOGY */
    uint32_t limit;          /* NuksmVmLimit, from its VM_LIMIT */
    uint8_t home[NUKSM_MAX_GNODES];  /* home node of each guest node */
    char limit_reason[NUKSM_REASON_LEN];
    /* The libvirt domain registered for its pid (agent/libvirt.h), or "" */
    char libvirt_name[NUKSM_NAME_LEN];
    char libvirt_uuid[NUKSM_UUID_LEN];
    uint64_t agent_cpu_ns;   /* nuksmd's CPU its messages took */
    uint64_t throttled_ns;   /* how long its domain's CPU quota left them */
                             /* unread (agent/merge/throttle.h) */
    /* Since protocol 12: how its new slots got their content */
    uint64_t uploads_read;   /* read by the agent from the VM's memory */
    uint64_t uploads_sent;   /* sent by the VM (UPLOAD) */
    uint32_t read_errno;     /* why the agent asks the VM instead (0: it */
                             /* reads, or has not tried yet) */
    uint32_t reserved2;
    /* Since protocol 13: the reads of its merged pages its sampling caught */
    uint64_t reads_local;    /* copy on the home of the page's guest node */
    uint64_t reads_remote;
    uint32_t read_window_ms; /* 0: no READS yet (sampling off) */
    uint32_t read_hot_regions;  /* regions read in the last */
                                /* --cold-windows samples */
    /* Since protocol 14: co-location's last look (agent/numa/colocation.h) */
    uint32_t twin_id;        /* its most similar VM of its domain, or 0 */
    uint32_t twin_pm;        /* their similarity, per mille */
    uint32_t plan_to;        /* the node the plan moves it to, */
    uint32_t plan_verdict;   /* and whether; NUKSM_PLAN__MAX: no move */
    /* Since protocol 15 */
    uint32_t scheme;         /* NuksmSchemeId of its merge domain */
    uint32_t applied_to;     /* the node nuksm moved it to and holds it */
                             /* on, NUKSM_MAX_NODES if none */
    /* Since protocol 16: what its scanner counts (VM_STATS) */
    NuksmMsgVmStats scanner;
    /* Since protocol 18: its part of the host's scan budget (SHARE) */
    NuksmMsgShare share;
} NuksmVmEntry;

/*
 * LIST_VMS (a payload since protocol 21): the VMs whose client id is
 * @from_id or more, in order of id, as many as one VMS holds
 * (NUKSM_VMS_MAX_ENTRIES).  A caller lists every VM page by page, each
 * from the last id it got plus one, until a VMS holds fewer than that;
 * a VM that connects meanwhile gets a higher id, so none is listed
 * twice.
 */
typedef struct NuksmMsgListVms {
    uint32_t from_id;
    uint32_t reserved;
} NuksmMsgListVms;

/* VMS: a NuksmMsgVms followed by count NuksmVmEntry records */
typedef struct NuksmMsgVms {
    uint32_t count;
    uint32_t total;          /* VMs the caller may see, of every page */
} NuksmMsgVms;

/*
 * SIMILARITY (since protocol 14), the reply to GET_SIMILARITY (no
 * payload; administrators only): every VM's content sketch
 * (agent/core/sketch.h), then every pair of VMs of one merge domain, as
 * AdaptMD-S weighs them.  VMs of two domains never share a page, so they
 * make no pair.
 */
typedef struct NuksmSimilarityVm {
    uint32_t client_id;
    uint32_t shift;          /* sampled: a content hash's top shift bits 0 */
    uint64_t sampled;        /* pages in its sample */
    uint64_t pages;          /* pages it stands for: sampled << shift */
} NuksmSimilarityVm;

typedef struct NuksmSimilarityPair {
    uint32_t a, b;           /* client ids, a < b, of one merge domain */
    uint32_t similarity_pm;  /* of the smaller: pages whose content the */
                             /* other holds over its pages, per mille */
    uint32_t shift;          /* the sample the two compared at */
    uint64_t sampled_a;      /* a's pages in that sample */
    uint64_t alike_a;        /* of them, those whose content b holds */
    uint64_t sampled_b;
    uint64_t alike_b;
    uint64_t merged_a;       /* a's merged pages that map a copy b maps: */
    uint64_t merged_b;       /* the exact figure, once merging is done */
} NuksmSimilarityPair;

/*
 * A NuksmMsgSimilarity, nr_vms NuksmSimilarityVm, then nr_pairs
 * NuksmSimilarityPair; cut to fit a message (total_* say how many there
 * were).
 */
typedef struct NuksmMsgSimilarity {
    uint32_t nr_vms;
    uint32_t total_vms;
    uint32_t nr_pairs;
    uint32_t total_pairs;
} NuksmMsgSimilarity;

/*
 * GET_SKETCH (since protocol 14; administrators only): VM @client_id's
 * content sketch, for comparing VMs across hosts.  SKETCH answers with
 * its sample (agent/core/sketch.h, sketch_export()): count entries, each
 * a 40-bit fingerprint << 24 | the sampled pages holding it, ascending.
 */
typedef struct NuksmMsgGetSketch {
    uint32_t client_id;
    uint32_t reserved;
} NuksmMsgGetSketch;

typedef struct NuksmMsgSketch {
    uint32_t client_id;
    uint32_t shift;          /* sampled: the hash's top shift bits 0 */
    uint64_t pages;          /* the pages it stands for */
    uint32_t count;
    uint32_t reserved;
} NuksmMsgSketch;

/* A sketch holds at most 4096 sampled pages (SKETCH_PAGES). */
#define NUKSM_SKETCH_MAX_ENTRIES 4096u

/*
 * What a page's fingerprint is: the top NUKSM_SKETCH_FINGERPRINT_BITS of
 * nuksm_mix64(XXH3-64 of the page ^ NUKSM_SKETCH_SEED).  Fixed, not
 * secret, so that sketches of VMs on two hosts compare.
 */
#define NUKSM_SKETCH_SEED 0x6e756b736d736b74ull
#define NUKSM_SKETCH_FINGERPRINT_BITS 40

/*
 * PLAN (since protocol 14), the reply to GET_PLAN (no payload;
 * administrators only): the co-location plan (AdaptMD-S,
 * agent/core/colocate.h) for the VMs as they are now, one entry for each
 * VM of a group of similar VMs that is not on its group's node, planned
 * or refused.
 */
typedef enum NuksmPlanVerdictId {
    NUKSM_PLAN_PLANNED    = 0,
    NUKSM_PLAN_PINNED     = 1,   /* its operator pinned it to its node */
    NUKSM_PLAN_NO_ROOM    = 2,   /* no node has room for its group */
    NUKSM_PLAN_SMALL_GAIN = 3,   /* it would gain less than the minimum */
    NUKSM_PLAN__MAX,
} NuksmPlanVerdictId;

typedef struct NuksmPlanMove {
    uint32_t client_id;
    uint32_t group;          /* groups are numbered from 0, largest first */
    uint32_t from, to;       /* nodes; @to is its group's */
    uint32_t verdict;        /* NuksmPlanVerdictId */
    uint32_t vcpus;
    uint64_t pages;          /* its memory */
    uint64_t gain_pages;     /* its pages alike with the group on @to: */
                             /* they would merge there, locally */
    uint64_t remote_pages;   /* its merged pages whose copy is remote now */
} NuksmPlanMove;

/* A NuksmMsgPlan, then count NuksmPlanMove (total: before the cut). */
typedef struct NuksmMsgPlan {
    uint32_t count;
    uint32_t total;
    uint32_t vms;            /* VMs the plan weighed */
    uint32_t groups;         /* groups of similar VMs among them */
    uint32_t threshold_pm;   /* --colocate-threshold */
    uint32_t vcpus_per_cpu;  /* --colocate-vcpus-per-cpu */
    uint64_t min_gain_pages; /* --colocate-min-gain */
} NuksmMsgPlan;

/*
 * COLOCATION (seq 0, since protocol 14): what co-location's last look
 * (agent/numa/colocation.h) says of the VM, sent when it changes: its
 * twin, the most similar VM of its merge domain, and where the plan
 * would move it.
 */
typedef struct NuksmMsgColocation {
    uint32_t twin_pm;        /* similarity to the twin, per mille; 0: none */
    uint32_t plan_to;        /* the node the plan moves it to, */
    uint32_t plan_verdict;   /* and whether; NUKSM_PLAN__MAX: no move */
    uint32_t scheme;         /* NuksmSchemeId of its merge domain */
                             /* (since protocol 15) */
    char twin[NUKSM_NAME_LEN];   /* the twin's VM name, "" if none given */
} NuksmMsgColocation;

/* "planned", "pinned", "no-room", "small-gain"; NULL if unknown. */
const char *nuksm_plan_verdict_name(uint32_t verdict);

/*
 * The adaptive scheme (AdaptMD §III-D, policy auto): what co-location's
 * last look chose for a merge domain.
 */
typedef enum NuksmSchemeId {
    NUKSM_SCHEME_ID_GLOBAL    = 0,   /* no similar VMs on different nodes */
    NUKSM_SCHEME_ID_COLOCATE  = 1,   /* some are, and a move is planned */
                                     /* (AdaptMD-S) */
    NUKSM_SCHEME_ID_HOT_LOCAL = 2,   /* some are, and none may move */
                                     /* (AdaptMD-H) */
    NUKSM_SCHEME_ID__MAX,
} NuksmSchemeId;

/* "global", "colocate", "hot-local"; NULL if unknown. */
const char *nuksm_scheme_name(uint32_t scheme);

/*
 * APPLY_MOVE (since protocol 15; administrators only): carry out the
 * planned move of VM @client_id to node @to.  The agent checks it
 * against a fresh plan; a move that is not planned now (refused, or the
 * plan changed) is refused with ERROR DENIED, which says why.  APPLIED
 * answers how it was carried out.
 */
typedef struct NuksmMsgApplyMove {
    uint32_t client_id;
    uint32_t to;
} NuksmMsgApplyMove;

typedef enum NuksmApplyHowId {
    NUKSM_APPLY_LIBVIRT = 0,     /* a libvirt domain: the caller moves it */
                                 /* through libvirt, to @cpus and node @to */
    NUKSM_APPLY_AGENT   = 1,     /* nuksmd moved its threads and memory */
    NUKSM_APPLY__MAX,
} NuksmApplyHowId;

/* CPUs in APPLIED's bitmap: as many as a cpu_set_t holds. */
#define NUKSM_APPLY_CPU_WORDS 16

typedef struct NuksmMsgApplied {
    uint32_t client_id;
    uint32_t to;
    uint32_t how;            /* NuksmApplyHowId */
    uint32_t threads;        /* NUKSM_APPLY_AGENT: threads moved */
    uint64_t pages_left;     /* NUKSM_APPLY_AGENT: pages migrate_pages */
                             /* could not move */
    uint64_t mems;           /* node @to's host memory nodes, a bitmap: */
                             /* @to, or with logical nodes (--fake-numa) */
                             /* the real nodes its CPUs are on */
    uint32_t memory_moved;   /* NUKSM_APPLY_AGENT: 1 if its memory was */
                             /* moved (0: no other node held it) */
    uint32_t reserved;
    uint64_t cpus[NUKSM_APPLY_CPU_WORDS];  /* node @to's CPUs, bit c of */
                                           /* word c / 64 */
} NuksmMsgApplied;

/*
 * STORE: sent for every node right after HELLO_ACK, with the store file's
 * descriptor attached (SCM_RIGHTS), opened read-only.  Slot s of the node
 * is the page at offset s * NUKSM_PAGE_SIZE.  @size is the file's size.
 */
typedef struct NuksmMsgStore {
    uint32_t node;
    uint32_t reserved;
    uint64_t size;
} NuksmMsgStore;

/*
 * Batches: CANDIDATES, UPLOAD_REQ, UPLOAD, MERGE, MERGED, UNMERGED,
 * RESTORE, REFUSED, MOVE and MOVED are a NuksmMsgBatch followed by
 * @count entries (NuksmCandidate for CANDIDATES, NuksmMove for MOVE and MOVED,
 * NuksmSlotRef for the others); UPLOAD then carries
 * @count pages of content, in entry order.
 *
 * A page is named by its index in the VM's RAM address space (QEMU's
 * ram_addr_t divided by NUKSM_PAGE_SIZE): stable for the VM's life.
 */
typedef struct NuksmMsgBatch {
    uint32_t count;
    uint32_t reserved;
} NuksmMsgBatch;

typedef struct NuksmCandidate {
    uint64_t page;
    uint64_t digest;         /* nuksm_page_digest() of the content */
    uint8_t gnode;           /* guest NUMA node of the page (TOPOLOGY) */
    uint8_t idle;            /* hotness windows since the page was last */
                             /* written, up to NUKSM_IDLE_NEVER */
    uint8_t flags;           /* NUKSM_CANDIDATE_* (since protocol 17) */
    uint8_t reserved[5];     /* must be 0 */
} NuksmCandidate;

/*
 * Offered again on WANTED: the page may pair with the candidate whose
 * content was wanted, and makes no content wanted in turn.
 */
#define NUKSM_CANDIDATE_WANTED 0x1u
/*
 * Landing (since protocol 22): a page of an incoming migration, whose
 * content the VM holds in a buffer, not yet in its memory.  The agent
 * answers it with MERGE (a copy of that content, or a new slot another
 * VM's page uploads) or RETRY (the VM writes it into its memory); or
 * with neither while its content was forgotten and WANTED from the
 * domain's VMs, whose answer may pair it.  It never uploads such a page
 * (nor any page of the VM while its candidates land), and it may
 * remember it as a page seen.
 */
#define NUKSM_CANDIDATE_LANDING 0x2u
#define NUKSM_CANDIDATE_FLAGS (NUKSM_CANDIDATE_WANTED | NUKSM_CANDIDATE_LANDING)

/* Outcome of a MERGE entry (MERGED), or why a page left (UNMERGED). */
typedef enum NuksmSlotStatus {
    NUKSM_STATUS_NONE      = 0,  /* UPLOAD_REQ, UPLOAD, MERGE, RESTORE, */
                                 /* REFUSED */
    NUKSM_STATUS_MERGED    = 1,  /* MERGED: the page now maps the slot */
    NUKSM_STATUS_CHANGED   = 2,  /* MERGED: content differs from the slot */
    NUKSM_STATUS_GONE      = 3,  /* MERGED: page not mergeable any more */
    NUKSM_STATUS_FAILED    = 4,  /* MERGED: held back (map count, huge page) */
    NUKSM_STATUS_COW       = 5,  /* UNMERGED: a write broke the sharing */
    NUKSM_STATUS_DISCARDED = 6,  /* UNMERGED: the page was discarded */
    NUKSM_STATUS_PRUNED    = 7,  /* UNMERGED: PRUNE unmerged it (since */
                                 /* protocol 19; no side sent 7 before) */
    NUKSM_STATUS_REBUILT   = 8,  /* UNMERGED: its huge page was rebuilt */
                                 /* (since protocol 21) */
    NUKSM_STATUS__MAX,
} NuksmSlotStatus;

typedef struct NuksmSlotRef {
    uint64_t page;
    uint32_t node;
    uint32_t slot;
    uint32_t gen;            /* slot generation: guards against reuse */
    uint32_t status;         /* NuksmSlotStatus */
} NuksmSlotRef;

/*
 * REFUSED: RESTORE entries the agent did not take (the slot holds no
 * content it knows of, another generation or another domain's content).
 * The VM may keep mapping such a slot: the agent keeps a slot's content
 * while any process maps it.  It holds no reference on it any more, so
 * it sends no UNMERGED for it and offers the page again as a candidate.
 *
 * RETRY (seq 0): candidates the agent did not keep, although their
 * content may still merge: it had too many of the VM's pages in flight,
 * its unstable table evicted them, an upload they waited for failed, or
 * the placement policy kept a hot page from sharing.  The VM offers each
 * page again on its next pass; it offers a page it offered once again
 * only then, or when its content changes, or when the connection, the
 * policy, the home nodes or the agent's conditions change.  Only @page
 * is used; the other fields are 0.
 *
 * WANTED (seq 0, since protocol 17): a bitmap of digest fragments
 * (nuksm_digest_fragment(), bit f for fragment f).  The agent forgot the
 * pages it saw with some contents, and a new page of the VM's merge
 * domain has one of them: the VM offers again at once each page it
 * offered and did not merge whose digest has one of these fragments,
 * marked NUKSM_CANDIDATE_WANTED.  Fragments, not digests, so that a VM
 * learns little of what other VMs hold.
 */
#define NUKSM_FRAGMENTS (1u << 16)

typedef struct NuksmMsgWanted {
    uint64_t fragments[NUKSM_FRAGMENTS / 64];
} NuksmMsgWanted;

/* The 16 bits of a full digest that WANTED names it by: never 0. */
static inline uint16_t nuksm_digest_fragment(uint64_t digest)
{
    return (digest & 0xffff) ?: 1;
}

/*
 * TOPOLOGY: sent by a VM after HELLO_ACK.  Guest node g's memory backend
 * asks for @gnodes[g].host_nodes under @gnodes[g].policy; each vCPU
 * thread (Linux tid) belongs to a guest node, and so does each range of
 * eligible RAM.  Entries past @nr_gnodes, @nr_vcpus and @nr_ranges must
 * be zero.
 */
typedef enum NuksmMemPolicy {        /* QEMU's HostMemPolicy */
    NUKSM_MEMPOLICY_DEFAULT    = 0,
    NUKSM_MEMPOLICY_PREFERRED  = 1,
    NUKSM_MEMPOLICY_BIND       = 2,
    NUKSM_MEMPOLICY_INTERLEAVE = 3,
} NuksmMemPolicy;

typedef struct NuksmGuestNode {
    uint64_t host_nodes;     /* bitmap of host nodes 0..63 */
    uint32_t policy;         /* NuksmMemPolicy */
    uint32_t reserved;
} NuksmGuestNode;

typedef struct NuksmVcpu {
    uint32_t tid;
    uint32_t gnode;
} NuksmVcpu;

/*
 * Pages [first, first + count) of the VM's RAM belong to guest node
 * @gnode.  Since protocol 12, @host is where page @first lies in the VM
 * process's address space (0: not said), for as long as the range is
 * reported: the agent may read pages to upload from there itself
 * (docs/security.rst), and asks the VM to upload them where it cannot.
 */
typedef struct NuksmPageRange {
    uint64_t first;
    uint64_t count;
    uint64_t host;
    uint32_t gnode;
    uint32_t reserved;
} NuksmPageRange;

typedef struct NuksmMsgTopology {
    uint32_t nr_gnodes;      /* 1..NUKSM_MAX_GNODES */
    uint32_t nr_vcpus;       /* 0..NUKSM_MAX_VCPUS */
    uint32_t nr_ranges;      /* 0..NUKSM_MAX_RANGES; pages outside: node 0 */
    uint32_t reserved;
    NuksmGuestNode gnodes[NUKSM_MAX_GNODES];
    NuksmVcpu vcpus[NUKSM_MAX_VCPUS];
    NuksmPageRange ranges[NUKSM_MAX_RANGES];
} NuksmMsgTopology;

/* HOME: how the agent derived a guest node's home node. */
typedef enum NuksmHomeSourceId {
    NUKSM_HOME_DEFAULT = 0,  /* nothing to go by: node 0 */
    NUKSM_HOME_PINNED  = 1,  /* the vCPUs may only run on the home node */
    NUKSM_HOME_BACKEND = 2,  /* the memory backend's host-nodes */
    NUKSM_HOME_RUNNING = 3,  /* where the vCPUs ran most recently */
    NUKSM_HOME_MEMORY  = 4,  /* the lowest node the vCPUs may allocate on
                                (cpuset.mems), since protocol 6 */
    NUKSM_HOME__MAX,
} NuksmHomeSourceId;

/* HOME: sent to a VM after its TOPOLOGY and whenever a home changes. */
typedef struct NuksmMsgHome {
    uint32_t nr_gnodes;      /* as in the VM's TOPOLOGY */
    uint32_t reserved;
    uint8_t home[NUKSM_MAX_GNODES];    /* host (or logical) node */
    uint8_t source[NUKSM_MAX_GNODES];  /* NuksmHomeSourceId */
} NuksmMsgHome;

/*
 * READS (seq 0, since protocol 13): what the VM's read sampling saw of
 * the reads of its merged pages (docs/placement.rst).  The VM's RAM
 * address space is cut into read regions of NUKSM_READ_REGION_PAGES
 * pages, region r holding pages [r * NUKSM_READ_REGION_PAGES,
 * (r + 1) * NUKSM_READ_REGION_PAGES).  Each read window, the VM drops
 * the page-table entry of one merged page of some regions (at most its
 * read-samples), catches the next access to it, and counts per region
 * the samples since one was read: @idle, 0 when read in the last one,
 * up to NUKSM_IDLE_NEVER (never seen read, where every region starts).
 * A READS follows each window that changed a region's count, with
 * those regions; a region never reported is NUKSM_IDLE_NEVER.
 * @reads_local and @reads_remote count every read of a merged page the
 * VM caught since it started (a reconnection does not reset them), by
 * whether the page's copy was on the home node of the page's guest node
 * then (HOME).
 * A NuksmMsgReads followed by @count NuksmReadRegion entries.
 */
#define NUKSM_READ_REGION_PAGES 512u

typedef struct NuksmMsgReads {
    uint32_t count;          /* NuksmReadRegion entries that follow */
    uint32_t window_ms;      /* length of a read window */
    uint64_t reads_local;
    uint64_t reads_remote;
} NuksmMsgReads;

typedef struct NuksmReadRegion {
    uint64_t region;         /* page / NUKSM_READ_REGION_PAGES */
    uint8_t idle;            /* samples since one was read */
    uint8_t reserved[7];     /* must be 0 */
} NuksmReadRegion;

/*
 * MOVE, MOVED: a merged page moves from one slot to another holding the
 * same content, because its placement changed.  @from.page == @to.page.
 * MOVED sets @to.status: MERGED (the page maps @to now, no longer @from),
 * CHANGED or FAILED (it still maps @from, or is leaving it: then an
 * UNMERGED of @from follows), GONE (it no longer maps @from).
 */
typedef struct NuksmMove {
    NuksmSlotRef from;
    NuksmSlotRef to;
} NuksmMove;

#define NUKSM_BATCH_SPACE  (NUKSM_MSG_MAX - sizeof(NuksmMsgHeader) - \
                            sizeof(NuksmMsgBatch))
#define NUKSM_CANDIDATES_MAX (NUKSM_BATCH_SPACE / sizeof(NuksmCandidate))
#define NUKSM_SLOTREFS_MAX   (NUKSM_BATCH_SPACE / sizeof(NuksmSlotRef))
#define NUKSM_MOVES_MAX      (NUKSM_BATCH_SPACE / sizeof(NuksmMove))
#define NUKSM_READS_MAX \
    ((NUKSM_MSG_MAX - sizeof(NuksmMsgHeader) - sizeof(NuksmMsgReads)) / \
     sizeof(NuksmReadRegion))
#define NUKSM_UPLOAD_MAX     (NUKSM_BATCH_SPACE / \
                              (sizeof(NuksmSlotRef) + NUKSM_PAGE_SIZE))

#define NUKSM_VMS_MAX_ENTRIES \
    ((NUKSM_MSG_MAX - sizeof(NuksmMsgHeader) - sizeof(NuksmMsgVms)) / \
     sizeof(NuksmVmEntry))

/*
 * Build a message in @buf (at least sizeof(NuksmMsgHeader) + @len bytes).
 * Returns the total datagram size.
 */
size_t nuksm_msg_pack(void *buf, NuksmMsgType type, uint32_t seq,
                      const void *payload, uint32_t len);

/*
 * Validate a received datagram of @size bytes: header, magic, flags, type,
 * exact payload size for the type, NUL-terminated strings and in-range
 * enums.  Returns NULL when valid, else a static string saying what is
 * wrong (suitable for logs and NUKSM_MSG_ERROR).
 */
const char *nuksm_msg_check(const void *buf, size_t size);

/* Payload of a message that passed nuksm_msg_check(). */
static inline const void *nuksm_msg_payload(const void *buf)
{
    return (const char *)buf + sizeof(NuksmMsgHeader);
}

/* Copy @src into a fixed-size protocol string field, truncating. */
void nuksm_strfield_set(char *field, size_t field_len, const char *src);

/* "HELLO", "HELLO_ACK", ...; NULL for an unknown type. */
const char *nuksm_msg_type_name(uint32_t type);

/* "global", "ksm-order", ...; NULL for an out-of-range id. */
const char *nuksm_policy_name(uint32_t policy);

/* Policy id for @name, or -1 if @name is not a policy. */
int nuksm_policy_parse(const char *name);

/* "global, ksm-order, local, fair, priority, adaptive, auto" for error
 * messages. */
const char *nuksm_policy_names(void);

#endif /* NUKSM_PROTO_H */
