"""The Triton head as PyTorch operators: `torch.ops.hf_dynaspec.indexed_head` and `.ranked_head`.

Registered with `torch.library.custom_op` and fake implementations (shapes and dtypes only), so that
- a fake tensor (`FakeTensorMode`, how the device paths are proven on a CPU-only build: tests/test_fake_cuda.py)
  goes through the operator without launching anything, and
- `torch.compile` traces a draft step through it as one opaque call instead of breaking the graph on Triton's
  launcher.

Registering needs no Triton; the kernel module is imported on the first real call (on a CUDA device, or on the
CPU under `TRITON_INTERPRET=1`). Both return, after their scores (and ids), the fused reductions in the order
`ShortlistHeadOutput` takes them: argmax (column) `[B]` int64, max `[B]`, log-sum-exp `[B]`, the argmax's token
id `[B]` int64 and the top probability `[B]` (float32).

Legend: B batch, D hidden, V head rows, C clusters, A always-included ids, S columns.
"""

from __future__ import annotations

import torch

Reductions = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


@torch.library.custom_op("hf_dynaspec::indexed_head", mutates_args=())
def indexed_head_op(hidden: torch.Tensor, weight: torch.Tensor,
                    row_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                                                    torch.Tensor, torch.Tensor]:
    """hidden `[B, D]`, weight `[V, D]`, row_ids `[S]` (-1 = padding) -> scores `[B, S]` float32, then the
    reductions (module docstring)."""
    from hf_dynaspec.kernels.shortlist_head.triton_kernel import indexed_head_triton

    out = indexed_head_triton(hidden, weight, row_ids)
    return out.scores, out.argmax, out.max, out.logsumexp, out.argmax_token_ids, out.top_probability


@torch.library.custom_op("hf_dynaspec::ranked_head", mutates_args=())
def ranked_head_op(hidden: torch.Tensor, weight: torch.Tensor, ranking: torch.Tensor, sizes: torch.Tensor,
                   starts: torch.Tensor, token_order: torch.Tensor, always_ids: torch.Tensor,
                   budget_rows: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                                              torch.Tensor, torch.Tensor]:
    """The row budget's head in one launch (triton_kernel.ranked_head_triton): hidden `[B, D]`, weight `[V, D]`,
    the router's ranking `[C]`, the cluster tables, R -> scores `[B, R + A]` float32, the columns' ids
    `[R + A]` int64, then the reductions (module docstring)."""
    from hf_dynaspec.kernels.shortlist_head.triton_kernel import ranked_head_triton

    out = ranked_head_triton(hidden, weight, ranking, sizes, starts, token_order, always_ids, budget_rows)
    return out.scores, out.token_ids, out.argmax, out.max, out.logsumexp, out.argmax_token_ids, out.top_probability


def _reduction_shapes(hidden: torch.Tensor) -> Reductions:
    batch = hidden.shape[0]
    longs = [hidden.new_empty((batch,), dtype=torch.int64) for _ in range(2)]
    floats = [hidden.new_empty((batch,), dtype=torch.float32) for _ in range(3)]
    return longs[0], floats[0], floats[1], longs[1], floats[2]


@indexed_head_op.register_fake
def _indexed_head_shapes(hidden, weight, row_ids):
    return (hidden.new_empty((hidden.shape[0], row_ids.shape[0]), dtype=torch.float32), *_reduction_shapes(hidden))


@ranked_head_op.register_fake
def _ranked_head_shapes(hidden, weight, ranking, sizes, starts, token_order, always_ids, budget_rows):
    columns = budget_rows + always_ids.shape[0]
    return (hidden.new_empty((hidden.shape[0], columns), dtype=torch.float32),
            hidden.new_empty((columns,), dtype=torch.int64), *_reduction_shapes(hidden))
