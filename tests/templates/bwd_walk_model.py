#!/usr/bin/env python3
"""A float64 CPU model of bwd_sm80's algorithm (not its fragments) against finite differences.

The kernels cannot run on a GPU here (tests/templates/bwd_emulate.py runs them, fragments and
all, on the CPU); this checks the algorithm above the tensor-core products (bwd_sm80/gemm.cuh):
the K/V block's walk over Q blocks (tile_walk.cuh's query_range), the masking of warp tiles that
an edge crosses (rows past the end unmasked, their LSE read as +inf), P from the forward's LSE (an
empty row's -inf read as +inf), D = rowsum(dO * O), where the softmax scale enters dQ and dK,
and the atomics' sum over K/V blocks. Block sizes are small so odd shapes cross every edge.
Pure Python (no numpy on the CI image): a few seconds.
"""
import math
import random
import sys

NEG_INF, POS_INF = float("-inf"), float("inf")


def visible(i, j, sq, sk, causal):
    """row_key_bounds: query i sees key j (bottom-right causal diagonal)."""
    return j < sk and (not causal or j <= i + sk - sq)


def forward(q, k, v, scale, causal):
    sq, sk = len(q), len(k)
    o, lse = [], []
    for i in range(sq):
        s = [scale * sum(a * b for a, b in zip(q[i], k[j])) if visible(i, j, sq, sk, causal) else NEG_INF
             for j in range(sk)]
        m = max(s)
        if m == NEG_INF:  # a row that sees no key: zeros and LSE -inf, as the forward writes them
            o.append([0.0] * len(v[0]))
            lse.append(NEG_INF)
            continue
        e = [math.exp(x - m) for x in s]
        z = sum(e)
        o.append([sum(e[j] * v[j][d] for j in range(sk)) / z for d in range(len(v[0]))])
        lse.append(m + math.log(z))
    return o, lse


def backward_model(q, k, v, o, lse, do, scale, causal, block_m, block_n, warp_rows, warp_keys):
    """The three kernels' arithmetic, in their loop order. The mask is decided per warp tile of
    warp_rows x warp_keys scores (tile_walk.cuh's tile_needs_mask): only keys past the end and
    the causal diagonal count; rows past the end are not masked but read LSE as +inf."""
    sq, sk, dqk, dv_dim = len(q), len(k), len(q[0]), len(v[0])
    offset = sk - sq
    sq_rounded = (sq + block_m - 1) // block_m * block_m
    # preprocess
    dpsum = [sum(a * b for a, b in zip(o[i], do[i])) if i < sq else 0.0 for i in range(sq_rounded)]
    dq_accum = [[0.0] * dqk for _ in range(sq_rounded)]
    dk = [[0.0] * dqk for _ in range(sk)]
    dv = [[0.0] * dv_dim for _ in range(sk)]
    # main: one "CTA" per K/V block
    for n0 in range(0, sk, block_n):
        lo, hi = 0, sq
        if causal:
            lo = max(0, n0 - offset)
        hi = max(hi, lo)
        for m_block in range(lo // block_m, (hi + block_m - 1) // block_m):
            m0 = m_block * block_m
            ds = {}
            for r0 in range(m0, m0 + block_m, warp_rows):  # the warp tiles of S and dP
                for k0 in range(n0, n0 + block_n, warp_keys):
                    needs_mask = k0 + warp_keys > sk or (causal and k0 + warp_keys - 1 > r0 + offset)
                    for j in range(k0, k0 + warp_keys):
                        for i in range(r0, r0 + warp_rows):
                            qi = q[i] if i < sq else [0.0] * dqk  # rows past the end load as zeros
                            kj = k[j] if j < sk else [0.0] * dqk
                            s = sum(a * b for a, b in zip(kj, qi))
                            if needs_mask and not visible(i, j, sq, sk, causal):
                                s = NEG_INF
                            l = lse[i] if i < sq else POS_INF
                            l = POS_INF if l == NEG_INF else l
                            p = math.exp(s * scale - l)  # IEEE as exp2 on the GPU: -inf - (-inf) would be NaN
                            doi = do[i] if i < sq else [0.0] * dv_dim
                            vj = v[j] if j < sk else [0.0] * dv_dim
                            dp = sum(a * b for a, b in zip(vj, doi))
                            d = p * (dp - dpsum[i])
                            ds[i, j] = d
                            if j < sk:
                                for c in range(dv_dim):
                                    dv[j][c] += p * doi[c]
                                for c in range(dqk):
                                    dk[j][c] += d * qi[c]
            for i in range(m0, m0 + block_m):  # every row of the block: rows past the end add zeros
                for c in range(dqk):
                    dq_accum[i][c] += scale * sum(ds[i, j] * (k[j][c] if j < sk else 0.0)
                                                  for j in range(n0, n0 + block_n))
    dk = [[scale * x for x in row] for row in dk]
    return dq_accum[:sq], dk, dv  # convert: the first sq rows


def finite_difference(q, k, v, do, scale, causal, h=1e-6):
    def loss():
        o, _ = forward(q, k, v, scale, causal)
        return sum(a * b for ro, rd in zip(o, do) for a, b in zip(ro, rd))
    grads = []
    for t in (q, k, v):
        g = [[0.0] * len(t[0]) for _ in t]
        for r in range(len(t)):
            for c in range(len(t[0])):
                keep = t[r][c]
                t[r][c] = keep + h
                up = loss()
                t[r][c] = keep - h
                down = loss()
                t[r][c] = keep
                g[r][c] = (up - down) / (2 * h)
        grads.append(g)
    return grads


def main():
    rng = random.Random(24)
    worst = 0.0
    cases = [(13, 13, False), (13, 13, True), (21, 9, True), (9, 21, True), (17, 5, False), (5, 19, True)]
    for sq, sk, causal in cases:
        dqk, dv_dim, scale = 3, 5, 0.7  # Dqk != Dv on purpose
        rnd = lambda rows, cols: [[rng.gauss(0, 1) for _ in range(cols)] for _ in range(rows)]
        q, k, v, do = rnd(sq, dqk), rnd(sk, dqk), rnd(sk, dv_dim), rnd(sq, dv_dim)
        o, lse = forward(q, k, v, scale, causal)
        ref = finite_difference(q, k, v, do, scale, causal)
        for block_m, block_n, warp_rows, warp_keys in ((4, 4, 4, 4), (8, 4, 4, 2), (4, 8, 2, 4), (8, 8, 4, 4)):
            got = backward_model(q, k, v, o, lse, do, scale, causal, block_m, block_n, warp_rows, warp_keys)
            # A NaN compares false with everything, so max() would skip it: count it as infinite.
            err = max(abs(a - b) if a == a else POS_INF
                      for g, r in zip(got, ref) for rg, rr in zip(g, r) for a, b in zip(rg, rr))
            worst = max(worst, err)
            print("Sq %2d Sk %2d causal %-5s blocks %dx%d, warp tiles %dx%d: max |model - finite difference| %.2e"
                  % (sq, sk, causal, block_m, block_n, warp_rows, warp_keys, err))
    print("worst %.2e" % worst)
    return 0 if worst < 1e-6 else 1


if __name__ == "__main__":
    sys.exit(main())
