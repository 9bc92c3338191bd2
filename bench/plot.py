# SPDX-License-Identifier: GPL-2.0-or-later
"""PNG plots: memory saved and CPU spent over time, both sides."""

import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend)

from workloads import MIB, PAGE  # noqa: E402

COLOURS = {"ksm": "tab:blue", "ksm-advisor": "tab:cyan",
           "nuksm": "tab:orange",
           "nuksm-nohints": "tab:green", "nuksm-fullhash": "tab:red",
           "nuksm-distill": "tab:purple", "nuksm-profiled": "tab:gray"}
STYLES = {"full": "-", "default": "--", "paced": "-.", "idle": "-"}
# A run's label: its side, then its budget as that side spends it.
SIDE_LABELS = {"ksm": "KSM", "ksm-advisor": "KSM's advisor",
               "nuksm": "nuksm",
               "nuksm-nohints": "nuksm without I/O hints",
               "nuksm-fullhash": "nuksm hashing whole pages",
               "nuksm-distill": "nuksm distilling regions",
               "nuksm-profiled": "nuksm under perf (cost model)"}
KSM_BUDGET_LABELS = {"full": "full throttle", "default": "its defaults",
                     "paced": "1000 pages every 20 ms",
                     "idle": "full throttle, then its defaults"}
NUKSM_BUDGET_LABELS = {"full": "full throttle",
                       "default": "KSM's default CPU share",
                       "paced": "that KSM's CPU share",
                       "idle": "max-cpu=100, then its defaults"}


def label(side, budget):
    budgets = KSM_BUDGET_LABELS if side.startswith("ksm") else \
        NUKSM_BUDGET_LABELS
    return f"{SIDE_LABELS[side]}, {budgets[budget]}"


def save(fig, path):
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def plot_workload(runs, title, path):
    fig, (saved_ax, cpu_ax) = plt.subplots(2, 1, figsize=(8, 6.5),
                                           sharex=True)
    for run in runs:
        t = [p[0] for p in run["timeline"]]
        style = dict(color=COLOURS[run["side"]],
                     linestyle=STYLES[run["budget"]],
                     label=label(run["side"], run["budget"]))
        saved_ax.plot(t, [p[1] * PAGE / MIB for p in run["timeline"]],
                      **style)
        cpu_ax.plot(t, [p[2] / 1e9 for p in run["timeline"]], **style)
    reads_done = [t for run in runs for t in run.get("reads_done_s",
                                                       {}).values()]
    if reads_done:
        saved_ax.axvline(max(reads_done), color="grey", linewidth=0.8,
                         linestyle="-.", label="the guests have read their "
                         "disks (latest)")
    target = runs[0]["achievable"]
    if target:
        saved_ax.axhline(0.99 * target * PAGE / MIB, color="grey",
                         linewidth=0.8, linestyle=":",
                         label="99% of achievable")
    saved_ax.set_ylabel("memory saved (MiB)")
    # Long titles (a workload's and its budget's) wrap rather than run
    # off the figure.
    saved_ax.set_title(textwrap.fill(title, 80))
    saved_ax.legend(loc="best", fontsize="small")
    # Runs last from one second to minutes: linear to 1 s, then log.
    saved_ax.set_xscale("symlog", linthresh=1.0)
    saved_ax.set_xlim(left=0)
    saved_ax.grid(alpha=0.3)
    cpu_ax.set_ylabel("CPU spent (s)")
    cpu_ax.set_xlabel("seconds since deduplication was switched on "
                      "(logarithmic beyond 1 s)")
    cpu_ax.grid(alpha=0.3)
    save(fig, path)


def plot_series(runs, budget, cpu_of):
    """@runs' CPU (@cpu_of(run)) and net physical saving against guest
    RAM, both sides, on two axes sharing guest RAM; returns them."""
    fig, (cpu_ax, mem_ax) = plt.subplots(2, 1, figsize=(8, 6.5),
                                         sharex=True)
    for side in ("ksm", "nuksm"):
        mine = sorted((r for r in runs if r["side"] == side),
                      key=lambda r: r["guest_pages"])
        gib = [r["guest_pages"] * PAGE / (1 << 30) for r in mine]
        style = dict(color=COLOURS[side], marker="o",
                     label=label(side, budget))
        cpu_ax.plot(gib, [cpu_of(r) for r in mine], **style)
        mem_ax.plot(gib, [r["net_saving_mib"] for r in mine], **style)
    mem_ax.set_ylabel("net saving, physical (MiB)")
    for ax in (cpu_ax, mem_ax):
        ax.grid(alpha=0.3)
    return fig, cpu_ax, mem_ax


def plot_idle_series(pairs, path):
    """Steady-state CPU and net physical saving against guest RAM, both
    sides, over the idle-* workloads."""
    runs = [r for pair in pairs for r in pair
            if r["workload"].startswith("idle-")]
    fig, cpu_ax, mem_ax = plot_series(
        runs, "idle", lambda r: 100 * r["steady_cpu_share"])
    cpu_ax.axhline(0.5, color="grey", linewidth=0.8, linestyle=":",
                   label="goal: 0.5% of a core")
    cpu_ax.set_ylabel("steady CPU, nothing to merge (% of a core)")
    cpu_ax.set_title("idle: 2 VMs, half identical, at the defaults "
                     "once merged")
    cpu_ax.legend(loc="best", fontsize="small")
    mem_ax.set_xlabel("guest RAM in all (GiB)")
    mem_ax.set_xscale("log", base=2)
    save(fig, path)


def plot_scale_series(pairs, path):
    """CPU to merge and net physical saving against guest RAM, both
    sides at full throttle, over static and the scale-* workloads."""
    runs = [r for pair in pairs for r in pair if r["budget"] == "full" and
            (r["workload"] == "static" or r["workload"].startswith("scale-"))]
    # A run that did not reach 99% leaves a gap.
    fig, cpu_ax, mem_ax = plot_series(
        runs, "full", lambda r: r["cpu99_s"] or float("nan"))
    cpu_ax.set_ylabel("CPU to 99% of the saving (s)")
    cpu_ax.set_title("scale: 1 GiB VMs, half identical, full throttle")
    cpu_ax.legend(loc="best", fontsize="small")
    mem_ax.set_xlabel("guest RAM in all (GiB; 2, 8 and 16 VMs)")
    save(fig, path)


def plot_all(pairs, titles, out_dir):
    """One PNG per workload in @out_dir, and one of the idle and of the
    scale series if they ran; returns {name: path}."""
    by_workload = {}
    for pair in pairs:
        by_workload.setdefault(pair[0]["workload"], []).extend(pair)
    paths = {}
    for name, runs in by_workload.items():
        paths[name] = out_dir / f"{name}.png"
        plot_workload(runs, titles[name], paths[name])
    if sum(name.startswith("idle-") for name in by_workload) > 1:
        paths["idle-series"] = out_dir / "idle-series.png"
        plot_idle_series(pairs, paths["idle-series"])
    if sum(name == "static" or name.startswith("scale-")
           for name in by_workload) > 1:
        paths["scale-series"] = out_dir / "scale-series.png"
        plot_scale_series(pairs, paths["scale-series"])
    return paths
