# SPDX-License-Identifier: GPL-2.0-or-later
"""The results as text: a console summary and the reStructuredText block
of docs/benchmarks.rst that the run replaces (between its markers)."""

import datetime
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

import plot
import stages
from workloads import MIB, PAGE

ROOT = Path(__file__).resolve().parent.parent

COLUMNS = ["workload", "budget", "side", "time to 99% (s)", "CPU-s to 99%",
           "merged pages / CPU-s", "CPU while merging (% core)",
           "steady CPU (% core)", "saved MiB (% of achievable)",
           "net saved MiB (physical)",
           "Pss before → after (MiB)", "metadata B / guest page",
           "COW break µs / page"]


def fmt(value, spec, none="—"):
    return none if value is None else format(value, spec)


def foreign_mib(run):
    """Memory of other KSM-mergeable processes during a KSM run, MiB."""
    return sum(run["details"].get("foreign_mergeable", {}).values()) / MIB


def row(run):
    saved = f"{run['saved_mib']:.1f}"
    if run["saving_fraction"] is not None:
        saved += f" ({100 * run['saving_fraction']:.1f}%)"
    cow = run.get("cow_break_ns")
    side = run["side"] + ("*" if foreign_mib(run) else "")
    return [run["workload"], run["budget"], side,
            fmt(run["t99_s"], ".1f"), fmt(run["cpu99_s"], ".2f"),
            fmt(run["merged_per_cpu_s"], ",.0f"),
            f"{100 * run['merge_cpu_share']:.1f}",
            f"{100 * run['steady_cpu_share']:.2f}", saved,
            f"{run['net_saving_mib']:.1f}",
            f"{run['memory_before'] / MIB:.0f} → "
            f"{run['memory_after'] / MIB:.0f}",
            f"{run['metadata_per_page']:.1f}",
            fmt(cow and cow / 1000, ".2f")]


OVER_TIME_COLUMNS = ["workload", "side", "saved MiB at the end",
                     "time to 90% of it (s)", "saving integrated (MiB·s)",
                     "integrated vs KSM's", "CPU-s (vs KSM's)",
                     "QEMU CPU-s, all threads"]


def over_time_rows(pairs):
    """XLH's and UKSM's figures, for the workloads measured over time: the
    saving over time against KSM's in the same run, and what it cost."""
    rows = []
    for pair in pairs:
        ksm = pair[0]
        if not ksm.get("over_time"):
            continue
        for run in pair:
            vs = run["integrated_saving_mib_s"] / \
                max(ksm["integrated_saving_mib_s"], 1e-9)
            cpu = run["merge_cpu_s"] / max(ksm["merge_cpu_s"], 1e-9)
            rows.append([run["workload"], run["side"],
                         f"{run['final_saving'] * PAGE / MIB:.1f}",
                         fmt(run["t90_s"], ".1f"),
                         f"{run['integrated_saving_mib_s']:,.0f}",
                         f"{vs:.2f}x", f"{run['merge_cpu_s']:.2f} "
                         f"({cpu:.2f}x)", f"{run['qemu_cpu_s']:.1f}"])
    return rows


COST_COLUMNS = ["stage", "µs per merged page", "share", "floor µs",
                "× floor"]


def cost_model_rows(pairs, floors):
    """The cost model of each profiled run: (title, rows); none without
    the floors."""
    tables = []
    if not floors:
        return tables
    for pair in pairs:
        ksm = pair[0]
        for run in pair:
            if "stages" not in run:
                continue
            model = stages.cost_model(
                run, floors, run.get("main_loop_baseline_share", 0.0))
            total = sum(us for _, us, _ in model)
            floor = sum(f for _, _, f in model)
            rows = [[s, f"{us:.2f}", f"{100 * us / total:.0f}%",
                     fmt(f or None, ".3f"), fmt(f and us / f, ".0f")]
                    for s, us, f in model]
            rows.append(["**all**", f"**{total:.2f}**", "100%",
                         f"{floor:.3f}", f"{total / floor:.0f}"])
            ksm_us = 1e6 / ksm["merged_per_cpu_s"] \
                if ksm["merged_per_cpu_s"] else None
            rows.append(["KSM, all of it", fmt(ksm_us, ".2f"), "", "", ""])
            title = (f"``{run['workload']}`` at "
                     f"{plot.NUKSM_BUDGET_LABELS[run['budget']]}, "
                     f"{run['stages']['samples']:,} samples, "
                     f"{run['stages']['merged_pages']:,} pages merged in "
                     f"{total * run['stages']['merged_pages'] / 1e6:.2f} "
                     "CPU-s (QEMU's main loops beyond their idle "
                     "baseline)")
            tables.append((title, rows))
    return tables


MAPPING_COLUMNS = ["workload", "side", "mappings added",
                   "per page saved", "unreclaimable slab added (MiB)",
                   "net saved MiB (physical)", "vs KSM's"]


def mapping_rows(pairs):
    """What the kernel's mappings cost on the workloads whose duplicates
    lie out of line (scattered, shuffled)."""
    rows = []
    for pair in pairs:
        ksm = pair[0]
        if not ksm["workload"].startswith(("scattered", "shuffled")) or \
                "mappings_before" not in ksm:
            continue
        for run in pair:
            added = run["mappings_after"] - run["mappings_before"]
            saved = run.get("steady_saving", run["final_saving"])
            slab = (run["physical_after"]["SUnreclaim"] -
                    run["physical_before"]["SUnreclaim"]) / MIB
            vs = run["net_saving_mib"] / ksm["net_saving_mib"] \
                if ksm["net_saving_mib"] else None
            rows.append([run["workload"], run["side"], f"{added:,}",
                         fmt(saved and added / saved, ".2f"), f"{slab:.1f}",
                         f"{run['net_saving_mib']:.1f}", fmt(vs, ".2f", "")
                         + ("×" if vs else "")])
    return rows


def goal_value(g):
    if g["value"] is None:
        return "not reached"
    note = f" ({g['note']})" if g["note"] else ""
    return f"{g['value']:.2f}{g['unit']}{note}"


def machine(command, started):
    """The machine, kernel, commit and time a run is on."""
    with open("/proc/cpuinfo") as f:
        cpu = next((line.split(":", 1)[1].strip() for line in f
                    if line.startswith("model name")), platform.machine())
    with open("/proc/meminfo") as f:
        mem_kib = int(f.readline().split()[1])
    commit = subprocess.run(["git", "-C", str(ROOT), "describe", "--always",
                             "--dirty"], capture_output=True,
                            text=True).stdout.strip()
    return {"cpu": cpu, "cores": os.cpu_count(),
            "memory_gib": mem_kib / (1 << 20), "kernel": platform.release(),
            "commit": commit or "unknown",
            "date": datetime.datetime.now(datetime.timezone.utc)
            .strftime("%Y-%m-%d %H:%M UTC"),
            "command": command, "started": started}


def publish(out, name, results, started, plot, rst, docs=True):
    """What a benchmark that began at monotonic time @started leaves:
    OUT/NAME.json (@results, with the machine, commit and time they come
    from), the plot OUT/NAME.png (plot(results, path)), and unless not
    @docs the text rst(meta, image, docs_dir) between the NAME markers of
    docs/benchmarks.rst."""
    meta = machine(" ".join(sys.argv), datetime.datetime.now().isoformat())
    meta["elapsed_s"] = time.monotonic() - started
    (out / f"{name}.json").write_text(
        json.dumps({"meta": meta, "results": results}, indent=1))
    image = out / f"{name}.png"
    plot(results, image)
    if docs:
        doc = ROOT / "docs/benchmarks.rst"
        update_docs(doc, name, rst(meta, image, doc.parent))


def list_table(header, rows, widths=None):
    lines = [".. list-table::", "   :header-rows: 1"]
    if widths:
        lines.append(f"   :widths: {widths}")
    lines.append("")
    for r in [header, *rows]:
        lines.append(f"   * - {r[0]}")
        lines += [f"     - {c}" for c in r[1:]]
    return lines


def pair_name(pair):
    return f"{pair[0]['workload']}/{pair[0]['budget']}"


def part(meta, pairs):
    """What machine_lines() says of one part of a run in parts: where,
    when and what (the names of its @pairs)."""
    keys = ("cpu", "cores", "memory_gib", "kernel", "commit", "date",
            "command", "elapsed_s")
    return {**{k: meta[k] for k in keys},
            "pairs": [pair_name(p) for p in pairs]}


def machine_line(meta):
    return (f"{meta['cpu']}, {meta['cores']} cores, "
            f"{meta['memory_gib']:.0f} GiB; kernel {meta['kernel']}; "
            f"commit ``{meta['commit']}``; {meta['date']}; "
            f"``{meta['command']}`` in {meta['elapsed_s'] / 60:.1f} min")


def machine_lines(meta):
    """Where and when a run ran: one line, or one per part of a run in
    parts (bench/run.py --add)."""
    parts = meta.get("parts", [])
    if len(parts) < 2:
        return [f"Machine: {machine_line(parts[0] if parts else meta)}."]
    return [f"Run in {len(parts)} parts:", ""] + [
        f"- {machine_line(p)}: {', '.join(p['pairs'])}." for p in parts]


def rst_block(meta, pairs, goals, images, docs_dir):
    runs = [r for pair in pairs for r in pair]
    out = machine_lines(meta) + [""]
    out += list_table(COLUMNS, [row(r) for r in runs])
    foreign = [f"{r['workload']}/{r['budget']} ({foreign_mib(r):.0f} MiB)"
               for r in runs if foreign_mib(r)]
    if foreign:
        out += ["", "\\* Other processes with KSM-mergeable memory ran "
                "meanwhile, and ksmd scanned them too: " +
                ", ".join(foreign) + ".  KSM's time and CPU are "
                "overstated there."]
    over_time = over_time_rows(pairs)
    if over_time:
        out += ["", "Saving over time, XLH's and UKSM's figures (the "
                "merging CPU leaves out QEMU's main loops where they carry "
                "the guests' I/O or the benchmark's rewrites: the last "
                "column counts every QEMU thread, on every side):", ""]
        out += list_table(OVER_TIME_COLUMNS, over_time)
    for title, rows in cost_model_rows(pairs, meta.get("floors")):
        out += ["", f"Cost model, {title} (``bench/stages.py``; floors "
                "from ``bench/floors.c`` on this machine):", ""]
        out += list_table(COST_COLUMNS, rows)
    mappings = mapping_rows(pairs)
    if mappings:
        out += ["", "Mappings of the duplicates that lie out of line, and "
                "what they cost the kernel:", ""]
        out += list_table(MAPPING_COLUMNS, mappings)
    out += ["", "Goals:", ""]
    out += list_table(["goal", "target", "measured", "met"],
                      [[g["goal"], g["target"], goal_value(g),
                        "yes" if g["met"] else "**no**"] for g in goals])
    for name, path in images.items():
        rel = os.path.relpath(path, docs_dir)
        what = {"idle-series": "steady CPU and net saving against guest "
                "RAM", "scale-series": "CPU to merge and net saving against "
                "guest RAM"}.get(name, "memory saved and CPU spent over time")
        out += ["", f".. image:: {rel}", f"   :alt: {name}: {what}, KSM "
                "and nuksm"]
    return "\n".join(out) + "\n"


def update_docs(doc, mode, block):
    """Replace the text between the @mode markers of @doc by @block."""
    begin, end = f".. results-{mode}-begin", f".. results-{mode}-end"
    text = doc.read_text()
    pattern = re.compile(re.escape(begin) + r"\n.*?" + re.escape(end),
                         re.S)
    if not pattern.search(text):
        raise RuntimeError(f"{doc} has no '{begin}' ... '{end}' markers")
    doc.write_text(pattern.sub(lambda m: f"{begin}\n\n{block}\n{end}",
                               text))


def console(pairs, goals, floors):
    runs = [r for pair in pairs for r in pair]
    rows = [COLUMNS] + [row(r) for r in runs]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    over_time = over_time_rows(pairs)
    if over_time:
        rows = [OVER_TIME_COLUMNS] + over_time
        widths = [max(len(r[i]) for r in rows)
                  for i in range(len(OVER_TIME_COLUMNS))]
        lines.append("")
        lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths))
                  for r in rows]
    lines.append("")
    for title, rows in cost_model_rows(pairs, floors):
        lines.append(f"cost model, {title}:")
        lines += ["  " + "  ".join(c.ljust(12) for c in r)
                  for r in [COST_COLUMNS] + rows]
        lines.append("")
    for r in mapping_rows(pairs):
        lines.append("mappings: " + ", ".join(
            f"{c}: {v}" for c, v in zip(MAPPING_COLUMNS, r)))
    for g in goals:
        lines.append(f"{'met   ' if g['met'] else 'MISSED'} {g['goal']}: "
                     f"{goal_value(g)} (goal {g['target']})")
    return "\n".join(lines)
