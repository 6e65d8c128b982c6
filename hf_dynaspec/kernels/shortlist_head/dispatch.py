"""Kernels for the shortlisted LM head: a Triton kernel on GPU, block matmuls on CPU, torch references.

Two forms of a shortlist:
- blocks of a cluster-permuted copy of the head (`shortlist_head`): the CPU fast path, where contiguous
  blocks make BLAS fast and host-side lists cost nothing;
- the router's ranking and the cluster tables (`ranked_head_for`): the accelerator form, the row budget's step,
  whose shapes do not depend on the router's choice, so a draft step never waits on the device: on CUDA with
  Triton one launch from the ranking to the top token (the kernel works out the row ids), elsewhere the row ids
  in torch ops and the gather reference. (The kernel over given row ids, -1 for padding, is the operator
  `torch.ops.hf_dynaspec.indexed_head`, op.py: what the benchmarks and tests time and check.)

Triton is optional: this is the one place that decides whether it can be used, so that the package imports
and the CPU suite passes without it.
"""

from __future__ import annotations

import functools
import importlib.util
import os

import torch
from transformers.utils import logging

from hf_dynaspec.kernels.shortlist_head.op import ranked_head_op
from hf_dynaspec.kernels.shortlist_head.torch_paths import ShortlistHeadOutput, ranked_head_reference

logger = logging.get_logger(__name__)


@functools.cache
def triton_available() -> bool:
    """True when Triton is installed and can run here (a CUDA device, or the interpreter on CPU).

    Decided once per process: the head calls this at every draft step."""
    if importlib.util.find_spec("triton") is None:
        if torch.cuda.is_available():
            logger.warning("hf-dynaspec: Triton is not installed: the shortlisted LM head runs as PyTorch gathers "
                           "and matmuls on the GPU (slower at large vocabularies); pip install 'hf-dynaspec[triton]'")
        return False
    if os.environ.get("TRITON_INTERPRET") == "1":
        return True
    return torch.cuda.is_available()


def ranked_head_for(weight: torch.Tensor):
    """The backend of the row budget's step for a head on `weight`'s device, asked once when a runtime head is
    built. Either takes (hidden `[B, D]`, weight `[V, D]`, ranking `[C]`, sizes `[C]`, starts `[C]`,
    token_order `[V - A]`, always_ids `[A]`, columns = arange(R) `[R]`) and returns the `ShortlistHeadOutput` of
    the R + A columns (reference.ranked_row_ids says which)."""
    return _triton_ranked_head if weight.is_cuda and triton_available() else ranked_head_reference


def _triton_ranked_head(hidden, weight, ranking, sizes, starts, token_order, always_ids,
                        columns: torch.Tensor) -> ShortlistHeadOutput:
    scores, ids, *reductions = ranked_head_op(hidden, weight, ranking, sizes, starts, token_order, always_ids,
                                              columns.shape[0])
    return ShortlistHeadOutput(scores, ids, *reductions)
