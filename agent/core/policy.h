/*
 * nuksmd placement policy: which pages may share a copy, on which node
 * the copy lives, and which node is a VM's home, one function per
 * decision.  Pure: the callers
 * describe the pages and the nodes (PolicyOwner, PolicyLoad) and carry
 * out what comes back; nothing here reads the agent, the store or /proc,
 * so the unit tests (tests/unit/test-policy.c) cover every policy.
 *
 * The policies (NuksmPolicyId):
 *
 *   global     across nodes; a new copy goes to the node of the page that
 *              completed the match, and copies are never moved
 *   ksm-order  across nodes; like kernel KSM, which keeps the page its
 *              scan reached last and scans VMs in the order they
 *              registered: the copy lives on the latest VM's node
 *   local      only pages of one home node share a copy (KSM's
 *              merge_across_nodes=0)
 *   fair       nuKSM §4.1 for K nodes: a warm page's owner gets the
 *              copy; copies warm for owners on several nodes are split
 *              between their nodes by a draw from the content, each warm
 *              owner with an equal share; other copies go to the emptier
 *              of the owners' nodes
 *   priority   nuKSM §4.2: owner i gets the copy with probability
 *              priority_i / sum of priorities, drawn from a hash of the
 *              content (mix64 of the digest): the same contents and
 *              priorities place the same way in every run.  Only the
 *              warm owners draw if any is warm
 *   adaptive   AdaptMD-H: hot pages share only within their node, cold
 *              pages across nodes, placed as fair places cold ones;
 *              copies are never moved
 *   auto       the adaptive scheme (AdaptMD §III-D) with nuksm's rule
 *              that no warm merged page is read remotely: cold pages
 *              share across nodes; a warm page maps only a copy on its
 *              home, and may share it with cold pages of other nodes;
 *              a merged page that turns warm away from home moves home,
 *              to a copy of its own there if need be, and so do the
 *              pages of a copy whose owners all live on other nodes.  The scheme's
 *              other half, moving similar VMs together, is the
 *              co-location plan's (colocate.h)
 *
 * Three words have one meaning each:
 *   hot      the guest accessed the page lately: wrote it in one of the
 *            last --cold-windows hotness windows of its VM, or read a
 *            merged page of its read region in one of the last
 *            --cold-windows read samples of that region
 *            (policy_page_hot).  Merged pages are only ever read (a
 *            write ends their sharing): for them, hot means read
 *   warm     hot within POLICY_WARM_FACTOR times --cold-windows
 *            (policy_page_warm): who a copy is placed for, so that it
 *            follows a new reader at once and leaves an old one late
 *   emptier  of two nodes, the one whose store holds fewer copies
 *            (PolicyLoad.copies), the first on a tie (policy_emptier)
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_POLICY_H
#define NUKSMD_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nuksm-proto.h"

/* A page that shares, or may share, a copy: what placement weighs. */
typedef struct PolicyOwner {
    uint32_t client;         /* its VM's client id: orders owners */
    uint32_t home;           /* home node of the page's guest node */
    uint32_t priority;       /* its VM's, NUKSM_PRIORITY_MIN..MAX */
    bool hot;                /* policy_page_hot(): adaptive weighs it */
    bool warm;               /* policy_page_warm(): the draws and auto */
                             /* weigh it */
} PolicyOwner;

/* The nodes, as placement sees them. */
typedef struct PolicyLoad {
    uint32_t nr_nodes;
    uint64_t copies[NUKSM_MAX_NODES];     /* store slots in use there */
} PolicyLoad;

/*
 * Is a page hot: was it accessed in the last @cold_windows windows?
 * @written_idle counts the hotness windows since its VM saw it written
 * (CANDIDATES), @read_idle the read samples since a merged page of its
 * read region was seen read (READS); each NUKSM_IDLE_NEVER if never.
 */
bool policy_page_hot(uint8_t written_idle, uint8_t read_idle,
                     uint32_t cold_windows);

/*
 * Placement's hysteresis: a page stays *warm* for POLICY_WARM_FACTOR
 * times as many windows as it stays hot.  fair and priority draw among
 * the warm owners of a copy and balance a copy only once none is warm,
 * so that a reader that pauses for a few samples, or reads more slowly
 * than --cold-windows, moves nothing; a new reader is warm as soon as it
 * is hot.
 */
#define POLICY_WARM_FACTOR 4

bool policy_page_warm(uint8_t written_idle, uint8_t read_idle,
                      uint32_t cold_windows);

/* May @o map a copy that lives on @node? */
bool policy_may_map(NuksmPolicyId policy, const PolicyOwner *o,
                    uint32_t node);

/* May @a and @b share one copy? */
bool policy_may_share(NuksmPolicyId policy, const PolicyOwner *a,
                      const PolicyOwner *b);

/* The emptier of nodes @x and @y; @x on a tie. */
uint32_t policy_emptier(const PolicyLoad *load, uint32_t x, uint32_t y);

/*
 * Which of the @n owners @o of content @digest gets the copy under the
 * priority policy: a draw from the content against their priorities,
 * owners taken by home node, then client id, so that which page came
 * first (a matter of timing) does not matter.  An index into @o.
 */
size_t policy_priority_pick(const PolicyOwner *o, size_t n,
                            uint64_t digest);

/*
 * The node of a new copy of content @digest for @a, the page completing
 * the match, and @b, the page seen before; policy_may_share() allowed
 * them one.  fair and priority place it as policy_relocate_node() would
 * then keep it, so that a pass moves no new copy while warmth holds.
 */
uint32_t policy_new_copy(NuksmPolicyId policy, const PolicyLoad *load,
                         const PolicyOwner *a, const PolicyOwner *b,
                         uint64_t digest);

/* Does @policy ever move merged copies (re-placement)? */
bool policy_moves_copies(NuksmPolicyId policy);

/*
 * Does where @policy wants a merged copy depend on whether its owners
 * are warm (fair, priority and auto)?  Then a change in who reads what
 * calls for a re-placement pass.
 */
bool policy_moves_by_hotness(NuksmPolicyId policy);

/*
 * Does @policy move each page of a copy by itself (local and auto),
 * rather than the whole copy (policy_relocate_node())?
 */
bool policy_moves_pages(NuksmPolicyId policy);

/*
 * Under a policy that moves pages by themselves: the node page @o, which
 * maps a copy on @node, should map a copy on: its home if it may not map
 * it there; under auto its home too if no page of the copy has its home
 * on @node (@owner_there false), as when the VMs that share it all moved
 * to another node; else @node.
 */
uint32_t policy_relocate_page(NuksmPolicyId policy, const PolicyOwner *o,
                              uint32_t node, bool owner_there);

/*
 * Re-placement of a copy of content @digest on @node that the @n pages
 * @o map, one copy for all (local, where each page goes home, is the
 * caller's): the node the policy wants it on.  fair: with warm owners,
 * the draw among them (each an equal share: one warm owner, or warm
 * owners of one node, take it home; owners of two nodes split such
 * copies about half and half); with none, it moves only when that brings
 * its node and the emptiest owner's node closer by more than one copy.
 * priority: the draw among the warm owners if any is warm, else among
 * all.
 */
uint32_t policy_relocate_node(NuksmPolicyId policy, const PolicyLoad *load,
                              uint32_t node, const PolicyOwner *o, size_t n,
                              uint64_t digest);

/*
 * Home nodes.  The home of a guest node of a VM is the host node its
 * memory should be on, and the node its pages' copies go by.  The first
 * source that applies decides:
 *
 *   pinned   its vCPUs may only run on CPUs of one node: that node
 *   backend  its memory backend is bound to (or prefers) host nodes: the
 *            lowest of them
 *   memory   its vCPUs may only allocate memory on some of the nodes the
 *            agent places on, not all (their cpuset's mems, as `virsh
 *            numatune --nodeset` or libvirt's <numatune> set them): the
 *            lowest of them.  Never with --fake-numa (vcpus.h)
 *   running  where most of its vCPUs ran last, once that has held for
 *            POLICY_HOME_RUNNING_STREAK evaluations (a scheduler's
 *            migrations must not make merged pages follow every hop)
 *   default  node 0
 *
 * A guest node without vCPUs (memory only) goes by all the VM's vCPUs.
 * The vCPUs of a guest node count together: pinned looks at the union of
 * the nodes they may run on, memory at the union of those they may
 * allocate on.
 */
#define POLICY_HOME_RUNNING_STREAK 3

/* What the vCPUs of a guest node may do and did (vcpus.h). */
typedef struct PolicyVcpus {
    uint32_t count;
    uint64_t allowed;                   /* nodes they may run on */
    uint64_t mems;                      /* nodes they may allocate on */
    uint32_t running[NUKSM_MAX_NODES];  /* vCPUs that ran last there */
} PolicyVcpus;

typedef struct PolicyHomeView {
    PolicyVcpus vcpus;
    uint64_t backend_nodes;  /* its memory backend's host-nodes */
    bool backend_binds;      /* ... with policy bind or preferred */
    uint32_t nr_nodes;       /* the agent places on nodes 0..nr_nodes-1 */
} PolicyHomeView;

/* A guest node's home, as decided at the last evaluation. */
typedef struct PolicyHome {
    uint32_t node;
    NuksmHomeSourceId source;
    uint32_t streak;         /* evaluations running pointed elsewhere */
} PolicyHome;

/* Re-evaluate @home, of the guest node that @view describes. */
void policy_home(const PolicyHomeView *view, PolicyHome *home);

/*
 * The home the memory source gives vCPUs allowed memory on @allowed when
 * the agent places on @placed: the lowest node of @allowed if it is a
 * non-empty strict subset of @placed, else -1 (the source does not
 * apply).
 */
int policy_memory_node(uint64_t allowed, uint64_t placed);

#endif /* NUKSMD_POLICY_H */
