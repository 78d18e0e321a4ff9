#!/usr/bin/env python3
"""Two kernels' ncu source pages side by side, summed by SASS opcode: instructions executed,
stall samples by reason, and shared-memory wavefronts against their ideal (bank conflicts).

    python3 bench/ncu_sass_summary.py A.sass.csv B.sass.csv [--top 28]

The inputs are `ncu -i REP --page source --csv --print-source sass` (bench/device_bwd_ncu_full.sh
writes them). Each cell prints A/B; executed instructions and wavefronts in thousands."""
import argparse
import collections
import csv
import re

STALLS = ("stall_math", "stall_mio", "stall_short_sb", "stall_wait", "stall_barrier", "stall_long_sb",
          "stall_not_selected")
COLUMNS = ("exec", "samples") + STALLS + ("wavefronts", "wavefronts_ideal")
IN_THOUSANDS = ("exec", "wavefronts", "wavefronts_ideal")


def by_opcode(path):
    rows = list(csv.reader(open(path)))
    header = rows[1]  # rows[0] names the kernel
    col = {name: i for i, name in enumerate(header)}
    ops = collections.defaultdict(collections.Counter)
    for row in rows[2:]:
        if len(row) < len(header):
            continue
        m = re.match(r"(@!?U?P\w+\s+)?([A-Z0-9_]+)", row[col["Source"]].strip())
        if not m:
            continue
        c = ops[m.group(2)]
        c["exec"] += int(row[col["Instructions Executed"]] or 0)
        c["samples"] += int(row[col["# Samples"]] or 0)
        for s in STALLS:
            c[s] += int(row[col[s]] or 0)
        c["wavefronts"] += int(row[col["L1 Wavefronts Shared"]] or 0)
        c["wavefronts_ideal"] += int(row[col["L1 Wavefronts Shared Ideal"]] or 0)
    return ops


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--top", type=int, default=28, help="opcodes shown, most stall samples first")
    args = p.parse_args()
    a, b = by_opcode(args.a), by_opcode(args.b)
    total = lambda ops, key: sum(c[key] for c in ops.values())
    print("samples %d / %d, instructions %d / %d" % (total(a, "samples"), total(b, "samples"), total(a, "exec"),
                                                     total(b, "exec")))
    print("%-10s" % "opcode" + "".join("%22s" % c[:14] for c in COLUMNS))
    for op in sorted(set(a) | set(b), key=lambda o: -(a[o]["samples"] + b[o]["samples"]))[:args.top]:
        cells = []
        for c in COLUMNS:
            div = 1000 if c in IN_THOUSANDS else 1
            cells.append("%11d/%-10d" % (a[op][c] // div, b[op][c] // div))
        print("%-10s" % op + "".join(cells))


if __name__ == "__main__":
    main()
