"""The scaling table (and a plot) of bench/cp_scaling.py's JSON lines.

    python3 bench/cp_table.py one.jsonl two.jsonl four.jsonl [--plot scaling.png] [--json]

Per sequence length, mode and implementation: the time on 1, 2, 4 (8) GPUs and the efficiency
T1 / (N * TN) against the same implementation's one-GPU time (ideal = 1.0), and flashjit's speed
against PyTorch's own flash kernels on the same ring (aten time / flashjit time).
"""
import argparse
import json
from collections import defaultdict


def load(paths):
    rows = []
    for p in paths:
        with open(p) as f:
            rows += [json.loads(line) for line in f if line.strip()]
    # The last measurement of a cell wins (a rerun appends). One GPU runs no ring: no rotate.
    cells = {}
    for r in rows:
        cells[(r["seq"], r["mode"], r["impl"], r["gpus"], r["rotate"] if r["gpus"] > 1 else "-")] = r
    return cells


def table(cells):
    out = []
    for (seq, mode, impl, gpus, rotate), r in sorted(cells.items()):
        if gpus == 1:
            continue
        one = cells.get((seq, mode, impl, 1, "-"))
        other = cells.get((seq, mode, "aten" if impl == "flashjit" else "flashjit", gpus, rotate))
        t = r["seconds"]
        out.append({"seq": seq, "mode": mode, "impl": impl, "gpus": gpus, "rotate": rotate, "seconds": t,
                    "one_gpu_seconds": one["seconds"] if one else None,
                    "efficiency": one["seconds"] / (gpus * t) if one else None,
                    "aten_over_flashjit": (other["seconds"] / t) if other and impl == "flashjit" else None})
    return out


def markdown(rows):
    lines = ["| tokens | mode | impl | GPUs | K/V rotation | time s | 1-GPU s | efficiency | aten/flashjit |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        eff = "%.1f%%" % (100 * r["efficiency"]) if r["efficiency"] else "-"
        ratio = "%.3f" % r["aten_over_flashjit"] if r["aten_over_flashjit"] else ""
        one = "%.3f" % r["one_gpu_seconds"] if r["one_gpu_seconds"] else "-"
        lines.append("| %dk | %s | %s | %d | %s | %.3f | %s | %s | %s |" % (
            r["seq"] // 1024, r["mode"], r["impl"], r["gpus"], r["rotate"], r["seconds"], one, eff, ratio))
    return "\n".join(lines)


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, mode in zip(axes, ("fwd", "fwd_bwd")):
        for key in sorted({(r["seq"], r["impl"], r["rotate"]) for r in rows if r["mode"] == mode}):
            pts = sorted((r["gpus"], r["efficiency"]) for r in rows
                         if r["mode"] == mode and (r["seq"], r["impl"], r["rotate"]) == key and r["efficiency"])
            if pts:
                ax.plot([1] + [p[0] for p in pts], [100] + [100 * p[1] for p in pts], marker="o",
                        linestyle="-" if key[1] == "flashjit" else "--",
                        label="%s %dk %s" % (key[1], key[0] // 1024, key[2]))
        ax.axhline(100, color="grey", linewidth=0.5)
        ax.set_title("ring attention, %s" % mode.replace("_", " + "))
        ax.set_xlabel("GPUs")
        ax.set_xticks(sorted({r["gpus"] for r in rows}))
    axes[0].set_ylabel("efficiency, % of ideal (T1 / N)")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="+")
    p.add_argument("--plot", default=None, help="write a PNG of efficiency against GPUs")
    p.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")
    args = p.parse_args()
    rows = table(load(args.files))
    print(json.dumps(rows, indent=1) if args.json else markdown(rows))
    if args.plot:
        plot(rows, args.plot)


if __name__ == "__main__":
    main()
