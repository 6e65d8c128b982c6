"""Kernels for the shortlisted LM head: a Triton kernel on GPU, block matmuls on CPU, a torch reference.

Triton is optional: this is the one place that decides whether it can be used, so that the package imports
and the CPU suite passes without it. `shortlist_head` dispatches: CUDA tensors with Triton installed go to
`triton_head.shortlist_head_triton`; everything else to `cpu.shortlist_head_blocks` (measured on CPU against
the gather reference and torch.compile in docs/kernels.md). `reference.shortlist_head_reference` is the
ground truth of the tests.
"""

from __future__ import annotations

import functools
import importlib.util
import os

import torch

from hf_dynaspec.kernels.shortlist_head.output import ShortlistHeadOutput

from hf_dynaspec.kernels.shortlist_head.cpu import shortlist_head_blocks


@functools.cache
def triton_available() -> bool:
    """True when Triton is installed and can run here (a CUDA device, or the interpreter on CPU).

    Decided once per process: the head calls this at every draft step."""
    if importlib.util.find_spec("triton") is None:
        return False
    if os.environ.get("TRITON_INTERPRET") == "1":
        return True
    return torch.cuda.is_available()


def shortlist_head(hidden: torch.Tensor, permuted_weight: torch.Tensor, block_starts: list[int],
                   block_ends: list[int], token_order: torch.Tensor) -> ShortlistHeadOutput:
    """Scores `[B, S]` (float32), target ids `[S]` and the reductions over S (fused on the Triton path) of the
    selected row blocks of a permuted head `[V, D]`."""
    if permuted_weight.is_cuda and triton_available():
        from hf_dynaspec.kernels.shortlist_head.triton_kernel import shortlist_head_triton

        return shortlist_head_triton(hidden, permuted_weight, block_starts, block_ends, token_order)
    return shortlist_head_blocks(hidden, permuted_weight, block_starts, block_ends, token_order)
