"""How the benchmark scripts time GPU work: CUDA events around several back-to-back calls (the
host's launch latency, ~10 us for a ctypes call, then overlaps the GPU's work instead of adding
to a short kernel's time), after a warm-up, the median of the samples."""
import math

import torch

CALLS_PER_SAMPLE = 8


def median_ms(fn, warmup, reps, calls=CALLS_PER_SAMPLE):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(calls):
            fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / calls)
    times.sort()
    return times[len(times) // 2]


def round_medians(fns, warmup, reps, rounds=3, calls=CALLS_PER_SAMPLE):
    """Each function's median in each of `rounds` interleaved rounds, so clock drift between the
    candidates falls on all of them instead of favouring one. Round r starts at candidate r (A B C,
    B C A, C A B, ...): a power-capped clock carries over from one candidate to the next, and in a
    fixed order the one after the lightest load always started with the clock's headroom."""
    per = [[] for _ in fns]
    for r in range(rounds):
        for j in range(len(fns)):
            i = (r + j) % len(fns)
            per[i].append(median_ms(fns[i], warmup, reps, calls))
    return per


def best_of_rounds(fns, warmup, reps, rounds=3):
    """Each function's best round median."""
    return [min(t) for t in round_medians(fns, warmup, reps, rounds)]


def median_of_rounds(fns, warmup, reps, rounds=3, calls=CALLS_PER_SAMPLE):
    """Each function's median round: a peer's slow round counts neither for it nor against the
    others, and no one keeps a lucky best."""
    return [sorted(t)[len(t) // 2] for t in round_medians(fns, warmup, reps, rounds, calls)]
