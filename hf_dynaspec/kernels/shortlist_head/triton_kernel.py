"""Triton kernel of the shortlisted LM head: block-selected GEMV/GEMM fused with argmax, max and sum-exp.

The head is permuted so that every cluster is a contiguous block of rows; a shortlist is a list of row
blocks. The launcher cuts the blocks into tiles of `BLOCK_N` rows (the last tile of a block is partial and
masked, so blocks need not be multiples of anything) and launches one program per tile. Each program reads
its rows once, multiplies them with all `B` hidden states (fp32 accumulation), writes the tile's scores into
the shortlist-local output and reduces the tile to (max, argmax, sum of exp(score - max)) per batch row.
Combining the per-tile partials (a few hundred numbers) gives the shortlist's argmax and log-sum-exp, which
is what greedy drafting and a softmax over the shortlist need; top-k is `scores.topk` on the output.

Import this module only when Triton can run: on a CUDA device, or on CPU under `TRITON_INTERPRET=1` set
before the import (see `hf_dynaspec.kernels.triton_available`).
"""

from __future__ import annotations


import torch

from hf_dynaspec.kernels.shortlist_head.output import ShortlistHeadOutput
import triton
import triton.language as tl

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


@triton.jit
def _shortlist_head_kernel(
    hidden_ptr, weight_ptr, scores_ptr, tile_max_ptr, tile_arg_ptr, tile_sumexp_ptr,
    tile_row_ptr, tile_end_ptr, tile_out_ptr,
    batch, dim, num_tiles, stride_hidden, stride_weight, stride_scores,
    BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    tile = tl.program_id(0)
    row_start = tl.load(tile_row_ptr + tile)
    row_end = tl.load(tile_end_ptr + tile)
    out_start = tl.load(tile_out_ptr + tile)
    offs_b = tl.arange(0, BLOCK_B)
    offs_n = tl.arange(0, BLOCK_N)
    rows = row_start + offs_n
    row_ok = rows < row_end  # the last tile of a block is partial: never read past the block
    b_ok = offs_b < batch
    acc = tl.zeros((BLOCK_B, BLOCK_N), dtype=tl.float32)
    for d0 in range(0, dim, BLOCK_D):
        offs_d = d0 + tl.arange(0, BLOCK_D)
        d_ok = offs_d < dim
        # Loads are cast to fp32 before any arithmetic: fp32 accumulation on GPU, and the Triton interpreter
        # computes bf16 arithmetic wrongly, so bf16 must never reach an operation there.
        h = tl.load(hidden_ptr + offs_b[:, None] * stride_hidden + offs_d[None, :],
                    mask=b_ok[:, None] & d_ok[None, :], other=0.0).to(tl.float32)
        w = tl.load(weight_ptr + rows[:, None].to(tl.int64) * stride_weight + offs_d[None, :],
                    mask=row_ok[:, None] & d_ok[None, :], other=0.0).to(tl.float32)
        acc += tl.dot(h, tl.trans(w), input_precision="ieee")
    acc = tl.where(row_ok[None, :], acc, float("-inf"))
    columns = out_start + offs_n
    tl.store(scores_ptr + offs_b[:, None] * stride_scores + columns[None, :], acc,
             mask=b_ok[:, None] & row_ok[None, :])
    tile_max = tl.max(acc, axis=1)
    tile_arg = tl.argmax(acc, axis=1, tie_break_left=True)
    tile_sumexp = tl.sum(tl.exp(acc - tile_max[:, None]), axis=1)
    partial = offs_b * num_tiles + tile
    tl.store(tile_max_ptr + partial, tile_max, mask=b_ok)
    tl.store(tile_arg_ptr + partial, out_start + tile_arg, mask=b_ok)
    tl.store(tile_sumexp_ptr + partial, tile_sumexp, mask=b_ok)


def _tiles(block_starts: torch.Tensor, block_ends: torch.Tensor, block_n: int):
    """Per tile: first row, end of its block, and first output column; `[num_tiles]` int64 each."""
    sizes = block_ends - block_starts
    per_block = (sizes + block_n - 1) // block_n
    block_of_tile = torch.repeat_interleave(torch.arange(len(sizes), device=sizes.device), per_block)
    first_tile = torch.cumsum(per_block, 0) - per_block
    within = torch.arange(len(block_of_tile), device=sizes.device) - first_tile[block_of_tile]
    out_offsets = torch.cumsum(sizes, 0) - sizes
    rows = block_starts[block_of_tile] + within * block_n
    return rows, block_ends[block_of_tile], out_offsets[block_of_tile] + within * block_n


def _validate(hidden, weight, block_starts, block_ends, token_order):
    if hidden.dim() != 2 or weight.dim() != 2:
        raise ValueError(f"hidden must be [B, D] and weight [V, D]; got {tuple(hidden.shape)} and {tuple(weight.shape)}")
    if hidden.shape[1] != weight.shape[1]:
        raise ValueError(f"hidden size {hidden.shape[1]} does not match the head's {weight.shape[1]}")
    for name, tensor in (("hidden", hidden), ("weight", weight)):
        if tensor.dtype not in SUPPORTED_DTYPES:
            raise ValueError(f"{name} dtype {tensor.dtype} is not supported (fp16, bf16 or fp32)")
        if tensor.stride(1) != 1:
            raise ValueError(f"{name} must be contiguous in its last dimension; call .contiguous()")
    if token_order.shape != (weight.shape[0],):
        raise ValueError(f"token_order must be [V] = [{weight.shape[0]}]; got {tuple(token_order.shape)}")
    if len(block_starts) != len(block_ends) or len(block_starts) == 0:
        raise ValueError("block_starts and block_ends must be non-empty and of the same length")
    if bool((block_starts >= block_ends).any()) or int(block_starts.min()) < 0 or int(block_ends.max()) > weight.shape[0]:
        raise ValueError(f"every block must satisfy 0 <= start < end <= V = {weight.shape[0]}")
    devices = {hidden.device, weight.device, token_order.device}
    if len(devices) != 1:
        raise ValueError(f"hidden, weight and token_order must be on one device; got {sorted(map(str, devices))}")


def shortlist_head_triton(
    hidden: torch.Tensor, permuted_weight: torch.Tensor, block_starts, block_ends, token_order: torch.Tensor,
    *, block_n: int = 64, block_d: int = 64,
) -> ShortlistHeadOutput:
    """hidden `[B, D]`, permuted_weight `[V, D]`, blocks `[start, end)` of rows (lists or 1-D tensors),
    token_order `[V]` -> scores, ids and the fused reductions (see `ShortlistHeadOutput`)."""
    device = hidden.device
    starts = torch.as_tensor(block_starts, dtype=torch.int64, device=device)
    ends = torch.as_tensor(block_ends, dtype=torch.int64, device=device)
    _validate(hidden, permuted_weight, starts, ends, token_order)
    batch, dim = hidden.shape
    tile_rows, tile_ends, tile_out = _tiles(starts, ends, block_n)
    num_tiles = len(tile_rows)
    size = int((ends - starts).sum())
    scores = torch.empty(batch, size, dtype=torch.float32, device=device)
    tile_max = torch.empty(batch, num_tiles, dtype=torch.float32, device=device)
    tile_arg = torch.empty(batch, num_tiles, dtype=torch.int64, device=device)
    tile_sumexp = torch.empty(batch, num_tiles, dtype=torch.float32, device=device)
    _shortlist_head_kernel[(num_tiles,)](
        hidden, permuted_weight, scores, tile_max, tile_arg, tile_sumexp, tile_rows, tile_ends, tile_out,
        batch, dim, num_tiles, hidden.stride(0), permuted_weight.stride(0), scores.stride(0),
        BLOCK_B=max(16, triton.next_power_of_2(batch)), BLOCK_N=block_n, BLOCK_D=block_d,
    )
    best_tile = tile_max.argmax(-1)  # first tile holding the maximum: the first column on ties overall
    best = tile_max.gather(-1, best_tile[:, None])[:, 0]
    logsumexp = best + torch.log((tile_sumexp * torch.exp(tile_max - best[:, None])).sum(-1))
    ids = torch.cat([token_order[a:b] for a, b in zip(starts.tolist(), ends.tolist())])
    return ShortlistHeadOutput(scores, ids, tile_arg.gather(-1, best_tile[:, None])[:, 0], best, logsumexp)
