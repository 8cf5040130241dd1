#!/usr/bin/python3
"""Plots busbw against message size from allreduce_bench CSV files.

    /usr/bin/python3 bench/plot_busbw.py bench_np2.csv [more.csv ...] -o busbw.png
"""
import argparse
import csv

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("csv", nargs="+")
    ap.add_argument("-o", "--output", default="busbw.png")
    args = ap.parse_args()
    fig, ax = plt.subplots(figsize=(8, 5))
    for path in args.csv:
        with open(path) as f:
            rows = list(csv.DictReader(f))
        if not rows:
            continue
        np_ = rows[0]["np"]
        x = [int(r["bytes"]) for r in rows]
        for key, label, style in (("mpi_busbw_gbs", "MPI_Allreduce", "o--"),
                                  ("hvl_busbw_gbs", "horovodlite", "s-"),
                                  ("hvl_fp16_busbw_gbs", "horovodlite fp16 (fp32 bytes)", "^-")):
            ax.plot(x, [float(r[key]) for r in rows], style, label=f"{label}, np={np_}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes of float32)")
    ax.set_ylabel("busbw (GB/s) = bytes/time * 2(n-1)/n")
    ax.set_title("allreduce busbw")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.output, dpi=120)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
