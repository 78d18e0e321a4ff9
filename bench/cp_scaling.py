"""Scaling of ring attention (PyTorch's context parallelism) with flashjit's kernels against the same
ring with PyTorch's own flash kernels (issue 27).

    torchrun --nproc_per_node=1 bench/cp_scaling.py --out one.jsonl    # the one-GPU baseline
    torchrun --nproc_per_node=4 bench/cp_scaling.py --out four.jsonl   # the ring on 4 GPUs
    python3 bench/cp_table.py one.jsonl two.jsonl four.jsonl            # efficiency table and plot

On one GPU it times plain F.scaled_dot_product_attention over the whole sequence (no ring): the
ideal N-GPU time is that over N, and a ring's efficiency is T1 / (N * TN), each implementation
against its own one-GPU time. On N GPUs it times the ring: causal attention, load-balanced
(head-tail shards), K/V all-gathered (PyTorch's default) or passed around (--rotate alltoall).

Timing: CUDA events around each call on every GPU after a barrier, the slowest GPU's time per
round (a ring step waits for the slowest), rounds in A B B A order of the implementations, the
median over rounds. Inside one context_parallel: the inputs are sharded once, untimed, as a model
shards its token ids once and computes q, k, v on each GPU. Forward alone, and forward plus backward. Inputs: bf16 random normal,
[batch, heads, seq, head_dim], the same on every GPU. Each result is one JSON line (rank 0).
"""
import argparse
import json
import os
import statistics
import time
import warnings

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.experimental import context_parallel
from torch.distributed.tensor.experimental._attention import _cp_options, set_rotate_method
from torch.nn.attention import SDPBackend, activate_flash_attention_impl, restore_flash_attention_impl, sdpa_kernel

import flashjit
from flashjit import sdpa as flashjit_sdpa


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seqs", default="131072,524288", help="total tokens, comma-separated")
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--impls", default="flashjit,aten", help="flashjit and/or aten (PyTorch's flash kernels)")
    p.add_argument("--modes", default="fwd,fwd_bwd")
    p.add_argument("--rounds", type=int, default=4, help="A B B A rounds (a multiple of 2)")
    p.add_argument("--rotate", default="allgather", choices=("allgather", "alltoall"))
    p.add_argument("--sm-margin", type=int, default=0, help="SMs flashjit leaves to NCCL (flashjit.set_sm_margin)")
    p.add_argument("--out", default=None, help="append JSON lines here (rank 0); default: stdout only")
    return p.parse_args()


def use(impl):
    """SDPA's flash kernels: flashjit's or aten's own. Every graph recorded through flashjit has been
    backpropagated when this switches, so aten gets its own backward back too."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the dispatcher's override notes, restore's route note
        if impl == "flashjit":
            activate_flash_attention_impl(flashjit_sdpa.IMPL_NAME)
        else:
            restore_flash_attention_impl()
            flashjit_sdpa.release_backward_route()


def one_call(q, k, v, dout, mode):
    """One attention call, forward or forward + backward: plain SDPA on one GPU, the ring inside
    context_parallel (q, k, v, dout are then this GPU's shards, F.scaled_dot_product_attention the
    context's ring)."""
    backward = mode == "fwd_bwd"
    with torch.set_grad_enabled(backward), sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    if backward:
        out.backward(dout)
        for t in (q, k, v):
            t.grad = None


def timed(q, k, v, dout, mode):
    """Seconds of one call on the slowest GPU (a ring waits for its slowest member), from a barrier.
    Sharding the inputs is not timed: a model shards its token ids once and makes q, k, v locally."""
    dist.barrier()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    one_call(q, k, v, dout, mode)
    stop.record()
    torch.cuda.synchronize()
    t = torch.tensor([start.elapsed_time(stop) / 1e3], device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def measure(q, k, v, dout, args, impls, order, world, seq):
    """Every mode and implementation on these (sharded or whole) inputs; JSON rows on rank 0."""
    for t in (q, k, v):
        t.requires_grad_(True)
    for mode in args.modes.split(","):
        for impl in impls:  # warm: compile, NCCL's communicators, allocator pools
            use(impl)
            timed(q, k, v, dout, mode)
        times = {impl: [] for impl in impls}
        wall = time.time()
        for impl in order:
            use(impl)
            times[impl].append(timed(q, k, v, dout, mode))
        if dist.get_rank() == 0:
            for impl in impls:
                med = statistics.median(times[impl])
                row = {"gpus": world, "seq": seq, "heads": args.heads, "head_dim": args.head_dim, "mode": mode,
                       "impl": impl, "rotate": args.rotate, "sm_margin": args.sm_margin, "seconds": med,
                       "rounds": times[impl], "tflops_per_gpu": flops(1, args.heads, seq, args.head_dim, mode)
                       / med / world / 1e12, "device": torch.cuda.get_device_name(), "wall_s": time.time() - wall}
                print(json.dumps(row), flush=True)
                if args.out:
                    with open(args.out, "a") as f:
                        f.write(json.dumps(row) + "\n")


def flops(b, h, s, d, mode):
    """Causal attention's useful FLOPs: half of 4 * b * h * s^2 * d forward; backward 2.5 times that."""
    fwd = 4 * b * h * s * s * d / 2
    return fwd * (3.5 if mode == "fwd_bwd" else 1.0)


def main():
    args = parse()
    # torchrun's process group and the one-dimensional mesh, as examples/context_parallel.py sets them
    # up: written out in both, since the example is meant to be read (and copied) as one file.
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    mesh = init_device_mesh("cuda", (world,))
    set_rotate_method(args.rotate)
    _cp_options.enable_load_balance = True
    flashjit.set_sm_margin(args.sm_margin)
    impls = args.impls.split(",")
    # A B B A: rounds 0 and 3 (mod 4) take impls[0], rounds 1 and 2 the last one.
    order = [impls[0] if r % 4 in (0, 3) else impls[-1] for r in range(args.rounds)]
    for seq in (int(s) for s in args.seqs.split(",")):
        shape = (1, args.heads, seq, args.head_dim)
        gen = torch.Generator(device="cuda").manual_seed(seq)
        q, k, v, dout = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(4))
        for t in (q, k, v, dout):
            dist.broadcast(t, 0)
        if world == 1:
            measure(q, k, v, dout, args, impls, order, world, seq)
        else:  # the context shards the buffers in place (head-tail order) and rings SDPA inside it
            with context_parallel(mesh, buffers=[q, k, v, dout], buffer_seq_dims=[2] * 4,
                                  no_restore_buffers={q, k, v, dout}):
                measure(q, k, v, dout, args, impls, order, world, seq)
        del q, k, v, dout
        torch.cuda.empty_cache()
    use("aten")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
