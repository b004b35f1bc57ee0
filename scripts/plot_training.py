#!/usr/bin/python3
"""Plots the CSVs of examples/data_parallel_training (as written by
scripts/training_sweep.sh) and prints a summary table in Markdown.

    /usr/bin/python3 scripts/plot_training.py CSV_DIR [--img DIR] [--ranks N] [--suffix S]

Writes to DIR (default docs/img), with S before ".png" (default none):
  training_curves.png      at N ranks (default: the most in the data), per mode:
                           training loss vs wall time, loss vs optimizer update,
                           test accuracy vs wall time; dashed: one rank slowed
  training_throughput.png  samples/s vs ranks per mode, with and without the slow
                           rank, and the fraction of throughput each mode keeps

Throughput is a run's final samples/s (all ranks' samples over the wall time),
the median over the repetitions of a configuration. The fraction kept with a
slow rank is the median over repetitions of (run with the slow rank) / (run
without), the two runs of a pair launched back to back: on a shared machine
what else runs changes from minute to minute, and a pair sees about the same.
The curves show the repetition with the median throughput.

Runs with Debian's python3-matplotlib (hence /usr/bin/python3).
"""

import argparse
import csv
import glob
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

MODES = ["sync", "hybrid", "async-fixed", "async-eager"]
COLORS = {"sync": "#1f77b4", "hybrid": "#2ca02c", "async-fixed": "#ff7f0e", "async-eager": "#d62728"}
LABELS = {
    "sync": "sync (buckets)",
    "hybrid": "hybrid (accumulation)",
    "async-fixed": "async, fixed delay",
    "async-eager": "async, eager",
}


def load(directory):
    runs = {}  # (mode, ranks, slow) -> list of runs (lists of row dicts)
    files = sorted(glob.glob(os.path.join(directory, "*.csv")))
    if not files:
        sys.exit(f"plot_training.py: no CSV files in {directory}")
    for path in files:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
        if not rows:
            continue
        r0 = rows[0]
        mode = r0["mode"] if r0["mode"] != "async" else f"async-{r0['policy']}"
        key = (mode, int(r0["ranks"]), int(r0["straggler_rank"]) >= 0)
        for r in rows:
            for k in ("epoch", "updates", "ranks"):
                r[k] = int(r[k])
            for k in ("samples", "time_s", "loss", "test_acc", "samples_per_s", "wait_s"):
                r[k] = float(r[k])
        runs.setdefault(key, []).append(rows)
    return runs


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def rate(rows):
    return rows[-1]["samples_per_s"]


def typical(run_list):
    """The repetition with the median final throughput (the lower middle one for an even count)."""
    ordered = sorted(run_list, key=rate)
    return ordered[(len(ordered) - 1) // 2]


def throughput(runs, key):
    return median([rate(r) for r in runs[key]])


def kept(runs, mode, n):
    """Median over repetitions of slow / not slow, paired by repetition."""
    a, b = runs.get((mode, n, False)), runs.get((mode, n, True))
    if not a or not b:
        return None
    pairs = [rate(s) / rate(f) for f, s in zip(a, b)]
    return median(pairs)


def plot_curves(runs, ranks, path):
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.9), dpi=80)
    for mode in MODES:
        for slow in (False, True):
            key = (mode, ranks, slow)
            if key not in runs:
                continue
            rows = typical(runs[key])
            style = dict(color=COLORS[mode], linestyle="--" if slow else "-", linewidth=1.6 if not slow else 1.2)
            label = LABELS[mode] + (", slow rank" if slow else "")
            t = [r["time_s"] for r in rows]
            axes[0].plot(t, [r["loss"] for r in rows], label=label, **style)
            axes[1].plot([r["updates"] for r in rows], [r["loss"] for r in rows], **style)
            axes[2].plot(t, [r["test_acc"] for r in rows], **style)
    axes[0].set(xlabel="wall time (s)", ylabel="training loss (rank 0)", yscale="log", title="loss vs wall time")
    axes[1].set(xlabel="optimizer update", ylabel="training loss (rank 0)", yscale="log", title="loss vs step")
    axes[2].set(xlabel="wall time (s)", ylabel="test accuracy", ylim=(0.5, 1.0), title="test accuracy vs wall time")
    for ax in axes:
        ax.grid(True, alpha=0.3)
    fig.suptitle(f"{ranks} ranks (threads backend); dashed: rank {ranks - 1} slowed 2x", fontsize=10)
    fig.legend(loc="lower center", ncol=4, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.1, 1, 0.95))
    fig.savefig(path)
    plt.close(fig)


def plot_throughput(runs, path):
    ranks_all = sorted({k[1] for k in runs})
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 3.9), dpi=80)
    width = 0.8 / len(MODES)
    for i, mode in enumerate(MODES):
        for slow in (False, True):
            xs = [n for n in ranks_all if (mode, n, slow) in runs]
            ys = [throughput(runs, (mode, n, slow)) for n in xs]
            if xs:
                ax.plot(xs, ys, marker="o", color=COLORS[mode], linestyle="--" if slow else "-",
                        label=LABELS[mode] + (", slow rank" if slow else ""))
        fractions = [kept(runs, mode, n) or 0.0 for n in ranks_all]
        xpos = [j + (i - (len(MODES) - 1) / 2) * width for j in range(len(ranks_all))]
        ax2.bar(xpos, fractions, width=width, color=COLORS[mode], label=LABELS[mode])
    ax.set(xlabel="ranks", ylabel="samples/s (median of runs)", title="throughput (dashed: last rank slowed 2x)",
           xticks=ranks_all)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    ax2.axhline(1.0, color="gray", linewidth=0.8)
    ax2.axhline(0.5, color="gray", linewidth=0.8, linestyle=":")
    ax2.set(xlabel="ranks", ylabel="with slow rank / without (median)", title="throughput kept with one rank slowed 2x",
            xticks=range(len(ranks_all)), xticklabels=[str(n) for n in ranks_all], ylim=(0, 1.3))
    ax2.grid(True, axis="y", alpha=0.3)
    ax2.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def summary(runs):
    print("| mode | ranks | slow rank | test accuracy | samples/s (median) | samples/s (each run) | kept (median) |")
    print("|---|---|---|---|---|---|---|")
    for n in sorted({k[1] for k in runs}):
        for mode in MODES:
            for slow in (False, True):
                key = (mode, n, slow)
                if key not in runs:
                    continue
                each = ", ".join(f"{rate(r):.0f}" for r in runs[key])
                accs = sorted({f"{r[-1]['test_acc']:.4f}" for r in runs[key]})
                k = kept(runs, mode, n) if slow else None
                print(f"| {mode} | {n} | {'2x' if slow else '-'} | {' / '.join(accs)} | "
                      f"{throughput(runs, key):.0f} | {each} | {'' if k is None else f'{k:.2f}'} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv_dir")
    ap.add_argument("--img", default="docs/img")
    ap.add_argument("--ranks", type=int, default=0, help="ranks for the curves (default: the most in the data)")
    ap.add_argument("--suffix", default="", help="appended to the file names, before .png")
    args = ap.parse_args()
    runs = load(args.csv_dir)
    ranks = args.ranks or max(k[1] for k in runs)
    os.makedirs(args.img, exist_ok=True)
    curves = os.path.join(args.img, f"training_curves{args.suffix}.png")
    throughput = os.path.join(args.img, f"training_throughput{args.suffix}.png")
    plot_curves(runs, ranks, curves)
    plot_throughput(runs, throughput)
    summary(runs)
    for p in (curves, throughput):
        print(f"wrote {p} ({os.path.getsize(p) // 1024} KiB)")


if __name__ == "__main__":
    main()
