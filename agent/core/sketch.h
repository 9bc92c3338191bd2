/*
 * nuksmd content sketches: how much of their memory two VMs hold alike
 * (AdaptMD-S's similarity), from the digests their candidates carry.
 *
 * A VM's sketch is a sample of its pages chosen by content: a page is in
 * it while the top @shift bits of a keyed hash of its digest are zero,
 * so each content is sampled in every VM or in none (a coordinated
 * sample), and a page that changes leaves the sample or enters it with
 * its new content.  The sketch keeps the sampled pages' fingerprints
 * (40 bits of the hash) by page, at most SKETCH_PAGES of them: at that,
 * @shift grows by one and the pages the stricter sample leaves out are
 * dropped, so a VM of N pages keeps between SKETCH_PAGES / 2 and
 * SKETCH_PAGES, whatever N (16 bytes each in the table: 64 KiB to 128
 * KiB a VM once it is large).
 *
 * Why a coordinated sample rather than AdaptMD's bitmap of checksums or a
 * MinHash: similarity here is AdaptMD's, the pages of the smaller VM
 * whose content the other holds over its pages, a ratio of page counts
 * that duplicates within a VM weigh in.  A MinHash estimates the Jaccard
 * index of two content *sets* and a bitmap their overlap, blurred by
 * collisions unless it has a bit per page; a sample of pages counts
 * pages, duplicates and all, and the ratio of two counts from one sample
 * is the estimate with nothing to correct: its standard error is about
 * sqrt(p (1 - p) / n) at similarity p, for n sampled pages of the
 * smaller VM (1.1 points at p = 0.5, n = 2048), more where one content
 * fills many pages.  It
 * also forgets: a page's old content leaves the sketch when a new one
 * comes, which neither a MinHash nor a bitmap can do.  The hash that
 * samples is not keyed by a secret (NUKSM_SKETCH_SEED is fixed), so that
 * sketches of VMs on two hosts compare too.
 *
 * Two sketches compare at the stricter of their two samples.  A false
 * match of fingerprints needs 40 - shift bits alike: at most about
 * SKETCH_PAGES^2 / 2^(40 - shift) pages, under one for VMs below 1 TiB.
 *
 * Copyright (c) 2026 nuksm developers
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef NUKSMD_SKETCH_H
#define NUKSMD_SKETCH_H

#include <stdint.h>

#include "keymap.h"

/* Sampled pages a sketch keeps at most. */
#define SKETCH_PAGES 4096u


typedef struct ContentSketch {
    KeyMap pages;            /* sampled page -> fingerprint: bits 63..32 */
                             /* of its hash (value), 31..24 (tag) */
    uint32_t shift;          /* sampled: the hash's top @shift bits 0 */
    uint64_t changes;        /* changes of the sample, ever: what was */
                             /* compared with it holds while this stays */
} ContentSketch;

void sketch_init(ContentSketch *sk, uint64_t seed);
void sketch_destroy(ContentSketch *sk);

/* Page @page of the VM now holds content @digest. */
void sketch_note(ContentSketch *sk, uint64_t page, uint64_t digest);

/* The VM's pages the sketch stands for: its sampled pages << shift. */
uint64_t sketch_pages(const ContentSketch *sk);

/* What two sketches say of each other, at the stricter sample. */
typedef struct SketchOverlap {
    uint32_t shift;          /* the sample compared at */
    uint64_t sampled_a;      /* a's sampled pages in it */
    uint64_t sampled_b;
    uint64_t alike_a;        /* of them, those whose content b holds */
    uint64_t alike_b;
} SketchOverlap;

void sketch_compare(const ContentSketch *a, const ContentSketch *b,
                    SketchOverlap *out);

/*
 * The same, from two sketches' exports (sketch_export()) and shifts: to
 * compare many pairs, export each sketch once.  A merge of the two
 * sorted exports: 10 us for two of about 2000 entries here, where an
 * export takes 0.3 ms.
 */
void sketch_compare_samples(const GArray *a, uint32_t shift_a,
                            const GArray *b, uint32_t shift_b,
                            SketchOverlap *out);

/*
 * @sk as others may compare it: each fingerprint in its sample, once,
 * with the number of sampled pages that hold it (< 2^24), ascending by
 * fingerprint, packed as fingerprint << 24 | pages.  The fingerprint
 * is the top 40 bits of splitmix64's finaliser of (XXH3-64 of the page
 * ^ NUKSM_SKETCH_SEED); a page is sampled while its top @shift bits are
 * 0.
 */
GArray *sketch_export(const ContentSketch *sk);

/* The fingerprint (top 40 bits of the hash) sketches sample by. */
uint64_t sketch_fingerprint(uint64_t digest);

/*
 * AdaptMD's similarity of the VMs of @o, per mille: the pages of the
 * smaller whose content the other holds, over its pages; 0 if either
 * has no sampled page.
 */
uint32_t sketch_similarity_pm(const SketchOverlap *o);

#endif
