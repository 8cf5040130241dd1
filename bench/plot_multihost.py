#!/usr/bin/python3
"""Medians of bench/multihost_bench.sh's runs: OUT/multihost_busbw.csv, a plot
OUT/multihost_busbw.png (busbw against size per topology: MPI_Allreduce,
horovodlite fp32 and fp16), and the figures at 64 MiB and 4 KiB on stdout.

    /usr/bin/python3 bench/plot_multihost.py OUT
"""
import csv
import glob
import os
import re
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLUMNS = ("mpi_busbw_gbs", "hvl_busbw_gbs", "hvl_fp16_busbw_gbs")
LATENCY = re.compile(r"latency 4 KiB: MPI_Allreduce ([0-9.]+) us; horovodlite ([0-9.]+) us")


def main():
    out = sys.argv[1]
    runs = {}  # topology -> bytes -> column -> [values]
    latency = {}  # topology -> ([mpi], [hvl])
    for path in sorted(glob.glob(os.path.join(out, "runs", "*.csv"))):
        topo = os.path.basename(path).rsplit("_", 1)[0]
        with open(path) as f:
            for row in csv.DictReader(f):
                cell = runs.setdefault(topo, {}).setdefault(int(row["bytes"]), {c: [] for c in COLUMNS})
                for c in COLUMNS:
                    cell[c].append(float(row[c]))
        with open(path[:-4] + ".log") as f:
            m = LATENCY.search(f.read())
        if m:
            lat = latency.setdefault(topo, ([], []))
            lat[0].append(float(m.group(1)))
            lat[1].append(float(m.group(2)))
    with open(os.path.join(out, "multihost_busbw.csv"), "w") as f:
        w = csv.writer(f)
        w.writerow(["topology", "bytes", "runs"] + ["median_" + c for c in COLUMNS])
        for topo in sorted(runs):
            for b in sorted(runs[topo]):
                cell = runs[topo][b]
                w.writerow([topo, b, len(cell[COLUMNS[0]])] + ["%.4f" % statistics.median(cell[c]) for c in COLUMNS])
    fig, axes = plt.subplots(1, len(runs), figsize=(4.2 * len(runs), 4), sharey=True)
    for ax, topo in zip(axes, sorted(runs)):
        sizes = sorted(runs[topo])
        for c, label, style in zip(COLUMNS, ("MPI_Allreduce", "horovodlite", "horovodlite fp16 (fp32 bytes)"),
                                   ("o--", "s-", "^-")):
            ax.plot(sizes, [statistics.median(runs[topo][b][c]) for b in sizes], style, label=label)
        ax.set_xscale("log", base=2)
        ax.set_title(topo.replace("_flat", " flat ring") + " hosts x ranks")
        ax.set_xlabel("bytes")
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("busbw (GB/s), median")
    axes[0].legend(fontsize=8)
    fig.suptitle("allreduce across simulated hosts, links shaped to 2 Gbit/s (0.25 GB/s)")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "multihost_busbw.png"), dpi=100)
    big = 64 << 20
    print("%-9s %5s %10s %10s %10s %9s %9s" % ("topology", "runs", "mpi", "hvl", "hvl_fp16", "hvl/mpi", "fp16/hvl"))
    for topo in sorted(runs):
        if big not in runs[topo]:
            continue
        m, h, h16 = (statistics.median(runs[topo][big][c]) for c in COLUMNS)
        print("%-9s %5d %10.3f %10.3f %10.3f %9.2f %9.2f" % (topo, len(runs[topo][big][COLUMNS[0]]), m, h, h16,
                                                            h / m, h16 / h))
    print("(busbw GB/s at 64 MiB, medians)")
    for topo in sorted(latency):
        mpi, hvl = latency[topo]
        print("%-9s latency 4 KiB: MPI_Allreduce %.1f us, horovodlite %.1f us (medians of %d)"
              % (topo, statistics.median(mpi), statistics.median(hvl), len(mpi)))


if __name__ == "__main__":
    main()
