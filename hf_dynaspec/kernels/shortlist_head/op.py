"""The Triton head as a PyTorch operator: `torch.ops.hf_dynaspec.indexed_head`.

Registered with `torch.library.custom_op` and a fake implementation (shapes and dtypes only), so that
- a fake tensor (`FakeTensorMode`, how the device paths are proven on a CPU-only build: tests/test_fake_cuda.py)
  goes through the operator without launching anything, and
- `torch.compile` traces a draft step through it as one opaque call instead of breaking the graph on Triton's
  launcher.

Registering needs no Triton; the kernel module is imported on the first real call (on a CUDA device, or on the
CPU under `TRITON_INTERPRET=1`).

Legend: B batch, D hidden, V head rows, S shortlist columns (padding included).
"""

from __future__ import annotations

import torch


@torch.library.custom_op("hf_dynaspec::indexed_head", mutates_args=())
def indexed_head_op(hidden: torch.Tensor, weight: torch.Tensor,
                    row_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """hidden `[B, D]`, weight `[V, D]`, row_ids `[S]` (-1 = padding) -> scores `[B, S]` float32, argmax `[B]`
    int64, max `[B]` float32, log-sum-exp `[B]` float32 (the Triton kernel's fused reductions)."""
    from hf_dynaspec.kernels.shortlist_head.triton_kernel import indexed_head_triton

    output = indexed_head_triton(hidden, weight, row_ids)
    return output.scores, output.argmax, output.max, output.logsumexp


@indexed_head_op.register_fake
def _indexed_head_shapes(hidden, weight, row_ids):
    batch, columns = hidden.shape[0], row_ids.shape[0]
    return (hidden.new_empty((batch, columns), dtype=torch.float32), hidden.new_empty((batch,), dtype=torch.int64),
            hidden.new_empty((batch,), dtype=torch.float32), hidden.new_empty((batch,), dtype=torch.float32))
