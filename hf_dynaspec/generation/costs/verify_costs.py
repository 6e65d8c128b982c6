"""The target's verify forwards' costs: one table per target and CPU routing, shared by every assistant.

A verify forward's cost depends on the target, its CPU routing (`verify_rows.patch.describe`) and the
machine, not on the assistant. So the round costs of every assistant configuration (round_costs, lattice_costs)
read one table, and the CPU route measurement (verify_kernel), which times the same forwards on the same
calibration context, seeds it. A first call then times each size once, not once per assistant and again for the
routes (it was six passes over the sizes in the README's first call on the 0.5B, a third of its time).

Kept in the cost cache (store) as {"n": seconds} under "verify:" + a digest of the target's parts and its routing.
An entry is checked before use like every other (an unusable one is logged and measured again); sizes a call
needs that no earlier call measured are measured and added.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from hf_dynaspec.generation.costs import store
from hf_dynaspec.generation.costs.timing import MEASURED_SIZES, interpolate, verify_seconds
from hf_dynaspec.kernels.verify_rows import patch as verify_rows_patch

LARGEST_SIZE = 4096  # tokens in one verify forward: a stored size above this was not written by this module
_SIZE = re.compile(r"[1-9][0-9]{0,3}")


def verify_key(target, routing: str | None) -> str:
    """The cache key of `target`'s verify costs when its Linear layers are routed as `routing` describes."""
    return "verify:" + store.digest({**store.target_parts(target), "cpu_verify": routing})


def stored_verify_seconds(entry) -> tuple[dict[int, float] | None, str | None]:
    """A cache entry -> ({n: seconds}, None) when every size is a token count and every cost positive finite
    seconds (the planner divides by them), else (None, what is wrong)."""
    if not isinstance(entry, dict):
        return None, f"expected {{token count: seconds}}, found {type(entry).__name__}"
    known = {}
    for size, seconds in entry.items():
        if not (isinstance(size, str) and _SIZE.fullmatch(size) and int(size) <= LARGEST_SIZE):
            return None, f"{size!r} is not a token count from 1 to {LARGEST_SIZE}"
        if not store.is_seconds(seconds, zero_allowed=False):
            return None, f"verify_seconds[{size}] = {seconds!r} is not a positive finite number of seconds"
        known[int(size)] = float(seconds)
    return known, None


def known_verify_seconds(key: str) -> dict[int, float]:
    """{n: seconds} measured before under `key` (this process, else the cache file); {} when none is usable."""
    if key not in store.MEMORY:
        known = store.read_entry(store.calibration_path(), key, stored_verify_seconds, "verify costs")
        if known is None:
            return {}
        store.MEMORY[key] = known
    return dict(store.MEMORY[key])


def remember(key: str, known: dict[int, float]) -> None:
    """Keep `known` ({n: seconds}) under `key`, in this process and in the cache file."""
    store.MEMORY[key] = dict(known)
    store.keep(store.calibration_path(), key, {str(size): seconds for size, seconds in sorted(known.items())})


def verify_table(target, ids, cache, largest: int, device, prefill: Callable[[], object] | None = None) -> list[float]:
    """Seconds of a verify forward over n = 0..`largest` tokens (index 0 unused: 0.0), at the sizes of
    MEASURED_SIZES up to `largest` (and at `largest`), linear between them: the sizes known for this target and
    routing are read, the others measured (`timing.verify_seconds` on `cache`, holding CONTEXT tokens of `ids`,
    or filled by `prefill()` first when given) and kept."""
    sizes = sorted({1, *[s for s in MEASURED_SIZES if s <= largest], largest})
    key = verify_key(target, verify_rows_patch.describe(target))
    known = known_verify_seconds(key)
    missing = [size for size in sizes if size not in known]
    if missing:
        if prefill is not None:
            prefill()
        known.update(verify_seconds(target, ids, cache, missing, device))
        remember(key, known)
    return [0.0] + interpolate({size: known[size] for size in sizes}, largest)
