"""What a speculation round costs on this machine, measured once and cached: the planner's (`draft_plan="auto"`) input.

The planner (hf_dynaspec.drafting.planner) weighs draft lengths by seconds, so it needs, for the target and
assistant of a call, on this device, dtype and thread count:

- `verify_seconds[n]`: the target's forward over n new tokens on a cache of `CONTEXT` tokens (n = 1 is a plain
  decoding step; n = K + 1 verifies K drafts). Measured at a few n and interpolated. This is what differs most
  between machines: on AVX-512 BF16 CPUs 8 tokens cost ~1.2 steps, on AVX2 CPUs ~8, on GPUs ~1;
- `consume_seconds`: the drafter's pass over the newly verified positions (paid every round, drafting or not);
- `draft_step_seconds`: one more drafted token (a drafter step and the head through the call's shortlist);
- `first_draft_seconds`: the head on the pass that consumed the verified positions (the first drafted token);
- `tree_step_seconds`: one more depth of an EAGLE-2 tree of the assistant's shape (a drafter step over `tree_top_k`
  frontier rows, the head over them, the top-k choices), which prices trees for `tree_generate`'s planner.

Measuring takes a few seconds (random token ids: speed does not depend on the text); the result is kept in a
JSON file (`calibration_path()`), keyed by everything that changes it (shapes, dtype, device, threads, shortlist
options, versions), so a machine measures each pairing once. Nothing there is executable: it is plain numbers,
and they are not trusted blindly: anyone who can write the file could otherwise break or slow every call. A file
that does not parse, and an entry whose numbers are not finite, positive seconds of the right shape, are measured
again (with a logged warning naming what was wrong).

Legend: N calibration context, n tokens per forward.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from transformers.cache_utils import DynamicCache
from transformers.utils import logging

from hf_dynaspec.cache_home import home_dir
from hf_dynaspec.drafting.chain import ChainDraftSession
from hf_dynaspec.drafting.planner import extrapolated_seconds
from hf_dynaspec.drafting.tree import TreeDraftSession
from hf_dynaspec.generation.forward_args import cache_kwargs
from hf_dynaspec.kernels.streams import devices_of, synchronize
from hf_dynaspec.version import __version__

CONTEXT = 256  # cache length the costs are measured at: a typical prompt
MEASURED_SIZES = (1, 2, 3, 5, 9, 17)  # tokens per verify forward; others are interpolated
REPEATS = 3  # the minimum of repeats is kept: noise on a shared machine only ever adds time
_MEMORY: dict[str, RoundCosts] = {}
LARGEST_VERIFY_ROWS = 64  # a stored verify-rows answer above this was not written by fastest_cpu_verify_rows
logger = logging.get_logger(__name__)


@dataclass
class RoundCosts:
    """Seconds of the parts of a round (see the module docstring); `verify_seconds[n]` for n = 0..max (index 0
    unused)."""

    verify_seconds: list[float]
    consume_seconds: float
    first_draft_seconds: float
    draft_step_seconds: float
    tree_step_seconds: float | None = None  # None: not measured (trees are then not planned)

    def verify(self, num_tokens: int) -> float:
        """Seconds of a target forward over `num_tokens` new tokens (extrapolated linearly past the table)."""
        return extrapolated_seconds(self.verify_seconds, num_tokens)

    def drafting(self, num_tokens: int) -> float:
        """Seconds to draft `num_tokens` tokens with the drafter, beyond the consume pass."""
        if num_tokens <= 0:
            return 0.0
        return self.first_draft_seconds + (num_tokens - 1) * self.draft_step_seconds


def calibration_path() -> Path:
    """Where measured costs are kept: calibration.json in hf-dynaspec's cache (hf_dynaspec.cache_home)."""
    return home_dir() / "calibration.json"


def _target_parts(target) -> dict:
    head = target.get_output_embeddings().weight
    return {
        "target": type(target).__name__,
        "target_config": target.config.to_json_string(use_diff=False),
        "dtype": str(target.dtype),
        "device": str(head.device) + ("" if head.device.type != "cuda" else torch.cuda.get_device_name(head.device)),
        "threads": torch.get_num_threads(),
        "versions": [torch.__version__, __version__],
    }


def _digest(parts: dict) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


def calibration_key(target, assistant, options) -> str:
    """Everything the costs depend on: the target's and drafter's shapes and dtype, the device, the threads, the
    shortlist options, whether the target's Linear layers are rerouted (cpu_verify), and the versions."""
    from hf_dynaspec.kernels.verify_rows import patch as verify_rows_patch

    parts = {
        **_target_parts(target),
        "drafter_config": assistant.config.to_json_string(use_diff=False),
        "shortlist": [options.shortlist, options.shortlist_size, options.max_clusters, options.fixed_clusters,
                      options.max_shortlist_size],
        "tree": [options.tree_top_k, options.tree_total_tokens],
        "cpu_verify": verify_rows_patch.enabled_method(target),
    }
    return _digest(parts)


def round_costs(target, assistant, options, head, max_tokens: int) -> RoundCosts:
    """The costs for this pairing: from memory, else from the calibration file, else measured (and saved)."""
    key = f"{calibration_key(target, assistant, options)}:{max_tokens}"
    if key in _MEMORY:
        return _MEMORY[key]
    path = calibration_path()
    stored = _read(path)
    if key in stored:
        costs, problem = stored_round_costs(stored[key], max_tokens)
        if costs is not None:
            _MEMORY[key] = costs
            return costs
        logger.warning(f"hf-dynaspec: the measured costs cached in {path} for this target and assistant are "
                       f"unusable ({problem}); measuring them again (a few seconds).")
    else:
        logger.info("hf-dynaspec: measuring this machine's speculation costs for draft_plan='auto' (once per "
                    f"target, assistant, dtype, device and thread count; cached in {path})")
    costs = measure_round_costs(target, assistant, head, max_tokens, tree_top_k=options.tree_top_k,
                                tree_total_tokens=options.tree_total_tokens)
    _MEMORY[key] = costs
    stored[key] = asdict(costs)
    _write(path, stored)
    return costs


def _is_seconds(value, zero_allowed: bool) -> bool:
    """A finite number of seconds: > 0, or >= 0 with `zero_allowed` (bools are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return False
    return value >= 0 if zero_allowed else value > 0


def stored_round_costs(entry, max_tokens: int) -> tuple[RoundCosts | None, str | None]:
    """A cache entry -> (its `RoundCosts`, None) when usable for drafts of up to `max_tokens` tokens, else
    (None, what is wrong). Verify forwards must cost > 0 s (the planner divides by them); the drafter's parts may
    measure 0 (a step below the timer's resolution) but never below it, nor NaN or inf."""
    fields = {"verify_seconds", "consume_seconds", "first_draft_seconds", "draft_step_seconds", "tree_step_seconds"}
    if not isinstance(entry, dict) or set(entry) != fields:
        keys = sorted(entry) if isinstance(entry, dict) else type(entry).__name__
        return None, f"expected the fields {sorted(fields)}, found {keys}"
    table = entry["verify_seconds"]
    if not isinstance(table, list) or len(table) < 2:
        return None, "verify_seconds is not a list of seconds per verified token count"
    if len(table) < max_tokens + 2:  # as measured: index 0 unused, then 1 .. K + 1 tokens
        return None, f"verify_seconds covers {len(table) - 1} token counts, this call needs {max_tokens + 1}"
    bad = [n for n, value in enumerate(table[1:], start=1) if not _is_seconds(value, zero_allowed=False)]
    if bad:
        return None, f"verify_seconds[{bad[0]}] = {table[bad[0]]!r} is not a positive finite number of seconds"
    for name in ("consume_seconds", "first_draft_seconds", "draft_step_seconds", "tree_step_seconds"):
        if not _is_seconds(entry[name], zero_allowed=True):
            return None, f"{name} = {entry[name]!r} is not a finite number of seconds >= 0"
    return RoundCosts(**entry), None


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write(path: Path, data: dict) -> None:
    """Write atomically (a concurrent reader sees the old file or the new one); an unwritable cache only costs
    a re-measurement next time."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_text(json.dumps(data, indent=1, sort_keys=True))
        os.replace(temporary, path)
    except OSError:
        pass


def _once(thunk, devices: tuple[torch.device, ...]) -> float:
    """Seconds of one call (every CUDA device of `devices` synchronised around it)."""
    synchronize(devices)
    start = time.perf_counter()
    thunk()
    synchronize(devices)
    return time.perf_counter() - start


def _seconds(thunk, devices: tuple[torch.device, ...]) -> float:
    """Minimum over REPEATS of one call's seconds."""
    return min(_once(thunk, devices) for _ in range(REPEATS))


@torch.no_grad()
def measure_round_costs(target, assistant, head, max_tokens: int, tree_top_k: int = 4,
                        tree_total_tokens: int = 8) -> RoundCosts:
    """Measure `RoundCosts` with `verify_seconds` up to `max_tokens + 1` tokens (K drafts and the target's own),
    trees of `tree_top_k` children per node and `tree_total_tokens` nodes."""
    device = target.get_input_embeddings().weight.device
    ids = _random_ids(target, assistant.config.vocab_size, device)
    cache = DynamicCache()
    selection = assistant.drafter.hidden_state_selection()
    out = target(input_ids=ids[:, :CONTEXT], **cache_kwargs(target, cache), use_cache=True, output_hidden_states=selection)
    sizes = sorted({1, *[s for s in MEASURED_SIZES if s <= max_tokens + 1], max_tokens + 1})
    measured = _verify_seconds(target, ids, cache, sizes, device)
    verify_seconds = [0.0] + _interpolate(measured, max_tokens + 1)
    target_hidden = assistant.drafter.select_target_hidden(out.hidden_states)
    consume, first, step, tree_step = _measure_drafter(assistant, head, ids, target_hidden, device,
                                                       (tree_top_k, tree_total_tokens))
    return RoundCosts(verify_seconds, consume, first, step, tree_step)


def _random_ids(target, vocab_size: int, device) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)  # its own generator: the caller's sampling RNG is untouched
    vocab = min(target.config.vocab_size, vocab_size)
    return torch.randint(0, vocab, (1, CONTEXT + max(MEASURED_SIZES) + 2), generator=generator).to(device)


def _verify_seconds(target, ids, cache, sizes, device) -> dict[int, float]:
    """{n: seconds of a forward over n new tokens} on `cache` (holding CONTEXT tokens, restored after each).

    The repeats go round the sizes (1, 2, .., 1, 2, ..) rather than size by size: a burst of load on a shared
    machine then slows one repeat of every size instead of every repeat of one size, which would make that
    size look expensive and could turn the planner off drafting."""
    def verify(size):
        target(input_ids=ids[:, CONTEXT : CONTEXT + size], **cache_kwargs(target, cache), use_cache=True,
               position_ids=torch.arange(CONTEXT, CONTEXT + size, device=device)[None])
        cache.crop(-size)  # negative: remove the last `size` entries (every transformers release)

    devices = devices_of(target)
    for size in sizes:
        verify(size)  # warm-up: first calls at a new size pay for allocation
    measured = dict.fromkeys(sizes, float("inf"))
    for _ in range(REPEATS):
        for size in sizes:
            measured[size] = min(measured[size], _once(lambda size=size: verify(size), devices))
    return measured


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
    ids = _random_ids(target, target.config.vocab_size, device)
    cache = DynamicCache()
    target(input_ids=ids[:, :CONTEXT], **cache_kwargs(target, cache), use_cache=True)
    sizes = list(range(2, largest + 1))
    verify_rows_patch.disable(target)
    native = _verify_seconds(target, ids, cache, sizes, device)
    verify_rows_patch.enable(target, max_rows=verify_rows_patch.ANY_ROWS, method="kernel")
    try:
        kernel = _verify_seconds(target, ids, cache, sizes, device)
    finally:
        verify_rows_patch.disable(target)
    best = 0
    for size in sizes:
        if kernel[size] >= native[size]:
            break
        best = size
    return best


def _interpolate(measured: dict[int, float], largest: int) -> list[float]:
    """{n: seconds} at some n -> seconds for n = 1..largest, linear between measured sizes."""
    sizes = sorted(measured)
    values = []
    for n in range(1, largest + 1):
        low = max(s for s in sizes if s <= n)
        high = min((s for s in sizes if s >= n), default=low)
        if high == low:
            values.append(measured[low])
        else:
            weight = (n - low) / (high - low)
            values.append(measured[low] * (1 - weight) + measured[high] * weight)
    return values


def _measure_drafter(assistant, head, ids, target_hidden, device, tree_shape: tuple[int, int]):
    """(consume, first draft, one more draft step, one more tree depth) seconds, on the calibration context;
    `tree_shape`: (top_k, total_tokens) of the trees."""
    session = ChainDraftSession(assistant.drafter, vocab_size=assistant.config.vocab_size, do_sample=False, head=head)
    top_k, total_tokens = tree_shape
    trees = TreeDraftSession(assistant.drafter, assistant.config.vocab_size, top_k=top_k, depth=3,
                             total_tokens=total_tokens, head=head, chain=session)
    context = ids[:, : CONTEXT - 2]
    session.consume_verified(context, target_hidden, plan=False)  # the prompt pass, untimed
    start = session.num_verified_pairs
    verified = ids[:, : CONTEXT]  # two newly verified positions, as after a round that accepted one draft
    new_hidden = target_hidden[:, start:]

    def rewind():
        session.num_verified_pairs = start
        session.cache.crop(start)

    def consume():
        rewind()
        session.consume_verified(verified, new_hidden, plan=False)

    def draft(tokens):
        rewind()
        session.propose(verified, new_hidden, tokens)

    def tree(depth):
        rewind()
        trees.propose_tree(verified, new_hidden, max_depth=depth)

    devices = devices_of(assistant)
    consume()
    consume_seconds = _seconds(consume, devices)
    draft(1)
    one = _seconds(lambda: draft(1), devices)
    three = _seconds(lambda: draft(3), devices)
    tree(3)
    tree_one = _seconds(lambda: tree(1), devices)
    tree_three = _seconds(lambda: tree(3), devices)
    rewind()
    return (consume_seconds, max(one - consume_seconds, 0.0), max((three - one) / 2, 0.0),
            max((tree_three - tree_one) / 2, 0.0))


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
    key = "verify_rows:" + _digest(_target_parts(target))
    if key in _MEMORY:
        return _MEMORY[key]
    path = calibration_path()
    stored = _read(path)
    rows = stored.get(key)
    usable = isinstance(rows, int) and not isinstance(rows, bool) and 0 <= rows <= LARGEST_VERIFY_ROWS
    if key in stored and not usable:
        logger.warning(f"hf-dynaspec: the verify-rows choice cached in {path} is unusable ({rows!r}, expected an "
                       f"integer 0..{LARGEST_VERIFY_ROWS}); measuring it again.")
    if not usable:
        rows = fastest_cpu_verify_rows(target, largest=9)
        stored[key] = rows
        _write(path, stored)
    _MEMORY[key] = rows
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
