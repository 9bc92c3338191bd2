/*
 * nuksm: NUMA-aware memory deduplication through a shared host agent.
 *
 * The "nuksm" user-creatable object attaches a VM to nuksmd:
 *
 *   -object nuksm,id=dedup0,agent=/run/nuksm/nuksmd.sock
 *
 * This file holds the QOM type: properties and their validation, the
 * object's life (it creates and frees the other units), and its
 * reactions to machine, RAM and migration events.  nuksm.h maps the
 * other units.  nuksm objects are found through QOM, among the children
 * of /objects.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include <sys/un.h>
#include "qapi/error.h"
#include "qapi/visitor.h"
#include "qemu/cutils.h"
#include "qemu/main-loop.h"
#include "exec/cpu-common.h"
#include "qom/object_interfaces.h"
#include "hw/qdev-core.h"
#include "migration/misc.h"
#include "system/reset.h"
#include "system/runstate.h"
#include "system/system.h"
#include "nuksm.h"
#include "nuksm-agent.h"
#include "nuksm-commit.h"
#include "nuksm-control.h"
#include "nuksm-governor.h"
#include "nuksm-hints.h"
#include "nuksm-hot.h"
#include "nuksm-huge.h"
#include "nuksm-digests.h"
#include "nuksm-landing.h"
#include "nuksm-report.h"
#include "nuksm-numa.h"
#include "nuksm-pages.h"
#include "nuksm-ram.h"
#include "nuksm-reads.h"
#include "nuksm-scan.h"
#include "nuksm-state.h"
#include "trace.h"

/* Complete nuksm objects: how many created so far, how many still live. */
static uint64_t nuksm_created;
static unsigned nuksm_live;

/*
 * Policies are named once per side of the protocol: by QAPI's NuksmPolicy
 * (QMP, and everything in QEMU), by libnuksm's table for the agent and
 * nuksmctl.  The protocol carries the number, the same in both; the names
 * are checked against each other when the type is registered.
 */
QEMU_BUILD_BUG_ON((int)NUKSM_POLICY_GLOBAL != NUKSM_POLICY_ID_GLOBAL ||
                  (int)NUKSM_POLICY_KSM_ORDER != NUKSM_POLICY_ID_KSM_ORDER ||
                  (int)NUKSM_POLICY_LOCAL != NUKSM_POLICY_ID_LOCAL ||
                  (int)NUKSM_POLICY_FAIR != NUKSM_POLICY_ID_FAIR ||
                  (int)NUKSM_POLICY_PRIORITY != NUKSM_POLICY_ID_PRIORITY ||
                  (int)NUKSM_POLICY_ADAPTIVE != NUKSM_POLICY_ID_ADAPTIVE ||
                  (int)NUKSM_POLICY_AUTO != NUKSM_POLICY_ID_AUTO ||
                  (int)NUKSM_POLICY__MAX != NUKSM_POLICY_ID__MAX);

/*
 * Where the agent took a VM's merge domain from (HELLO_ACK): the same,
 * QAPI's NuksmDomainSource against libnuksm's NuksmDomainSourceId.
 */
QEMU_BUILD_BUG_ON(
    (int)NUKSM_DOMAIN_SOURCE_SHARED != NUKSM_DOMAIN_SHARED ||
    (int)NUKSM_DOMAIN_SOURCE_PRIVATE != NUKSM_DOMAIN_PRIVATE ||
    (int)NUKSM_DOMAIN_SOURCE_LIBVIRT != NUKSM_DOMAIN_LIBVIRT ||
    (int)NUKSM_DOMAIN_SOURCE_RULE != NUKSM_DOMAIN_RULE ||
    (int)NUKSM_DOMAIN_SOURCE_REQUEST != NUKSM_DOMAIN_REQUEST ||
    (int)NUKSM_DOMAIN_SOURCE__MAX != NUKSM_DOMAIN__MAX);

static int nuksm_add_completed(Object *obj, void *opaque)
{
    Nuksm *s = (Nuksm *)object_dynamic_cast(obj, TYPE_NUKSM);

    if (s && s->completed) {
        g_ptr_array_add(opaque, s);
    }
    return 0;
}

static gint nuksm_compare_created(gconstpointer a, gconstpointer b)
{
    const Nuksm *sa = *(Nuksm * const *)a;
    const Nuksm *sb = *(Nuksm * const *)b;

    return sa->created < sb->created ? -1 : sa->created > sb->created;
}

GPtrArray *nuksm_objects(void)
{
    GPtrArray *all = g_ptr_array_new();

    object_child_foreach(object_get_objects_root(), nuksm_add_completed,
                         all);
    g_ptr_array_sort(all, nuksm_compare_created);
    return all;
}

Nuksm *nuksm_find(const char *id, Error **errp)
{
    Object *obj = object_resolve_path_component(object_get_objects_root(),
                                                id);
    Nuksm *s = obj ? (Nuksm *)object_dynamic_cast(obj, TYPE_NUKSM) : NULL;

    if (!s || !s->completed) {
        error_setg(errp, "no nuksm object with id '%s'", id);
        return NULL;
    }
    return s;
}

/* The scanner entered or left a limit of its own (main loop). */
static void nuksm_scanner_limit_changed(void *opaque)
{
    nuksm_limit_changed(opaque);
}

/* Properties that only make sense before the object is complete. */
static bool nuksm_check_not_completed(Nuksm *s, const char *name,
                                      Error **errp)
{
    if (s->completed) {
        error_setg(errp, "nuksm '%s': property '%s' cannot be changed "
                   "after the object is created", s->id, name);
        return false;
    }
    return true;
}

static char *nuksm_get_agent(Object *obj, Error **errp)
{
    return g_strdup(NUKSM(obj)->agent_path);
}

static void nuksm_set_agent(Object *obj, const char *value, Error **errp)
{
    Nuksm *s = NUKSM(obj);
    struct sockaddr_un addr;

    if (!nuksm_check_not_completed(s, "agent", errp)) {
        return;
    }
    if (!value[0] || strlen(value) >= sizeof(addr.sun_path)) {
        error_setg(errp, "nuksm: property 'agent' must be a unix socket "
                   "path of 1 to %zu characters", sizeof(addr.sun_path) - 1);
        return;
    }
    g_free(s->agent_path);
    s->agent_path = g_strdup(value);
}

static char *nuksm_get_domain(Object *obj, Error **errp)
{
    return g_strdup(NUKSM(obj)->domain);
}

static void nuksm_set_domain(Object *obj, const char *value, Error **errp)
{
    Nuksm *s = NUKSM(obj);
    size_t len = strlen(value);

    if (!nuksm_check_not_completed(s, "domain", errp)) {
        return;
    }
    if (len < 1 || len >= NUKSM_NAME_LEN ||
        strspn(value, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
               "0123456789._-") != len) {
        error_setg(errp, "nuksm: property 'domain' must be 1 to %u "
                   "characters from [A-Za-z0-9._-], got '%s'",
                   NUKSM_NAME_LEN - 1, value);
        return;
    }
    g_free(s->domain);
    s->domain = g_strdup(value);
}

static char *nuksm_get_memdev(Object *obj, Error **errp)
{
    return g_strdup(NUKSM(obj)->memdev);
}

static void nuksm_set_memdev(Object *obj, const char *value, Error **errp)
{
    Nuksm *s = NUKSM(obj);

    if (!nuksm_check_not_completed(s, "memdev", errp)) {
        return;
    }
    if (!value[0]) {
        error_setg(errp, "nuksm: property 'memdev' must name a memory "
                   "backend");
        return;
    }
    g_free(s->memdev);
    s->memdev = g_strdup(value);
}

/* Getter for a uint32 property; @opaque is the field's offset in Nuksm. */
static void nuksm_get_uint32(Object *obj, Visitor *v, const char *name,
                             void *opaque, Error **errp)
{
    uint32_t value = *(uint32_t *)((char *)obj + (uintptr_t)opaque);

    visit_type_uint32(v, name, &value, errp);
}

static bool nuksm_visit_uint32_range(Visitor *v, const char *name,
                                     uint32_t min, uint32_t max,
                                     uint32_t *value, Error **errp)
{
    if (!visit_type_uint32(v, name, value, errp)) {
        return false;
    }
    if (*value < min || *value > max) {
        error_setg(errp, "nuksm: property '%s' must be between %u and %u, "
                   "got %u", name, min, max, *value);
        return false;
    }
    trace_nuksm_set_property(name, *value);
    return true;
}

static void nuksm_set_priority(Object *obj, Visitor *v, const char *name,
                               void *opaque, Error **errp)
{
    Nuksm *s = NUKSM(obj);
    uint32_t value;

    if (nuksm_visit_uint32_range(v, name, NUKSM_PRIORITY_MIN,
                                 NUKSM_PRIORITY_MAX, &value, errp)) {
        s->priority = value;
        nuksm_agent_send_priority(s);
    }
}

/* Experimental: lengthen every commit's protected window, for tests. */
static void nuksm_set_commit_delay(Object *obj, Visitor *v, const char *name,
                                   void *opaque, Error **errp)
{
    uint32_t value;

    if (nuksm_visit_uint32_range(v, name, 0, 1000000, &value, errp)) {
        qatomic_set(&NUKSM(obj)->commit_delay_us, value);
    }
}

/*
 * Read sampling follows hot-window and read-samples, at the host share's
 * pace (nuksm_governor_apply()).
 */
static void nuksm_set_hot_window(Object *obj, Visitor *v, const char *name,
                                 void *opaque, Error **errp)
{
    uint32_t value;

    if (!visit_type_uint32(v, name, &value, errp)) {
        return;
    }
    if (value && (value < NUKSM_HOT_WINDOW_MIN_MS ||
                  value > NUKSM_HOT_WINDOW_MAX_MS)) {
        error_setg(errp, "nuksm: property '%s' must be 0 (off) or between "
                   "%u and %u ms, got %u", name, NUKSM_HOT_WINDOW_MIN_MS,
                   NUKSM_HOT_WINDOW_MAX_MS, value);
        return;
    }
    NUKSM(obj)->hot_window_ms = value;
    nuksm_governor_apply(NUKSM(obj));
    trace_nuksm_set_property(name, value);
}

static void nuksm_set_read_samples(Object *obj, Visitor *v, const char *name,
                                   void *opaque, Error **errp)
{
    uint32_t value;

    if (nuksm_visit_uint32_range(v, name, 0, NUKSM_READ_SAMPLES_MAX, &value,
                                 errp)) {
        NUKSM(obj)->read_samples = value;
        nuksm_governor_apply(NUKSM(obj));
    }
}

static int nuksm_get_governor(Object *obj, Error **errp)
{
    return NUKSM(obj)->governor;
}

static void nuksm_set_governor(Object *obj, int value, Error **errp)
{
    Nuksm *s = NUKSM(obj);

    s->governor = value;
    trace_nuksm_set_governor(NuksmGovernor_str(value));
    nuksm_governor_apply(s);
    nuksm_report_soon(s);
}

/* max-cpu and scan-rate read as applied: the governor's unless set. */
static void nuksm_get_max_cpu(Object *obj, Visitor *v, const char *name,
                              void *opaque, Error **errp)
{
    NuksmBudget budget;

    nuksm_governor_budget(NUKSM(obj), &budget);
    visit_type_number(v, name, &budget.max_cpu, errp);
}

static void nuksm_set_max_cpu(Object *obj, Visitor *v, const char *name,
                              void *opaque, Error **errp)
{
    Nuksm *s = NUKSM(obj);
    double value;

    if (!visit_type_number(v, name, &value, errp)) {
        return;
    }
    /* Written so that NaN fails too. */
    if (!(value >= NUKSM_MAX_CPU_MIN && value <= NUKSM_MAX_CPU_MAX)) {
        error_setg(errp, "nuksm: property '%s' must be between %g and %g "
                   "(percent of one core, fractions allowed), got %g",
                   name, NUKSM_MAX_CPU_MIN, NUKSM_MAX_CPU_MAX, value);
        return;
    }
    trace_nuksm_set_max_cpu((uint32_t)value,
                            (uint32_t)(value * 100) % 100);
    s->max_cpu = value;
    s->max_cpu_set = true;
    nuksm_governor_apply(s);
    nuksm_report_soon(s);
}

static void nuksm_get_scan_rate(Object *obj, Visitor *v, const char *name,
                                void *opaque, Error **errp)
{
    NuksmBudget budget;

    nuksm_governor_budget(NUKSM(obj), &budget);
    visit_type_uint64(v, name, &budget.scan_rate, errp);
}

static void nuksm_set_scan_rate(Object *obj, Visitor *v, const char *name,
                                void *opaque, Error **errp)
{
    Nuksm *s = NUKSM(obj);
    uint64_t value;

    if (!visit_type_uint64(v, name, &value, errp)) {
        return;
    }
    s->scan_rate = value;
    s->scan_rate_set = true;
    trace_nuksm_set_property(name, value);
    nuksm_governor_apply(s);
    nuksm_report_soon(s);
}

static bool nuksm_get_zero_pages(Object *obj, Error **errp)
{
    return NUKSM(obj)->zero_pages;
}

static void nuksm_set_zero_pages(Object *obj, bool value, Error **errp)
{
    Nuksm *s = NUKSM(obj);

    s->zero_pages = value;
    nuksm_governor_apply(s);
}

static bool nuksm_get_landing(Object *obj, Error **errp)
{
    return NUKSM(obj)->landing_on;
}

static void nuksm_set_landing(Object *obj, bool value, Error **errp)
{
    Nuksm *s = NUKSM(obj);

    s->landing_on = value;
    trace_nuksm_set_property("landing", value);
}

static bool nuksm_get_io_hints(Object *obj, Error **errp)
{
    return NUKSM(obj)->io_hints;
}

static void nuksm_set_io_hints(Object *obj, bool value, Error **errp)
{
    Nuksm *s = NUKSM(obj);

    s->io_hints = value;
    trace_nuksm_set_property("io-hints", value);
    if (s->hints) {
        nuksm_hints_set_enabled(s->hints, value);
    }
}

static bool nuksm_get_distilling(Object *obj, Error **errp)
{
    return NUKSM(obj)->distilling;
}

static void nuksm_set_distilling(Object *obj, bool value, Error **errp)
{
    Nuksm *s = NUKSM(obj);

    s->distilling = value;
    trace_nuksm_set_property("distilling", value);
    if (s->pages) {
        nuksm_pages_set_distilling(s->pages, value);
    }
}

static void nuksm_set_hash_strength(Object *obj, Visitor *v,
                                    const char *name, void *opaque,
                                    Error **errp)
{
    Nuksm *s = NUKSM(obj);
    uint32_t value;

    if (!visit_type_uint32(v, name, &value, errp)) {
        return;
    }
    if (value && (value < 64 || value > NUKSM_PAGE_SIZE ||
                  !is_power_of_2(value))) {
        error_setg(errp, "nuksm: property '%s' must be 0 (adaptive) or a "
                   "power of 2 from 64 to %d (bytes), got %" PRIu32, name,
                   NUKSM_PAGE_SIZE, value);
        return;
    }
    s->hash_strength = value;
    trace_nuksm_set_property("hash-strength", value);
    if (s->control) {
        nuksm_control_set_hash_strength(s->control, value);
    }
}

static void nuksm_set_huge_split(Object *obj, Visitor *v, const char *name,
                                 void *opaque, Error **errp)
{
    Nuksm *s = NUKSM(obj);
    uint32_t value;

    if (!visit_type_uint32(v, name, &value, errp)) {
        return;
    }
    if (value < 1 || value > NUKSM_HUGE_SPLIT_MAX) {
        error_setg(errp, "nuksm: property '%s' must be from 1 (split a "
                   "huge page for any duplicate) to %d (only for a whole "
                   "duplicate), got %" PRIu32, name, NUKSM_HUGE_SPLIT_MAX,
                   value);
        return;
    }
    qatomic_set(&s->huge_split, value);
    trace_nuksm_set_property("huge-split", value);
}

static bool nuksm_get_enabled(Object *obj, Error **errp)
{
    return NUKSM(obj)->enabled;
}

/*
 * Whether the object may run changed: run the scanner to match, and tell
 * the agent now, not at the next report, which comes its pace times
 * later for a VM the agent held idle; its part of the budget follows.
 */
static void nuksm_activity_changed(Nuksm *s)
{
    nuksm_update_activity(s);
    nuksm_report_soon(s);
}

static void nuksm_set_enabled(Object *obj, bool value, Error **errp)
{
    Nuksm *s = NUKSM(obj);

    s->enabled = value;
    trace_nuksm_set_property("enabled", value);
    nuksm_activity_changed(s);
}

/*
 * Migration (and background snapshot, which runs as a migration) reads
 * all of guest RAM and may take over userfaultfd on it: step aside.
 */
static int nuksm_migration_notify(NotifierWithReturn *notifier,
                                  MigrationEvent *e, Error **errp)
{
    Nuksm *s = container_of(notifier, Nuksm, migration_notifier);

    s->migrating = e->type == MIG_EVENT_PRECOPY_SETUP;
    trace_nuksm_migration(s->id, s->migrating);
    nuksm_activity_changed(s);
    return 0;
}

/*
 * An incoming migration holds the object until it lets go of guest RAM,
 * and may end without telling: a VM left paused (-S, or a source that
 * was paused) leaves the inmigrate run state without a VM state change,
 * and postcopy's listening thread closes its userfaultfd after the VM
 * runs.  Look every 100 ms meanwhile.
 */
#define NUKSM_INCOMING_LOOK_MS 100

static void nuksm_watch_incoming(Nuksm *s)
{
    if (nuksm_incoming()) {
        timer_mod(s->incoming_timer, qemu_clock_get_ms(QEMU_CLOCK_REALTIME) +
                  NUKSM_INCOMING_LOOK_MS);
    }
}

static void nuksm_incoming_look(void *opaque)
{
    Nuksm *s = opaque;

    if (nuksm_incoming()) {
        nuksm_watch_incoming(s);
    } else {
        nuksm_activity_changed(s);
    }
}

/*
 * ram_block_discard_range() over RAM some nuksm object remapped.  Set
 * while a complete nuksm object exists (@nuksm_live counts them): QEMU
 * has one such hook, not one per object.
 */
typedef struct NuksmDiscard {
    RAMBlock *rb;
    void *host;
    size_t length;
    bool done;
} NuksmDiscard;

static int nuksm_discard_one(Object *obj, void *opaque)
{
    Nuksm *s = (Nuksm *)object_dynamic_cast(obj, TYPE_NUKSM);
    NuksmDiscard *d = opaque;

    if (s && s->completed) {
        d->done |= nuksm_commit_discard(s->commit, d->rb, d->host, d->length);
    }
    return 0;
}

static bool nuksm_discard_remapped(RAMBlock *rb, void *host, size_t length)
{
    NuksmDiscard d = { .rb = rb, .host = host, .length = length };

    object_child_foreach(object_get_objects_root(), nuksm_discard_one, &d);
    return d.done;
}

/*
 * Landing: the hooks an incoming precopy migration calls for each page
 * it loads (qemu-patches/0009), with the BQL, in the thread that loads
 * it, which keeps the main loop from running: that thread reads the
 * agent's answers itself (nuksm_agent_pump()).  The hook is set while
 * a complete nuksm object exists, as the discard hook is.
 */

/* How long a section's end waits for answers that stopped coming. */
#define NUKSM_LANDING_QUIET_MS 20
/* ... and at most in all. */
#define NUKSM_LANDING_SETTLE_MS 1000
/* How long a page waits for a buffer to free, while answers come. */
#define NUKSM_LANDING_FULL_MS 10
/*
 * ... and a digest, for the digests waiting to make room: their answers
 * may wait for other VMs' uploads, and one not waited for is sent again
 * in full.
 */
#define NUKSM_LANDING_DIGESTS_MS 1000

typedef struct NuksmLandingFind {
    RAMBlock *rb;
    bool landing;               /* only an object that may land now */
    Nuksm *s;                   /* found */
    uint8_t gnode;
} NuksmLandingFind;

static int nuksm_landing_find_one(Object *obj, void *opaque)
{
    Nuksm *s = (Nuksm *)object_dynamic_cast(obj, TYPE_NUKSM);
    NuksmLandingFind *f = opaque;

    if (s && s->completed && (!f->landing || nuksm_may_land(s)) &&
        nuksm_ram_resolved_gnode(s, f->rb, &f->gnode)) {
        f->s = s;
        return 1;
    }
    return 0;
}

/*
 * The object whose RAM holds the page at @host (@landing: that may land
 * it now), with the page's block, offset and guest node; NULL if none.
 */
static Nuksm *nuksm_landing_owner(void *host, bool landing,
                                  NuksmLandingFind *f, ram_addr_t *offset)
{
    *f = (NuksmLandingFind) {
        .rb = qemu_ram_block_from_host(host, false, offset),
        .landing = landing,
    };
    if (f->rb) {
        object_child_foreach(object_get_objects_root(),
                             nuksm_landing_find_one, f);
    }
    return f->s;
}

/*
 * The page being read into a landing buffer: one at a time, as one
 * thread loads the stream.  Its object cannot go meanwhile
 * (nuksm_can_be_deleted()).
 */
static struct {
    Nuksm *s;
    NuksmLandingFind f;
    ram_addr_t offset;
} nuksm_landing_reading;

/*
 * The last wait for a buffer to free, or for room for a digest, was for
 * nothing: the agent lags.
 */
static bool nuksm_landing_lagging, nuksm_landing_digests_lagging;

static void *nuksm_landing_buffer_hook(void *host)
{
    NuksmLandingFind f;
    ram_addr_t offset;
    Nuksm *s = nuksm_landing_owner(host, true, &f, &offset);
    void *buf;

    if (!s) {
        return NULL;
    }
    /*
     * Every buffer waits: the answers under way free some soon, unless
     * the agent lags, when the page is read straight into guest RAM.
     */
    if (nuksm_landing_full(s->landing)) {
        nuksm_landing_lagging = !nuksm_agent_pump(
            s, nuksm_landing_lagging ? 0 : NUKSM_LANDING_FULL_MS);
    }
    buf = nuksm_landing_buffer(s->landing, f.rb, offset);
    if (buf) {
        nuksm_landing_reading.s = s;
        nuksm_landing_reading.f = f;
        nuksm_landing_reading.offset = offset;
    }
    return buf;
}

static void nuksm_landing_arrived_hook(void *host, void *buf)
{
    Nuksm *s = nuksm_landing_reading.s;
    NuksmLandingFind *f = &nuksm_landing_reading.f;

    g_assert(s && f->rb->host + nuksm_landing_reading.offset == host);
    nuksm_landing_reading.s = NULL;
    if (nuksm_landing_arrived(s->landing, f->rb,
                              nuksm_landing_reading.offset, f->gnode, buf)) {
        nuksm_agent_pump(s, 0);
    }
}

static void nuksm_landing_touch_hook(void *host)
{
    NuksmLandingFind f;
    ram_addr_t offset;
    Nuksm *s = nuksm_landing_owner(host, false, &f, &offset);

    if (s) {
        nuksm_landing_touch(s->landing, f.rb, offset);
    }
}

static int nuksm_landing_settle_one(Object *obj, void *opaque)
{
    Nuksm *s = (Nuksm *)object_dynamic_cast(obj, TYPE_NUKSM);
    bool *last = opaque;
    int64_t deadline = qemu_clock_get_ms(QEMU_CLOCK_REALTIME) +
                       NUKSM_LANDING_SETTLE_MS;

    if (!s || !s->completed) {
        return 0;
    }
    /* Wait for answers while they come, then write what still waits. */
    while (nuksm_landing_send(s->landing) &&
           qemu_clock_get_ms(QEMU_CLOCK_REALTIME) < deadline &&
           nuksm_agent_pump(s, NUKSM_LANDING_QUIET_MS)) {
        continue;
    }
    nuksm_landing_settle(s->landing, *last);
    return 0;
}

static void nuksm_landing_settle_hook(bool last)
{
    object_child_foreach(object_get_objects_root(), nuksm_landing_settle_one,
                         &last);
}

static int nuksm_landing_may_one(Object *obj, void *opaque)
{
    Nuksm *s = (Nuksm *)object_dynamic_cast(obj, TYPE_NUKSM);

    return s && s->completed && nuksm_may_land(s);
}

/*
 * Digests wait past the end of their section for an answer, which the
 * switch to postcopy cannot: with postcopy advised, the destination
 * declines them.
 */
static void nuksm_landing_begin_hook(void)
{
    nuksm_digests_begin(!migration_incoming_postcopy_advised() &&
                        object_child_foreach(object_get_objects_root(),
                                             nuksm_landing_may_one, NULL));
}

static void nuksm_landing_digest_hook(void *host, const uint8_t *record)
{
    uint8_t strong[NUKSM_DIGEST_STRONG];
    NuksmLandingFind f;
    ram_addr_t offset;
    uint64_t key, seq = nuksm_digests_arrived(record, &key, strong);
    Nuksm *s = nuksm_landing_owner(host, true, &f, &offset);

    /* Nothing here may land it (or none was asked): sent in full. */
    if (!s || !nuksm_digests_taken()) {
        nuksm_digests_answered(seq, true);
        return;
    }
    /* As many wait as may: the answers under way let more wait soon. */
    if (nuksm_landing_digests_full(s->landing)) {
        nuksm_landing_digests_lagging = !nuksm_agent_pump(
            s, nuksm_landing_digests_lagging ? 0 : NUKSM_LANDING_DIGESTS_MS);
    }
    if (nuksm_landing_digest(s->landing, f.rb, offset, f.gnode, seq, key,
                             strong)) {
        nuksm_agent_pump(s, 0);
    }
}

static const RAMLoadLanding nuksm_ram_load_landing = {
    .buffer = nuksm_landing_buffer_hook,
    .arrived = nuksm_landing_arrived_hook,
    .touch = nuksm_landing_touch_hook,
    .settle = nuksm_landing_settle_hook,
    .begin = nuksm_landing_begin_hook,
    .digest = nuksm_landing_digest_hook,
};

/* The source's side of capability nuksm-digests (nuksm-digests.c). */
static const RAMSaveDigests nuksm_ram_save_digests = {
    .digest = nuksm_digests_send,
    .answer = nuksm_digests_answer,
    .outstanding = nuksm_digests_outstanding,
    .complete = nuksm_digests_complete,
    .end = nuksm_digests_end,
};

/* RAM blocks come and go under the BQL: resolve eligible RAM after. */
static void nuksm_ram_changed(RAMBlockNotifier *n, void *host, size_t size,
                              size_t max_size)
{
    Nuksm *s = container_of(n, Nuksm, ram_notifier);

    qemu_bh_schedule(s->ram_bh);
}

static void nuksm_ram_block_added(RAMBlockNotifier *n, void *host,
                                  size_t size, size_t max_size)
{
    nuksm_ram_added(host);
    nuksm_ram_changed(n, host, size, max_size);
}

/* After every reset handler, rom_reset() among them: see nuksm-ram.h. */
static void nuksm_reset(void *opaque)
{
    Nuksm *s = opaque;

    qemu_bh_schedule(s->trim_bh);
}

/*
 * The guest wrote a page its scanner had found stable: tell the agent
 * now, not at the next report, which comes its pace times later while
 * the VM rests; its part of the budget may be small.
 */
static void nuksm_written_bh(void *opaque)
{
    nuksm_report_soon(opaque);
}

static void nuksm_trim_bh(void *opaque)
{
    nuksm_ram_trim_all();
}

static void nuksm_ram_changed_bh(void *opaque)
{
    Nuksm *s = opaque;

    nuksm_ram_refresh(s);
    /* The agent reads pages where TOPOLOGY says RAM lies. */
    if (s->conn.ready) {
        nuksm_numa_send_topology(s);
    }
}

/* Guest RAM exists only once the machine is built. */
static void nuksm_machine_done(Notifier *notifier, void *data)
{
    Nuksm *s = container_of(notifier, Nuksm, machine_done);

    nuksm_ram_resolve_memdev(s, &error_fatal);
    nuksm_ram_refresh(s);
}

/*
 * Leaving the incoming-migration state lets the object become active;
 * a VM that runs while postcopy still loads it is watched until that
 * ends.
 */
static void nuksm_vm_state_change(void *opaque, bool running, RunState state)
{
    nuksm_activity_changed(opaque);
    nuksm_watch_incoming(opaque);
}

static void nuksm_complete(UserCreatable *uc, Error **errp)
{
    Nuksm *s = NUKSM(uc);

    s->id = g_strdup(object_get_canonical_path_component(OBJECT(s)));
    if (phase_check(PHASE_MACHINE_READY)) {
        if (!nuksm_ram_resolve_memdev(s, errp)) {
            return;
        }
        nuksm_ram_refresh(s);
    } else {
        s->machine_done.notify = nuksm_machine_done;
        qemu_add_machine_init_done_notifier(&s->machine_done);
    }
    s->completed = true;
    s->created = nuksm_created++;
    nuksm_live++;
    ram_block_discard_remapped = nuksm_discard_remapped;
    ram_load_landing = &nuksm_ram_load_landing;
    ram_save_digests = &nuksm_ram_save_digests;
    s->ram_bh = qemu_bh_new(nuksm_ram_changed_bh, s);
    s->ram_notifier.ram_block_added = nuksm_ram_block_added;
    s->ram_notifier.ram_block_removed = nuksm_ram_changed;
    ram_block_notifier_add(&s->ram_notifier);
    s->trim_bh = qemu_bh_new(nuksm_trim_bh, s);
    qemu_register_reset(nuksm_reset, s);
    s->limit_bh = qemu_bh_new(nuksm_scanner_limit_changed, s);
    s->control = nuksm_control_new();
    s->control->written = qemu_bh_new(nuksm_written_bh, s);
    s->pages = g_new0(NuksmPages, 1);
    nuksm_pages_init(s->pages);
    s->huge = nuksm_huge_new();
    nuksm_pages_set_distilling(s->pages, s->distilling);
    s->reads = nuksm_reads_new(s);
    /* Before the scanner runs: it starts within its budget. */
    nuksm_governor_apply(s);
    s->commit = nuksm_commit_new(s, s->pages);
    s->hints = nuksm_hints_new();
    s->landing = nuksm_landing_new(s);
    nuksm_digests_join(s);
    nuksm_hints_set_enabled(s->hints, s->io_hints);
    s->scanner = nuksm_scanner_new(s);
    nuksm_control_set_hash_strength(s->control, s->hash_strength);
    migration_add_notifier(&s->migration_notifier, nuksm_migration_notify);
    s->incoming_timer = timer_new_ms(QEMU_CLOCK_REALTIME, nuksm_incoming_look,
                                     s);
    nuksm_watch_incoming(s);
    s->vm_state = qemu_add_vm_change_state_handler(nuksm_vm_state_change, s);
    nuksm_hot_start(s);
    nuksm_report_start(s);
    nuksm_agent_start(s);
}

/*
 * A QMP command waiting for the agent still uses the object; pages it
 * mapped from the store need it for as long as the VM runs (a discard
 * of them must go through it); and an incoming migration may be reading
 * a page into a landing buffer of its.  Disable it instead.
 */
static bool nuksm_can_be_deleted(UserCreatable *uc)
{
    Nuksm *s = NUKSM(uc);

    return QLIST_EMPTY(&s->conn.requests) &&
           !(s->pages && nuksm_pages_has_remapped(s->pages)) &&
           !(s->landing && nuksm_landing_waiting(s->landing));
}

static void nuksm_instance_init(Object *obj)
{
    Nuksm *s = NUKSM(obj);

    s->agent_path = g_strdup(NUKSM_DEFAULT_AGENT);
    s->domain = g_strdup(NUKSM_DEFAULT_DOMAIN);
    s->priority = NUKSM_DEFAULT_PRIORITY;
    s->governor = NUKSM_DEFAULT_GOVERNOR;
    s->zero_pages = true;
    s->io_hints = true;
    s->landing_on = true;
    s->enabled = true;
    s->hot_window_ms = NUKSM_DEFAULT_HOT_WINDOW_MS;
    s->read_samples = NUKSM_DEFAULT_READ_SAMPLES;
    s->huge_split = NUKSM_HUGE_SPLIT_DEFAULT;
    s->limit_reported = NUKSM_LIMIT__MAX;
    nuksm_agent_init(s);
}

static void nuksm_instance_finalize(Object *obj)
{
    Nuksm *s = NUKSM(obj);

    if (s->completed) {
        s->completed = false;
        if (!--nuksm_live) {
            ram_block_discard_remapped = NULL;
            ram_load_landing = NULL;
            ram_save_digests = NULL;
        }
        nuksm_digests_leave(s);
        migration_remove_notifier(&s->migration_notifier);
        timer_free(s->incoming_timer);
        qemu_del_vm_change_state_handler(s->vm_state);
        if (s->machine_done.notify) {
            qemu_remove_machine_init_done_notifier(&s->machine_done);
        }
        nuksm_hot_stop(s);
        nuksm_report_stop(s);
        nuksm_scanner_free(s->scanner);
        nuksm_hints_free(s->hints);
        nuksm_commit_free(s->commit);
        nuksm_reads_free(s->reads);
        qemu_bh_delete(s->control->written);
        nuksm_control_free(s->control);
        nuksm_huge_free(s->huge);
        nuksm_pages_destroy(s->pages);
        g_free(s->pages);
        ram_block_notifier_remove(&s->ram_notifier);
        qemu_unregister_reset(nuksm_reset, s);
        qemu_bh_delete(s->trim_bh);
        qemu_bh_delete(s->ram_bh);
        nuksm_ram_free(s);
        qemu_bh_delete(s->limit_bh);
    }
    nuksm_agent_cleanup(s);
    g_clear_pointer(&s->landing, nuksm_landing_free);
    g_free(s->id);
    g_free(s->agent_path);
    g_free(s->domain);
    g_free(s->memdev);
}

static void nuksm_class_init(ObjectClass *oc, void *data)
{
    UserCreatableClass *ucc = USER_CREATABLE_CLASS(oc);

    ucc->complete = nuksm_complete;
    ucc->can_be_deleted = nuksm_can_be_deleted;

    object_class_property_add_str(oc, "agent", nuksm_get_agent,
                                  nuksm_set_agent);
    object_class_property_set_description(oc, "agent",
        "Path of the nuksmd socket (default " NUKSM_DEFAULT_AGENT ")");
    object_class_property_add_str(oc, "domain", nuksm_get_domain,
                                  nuksm_set_domain);
    object_class_property_set_description(oc, "domain",
        "Merge domain to ask the agent for: pages are only shared within "
        "a merge domain, and the agent decides which one the VM is in "
        "(default " NUKSM_DEFAULT_DOMAIN ": no request)");
    object_class_property_add(oc, "priority", "uint32", nuksm_get_uint32,
                              nuksm_set_priority, NULL,
                              (void *)offsetof(Nuksm, priority));
    object_class_property_set_description(oc, "priority",
        "Weight in NUMA placement, 1..1000, at most the agent's limit for "
        "the VM (default 100)");
    object_class_property_add_enum(oc, "governor", "NuksmGovernor",
                                   &NuksmGovernor_lookup,
                                   nuksm_get_governor, nuksm_set_governor);
    object_class_property_set_description(oc, "governor",
        "Preset of the scanner's budget: full, medium, low or quiet; "
        "max-cpu and scan-rate override it once set (default medium)");
    object_class_property_add(oc, "max-cpu", "number", nuksm_get_max_cpu,
                              nuksm_set_max_cpu, NULL, NULL);
    object_class_property_set_description(oc, "max-cpu",
        "CPU budget of the scanner thread (scanning and merging) in percent "
        "of one core, 0.01..100 (default: the governor's, 10 for medium)");
    object_class_property_add(oc, "scan-rate", "uint64", nuksm_get_scan_rate,
                              nuksm_set_scan_rate, NULL, NULL);
    object_class_property_set_description(oc, "scan-rate",
        "Cap on pages scanned per second, 0 = CPU budget only (default: the "
        "governor's, 0)");
    object_class_property_add_bool(oc, "zero-pages", nuksm_get_zero_pages,
                                   nuksm_set_zero_pages);
    object_class_property_set_description(oc, "zero-pages",
        "Deduplicate zero pages locally (default on)");
    object_class_property_add_bool(oc, "io-hints", nuksm_get_io_hints,
                                   nuksm_set_io_hints);
    object_class_property_set_description(oc, "io-hints",
        "Take the guest pages disk transfers moved first (default on)");
    object_class_property_add_bool(oc, "landing", nuksm_get_landing,
                                   nuksm_set_landing);
    object_class_property_set_description(oc, "landing",
        "Land the pages of an incoming migration on copies the host holds "
        "(default on)");
    object_class_property_add(oc, "hash-strength", "uint32", nuksm_get_uint32,
                              nuksm_set_hash_strength, NULL,
                              (void *)offsetof(Nuksm, hash_strength));
    object_class_property_set_description(oc, "hash-strength",
        "Bytes of a page the change test samples, a power of 2 from 64 to "
        "4096, 0 = adaptive (default 0)");
    object_class_property_add_bool(oc, "distilling", nuksm_get_distilling,
                                   nuksm_set_distilling);
    object_class_property_set_description(oc, "distilling",
        "Look at regions of guest RAM as often as they proved worth it "
        "(default off)");
    object_class_property_add_str(oc, "memdev", nuksm_get_memdev,
                                  nuksm_set_memdev);
    object_class_property_set_description(oc, "memdev",
        "Only deduplicate this memory backend (default: all eligible RAM)");
    object_class_property_add(oc, "hot-window", "uint32", nuksm_get_uint32,
                              nuksm_set_hot_window, NULL,
                              (void *)offsetof(Nuksm, hot_window_ms));
    object_class_property_set_description(oc, "hot-window",
        "Hotness sample window in ms, writes and reads, 0 = off, "
        "10..600000 (default 1000)");
    object_class_property_add(oc, "read-samples", "uint32", nuksm_get_uint32,
                              nuksm_set_read_samples, NULL,
                              (void *)offsetof(Nuksm, read_samples));
    object_class_property_set_description(oc, "read-samples",
        "Read regions (512 pages) probed for reads per window, 0 = off, "
        "0..65536 (default 256)");
    object_class_property_add(oc, "huge-split", "uint32", nuksm_get_uint32,
                              nuksm_set_huge_split, NULL,
                              (void *)offsetof(Nuksm, huge_split));
    object_class_property_set_description(oc, "huge-split",
        "Duplicates of 512 that pay for splitting a huge page, 1..512 "
        "(default " stringify(NUKSM_HUGE_SPLIT_DEFAULT) ")");
    object_class_property_add(oc, "x-commit-delay-us", "uint32",
                              nuksm_get_uint32, nuksm_set_commit_delay, NULL,
                              (void *)offsetof(Nuksm, commit_delay_us));
    object_class_property_set_description(oc, "x-commit-delay-us",
        "Testing only: pause between compare and remap, 0..1000000 us");
    object_class_property_add_bool(oc, "enabled", nuksm_get_enabled,
                                   nuksm_set_enabled);
    object_class_property_set_description(oc, "enabled",
        "Scan and merge; off pauses the object (default on)");
}

static const TypeInfo nuksm_info = {
    .name = TYPE_NUKSM,
    .parent = TYPE_OBJECT,
    .instance_size = sizeof(Nuksm),
    .instance_init = nuksm_instance_init,
    .instance_finalize = nuksm_instance_finalize,
    .class_init = nuksm_class_init,
    .interfaces = (InterfaceInfo[]) {
        { TYPE_USER_CREATABLE },
        { }
    },
};

static void nuksm_register_types(void)
{
    for (int i = 0; i < NUKSM_POLICY__MAX; i++) {
        assert(g_str_equal(NuksmPolicy_str(i), nuksm_policy_name(i)));
    }
    for (int i = 0; i < NUKSM_DOMAIN_SOURCE__MAX; i++) {
        assert(g_str_equal(NuksmDomainSource_str(i),
                           nuksm_domain_source_name(i)));
    }
    type_register_static(&nuksm_info);
}

type_init(nuksm_register_types);
