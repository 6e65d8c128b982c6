"""CPU fast path of the shortlisted head: block matmuls straight into one preallocated output.

No row gather: each selected block is a contiguous slice (a view) of the permuted head, multiplied into its
slice of the output, in the head's own dtype (bf16 stays bf16, accumulation is the BLAS's).
Same signature as `reference.shortlist_head_reference`.
"""

from __future__ import annotations

import torch

from hf_dynaspec.kernels.shortlist_head.output import ShortlistHeadOutput


@torch.no_grad()
def shortlist_head_blocks(
    hidden: torch.Tensor, permuted_weight: torch.Tensor, block_starts: list[int], block_ends: list[int],
    token_order: torch.Tensor,
) -> ShortlistHeadOutput:
    """hidden `[B, D]`, permuted_weight `[V, D]`, blocks `[start, end)`, token_order `[V]` -> scores `[B, S]`, ids `[S]`."""
    size = sum(b - a for a, b in zip(block_starts, block_ends))
    scores = torch.empty(hidden.shape[0], size, dtype=hidden.dtype, device=hidden.device)
    ids = torch.empty(size, dtype=torch.long, device=hidden.device)
    start = 0
    for a, b in zip(block_starts, block_ends):
        torch.mm(hidden, permuted_weight[a:b].T, out=scores[:, start : start + b - a])
        ids[start : start + b - a] = token_order[a:b]
        start += b - a
    return ShortlistHeadOutput(scores.float(), ids)
