#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Compare VMs across hosts by their nuksm content sketches.

    nuksmctl --json similarity --sketches > host1.json   # on each host
    scripts/sketches.py [--threshold 0.4] host1.json host2.json ...

prints every pair of VMs, on one host or two, whose similarity (AdaptMD's:
the share of the smaller VM's pages whose content the other holds)
reaches the threshold, most similar first.  The reference for anyone who
reads the export (format "nuksm-sketches", version 1, docs/operations.rst
"For fleets"): a sketch is a sample of a VM's pages chosen by content;
each entry is a fingerprint (the top 40 bits of splitmix64's finaliser of
the page's XXH3-64 ^ seed) and how many sampled pages hold it; a page is
in the sample of shift s while the fingerprint's top s bits are zero.
Two sketches compare at the larger of their two shifts.
"""

import argparse
import itertools
import json
import sys

FORMAT = "nuksm-sketches"
VERSION = 1
SEED = 0x6e756b736d736b74     # NUKSM_SKETCH_SEED
BITS = 40                      # NUKSM_SKETCH_FINGERPRINT_BITS
MASK64 = (1 << 64) - 1


def mix64(x):
    """splitmix64's finaliser (libnuksm's nuksm_mix64)."""
    x ^= x >> 30
    x = (x * 0xbf58476d1ce4e5b9) & MASK64
    x ^= x >> 27
    x = (x * 0x94d049bb133111eb) & MASK64
    return x ^ (x >> 31)


def fingerprint(digest):
    """A page's fingerprint from its XXH3-64 digest."""
    return mix64(digest ^ SEED) >> (64 - BITS)


def in_sample(fp, shift):
    return shift == 0 or fp >> (BITS - shift) == 0


def sketch_of(digests, max_pages=4096):
    """The sketch nuksmd keeps of a VM whose pages hold @digests (one per
    page): {"shift": s, "sample": {fingerprint: pages}}."""
    shift, sample, kept = 0, {}, 0
    for d in digests:
        fp = fingerprint(d)
        if not in_sample(fp, shift):
            continue
        sample[fp] = sample.get(fp, 0) + 1
        kept += 1
        while kept > max_pages and shift < BITS:
            shift += 1
            sample = {f: n for f, n in sample.items() if in_sample(f, shift)}
            kept = sum(sample.values())
    return {"shift": shift, "sample": sample}


def compare(a, b):
    """(similarity, pages of a alike, pages of b alike), estimated; the
    pages scaled back by the sample's rate."""
    shift = max(a["shift"], b["shift"])
    in_a = {f: n for f, n in a["sample"].items() if in_sample(f, shift)}
    in_b = {f: n for f, n in b["sample"].items() if in_sample(f, shift)}
    sampled_a, sampled_b = sum(in_a.values()), sum(in_b.values())
    alike_a = sum(n for f, n in in_a.items() if f in in_b)
    alike_b = sum(n for f, n in in_b.items() if f in in_a)
    if sampled_a <= sampled_b:
        smaller, alike = sampled_a, alike_a
    else:
        smaller, alike = sampled_b, alike_b
    # Per mille, rounded half up, as nuksmd does.
    similarity = (alike * 1000 + smaller // 2) // smaller / 1000 \
        if smaller else 0.0
    return similarity, alike_a << shift, alike_b << shift


def load(path):
    """The VMs of one export, each with its host and its sample as a
    dict."""
    with open(path) as f:
        export = json.load(f)
    if export.get("format") != FORMAT or export.get("version") != VERSION:
        raise ValueError(f"{path}: not a {FORMAT} export of version "
                         f"{VERSION}")
    if export["seed"] != SEED or export["fingerprint_bits"] != BITS:
        raise ValueError(f"{path}: sketches of another hash")
    return [{**vm, "host": export["host"],
             "sample": {fp: n for fp, n in vm["sample"]}}
            for vm in export["vms"]]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("exports", nargs="+")
    parser.add_argument("--threshold", type=float, default=0.4)
    args = parser.parse_args()
    vms = [vm for path in args.exports for vm in load(path)]
    pairs = []
    for a, b in itertools.combinations(vms, 2):
        similarity, _, _ = compare(a, b)
        if similarity >= args.threshold:
            pairs.append((similarity, a, b))
    for similarity, a, b in sorted(pairs, key=lambda p: -p[0]):
        print(f"{similarity:6.1%}  {a['host']}/{a['name'] or a['id']}  "
              f"{b['host']}/{b['name'] or b['id']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
