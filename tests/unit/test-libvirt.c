/*
 * Unit tests of nuksmd's libvirt registry (agent/server/libvirt.h): the
 * hook's registrations, the machine name of a libvirt QEMU's cgroup, and
 * which registration is a connecting VM's.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <glib.h>
#include <glib/gstdio.h>

#include "libvirt.h"

#define UUID_A "2f6b1c4e-0000-4000-8000-00000000000a"
#define UUID_B "2f6b1c4e-0000-4000-8000-00000000000b"

static LibvirtDomain parse_ok(const char *text)
{
    LibvirtDomain dom;

    memset(&dom, 0x5a, sizeof(dom));
    if (!libvirt_registration_parse(text, &dom)) {
        g_error("did not parse:\n%s", text);
    }
    return dom;
}

static void test_parse_full(void)
{
    LibvirtDomain dom = parse_ok(
        "# Written by libvirt's nuksm hook\n[vm]\nname=web1\n"
        "uuid=" UUID_A "\nmachine=qemu-3-web1\npid=1234\n"
        "domain=tenant-a\npriority=500\nmax-cpu=20\n");

    g_assert_cmpint(dom.pid, ==, 1234);
    g_assert_cmpstr(dom.name, ==, "web1");
    g_assert_cmpstr(dom.uuid, ==, UUID_A);
    g_assert_cmpstr(dom.machine, ==, "qemu-3-web1");
    g_assert_cmpstr(dom.domain, ==, "tenant-a");
    g_assert_cmpuint(dom.priority, ==, 500);
}

/* At libvirt's "start" the hook knows the machine, not yet the pid. */
static void test_parse_optional(void)
{
    LibvirtDomain dom = parse_ok("[vm]\nname=web1\nuuid=" UUID_A
                                 "\nmachine=qemu-3-web1\n");

    g_assert_cmpint(dom.pid, ==, 0);
    g_assert_cmpstr(dom.machine, ==, "qemu-3-web1");
    g_assert_cmpstr(dom.domain, ==, "");
    g_assert_cmpuint(dom.priority, ==, 0);

    /* The hook before machine=: pid only. */
    dom = parse_ok("[vm]\nname=web1\nuuid=" UUID_A "\npid=77\n");
    g_assert_cmpint(dom.pid, ==, 77);
    g_assert_cmpstr(dom.machine, ==, "");
}

static void test_parse_settings(void)
{
    static const struct {
        const char *domain, *expect;
    } domains[] = {
        { "tenant-a", "tenant-a" },
        { "A.b_c-9", "A.b_c-9" },
        { "x", "x" },
        /* 63 characters: the longest. */
        { "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijk",
          "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijk" },
        /* 64: too long, as QEMU's domain property says. */
        { "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijkl",
          "" },
        { "", "" },
        { "a b", "" },
        { "vm:1", "" },         /* the agent's private domains' names */
        { "tenant/a", "" },
        { "ténant", "" },
    };
    static const struct {
        const char *priority;
        uint32_t expect;
    } priorities[] = {
        { "1", 1 }, { "1000", 1000 }, { "100", 100 },
        { "0", 0 }, { "1001", 0 }, { "-5", 0 }, { "5x", 0 }, { "", 0 },
        { "99999999999999999999", 0 },
    };

    for (size_t i = 0; i < G_N_ELEMENTS(domains); i++) {
        g_autofree char *text = g_strdup_printf(
            "[vm]\nname=w\nuuid=" UUID_A "\npid=5\ndomain=%s\n",
            domains[i].domain);
        LibvirtDomain dom = parse_ok(text);

        g_assert_cmpstr(dom.domain, ==, domains[i].expect);
    }
    for (size_t i = 0; i < G_N_ELEMENTS(priorities); i++) {
        g_autofree char *text = g_strdup_printf(
            "[vm]\nname=w\nuuid=" UUID_A "\npid=5\npriority=%s\n",
            priorities[i].priority);
        LibvirtDomain dom = parse_ok(text);

        g_assert_cmpuint(dom.priority, ==, priorities[i].expect);
    }
}

static void test_parse_machine(void)
{
    static const struct {
        const char *machine, *expect;
    } cases[] = {
        { "qemu-3-web1", "qemu-3-web1" },
        { "qemu-1-lv-x.y", "qemu-1-lv-x.y" },
        { "qemu-12", "qemu-12" },         /* a name of no valid character */
        { "qemu-2-abcdefghij-klmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRST",
          "qemu-2-abcdefghij-klmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRST" },
        /* 65 characters: libvirt stops at 64. */
        { "qemu-2-abcdefghij-klmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTU",
          "" },
        { "lxc-3-web1", "" },
        { "qemu-0-web1", "" },
        { "qemu-03-web1", "" },
        { "qemu--web1", "" },
        { "qemu-3-", "" },
        { "qemu-3-web1-", "" },
        { "qemu-3-.web1", "" },
        { "qemu-3-web_1", "" },
        { "qemu-3x-web1", "" },
        { "qemu-root-3-web1", "" },       /* a session daemon's */
        { "", "" },
    };

    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        g_autofree char *text = g_strdup_printf(
            "[vm]\nname=w\nuuid=" UUID_A "\nmachine=%s\n", cases[i].machine);
        LibvirtDomain dom = parse_ok(text);

        g_assert_cmpstr(dom.machine, ==, cases[i].expect);
    }
}

static void test_parse_bad(void)
{
    static const char *const bad[] = {
        "",
        "not a key file",
        "[vm]\nuuid=" UUID_A "\npid=5\n",                   /* no name */
        "[vm]\nname=\nuuid=" UUID_A "\npid=5\n",
        "[vm]\nname=w\npid=5\n",                            /* no uuid */
        "[vm]\nname=w\nuuid=\npid=5\n",
        "[vm]\nname=w\nuuid=" UUID_A UUID_A "\npid=5\n",    /* too long */
        "[vm]\nname=w\nuuid=" UUID_A "\npid=0\n",
        "[vm]\nname=w\nuuid=" UUID_A "\npid=-1\n",
        "[vm]\nname=w\nuuid=" UUID_A "\npid=12x\n",
        "[vm]\nname=w\nuuid=" UUID_A "\npid=\n",
        "[vm]\nname=w\nuuid=" UUID_A "\npid=4294967297\n",
        "[other]\nname=w\nuuid=" UUID_A "\npid=5\n",
    };

    for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
        LibvirtDomain dom;

        if (libvirt_registration_parse(bad[i], &dom)) {
            g_error("parsed, but should not have:\n%s", bad[i]);
        }
    }
}

static void test_name_cut(void)
{
    g_autofree char *name = g_strnfill(100, 'n');
    g_autofree char *text = g_strdup_printf("[vm]\nname=%s\nuuid=" UUID_A
                                            "\npid=5\n", name);
    LibvirtDomain dom = parse_ok(text);

    g_assert_cmpuint(strlen(dom.name), ==, NUKSM_NAME_LEN - 1);
}

static char *machine_of(const char *path)
{
    char machine[LIBVIRT_MACHINE_LEN];

    if (!libvirt_machine_of_cgroup(path, machine, sizeof(machine))) {
        return NULL;
    }
    return g_strdup(machine);
}

static void test_cgroup_libvirt(void)
{
    static const struct {
        const char *path, *machine;
    } cases[] = {
        /* libvirt 9.0 without systemd, as /proc/PID/cgroup shows it:
         * cgroup v1 controllers and the unified hierarchy. */
        { "/machine/qemu-1-lv-x.y.libvirt-qemu", "qemu-1-lv-x.y" },
        { "/machine/qemu-1-lv-x.y.libvirt-qemu/emulator", "qemu-1-lv-x.y" },
        { "/machine/qemu-3-web1.libvirt-qemu/vcpu0", "qemu-3-web1" },
        { "/machine/qemu-3-web1.libvirt-qemu/libvirt/emulator",
          "qemu-3-web1" },
        { "/machine/qemu-3.libvirt-qemu", "qemu-3" },
        /* Custom resource partitions. */
        { "/machine/prod.partition/qemu-3-web1.libvirt-qemu/emulator",
          "qemu-3-web1" },
        { "/machine/a.partition/b.partition/qemu-3-web1.libvirt-qemu",
          "qemu-3-web1" },
        /* systemd-machined's scope, '-' escaped. */
        { "/machine.slice/machine-qemu\\x2d3\\x2dweb1.scope", "qemu-3-web1" },
        { "/machine.slice/machine-qemu\\x2d3\\x2dweb1.scope/libvirt/emulator",
          "qemu-3-web1" },
        { "/machine.slice/machine-qemu\\x2d3\\x2dweb1.scope/emulator",
          "qemu-3-web1" },
        { "/machine.slice/machine-qemu\\x2d12\\x2dlv\\x2dx.y.scope/libvirt",
          "qemu-12-lv-x.y" },
        { "/machine.slice/machine-prod.slice/"
          "machine-qemu\\x2d3\\x2dweb1.scope/libvirt/vcpu1", "qemu-3-web1" },
    };

    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        g_autofree char *machine = machine_of(cases[i].path);

        if (g_strcmp0(machine, cases[i].machine) != 0) {
            g_error("%s: machine %s, expected %s", cases[i].path,
                    machine ? machine : "(none)", cases[i].machine);
        }
    }
}

static void test_cgroup_not_libvirt(void)
{
    static const char *const paths[] = {
        "/",
        "",
        "/machine",
        "/machine/",
        "/machine.slice",
        "/machine/emulator",
        "machine/qemu-3-web1.libvirt-qemu",               /* not absolute */
        /* Delegated to a user: anyone could make these. */
        "/user.slice/user-1000.slice/user@1000.service/machine/"
        "qemu-1-x.libvirt-qemu",
        "/user.slice/user-1000.slice/user@1000.service/machine.slice/"
        "machine-qemu\\x2d1\\x2dx.scope",
        "/system.slice/foo.service/machine/qemu-1-x.libvirt-qemu",
        "/process_api/c50cfb71/machine/qemu-1-x.libvirt-qemu",
        /* Look-alikes. */
        "/machines/qemu-3-web1.libvirt-qemu",
        "/machine.slices/machine-qemu\\x2d3\\x2dweb1.scope",
        "/Machine/qemu-3-web1.libvirt-qemu",
        "/machine/qemu-3-web1.libvirt-qemux",
        "/machine/qemu-3-web1.libvirt-lxc",                /* not QEMU */
        "/machine/lxc-3-web1.libvirt-lxc",
        "/machine/.libvirt-qemu",
        "/machine/qemu-3-web_1.libvirt-qemu",
        "/machine/qemu-0-web1.libvirt-qemu",
        "/machine/other/qemu-3-web1.libvirt-qemu",         /* no .partition */
        "/machine/.partition/qemu-3-web1.libvirt-qemu",
        "/machine//qemu-3-web1.libvirt-qemu",
        "/machine/qemu-3-web1.libvirt-qemu.partition/x",
        /* Other scopes and slices. */
        "/machine.slice/machine-qemu-3-web1.scope",        /* unescaped '-' */
        "/machine.slice/machine-qemu\\x2d3\\x2dweb\\x31.scope",
        "/machine.slice/machine-qemu\\x2D3\\x2Dweb1.scope",
        "/machine.slice/machine-lxc\\x2d3\\x2dweb1.scope",
        "/machine.slice/machine-qemu\\x2droot\\x2d3\\x2dweb1.scope",
        "/machine.slice/qemu\\x2d3\\x2dweb1.scope",
        "/machine.slice/machine-qemu\\x2d3\\x2dweb1.service",
        "/machine.slice/machine-.scope",
        "/machine.slice/machine-qemu\\x2d3\\x2dweb1.scope\\x2",
        "/machine.slice/machine-qemu\\x2d3\\x2dweb1\\x2.scope",
        "/machine.slice/prod.slice/machine-qemu\\x2d3\\x2dweb1.scope",
        "/machine.slice/systemd-nspawn@web1.service",
        "/system.slice/libvirtd.service",
        "/user.slice/user-0.slice/session-1.scope",
    };

    for (size_t i = 0; i < G_N_ELEMENTS(paths); i++) {
        g_autofree char *machine = machine_of(paths[i]);

        if (machine) {
            g_error("%s: machine %s, expected none", paths[i], machine);
        }
    }
}

static void test_cgroup_too_small(void)
{
    char machine[9];    /* "qemu-3-a" and its NUL */

    g_assert_false(libvirt_machine_of_cgroup(
        "/machine/qemu-3-web1.libvirt-qemu", machine, sizeof(machine)));
    g_assert_true(libvirt_machine_of_cgroup(
        "/machine/qemu-3-a.libvirt-qemu", machine, sizeof(machine)));
    g_assert_cmpstr(machine, ==, "qemu-3-a");
}

/* ------------------------------------------------------------ registry */

typedef struct Registry {
    char *dir;
} Registry;

static void registry_setup(Registry *r, gconstpointer data)
{
    GError *err = NULL;

    r->dir = g_dir_make_tmp("nuksm-test-libvirt-XXXXXX", &err);
    g_assert_no_error(err);
}

static void registry_teardown(Registry *r, gconstpointer data)
{
    g_autoptr(GDir) d = g_dir_open(r->dir, 0, NULL);
    const char *entry;

    while (d && (entry = g_dir_read_name(d))) {
        g_autofree char *path = g_build_filename(r->dir, entry, NULL);

        g_unlink(path);
    }
    g_rmdir(r->dir);
    g_free(r->dir);
}

/* @file in the registry, as the hook writes it: root's, 0644. */
static char *put(Registry *r, const char *file, const char *text)
{
    char *path = g_build_filename(r->dir, file, NULL);
    GError *err = NULL;

    g_file_set_contents(path, text, -1, &err);
    g_assert_no_error(err);
    g_assert_cmpint(chmod(path, 0644), ==, 0);
    return path;
}

static char *reg(const char *name, const char *uuid, const char *machine,
                 int pid, const char *domain)
{
    GString *s = g_string_new("[vm]\n");

    g_string_append_printf(s, "name=%s\nuuid=%s\n", name, uuid);
    if (machine) {
        g_string_append_printf(s, "machine=%s\n", machine);
    }
    if (pid) {
        g_string_append_printf(s, "pid=%d\n", pid);
    }
    if (domain) {
        g_string_append_printf(s, "domain=%s\n", domain);
    }
    return g_string_free(s, false);
}

static void put_reg(Registry *r, const char *uuid, const char *name,
                    const char *machine, int pid, const char *domain)
{
    g_autofree char *file = g_strdup_printf("%s.conf", uuid);
    g_autofree char *text = reg(name, uuid, machine, pid, domain);

    g_free(put(r, file, text));
}

/* The cgroups of a libvirt QEMU on cgroup v1 as /proc/PID/cgroup has. */
static const char *const web1_cgroups[] = {
    "/",
    "/machine/qemu-3-web1.libvirt-qemu",
    "/process_api/c50cfb71",
    "/machine/qemu-3-web1.libvirt-qemu/emulator",
    NULL
};

static const char *const no_cgroups[] = { "/", "/user.slice", NULL };

static void test_find_by_machine(Registry *r, gconstpointer data)
{
    LibvirtDomain dom;

    /* At "start": no pid yet. */
    put_reg(r, UUID_A, "web1", "qemu-3-web1", 0, "tenant-a");
    put_reg(r, UUID_B, "web2", "qemu-4-web2", 0, "tenant-b");
    g_assert_true(libvirt_registry_find(r->dir, 4242, web1_cgroups, &dom));
    g_assert_cmpstr(dom.name, ==, "web1");
    g_assert_cmpstr(dom.uuid, ==, UUID_A);
    g_assert_cmpstr(dom.domain, ==, "tenant-a");
    g_assert_cmpint(dom.pid, ==, 0);

    /* Not in a libvirt cgroup: none. */
    g_assert_false(libvirt_registry_find(r->dir, 4242, no_cgroups, &dom));
    g_assert_false(libvirt_registry_find(r->dir, 4242, NULL, &dom));

    /* systemd's layout names the same machine. */
    {
        const char *const scope[] = {
            "/machine.slice/machine-qemu\\x2d4\\x2dweb2.scope/libvirt/"
            "emulator", NULL
        };

        g_assert_true(libvirt_registry_find(r->dir, 4243, scope, &dom));
        g_assert_cmpstr(dom.name, ==, "web2");
    }

    /* At "started": the pid it has now must be the caller's. */
    put_reg(r, UUID_A, "web1", "qemu-3-web1", 4242, "tenant-a");
    g_assert_true(libvirt_registry_find(r->dir, 4242, web1_cgroups, &dom));
    g_assert_cmpint(dom.pid, ==, 4242);
    /* Another process in its cgroup (a helper of the domain) is not it. */
    g_assert_false(libvirt_registry_find(r->dir, 5000, web1_cgroups, &dom));
}

static void test_find_by_pid(Registry *r, gconstpointer data)
{
    LibvirtDomain dom;

    put_reg(r, UUID_A, "web1", "qemu-3-web1", 4242, "tenant-a");
    put_reg(r, UUID_B, "web2", NULL, 4343, NULL);       /* an older hook's */
    g_assert_true(libvirt_registry_find(r->dir, 4242, NULL, &dom));
    g_assert_cmpstr(dom.name, ==, "web1");
    g_assert_true(libvirt_registry_find(r->dir, 4242, no_cgroups, &dom));
    g_assert_cmpstr(dom.name, ==, "web1");
    g_assert_true(libvirt_registry_find(r->dir, 4343, web1_cgroups, &dom));
    g_assert_cmpstr(dom.name, ==, "web2");
    g_assert_false(libvirt_registry_find(r->dir, 4444, NULL, &dom));
    g_assert_false(libvirt_registry_find(r->dir, 0, NULL, &dom));

    /* A registration of another machine with this pid: stale, not it. */
    {
        const char *const other[] = {
            "/machine/qemu-9-other.libvirt-qemu", NULL
        };

        g_assert_false(libvirt_registry_find(r->dir, 4242, other, &dom));
    }
}

static void test_find_ambiguous(Registry *r, gconstpointer data)
{
    LibvirtDomain dom;

    put_reg(r, UUID_A, "web1", "qemu-3-web1", 0, "tenant-a");
    put_reg(r, UUID_B, "web1-again", "qemu-3-web1", 0, "tenant-b");
    g_assert_false(libvirt_registry_find(r->dir, 4242, web1_cgroups, &dom));

    /* The pid settles it. */
    put_reg(r, UUID_B, "web1-again", "qemu-3-web1", 4242, "tenant-b");
    g_assert_true(libvirt_registry_find(r->dir, 4242, web1_cgroups, &dom));
    g_assert_cmpstr(dom.name, ==, "web1-again");

    /* Two files with the same pid. */
    put_reg(r, UUID_A, "web1", "qemu-3-web1", 4242, "tenant-a");
    g_assert_false(libvirt_registry_find(r->dir, 4242, web1_cgroups, &dom));

    /* A process in two machines' cgroups. */
    {
        const char *const two[] = {
            "/machine/qemu-3-web1.libvirt-qemu",
            "/machine/qemu-4-web2.libvirt-qemu/emulator", NULL
        };

        put_reg(r, UUID_A, "web1", "qemu-3-web1", 0, NULL);
        put_reg(r, UUID_B, "web2", "qemu-4-web2", 0, NULL);
        g_assert_false(libvirt_registry_find(r->dir, 4242, two, &dom));
    }
}

static void test_find_untrusted(Registry *r, gconstpointer data)
{
    g_autofree char *text = reg("web1", UUID_A, "qemu-3-web1", 0, "evil");
    g_autofree char *path = NULL;
    g_autofree char *link = g_build_filename(r->dir, UUID_B ".conf", NULL);
    g_autofree char *target = g_build_filename(r->dir, "target", NULL);
    LibvirtDomain dom;

    /* Writable by others. */
    path = put(r, UUID_A ".conf", text);
    g_assert_cmpint(chmod(path, 0666), ==, 0);
    g_assert_false(libvirt_registry_find(r->dir, 4242, web1_cgroups, &dom));
    g_assert_cmpint(chmod(path, 0664), ==, 0);
    g_assert_false(libvirt_registry_find(r->dir, 4242, web1_cgroups, &dom));
    /* Not root's. */
    g_assert_cmpint(chmod(path, 0644), ==, 0);
    g_assert_cmpint(chown(path, 65534, 65534), ==, 0);
    g_assert_false(libvirt_registry_find(r->dir, 4242, web1_cgroups, &dom));
    g_unlink(path);
    /* A symlink, even to a good file. */
    g_free(put(r, "target", text));
    g_assert_cmpint(symlink(target, link), ==, 0);
    g_assert_false(libvirt_registry_find(r->dir, 4242, web1_cgroups, &dom));
    /* Not a .conf. */
    g_free(put(r, UUID_A ".tmp", text));
    g_assert_false(libvirt_registry_find(r->dir, 4242, web1_cgroups, &dom));
    /* An untrusted claim does not make a trusted one ambiguous. */
    g_free(put(r, UUID_A ".conf", text));
    g_assert_true(libvirt_registry_find(r->dir, 4242, web1_cgroups, &dom));
    g_assert_cmpstr(dom.domain, ==, "evil");
}

static void skip_not_root(Registry *r, gconstpointer data)
{
    g_test_skip("the registry trusts only root's files: run as root");
}

static void test_find_missing_dir(void)
{
    LibvirtDomain dom;

    g_assert_false(libvirt_registry_find("/nonexistent/nuksm-libvirt", 4242,
                                         web1_cgroups, &dom));
}

static void test_read_by_pid(Registry *r, gconstpointer data)
{
    g_autoptr(GHashTable) table = NULL;
    const LibvirtDomain *dom;

    put_reg(r, UUID_A, "web1", "qemu-3-web1", 0, NULL);     /* no pid yet */
    put_reg(r, UUID_B, "web2", "qemu-4-web2", 4343, "tenant-b");
    g_free(put(r, "junk.conf", "not a registration"));
    table = libvirt_registry_read(r->dir);
    g_assert_cmpuint(g_hash_table_size(table), ==, 1);
    dom = g_hash_table_lookup(table, GINT_TO_POINTER(4343));
    g_assert_nonnull(dom);
    g_assert_cmpstr(dom->name, ==, "web2");
    g_assert_cmpstr(dom->machine, ==, "qemu-4-web2");
    g_assert_cmpstr(dom->domain, ==, "tenant-b");
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/libvirt/parse/full", test_parse_full);
    g_test_add_func("/libvirt/parse/optional", test_parse_optional);
    g_test_add_func("/libvirt/parse/settings", test_parse_settings);
    g_test_add_func("/libvirt/parse/machine", test_parse_machine);
    g_test_add_func("/libvirt/parse/bad", test_parse_bad);
    g_test_add_func("/libvirt/parse/name-cut", test_name_cut);
    g_test_add_func("/libvirt/cgroup/libvirt", test_cgroup_libvirt);
    g_test_add_func("/libvirt/cgroup/not-libvirt", test_cgroup_not_libvirt);
    g_test_add_func("/libvirt/cgroup/too-small", test_cgroup_too_small);
    /* The registry trusts root's files only: the tests make theirs. */
#define ADD_REGISTRY(path, fn) \
    g_test_add(path, Registry, NULL, registry_setup, \
               geteuid() == 0 ? fn : skip_not_root, registry_teardown)
    ADD_REGISTRY("/libvirt/find/by-machine", test_find_by_machine);
    ADD_REGISTRY("/libvirt/find/by-pid", test_find_by_pid);
    ADD_REGISTRY("/libvirt/find/ambiguous", test_find_ambiguous);
    ADD_REGISTRY("/libvirt/find/untrusted", test_find_untrusted);
    g_test_add_func("/libvirt/find/missing-dir", test_find_missing_dir);
    ADD_REGISTRY("/libvirt/read/by-pid", test_read_by_pid);
    return g_test_run();
}
