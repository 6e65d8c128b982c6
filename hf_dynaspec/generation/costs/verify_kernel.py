"""Which CPU kernel runs each few-row forward fastest here: PyTorch's default, the rows kernel
(hf_dynaspec.kernels.verify_rows) or prepacked oneDNN weights, measured once per target, device, dtype and thread
count (cached with the other costs); the context that sends an assisted call's forwards through them, and `fast_cpu`,
the same for plain `generate()`.
"""

from __future__ import annotations

import contextlib
from typing import NamedTuple

import torch
from transformers.cache_utils import DynamicCache

from hf_dynaspec.errors import require_model
from hf_dynaspec.generation.costs import store, verify_costs
from hf_dynaspec.generation.costs.timing import CONTEXT, MEASURED_SIZES, random_ids, verify_seconds
from hf_dynaspec.generation.tree_verify import cache_kwargs
from hf_dynaspec.kernels.verify_rows import packed as packed_weights
from hf_dynaspec.kernels.verify_rows import patch as verify_rows_patch
from hf_dynaspec.kernels.verify_rows.patch import NO_ROWS

LARGEST_KERNEL_ROWS = 64  # a stored answer above this was not written by fastest_kernels


class CpuKernels(NamedTuple):
    """The row counts (lo, hi) sent through the rows kernel and through prepacked oneDNN weights; `NO_ROWS`
    for none. Everything else stays on PyTorch's default kernels."""

    kernel: tuple[int, int] = NO_ROWS
    packed: tuple[int, int] = NO_ROWS

    def __bool__(self) -> bool:
        return self != NO_KERNELS


NO_KERNELS = CpuKernels()


def kernel_applies(target) -> bool:
    """A bf16 or float32 target on a CPU where the kernel builds."""

    device = target.get_input_embeddings().weight.device
    return (device.type == "cpu" and target.dtype in (torch.bfloat16, torch.float32)
            and verify_rows_patch.resolve_method() == "kernel")


def bf16_without_units(model) -> bool:
    """A bf16 model on an x86 CPU without bf16 units (neither AVX-512 BF16 nor AMX), where PyTorch multiplies its
    weights without them: there its prefill is slow and float32 decoded faster end to end (docs/quickstart.md)."""
    device = model.get_input_embeddings().weight.device
    probes = [getattr(torch.cpu, name, None) for name in
              ("_is_avx2_supported", "_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    if device.type != "cpu" or model.dtype != torch.bfloat16 or None in probes:  # a torch without the probes: no word
        return False
    avx2, bf16_dots, bf16_tiles = (probe() for probe in probes)
    return avx2 and not (bf16_dots or bf16_tiles)


def say_when_float32_is_faster(model) -> None:
    """Once per process: the dtype advice for a bf16 model on a CPU without bf16 units."""
    if bf16_without_units(model):
        store.logger.warning_once(
            "hf-dynaspec: this CPU has no bf16 units (lscpu shows neither avx512_bf16 nor amx), so a bf16 model's "
            "prefill and multi-token forwards run slowly here; on two such CPUs the 0.5B ran 1.3-2x faster end to "
            "end in float32 (dtype=torch.float32), plain and assisted (docs/quickstart.md, 'Which dtype on a CPU')")


def kernels_from_costs(sizes: list[int], seconds: dict[str, dict[int, float]]) -> CpuKernels:
    """{"native"|"kernel"|"packed": {size: seconds}} at the measured `sizes` -> the kernels: each of "kernel" and
    "packed" takes the first unbroken run of sizes where it is the fastest of the three; sizes between two measured
    ones go with the run on both sides, or, between two runs, with the later one."""
    fastest = [min(seconds, key=lambda path: seconds[path][size]) for size in sizes]
    runs = {}
    for path in ("kernel", "packed"):
        if path not in fastest:
            continue
        first = fastest.index(path)
        last = first
        while last + 1 < len(sizes) and fastest[last + 1] == path:
            last += 1
        # the first size sent its way: right after the previous measured size where that one went another non-native way
        lo = sizes[first - 1] + 1 if first > 0 and fastest[first - 1] not in ("native", path) else sizes[first]
        runs[path] = (lo, sizes[last])
    return CpuKernels(runs.get("kernel", NO_ROWS), runs.get("packed", NO_ROWS))


@torch.no_grad()
def fastest_kernels(target, largest: int = max(MEASURED_SIZES)) -> CpuKernels:
    """Measure the target's forwards over n tokens (the sizes of MEASURED_SIZES up to `largest`) on PyTorch's
    default kernels, through the rows kernel and (bf16, where oneDNN has native bf16) through prepacked weights, and
    choose per size (`kernels_from_costs`). On AVX2 CPUs the kernel wins from 2 rows; on AVX-512 BF16 / AMX CPUs it
    wins at one row and prepacked oneDNN from ~2-5 rows (the kernel is compute-bound there); in float32 the kernel
    wins where MKL's small-M path is slow."""

    if not kernel_applies(target):
        return NO_KERNELS
    device = target.get_input_embeddings().weight.device
    ids = random_ids(target, target.config.vocab_size, device)
    cache = DynamicCache()
    target(input_ids=ids[:, :CONTEXT], **cache_kwargs(target, cache), use_cache=True)
    sizes = sorted({s for s in MEASURED_SIZES if s <= largest} | {largest})
    everything = (min(sizes), max(sizes))
    settings = {"kernel": dict(min_rows=everything[0], max_rows=everything[1])}
    if target.dtype == torch.bfloat16 and packed_weights.available():
        settings["packed"] = dict(min_rows=0, max_rows=0, packed_rows=everything)
    verify_rows_patch.disable(target)
    seconds = {"native": verify_seconds(target, ids, cache, sizes, device)}
    try:
        for path, setting in settings.items():
            verify_rows_patch.enable(target, method="kernel", float32=True, **setting)
            if not verify_rows_patch.is_enabled(target):
                break  # the packed copies did not fit: nothing to measure
            seconds[path] = verify_seconds(target, ids, cache, sizes, device)
            verify_rows_patch.disable(target)
    finally:
        verify_rows_patch.disable(target)
    kernels = kernels_from_costs(sizes, seconds)
    # These are the verify costs every assistant's round costs need, on the context they measure: kept for them.
    key = verify_costs.verify_key(target, routing_description(kernels))
    verify_costs.remember(key, {**verify_costs.known_verify_seconds(key), **route_seconds(kernels, sizes, seconds)})
    return kernels


def route_seconds(kernels: CpuKernels, sizes: list[int], seconds: dict[str, dict[int, float]]) -> dict[int, float]:
    """{size: seconds} of the forwards as `kernels` route them, from `seconds` measured per path: a size in the
    rows kernel's range takes it, else one in the prepacked range takes those weights, else PyTorch's kernels
    (the order of `verify_rows.patch`'s forward)."""
    def path(size):
        for name, (lo, hi) in (("kernel", kernels.kernel), ("packed", kernels.packed)):
            if lo <= size <= hi:
                return name
        return "native"
    return {size: seconds[path(size)][size] for size in sizes}


def routing_description(kernels: CpuKernels) -> str | None:
    """What `verify_rows.patch.describe` says of a target on `kernels` (`enable_kernels`) once every layer took
    them (None: `NO_KERNELS`, nothing rerouted)."""

    return verify_rows_patch.description("kernel", kernels.kernel, kernels.packed) if kernels else None


def enable_kernels(model, kernels: CpuKernels) -> bool:
    """Send `model`'s forwards through `kernels`; False (nothing done) for `NO_KERNELS`."""

    if not kernels:
        return False
    verify_rows_patch.enable(model, min_rows=kernels.kernel[0], max_rows=kernels.kernel[1], method="kernel",
                             float32=True, packed_rows=kernels.packed)
    return verify_rows_patch.is_enabled(model)


def apply_cpu_verify(model, choice: str | None) -> str | None:
    """Send `model`'s CPU Linear layers through the kernels `choice` names ("auto": those measured fastest on this
    machine, once and cached (`measured_kernels`, as `fast_cpu` and the assistant's calls take them), so that every
    run of a command routes the same way and rounds the same way; "kernel" / "shadow": the rows kernel or float32
    shadows for every multi-row input of a bf16 model; None or "off": not at all). Returns what is in use
    (`verify_rows.patch.describe`), or None."""

    if choice in (None, "off"):
        return None
    if choice == "auto":
        enable_kernels(model, measured_kernels(model))
    else:
        verify_rows_patch.enable(model, max_rows=verify_rows_patch.ANY_ROWS, method=choice)
    return verify_rows_patch.describe(model)


def stored_kernels(entry) -> tuple[CpuKernels | None, str | None]:
    """A cache entry -> (its `CpuKernels`, None), or (None, what is wrong): each row range an int pair with
    1 <= lo <= hi <= LARGEST_KERNEL_ROWS, or [0, 0] for none."""
    def pair(rows):
        return (isinstance(rows, list) and len(rows) == 2
                and all(isinstance(n, int) and not isinstance(n, bool) for n in rows)
                and (rows == list(NO_ROWS) or 1 <= rows[0] <= rows[1] <= LARGEST_KERNEL_ROWS))
    if isinstance(entry, dict) and set(entry) == {"kernel", "packed"} and pair(entry["kernel"]) and pair(entry["packed"]):
        return CpuKernels(tuple(entry["kernel"]), tuple(entry["packed"])), None
    return None, (f'{entry!r}, expected {{"kernel": [lo, hi], "packed": [lo, hi]}} with 1 <= lo <= hi <= '
                  f"{LARGEST_KERNEL_ROWS}, or [0, 0]")


def measured_kernels(target) -> CpuKernels:
    """`fastest_kernels(target)`, measured once per target, device, dtype and thread count (cached)."""
    return store.cached("cpu_routes:" + store.digest(store.target_parts(target)), parse=stored_kernels,
                        measure=lambda: fastest_kernels(target), what="CPU kernels",
                        to_json=lambda kernels: {"kernel": list(kernels.kernel), "packed": list(kernels.packed)})


class FastCPU(contextlib.ContextDecorator):
    """What `fast_cpu(model)` returns: the model on those kernels while it lives; `undo()` or leaving a `with` block puts
    PyTorch's kernels (and the model's own generation config) back; prepacked weights stay cached on the model for
    the next call (`release_packed`). `kernels` is what was measured fastest, `NO_KERNELS` where nothing beat
    PyTorch's default kernels; `compiled` says whether generate()'s one-token steps are compiled (`compiled_steps`)."""

    def __init__(self, model, kernels: CpuKernels, compile: bool = False):
        self.model, self.kernels = model, kernels
        enable_kernels(model, kernels)
        self._saved = compiled_steps(model) if compile else None
        self.compiled = self._saved is not None

    def release_packed(self) -> int:
        """Undo, and free the prepacked weight copies (they double the memory of the layers they cover)."""

        self.undo()
        return packed_weights.release(self.model)

    def undo(self) -> None:

        verify_rows_patch.disable(self.model)
        if self._saved is not None:
            for name, value in self._saved.items():
                setattr(self.model.generation_config, name, value)
            self._saved = None

    def __enter__(self) -> FastCPU:
        return self

    def __exit__(self, *exc) -> None:
        self.undo()


def compile_refusal(model) -> str | None:
    """Why generate()'s steps cannot be compiled for `model` here, or None when they can."""
    if not getattr(model, "_can_compile_fullgraph", False):
        return f"{type(model).__name__} does not declare a compilable forward (`_can_compile_fullgraph`)"
    if getattr(model.config, "_attn_implementation", None) not in (None, "sdpa", "eager"):
        return f"its attention implementation {model.config._attn_implementation!r} does not compile on the CPU"
    if getattr(model, "hf_quantizer", None) is not None:
        return "it is quantized"
    try:  # Inductor writes C++ for the CPU: without a compiler the first step would fail inside generate()
        from torch._inductor import cpp_builder

        cpp_builder.get_cpp_compiler()
    except Exception as err:  # noqa: BLE001  (a private API: any failure means no compile here)
        return f"Inductor finds no C++ compiler here ({type(err).__name__}; install g++ or clang++)"
    return None


def compiled_steps(model) -> dict | None:
    """Have generate() run `model`'s one-token steps compiled (transformers' own auto-compile: a static cache and a
    `CompileConfig`, which it honours on a CPU only when told to), the rows kernel inside as one opaque operator
    (kernels/verify_rows/op.py). Inductor then compiles the attention, norms, rotary and residual adds around
    the fast Linear layers: eager keeps the kernels but pays ~20 ms of Python a 0.5B step; PyTorch's own compile
    drops the Python but runs PyTorch's Linear layers (benchmarks/results/compiled_91/). Prefills stay eager.

    `dynamic=None` (dynamo's automatic dynamic shapes): the first cache capacity compiles static shapes, a second
    one recompiles once with the capacity symbolic, and no later capacity recompiles; a model with sliding-window
    layers (Gemma-3: 512 tokens) recompiles once more the first time such a layer's cache is full and rolls (a prompt
    and its new tokens past the window; ~11 s for Gemma-3-270M here, benchmarks/results/round_93/sampled_gemma_warm.md).
    The first call pays the compile (a 0.5B on 2 cores: ~40 s cold, ~12 s from Inductor's on-disk cache in later
    processes; logged).
    Returns the generation-config values it replaced (for `undo`), or None where a compile does not apply (logged)."""
    from transformers import CompileConfig

    reason = compile_refusal(model)
    if reason is not None:
        store.logger.warning_once(f"hf-dynaspec: fast_cpu keeps {type(model).__name__}'s steps eager: {reason}")
        return None
    config = model.generation_config
    saved = {name: getattr(config, name, None) for name in ("cache_implementation", "compile_config")}
    config.cache_implementation = "static"
    # Not fullgraph: a forward hook of the user's (a timer's, a profiler's) runs outside the graph instead of failing
    # the call; the model's own forward compiles whole (tests/test_fast_cpu.py checks it breaks no graph).
    config.compile_config = CompileConfig(fullgraph=False, dynamic=None, mode="default")
    config.compile_config._compile_all_devices = True  # transformers auto-compiles on GPUs only unless told
    store.logger.info("hf-dynaspec: fast_cpu compiles generate()'s one-token steps on the first call (seconds to a "
                      "minute, once per process and cache capacity; `fast_cpu(model, compile=False)` opts out)")
    return saved


def fast_cpu(model, compile: bool = True) -> FastCPU:
    """Plain `model.generate()` (and any forward) on the fastest CPU kernels for its shape: one-token steps and
    few-token forwards through the rows kernel or prepacked oneDNN weights where those were measured faster than
    PyTorch's default kernels on this machine (measured once, a few seconds, cached), prefills on PyTorch's. For
    bf16 and float32 models on x86-64 CPUs with AVX2/FMA and a C compiler; anything else is left as it is
    (`kernels == NO_KERNELS`). Prepacked weights (AMX / AVX-512 BF16 hosts) are a second copy of the layers they
    cover, made only while that fits in half the free memory; `handle.release_packed()` frees them.

    `compile=True` (the default) also has generate() compile the one-token step over a static cache with those
    kernels inside (`compiled_steps`): the first call pays the compile; `compile=False` keeps the steps eager.

        with hf_dynaspec.fast_cpu(model):
            out = model.generate(**inputs)

    or `handle = fast_cpu(model)` ... `handle.undo()`. Outputs differ from PyTorch's kernels only in summation order
    (float32 accumulation both ways), the near-tie effect of any change of kernel (hf_dynaspec.check_exactness)."""

    require_model(model, "fast_cpu's model")
    say_when_float32_is_faster(model)
    if not isinstance(compile, bool):
        raise TypeError(f"fast_cpu's compile must be True or False, got {compile!r}")
    if verify_rows_patch.is_enabled(model):
        raise RuntimeError("this model's Linear layers are already rerouted (fast_cpu or verify_rows.patch.enable): "
                           "undo that first")
    applies = kernel_applies(model)
    return FastCPU(model, measured_kernels(model) if applies else NO_KERNELS, compile=compile and applies)


def target_verify_kernel(target) -> FastCPU | contextlib.nullcontext:
    """For the duration of one assisted generate() call (a context manager, yielding a `FastCPU` whose `kernels` are
    those in use): the target's few-row forwards (verification; one-token steps) on the kernels measured fastest
    here (`measured_kernels`). Nothing happens (a null context: nothing to restore when the call ends) off
    bf16/float32 CPU targets, where the kernel cannot be built, or when the target is already patched (the user's
    own `fast_cpu` or `verify_rows.patch.enable`). Long prefills keep PyTorch's kernels, and the model is restored
    when the call ends."""
    say_when_float32_is_faster(target)
    applies = kernel_applies(target) and not verify_rows_patch.is_enabled(target)
    handle = FastCPU(target, measured_kernels(target) if applies else NO_KERNELS)
    if applies and verify_rows_patch.is_enabled(target):
        return handle  # leaving it puts PyTorch's kernels back
    return contextlib.nullcontext(FastCPU(target, NO_KERNELS))
