/*
 * nuksmctl run and prune (run.h).
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "run.h"

/* How often prune looks at what is left. */
#define PRUNE_LOOK_S 1

void cmd_run(Ctl *ctl, NuksmRunId run, bool json)
{
    NuksmMsgSetRun req = { .run = run };
    const NuksmMsgInfo *info = ctl_request(ctl, NUKSM_MSG_SET_RUN, &req,
                                           sizeof(req), NUKSM_MSG_INFO);

    if (json) {
        printf("{\"run\": \"%s\", \"held\": %s}\n",
               nuksm_run_name(info->run), info->held ? "true" : "false");
    } else {
        printf("run: %s: merging %s\n", nuksm_run_name(info->run),
               info->held ? "rests" : "works");
    }
}

/*
 * The pages still merged in the VMs of @domain, or of the host for NULL
 * (INFO's pages_sharing: the list of VMs may be cut short).
 */
static uint64_t merged_in(Ctl *ctl, const char *domain)
{
    g_autofree NuksmMsgVms *list = NULL;
    const NuksmVmEntry *entries;
    uint64_t merged = 0;

    if (!domain) {
        const NuksmMsgInfo *info = ctl_request(ctl, NUKSM_MSG_GET_INFO,
                                               NULL, 0, NUKSM_MSG_INFO);

        return info->pages_sharing;
    }
    list = ctl_list_vms(ctl);
    entries = (const NuksmVmEntry *)(list + 1);
    for (uint32_t i = 0; i < list->count; i++) {
        if (!strcmp(entries[i].domain, domain)) {
            merged += entries[i].merged_pages;
        }
    }
    return merged;
}

int cmd_prune(Ctl *ctl, const char *domain, unsigned rate_mib, bool wait,
              bool json)
{
    NuksmMsgPrune req = {
        .rate = MIN((uint64_t)rate_mib * (1024 * 1024 / NUKSM_PAGE_SIZE),
                    NUKSM_PRUNE_RATE_MAX),
    };
    const NuksmMsgPrune *reply;
    uint64_t left = 0;
    uint32_t told;

    if (domain) {
        nuksm_strfield_set(req.domain, sizeof(req.domain), domain);
    }
    reply = ctl_request(ctl, NUKSM_MSG_PRUNE, &req, sizeof(req),
                        NUKSM_MSG_PRUNE);
    told = reply->vms;
    if (domain && !told) {
        die(1, "prune: no VM is in merge domain '%s' (merging rests there "
            "now all the same, until nuksmctl run)", domain);
    }
    if (!json) {
        printf("prune: merging rests in %s%s; %u VM%s unmerge at most "
               "%u MiB/s each\n", domain ? "merge domain " : "the host",
               domain ? domain : "", told, told == 1 ? "" : "s", rate_mib);
    }
    while (wait) {
        left = merged_in(ctl, domain);
        if (!left) {
            break;
        }
        if (!json) {
            printf("prune: %" PRIu64 " pages still merged\n", left);
            fflush(stdout);
        }
        sleep(PRUNE_LOOK_S);
    }
    if (json) {
        printf("{\"vms\": %u, \"merged_pages\": %" PRIu64 "}\n", told, left);
    } else if (wait) {
        printf("prune: no page is merged any more\n");
    }
    return 0;
}
