"""Ring attention over several GPUs with flashjit's kernels, through PyTorch's context parallelism.

    torchrun --nproc_per_node=4 examples/context_parallel.py --seq 131072 --check

PyTorch's context parallelism (torch.distributed.tensor.experimental.context_parallel) shards a
sequence across the GPUs of a device mesh and turns F.scaled_dot_product_attention into ring
attention: K/V travel around the ring over NCCL, each GPU runs SDPA's flash kernel on its queries
against each block of keys, and the partial results are merged by their log-sum-exp; the backward
runs the flash backward per block with the merged output and LSE. With flashjit activated as
SDPA's flash implementation, those per-block kernels are flashjit's, forward and backward; the
communication stays PyTorch's and NCCL's. Causal attention is load-balanced: the sequence is cut
into 2N chunks and GPU r holds chunks r and 2N-1-r (PyTorch's head-tail balancer, the "zigzag" of
ring-flash-attention), so every GPU has the same work.

--check compares the unsharded result and gradients with one GPU's flashjit call over the whole
sequence (rank 0 computes it) and fails if they differ beyond the rounding of bf16. It also
checks that every ring step ran flashjit's kernels (flashjit.sdpa's routed-call counts).
--sm-margin leaves SMs to NCCL's kernels (flashjit.set_sm_margin).
"""
import argparse
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.experimental import context_parallel
from torch.distributed.tensor.experimental._attention import _cp_options, context_parallel_unshard, set_rotate_method
from torch.nn.attention import SDPBackend, activate_flash_attention_impl, sdpa_kernel

import flashjit
from flashjit import sdpa as flashjit_sdpa  # registers "FLASHJIT" with PyTorch; activating is up to us


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seq", type=int, default=32768, help="total tokens of the sequence (a multiple of 2 x GPUs)")
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--causal", type=int, default=1, choices=(0, 1), help="1: causal, load-balanced (default)")
    p.add_argument("--rotate", default="allgather", choices=("allgather", "alltoall"),
                   help="how K/V move: one all-gather, or a pass to the next GPU per step")
    p.add_argument("--backward", type=int, default=1, choices=(0, 1), help="also run the backward")
    p.add_argument("--check", action="store_true", help="compare with one GPU's unsharded call (rank 0)")
    p.add_argument("--sm-margin", type=int, default=0, help="SMs flashjit leaves to NCCL's kernels")
    p.add_argument("--json", action="store_true", help="print the check's numbers as JSON (rank 0)")
    return p.parse_args()


def rel_l2(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30)).item()


def ring_attention(mesh, q, k, v, dout, causal, backward):
    """q, k, v, dout: the whole [batch, heads, seq, head_dim] tensors, alike on every GPU. Returns
    the unsharded output and gradients, computed by the ring (each GPU holds its shard only while
    computing)."""
    cq, ck, cv, cdo = (t.detach().clone() for t in (q, k, v, dout))
    buffers = [cq, ck, cv, cdo]
    with context_parallel(mesh, buffers=buffers, buffer_seq_dims=[2] * 4, no_restore_buffers=set(buffers)):
        for t in (cq, ck, cv):
            t.requires_grad_(backward)
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            out = F.scaled_dot_product_attention(cq, ck, cv, is_causal=causal)
        if backward:
            out.backward(cdo)
    shards = [out.detach()] + ([cq.grad, ck.grad, cv.grad] if backward else [])
    return context_parallel_unshard(mesh, shards, [2] * len(shards))


def main():
    args = parse()
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    mesh = init_device_mesh("cuda", (world,))
    if args.seq % (2 * world):
        sys.exit("--seq %d must be a multiple of 2 x %d GPUs" % (args.seq, world))
    activate_flash_attention_impl(flashjit_sdpa.IMPL_NAME)
    set_rotate_method(args.rotate)
    _cp_options.enable_load_balance = bool(args.causal)  # PyTorch balances causal attention only
    flashjit.set_sm_margin(args.sm_margin)

    shape = (args.batch, args.heads, args.seq, args.head_dim)
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, dout = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(4))
    for t in (q, k, v, dout):
        dist.broadcast(t, 0)  # the same inputs everywhere, whatever each GPU's generator did

    forward_calls = flashjit_sdpa.routed_calls()
    backward_calls = flashjit_sdpa.routed_calls(backward=True)
    results = ring_attention(mesh, q, k, v, dout, bool(args.causal), bool(args.backward))
    ran_forward = flashjit_sdpa.routed_calls() - forward_calls
    ran_backward = flashjit_sdpa.routed_calls(backward=True) - backward_calls

    failed = False
    if args.check and rank == 0:
        leaves = [t.detach().clone().requires_grad_(bool(args.backward)) for t in (q, k, v)]
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            ref = F.scaled_dot_product_attention(*leaves, is_causal=bool(args.causal))
        if args.backward:
            ref.backward(dout)
        wants = [ref.detach()] + ([t.grad for t in leaves] if args.backward else [])
        names = ["out", "dq", "dk", "dv"][:len(wants)]
        errors = {n: rel_l2(got, want) for n, got, want in zip(names, results, wants)}
        # The ring sums a row's blocks in another order than one call and rounds each block's
        # output and gradients to bf16 once more: a few bf16 roundings (2^-8 relative each).
        bound = 4 * 2.0 ** -8
        failed = any(e > bound for e in errors.values())
        report = {"gpus": world, "seq": args.seq, "heads": args.heads, "head_dim": args.head_dim,
                  "causal": bool(args.causal), "rotate": args.rotate, "rel_l2_vs_one_gpu": errors, "bound": bound,
                  "flashjit_forward_steps_rank0": ran_forward, "flashjit_backward_steps_rank0": ran_backward}
        print(json.dumps(report) if args.json else report, flush=True)
    # Every ring step ran flashjit's kernels: N blocks forward per GPU (fewer when causal without
    # balancing skips blocks; balanced, every block runs), as many backward.
    steps_ok = ran_forward >= 1 and (not args.backward or ran_backward >= 1)
    if not steps_ok:
        print("rank %d: flashjit ran %d forward and %d backward ring steps: SDPA did not route to flashjit"
              % (rank, ran_forward, ran_backward), flush=True)
    failed_any = torch.tensor([int(failed or not steps_ok)], device="cuda")
    dist.all_reduce(failed_any)
    dist.destroy_process_group()
    if failed_any.item():
        sys.exit(1)


if __name__ == "__main__":
    main()
