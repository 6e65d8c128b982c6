"""Whether the CPU rows kernel (hf_dynaspec.kernels.verify_rows) verifies faster than PyTorch's bf16 kernels
here, measured once per target, device, dtype and thread count (cached with the other costs), and the context that
routes an assisted call's verification forwards through it.
"""

from __future__ import annotations

import contextlib

import torch
from transformers.cache_utils import DynamicCache

from hf_dynaspec.generation.costs import store
from hf_dynaspec.generation.costs.timing import CONTEXT, random_ids, verify_seconds
from hf_dynaspec.generation.forward_args import cache_kwargs

LARGEST_VERIFY_ROWS = 64  # a stored verify-rows answer above this was not written by fastest_cpu_verify_rows


@torch.no_grad()
def fastest_cpu_verify_rows(target, largest: int = 16) -> int:
    """Measure the target's verify forwards (2..`largest` tokens) with PyTorch's own bf16 kernels and with the CPU
    rows kernel (hf_dynaspec.kernels.verify_rows); return the `max_rows` to enable the kernel with: the largest n
    such that the kernel is faster at every size up to n (0: never faster, leave it off). On AVX2 CPUs the kernel
    wins everywhere; on AVX-512 BF16 CPUs only for a few rows (native bf16 catches up at 5-6)."""
    from hf_dynaspec.kernels.verify_rows import patch as verify_rows_patch

    device = target.get_input_embeddings().weight.device
    if device.type != "cpu" or target.dtype != torch.bfloat16 or not verify_rows_patch.resolve_method() == "kernel":
        return 0
    ids = random_ids(target, target.config.vocab_size, device)
    cache = DynamicCache()
    target(input_ids=ids[:, :CONTEXT], **cache_kwargs(target, cache), use_cache=True)
    sizes = list(range(2, largest + 1))
    verify_rows_patch.disable(target)
    native = verify_seconds(target, ids, cache, sizes, device)
    verify_rows_patch.enable(target, max_rows=verify_rows_patch.ANY_ROWS, method="kernel")
    try:
        kernel = verify_seconds(target, ids, cache, sizes, device)
    finally:
        verify_rows_patch.disable(target)
    best = 0
    for size in sizes:
        if kernel[size] >= native[size]:
            break
        best = size
    return best



def apply_cpu_verify(model, choice: str | None) -> str | None:
    """Route `model`'s bf16 CPU Linear layers through the rows kernel as `choice` says ("auto": for the row counts
    where `fastest_cpu_verify_rows` measured it faster; "kernel" / "shadow": for every multi-row input; None or
    "off": not at all). Returns what is in use, e.g. "kernel<=5", or None."""
    from hf_dynaspec.kernels.verify_rows import patch as verify_rows_patch

    if choice in (None, "off"):
        return None
    if choice == "auto":
        rows = fastest_cpu_verify_rows(model)
        if rows < 2:
            return None
        verify_rows_patch.enable(model, max_rows=rows, method="kernel")
        return f"kernel<={rows}"
    verify_rows_patch.enable(model, max_rows=verify_rows_patch.ANY_ROWS, method=choice)
    return verify_rows_patch.enabled_method(model)


def measured_verify_rows(target) -> int:
    """`fastest_cpu_verify_rows(target)`, measured once per target, device, dtype and thread count (cached)."""
    key = "verify_rows:" + store.digest(store.target_parts(target))
    if key in store.MEMORY:
        return store.MEMORY[key]
    path = store.calibration_path()
    stored = store.read_store(path)
    rows = stored.get(key)
    usable = isinstance(rows, int) and not isinstance(rows, bool) and 0 <= rows <= LARGEST_VERIFY_ROWS
    if key in stored and not usable:
        store.logger.warning(f"hf-dynaspec: the verify-rows choice cached in {path} is unusable ({rows!r}, expected an "
                       f"integer 0..{LARGEST_VERIFY_ROWS}); measuring it again.")
    if not usable:
        rows = fastest_cpu_verify_rows(target, largest=9)
        stored[key] = rows
        store.write_store(path, stored)
    store.MEMORY[key] = rows
    return rows


@contextlib.contextmanager
def target_verify_kernel(target):
    """For the duration of one assisted generate() call: the target's 2..n-row forwards (verification) through the
    CPU rows kernel, n the largest row count where it was measured faster than PyTorch's bf16 here. Nothing
    happens off bf16 CPU targets, where the kernel cannot be built, or when the target is already routed (the
    user's own `verify_rows.patch.enable`). One-token steps and long prefills keep PyTorch's kernels, and the
    model is restored when the call ends."""
    from hf_dynaspec.kernels.verify_rows import patch as verify_rows_patch

    device = target.get_input_embeddings().weight.device
    applies = (device.type == "cpu" and target.dtype == torch.bfloat16 and not verify_rows_patch.is_enabled(target)
               and verify_rows_patch.resolve_method() == "kernel")
    rows = measured_verify_rows(target) if applies else 0
    if rows < 2:
        yield 0
        return
    verify_rows_patch.enable(target, max_rows=rows, method="kernel")
    try:
        yield rows
    finally:
        verify_rows_patch.disable(target)
