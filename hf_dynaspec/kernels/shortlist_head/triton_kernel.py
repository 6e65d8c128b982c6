"""Triton kernel of the shortlisted LM head: rows read through an index, fused with argmax, max and sum-exp.

The shortlist arrives as `row_ids` `[S]`: the head rows to score, column by column, with -1 for padding
columns (a cluster shortlist is a padded table of per-cluster rows indexed by the router's top-k, so its shape
never depends on the data and nothing is read back to the host). There is no permuted copy of the head: every
program gathers its `BLOCK_N` rows straight from the target's head (each row is contiguous, so the loads stay
coalesced along D).

Per tile of `BLOCK_N` columns a program multiplies its rows with all `B` hidden states, writes the scores
(-inf in padding columns) and reduces the tile to (max, argmax, sum of exp(score - max)) per batch row; a
second kernel, one program per batch row, combines the few hundred partials into the shortlist's argmax, max
and log-sum-exp (two launches per head call in all).

- batch 1 (chain drafting): a GEMV path, no padding of the batch to 16 rows;
- batch > 1 (tree frontiers): `tl.dot` in the weights' dtype with fp32 accumulation, i.e. tensor cores for
  fp16/bf16 on sm_80+; fp32 weights use an IEEE fp32 dot (no TF32: scores stay those of the reference);
- bf16 on cards without bf16 tensor cores (sm_75, T4) and everything under the Triton interpreter (which
  computes bf16 arithmetic wrongly) upcast to fp32 after the load: `launch_constants` decides, and the AOT
  compile test compiles exactly what it returns.

Import this module only when Triton can run: on a CUDA device, or on CPU under `TRITON_INTERPRET=1` set
before the import (see `hf_dynaspec.kernels.shortlist_head.triton_available`).
Legend: B batch, D hidden, V head rows, S shortlist columns (padding included).
"""

from __future__ import annotations

import contextlib
import functools
import os

import torch
import triton
import triton.language as tl

from hf_dynaspec.kernels.shortlist_head.output import ShortlistHeadOutput

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


@triton.jit
def _indexed_head_kernel(
    hidden_ptr, weight_ptr, row_ids_ptr, scores_ptr, tile_max_ptr, tile_arg_ptr, tile_sumexp_ptr,
    batch, dim, num_columns, num_tiles, stride_hidden, stride_weight, stride_scores,
    BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    USE_DOT: tl.constexpr, UPCAST: tl.constexpr, IEEE_DOT: tl.constexpr,
):
    tile = tl.program_id(0)
    columns = tile * BLOCK_N + tl.arange(0, BLOCK_N)
    column_ok = columns < num_columns
    rows = tl.load(row_ids_ptr + columns, mask=column_ok, other=-1)
    row_ok = rows >= 0  # padding columns read nothing
    offs_b = tl.arange(0, BLOCK_B)
    b_ok = offs_b < batch
    acc = tl.zeros((BLOCK_B, BLOCK_N), dtype=tl.float32)
    for d0 in range(0, dim, BLOCK_D):
        offs_d = d0 + tl.arange(0, BLOCK_D)
        d_ok = offs_d < dim
        h = tl.load(hidden_ptr + offs_b[:, None] * stride_hidden + offs_d[None, :],
                    mask=b_ok[:, None] & d_ok[None, :], other=0.0)
        w = tl.load(weight_ptr + rows[:, None].to(tl.int64) * stride_weight + offs_d[None, :],
                    mask=row_ok[:, None] & d_ok[None, :], other=0.0)
        if UPCAST:
            h = h.to(tl.float32)
            w = w.to(tl.float32)
        if USE_DOT:
            if IEEE_DOT:
                acc += tl.dot(h, tl.trans(w), input_precision="ieee")
            else:
                acc += tl.dot(h, tl.trans(w))  # fp16/bf16 operands, fp32 accumulator: tensor cores
        else:  # BLOCK_B == 1: a row-times-tile product, fp32 accumulation
            acc += tl.sum(w.to(tl.float32) * h.to(tl.float32), axis=1)[None, :]
    acc = tl.where(row_ok[None, :], acc, float("-inf"))
    tl.store(scores_ptr + offs_b[:, None] * stride_scores + columns[None, :], acc,
             mask=b_ok[:, None] & column_ok[None, :])
    tile_max = tl.max(acc, axis=1)
    tile_arg = tl.argmax(acc, axis=1, tie_break_left=True)
    empty = tile_max == float("-inf")  # a tile of padding only: contributes nothing to the sum
    tile_sumexp = tl.sum(tl.exp(acc - tl.where(empty, 0.0, tile_max)[:, None]), axis=1)
    partial = offs_b * num_tiles + tile
    tl.store(tile_max_ptr + partial, tile_max, mask=b_ok)
    tl.store(tile_arg_ptr + partial, tile * BLOCK_N + tile_arg, mask=b_ok)
    tl.store(tile_sumexp_ptr + partial, tl.where(empty, 0.0, tile_sumexp), mask=b_ok)


@triton.jit
def _combine_tiles_kernel(tile_max_ptr, tile_arg_ptr, tile_sumexp_ptr, argmax_ptr, max_ptr, logsumexp_ptr,
                          num_tiles, BLOCK_T: tl.constexpr):
    """One program per batch row: the tiles' partials -> the row's argmax (first column on ties: the first tile
    holding the maximum, its first column), max and log-sum-exp. One launch where torch took about ten."""
    row = tl.program_id(0)
    tiles = tl.arange(0, BLOCK_T)
    ok = tiles < num_tiles
    base = row * num_tiles
    tile_max = tl.load(tile_max_ptr + base + tiles, mask=ok, other=float("-inf"))
    best = tl.max(tile_max, axis=0)
    best_tile = tl.argmax(tile_max, axis=0, tie_break_left=True)
    sumexp = tl.load(tile_sumexp_ptr + base + tiles, mask=ok, other=0.0)
    weight = tl.where(tile_max == float("-inf"), 0.0, tl.exp(tile_max - best))  # a padding-only tile adds nothing
    tl.store(argmax_ptr + row, tl.load(tile_arg_ptr + base + best_tile))
    tl.store(max_ptr + row, best)
    tl.store(logsumexp_ptr + row, best + tl.log(tl.sum(sumexp * weight, axis=0)))


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


@functools.cache
def _capability(device_index: int) -> tuple[int, int]:
    return torch.cuda.get_device_capability(device_index)


def launch_constants(dtype: torch.dtype, batch: int, capability: tuple[int, int] | None,
                     interpreter: bool = False) -> dict:
    """The constexprs the launcher uses for `dtype` (of the weights), `batch` rows and a card of `capability`
    (major, minor); the compile test compiles these exact specialisations."""
    use_dot = batch > 1
    bf16_without_tensor_cores = dtype == torch.bfloat16 and capability is not None and capability < (8, 0)
    return {
        "BLOCK_B": max(16, triton.next_power_of_2(batch)) if use_dot else 1,
        "BLOCK_N": 64,
        "BLOCK_D": 64 if use_dot else 128,
        "USE_DOT": use_dot,
        "UPCAST": interpreter or bf16_without_tensor_cores,
        "IEEE_DOT": dtype == torch.float32 or interpreter or bf16_without_tensor_cores,
    }


def _validate(hidden: torch.Tensor, weight: torch.Tensor, row_ids: torch.Tensor) -> None:
    """Shape, dtype and device checks: metadata only, so that a draft step never waits on the GPU. The row ids'
    values are the caller's contract (built from validated clusters; -1 = padding)."""
    if hidden.dim() != 2 or weight.dim() != 2:
        raise ValueError(f"hidden must be [B, D] and weight [V, D]; got {tuple(hidden.shape)} and {tuple(weight.shape)}")
    if hidden.shape[1] != weight.shape[1]:
        raise ValueError(f"hidden size {hidden.shape[1]} does not match the head's {weight.shape[1]}")
    for name, tensor in (("hidden", hidden), ("weight", weight)):
        if tensor.dtype not in SUPPORTED_DTYPES:
            raise ValueError(f"{name} dtype {tensor.dtype} is not supported (fp16, bf16 or fp32)")
        if tensor.stride(1) != 1:
            raise ValueError(f"{name} must be contiguous in its last dimension; call .contiguous()")
    if row_ids.dim() != 1 or row_ids.dtype != torch.int64 or row_ids.numel() == 0:
        raise ValueError(f"row_ids must be a non-empty 1-D int64 tensor; got {row_ids.dtype} {tuple(row_ids.shape)}")
    devices = {hidden.device, weight.device, row_ids.device}
    if len(devices) != 1:
        raise ValueError(f"hidden, weight and row_ids must be on one device; got {sorted(map(str, devices))}")


def indexed_head_triton(hidden: torch.Tensor, weight: torch.Tensor, row_ids: torch.Tensor) -> ShortlistHeadOutput:
    """hidden `[B, D]`, weight `[V, D]` (the target's head, not a copy), row_ids `[S]` (-1 = padding) -> scores
    `[B, S]` float32 (-inf in padding), token ids `[S]` (= row_ids) and the fused reductions."""
    _validate(hidden, weight, row_ids)
    batch, dim = hidden.shape
    num_columns = row_ids.shape[0]
    device = hidden.device
    capability = _capability(device.index if device.index is not None else torch.cuda.current_device()) \
        if device.type == "cuda" else None
    constants = launch_constants(weight.dtype, batch, capability, interpreting())
    if hidden.dtype != weight.dtype:
        hidden = hidden.to(weight.dtype)
    num_tiles = triton.cdiv(num_columns, constants["BLOCK_N"])
    scores = torch.empty(batch, num_columns, dtype=torch.float32, device=device)
    tile_max = torch.empty(batch, num_tiles, dtype=torch.float32, device=device)
    tile_arg = torch.empty(batch, num_tiles, dtype=torch.int64, device=device)
    tile_sumexp = torch.empty(batch, num_tiles, dtype=torch.float32, device=device)
    argmax = torch.empty(batch, dtype=torch.int64, device=device)
    best = torch.empty(batch, dtype=torch.float32, device=device)
    logsumexp = torch.empty(batch, dtype=torch.float32, device=device)
    # The launches go to the current CUDA device: make it the tensors' one (a target on cuda:1).
    with torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext():
        _indexed_head_kernel[(num_tiles,)](
            hidden, weight, row_ids, scores, tile_max, tile_arg, tile_sumexp,
            batch, dim, num_columns, num_tiles, hidden.stride(0), weight.stride(0), scores.stride(0), **constants,
        )
        _combine_tiles_kernel[(batch,)](tile_max, tile_arg, tile_sumexp, argmax, best, logsumexp, num_tiles,
                                        BLOCK_T=triton.next_power_of_2(num_tiles))
    return ShortlistHeadOutput(scores, row_ids, argmax, best, logsumexp)
