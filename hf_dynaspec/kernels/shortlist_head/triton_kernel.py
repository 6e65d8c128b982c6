"""Triton kernel of the shortlisted LM head: one launch from the router's ranking to the draft's top token.

A DynaSpec step scores the first R rows of the router's ranking (drafting/selector.py) plus the
always-included ids. The kernel takes that ranking `[C]` and the cluster tables built at load, and each program
works out the head rows of its `BLOCK_N` columns itself (a scan of the ranked cluster sizes, chunk by chunk,
then three gathers): the step issues no separate row-id ops. It gathers those rows straight from the target's head
(no permuted copy; each row is contiguous, so loads stay coalesced along D), multiplies them with all `B`
hidden states, writes the scores and the columns' ids, and reduces its tile to (max, argmax, its token,
sum of exp(score - max)) per batch row. The last program to finish (an atomic counter, reset by that program,
so the buffer is reusable by the next launch and by a CUDA graph replay) combines the tiles into the shortlist's
argmax, its token id, max, log-sum-exp and top probability: no second launch and no combine chain in torch.

The same kernel also scores a given list of row ids (`FROM_RANKING=False`; -1 marks a padding column): the
bench's and the tests' form.

- batch 1 (chain drafting): a GEMV path, no padding of the batch to 16 rows;
- batch > 1 (tree frontiers): `tl.dot` in the weights' dtype with fp32 accumulation, i.e. tensor cores for
  fp16/bf16 on sm_80+; fp32 weights use an IEEE fp32 dot (no TF32: scores stay those of the reference);
- bf16 on cards without bf16 tensor cores (sm_75, T4) and everything under the Triton interpreter (which
  computes bf16 arithmetic wrongly) upcast to fp32 after the load: `launch_constants` decides, and the AOT
  compile test compiles exactly what it returns.

Import this module only when Triton can run: on a CUDA device, or on CPU under `TRITON_INTERPRET=1` set
before the import (see `hf_dynaspec.kernels.shortlist_head.triton_available`).
Legend: B batch, D hidden, V head rows, C clusters, A always-included ids, R row budget, S columns (R + A).
"""

from __future__ import annotations

import contextlib
import functools
import os

import torch
import triton
import triton.language as tl

from hf_dynaspec.kernels.shortlist_head.torch_paths import ShortlistHeadOutput

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


@triton.jit
def _ranked_rows(columns, column_ok, ranking_ptr, sizes_ptr, starts_ptr, token_order_ptr, always_ptr,
                 num_clusters, budget_rows, BLOCK_N: tl.constexpr, BLOCK_C: tl.constexpr):
    """Head rows `[BLOCK_N]` of `columns` under the row budget: column j < R lies in the ranked cluster whose
    span of columns (ranked sizes end to end) holds j, at j minus the span's first column within that cluster's
    frequency-ordered rows; column R + i is always-included id i; -1 past the last column."""
    clustered = column_ok & (columns < budget_rows)
    clusters_before = tl.zeros([BLOCK_N], dtype=tl.int32)  # ranked clusters whose span ends at or before j
    span_start = tl.zeros([BLOCK_N], dtype=tl.int32)  # first column of j's cluster: the largest such end
    carried = tl.program_id(0) * 0  # columns of the chunks scanned so far: an int32 scalar (never a constexpr,
    # as `num_clusters * 0` would be where the launcher specialises num_clusters == 1), so the loop keeps its type
    for first_rank in range(0, num_clusters, BLOCK_C):
        ranks = first_rank + tl.arange(0, BLOCK_C)
        rank_ok = ranks < num_clusters
        cluster = tl.load(ranking_ptr + ranks, mask=rank_ok, other=0)
        size = tl.load(sizes_ptr + cluster, mask=rank_ok, other=0).to(tl.int32)
        ends = carried + tl.cumsum(size, axis=0)  # [BLOCK_C]
        before = (ends[None, :] <= columns[:, None]) & rank_ok[None, :]  # [BLOCK_N, BLOCK_C]
        clusters_before += tl.sum(before.to(tl.int32), axis=1)
        span_start = tl.maximum(span_start, tl.max(tl.where(before, ends[None, :], 0), axis=1))
        carried += tl.sum(size, axis=0)
    cluster = tl.load(ranking_ptr + clusters_before, mask=clustered, other=0)
    first_row = tl.load(starts_ptr + cluster, mask=clustered, other=0)
    clustered_row = tl.load(token_order_ptr + first_row + (columns - span_start), mask=clustered, other=0)
    always = column_ok & (columns >= budget_rows)
    always_row = tl.load(always_ptr + (columns - budget_rows), mask=always, other=-1)
    return tl.where(clustered, clustered_row, always_row)


@triton.jit
def _combine_tiles(tile_max_ptr, tile_arg_ptr, tile_token_ptr, tile_sumexp_ptr, argmax_ptr, token_ptr, max_ptr,
                   logsumexp_ptr, top_ptr, batch, num_tiles, BLOCK_T: tl.constexpr):
    """Every tile's partials -> per batch row the argmax (first column on ties: the first tile holding the
    maximum, its first column), its token id, the max, the log-sum-exp and the top probability. Run by the last
    program only; its loads go to L2 (".cg"), where the other programs' stores are."""
    tiles = tl.arange(0, BLOCK_T)
    ok = tiles < num_tiles
    for row in range(batch):
        base = row * num_tiles
        tile_max = tl.load(tile_max_ptr + base + tiles, mask=ok, other=float("-inf"), cache_modifier=".cg")
        best = tl.max(tile_max, axis=0)
        best_tile = tl.argmax(tile_max, axis=0, tie_break_left=True)
        sumexp = tl.load(tile_sumexp_ptr + base + tiles, mask=ok, other=0.0, cache_modifier=".cg")
        weight = tl.where(tile_max == float("-inf"), 0.0, tl.exp(tile_max - best))  # a padding-only tile adds 0
        total = tl.sum(sumexp * weight, axis=0)  # sum of exp(score - best) over the row: >= 1
        tl.store(argmax_ptr + row, tl.load(tile_arg_ptr + base + best_tile, cache_modifier=".cg"))
        tl.store(token_ptr + row, tl.load(tile_token_ptr + base + best_tile, cache_modifier=".cg"))
        tl.store(max_ptr + row, best)
        tl.store(logsumexp_ptr + row, best + tl.log(total))
        tl.store(top_ptr + row, 1.0 / total)  # exp(best - log-sum-exp)


@triton.jit
def _shortlist_head_kernel(
    hidden_ptr, weight_ptr, row_ids_ptr, ranking_ptr, sizes_ptr, starts_ptr, token_order_ptr, always_ptr,
    scores_ptr, ids_ptr, tile_max_ptr, tile_arg_ptr, tile_token_ptr, tile_sumexp_ptr, counter_ptr,
    argmax_ptr, token_ptr, max_ptr, logsumexp_ptr, top_ptr,
    batch, dim, num_columns, num_tiles, num_clusters, budget_rows, stride_hidden, stride_weight, stride_scores,
    BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_C: tl.constexpr,
    BLOCK_T: tl.constexpr, FROM_RANKING: tl.constexpr, USE_DOT: tl.constexpr, UPCAST: tl.constexpr,
    IEEE_DOT: tl.constexpr,
):
    tile = tl.program_id(0)
    offs_n = tl.arange(0, BLOCK_N)
    columns = tile * BLOCK_N + offs_n
    column_ok = columns < num_columns
    if FROM_RANKING:
        rows = _ranked_rows(columns, column_ok, ranking_ptr, sizes_ptr, starts_ptr, token_order_ptr, always_ptr,
                            num_clusters, budget_rows, BLOCK_N, BLOCK_C)
        tl.store(ids_ptr + columns, rows, mask=column_ok)
    else:
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
    tile_arg = tl.argmax(acc, axis=1, tie_break_left=True)  # [BLOCK_B], within the tile
    tile_token = tl.sum(tl.where(offs_n[None, :] == tile_arg[:, None], rows[None, :], 0), axis=1)
    empty = tile_max == float("-inf")  # a tile of padding only: contributes nothing to the sum
    tile_sumexp = tl.sum(tl.exp(acc - tl.where(empty, 0.0, tile_max)[:, None]), axis=1)
    partial = offs_b * num_tiles + tile
    tl.store(tile_max_ptr + partial, tile_max, mask=b_ok)
    tl.store(tile_arg_ptr + partial, tile * BLOCK_N + tile_arg, mask=b_ok)
    tl.store(tile_token_ptr + partial, tile_token, mask=b_ok)
    tl.store(tile_sumexp_ptr + partial, tl.where(empty, 0.0, tile_sumexp), mask=b_ok)
    # Every thread's partials are stored before the count goes up (barrier), and the count's release/acquire at
    # GPU scope makes them visible to whichever program counts last: that one combines, then resets the count.
    tl.debug_barrier()
    arrived = tl.atomic_add(counter_ptr, 1, sem="acq_rel", scope="gpu")
    if arrived == num_tiles - 1:
        _combine_tiles(tile_max_ptr, tile_arg_ptr, tile_token_ptr, tile_sumexp_ptr, argmax_ptr, token_ptr, max_ptr,
                       logsumexp_ptr, top_ptr, batch, num_tiles, BLOCK_T)
        tl.atomic_xchg(counter_ptr, 0, sem="relaxed", scope="gpu")


@functools.cache
def _capability(device_index: int) -> tuple[int, int]:
    return torch.cuda.get_device_capability(device_index)


# One arrival counter per device and stream, zero between launches (the last program resets it): launches on
# one stream run one after another, but two streams (two generate() calls in threads, a graph captured on its own
# stream) may overlap, and a shared count would let one launch's programs combine the other's partials.
_COUNTERS: dict[tuple[torch.device, int | None], torch.Tensor] = {}


def _stream(device: torch.device) -> int | None:
    """The id of the stream a launch on `device` goes to (None off CUDA: the interpreter runs one at a time)."""
    return torch.cuda.current_stream(device).stream_id if device.type == "cuda" else None


def _counter(device: torch.device, stream: int | None = None) -> torch.Tensor:
    key = (device, stream)
    if key not in _COUNTERS:
        _COUNTERS[key] = torch.zeros(1, dtype=torch.int32, device=device)
    return _COUNTERS[key]


def launch_constants(dtype: torch.dtype, batch: int, capability: tuple[int, int] | None,
                     interpreter: bool = False) -> dict:
    """The constexprs the launcher uses for `dtype` (of the weights), `batch` rows and a card of `capability`
    (major, minor), besides the column count's `BLOCK_T` and the form's `FROM_RANKING`; the compile test
    compiles these exact specialisations."""
    use_dot = batch > 1
    bf16_without_tensor_cores = dtype == torch.bfloat16 and capability is not None and capability < (8, 0)
    return {
        "BLOCK_B": max(16, triton.next_power_of_2(batch)) if use_dot else 1,
        "BLOCK_N": 64,
        "BLOCK_D": 64 if use_dot else 128,
        "BLOCK_C": 128,
        "USE_DOT": use_dot,
        "UPCAST": interpreter or bf16_without_tensor_cores,
        "IEEE_DOT": dtype == torch.float32 or interpreter or bf16_without_tensor_cores,
    }


def _validate(hidden: torch.Tensor, weight: torch.Tensor, index_tensors: dict[str, torch.Tensor]) -> None:
    """Shape, dtype and device checks: metadata only, so that a draft step never waits on the GPU. The index
    tensors' values are the caller's contract (built from validated clusters; -1 = padding in row ids)."""
    if hidden.dim() != 2 or weight.dim() != 2:
        raise ValueError(f"hidden must be [B, D] and weight [V, D]; got {tuple(hidden.shape)} and {tuple(weight.shape)}")
    if hidden.shape[1] != weight.shape[1]:
        raise ValueError(f"hidden size {hidden.shape[1]} does not match the head's {weight.shape[1]}")
    for name, tensor in (("hidden", hidden), ("weight", weight)):
        if tensor.dtype not in SUPPORTED_DTYPES:
            raise ValueError(f"{name} dtype {tensor.dtype} is not supported (fp16, bf16 or fp32)")
        if tensor.stride(1) != 1:
            raise ValueError(f"{name} must be contiguous in its last dimension; call .contiguous()")
    for name, tensor in index_tensors.items():
        if tensor.dim() != 1 or tensor.dtype != torch.int64 or not tensor.is_contiguous():
            raise ValueError(f"{name} must be a contiguous 1-D int64 tensor; got {tensor.dtype} {tuple(tensor.shape)}")
    devices = {hidden.device, weight.device, *(t.device for t in index_tensors.values())}
    if len(devices) != 1:
        raise ValueError(f"hidden, weight and the row tables must be on one device; got {sorted(map(str, devices))}")


def _launch(hidden, weight, columns: int, row_ids=None, tables=None, budget_rows: int = 0):
    """One launch over `columns` columns, from `row_ids` or from `tables` (ranking, sizes, starts, token_order,
    always_ids) -> scores `[B, S]`, ids `[S]`, argmax `[B]`, token `[B]`, max, log-sum-exp, top `[B]`."""
    batch, dim = hidden.shape
    device = hidden.device
    capability = _capability(device.index if device.index is not None else torch.cuda.current_device()) \
        if device.type == "cuda" else None
    constants = launch_constants(weight.dtype, batch, capability, os.environ.get("TRITON_INTERPRET") == "1")
    if hidden.dtype != weight.dtype:
        hidden = hidden.to(weight.dtype)
    num_tiles = triton.cdiv(columns, constants["BLOCK_N"])
    from_ranking = tables is not None
    ids = torch.empty(columns, dtype=torch.int64, device=device) if from_ranking else row_ids
    ranking, sizes, starts, token_order, always_ids = tables if from_ranking else (ids,) * 5  # unread if not
    scores = torch.empty(batch, columns, dtype=torch.float32, device=device)
    tile_max, tile_sumexp = (torch.empty(batch, num_tiles, dtype=torch.float32, device=device) for _ in range(2))
    tile_arg, tile_token = (torch.empty(batch, num_tiles, dtype=torch.int64, device=device) for _ in range(2))
    argmax, token = (torch.empty(batch, dtype=torch.int64, device=device) for _ in range(2))
    best, logsumexp, top = (torch.empty(batch, dtype=torch.float32, device=device) for _ in range(3))
    # The launch goes to the current CUDA device: make it the tensors' one (a target on cuda:1).
    with torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext():
        _shortlist_head_kernel[(num_tiles,)](
            hidden, weight, ids, ranking, sizes, starts, token_order, always_ids,
            scores, ids, tile_max, tile_arg, tile_token, tile_sumexp, _counter(device, _stream(device)),
            argmax, token, best, logsumexp, top,
            batch, dim, columns, num_tiles, len(ranking) if from_ranking else 0, budget_rows,
            hidden.stride(0), weight.stride(0), scores.stride(0),
            BLOCK_T=triton.next_power_of_2(num_tiles), FROM_RANKING=from_ranking, **constants,
        )
    return scores, ids, argmax, token, best, logsumexp, top


def indexed_head_triton(hidden: torch.Tensor, weight: torch.Tensor, row_ids: torch.Tensor) -> ShortlistHeadOutput:
    """hidden `[B, D]`, weight `[V, D]` (the target's head, not a copy), row_ids `[S]` (-1 = padding) -> scores
    `[B, S]` float32 (-inf in padding), token ids `[S]` (= row_ids) and the fused reductions."""
    _validate(hidden, weight, {"row_ids": row_ids})
    if row_ids.numel() == 0:
        raise ValueError("row_ids must be non-empty")
    scores, ids, argmax, token, best, logsumexp, top = _launch(hidden, weight, len(row_ids), row_ids=row_ids)
    return ShortlistHeadOutput(scores, ids, argmax, best, logsumexp, token, top)


def ranked_head_triton(hidden: torch.Tensor, weight: torch.Tensor, ranking: torch.Tensor, sizes: torch.Tensor,
                       starts: torch.Tensor, token_order: torch.Tensor, always_ids: torch.Tensor,
                       budget_rows: int) -> ShortlistHeadOutput:
    """The row budget's head in one launch. hidden `[B, D]`, weight `[V, D]` (the target's head), the router's
    ranking `[C]` (every cluster once, best first), the clusters' sizes `[C]` and first places `[C]` in
    `token_order` `[V - A]` (each cluster's ids most frequent first), the always-included ids `[A]` and R (host
    int, 1 <= R <= V - A) -> scores `[B, R + A]` float32, the columns' ids `[R + A]` and the fused reductions.
    Columns: the first R rows of the ranked clusters end to end, then the always-included ids."""
    tables = {"ranking": ranking, "sizes": sizes, "starts": starts, "token_order": token_order,
              "always_ids": always_ids}
    _validate(hidden, weight, tables)
    if not 1 <= budget_rows <= len(token_order):
        raise ValueError(f"the row budget must be between 1 and the {len(token_order)} clustered rows; got {budget_rows}")
    if not len(ranking) == len(sizes) == len(starts):
        raise ValueError(f"ranking, sizes and starts must have one entry per cluster; got {len(ranking)}, "
                         f"{len(sizes)}, {len(starts)}")
    columns = budget_rows + len(always_ids)
    scores, ids, argmax, token, best, logsumexp, top = _launch(hidden, weight, columns, tables=tuple(tables.values()),
                                                               budget_rows=budget_rows)
    return ShortlistHeadOutput(scores, ids, argmax, best, logsumexp, token, top)
