/*
 * nuksmd carries out a planned co-location move (apply.h).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <numa.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "apply.h"
#include "colocation.h"
#include "ledger.h"
#include "libvirt.h"
#include "log.h"
#include "transport.h"

/* A memory move under way, in a thread of its own. */
typedef struct MemoryMove {
    NuksmAgent *agent;
    uint32_t requester;      /* the control client to answer */
    uint32_t seq;
    pid_t pid;
    int pidfd;               /* the VM's process: its pid is acted on */
                             /* only while this says it runs */
    uint64_t from, to;       /* host memory nodes */
    NuksmMsgApplied reply;
    int err;                 /* errno of migrate_pages, 0 if it ran */
    gint64 started;
} MemoryMove;

/* The thread ids in @taskfd, a process's /proc/PID/task; NULL if none. */
static GArray *threads_in(int taskfd)
{
    int fd = fcntl(taskfd, F_DUPFD_CLOEXEC, 0);
    DIR *dir = fd < 0 ? NULL : fdopendir(fd);
    GArray *tids;
    struct dirent *d;

    if (!dir) {
        if (fd >= 0) {
            close(fd);
        }
        return NULL;
    }
    tids = g_array_new(FALSE, FALSE, sizeof(pid_t));
    while ((d = readdir(dir))) {
        pid_t tid = atoi(d->d_name);

        if (tid > 0) {
            g_array_append_val(tids, tid);
        }
    }
    closedir(dir);
    return tids;
}

/*
 * May thread @tid be acted on now: does the process @pidfd names still
 * run, and is @tid one of its threads?  @taskfd is its /proc/PID/task,
 * opened while it ran: that directory lists its threads and no other
 * process's, even once the pid names another.  Asked right before each
 * change, so that a pid or thread id reused meanwhile is never touched.
 */
static bool thread_of(int taskfd, int pidfd, pid_t tid)
{
    char name[24];

    snprintf(name, sizeof(name), "%ld", (long)tid);
    return faccessat(taskfd, name, F_OK, 0) == 0 &&
           pidfd_process_alive(pidfd);
}

/*
 * Let every thread of the process @pidfd names, @pid, run only on
 * @cpus: the number of threads, or -errno with every thread's affinity
 * as it was (-ESRCH: the process exited).
 */
static int move_threads(pid_t pid, int pidfd, const cpu_set_t *cpus)
{
    g_autofree char *path = g_strdup_printf("/proc/%ld/task", (long)pid);
    int taskfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    g_autoptr(GArray) tids = NULL;
    g_autofree cpu_set_t *before = NULL;
    int err = 0;
    guint done, moved = 0;

    /* Alive after the open: the directory is its, not a later process's. */
    if (taskfd < 0 || !pidfd_process_alive(pidfd) ||
        !(tids = threads_in(taskfd))) {
        if (taskfd >= 0) {
            close(taskfd);
        }
        return -ESRCH;
    }
    before = g_new(cpu_set_t, tids->len);
    for (done = 0; done < tids->len; done++) {
        pid_t tid = g_array_index(tids, pid_t, done);

        if (!thread_of(taskfd, pidfd, tid)) {
            if (!pidfd_process_alive(pidfd)) {
                err = ESRCH;
                break;
            }
            /* The thread ended: nothing to move, nothing to restore. */
            g_array_index(tids, pid_t, done) = 0;
            continue;
        }
        if (sched_getaffinity(tid, sizeof(cpu_set_t), &before[done]) < 0 ||
            sched_setaffinity(tid, sizeof(cpu_set_t), cpus) < 0) {
            err = errno;
            break;
        }
        moved++;
    }
    while (err && done-- > 0) {
        pid_t tid = g_array_index(tids, pid_t, done);

        if (tid && thread_of(taskfd, pidfd, tid)) {
            sched_setaffinity(tid, sizeof(cpu_set_t), &before[done]);
        }
    }
    close(taskfd);
    return err ? -err : (int)moved;
}

static struct bitmask *nodemask_of(uint64_t nodes)
{
    struct bitmask *mask = numa_allocate_nodemask();

    for (unsigned n = 0; n < 64; n++) {
        if (nodes & (1ull << n)) {
            numa_bitmask_setbit(mask, n);
        }
    }
    return mask;
}

/* Back in the main loop: answer whoever asked, if still there. */
static gboolean memory_move_done(gpointer opaque)
{
    MemoryMove *job = opaque;
    NuksmClient *requester = clients_find(&job->agent->clients,
                                          job->requester);
    double seconds = (g_get_monotonic_time() - job->started) / 1e6;

    if (job->err) {
        log_warning("pid %ld: its memory did not move to node %u: %s",
                    (long)job->pid, job->reply.to, g_strerror(job->err));
    } else {
        log_info("pid %ld: its memory moved to node %u in %.1f s, %" PRIu64
                 " pages left behind", (long)job->pid, job->reply.to,
                 seconds, job->reply.pages_left);
    }
    if (requester && job->err == ESRCH) {
        transport_deny(requester, job->seq, "its threads moved, but its "
                       "process exited before its memory moved");
    } else if (requester && job->err) {
        transport_deny(requester, job->seq, "its threads moved, but its "
                       "memory did not (migrate_pages failed)");
    } else if (requester) {
        transport_send(requester, NUKSM_MSG_APPLIED, job->seq, &job->reply,
                       sizeof(job->reply));
    }
    close(job->pidfd);
    g_free(job);
    return G_SOURCE_REMOVE;
}

/*
 * The memory move itself: its answer goes back to the main loop.  Only
 * while the VM's process runs, before and after: a process that exited
 * during the move may have left its pid to another, whose pages some of
 * the move then moved, and that is said.
 */
static gpointer memory_move_run(gpointer opaque)
{
    MemoryMove *job = opaque;
    struct bitmask *from = nodemask_of(job->from);
    struct bitmask *to = nodemask_of(job->to);
    int left = -1;

    errno = ESRCH;
    if (pidfd_process_alive(job->pidfd)) {
        left = numa_migrate_pages(job->pid, from, to);
    }
    if (left < 0) {
        job->err = errno;
    } else if (!pidfd_process_alive(job->pidfd)) {
        job->err = ESRCH;
    } else {
        job->reply.pages_left = left;
    }
    numa_bitmask_free(from);
    numa_bitmask_free(to);
    g_idle_add(memory_move_done, job);
    return NULL;
}

/*
 * Move plain QEMU @vm to node @to itself: its threads, then (in a
 * thread) its memory.  False if its threads may not move.
 */
static bool move_vm(NuksmAgent *agent, NuksmClient *requester, uint32_t seq,
                    NuksmClient *vm, NuksmMsgApplied *reply)
{
    const Topology *topo = &agent->topology;
    uint64_t all = 0;
    cpu_set_t cpus;
    MemoryMove *job;
    int threads;

    topology_node_cpu_set(topo, reply->to, &cpus);
    threads = move_threads(vm->pid, vm->pidfd, &cpus);
    if (threads == -ESRCH) {
        transport_denyf(requester, seq, "%s: its process exited: nothing "
                        "moved", vm->label);
        return false;
    }
    if (threads < 0) {
        transport_denyf(requester, seq, "%s: its threads may not run on "
                        "node %u's CPUs (%s): nothing moved", vm->label,
                        reply->to, g_strerror(-threads));
        return false;
    }
    reply->how = NUKSM_APPLY_AGENT;
    reply->threads = threads;
    for (int n = 0; numa_available() >= 0 && n <= numa_max_node() && n < 64;
         n++) {
        all |= 1ull << n;
    }
    if (!(all & ~reply->mems)) {
        /* Nowhere else its memory could be (one real node). */
        transport_send(requester, NUKSM_MSG_APPLIED, seq, reply,
                       sizeof(*reply));
        return true;
    }
    job = g_new0(MemoryMove, 1);
    *job = (MemoryMove) {
        .agent = agent, .requester = requester->id, .seq = seq,
        .pid = vm->pid, .pidfd = fcntl(vm->pidfd, F_DUPFD_CLOEXEC, 0),
        .from = all & ~reply->mems, .to = reply->mems,
        .reply = *reply, .started = g_get_monotonic_time(),
    };
    job->reply.memory_moved = 1;
    g_thread_unref(g_thread_new("nuksmd-move", memory_move_run, job));
    return true;
}

void apply_handle_apply_move(NuksmAgent *agent, NuksmClient *client,
                             uint32_t seq, const void *payload)
{
    const NuksmMsgApplyMove *req = payload;
    g_autoptr(GHashTable) libvirt = NULL;
    NuksmMsgApplied reply = { .client_id = req->client_id, .to = req->to };
    NuksmClient *vm;
    ColocateMove mv;
    cpu_set_t cpus;

    if (!client->admin) {
        transport_deny(client, seq, "moving VMs is for administrators only "
                       "(root, nuksmd's user or a member of its "
                       "admin-group)");
        return;
    }
    vm = ledger_client(agent, req->client_id);
    if (!vm) {
        transport_denyf(client, seq, "no VM is client %u now",
                        req->client_id);
        return;
    }
    /*
     * Its pid is what both ways act on (libvirt's registry is by pid):
     * only while the process that connected runs.
     */
    if (!pidfd_process_alive(vm->pidfd)) {
        transport_denyf(client, seq, "%s: its process exited, or nuksmd "
                        "cannot watch it (no pidfd): nothing moved",
                        vm->label);
        return;
    }
    if (!colocation_move_of(agent, vm, &mv)) {
        transport_denyf(client, seq, "%s: the plan moves it nowhere now (it "
                        "is on its similar VMs' node, or like none)",
                        vm->label);
        return;
    }
    if (mv.verdict != NUKSM_PLAN_PLANNED) {
        transport_denyf(client, seq, "%s: the plan refuses to move it now "
                        "(%s)", vm->label,
                        nuksm_plan_verdict_name(mv.verdict));
        return;
    }
    if (mv.to != req->to) {
        transport_denyf(client, seq, "%s: the plan changed: it moves it to "
                        "node %u now", vm->label, mv.to);
        return;
    }
    if (agent->placement.colocate_apply == COLOCATE_APPLY_NONE) {
        transport_denyf(client, seq, "nuksmd carries out no planned move "
                        "(--colocate-apply=none)");
        return;
    }
    reply.mems = topology_node_mems(&agent->topology, req->to);
    topology_node_cpu_set(&agent->topology, req->to, &cpus);
    for (uint32_t c = 0; c < CPU_SETSIZE; c++) {
        if (CPU_ISSET(c, &cpus)) {
            reply.cpus[c / 64] |= 1ull << (c % 64);
        }
    }
    libvirt = libvirt_registry_read(agent->libvirt_dir);
    if (g_hash_table_lookup(libvirt, GINT_TO_POINTER(vm->pid))) {
        reply.how = NUKSM_APPLY_LIBVIRT;
        transport_send(client, NUKSM_MSG_APPLIED, seq, &reply, sizeof(reply));
    } else if (agent->placement.colocate_apply != COLOCATE_APPLY_ALL) {
        transport_denyf(client, seq, "%s is not a libvirt domain: nuksmd "
                        "moves other QEMUs only with --colocate-apply=all",
                        vm->label);
        return;
    } else if (!move_vm(agent, client, seq, vm, &reply)) {
        return;
    }
    vm->colocated_to = req->to;
    log_info("%s: planned move to node %u %s", vm->label, req->to,
             reply.how == NUKSM_APPLY_LIBVIRT ? "handed to libvirt" :
             "under way");
}
