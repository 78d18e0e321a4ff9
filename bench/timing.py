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


def best_of_rounds(fns, warmup, reps, rounds=3):
    """Times each function `rounds` times, interleaved (A B A B), and keeps each one's best median:
    clock drift between the candidates then cancels instead of favouring one."""
    best = [math.inf] * len(fns)
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            best[i] = min(best[i], median_ms(fn, warmup, reps))
    return best


def median_of_rounds(fns, warmup, reps, rounds=3, calls=CALLS_PER_SAMPLE):
    """Times each function in `rounds` interleaved rounds (A B C A B C ...) and keeps the median of
    each one's round medians: a peer's slow round (clock or L2 state drifting between cells) then
    counts neither for it nor against the others, and no one keeps a lucky best."""
    per = [[] for _ in fns]
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            per[i].append(median_ms(fn, warmup, reps, calls))
    return [sorted(t)[len(t) // 2] for t in per]
