/*
 * Unit tests of nuksmd's placement policy (agent/core/policy.h), for K nodes:
 * what hot means, who may share, where a new copy goes, where
 * re-placement moves it.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <glib.h>

#include "policy.h"

#define K 4                  /* nodes */
#define DRAWS 100000         /* contents drawn for the priority splits */

static const NuksmPolicyId all_policies[] = {
    NUKSM_POLICY_ID_GLOBAL, NUKSM_POLICY_ID_KSM_ORDER, NUKSM_POLICY_ID_LOCAL,
    NUKSM_POLICY_ID_FAIR, NUKSM_POLICY_ID_PRIORITY, NUKSM_POLICY_ID_ADAPTIVE,
    NUKSM_POLICY_ID_AUTO,
};

static PolicyOwner owner(uint32_t client, uint32_t home, bool hot)
{
    return (PolicyOwner) { .client = client, .home = home,
                           .priority = 100, .hot = hot, .warm = hot };
}

static PolicyLoad load_of(const uint64_t copies[K])
{
    PolicyLoad load = { .nr_nodes = K };

    for (int n = 0; n < K; n++) {
        load.copies[n] = copies[n];
    }
    return load;
}

/* A digest per draw, spread as XXH3's are. */
static uint64_t digest_of(uint64_t i)
{
    return i * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull;
}

/* Hot means accessed: written or read in the last --cold-windows. */
static void test_hot(void)
{
    const uint8_t never = NUKSM_IDLE_NEVER;

    /* Written lately. */
    g_assert_true(policy_page_hot(0, never, 3));
    g_assert_true(policy_page_hot(2, never, 3));
    g_assert_false(policy_page_hot(3, never, 3));
    /* Read lately, never written: what a merged page is. */
    g_assert_true(policy_page_hot(never, 0, 3));
    g_assert_true(policy_page_hot(never, 2, 3));
    g_assert_false(policy_page_hot(never, 3, 3));
    /* Either access will do; neither, lately, is cold. */
    g_assert_true(policy_page_hot(200, 1, 3));
    g_assert_true(policy_page_hot(1, 200, 3));
    g_assert_false(policy_page_hot(3, 4, 3));
    g_assert_false(policy_page_hot(never, never, 255));  /* never seen */
    g_assert_true(policy_page_hot(never, 254, 255));
}

/*
 * Warm is hot for POLICY_WARM_FACTOR (4) times as long: a page stays
 * warm 12 windows at --cold-windows 3.
 */
static void test_warm(void)
{
    const uint8_t never = NUKSM_IDLE_NEVER;

    g_assert_true(policy_page_warm(never, 0, 3));
    g_assert_true(policy_page_warm(never, 3, 3));     /* cold, still warm */
    g_assert_true(policy_page_warm(never, 11, 3));
    g_assert_false(policy_page_warm(never, 12, 3));
    g_assert_true(policy_page_warm(11, never, 3));
    g_assert_false(policy_page_warm(12, 12, 3));
    g_assert_false(policy_page_warm(never, never, 3));
    /* Capped where the counters saturate: never seen is never warm. */
    g_assert_true(policy_page_warm(never, 254, 100));
    g_assert_false(policy_page_warm(never, never, 100));
}

/*
 * An owner of a merged page, its region read @read_idle samples ago:
 * hot and warm as --cold-windows 3 makes it.
 */
static PolicyOwner reader(uint32_t client, uint32_t home, uint8_t read_idle)
{
    PolicyOwner o = owner(client, home,
                          policy_page_hot(NUKSM_IDLE_NEVER, read_idle, 3));

    o.warm = policy_page_warm(NUKSM_IDLE_NEVER, read_idle, 3);
    return o;
}

static void test_may_map(void)
{
    for (size_t p = 0; p < G_N_ELEMENTS(all_policies); p++) {
        NuksmPolicyId policy = all_policies[p];

        for (uint32_t home = 0; home < K; home++) {
            for (int hot = 0; hot < 2; hot++) {
                PolicyOwner o = owner(1, home, hot);

                for (uint32_t node = 0; node < K; node++) {
                    bool expect = node == home ||
                        (policy != NUKSM_POLICY_ID_LOCAL &&
                         !((policy == NUKSM_POLICY_ID_ADAPTIVE ||
                            policy == NUKSM_POLICY_ID_AUTO) && hot));

                    g_assert_cmpint(policy_may_map(policy, &o, node), ==,
                                    expect);
                }
            }
        }
    }
}

static void test_may_share(void)
{
    PolicyOwner cold0 = owner(1, 0, false), cold2 = owner(2, 2, false);
    PolicyOwner hot0 = owner(3, 0, true), hot2 = owner(4, 2, true);

    for (size_t p = 0; p < G_N_ELEMENTS(all_policies); p++) {
        NuksmPolicyId policy = all_policies[p];

        /* One home: always.  Symmetric. */
        g_assert_true(policy_may_share(policy, &hot0, &cold0));
        g_assert_cmpint(policy_may_share(policy, &hot0, &cold2), ==,
                        policy_may_share(policy, &cold2, &hot0));
    }
    g_assert_false(policy_may_share(NUKSM_POLICY_ID_LOCAL, &cold0, &cold2));
    g_assert_true(policy_may_share(NUKSM_POLICY_ID_ADAPTIVE, &cold0,
                                   &cold2));
    g_assert_false(policy_may_share(NUKSM_POLICY_ID_ADAPTIVE, &hot0,
                                    &cold2));
    g_assert_false(policy_may_share(NUKSM_POLICY_ID_ADAPTIVE, &hot0, &hot2));
    g_assert_true(policy_may_share(NUKSM_POLICY_ID_FAIR, &hot0, &hot2));
    /* auto: a warm page shares its home's copy with a cold page only. */
    g_assert_true(policy_may_share(NUKSM_POLICY_ID_AUTO, &cold0, &cold2));
    g_assert_true(policy_may_share(NUKSM_POLICY_ID_AUTO, &hot0, &cold2));
    g_assert_false(policy_may_share(NUKSM_POLICY_ID_AUTO, &hot0, &hot2));
    g_assert_true(policy_may_share(NUKSM_POLICY_ID_GLOBAL, &hot0, &cold2));
}

static void test_new_copy_same_home(void)
{
    static const uint64_t copies[K] = { 9, 0, 0, 0 };

    for (size_t p = 0; p < G_N_ELEMENTS(all_policies); p++) {
        PolicyLoad load = load_of(copies);
        PolicyOwner a = owner(1, 0, true), b = owner(2, 0, false);

        g_assert_cmpuint(policy_new_copy(all_policies[p], &load, &a, &b, 5),
                         ==, 0);
    }
}

static void test_new_copy_global_and_ksm_order(void)
{
    static const uint64_t copies[K] = { 0, 0, 0, 0 };
    PolicyLoad load = load_of(copies);
    PolicyOwner early = owner(1, 3, false), late = owner(2, 1, false);

    /* global: the node of the page completing the match, @a. */
    g_assert_cmpuint(policy_new_copy(NUKSM_POLICY_ID_GLOBAL, &load, &early,
                                     &late, 5), ==, 3);
    g_assert_cmpuint(policy_new_copy(NUKSM_POLICY_ID_GLOBAL, &load, &late,
                                     &early, 5), ==, 1);
    /* ksm-order: the later VM's, whichever page came first. */
    g_assert_cmpuint(policy_new_copy(NUKSM_POLICY_ID_KSM_ORDER, &load,
                                     &early, &late, 5), ==, 1);
    g_assert_cmpuint(policy_new_copy(NUKSM_POLICY_ID_KSM_ORDER, &load,
                                     &late, &early, 5), ==, 1);
}

static void test_new_copy_fair(void)
{
    static const uint64_t copies[K] = { 10, 3, 7, 0 };
    PolicyLoad load = load_of(copies);
    PolicyOwner hot1 = owner(11, 1, true), cold2 = owner(12, 2, false);
    PolicyOwner cold0 = owner(10, 0, false), hot3 = owner(13, 3, true);
    uint32_t split[K] = { 0 };

    /* A hot owner gets the copy, whichever page came first. */
    g_assert_cmpuint(policy_new_copy(NUKSM_POLICY_ID_FAIR, &load, &cold2,
                                     &hot1, 5), ==, 1);
    g_assert_cmpuint(policy_new_copy(NUKSM_POLICY_ID_FAIR, &load, &hot1,
                                     &cold2, 5), ==, 1);
    /* Cold for both: the emptier node, whichever came first. */
    g_assert_cmpuint(policy_new_copy(NUKSM_POLICY_ID_FAIR, &load, &cold0,
                                     &cold2, 5), ==, 2);
    g_assert_cmpuint(policy_new_copy(NUKSM_POLICY_ID_FAIR, &load, &cold2,
                                     &cold0, 5), ==, 2);
    /*
     * Hot for both: half of the contents on each node, each where
     * re-placement keeps it, whichever page came first.
     */
    for (uint64_t i = 0; i < DRAWS; i++) {
        PolicyOwner both[2] = { hot1, hot3 };
        uint32_t node = policy_new_copy(NUKSM_POLICY_ID_FAIR, &load, &hot1,
                                        &hot3, digest_of(i));

        g_assert_cmpuint(policy_new_copy(NUKSM_POLICY_ID_FAIR, &load, &hot3,
                                         &hot1, digest_of(i)), ==, node);
        g_assert_cmpuint(policy_relocate_node(NUKSM_POLICY_ID_FAIR, &load,
                                              node, both, 2, digest_of(i)),
                         ==, node);
        split[node]++;
    }
    g_assert_cmpuint(split[1] + split[3], ==, DRAWS);
    g_assert_cmpfloat_with_epsilon((double)split[1] / DRAWS, 0.5, 0.01);
}

static void test_new_copy_adaptive(void)
{
    static const uint64_t copies[K] = { 10, 3, 7, 0 };
    PolicyLoad load = load_of(copies);
    PolicyOwner cold0 = owner(10, 0, false), cold3 = owner(13, 3, false);

    /* Only cold pages share across nodes: on the emptier one. */
    g_assert_cmpuint(policy_new_copy(NUKSM_POLICY_ID_ADAPTIVE, &load,
                                     &cold0, &cold3, 5), ==, 3);
    load.copies[3] = 11;
    g_assert_cmpuint(policy_new_copy(NUKSM_POLICY_ID_ADAPTIVE, &load,
                                     &cold0, &cold3, 5), ==, 0);
    /* A tie keeps the first. */
    load.copies[3] = 10;
    g_assert_cmpuint(policy_new_copy(NUKSM_POLICY_ID_ADAPTIVE, &load,
                                     &cold3, &cold0, 5), ==, 3);
}

/* auto: a new copy lives where the warm page may map it. */
static void test_new_copy_auto(void)
{
    static const uint64_t copies[K] = { 10, 3, 7, 0 };
    PolicyLoad load = load_of(copies);
    PolicyOwner cold0 = owner(10, 0, false), cold3 = owner(13, 3, false);
    PolicyOwner warm0 = owner(11, 0, true), warm3 = owner(14, 3, true);

    /* Warm with cold: the warm page's home, however full. */
    g_assert_cmpuint(policy_new_copy(NUKSM_POLICY_ID_AUTO, &load, &warm0,
                                     &cold3, 5), ==, 0);
    g_assert_cmpuint(policy_new_copy(NUKSM_POLICY_ID_AUTO, &load, &cold0,
                                     &warm3, 5), ==, 3);
    g_assert_cmpuint(policy_new_copy(NUKSM_POLICY_ID_AUTO, &load, &cold3,
                                     &warm0, 5), ==, 0);
    /* Both cold: the emptier node, as adaptive. */
    g_assert_cmpuint(policy_new_copy(NUKSM_POLICY_ID_AUTO, &load, &cold0,
                                     &cold3, 5), ==, 3);
    /* A page only warm (hot a while ago) counts as warm. */
    cold0.warm = true;
    g_assert_cmpuint(policy_new_copy(NUKSM_POLICY_ID_AUTO, &load, &cold0,
                                     &cold3, 5), ==, 0);
}

/*
 * auto moves pages one by one: a warm page away from home goes home, a
 * cold one stays while some page of its copy is at home there; local
 * sends every page home.
 */
static void test_replace_auto_pages(void)
{
    PolicyOwner warm1 = owner(1, 1, true), cold1 = owner(2, 1, false);
    PolicyOwner warm2 = owner(3, 2, true);

    g_assert_true(policy_moves_pages(NUKSM_POLICY_ID_AUTO));
    g_assert_true(policy_moves_pages(NUKSM_POLICY_ID_LOCAL));
    g_assert_false(policy_moves_pages(NUKSM_POLICY_ID_ADAPTIVE));
    g_assert_false(policy_moves_pages(NUKSM_POLICY_ID_FAIR));
    g_assert_cmpuint(policy_relocate_page(NUKSM_POLICY_ID_AUTO, &warm1, 0,
                                          true), ==, 1);
    g_assert_cmpuint(policy_relocate_page(NUKSM_POLICY_ID_AUTO, &warm2, 0,
                                          true), ==, 2);
    g_assert_cmpuint(policy_relocate_page(NUKSM_POLICY_ID_AUTO, &warm1, 1,
                                          true), ==, 1);
    g_assert_cmpuint(policy_relocate_page(NUKSM_POLICY_ID_AUTO, &cold1, 0,
                                          true), ==, 0);
    /* Warm, not hot any more: still home (the hysteresis). */
    warm1.hot = false;
    g_assert_cmpuint(policy_relocate_page(NUKSM_POLICY_ID_AUTO, &warm1, 0,
                                          true), ==, 1);
    /* A cold copy none of whose pages is at home there: home too. */
    g_assert_cmpuint(policy_relocate_page(NUKSM_POLICY_ID_AUTO, &cold1, 0,
                                          false), ==, 1);
    g_assert_cmpuint(policy_relocate_page(NUKSM_POLICY_ID_LOCAL, &cold1, 0,
                                          true), ==, 1);
    /* Other policies leave such a copy: global keeps copies in place. */
    g_assert_cmpuint(policy_relocate_page(NUKSM_POLICY_ID_GLOBAL, &cold1, 0,
                                          false), ==, 0);
}

/*
 * nuKSM's Table 5.3: two VMs with priorities P0:P1 get P0/(P0+P1) and
 * P1/(P0+P1) of the copies, whichever page came first.
 */
static void test_priority_table_5_3(void)
{
    static const struct { uint32_t p0, p1; double share0; } rows[] = {
        { 10, 1, 10.0 / 11 }, { 5, 1, 5.0 / 6 }, { 1, 1, 0.5 },
        { 1, 5, 1.0 / 6 }, { 1, 10, 1.0 / 11 },
    };
    static const uint64_t copies[K] = { 0 };

    for (size_t r = 0; r < G_N_ELEMENTS(rows); r++) {
        PolicyOwner vm0 = owner(1, 0, false), vm1 = owner(2, 1, false);
        PolicyLoad load = load_of(copies);
        uint32_t on0 = 0;

        vm0.priority = rows[r].p0;
        vm1.priority = rows[r].p1;
        for (uint64_t i = 0; i < DRAWS; i++) {
            uint32_t x = policy_new_copy(NUKSM_POLICY_ID_PRIORITY, &load,
                                         &vm0, &vm1, digest_of(i));
            uint32_t y = policy_new_copy(NUKSM_POLICY_ID_PRIORITY, &load,
                                         &vm1, &vm0, digest_of(i));

            g_assert_cmpuint(x, ==, y);     /* order does not matter */
            on0 += x == 0;
        }
        /* Within 1% of the share: six standard deviations, and the same
         * draws every run. */
        g_assert_cmpfloat_with_epsilon((double)on0 / DRAWS, rows[r].share0,
                                       0.01);
    }
}

/* K owners with priorities 1..K: each gets its share of the copies. */
static void test_priority_k_owners(void)
{
    PolicyOwner o[K];
    uint32_t got[K] = { 0 };
    double total = 0;

    for (uint32_t i = 0; i < K; i++) {
        o[i] = owner(K - i, i, false);   /* ids in another order */
        o[i].priority = i + 1;
        total += i + 1;
    }
    for (uint64_t i = 0; i < DRAWS; i++) {
        got[o[policy_priority_pick(o, K, digest_of(i))].home]++;
    }
    for (uint32_t i = 0; i < K; i++) {
        g_assert_cmpfloat_with_epsilon((double)got[i] / DRAWS,
                                       (i + 1) / total, 0.01);
    }
}

static void test_moves_copies(void)
{
    g_assert_false(policy_moves_copies(NUKSM_POLICY_ID_GLOBAL));
    g_assert_false(policy_moves_copies(NUKSM_POLICY_ID_ADAPTIVE));
    g_assert_true(policy_moves_copies(NUKSM_POLICY_ID_AUTO));
    g_assert_true(policy_moves_copies(NUKSM_POLICY_ID_KSM_ORDER));
    g_assert_true(policy_moves_copies(NUKSM_POLICY_ID_LOCAL));
    g_assert_true(policy_moves_copies(NUKSM_POLICY_ID_FAIR));
    g_assert_true(policy_moves_copies(NUKSM_POLICY_ID_PRIORITY));
}

static void test_moves_by_hotness(void)
{
    for (size_t p = 0; p < G_N_ELEMENTS(all_policies); p++) {
        NuksmPolicyId policy = all_policies[p];

        g_assert_cmpint(policy_moves_by_hotness(policy), ==,
                        policy == NUKSM_POLICY_ID_FAIR ||
                        policy == NUKSM_POLICY_ID_PRIORITY ||
                        policy == NUKSM_POLICY_ID_AUTO);
    }
}

static void test_replace(void)
{
    static const uint64_t copies[K] = { 10, 8, 9, 3 };
    PolicyLoad load = load_of(copies);
    PolicyOwner o[3] = { owner(5, 1, false), owner(9, 2, false),
                         owner(7, 3, false) };

    /* ksm-order: the latest VM's node. */
    g_assert_cmpuint(policy_relocate_node(NUKSM_POLICY_ID_KSM_ORDER, &load,
                                          0, o, 3, 5), ==, 2);
    /* priority, no owner hot: the same draw as for a new copy. */
    for (uint64_t i = 0; i < 100; i++) {
        g_assert_cmpuint(policy_relocate_node(NUKSM_POLICY_ID_PRIORITY,
                                              &load, 0, o, 3,
                                              digest_of(i)), ==,
                         o[policy_priority_pick(o, 3, digest_of(i))].home);
    }
    /* global and adaptive leave copies where they are. */
    g_assert_cmpuint(policy_relocate_node(NUKSM_POLICY_ID_GLOBAL, &load, 0,
                                          o, 3, 5), ==, 0);
    g_assert_cmpuint(policy_relocate_node(NUKSM_POLICY_ID_ADAPTIVE, &load, 0,
                                          o, 3, 5), ==, 0);
}

/*
 * fair, a copy no owner read lately: to the emptiest owner's node, only
 * if that brings the nodes closer by more than one copy.
 */
static void test_replace_fair_idle_balanced(void)
{
    static const uint64_t copies[K] = { 10, 8, 9, 3 };
    PolicyLoad load = load_of(copies);
    PolicyOwner o[3] = { reader(5, 1, 12), reader(9, 2, 200),
                         reader(7, 3, NUKSM_IDLE_NEVER) };

    g_assert_cmpuint(policy_relocate_node(NUKSM_POLICY_ID_FAIR, &load, 0, o,
                                          3, 5), ==, 3);
    load.copies[0] = 4;
    g_assert_cmpuint(policy_relocate_node(NUKSM_POLICY_ID_FAIR, &load, 0, o,
                                          3, 5), ==, 0);
    load.copies[0] = 5;
    g_assert_cmpuint(policy_relocate_node(NUKSM_POLICY_ID_FAIR, &load, 0, o,
                                          3, 5), ==, 3);
    /* Already on the emptiest owner's node: it stays. */
    g_assert_cmpuint(policy_relocate_node(NUKSM_POLICY_ID_FAIR, &load, 3, o,
                                          3, 5), ==, 3);
}

/*
 * fair, a copy read lately by one VM: to that VM's node, however full,
 * for every content; owners read long ago (no longer warm) count as
 * idle.  The old, write-only hot called every merged page cold and
 * balanced it.
 */
static void test_replace_fair_read_by_one(void)
{
    static const uint64_t copies[K] = { 10, 50, 9, 3 };
    PolicyLoad load = load_of(copies);
    PolicyOwner o[3] = { reader(5, 1, 0), reader(9, 2, 12),
                         reader(7, 3, NUKSM_IDLE_NEVER) };
    /* Two readers, of one node (one VM with two pages, or two VMs). */
    PolicyOwner same[3] = { reader(5, 2, 1), reader(9, 2, 2),
                            reader(7, 3, NUKSM_IDLE_NEVER) };

    for (uint64_t i = 0; i < 1000; i++) {
        g_assert_cmpuint(policy_relocate_node(NUKSM_POLICY_ID_FAIR, &load,
                                              0, o, 3, digest_of(i)), ==, 1);
        g_assert_cmpuint(policy_relocate_node(NUKSM_POLICY_ID_FAIR, &load,
                                              1, o, 3, digest_of(i)), ==, 1);
        g_assert_cmpuint(policy_relocate_node(NUKSM_POLICY_ID_FAIR, &load,
                                              3, same, 3, digest_of(i)),
                         ==, 2);
    }
}

/*
 * fair, copies read lately by two VMs of two nodes: about half of the
 * contents on each node, decided by the content alone: the same on every
 * pass, wherever the copy is and in whatever order the pages come, so
 * that a copy, once placed, stays.
 */
static void test_replace_fair_read_by_two(void)
{
    static const uint64_t copies[K] = { 0, 1000, 0, 0 };
    PolicyLoad load = load_of(copies);
    PolicyOwner o[3] = { reader(5, 1, 0), reader(9, 3, 2),
                         reader(7, 2, NUKSM_IDLE_NEVER) };
    PolicyOwner reversed[3] = { o[2], o[1], o[0] };
    uint32_t on[K] = { 0 };

    for (uint64_t i = 0; i < DRAWS; i++) {
        uint32_t node = policy_relocate_node(NUKSM_POLICY_ID_FAIR, &load, 0,
                                             o, 3, digest_of(i));

        g_assert_true(node == 1 || node == 3);
        for (uint32_t from = 0; from < K; from++) {
            g_assert_cmpuint(policy_relocate_node(NUKSM_POLICY_ID_FAIR,
                                                  &load, from, reversed, 3,
                                                  digest_of(i)), ==, node);
        }
        on[node]++;
    }
    g_assert_cmpfloat_with_epsilon((double)on[1] / DRAWS, 0.5, 0.01);
}

/*
 * Hysteresis: a copy stays where its readers' draw put it while they
 * stay warm.  A reader of a copy read by two that has been cold for a
 * few samples still keeps its half (the hot-only draw sent them all to
 * the other reader's node); a copy whose one reader has been cold for a
 * few samples stays on its node however full (hot-only balanced it at
 * once), and is balanced once the reader is no longer warm.
 */
static void test_replace_fair_hysteresis(void)
{
    static const uint64_t copies[K] = { 0, 1000, 0, 0 };
    PolicyLoad load = load_of(copies);
    PolicyOwner paused[2] = { reader(5, 1, 0), reader(9, 3, 6) };
    PolicyOwner gone[2] = { reader(5, 1, 0), reader(9, 3, 12) };
    PolicyOwner cooling[2] = { reader(5, 1, 6),
                               reader(9, 3, NUKSM_IDLE_NEVER) };
    PolicyOwner idle[2] = { reader(5, 1, 12),
                            reader(9, 3, NUKSM_IDLE_NEVER) };
    uint32_t on3 = 0;

    for (uint64_t i = 0; i < DRAWS; i++) {
        uint32_t node = policy_relocate_node(NUKSM_POLICY_ID_FAIR, &load, 1,
                                             paused, 2, digest_of(i));

        g_assert_true(node == 1 || node == 3);
        on3 += node == 3;
        g_assert_cmpuint(policy_relocate_node(NUKSM_POLICY_ID_FAIR, &load, 1,
                                              gone, 2, digest_of(i)), ==, 1);
        g_assert_cmpuint(policy_relocate_node(NUKSM_POLICY_ID_FAIR, &load, 1,
                                              cooling, 2, digest_of(i)),
                         ==, 1);
        g_assert_cmpuint(policy_relocate_node(NUKSM_POLICY_ID_FAIR, &load, 1,
                                              idle, 2, digest_of(i)), ==, 3);
    }
    g_assert_cmpfloat_with_epsilon((double)on3 / DRAWS, 0.5, 0.01);
    /* A new copy is placed as a pass would keep it. */
    for (uint64_t i = 0; i < 1000; i++) {
        g_assert_cmpuint(policy_new_copy(NUKSM_POLICY_ID_FAIR, &load,
                                         &cooling[0], &cooling[1],
                                         digest_of(i)), ==, 1);
    }
}

/*
 * priority: the readers draw, by their priorities; the owners nobody
 * reads lately draw only when no owner is read.
 */
static void test_replace_priority_weighs_readers(void)
{
    static const uint64_t copies[K] = { 0 };
    PolicyLoad load = load_of(copies);
    PolicyOwner o[3] = { reader(5, 0, 0), reader(9, 1, 1),
                         reader(7, 2, NUKSM_IDLE_NEVER) };
    uint32_t on[K] = { 0 };

    o[0].priority = 10;
    o[1].priority = 1;
    o[2].priority = NUKSM_PRIORITY_MAX;
    for (uint64_t i = 0; i < DRAWS; i++) {
        on[policy_relocate_node(NUKSM_POLICY_ID_PRIORITY, &load, 2, o, 3,
                                digest_of(i))]++;
    }
    g_assert_cmpuint(on[2], ==, 0);
    g_assert_cmpfloat_with_epsilon((double)on[0] / DRAWS, 10.0 / 11, 0.01);

    /*
     * A new copy too: a reader of priority 1 takes it from an idle owner
     * of the highest priority.
     */
    for (uint64_t i = 0; i < 1000; i++) {
        PolicyOwner a = reader(1, 1, 0), b = reader(2, 2, 200);

        a.priority = 1;
        b.priority = NUKSM_PRIORITY_MAX;
        g_assert_cmpuint(policy_new_copy(NUKSM_POLICY_ID_PRIORITY, &load,
                                         &b, &a, digest_of(i)), ==, 1);
    }
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/policy/hot", test_hot);
    g_test_add_func("/policy/warm", test_warm);
    g_test_add_func("/policy/may-map", test_may_map);
    g_test_add_func("/policy/may-share", test_may_share);
    g_test_add_func("/policy/new-copy/same-home", test_new_copy_same_home);
    g_test_add_func("/policy/new-copy/global-and-ksm-order",
                    test_new_copy_global_and_ksm_order);
    g_test_add_func("/policy/new-copy/fair", test_new_copy_fair);
    g_test_add_func("/policy/new-copy/adaptive", test_new_copy_adaptive);
    g_test_add_func("/policy/new-copy/auto", test_new_copy_auto);
    g_test_add_func("/policy/priority/table-5.3", test_priority_table_5_3);
    g_test_add_func("/policy/priority/k-owners", test_priority_k_owners);
    g_test_add_func("/policy/moves-copies", test_moves_copies);
    g_test_add_func("/policy/moves-by-hotness", test_moves_by_hotness);
    g_test_add_func("/policy/replace", test_replace);
    g_test_add_func("/policy/replace/auto-pages", test_replace_auto_pages);
    g_test_add_func("/policy/replace/fair-idle-balanced",
                    test_replace_fair_idle_balanced);
    g_test_add_func("/policy/replace/fair-read-by-one",
                    test_replace_fair_read_by_one);
    g_test_add_func("/policy/replace/fair-read-by-two",
                    test_replace_fair_read_by_two);
    g_test_add_func("/policy/replace/fair-hysteresis",
                    test_replace_fair_hysteresis);
    g_test_add_func("/policy/replace/priority-weighs-readers",
                    test_replace_priority_weighs_readers);
    return g_test_run();
}
