"""Pure-torch reference of the shortlisted LM head: the ground truth the fast paths are tested against.

Legend: B batch, D hidden, V rows of the (cluster-permuted) head, S shortlist rows, N blocks, C clusters,
A always-included ids, R a row budget.
"""

from __future__ import annotations

import torch

from hf_dynaspec.kernels.shortlist_head.output import ShortlistHeadOutput


def shortlist_head_reference(
    hidden: torch.Tensor, permuted_weight: torch.Tensor, block_starts: list[int], block_ends: list[int],
    token_order: torch.Tensor,
) -> ShortlistHeadOutput:
    """Scores of the selected row blocks of a permuted head.

    hidden `[B, D]`, permuted_weight `[V, D]`, blocks `[start, end)` of rows, token_order `[V]` (target id of
    each permuted row) -> scores `[B, S]` float32 and target ids `[S]`, rows in block order. Gathers the rows
    into a fresh tensor on every call: simple and slow (the reason the fast paths exist).
    """
    rows = torch.cat([torch.arange(a, b) for a, b in zip(block_starts, block_ends)]).to(permuted_weight.device)
    scores = hidden.float() @ permuted_weight.index_select(0, rows).float().T
    return ShortlistHeadOutput(scores, token_order[rows])


def indexed_head_reference(hidden: torch.Tensor, weight: torch.Tensor, row_ids: torch.Tensor) -> ShortlistHeadOutput:
    """Scores of the head rows `row_ids` `[S]` (-1 = a padding column, scored -inf) for hidden `[B, D]`, weight
    `[V, D]` -> scores `[B, S]` float32 and token ids `[S]` (= row_ids). The device-side shortlist's ground truth,
    and its path wherever Triton cannot run: a gather and a matmul, no host sync."""
    rows = weight.index_select(0, row_ids.clamp(min=0))
    scores = (hidden.to(weight.dtype) @ rows.T).float()
    return ShortlistHeadOutput(scores.masked_fill(row_ids < 0, float("-inf")), row_ids)


def ranked_row_ids(ranking: torch.Tensor, sizes: torch.Tensor, starts: torch.Tensor, token_order: torch.Tensor,
                   always_ids: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
    """The row budget's columns as head row ids, in torch ops (the Triton kernel works them out per tile).

    The router's ranking `[C]` (every cluster once, best first), the clusters' sizes `[C]` and first places
    `[C]` in `token_order` `[V - A]`, the always-included ids `[A]` and `columns` = arange(R) `[R]` on their
    device -> ids `[R + A]`: the ranked clusters' rows end to end, cut after R, then the always-included ids.
    Every shape is set by R: nothing is read back to the host."""
    ranked_sizes = sizes[ranking]
    ends = ranked_sizes.cumsum(0)  # [C]: the column after each ranked cluster's span
    rank = torch.searchsorted(ends, columns, right=True)  # [R]: the ranked cluster each column falls in
    first_place = (starts[ranking] - (ends - ranked_sizes))[rank]  # [R]: its place in token_order, less its span's start
    return torch.cat([token_order[first_place + columns], always_ids])


def ranked_head_reference(hidden: torch.Tensor, weight: torch.Tensor, ranking: torch.Tensor, sizes: torch.Tensor,
                          starts: torch.Tensor, token_order: torch.Tensor, always_ids: torch.Tensor,
                          columns: torch.Tensor) -> ShortlistHeadOutput:
    """`ranked_row_ids` then `indexed_head_reference`: the one-launch kernel's ground truth, and its path where
    Triton cannot run."""
    return indexed_head_reference(hidden, weight, ranked_row_ids(ranking, sizes, starts, token_order, always_ids, columns))
