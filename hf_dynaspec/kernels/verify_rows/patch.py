"""Few-row forwards at the memory bound on CPUs: verification, and one-token steps where that is faster.

PyTorch's CPU kernels are far from the memory bound at a few token rows: on AVX2-only CPUs a bf16 matrix times k
rows costs about k one-row products; on AVX-512 BF16 CPUs oneDNN's one-row product costs ~2x the weight's
bytes, and MKL's float32 small-M path costs verify(2) ~2x verify(1). `enable(model)` reroutes every CPU
`nn.Linear` of a model for inputs of `min_rows`..`max_rows` token rows; other inputs (long prefills) keep the
model's own kernels. Two ways:

- "kernel" (bf16 or float32 weights on x86-64 with AVX2/FMA): hf_dynaspec/kernels/verify_rows/bf16_rows.c streams
  each weight row once for all k rows (bf16 pairs on AVX-512 BF16), so k tokens cost about as much memory
  traffic as one, and need no extra memory.
- "packed" (bf16 weights, CPUs with AMX / AVX-512 BF16, an extra `packed_rows` range beside the kernel's):
  oneDNN with the weight prepacked once (packed.py), flat from 1 to 17 rows where the kernel is compute-bound.
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
from transformers.utils import logging

from hf_dynaspec.kernels.verify_rows import loader as cpu_rows
from hf_dynaspec.kernels.verify_rows import op as rows_op  # also registers torch.ops.hf_dynaspec.rows_matmul
from hf_dynaspec.kernels.verify_rows import packed as packed_weights

logger = logging.get_logger(__name__)
ANY_ROWS = sys.maxsize  # `max_rows` that caps nothing: every input of min_rows or more rows is rerouted
_PATCHED = "_dynaspec_verify_method"  # instance attribute on every patched module: "kernel" or "shadow"
_SHADOW = "_dynaspec_fp32_weight"  # instance attribute: (weight key, float32 copy)
_ROWS = "_dynaspec_rows"  # instance attribute on every patched module: (min_rows, max_rows, packed lo, packed hi)
NO_ROWS = (0, 0)
METHODS = ("auto", "kernel", "shadow")


def _rows(x: torch.Tensor) -> int:
    return x.numel() // x.shape[-1] if x.numel() else 0


def _shadow_weight(module: nn.Linear) -> torch.Tensor:
    """The float32 copy of the weight, remade when the weight changes (its data pointer or version), like the
    packed copy: a copy made once would keep serving old weights after an in-place load or an upcast."""
    key = packed_weights.weight_key(module)
    entry = module.__dict__.get(_SHADOW)
    if entry is None or entry[0] != key:
        entry = (key, module.weight.detach().float())
        module.__dict__[_SHADOW] = entry
    return entry[1]


def _patched_forward(module: nn.Linear, min_rows: int, max_rows: int, method: str,
                     packed_rows: tuple[int, int] = NO_ROWS):
    original = type(module).forward.__get__(module)
    if method == "shadow":
        _shadow_weight(module)  # made now, not in the first forward
    if packed_rows != NO_ROWS:
        packed_weights.packed_weight(module)

    def forward(x: torch.Tensor) -> torch.Tensor:
        rows = _rows(x)
        if torch.is_grad_enabled() or x.dtype != module.weight.dtype:
            return original(x)
        if not min_rows <= rows <= max_rows:
            # Only while the weight is still bf16 (exactness.py upcasts a patched model's weights to float32).
            if packed_rows != NO_ROWS and packed_rows[0] <= rows <= packed_rows[1] and x.dtype == torch.bfloat16:
                if torch.compiler.is_compiling():
                    return packed_weights.compiled_linear(x, module)
                return packed_weights.linear(x, module, packed_weights.packed_weight(module))
            return original(x)
        if method == "shadow":
            flat = x.reshape(rows, x.shape[-1]).float()
            out = torch.mm(_shadow_weight(module), flat.T).T  # [rows, out]: one pass over the weight for all rows
        elif torch.compiler.is_compiling():  # the operator: a compiled step traces it as one opaque call (op.py)
            out = torch.ops.hf_dynaspec.rows_matmul(x.reshape(rows, x.shape[-1]), module.weight)
        else:  # eager: the kernel itself, without the operator's dispatch (~169 calls a 0.5B step)
            out = rows_op.kernel(x.reshape(rows, x.shape[-1]), module.weight)
        if module.bias is not None:
            out = out + module.bias.float()
        return out.to(x.dtype).reshape(*x.shape[:-1], out.shape[-1])

    return forward


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


def enable(model: nn.Module, max_rows: int = 16, method: str = "auto", min_rows: int = 2,
           float32: bool = False, packed_rows: tuple[int, int] = NO_ROWS) -> int:
    """Reroute `model`'s bf16/fp16 CPU Linear layers (and float32 ones with `float32=True`, which only the kernel
    takes) for min_rows..max_rows-row inputs (`min_rows == max_rows == 0`: none), and their bf16 layers for the
    `packed_rows` (lo, hi) row counts through prepacked oneDNN weights (packed.py; only where `packed.available()`
    and the copies fit in memory, else those rows stay on PyTorch's kernels). Returns how many were patched.

    `method`: "kernel", "shadow" or "auto" (see the module docstring); fp16 weights always use "shadow".
    `min_rows` is 2 for a target, whose one-token steps stay plain PyTorch; a drafter passes 1, since the
    kernel's one-row product is also faster than PyTorch's bf16 one on AVX2 (benchmarks/kernel_one_row.py).
    """
    if not (1 <= min_rows <= max_rows or min_rows == max_rows == 0):
        raise ValueError(f"cpu_verify.enable needs 1 <= min_rows <= max_rows, got {min_rows} and {max_rows}")
    if packed_rows != NO_ROWS and not 1 <= packed_rows[0] <= packed_rows[1]:
        raise ValueError(f"cpu_verify.enable needs packed_rows (lo, hi) with 1 <= lo <= hi, got {packed_rows}")
    if method not in METHODS:
        raise ValueError(f"cpu_verify method must be one of {METHODS}, got {method!r}")
    disable(model)
    # Only CPU Linear layers of these dtypes are rerouted: a model on a GPU has none, and must not
    # pay for compiling the kernel.
    dtypes = (torch.bfloat16, torch.float16, torch.float32) if float32 else (torch.bfloat16, torch.float16)
    candidates = [m for m in model.modules() if isinstance(m, nn.Linear) and m.weight.device.type == "cpu"
                  and m.weight.dtype in dtypes]
    if not candidates:
        return 0
    method = resolve_method(method)
    if method == "shadow":  # a float32 copy of a float32 weight saves nothing
        candidates = [m for m in candidates if m.weight.dtype != torch.float32]
    packs = {id(m): m for m in candidates if m.weight.dtype == torch.bfloat16} if packed_rows != NO_ROWS else {}
    if packs and not (packed_weights.available() and packed_weights.fits(list(packs.values()))):
        logger.warning_once("hf-dynaspec: prepacked oneDNN weights are unavailable here or would not fit in half the "
                            "free memory; those forwards stay on PyTorch's kernels")
        packs = {}
    if min_rows == max_rows == 0 and not packs:
        return 0  # nothing left to patch
    patched = 0
    for module in candidates:
        module_method = "shadow" if module.weight.dtype == torch.float16 else method
        packed = packed_rows if id(module) in packs else NO_ROWS
        module.__dict__["forward"] = _patched_forward(module, min_rows, max_rows, module_method, packed)  # shadows the class method
        module.__dict__[_PATCHED] = module_method
        module.__dict__[_ROWS] = (min_rows, max_rows, *packed)
        patched += 1
    return patched


def disable(model: nn.Module) -> None:
    for module in model.modules():
        if _PATCHED in module.__dict__:
            for name in ("forward", _PATCHED, _SHADOW, _ROWS):
                module.__dict__.pop(name, None)


def is_enabled(model: nn.Module) -> bool:
    return any(_PATCHED in m.__dict__ for m in model.modules())


def enabled_method(model: nn.Module) -> str | None:
    """"kernel", "shadow", "mixed" or None (not enabled)."""
    methods = {m.__dict__[_PATCHED] for m in model.modules() if _PATCHED in m.__dict__}
    return None if not methods else methods.pop() if len(methods) == 1 else "mixed"


def describe(model: nn.Module) -> str | None:
    """What is rerouted, for cache keys and logs: e.g. "kernel:1-1+packed:2-17" (method and row counts), None when
    nothing."""
    patched = {(m.__dict__[_PATCHED], *m.__dict__[_ROWS]) for m in model.modules() if _PATCHED in m.__dict__}
    if not patched:
        return None
    return ",".join(description(method, (lo, hi), (packed_lo, packed_hi))
                    for method, lo, hi, packed_lo, packed_hi in sorted(patched))


def description(method: str, rows: tuple[int, int], packed_rows: tuple[int, int] = NO_ROWS) -> str:
    """`describe`'s text for layers rerouted by `method` for `rows` (lo, hi) and prepacked for `packed_rows`:
    what `describe` returns once every layer is rerouted so."""
    text = f"{method}:{rows[0]}-{'any' if rows[1] == ANY_ROWS else rows[1]}"
    return text + (f"+packed:{packed_rows[0]}-{packed_rows[1]}" if packed_rows[1] else "")
