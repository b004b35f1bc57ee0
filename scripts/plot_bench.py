#!/usr/bin/python3
"""Plots the cost model's and the benchmarks' CSVs (docs/model.md).

    /usr/bin/python3 scripts/plot_bench.py CSV [CSV ...] [--out DIR] [--suffix S]

Each CSV is recognised by its columns:
  chorus_sim --csv            (table, winner, ...): per collective and rank count,
                              predicted time and busbw vs size for every algorithm,
                              the model's choice marked  -> sim_<coll>_n<N>.png;
                              the scaling table            -> sim_scaling_<coll>.png
  chorus_calibrate --validate --csv   (measured_s, predicted_s, judged, ...):
                              measured and predicted time vs size per algorithm and
                              predicted/measured with the +-25 % band   -> validate_n<N>.png
  chorus_calibrate --csv      (measured_s, predicted_s, steps, ...): the fit's samples,
                              the same two panels                        -> calibration_n<N>.png
  chorus_bench --csv          (busbw_gbps, algo, place, ...): busbw vs size per algorithm
                              (several files: one per --algo run); when a `chosen`
                              column is there (what `automatic` runs for the call), the
                              chosen algorithm's point is circled, every point of an
                              automatic series is circled in the colour of its choice,
                              and a choice not among the plotted algorithms is a
                              triangle on the size axis  -> bench_<coll>_n<N>.png
Writes to DIR (default docs/img), with S before ".png" (default none).

Runs with Debian's python3-matplotlib (hence /usr/bin/python3).
"""

import argparse
import csv
import math
import os
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ALGOS = ["ring", "direct", "tree", "recursive_doubling", "rabenseifner", "two_shot", "hierarchical", "automatic"]
COLORS = {
    "ring": "#1f77b4",
    "direct": "#ff7f0e",
    "tree": "#2ca02c",
    "recursive_doubling": "#d62728",
    "rabenseifner": "#9467bd",
    "two_shot": "#8c564b",
    "hierarchical": "#e377c2",
    "automatic": "#000000",
}


def color(name):
    return COLORS.get(name, "#7f7f7f")


def order(names):
    return sorted(names, key=lambda a: (ALGOS.index(a) if a in ALGOS else len(ALGOS), a))


def size_label(b):
    b = float(b)
    for unit, f in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if b >= f:
            v = b / f
            return f"{v:.0f}{unit}" if v == int(v) else f"{v:.1f}{unit}"
    return f"{b:.0f}"


def size_axis(ax, sizes):
    """Log2 axis with power-of-two ticks (at most about 10) over the data's range."""
    ax.set_xscale("log", base=2)
    lo, hi = min(sizes), max(sizes)
    k_lo, k_hi = int(math.floor(math.log2(lo))), int(math.ceil(math.log2(hi)))
    step = max(1, math.ceil((k_hi - k_lo) / 10))
    ticks = [2.0 ** k for k in range(k_lo, k_hi + 1, step)]
    ax.set_xticks(ticks)
    ax.set_xticklabels([size_label(t) for t in ticks], fontsize=7)
    ax.set_xlim(lo / 1.3, hi * 1.3)
    ax.grid(True, alpha=0.3)


def read(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        return None, rows
    cols = set(rows[0].keys())
    if {"table", "winner", "time_s"} <= cols:
        kind = "sim"
    elif {"measured_s", "predicted_s", "judged"} <= cols:
        kind = "validate"
    elif {"measured_s", "predicted_s", "steps"} <= cols:
        kind = "calibration"
    elif {"busbw_gbps", "algo", "place"} <= cols:
        kind = "bench"
    else:
        sys.exit(f"plot_bench.py: {path}: not a CSV of chorus_sim, chorus_calibrate or chorus_bench")
    return kind, rows


def plot_sim(rows, out, suffix, written):
    sweep = defaultdict(list)
    scaling = defaultdict(list)
    for r in rows:
        (sweep if r["table"] == "sweep" else scaling)[(r["collective"], int(r["ranks"]))].append(r)
    for (coll, n), rs in sorted(sweep.items()):
        fig, (ax_t, ax_b) = plt.subplots(1, 2, figsize=(12, 4.2), dpi=80)
        by_algo = defaultdict(list)
        for r in rs:
            by_algo[r["algorithm"]].append(r)
        for a in order(by_algo):
            pts = sorted(by_algo[a], key=lambda r: float(r["size_bytes"]))
            x = [float(r["size_bytes"]) for r in pts]
            ax_t.plot(x, [float(r["time_s"]) * 1e6 for r in pts], color=color(a), label=a, linewidth=1.3)
            ax_b.plot(x, [float(r["busbw_gbps"]) for r in pts], color=color(a), label=a, linewidth=1.3)
        wins = sorted((r for r in rs if r["winner"] == "1"), key=lambda r: float(r["size_bytes"]))
        for ax, key, scale in ((ax_t, "time_s", 1e6), (ax_b, "busbw_gbps", 1.0)):
            ax.scatter([float(r["size_bytes"]) for r in wins], [float(r[key]) * scale for r in wins],
                       s=46, facecolors="none", edgecolors=[color(r["algorithm"]) for r in wins], linewidths=1.8,
                       zorder=3, label="model's choice")
            size_axis(ax, [float(r["size_bytes"]) for r in rs])
        r0 = rs[0]
        ax_t.set(ylabel="predicted time (us)", yscale="log", xlabel="size (bytes)", title="time")
        ax_b.set(ylabel="predicted busbw (GB/s)", xlabel="size (bytes)", title="bus bandwidth (nccl-tests)")
        ax_b.legend(fontsize=7, ncol=2)
        fig.suptitle(f"chorus_sim: {coll}, {n} ranks ({r0['nodes']} node(s) x {r0['ranks_per_node']}); "
                     "circles: the model's choice", fontsize=10)
        fig.tight_layout(rect=(0, 0, 1, 0.94))
        path = os.path.join(out, f"sim_{coll}_n{n}{suffix}.png")
        fig.savefig(path)
        plt.close(fig)
        written.append(path)
    by_coll = defaultdict(list)
    for (coll, _), rs in scaling.items():
        by_coll[coll].extend(rs)
    for coll, rs in sorted(by_coll.items()):
        fig, (ax_t, ax_b) = plt.subplots(1, 2, figsize=(12, 4.2), dpi=80)
        by_algo = defaultdict(list)
        for r in rs:
            by_algo[r["algorithm"]].append(r)
        for a in order(by_algo):
            pts = sorted(by_algo[a], key=lambda r: int(r["ranks"]))
            x = [int(r["ranks"]) for r in pts]
            ax_t.plot(x, [float(r["time_s"]) * 1e3 for r in pts], color=color(a), label=a, marker=".")
            ax_b.plot(x, [float(r["busbw_gbps"]) for r in pts], color=color(a), label=a, marker=".")
        wins = sorted((r for r in rs if r["winner"] == "1"), key=lambda r: int(r["ranks"]))
        ax_t.plot([int(r["ranks"]) for r in wins], [float(r["time_s"]) * 1e3 for r in wins], color="black",
                  linewidth=2.5, alpha=0.35, label="best")
        ax_b.plot([int(r["ranks"]) for r in wins], [float(r["busbw_gbps"]) for r in wins], color="black",
                  linewidth=2.5, alpha=0.35, label="best")
        per_node = int(rs[0]["ranks_per_node"])
        for ax in (ax_t, ax_b):
            ax.set_xscale("log", base=2)
            ax.axvline(per_node, color="gray", linestyle=":", linewidth=1)
            ax.grid(True, alpha=0.3)
        ax_t.set(xlabel="ranks", ylabel="predicted time (ms)", yscale="log", title="time")
        ax_b.set(xlabel="ranks", ylabel="predicted busbw (GB/s)", title="bus bandwidth")
        ax_b.legend(fontsize=7, ncol=2)
        fig.suptitle(f"chorus_sim scaling: {coll} of {size_label(rs[0]['size_bytes'])}B; dotted: one node "
                     f"({per_node} ranks)", fontsize=10)
        fig.tight_layout(rect=(0, 0, 1, 0.94))
        path = os.path.join(out, f"sim_scaling_{coll}{suffix}.png")
        fig.savefig(path)
        plt.close(fig)
        written.append(path)


SERIES = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"]


def plot_measured_vs_predicted(rows, title, path, written, by_label=False):
    """rows: dicts with size_bytes, a label, measured_s, predicted_s. Colours: the algorithm's (the label's
    first word), or with by_label one per label."""
    fig, (ax_t, ax_r) = plt.subplots(1, 2, figsize=(12, 4.2), dpi=80)
    by = defaultdict(list)
    for r in rows:
        by[r["label"]].append(r)
    chose = set()
    for i, lab in enumerate(order(by)):
        pts = sorted(by[lab], key=lambda r: float(r["size_bytes"]))
        x = [float(r["size_bytes"]) for r in pts]
        c = SERIES[i % len(SERIES)] if by_label else color(lab.split(" ")[0])
        style = "--" if lab == "automatic" else "-"
        ax_t.plot(x, [float(r["measured_s"]) * 1e6 for r in pts], color=c, linestyle=style, marker=".", label=lab)
        ax_t.plot(x, [float(r["predicted_s"]) * 1e6 for r in pts], color=c, linestyle=style, alpha=0.45,
                  linewidth=3)
        ratio = [float(r["predicted_s"]) / float(r["measured_s"]) for r in pts]
        ax_r.plot(x, ratio, color=c, linestyle=style, marker=".", label=lab)
        # A selector's series: ring each point with the colour of the algorithm it ran.
        ran = [r.get("modelled_as", "") for r in pts]
        if any(a and a != lab for a in ran):
            for ax, ys in ((ax_t, [float(r["measured_s"]) * 1e6 for r in pts]), (ax_r, ratio)):
                ax.scatter(x, ys, s=46, facecolors="none", edgecolors=[color(a) for a in ran], linewidths=1.6,
                           zorder=3)
            chose.update(a for a in ran if a)
    for a in order(chose):
        ax_r.scatter([], [], s=46, facecolors="none", edgecolors=color(a), linewidths=1.6, label=f"it ran {a}")
    ax_r.axhspan(0.75, 1.25, color="green", alpha=0.08)
    ax_r.axhline(1.0, color="gray", linewidth=0.8)
    ax_r.axvline(64 * 1024, color="gray", linestyle=":", linewidth=1)
    for ax in (ax_t, ax_r):
        size_axis(ax, [float(r["size_bytes"]) for r in rows])
    ax_t.set(xlabel="size (bytes)", ylabel="time per call (us)", yscale="log",
             title="measured (thin, dots) and predicted (thick, pale)")
    ax_r.set(xlabel="size (bytes)", ylabel="predicted / measured", yscale="log",
             title="ratio; band: +-25 %, judged right of the dotted line (64 KiB)")
    ax_r.legend(fontsize=7, ncol=2)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    fig.savefig(path)
    plt.close(fig)
    written.append(path)


def plot_validate(rows, out, suffix, written):
    # One figure per (collective, ranks); files without a collective column are AllReduce.
    by = defaultdict(list)
    for r in rows:
        by[(r.get("collective") or "all_reduce", int(r["ranks"]))].append(dict(r, label=r["algorithm"]))
    for (coll, n), rs in sorted(by.items()):
        judged = [r for r in rs if r["judged"] == "1"]
        ok = sum(1 for r in judged if r["within_25"] == "1")
        name = f"validate_n{n}" if coll == "all_reduce" else f"validate_{coll}_n{n}"
        plot_measured_vs_predicted(
            rs, f"chorus_calibrate --validate: {coll}, {n} ranks (threads); within 25 %: {ok} of {len(judged)} "
                f"points >= 64 KiB", os.path.join(out, f"{name}{suffix}.png"), written)


def plot_calibration(rows, out, suffix, written):
    by_n = defaultdict(list)
    for r in rows:
        by_n[int(r["ranks"])].append(dict(r, label=f"{r['algorithm']} {r['collective']}"))
    for n, rs in sorted(by_n.items()):
        plot_measured_vs_predicted(rs, f"chorus_calibrate: the fit's samples and the fitted model, {n} ranks "
                                   "(threads)", os.path.join(out, f"calibration_n{n}{suffix}.png"), written,
                                   by_label=True)


def plot_bench(rows, out, suffix, written):
    # One type and operator: float/sum when present, else the most common.
    def pick(key, prefer):
        values = [r[key] for r in rows]
        return prefer if prefer in values else max(set(values), key=values.count)

    typ = pick("type", "float")
    rows = [r for r in rows if r["type"] == typ]
    groups = defaultdict(list)
    for r in rows:
        groups[(r["collective"], int(r["ranks"]))].append(r)
    for (coll, n), rs in sorted(groups.items()):
        ops = [r["redop"] for r in rs]
        op = "sum" if "sum" in ops else max(set(ops), key=ops.count)
        rs = [r for r in rs if r["redop"] == op]
        fig, ax = plt.subplots(figsize=(7.5, 4.4), dpi=80)
        series = defaultdict(dict)  # (algo, place) -> size -> row; a later file's row replaces an earlier one
        for r in rs:
            series[(r["algo"], r["place"])][r["size_bytes"]] = r
        # The selector's choice per (size, place): the `chosen` column (what `automatic` runs for that call).
        choice = {(r["size_bytes"], r["place"]): r.get("chosen") or "" for r in rs if r.get("chosen")}
        chose = set()
        marked = set()
        for (a, place) in sorted(series, key=lambda k: (ALGOS.index(k[0]) if k[0] in ALGOS else 99, k[0], k[1])):
            pts = sorted(series[(a, place)].values(), key=lambda r: float(r["size_bytes"]))
            x = [float(r["size_bytes"]) for r in pts]
            y = [float(r["busbw_gbps"]) for r in pts]
            ax.plot(x, y, color=color(a), linestyle="-" if place == "out" else ":", marker="." if place == "out"
                    else None, label=f"{a} ({place} of place)" if place in ("in", "out") else f"{a} ({place})")
            for r, xi, yi in zip(pts, x, y):
                c = choice.get((r["size_bytes"], place), "")
                # Circle the chosen algorithm's own point, and every point of an automatic series.
                if c and (c == a or a == "automatic"):
                    ax.scatter([xi], [yi], s=52, facecolors="none", edgecolors=color(c), linewidths=1.8, zorder=3)
                    chose.add(c)
                    marked.add((r["size_bytes"], place))
        # Choices of algorithms not in these files: a triangle on the axis in the chosen colour.
        for (size, place), c in sorted(choice.items()):
            if (size, place) not in marked:
                ax.scatter([float(size)], [0], marker="^", s=30, color=color(c), zorder=3, clip_on=False)
                chose.add(c)
        for c in order(chose):  # legend entries for the selector's choices
            ax.scatter([], [], s=52, facecolors="none", edgecolors=color(c), linewidths=1.8,
                       label=f"selector chose {c}")
        size_axis(ax, [float(r["size_bytes"]) for r in rs])
        ax.set(xlabel="size (bytes)", ylabel="busbw (GB/s)",
               title=f"chorus_bench: {coll}, {n} ranks (threads), {typ} {op}")
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = os.path.join(out, f"bench_{coll}_n{n}{suffix}.png")
        fig.savefig(path)
        plt.close(fig)
        written.append(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", nargs="+", help="CSV files of chorus_sim, chorus_calibrate and chorus_bench")
    ap.add_argument("--out", default="docs/img", help="directory for the PNGs (default docs/img)")
    ap.add_argument("--suffix", default="", help="appended to the file names, before .png")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    by_kind = defaultdict(list)
    for path in args.csv:
        kind, rows = read(path)
        if not rows:
            print(f"plot_bench.py: {path}: no rows, skipped", file=sys.stderr)
            continue
        by_kind[kind].extend(rows)
    written = []
    if by_kind["sim"]:
        plot_sim(by_kind["sim"], args.out, args.suffix, written)
    if by_kind["validate"]:
        plot_validate(by_kind["validate"], args.out, args.suffix, written)
    if by_kind["calibration"]:
        plot_calibration(by_kind["calibration"], args.out, args.suffix, written)
    if by_kind["bench"]:
        plot_bench(by_kind["bench"], args.out, args.suffix, written)
    for p in written:
        print(f"wrote {p} ({os.path.getsize(p) // 1024} KiB)")


if __name__ == "__main__":
    main()
