"""Fast multi-token verification on CPUs without native bf16 matrix multiplies.

On CPUs without AVX-512 BF16/AMX (e.g. AVX2-only servers) PyTorch multiplies bf16 matrices row by row: a
forward over k tokens costs about k one-token forwards, which is exactly what speculative verification
cannot afford. A float32 matrix product `W @ x.T`, by contrast, reads W once for all k rows
(benchmarks/results). `enable(model)` gives every `nn.Linear` of a bf16/fp16 model a float32 shadow copy of
its weight, used only for inputs of 2..`max_rows` token rows (verification); one-token decoding and long
prefills keep the model's own kernels. Each product is accumulated in fp32 and rounded to the model's dtype,
as the bf16 kernel does, so results differ from it only in summation order: the same near-tie effect that any
multi-token forward already has (see hf_dynaspec.exactness).

Memory: the shadow weights take twice the model's bf16 weight memory. Call `enable` again after changing
weights; `disable` restores the modules.
"""

from __future__ import annotations

import torch
import torch.nn as nn

_SHADOW = "_dynaspec_fp32_weight"


def _shadow_forward(module: nn.Linear, max_rows: int):
    original = type(module).forward.__get__(module)
    weight32 = module.weight.detach().float()
    bias32 = None if module.bias is None else module.bias.detach().float()

    def forward(x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // x.shape[-1] if x.numel() else 0
        if not (1 < rows <= max_rows) or torch.is_grad_enabled() or x.dtype == torch.float32:
            return original(x)
        flat = x.reshape(rows, x.shape[-1]).float()
        out = torch.mm(weight32, flat.T).T  # [rows, out]: one pass over the weight for all rows
        if bias32 is not None:
            out = out + bias32
        return out.to(x.dtype).reshape(*x.shape[:-1], weight32.shape[0])

    return forward, weight32


def enable(model: nn.Module, max_rows: int = 16) -> int:
    """Give `model`'s Linear layers fp32 shadows for 2..max_rows-row inputs. Returns how many were patched."""
    patched = 0
    for module in model.modules():
        if isinstance(module, nn.Linear) and module.weight.dtype in (torch.bfloat16, torch.float16):
            if module.weight.device.type != "cpu":
                continue
            forward, weight32 = _shadow_forward(module, max_rows)
            module.__dict__["forward"] = forward  # instance attribute: shadows the class method
            module.__dict__[_SHADOW] = weight32
            patched += 1
    return patched


def disable(model: nn.Module) -> None:
    for module in model.modules():
        if _SHADOW in module.__dict__:
            del module.__dict__["forward"]
            del module.__dict__[_SHADOW]


def is_enabled(model: nn.Module) -> bool:
    return any(_SHADOW in m.__dict__ for m in model.modules())
