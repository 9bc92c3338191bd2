/*
 * nuksmd store files.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <numa.h>
#include <numaif.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <stdio.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <glib.h>
#include <glib/gstdio.h>

#include "log.h"
#include "store.h"

/*
 * Nobody else may be able to swap the store files under us: the
 * directory is ours and only we can write it (it is created 0700).
 */
static bool check_owner(const char *dir)
{
    struct stat sb;

    if (lstat(dir, &sb) < 0) {
        log_error("cannot stat state directory %s: %s", dir,
                  g_strerror(errno));
        return false;
    }
    if (!S_ISDIR(sb.st_mode) || sb.st_uid != geteuid() ||
        (sb.st_mode & (S_IWGRP | S_IWOTH))) {
        log_error("state directory %s must be a directory (not a symlink) "
                  "owned by uid %u that only its owner can write", dir,
                  (unsigned)geteuid());
        return false;
    }
    return true;
}

static bool check_tmpfs(const char *dir)
{
    struct statfs sfs;

    if (statfs(dir, &sfs) < 0) {
        log_error("cannot stat state directory %s: %s", dir,
                  g_strerror(errno));
        return false;
    }
    if (sfs.f_type != TMPFS_MAGIC) {
        log_error("state directory %s is not on tmpfs (filesystem type "
                  "%#lx): merged pages must stay in memory; pick one with "
                  "--state-dir, e.g. under /dev/shm", dir,
                  (unsigned long)sfs.f_type);
        return false;
    }
    return true;
}

static bool lock_dir(Store *st)
{
    g_autofree char *path = g_build_filename(st->dir, "lock", NULL);

    st->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW,
                       0600);
    if (st->lock_fd < 0) {
        log_error("cannot open %s: %s", path, g_strerror(errno));
        return false;
    }
    /*
     * Two agents on one store would punch out each other's pages under
     * the VMs that map them.
     */
    if (flock(st->lock_fd, LOCK_EX | LOCK_NB) < 0) {
        if (errno == EWOULDBLOCK) {
            log_error("state directory %s is in use by another nuksmd",
                      st->dir);
        } else {
            log_error("cannot lock %s: %s", path, g_strerror(errno));
        }
        return false;
    }
    return true;
}

/*
 * Allocate the pages of the file @fd on host node @node, where that node
 * exists.  A tmpfs file's binding is its own (the kernel keeps it with
 * the file), set through a shared mapping of it, which can then go: it
 * applies to every page allocated for the file, pwrite() included.
 */
static void bind_to_node(int fd, const char *path, uint32_t node)
{
    unsigned long mask[NUKSM_MAX_NODES / (8 * sizeof(unsigned long)) + 1];
    void *map;

    if (numa_available() < 0 ||
        !numa_bitmask_isbitset(numa_all_nodes_ptr, node)) {
        log_debug("store node %u: no such host node, pages not bound", node);
        return;
    }
    map = mmap(NULL, STORE_SIZE, PROT_READ | PROT_WRITE,
               MAP_SHARED | MAP_NORESERVE, fd, 0);
    if (map == MAP_FAILED) {
        log_warning("cannot map %s to bind it to its host node: %s", path,
                    g_strerror(errno));
        return;
    }
    memset(mask, 0, sizeof(mask));
    mask[node / (8 * sizeof(unsigned long))] =
        1ul << node % (8 * sizeof(unsigned long));
    if (mbind(map, STORE_SIZE, MPOL_BIND, mask, sizeof(mask) * 8, 0) < 0) {
        if (errno == EINVAL || errno == ENOSYS) {
            /* No NUMA in this kernel: there is nothing to bind to. */
            log_debug("store node %u: mbind: %s", node, g_strerror(errno));
        } else {
            log_warning("cannot bind store node %u to its host node: %s",
                        node, g_strerror(errno));
        }
    }
    munmap(map, STORE_SIZE);
}

/* Open or create <state-dir>/@name, mode 0600, read-write. */
static int open_private(const Store *st, const char *name)
{
    g_autofree char *path = g_build_filename(st->dir, name, NULL);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    struct stat sb;

    if (fd < 0) {
        log_error("cannot open %s: %s", path, g_strerror(errno));
        return -1;
    }
    if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
        log_error("%s is not a regular file", path);
        close(fd);
        return -1;
    }
    if (fchmod(fd, 0600) < 0) {
        log_error("cannot set up %s: %s", path, g_strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

/*
 * The secret that keys domain names, made once per state directory so
 * that records outlive the agent that wrote them.
 */
static bool load_secret(Store *st)
{
    int fd = open_private(st, "secret");
    ssize_t n;
    bool ok = true;

    if (fd < 0) {
        return false;
    }
    n = pread(fd, st->secret, sizeof(st->secret), 0);
    if (n != sizeof(st->secret)) {
        for (size_t i = 0; i < sizeof(st->secret); i += 4) {
            uint32_t r = g_random_int();

            memcpy(st->secret + i, &r, 4);
        }
        ok = pwrite(fd, st->secret, sizeof(st->secret), 0) ==
             sizeof(st->secret);
        if (!ok) {
            log_error("cannot write %s/secret: %s", st->dir,
                      g_strerror(errno));
        }
    }
    close(fd);
    return ok;
}

static char *store_name(const char *key, uint32_t node)
{
    return g_strdup_printf("store-%s-node%u", key, node);
}

/* Open or create the store file @name of node @node, read-write. */
static int open_store_file(Store *st, const char *name, uint32_t node)
{
    g_autofree char *path = g_build_filename(st->dir, name, NULL);
    int fd = open_private(st, name);
    struct stat sb;

    if (fd < 0) {
        return -1;
    }
    if (fstat(fd, &sb) < 0 || (uint64_t)sb.st_size > STORE_SIZE) {
        log_error("%s is larger than a store (%" G_GUINT64_FORMAT " bytes): "
                  "not made by this nuksmd", path, STORE_SIZE);
        close(fd);
        return -1;
    }
    /* Growing a file keeps its content: a restart finds its pages. */
    if (ftruncate(fd, STORE_SIZE) < 0) {
        log_error("cannot set up %s: %s", path, g_strerror(errno));
        close(fd);
        return -1;
    }
    if (st->bind) {
        bind_to_node(fd, path, node);
    }
    return fd;
}

bool store_open(Store *st, const char *dir, uint32_t nr_nodes, bool bind)
{
    *st = (Store) {
        .dir = g_strdup(dir),
        .lock_fd = -1,
        .nr_nodes = nr_nodes,
        .bind = bind,
        .domains = g_ptr_array_new(),
    };
    for (uint32_t n = 0; n < NUKSM_MAX_NODES; n++) {
        st->records_fds[n] = -1;
    }

    if (g_mkdir_with_parents(dir, 0700) < 0) {
        log_error("cannot create state directory %s: %s", dir,
                  g_strerror(errno));
        goto fail;
    }
    if (!check_owner(dir) || !check_tmpfs(dir) || !lock_dir(st) ||
        !load_secret(st)) {
        goto fail;
    }
    for (uint32_t n = 0; n < nr_nodes; n++) {
        g_autofree char *records = g_strdup_printf("slots-node%u", n);

        st->records_fds[n] = open_private(st, records);
        if (st->records_fds[n] < 0) {
            goto fail;
        }
    }
    return true;

fail:
    store_close(st);
    return false;
}

void store_close(Store *st)
{
    for (guint d = 0; st->domains && d < st->domains->len; d++) {
        store_close_domain(st, d, false);
    }
    g_clear_pointer(&st->domains, g_ptr_array_unref);
    for (uint32_t n = 0; n < NUKSM_MAX_NODES; n++) {
        if (st->records_fds[n] >= 0) {
            close(st->records_fds[n]);
            st->records_fds[n] = -1;
        }
    }
    if (st->lock_fd >= 0) {
        close(st->lock_fd);
        st->lock_fd = -1;
    }
    g_clear_pointer(&st->dir, g_free);
}

/* The key of a store file's name "store-KEY-nodeN", or NULL. */
static char *key_of_name(const char *name)
{
    const char *key = name + strlen("store-");

    if (!g_str_has_prefix(name, "store-") || strlen(key) <= STORE_KEY_LEN ||
        strspn(key, "0123456789abcdef") != STORE_KEY_LEN ||
        !g_str_has_prefix(key + STORE_KEY_LEN, "-node")) {
        return NULL;
    }
    return g_strndup(key, STORE_KEY_LEN);
}

GPtrArray *store_list_domains(const Store *st)
{
    GPtrArray *keys = g_ptr_array_new_with_free_func(g_free);
    g_autoptr(GDir) dir = g_dir_open(st->dir, 0, NULL);
    const char *name;

    while (dir && (name = g_dir_read_name(dir))) {
        g_autofree char *key = key_of_name(name);

        if (key && !g_ptr_array_find_with_equal_func(keys, key, g_str_equal,
                                                     NULL)) {
            g_ptr_array_add(keys, g_steal_pointer(&key));
        }
    }
    return keys;
}

static StoreDomain *domain_files(const Store *st, uint16_t domain)
{
    StoreDomain *sd = domain < st->domains->len ?
                      g_ptr_array_index(st->domains, domain) : NULL;

    g_assert(sd);
    return sd;
}

bool store_open_domain(Store *st, uint16_t domain, const char *key)
{
    StoreDomain *sd = g_new0(StoreDomain, 1);

    g_strlcpy(sd->key, key, sizeof(sd->key));
    for (uint32_t n = 0; n < NUKSM_MAX_NODES; n++) {
        sd->fds[n] = -1;
    }
    if (domain >= st->domains->len) {
        g_ptr_array_set_size(st->domains, domain + 1);
    }
    g_assert(!g_ptr_array_index(st->domains, domain));
    g_ptr_array_index(st->domains, domain) = sd;
    for (uint32_t n = 0; n < st->nr_nodes; n++) {
        g_autofree char *name = store_name(key, n);

        sd->fds[n] = open_store_file(st, name, n);
        if (sd->fds[n] < 0) {
            store_close_domain(st, domain, false);
            return false;
        }
    }
    return true;
}

void store_close_domain(Store *st, uint16_t domain, bool remove)
{
    StoreDomain *sd = domain < st->domains->len ?
                      g_ptr_array_index(st->domains, domain) : NULL;

    if (!sd) {
        return;
    }
    for (uint32_t n = 0; n < st->nr_nodes; n++) {
        g_autofree char *name = store_name(sd->key, n);
        g_autofree char *path = g_build_filename(st->dir, name, NULL);

        if (sd->fds[n] >= 0) {
            close(sd->fds[n]);
        }
        /* A VM that still maps a page keeps it: the mapping holds it. */
        if (remove && unlink(path) < 0 && errno != ENOENT) {
            log_warning("cannot remove %s: %s", path, g_strerror(errno));
        }
    }
    g_ptr_array_index(st->domains, domain) = NULL;
    g_free(sd);
}

int store_reader(const Store *st, uint16_t domain, uint32_t node)
{
    char path[64];
    int fd;

    /* Reopened through our descriptor: no name lookup to be fooled. */
    snprintf(path, sizeof(path), "/proc/self/fd/%d",
             store_fd(st, domain, node));
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        log_warning("cannot open store node %u read-only: %s", node,
                    g_strerror(errno));
    }
    return fd;
}

int store_fd(const Store *st, uint16_t domain, uint32_t node)
{
    return domain_files(st, domain)->fds[node];
}

/* pwrite() all of @buf; 0 or an errno (ENOSPC for a short write). */
static int write_all(int fd, const void *buf, size_t len, off_t off)
{
    ssize_t n = pwrite(fd, buf, len, off);

    return n == (ssize_t)len ? 0 : n < 0 ? errno : ENOSPC;
}

int store_write(Store *st, uint16_t domain, uint32_t node, uint32_t slot,
                const void *content)
{
    return write_all(store_fd(st, domain, node), content, NUKSM_PAGE_SIZE,
                     (off_t)slot * NUKSM_PAGE_SIZE);
}

uint8_t *store_window_slot(Store *st, StoreWindows *ws, uint16_t domain,
                           uint32_t node, uint32_t slot)
{
    uint32_t first = slot - slot % STORE_WINDOW_SLOTS;
    StoreWindow *w = ws->w;
    void *addr;

    while (w < ws->w + ws->len &&
           !(w->domain == domain && w->node == node && w->first == first)) {
        w++;
    }
    if (w == ws->w + ws->len) {
        if (ws->len == STORE_WINDOWS_MAX) {
            return NULL;
        }
        addr = mmap(NULL, (size_t)STORE_WINDOW_SLOTS * NUKSM_PAGE_SIZE,
                    PROT_READ | PROT_WRITE, MAP_SHARED,
                    store_fd(st, domain, node),
                    (off_t)first * NUKSM_PAGE_SIZE);
        if (addr == MAP_FAILED) {
            log_warning("cannot map slots %u..%u of store node %u: %s",
                        first, first + STORE_WINDOW_SLOTS - 1, node,
                        g_strerror(errno));
            return NULL;
        }
        *w = (StoreWindow) { .domain = domain, .node = node,
                             .first = first, .addr = addr };
        ws->len++;
    }
    return w->addr + (size_t)(slot - first) * NUKSM_PAGE_SIZE;
}

void store_windows_prefault(void *const *pages, size_t n)
{
    for (size_t i = 0; i < n;) {
        size_t run = 1;

        while (i + run < n && (uint8_t *)pages[i + run] ==
                              (uint8_t *)pages[i] + run * NUKSM_PAGE_SIZE) {
            run++;
        }
        /* Errors are the copy's to find, page by page. */
        madvise(pages[i], run * NUKSM_PAGE_SIZE, MADV_POPULATE_WRITE);
        i += run;
    }
}

void store_windows_unmap(StoreWindows *ws)
{
    for (unsigned i = 0; i < ws->len; i++) {
        munmap(ws->w[i].addr, (size_t)STORE_WINDOW_SLOTS * NUKSM_PAGE_SIZE);
    }
    ws->len = 0;
}

bool store_read(const Store *st, uint16_t domain, uint32_t node,
                uint32_t slot, void *content)
{
    ssize_t n = pread(store_fd(st, domain, node), content, NUKSM_PAGE_SIZE,
                      (off_t)slot * NUKSM_PAGE_SIZE);

    if (n != NUKSM_PAGE_SIZE) {
        log_warning("cannot read slot %u of store node %u: %s", slot, node,
                    n < 0 ? g_strerror(errno) : "short read");
        return false;
    }
    return true;
}

int store_set_records(Store *st, uint32_t node, uint32_t slot,
                      const SlotRecord *recs, uint32_t count)
{
    return write_all(st->records_fds[node], recs, count * sizeof(*recs),
                     (off_t)slot * sizeof(*recs));
}

bool store_get_record(const Store *st, uint32_t node, uint32_t slot,
                      SlotRecord *rec)
{
    ssize_t n = pread(st->records_fds[node], rec, sizeof(*rec),
                      (off_t)slot * sizeof(*rec));

    if (n == 0) {
        /* Past the end: never recorded. */
        *rec = (SlotRecord) { 0 };
        return true;
    }
    if (n != sizeof(*rec)) {
        log_warning("cannot read the record of slot %u of store node %u: "
                    "%s", slot, node,
                    n < 0 ? g_strerror(errno) : "short read");
        return false;
    }
    return true;
}

/* Punch [@off, @off + @len) out of @fd: whole pages go, the rest is zeroed. */
static bool punch(int fd, off_t off, off_t len)
{
    return fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off,
                     len) == 0;
}

void store_punch(Store *st, uint16_t domain, uint32_t node, uint32_t slot,
                 uint32_t count)
{
    if (!punch(store_fd(st, domain, node), (off_t)slot * NUKSM_PAGE_SIZE,
               (off_t)count * NUKSM_PAGE_SIZE) ||
        !punch(st->records_fds[node], (off_t)slot * sizeof(SlotRecord),
               (off_t)count * sizeof(SlotRecord))) {
        log_warning("cannot free slots %u..%u of store node %u: %s",
                    slot, slot + count - 1, node, g_strerror(errno));
    }
}

bool store_next_data(const Store *st, uint16_t domain, uint32_t node,
                     uint32_t from, uint32_t *start, uint32_t *end)
{
    int fd = store_fd(st, domain, node);
    off_t data, hole;

    data = lseek(fd, (off_t)from * NUKSM_PAGE_SIZE, SEEK_DATA);
    if (data < 0) {
        if (errno != ENXIO) {
            log_warning("cannot scan store node %u: %s", node,
                        g_strerror(errno));
        }
        return false;
    }
    hole = lseek(fd, data, SEEK_HOLE);
    if (hole < 0) {
        hole = STORE_SIZE;
    }
    *start = data / NUKSM_PAGE_SIZE;
    *end = MIN(((uint64_t)hole + NUKSM_PAGE_SIZE - 1) / NUKSM_PAGE_SIZE,
               STORE_SLOTS);
    return *start < *end;
}

bool store_resident(const Store *st, uint16_t domain, uint32_t node,
                    uint32_t from, uint32_t count, unsigned char *resident)
{
    size_t len = (size_t)count * NUKSM_PAGE_SIZE;
    void *map;
    bool ok;

    if (!count) {
        return true;
    }
    map = mmap(NULL, len, PROT_READ, MAP_SHARED | MAP_NORESERVE,
               store_fd(st, domain, node), (off_t)from * NUKSM_PAGE_SIZE);
    if (map == MAP_FAILED) {
        log_warning("cannot map store node %u to look at it: %s", node,
                    g_strerror(errno));
        return false;
    }
    ok = mincore(map, len, resident) == 0;
    if (!ok) {
        log_warning("cannot look at store node %u: %s", node,
                    g_strerror(errno));
    }
    munmap(map, len);
    return ok;
}
