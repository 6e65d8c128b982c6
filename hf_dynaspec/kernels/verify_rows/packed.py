"""oneDNN with prepacked bf16 weights: multi-row forwards at the memory bound on CPUs with AMX / AVX-512 BF16.

PyTorch's bf16 `nn.Linear` on such CPUs calls oneDNN with the weight in PyTorch's layout, and oneDNN reorders it
into its blocked layout on every call: a one-token step then reads the weight about twice. Packed once
(`torch.ops.mkldnn._reorder_linear_weight`, the op inductor's weight prepacking uses) the same product costs
about the weight's bytes at 1-17 rows (0.5B's Linear layers: 55-60 ms against 77-86 ms; benchmarks/results/
fast_cpu_72). The rows kernel is faster still at one row (~47 ms) but compute-bound from ~5 rows on these cores,
so the two are chosen per row count from measured costs (generation/costs/verify_kernel.py).

The packed copy doubles the memory of the layers it covers, so it is made only while that fits in half the
memory available (`fits`), kept on the module across calls (a generate() call routes and unroutes its target;
packing 1 GB takes ~0.3 s), rebuilt when the weight changes (its data pointer or version), and dropped by
`release(model)`.
"""

from __future__ import annotations

import functools
import os

import torch
import torch.nn as nn

_CACHE = "_dynaspec_packed_weight"  # instance attribute: (weight key, packed tensor); survives patch.disable
PACKED_FOR_ROWS = 8  # the row count oneDNN is told to expect: flat from 1 to 17 rows whether told 4, 8 or 16


@functools.cache
def available() -> bool:
    """oneDNN with native bf16 products here (AMX or AVX-512 BF16), and the packing ops in this PyTorch."""
    try:
        return (torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()
                and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
                and hasattr(torch.ops.mkldnn, "_linear_pointwise")
                and os.environ.get("ATEN_CPU_CAPABILITY", "").lower() not in ("avx2", "default"))
    except (AttributeError, RuntimeError):
        return False


def available_bytes() -> int | None:
    """MemAvailable from /proc/meminfo (Linux), None where it cannot be read."""
    try:
        with open("/proc/meminfo") as info:
            for line in info:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def fits(modules: list[nn.Linear]) -> bool:
    """Whether packed copies of these layers (not yet packed) fit in half the memory available now."""
    needed = sum(m.weight.numel() * m.weight.element_size() for m in modules if _cached(m) is None)
    free = available_bytes()
    return needed == 0 or (free is not None and needed <= free // 2)


def weight_key(module: nn.Linear) -> tuple:
    weight = module.weight
    return weight.data_ptr(), weight._version, tuple(weight.shape), weight.dtype


def _cached(module: nn.Linear) -> torch.Tensor | None:
    entry = module.__dict__.get(_CACHE)
    return entry[1] if entry is not None and entry[0] == weight_key(module) else None


def pack(weight: torch.Tensor) -> torch.Tensor:
    """A bf16 `[O, I]` weight in oneDNN's blocked layout (a new tensor of the same size)."""
    return torch.ops.mkldnn._reorder_linear_weight(weight, PACKED_FOR_ROWS)


def packed_weight(module: nn.Linear) -> torch.Tensor:
    """The module's weight in oneDNN's layout, packed once and kept until the weight changes."""
    packed = _cached(module)
    if packed is None:
        packed = pack(module.weight.detach())
        module.__dict__[_CACHE] = (weight_key(module), packed)
    return packed


def linear(x: torch.Tensor, module: nn.Linear, packed: torch.Tensor) -> torch.Tensor:
    """`module(x)` for a bf16 `x` through the packed weight (bias fused, bf16 out)."""
    rows = x.numel() // x.shape[-1]
    out = torch.ops.mkldnn._linear_pointwise(x.reshape(rows, x.shape[-1]), packed, module.bias, "none", [], "")
    return out.reshape(*x.shape[:-1], out.shape[-1])


@torch.library.custom_op("hf_dynaspec::packed_linear", mutates_args=())
def packed_linear(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None, out_features: int) -> torch.Tensor:
    """`linear` as an operator, for compiled steps: Inductor cannot lower oneDNN's product over a prepacked weight
    (its blocked layout has no strides a graph can describe), so a compile keeps it as one opaque call."""
    rows = x.numel() // x.shape[-1]
    out = torch.ops.mkldnn._linear_pointwise(x.reshape(rows, x.shape[-1]), packed, bias, "none", [], "")
    return out.reshape(*x.shape[:-1], out_features)


@packed_linear.register_fake
def _packed_linear_shape(x, packed, bias, out_features):
    return x.new_empty((*x.shape[:-1], out_features))


def compiled_linear(x: torch.Tensor, module: nn.Module) -> torch.Tensor:
    """`module(x)` through the packed copy inside a compiled step: the copy made (or checked against the weight)
    when the layer was routed, as every `fast_cpu` entry does; the check reads data pointers, which a graph cannot."""
    return torch.ops.hf_dynaspec.packed_linear(x, getattr(module, _CACHE)[1], module.bias, module.out_features)


def release(model: nn.Module) -> int:
    """Drop every packed copy held by `model`'s layers; returns how many."""
    released = 0
    for module in model.modules():
        if module.__dict__.pop(_CACHE, None) is not None:
            released += 1
    return released
