"""The shortlisted LM head in PyTorch: the output every backend returns, the CPU fast path and the reference.

- `ShortlistHeadOutput`: scores, column ids and the row-wise reductions. The Triton kernel fuses argmax, its
  token id, max, log-sum-exp and top probability into the matmul's epilogue; the torch paths compute them from
  the scores only when asked (a pass over `[B, S]` greedy drafting, which reads the scores anyway, skips).
- `shortlist_head` (CPU): the selected row blocks of a cluster-permuted head, no row gather. A bf16 head
  with at most `KERNEL_MAX_ROWS` hidden rows goes to the C kernel (`kernels/verify_rows`, `bf16_blocks_matmul`):
  one call streams every selected row once with float32 accumulation; otherwise each block is one BLAS matmul
  into its slice of one output. Why the kernel: on CPUs with native bf16 matmuls the full head runs at memory
  speed, and 30-40 BLAS calls for a V/8 shortlist cost about as much as the streaming itself (0.19x the full
  head; one kernel call: 0.08x; docs/kernels.md).
- `shortlist_head_reference`, `indexed_head_reference`, `ranked_head_reference`: gathers and a matmul, the ground
  truth the fast paths are tested against and the device path wherever Triton cannot run.

Legend: B batch, D hidden, V rows of the (cluster-permuted) head, S shortlist rows, N blocks, C clusters,
A always-included ids, R a row budget.
"""

from __future__ import annotations

import torch

from hf_dynaspec.kernels.verify_rows import loader as rows_kernel


class ShortlistHeadOutput:
    """scores `[B, S]` float32, token_ids `[S]` (target id of each column; -1 marks a padding column, scored
    -inf; None when the columns are the whole vocabulary in order), and the reductions over S: `argmax` `[B]`
    (first column on ties), `max` `[B]`, `logsumexp` `[B]` float32, and from them `argmax_token_ids` `[B]` and
    `top_probability` `[B]` (the largest probability of the softmax over the columns scored). Reductions a kernel
    fused are given; the others are computed from the scores when first read (plain properties: functools'
    cached_property takes a lock on Python 3.11, which a compiled draft, drafting/captured.py, cannot trace)."""

    def __init__(self, scores: torch.Tensor, token_ids: torch.Tensor | None, argmax: torch.Tensor | None = None,
                 max: torch.Tensor | None = None, logsumexp: torch.Tensor | None = None,
                 argmax_token_ids: torch.Tensor | None = None, top_probability: torch.Tensor | None = None):
        self.scores = scores
        self.token_ids = token_ids
        self._argmax, self._max, self._logsumexp = argmax, max, logsumexp
        self._argmax_token_ids, self._top_probability = argmax_token_ids, top_probability

    @property
    def argmax(self) -> torch.Tensor:
        if self._argmax is None:
            self._argmax = self.scores.argmax(-1)
        return self._argmax

    @property
    def max(self) -> torch.Tensor:
        if self._max is None:
            self._max = self.scores.gather(-1, self.argmax[:, None])[:, 0]
        return self._max

    @property
    def logsumexp(self) -> torch.Tensor:
        if self._logsumexp is None:
            self._logsumexp = torch.logsumexp(self.scores, dim=-1)
        return self._logsumexp

    @property
    def argmax_token_ids(self) -> torch.Tensor:
        """`[B]` target ids of the best-scored rows."""
        if self._argmax_token_ids is None:
            self._argmax_token_ids = self.argmax if self.token_ids is None else self.token_ids[self.argmax]
        return self._argmax_token_ids

    @property
    def top_probability(self) -> torch.Tensor:
        """`[B]` float32: exp(max - log-sum-exp), the best column's probability over the columns scored."""
        if self._top_probability is None:
            self._top_probability = (self.max - self.logsumexp).exp()
        return self._top_probability

    def __iter__(self):
        """`scores, token_ids = output`: the two tensors every caller reads."""
        return iter((self.scores, self.token_ids))


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


KERNEL_MAX_ROWS = 8  # the kernel's dot products take up to 8 input rows per pass over a weight row


@torch.no_grad()
def shortlist_head(
    hidden: torch.Tensor, permuted_weight: torch.Tensor, block_starts: list[int], block_ends: list[int],
    token_order: torch.Tensor,
) -> ShortlistHeadOutput:
    """hidden `[B, D]`, permuted_weight `[V, D]`, blocks `[start, end)`, token_order `[V]` -> scores `[B, S]`, ids `[S]`."""
    ids = torch.cat([token_order[a:b] for a, b in zip(block_starts, block_ends)])
    if (permuted_weight.dtype == torch.bfloat16 and permuted_weight.device.type == "cpu"
            and hidden.shape[0] <= KERNEL_MAX_ROWS and permuted_weight.is_contiguous() and rows_kernel.available()):
        return ShortlistHeadOutput(rows_kernel.bf16_blocks_matmul(hidden, permuted_weight, block_starts, block_ends),
                                   ids)
    scores = torch.empty(hidden.shape[0], len(ids), dtype=hidden.dtype, device=hidden.device)
    start = 0
    for a, b in zip(block_starts, block_ends):
        torch.mm(hidden, permuted_weight[a:b].T, out=scores[:, start : start + b - a])
        start += b - a
    return ShortlistHeadOutput(scores.float(), ids)
