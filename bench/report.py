# SPDX-License-Identifier: GPL-2.0-or-later
"""The results as text: a console summary and the reStructuredText block
of docs/benchmarks.rst that the run replaces (between its markers)."""

import os
import re

from workloads import MIB, PAGE

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


def goal_value(g):
    if g["value"] is None:
        return "not reached"
    note = f" ({g['note']})" if g["note"] else ""
    return f"{g['value']:.2f}{g['unit']}{note}"


def list_table(header, rows, widths=None):
    lines = [".. list-table::", "   :header-rows: 1"]
    if widths:
        lines.append(f"   :widths: {widths}")
    lines.append("")
    for r in [header, *rows]:
        lines.append(f"   * - {r[0]}")
        lines += [f"     - {c}" for c in r[1:]]
    return lines


def rst_block(meta, pairs, goals, images, docs_dir):
    runs = [r for pair in pairs for r in pair]
    out = [f"Machine: {meta['cpu']}, {meta['cores']} cores, "
           f"{meta['memory_gib']:.0f} GiB; kernel {meta['kernel']}; "
           f"commit ``{meta['commit']}``; {meta['date']}; "
           f"``{meta['command']}`` in {meta['elapsed_s'] / 60:.1f} min.",
           ""]
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


def console(pairs, goals):
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
    for g in goals:
        lines.append(f"{'met   ' if g['met'] else 'MISSED'} {g['goal']}: "
                     f"{goal_value(g)} (goal {g['target']})")
    return "\n".join(lines)
