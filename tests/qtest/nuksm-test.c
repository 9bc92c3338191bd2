/*
 * qtest for the nuksm object and its QMP/HMP surface, against a real
 * nuksmd.
 *
 * The agent binary is taken from $NUKSMD (the nuksm Makefile sets it to
 * build/bin/nuksmd).  The version-handshake test plays the agent itself
 * with a raw socket, since the point is how QEMU treats a refusing agent.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include "libqtest.h"
#include "qapi/error.h"
#include "qobject/qdict.h"
#include "qobject/qjson.h"
#include "qobject/qlist.h"
#include "../../hw/mem/nuksm/libnuksm/nuksm-proto.h"

#define RAM_MB 128
#define WAIT_MS 20000

typedef struct Agent {
    char *dir;
    char *sock;
    char *state_dir;            /* the agent's store: must be tmpfs */
    GPid pid;
} Agent;

static const char *nuksmd_path(void)
{
    const char *path = g_getenv("NUKSMD");

    g_assert(path);  /* checked in main() */
    return path;
}

static bool sock_connectable(const char *path)
{
    struct sockaddr_un addr = { .sun_family = AF_UNIX };
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    bool ok;

    g_assert(fd >= 0);
    g_strlcpy(addr.sun_path, path, sizeof(addr.sun_path));
    ok = connect(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0;
    close(fd);
    return ok;
}

static void agent_init(Agent *a)
{
    a->dir = g_dir_make_tmp("nuksm-test-XXXXXX", NULL);
    g_assert(a->dir);
    a->sock = g_build_filename(a->dir, "nuksmd.sock", NULL);
    a->state_dir = g_strdup("/dev/shm/nuksm-test-XXXXXX");
    g_assert(g_mkdtemp(a->state_dir));
    a->pid = 0;
}

static void agent_start(Agent *a, const char *extra)
{
    g_autofree char *cmd = g_strdup_printf("%s --socket %s --state-dir %s "
                                           "--log-level warning %s",
                                           nuksmd_path(), a->sock,
                                           a->state_dir, extra ? extra : "");
    g_auto(GStrv) argv = NULL;
    g_autoptr(GError) err = NULL;

    g_assert(g_shell_parse_argv(cmd, NULL, &argv, &err));
    g_assert(g_spawn_async(NULL, argv, NULL, G_SPAWN_DO_NOT_REAP_CHILD,
                           NULL, NULL, &a->pid, &err));
    for (int i = 0; i < WAIT_MS / 10; i++) {
        if (sock_connectable(a->sock)) {
            return;
        }
        g_usleep(10 * 1000);
    }
    g_error("nuksmd did not start listening on %s", a->sock);
}

static void agent_kill(Agent *a, int sig)
{
    int status;

    g_assert(a->pid > 0);
    g_assert(kill(a->pid, sig) == 0);
    g_assert(waitpid(a->pid, &status, 0) == a->pid);
    g_spawn_close_pid(a->pid);
    a->pid = 0;
    if (sig == SIGTERM) {
        /* A clean shutdown exits 0 and removes its socket. */
        g_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        g_assert(!g_file_test(a->sock, G_FILE_TEST_EXISTS));
    }
}

static void agent_cleanup(Agent *a)
{
    if (a->pid) {
        agent_kill(a, SIGKILL);
    }
    unlink(a->sock);
    rmdir(a->dir);
    /* nuksmd removes nothing from its state directory: clean it here. */
    g_autoptr(GDir) dir = g_dir_open(a->state_dir, 0, NULL);
    const char *name;
    while (dir && (name = g_dir_read_name(dir))) {
        g_autofree char *path = g_build_filename(a->state_dir, name, NULL);
        unlink(path);
    }
    rmdir(a->state_dir);
    g_free(a->sock);
    g_free(a->dir);
    g_free(a->state_dir);
}

static QTestState *vm_start(const char *agent_sock, const char *extra)
{
    return qtest_initf("-machine q35 -m %dM -object nuksm,id=dedup0,"
                       "agent=%s%s", RAM_MB, agent_sock, extra ? extra : "");
}

/* query-nuksm's entry for @id; the caller unrefs the whole reply. */
static QDict *nuksm_info(QTestState *qts, const char *id, QDict **resp)
{
    QList *list;
    QListEntry *e;

    *resp = qtest_qmp(qts, "{'execute': 'query-nuksm'}");
    g_assert(qdict_haskey(*resp, "return"));
    list = qdict_get_qlist(*resp, "return");
    QLIST_FOREACH_ENTRY(list, e) {
        QDict *info = qobject_to(QDict, qlist_entry_obj(e));
        if (g_str_equal(qdict_get_str(info, "id"), id)) {
            return info;
        }
    }
    g_error("query-nuksm has no entry for %s", id);
}

static char *nuksm_state(QTestState *qts)
{
    QDict *resp;
    QDict *info = nuksm_info(qts, "dedup0", &resp);
    char *state = g_strdup(qdict_get_str(info, "state"));

    qobject_unref(resp);
    return state;
}

static void wait_state(QTestState *qts, const char *want)
{
    for (int i = 0; i < WAIT_MS / 10; i++) {
        g_autofree char *state = nuksm_state(qts);
        if (g_str_equal(state, want)) {
            return;
        }
        g_usleep(10 * 1000);
    }
    g_error("nuksm never reached state %s", want);
}

static void assert_error_contains(QDict *resp, const char *a, const char *b)
{
    const char *desc;

    g_assert(qdict_haskey(resp, "error"));
    desc = qdict_get_str(qdict_get_qdict(resp, "error"), "desc");
    g_assert_nonnull(strstr(desc, a));
    if (b) {
        g_assert_nonnull(strstr(desc, b));
    }
    qobject_unref(resp);
}

static double max_cpu_of(QTestState *qts)
{
    QDict *resp = qtest_qmp(qts, "{'execute': 'qom-get', 'arguments': "
                            "{'path': '/objects/dedup0', "
                            "'property': 'max-cpu'}}");
    double value = qdict_get_double(resp, "return");

    qobject_unref(resp);
    return value;
}

/* object-add rejects every bad property value with a message naming it. */
static void test_property_errors(void)
{
    static const struct {
        const char *args;
        const char *prop;
        const char *allowed;
    } cases[] = {
        { "'priority': 0", "'priority'", "between 1 and 1000" },
        { "'priority': 1001", "'priority'", "between 1 and 1000" },
        { "'max-cpu': 0", "'max-cpu'", "between 0.01 and 100" },
        { "'max-cpu': 0.001", "'max-cpu'", "between 0.01 and 100" },
        { "'max-cpu': 101", "'max-cpu'", "between 0.01 and 100" },
        { "'domain': ''", "'domain'", "[A-Za-z0-9._-]" },
        { "'domain': 'a b'", "'domain'", "[A-Za-z0-9._-]" },
        { "'agent': ''", "'agent'", "unix socket path" },
        { "'memdev': 'nope'", "'memdev'", "no memory backend" },
        { "'priority': 'high'", "priority", NULL },
        { "'governor': 'turbo'", "'governor'", "full, medium, low, quiet" },
        { "'hash-strength': 100", "'hash-strength'",
          "0 (adaptive) or a power of 2 from 64 to 4096" },
        { "'hash-strength': 32", "'hash-strength'",
          "0 (adaptive) or a power of 2 from 64 to 4096" },
        { "'hash-strength': 8192", "'hash-strength'",
          "0 (adaptive) or a power of 2 from 64 to 4096" },
        { "'distilling': 'sometimes'", "distilling", "bool" },
    };
    Agent a;
    QTestState *qts;

    agent_init(&a);
    qts = vm_start(a.sock, ",max-cpu=0.5");
    for (int i = 0; i < ARRAY_SIZE(cases); i++) {
        g_autofree char *json = g_strdup_printf(
            "{'qom-type': 'nuksm', 'id': 'bad%d', %s}", i, cases[i].args);
        QObject *args = qobject_from_json(json, &error_abort);

        assert_error_contains(qtest_qmp(qts, "{'execute': 'object-add', "
                                        "'arguments': %p}", args),
                              cases[i].prop, cases[i].allowed);
    }
    /* Nothing half-created is left behind. */
    assert_error_contains(qtest_qmp(qts, "{'execute': 'qom-get', "
                                    "'arguments': {'path': '/objects/bad0',"
                                    " 'property': 'priority'}}"),
                          "bad0", NULL);

    /* Run-time properties can be changed; identity ones cannot. */
    qobject_unref(qtest_qmp_assert_success_ref(qts,
        "{'execute': 'qom-set', 'arguments': {'path': '/objects/dedup0', "
        "'property': 'priority', 'value': 7}}"));
    assert_error_contains(qtest_qmp(qts, "{'execute': 'qom-set', "
        "'arguments': {'path': '/objects/dedup0', 'property': 'priority', "
        "'value': 5000}}"), "'priority'", "between 1 and 1000");
    /* Budgets below one percent, from the command line and QMP. */
    g_assert_cmpfloat(max_cpu_of(qts), ==, 0.5);
    qobject_unref(qtest_qmp_assert_success_ref(qts,
        "{'execute': 'qom-set', 'arguments': {'path': '/objects/dedup0', "
        "'property': 'max-cpu', 'value': 0.25}}"));
    g_assert_cmpfloat(max_cpu_of(qts), ==, 0.25);
    assert_error_contains(qtest_qmp(qts, "{'execute': 'qom-set', "
        "'arguments': {'path': '/objects/dedup0', 'property': 'domain', "
        "'value': 'other'}}"), "'domain'", "cannot be changed");
    {
        QDict *resp;
        QDict *info = nuksm_info(qts, "dedup0", &resp);
        g_assert_cmpint(qdict_get_int(info, "priority"), ==, 7);
        g_assert_cmpstr(qdict_get_str(info, "domain"), ==, "default");
        qobject_unref(resp);
    }
    qtest_quit(qts);
    agent_cleanup(&a);
}

/* The same errors stop QEMU at start-up, naming the property. */
static void test_cmdline_errors(void)
{
    static const struct {
        const char *opts;
        const char *want;
    } cases[] = {
        { "priority=0", "'priority' must be between 1 and 1000" },
        { "max-cpu=200", "'max-cpu' must be between 0.01 and 100" },
        { "max-cpu=half", "'max-cpu'" },
        { "governor=turbo", "Parameter 'governor' does not accept value "
          "'turbo' (allowed: full, medium, low, quiet)" },
        { "memdev=nope", "'memdev': no memory backend with id 'nope'" },
        { "bogus=1", "bogus" },
    };

    for (int i = 0; i < ARRAY_SIZE(cases); i++) {
        /* timeout(1): a case that QEMU wrongly accepts must not hang. */
        g_autofree char *cmd = g_strdup_printf(
            "timeout 30 %s -machine q35 -accel qtest -display none "
            "-nodefaults -object nuksm,id=d,%s",
            g_getenv("QTEST_QEMU_BINARY"), cases[i].opts);
        g_autofree char *out = NULL, *err = NULL;
        g_autoptr(GError) gerr = NULL;
        int status;

        g_assert(g_spawn_command_line_sync(cmd, &out, &err, &status, &gerr));
        /* QEMU exits 1 on a configuration error; timeout(1) exits 124. */
        g_assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 1);
        if (!strstr(err, cases[i].want)) {
            g_error("'%s' printed '%s', expected '%s'", cmd, err,
                    cases[i].want);
        }
    }
}

/* qom-set property @prop of dedup0 to the JSON value @json. */
static void qom_set_json(QTestState *qts, const char *prop, const char *json)
{
    QObject *value = qobject_from_json(json, &error_abort);

    qobject_unref(qtest_qmp_assert_success_ref(qts,
        "{'execute': 'qom-set', 'arguments': {'path': '/objects/dedup0', "
        "'property': %s, 'value': %p}}", prop, value));
}

/* query-nuksm's budget equals the one given. */
static void assert_budget(QTestState *qts, const char *governor,
                          double max_cpu, const char *max_cpu_source,
                          const char *scan_rate_source, int64_t rest_ms)
{
    QDict *resp;
    QDict *budget = qdict_get_qdict(nuksm_info(qts, "dedup0", &resp),
                                    "budget");

    g_assert_cmpstr(qdict_get_str(budget, "governor"), ==, governor);
    g_assert_cmpfloat(qdict_get_double(budget, "max-cpu"), ==, max_cpu);
    g_assert_cmpstr(qdict_get_str(budget, "max-cpu-source"), ==,
                    max_cpu_source);
    g_assert_cmpint(qdict_get_int(budget, "scan-rate"), ==, 0);
    g_assert_cmpstr(qdict_get_str(budget, "scan-rate-source"), ==,
                    scan_rate_source);
    g_assert_cmpint(qdict_get_int(budget, "rest-ms"), ==, rest_ms);
    qobject_unref(resp);
    /* qom-get reads the budget as applied. */
    g_assert_cmpfloat(max_cpu_of(qts), ==, max_cpu);
}

/*
 * Governors preset max-cpu, scan-rate and the rests; they change at run
 * time, and a property set explicitly overrides them from then on, in
 * whatever order the command line names them.
 */
static void test_governor(void)
{
    Agent a;
    QTestState *qts;

    agent_init(&a);
    qts = vm_start(a.sock, NULL);
    assert_budget(qts, "medium", 10, "governor", "governor", 1000);
    qom_set_json(qts, "governor", "\"quiet\"");
    assert_budget(qts, "quiet", 0.5, "governor", "governor", 4000);
    qom_set_json(qts, "governor", "\"full\"");
    assert_budget(qts, "full", 40, "governor", "governor", 500);
    qom_set_json(qts, "max-cpu", "3");
    assert_budget(qts, "full", 3, "property", "governor", 500);
    qom_set_json(qts, "governor", "\"low\"");
    assert_budget(qts, "low", 3, "property", "governor", 2000);
    qom_set_json(qts, "scan-rate", "0");
    assert_budget(qts, "low", 3, "property", "property", 2000);
    {
        g_autofree char *out = qtest_hmp(qts, "info nuksm");

        g_assert_nonnull(strstr(out, "governor low: max-cpu 3% (property), "
                                "scan-rate 0 (property), rests from 2000 ms"));
    }
    qtest_quit(qts);

    qts = vm_start(a.sock, ",max-cpu=3,governor=quiet");
    assert_budget(qts, "quiet", 3, "property", "governor", 4000);
    qtest_quit(qts);
    qts = vm_start(a.sock, ",governor=quiet,max-cpu=3");
    assert_budget(qts, "quiet", 3, "property", "governor", 4000);
    qtest_quit(qts);
    agent_cleanup(&a);
}

/* disconnected -> active -> disconnected (killed) -> active (restarted) */
static void test_state_transitions(void)
{
    Agent a;
    QTestState *qts;
    QDict *resp, *info, *ev;

    agent_init(&a);
    qts = vm_start(a.sock, NULL);

    info = nuksm_info(qts, "dedup0", &resp);
    g_assert_cmpstr(qdict_get_str(info, "state"), ==, "disconnected");
    g_assert_nonnull(strstr(qdict_get_str(info, "agent-error"),
                            "No such file or directory"));
    g_assert_false(qdict_haskey(info, "policy"));
    g_assert_false(qdict_haskey(info, "merge-domain"));
    g_assert_false(qdict_haskey(info, "domain-source"));
    g_assert_false(qdict_haskey(info, "priority-limit"));
    g_assert_cmpstr(qdict_get_str(info, "agent"), ==, a.sock);
    qobject_unref(resp);

    agent_start(&a, "--policy local");
    ev = qtest_qmp_eventwait_ref(qts, "NUKSM_AGENT_CONNECTED");
    g_assert_cmpstr(qdict_get_str(qdict_get_qdict(ev, "data"), "id"), ==,
                    "dedup0");
    g_assert_cmpstr(qdict_get_str(qdict_get_qdict(ev, "data"), "agent"), ==,
                    a.sock);
    qobject_unref(ev);
    info = nuksm_info(qts, "dedup0", &resp);
    g_assert_cmpstr(qdict_get_str(info, "state"), ==, "active");
    g_assert_cmpstr(qdict_get_str(info, "policy"), ==, "local");
    g_assert_false(qdict_haskey(info, "agent-error"));
    g_assert_cmpstr(qdict_get_str(info, "merge-domain"), ==, "default");
    g_assert_cmpstr(qdict_get_str(info, "domain-source"), ==, "shared");
    g_assert_cmpint(qdict_get_int(info, "priority-limit"), ==,
                    NUKSM_PRIORITY_MAX);
    qobject_unref(resp);

    agent_kill(&a, SIGKILL);
    ev = qtest_qmp_eventwait_ref(qts, "NUKSM_AGENT_DISCONNECTED");
    g_assert_cmpstr(qdict_get_str(qdict_get_qdict(ev, "data"), "reason"), ==,
                    "agent closed the connection");
    qobject_unref(ev);
    info = nuksm_info(qts, "dedup0", &resp);
    g_assert_cmpstr(qdict_get_str(info, "state"), ==, "disconnected");
    /* What the agent decided went with it. */
    g_assert_false(qdict_haskey(info, "merge-domain"));
    g_assert_false(qdict_haskey(info, "domain-source"));
    g_assert_false(qdict_haskey(info, "priority-limit"));
    qobject_unref(resp);

    /* The stale socket of a killed agent is taken over by a new one. */
    agent_start(&a, NULL);
    qobject_unref(qtest_qmp_eventwait_ref(qts, "NUKSM_AGENT_CONNECTED"));
    wait_state(qts, "active");

    /* A clean agent shutdown is seen the same way. */
    agent_kill(&a, SIGTERM);
    qobject_unref(qtest_qmp_eventwait_ref(qts, "NUKSM_AGENT_DISCONNECTED"));

    qtest_quit(qts);
    agent_cleanup(&a);
}

/*
 * The policy is agent-wide: set through one VM (which the agent allows
 * with --vm-set-policy), seen by all, in every merge domain.
 */
static void test_policy(void)
{
    Agent a;
    QTestState *vm1, *vm2;
    QDict *resp, *info;

    agent_init(&a);
    agent_start(&a, "--fake-numa 2 --vm-set-policy --vm-domains=allow");
    vm1 = vm_start(a.sock, NULL);
    vm2 = vm_start(a.sock, ",domain=tenant2,priority=9");
    wait_state(vm1, "active");
    wait_state(vm2, "active");

    info = nuksm_info(vm2, "dedup0", &resp);
    g_assert_cmpstr(qdict_get_str(info, "merge-domain"), ==, "tenant2");
    g_assert_cmpstr(qdict_get_str(info, "domain-source"), ==, "request");
    qobject_unref(resp);

    /* Each VM sees the figures of its own merge domain. */
    resp = qtest_qmp_assert_success_ref(vm1, "{'execute': "
                                        "'query-nuksm-agent'}");
    g_assert_cmpstr(qdict_get_str(resp, "policy"), ==, "global");
    g_assert_cmpstr(qdict_get_str(resp, "scope"), ==, "domain");
    g_assert_cmpint(qdict_get_int(resp, "vms"), ==, 1);
    g_assert_cmpint(qlist_size(qdict_get_qlist(resp,
                                               "store-pages-per-node")),
                    ==, 2);
    qobject_unref(resp);

    qobject_unref(qtest_qmp_assert_success_ref(vm1,
        "{'execute': 'nuksm-set-policy', 'arguments': {'policy': 'fair'}}"));
    resp = qtest_qmp_assert_success_ref(vm2, "{'execute': "
                                        "'query-nuksm-agent'}");
    g_assert_cmpstr(qdict_get_str(resp, "policy"), ==, "fair");
    qobject_unref(resp);
    for (int i = 0; i < WAIT_MS / 10; i++) {
        info = nuksm_info(vm2, "dedup0", &resp);
        if (g_str_equal(qdict_get_try_str(info, "policy") ?: "", "fair")) {
            break;
        }
        qobject_unref(resp);
        resp = NULL;
        g_usleep(10 * 1000);
    }
    g_assert_nonnull(resp);  /* vm2 was told of the change */
    g_assert_cmpstr(qdict_get_str(info, "domain"), ==, "tenant2");
    g_assert_cmpint(qdict_get_int(info, "priority"), ==, 9);
    qobject_unref(resp);

    assert_error_contains(qtest_qmp(vm1, "{'execute': 'nuksm-set-policy', "
                                    "'arguments': {'policy': 'fastest'}}"),
                          "'policy'", "global, ksm-order, local, fair, "
                          "priority, adaptive, auto");
    assert_error_contains(qtest_qmp(vm1, "{'execute': 'nuksm-set-policy', "
                                    "'arguments': {'policy': 'local', "
                                    "'id': 'nope'}}"),
                          "no nuksm object with id 'nope'", NULL);
    /* A refused policy changed nothing. */
    resp = qtest_qmp_assert_success_ref(vm1, "{'execute': "
                                        "'query-nuksm-agent'}");
    g_assert_cmpstr(qdict_get_str(resp, "policy"), ==, "fair");
    qobject_unref(resp);

    qtest_quit(vm2);
    qtest_quit(vm1);
    agent_kill(&a, SIGTERM);
    agent_cleanup(&a);
}

/*
 * The agent decides each VM's merge domain; the domain property is only
 * a request, which query-nuksm keeps beside the agent's decision.
 */
static void test_domain_assignment(void)
{
    static const struct {
        const char *agent_args;
        const char *merge_domain;   /* a prefix with @prefix */
        bool prefix;
        const char *source;
    } cases[] = {
        /* By default every VM the operator assigned nothing shares one. */
        { NULL, "default", false, "shared" },
        { "--vm-domains=allow", "blue", false, "request" },
        /* The agent's own names for private domains: nobody can ask. */
        { "--isolation=vm", "vm:", true, "private" },
        { "--isolation=vm --vm-domains=allow", "blue", false, "request" },
    };

    for (int i = 0; i < ARRAY_SIZE(cases); i++) {
        g_autofree char *hmp = NULL;
        g_autofree char *want_hmp = NULL;
        const char *merge_domain;
        Agent a;
        QTestState *qts;
        QDict *resp, *info;

        agent_init(&a);
        agent_start(&a, cases[i].agent_args);
        qts = vm_start(a.sock, ",domain=blue,priority=42");
        wait_state(qts, "active");

        info = nuksm_info(qts, "dedup0", &resp);
        merge_domain = qdict_get_str(info, "merge-domain");
        if (cases[i].prefix) {
            g_assert_true(g_str_has_prefix(merge_domain,
                                           cases[i].merge_domain));
            g_assert_cmpstr(merge_domain, !=, cases[i].merge_domain);
        } else {
            g_assert_cmpstr(merge_domain, ==, cases[i].merge_domain);
        }
        g_assert_cmpstr(qdict_get_str(info, "domain-source"), ==,
                        cases[i].source);
        /* The request stays what the property says. */
        g_assert_cmpstr(qdict_get_str(info, "domain"), ==, "blue");
        g_assert_cmpint(qdict_get_int(info, "priority"), ==, 42);
        g_assert_cmpint(qdict_get_int(info, "priority-limit"), ==,
                        NUKSM_PRIORITY_MAX);

        hmp = qtest_hmp(qts, "info nuksm");
        want_hmp = g_strdup_printf("\n  merge domain %s (%s), priority in "
                                   "force 42 (limit %u)\r\n", merge_domain,
                                   cases[i].source, NUKSM_PRIORITY_MAX);
        if (!strstr(hmp, want_hmp) ||
            !strstr(hmp, "dedup0: active, agent ") ||
            !strstr(hmp, ", domain blue, priority 42, ")) {
            g_error("info nuksm printed '%s', expected '%s'", hmp, want_hmp);
        }
        qobject_unref(resp);

        qtest_quit(qts);
        agent_kill(&a, SIGTERM);
        agent_cleanup(&a);
    }
}

/*
 * The policy is host-wide: the agent takes it from a VM only with
 * --vm-set-policy, and the refusal says so.
 */
static void test_set_policy_denied(void)
{
    Agent a;
    QTestState *qts;
    QDict *resp;

    agent_init(&a);
    agent_start(&a, NULL);
    qts = vm_start(a.sock, NULL);
    wait_state(qts, "active");
    assert_error_contains(qtest_qmp(qts, "{'execute': 'nuksm-set-policy', "
                                    "'arguments': {'policy': 'fair'}}"),
                          "nuksm 'dedup0': the agent refused: ",
                          "vm-set-policy");
    /* Nothing changed, and the VM stays connected. */
    resp = qtest_qmp_assert_success_ref(qts, "{'execute': "
                                        "'query-nuksm-agent'}");
    g_assert_cmpstr(qdict_get_str(resp, "policy"), ==, "global");
    qobject_unref(resp);
    g_assert_cmpstr(nuksm_state(qts), ==, "active");
    qtest_quit(qts);
    agent_kill(&a, SIGTERM);
    agent_cleanup(&a);

    agent_init(&a);
    agent_start(&a, "--vm-set-policy");
    qts = vm_start(a.sock, NULL);
    wait_state(qts, "active");
    qobject_unref(qtest_qmp_assert_success_ref(qts,
        "{'execute': 'nuksm-set-policy', 'arguments': {'policy': 'fair'}}"));
    resp = qtest_qmp_assert_success_ref(qts, "{'execute': "
                                        "'query-nuksm-agent'}");
    g_assert_cmpstr(qdict_get_str(resp, "policy"), ==, "fair");
    qobject_unref(resp);
    qtest_quit(qts);
    agent_kill(&a, SIGTERM);
    agent_cleanup(&a);
}

static int64_t agent_vms(QTestState *qts)
{
    QDict *resp = qtest_qmp_assert_success_ref(qts, "{'execute': "
                                               "'query-nuksm-agent'}");
    int64_t vms = qdict_get_int(resp, "vms");

    qobject_unref(resp);
    return vms;
}

static int64_t nuksm_objects(QTestState *qts)
{
    QDict *resp = qtest_qmp(qts, "{'execute': 'query-nuksm'}");
    int64_t n = qlist_size(qdict_get_qlist(resp, "return"));

    qobject_unref(resp);
    return n;
}

/* Objects added and deleted at run time join and leave the agent. */
static void test_hotplug(void)
{
    Agent a;
    QTestState *qts;

    agent_init(&a);
    agent_start(&a, NULL);
    qts = vm_start(a.sock, NULL);
    wait_state(qts, "active");
    g_assert_cmpint(agent_vms(qts), ==, 1);

    qobject_unref(qtest_qmp_assert_success_ref(qts,
        "{'execute': 'object-add', 'arguments': {'qom-type': 'nuksm', "
        "'id': 'extra', 'agent': %s, 'domain': 'other'}}", a.sock));
    g_assert_cmpint(nuksm_objects(qts), ==, 2);
    for (int i = 0; i < WAIT_MS / 10 && agent_vms(qts) != 2; i++) {
        g_usleep(10 * 1000);
    }
    g_assert_cmpint(agent_vms(qts), ==, 2);

    qobject_unref(qtest_qmp_assert_success_ref(qts,
        "{'execute': 'object-del', 'arguments': {'id': 'extra'}}"));
    g_assert_cmpint(nuksm_objects(qts), ==, 1);
    for (int i = 0; i < WAIT_MS / 10 && agent_vms(qts) != 1; i++) {
        g_usleep(10 * 1000);
    }
    g_assert_cmpint(agent_vms(qts), ==, 1);
    g_assert_cmpstr(nuksm_state(qts), ==, "active");

    qtest_quit(qts);
    agent_kill(&a, SIGTERM);
    agent_cleanup(&a);
}

/* Hotness windows @id has sampled so far. */
static uint64_t hot_samples(QTestState *qts, const char *id)
{
    QDict *resp;
    QDict *info = nuksm_info(qts, id, &resp);
    uint64_t samples = qdict_get_int(qdict_get_qdict(info, "hotness"),
                                     "samples");

    qobject_unref(resp);
    return samples;
}

/*
 * Two objects over different backends sample writes at once, with
 * windows that overlap in every order: the dirty-log flag they share
 * stays on while either window is open, and the VM runs on (it aborted
 * when the first window to close turned the flag off for both).
 */
static void test_two_objects(void)
{
    const char *ids[] = { "dedup0", "dedup1" };
    Agent a;
    QTestState *qts;

    agent_init(&a);
    agent_start(&a, NULL);
    qts = qtest_initf("-machine q35 -m 128M "
                      "-object memory-backend-ram,id=m0,size=64M "
                      "-object memory-backend-ram,id=m1,size=64M "
                      "-numa node,memdev=m0 -numa node,memdev=m1 "
                      "-object nuksm,id=dedup0,agent=%s,memdev=m0,"
                      "hot-window=10 "
                      "-object nuksm,id=dedup1,agent=%s,memdev=m1,"
                      "hot-window=13", a.sock, a.sock);
    for (size_t k = 0; k < G_N_ELEMENTS(ids); k++) {
        int i;

        for (i = 0; i < WAIT_MS / 10 && hot_samples(qts, ids[k]) < 20; i++) {
            g_usleep(10 * 1000);
        }
        g_assert_cmpuint(hot_samples(qts, ids[k]), >=, 20);
    }
    g_assert_cmpint(agent_vms(qts), ==, 2);

    qtest_quit(qts);
    agent_kill(&a, SIGTERM);
    agent_cleanup(&a);
}

/* Without an agent, agent requests fail cleanly, naming the reason. */
static void test_no_agent_errors(void)
{
    Agent a;
    QTestState *qts;

    agent_init(&a);
    qts = vm_start(a.sock, NULL);
    assert_error_contains(qtest_qmp(qts, "{'execute': 'query-nuksm-agent', "
                                    "'arguments': {'id': 'dedup0'}}"),
                          "not connected to the agent",
                          "No such file or directory");
    assert_error_contains(qtest_qmp(qts, "{'execute': 'nuksm-set-policy', "
                                    "'arguments': {'policy': 'fair'}}"),
                          "no nuksm object is connected", NULL);
    qtest_quit(qts);
    agent_cleanup(&a);
}

typedef struct ScanStats {
    int64_t full_scans;
    int64_t pages_scanned;
    int64_t pages_volatile;
} ScanStats;

static ScanStats scan_stats(QTestState *qts)
{
    QDict *resp;
    QDict *info = nuksm_info(qts, "dedup0", &resp);
    ScanStats st = {
        .full_scans = qdict_get_int(info, "full-scans"),
        .pages_scanned = qdict_get_int(info, "pages-scanned"),
        .pages_volatile = qdict_get_int(info, "pages-volatile"),
    };

    qobject_unref(resp);
    return st;
}

/* Wait until the scanner completed @passes full passes. */
static ScanStats wait_full_scans(QTestState *qts, int64_t passes)
{
    for (int i = 0; i < WAIT_MS / 10; i++) {
        ScanStats st = scan_stats(qts);
        if (st.full_scans >= passes) {
            return st;
        }
        g_usleep(10 * 1000);
    }
    g_error("the scanner did not complete %" PRId64 " passes", passes);
}

static void write_pages(QTestState *qts, uint64_t first, uint64_t count,
                        uint64_t seed)
{
    for (uint64_t p = 0; p < count; p++) {
        qtest_writeq(qts, (first + p) * 4096, seed + p);
    }
}

/*
 * The scanner hashes exactly the resident pages, notices changed ones,
 * and nuksm-scan starts a pass at once; enabled=off pauses the object.
 */
static void test_enabled_and_scan(void)
{
    const uint64_t ram_pages = RAM_MB * 1024 * 1024 / 4096;
    const uint64_t first = 16384, touched = 4096;  /* 16 MiB at 64 MiB */
    /* Pages QEMU itself makes resident (firmware shadow), generously. */
    const uint64_t slack = 1024;
    Agent a;
    QTestState *qts;
    QDict *resp, *info;
    ScanStats st, st2;

    agent_init(&a);
    agent_start(&a, NULL);
    qts = vm_start(a.sock, ",max-cpu=100");
    wait_state(qts, "active");

    info = nuksm_info(qts, "dedup0", &resp);
    g_assert_cmpint(qdict_get_int(info, "eligible-pages"), ==, ram_pages);
    qobject_unref(resp);

    write_pages(qts, first, touched, 1);
    qobject_unref(qtest_qmp_assert_success_ref(qts,
        "{'execute': 'nuksm-scan', 'arguments': {'id': 'dedup0'}}"));
    /* A pass running during the writes may finish; the next one sees all. */
    st = wait_full_scans(qts, scan_stats(qts).full_scans + 2);
    g_assert_cmpint(st.pages_scanned, >=, touched);
    /* Untouched RAM is never hashed (nor populated). */
    g_assert_cmpint(st.pages_scanned, <=,
                    (st.full_scans + 1) * (touched + slack));

    /* Rewriting the pages makes them volatile for the next pass. */
    write_pages(qts, first, touched, 1000000);
    qobject_unref(qtest_qmp_assert_success_ref(qts,
        "{'execute': 'nuksm-scan'}"));
    st2 = wait_full_scans(qts, scan_stats(qts).full_scans + 2);
    g_assert_cmpint(st2.pages_volatile - st.pages_volatile, >=, touched);
    g_assert_cmpint(st2.pages_volatile - st.pages_volatile, <=,
                    touched + slack);

    qobject_unref(qtest_qmp_assert_success_ref(qts,
        "{'execute': 'qom-set', 'arguments': {'path': '/objects/dedup0', "
        "'property': 'enabled', 'value': false}}"));
    g_assert_cmpstr(nuksm_state(qts), ==, "disabled");
    assert_error_contains(qtest_qmp(qts, "{'execute': 'nuksm-scan', "
                                    "'arguments': {'id': 'dedup0'}}"),
                          "disabled", "'enabled'");
    assert_error_contains(qtest_qmp(qts, "{'execute': 'nuksm-scan', "
                                    "'arguments': {'id': 'nope'}}"),
                          "no nuksm object with id 'nope'", NULL);
    qobject_unref(qtest_qmp_assert_success_ref(qts,
        "{'execute': 'qom-set', 'arguments': {'path': '/objects/dedup0', "
        "'property': 'enabled', 'value': true}}"));
    g_assert_cmpstr(nuksm_state(qts), ==, "active");

    qtest_quit(qts);
    agent_kill(&a, SIGTERM);
    agent_cleanup(&a);
}

/*
 * With region distilling, every region starts at the bottom level,
 * where a pass hashes one resident page in 64 of it.
 */
static void test_distilling_samples(void)
{
    const uint64_t first = 16384, touched = 4096;  /* 16 MiB at 64 MiB */
    const uint64_t slack = 1024;    /* as in test_enabled_and_scan */
    Agent a;
    QTestState *qts;
    ScanStats st;

    agent_init(&a);
    agent_start(&a, NULL);
    qts = vm_start(a.sock, ",max-cpu=100,distilling=on");
    wait_state(qts, "active");
    write_pages(qts, first, touched, 1);
    qobject_unref(qtest_qmp_assert_success_ref(qts,
        "{'execute': 'nuksm-scan', 'arguments': {'id': 'dedup0'}}"));
    st = wait_full_scans(qts, scan_stats(qts).full_scans + 2);
    /* Each full pass sampled 64 of the pages written... */
    g_assert_cmpint(st.pages_scanned, >=, touched / 64);
    /* ... and far from all of them: a quarter would be level 2's share. */
    g_assert_cmpint(st.pages_scanned, <,
                    (st.full_scans + 1) * (touched + slack) / 16);

    qtest_quit(qts);
    agent_kill(&a, SIGTERM);
    agent_cleanup(&a);
}

/* nuksm steps aside (paused) while a migration runs, then resumes. */
static void test_migration_pauses(void)
{
    Agent a;
    QTestState *qts;
    g_autofree char *uri = NULL;
    bool cancelled = false;

    agent_init(&a);
    agent_start(&a, NULL);
    qts = vm_start(a.sock, NULL);
    wait_state(qts, "active");

    /* 32 MiB of data at 8 MiB/s keeps the migration going for seconds. */
    write_pages(qts, 8192, 8192, 7);
    uri = g_strdup_printf("file:%s/migration", a.dir);
    qobject_unref(qtest_qmp_assert_success_ref(qts,
        "{'execute': 'migrate-set-parameters', "
        "'arguments': {'max-bandwidth': 8388608}}"));
    qobject_unref(qtest_qmp_assert_success_ref(qts,
        "{'execute': 'migrate', 'arguments': {'uri': %s}}", uri));
    wait_state(qts, "paused");

    qobject_unref(qtest_qmp_assert_success_ref(qts,
        "{'execute': 'migrate_cancel'}"));
    for (int i = 0; i < WAIT_MS / 10; i++) {
        QDict *resp = qtest_qmp_assert_success_ref(qts,
                                                   "{'execute': "
                                                   "'query-migrate'}");
        cancelled = g_str_equal(qdict_get_str(resp, "status"), "cancelled");
        qobject_unref(resp);
        if (cancelled) {
            break;
        }
        g_usleep(10 * 1000);
    }
    g_assert_true(cancelled);
    wait_state(qts, "active");

    qtest_quit(qts);
    unlink(uri + strlen("file:"));
    agent_kill(&a, SIGTERM);
    agent_cleanup(&a);
}

static bool exclusion_has(QDict *info, const char *memdev,
                          const char *reason)
{
    QListEntry *e;

    QLIST_FOREACH_ENTRY(qdict_get_qlist(info, "excluded"), e) {
        QDict *ex = qobject_to(QDict, qlist_entry_obj(e));
        /* RAM blocks of devices are named after the device's path. */
        if ((g_str_equal(qdict_get_str(ex, "memdev"), memdev) ||
             g_str_has_suffix(qdict_get_str(ex, "memdev"), memdev)) &&
            g_str_equal(qdict_get_str(ex, "reason"), reason)) {
            return true;
        }
    }
    return false;
}

/* Shared RAM, ROM and unselected backends are reported, not touched. */
static void test_exclusions(void)
{
    Agent a;
    QTestState *qts;
    QDict *resp, *info;

    agent_init(&a);
    qts = qtest_initf("-machine q35 -m 128M "
                      "-object memory-backend-ram,id=m0,size=64M "
                      "-object memory-backend-memfd,id=m1,size=32M,share=on "
                      "-object memory-backend-ram,id=m2,size=32M "
                      "-numa node,memdev=m0 -numa node,memdev=m1 "
                      "-numa node,memdev=m2 -device VGA "
                      "-object nuksm,id=dedup0,agent=%s "
                      "-object nuksm,id=only2,agent=%s,memdev=m2",
                      a.sock, a.sock);

    info = nuksm_info(qts, "dedup0", &resp);
    g_assert_cmpint(qdict_get_int(info, "eligible-pages"), ==,
                    (64 + 32) * 256);
    g_assert_true(exclusion_has(info, "m1", "shared"));
    g_assert_true(exclusion_has(info, "pc.bios", "rom"));
    g_assert_true(exclusion_has(info, "/vga.vram", "device-ram"));
    g_assert_false(exclusion_has(info, "m0", "not-selected"));
    qobject_unref(resp);

    info = nuksm_info(qts, "only2", &resp);
    g_assert_cmpint(qdict_get_int(info, "eligible-pages"), ==, 32 * 256);
    g_assert_true(exclusion_has(info, "m0", "not-selected"));
    g_assert_true(exclusion_has(info, "m1", "not-selected"));
    qobject_unref(resp);

    /* HMP shows the same. */
    {
        g_autofree char *out = qtest_hmp(qts, "info nuksm");
        g_assert_nonnull(strstr(out, "dedup0: disconnected"));
        g_assert_nonnull(strstr(out, "excluded m1 (32 MiB): shared"));
        g_assert_nonnull(strstr(out, "only2: disconnected"));
    }
    qtest_quit(qts);
    agent_cleanup(&a);
}

/*
 * An agent that refuses the handshake (here: a protocol version QEMU
 * does not speak) leaves the object disconnected with a clear reason.
 * The test plays the agent over a raw socket.
 */
static void test_version_mismatch(void)
{
    struct sockaddr_un addr = { .sun_family = AF_UNIX };
    uint64_t buf[NUKSM_MSG_MAX / sizeof(uint64_t)];
    const NuksmMsgHello *hello;
    NuksmMsgHelloAck ack = {
        .version = NUKSM_PROTO_VERSION + 1,
        .client_id = 1,
        .policy = NUKSM_POLICY_ID_GLOBAL,
        .nr_nodes = 1,
        .agent_version = "99.0",
    };
    NuksmMsgError err = { 0 };
    g_autofree char *want_ack = g_strdup_printf(
        "QEMU speaks %u, nuksmd speaks %u", NUKSM_PROTO_VERSION,
        NUKSM_PROTO_VERSION + 1);
    g_autofree char *refusal = g_strdup_printf(
        "protocol version mismatch: nuksmd speaks %u, client speaks %u", NUKSM_PROTO_VERSION + 1,
        NUKSM_PROTO_VERSION);
    Agent a;
    QTestState *qts;
    QDict *resp, *info;
    int lfd, cfd;
    ssize_t n;

    agent_init(&a);
    lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    g_strlcpy(addr.sun_path, a.sock, sizeof(addr.sun_path));
    g_assert(bind(lfd, (struct sockaddr *)&addr, sizeof(addr)) == 0);
    g_assert(listen(lfd, 4) == 0);

    qts = vm_start(a.sock, ",domain=blue");
    cfd = accept(lfd, NULL, NULL);
    g_assert(cfd >= 0);
    n = recv(cfd, buf, sizeof(buf), 0);
    g_assert(n > 0);
    g_assert_null(nuksm_msg_check(buf, n));
    g_assert_cmpint(((NuksmMsgHeader *)buf)->type, ==, NUKSM_MSG_HELLO);
    hello = nuksm_msg_payload(buf);
    g_assert_cmpint(hello->version, ==, NUKSM_PROTO_VERSION);
    g_assert_cmpint(hello->role, ==, NUKSM_ROLE_VM);
    g_assert_cmpint(hello->priority, ==, 100);
    g_assert_cmpstr(hello->domain, ==, "blue");
    g_assert_cmpstr(hello->object_id, ==, "dedup0");

    n = nuksm_msg_pack(buf, NUKSM_MSG_HELLO_ACK, 1, &ack, sizeof(ack));
    g_assert(send(cfd, buf, n, 0) == n);
    for (int i = 0; i < WAIT_MS / 10; i++) {
        info = nuksm_info(qts, "dedup0", &resp);
        if (qdict_haskey(info, "agent-error") &&
            strstr(qdict_get_str(info, "agent-error"), "version mismatch")) {
            break;
        }
        qobject_unref(resp);
        resp = NULL;
        g_usleep(10 * 1000);
    }
    g_assert_nonnull(resp);
    g_assert_cmpstr(qdict_get_str(info, "state"), ==, "disconnected");
    g_assert_nonnull(strstr(qdict_get_str(info, "agent-error"), want_ack));
    qobject_unref(resp);
    /* QEMU closed its end. */
    g_assert_cmpint(recv(cfd, buf, sizeof(buf), 0), ==, 0);
    close(cfd);

    /* QEMU retries (after its longest backoff); this time refuse it. */
    cfd = accept(lfd, NULL, NULL);
    g_assert(cfd >= 0);
    n = recv(cfd, buf, sizeof(buf), 0);
    g_assert(n > 0 && !nuksm_msg_check(buf, n));
    err.code = NUKSM_ERR_VERSION;
    nuksm_strfield_set(err.message, sizeof(err.message), refusal);
    n = nuksm_msg_pack(buf, NUKSM_MSG_ERROR, 1, &err, sizeof(err));
    g_assert(send(cfd, buf, n, 0) == n);
    for (int i = 0; i < WAIT_MS / 10; i++) {
        info = nuksm_info(qts, "dedup0", &resp);
        if (g_str_has_suffix(qdict_get_str(info, "agent-error"), refusal) &&
            g_str_has_prefix(qdict_get_str(info, "agent-error"),
                             "agent refused the handshake: ")) {
            break;
        }
        qobject_unref(resp);
        resp = NULL;
        g_usleep(10 * 1000);
    }
    g_assert_nonnull(resp);
    g_assert_cmpstr(qdict_get_str(info, "state"), ==, "disconnected");
    qobject_unref(resp);
    g_assert_cmpint(recv(cfd, buf, sizeof(buf), 0), ==, 0);

    close(cfd);
    close(lfd);
    qtest_quit(qts);
    agent_cleanup(&a);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);

    if (!g_getenv("NUKSMD") || !g_file_test(g_getenv("NUKSMD"),
                                            G_FILE_TEST_IS_EXECUTABLE)) {
        g_test_skip("NUKSMD is not set to the nuksmd binary: nuksm tests "
                    "need a real agent (run them with 'make check' in the "
                    "nuksm repository)");
        return g_test_run();
    }
    qtest_add_func("/nuksm/property-errors", test_property_errors);
    qtest_add_func("/nuksm/cmdline-errors", test_cmdline_errors);
    qtest_add_func("/nuksm/governor", test_governor);
    qtest_add_func("/nuksm/state-transitions", test_state_transitions);
    qtest_add_func("/nuksm/policy", test_policy);
    qtest_add_func("/nuksm/domain-assignment", test_domain_assignment);
    qtest_add_func("/nuksm/set-policy-denied", test_set_policy_denied);
    qtest_add_func("/nuksm/hotplug", test_hotplug);
    qtest_add_func("/nuksm/two-objects", test_two_objects);
    qtest_add_func("/nuksm/no-agent-errors", test_no_agent_errors);
    qtest_add_func("/nuksm/enabled-and-scan", test_enabled_and_scan);
    qtest_add_func("/nuksm/distilling-samples", test_distilling_samples);
    qtest_add_func("/nuksm/migration-pauses", test_migration_pauses);
    qtest_add_func("/nuksm/exclusions", test_exclusions);
    qtest_add_func("/nuksm/version-mismatch", test_version_mismatch);
    return g_test_run();
}
