"""CPU fast path of the shortlisted head: the selected row blocks of a cluster-permuted head, no row gather.

Each selected block is a contiguous slice of the permuted head. A bf16 head with at most 8 hidden rows goes
to the C kernel (`kernels/verify_rows`, `bf16_blocks_matmul`): one call streams every selected row once with
float32 accumulation. Otherwise, or where the kernel cannot be built, each block is one BLAS matmul into its
slice of a preallocated output. Why the kernel: on CPUs with native bf16 matmuls (AVX-512 BF16 / AMX) the full
head runs at memory speed, and 30-40 BLAS calls for a V/8 shortlist cost about as much as the streaming
itself (0.19x the full head; one kernel call: 0.08x; docs/kernels.md).
Same signature as `reference.shortlist_head_reference`.
"""

from __future__ import annotations

import torch

from hf_dynaspec.kernels.shortlist_head.output import ShortlistHeadOutput
from hf_dynaspec.kernels.verify_rows import loader as rows_kernel

KERNEL_MAX_ROWS = 8  # the kernel's dot products take up to 8 input rows per pass over a weight row


def use_rows_kernel(hidden: torch.Tensor, permuted_weight: torch.Tensor) -> bool:
    return (permuted_weight.dtype == torch.bfloat16 and permuted_weight.device.type == "cpu"
            and hidden.shape[0] <= KERNEL_MAX_ROWS and permuted_weight.is_contiguous() and rows_kernel.available())


@torch.no_grad()
def shortlist_head_blocks(
    hidden: torch.Tensor, permuted_weight: torch.Tensor, block_starts: list[int], block_ends: list[int],
    token_order: torch.Tensor,
) -> ShortlistHeadOutput:
    """hidden `[B, D]`, permuted_weight `[V, D]`, blocks `[start, end)`, token_order `[V]` -> scores `[B, S]`, ids `[S]`."""
    ids = torch.cat([token_order[a:b] for a, b in zip(block_starts, block_ends)])
    if use_rows_kernel(hidden, permuted_weight):
        return ShortlistHeadOutput(rows_kernel.bf16_blocks_matmul(hidden, permuted_weight, block_starts, block_ends),
                                   ids)
    scores = torch.empty(hidden.shape[0], len(ids), dtype=hidden.dtype, device=hidden.device)
    start = 0
    for a, b in zip(block_starts, block_ends):
        torch.mm(hidden, permuted_weight[a:b].T, out=scores[:, start : start + b - a])
        start += b - a
    return ShortlistHeadOutput(scores.float(), ids)
