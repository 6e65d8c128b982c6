"""Fast multi-token verification on CPUs without native bf16 matrix multiplies.

On CPUs without AVX-512 BF16/AMX (e.g. AVX2-only servers) PyTorch multiplies bf16 matrices row by row: a
forward over k tokens costs about k one-token forwards, which is exactly what speculative verification
cannot afford. `enable(model)` reroutes every bf16/fp16 `nn.Linear` of a model for inputs of 2..`max_rows`
token rows (verification); one-token decoding and long prefills keep the model's own kernels. Two ways:

- "kernel" (bf16 weights on x86-64 with AVX2/FMA): hf_dynaspec/kernels/verify_rows/bf16_rows.c streams each bf16 weight
  row once for all k rows, so verifying k tokens costs about as much memory traffic as one token, and
  needs no extra memory.
- "shadow": a float32 copy of each weight, multiplied as `W @ x.T` (one pass over W for all rows). It reads
  twice the bytes of the bf16 weight and doubles the weight memory; it is the fallback where the kernel
  cannot be built, and the only way for fp16 weights.

Both accumulate in fp32 and round to the model's dtype, as PyTorch's bf16 kernels do, so results differ from
them only in summation order: the same near-tie effect that any multi-token forward already has (see
hf_dynaspec.exactness). Measurements: benchmarks/results/NOTEBOOK.md.
"""

from __future__ import annotations

import sys

import torch
import torch.nn as nn

from hf_dynaspec.kernels.verify_rows import loader as cpu_rows

ANY_ROWS = sys.maxsize  # `max_rows` that caps nothing: every input of min_rows or more rows is rerouted
_PATCHED = "_dynaspec_verify_method"  # instance attribute on every patched module: "kernel" or "shadow"
_SHADOW = "_dynaspec_fp32_weight"
METHODS = ("auto", "kernel", "shadow")


def _rows(x: torch.Tensor) -> int:
    return x.numel() // x.shape[-1] if x.numel() else 0


def _patched_forward(module: nn.Linear, min_rows: int, max_rows: int, method: str):
    original = type(module).forward.__get__(module)
    shadow = module.weight.detach().float() if method == "shadow" else None

    def forward(x: torch.Tensor) -> torch.Tensor:
        rows = _rows(x)
        if not (min_rows <= rows <= max_rows) or torch.is_grad_enabled() or x.dtype == torch.float32:
            return original(x)
        if shadow is not None:
            flat = x.reshape(rows, x.shape[-1]).float()
            out = torch.mm(shadow, flat.T).T  # [rows, out]: one pass over the weight for all rows
        else:
            out = cpu_rows.bf16_rows_matmul(x.reshape(rows, x.shape[-1]), module.weight)
        if module.bias is not None:
            out = out + module.bias.float()
        return out.to(x.dtype).reshape(*x.shape[:-1], out.shape[-1])

    return forward, shadow


def resolve_method(method: str = "auto") -> str:
    """"auto" -> "kernel" where the CPU kernel builds and runs here, else "shadow"."""
    if method not in METHODS:
        raise ValueError(f"cpu_verify method must be one of {METHODS}, got {method!r}")
    if method == "auto":
        return "kernel" if cpu_rows.available() else "shadow"
    if method == "kernel" and not cpu_rows.available():
        raise RuntimeError("the CPU verification kernel is unavailable here (it needs x86-64 with AVX2 and FMA and "
                           "a C compiler, `cc` or $CC); use method='shadow'")
    return method


def enable(model: nn.Module, max_rows: int = 16, method: str = "auto", min_rows: int = 2) -> int:
    """Reroute `model`'s bf16/fp16 CPU Linear layers for min_rows..max_rows-row inputs. Returns how many were
    patched.

    `method`: "kernel", "shadow" or "auto" (see the module docstring); fp16 weights always use "shadow".
    `min_rows` is 2 for a target, whose one-token steps stay plain PyTorch; a drafter passes 1, since the
    kernel's one-row product is also faster than PyTorch's bf16 one on AVX2 (benchmarks/kernel_one_row.py).
    """
    if not 1 <= min_rows <= max_rows:
        raise ValueError(f"cpu_verify.enable needs 1 <= min_rows <= max_rows, got {min_rows} and {max_rows}")
    if method not in METHODS:
        raise ValueError(f"cpu_verify method must be one of {METHODS}, got {method!r}")
    disable(model)
    # Only bf16/fp16 Linear layers on the CPU are rerouted: a model on a GPU (or in fp32) has none, and must not
    # pay for compiling the kernel.
    candidates = [m for m in model.modules() if isinstance(m, nn.Linear) and m.weight.device.type == "cpu"
                  and m.weight.dtype in (torch.bfloat16, torch.float16)]
    if not candidates:
        return 0
    method = resolve_method(method)
    patched = 0
    for module in candidates:
        module_method = method if module.weight.dtype == torch.bfloat16 else "shadow"
        forward, shadow = _patched_forward(module, min_rows, max_rows, module_method)
        module.__dict__["forward"] = forward  # instance attribute: shadows the class method
        module.__dict__[_PATCHED] = module_method
        if shadow is not None:
            module.__dict__[_SHADOW] = shadow
        patched += 1
    return patched


def disable(model: nn.Module) -> None:
    for module in model.modules():
        if _PATCHED in module.__dict__:
            for name in ("forward", _PATCHED, _SHADOW):
                module.__dict__.pop(name, None)


def is_enabled(model: nn.Module) -> bool:
    return any(_PATCHED in m.__dict__ for m in model.modules())


def enabled_method(model: nn.Module) -> str | None:
    """"kernel", "shadow", "mixed" or None (not enabled)."""
    methods = {m.__dict__[_PATCHED] for m in model.modules() if _PATCHED in m.__dict__}
    return None if not methods else methods.pop() if len(methods) == 1 else "mixed"
