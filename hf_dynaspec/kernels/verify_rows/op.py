"""The rows kernel as a PyTorch operator: `torch.ops.hf_dynaspec.rows_matmul`.

The kernel is a ctypes call (loader.py), which `torch.compile` cannot trace: a step that called it directly broke
its graph at every Linear layer, so a compiled step had either the fast kernels or the compiler's fused rest, never
both. Registered with `torch.library.custom_op` and a fake implementation (shapes and dtypes only), the kernel is
one opaque call inside a compiled graph, and Inductor compiles the attention, norms, rotary and residual adds
around it (as the shortlist head's Triton operators are: kernels/shortlist_head/op.py).
"""

from __future__ import annotations

import torch

from hf_dynaspec.kernels.verify_rows import loader


def kernel(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x `[R, I]` (bf16 or float32) times `weight.T`, weight `[O, I]` bf16 or float32 -> float32 `[R, O]`, the
    weight read once for all R rows (loader.bf16_rows_matmul / f32_rows_matmul)."""
    if weight.dtype == torch.float32:
        return loader.f32_rows_matmul(x, weight)
    return loader.bf16_rows_matmul(x, weight)


@torch.library.custom_op("hf_dynaspec::rows_matmul", mutates_args=())
def rows_matmul(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """`kernel` as an operator."""
    return kernel(x, weight)


@rows_matmul.register_fake
def _rows_matmul_shape(x, weight):
    return x.new_empty((x.shape[0], weight.shape[0]), dtype=torch.float32)
