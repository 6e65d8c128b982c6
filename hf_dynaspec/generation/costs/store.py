"""The cache of measured costs: one JSON file of plain numbers (`calibration_path()`), one in-process memory, and
the checks an entry passes before it is used.

Nothing in the file is executable, and it is not trusted blindly: anyone who can write it could otherwise break
or slow every call. A file that does not parse is an empty cache; an entry whose numbers are not finite seconds of
the right shape is measured again, with a logged warning naming what was wrong (the callers' `parse` functions
say what is wrong; `cached` does the rest). Keys are digests of everything a cost depends on (`target_parts`:
shapes, dtype, device, threads, versions; plus what the caller adds).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from transformers.utils import logging

from hf_dynaspec.cache_home import home_dir
from hf_dynaspec.kernels.verify_rows import patch as verify_rows_patch
from hf_dynaspec.version import __version__

MEMORY: dict[str, Any] = {}  # key -> costs already read or measured in this process
logger = logging.get_logger(__name__)


def calibration_path() -> Path:
    """Where measured costs are kept: calibration.json in hf-dynaspec's cache (hf_dynaspec.cache_home)."""
    return home_dir() / "calibration.json"


def target_parts(target) -> dict:
    """What a target's costs depend on: its class and config, dtype, device (and card; on a CPU the instruction set
    PyTorch and oneDNN use, which ATEN_CPU_CAPABILITY / ONEDNN_MAX_CPU_ISA can lower), threads, versions."""
    head = target.get_output_embeddings().weight
    cpu = None
    if head.device.type == "cpu":
        cpu = [torch.backends.cpu.get_cpu_capability(), os.environ.get("ONEDNN_MAX_CPU_ISA", "")]
    return {
        "cpu": cpu,
        "target": type(target).__name__,
        "target_config": target.config.to_json_string(use_diff=False),
        "dtype": str(target.dtype),
        "device": str(head.device) + ("" if head.device.type != "cuda" else torch.cuda.get_device_name(head.device)),
        "threads": torch.get_num_threads(),
        "versions": [torch.__version__, __version__],
    }


def digest(parts: dict) -> str:
    """A short stable key for `parts` (JSON-serialisable)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


def round_key(target, **parts) -> str:
    """The digest of what a round's costs depend on: the target's parts, whether its Linear layers are rerouted
    (cpu_verify) and `parts`, what the caller's drafter adds (its config, the options that change its work)."""
    return digest({**target_parts(target), "cpu_verify": verify_rows_patch.describe(target), **parts})


def is_seconds(value, zero_allowed: bool) -> bool:
    """A finite number of seconds: > 0, or >= 0 with `zero_allowed` (bools are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return False
    return value >= 0 if zero_allowed else value > 0


def read_store(path: Path) -> dict:
    """The cache file's entries; {} when it is missing or does not parse as a JSON object."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_store(path: Path, data: dict) -> None:
    """Write atomically (a concurrent reader sees the old file or the new one); an unwritable cache only costs
    a re-measurement next time."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_text(json.dumps(data, indent=1, sort_keys=True))
        os.replace(temporary, path)
    except OSError:
        pass


def keep(path: Path, key: str, entry) -> None:
    """Write `entry` under `key` into the file as it is now: read again, since what was read before a measurement
    may have changed during it (a measurement keeps costs of its own; another process writes its own)."""
    stored = read_store(path)
    stored[key] = entry
    write_store(path, stored)


def read_entry(path: Path, key: str, parse: Callable[[Any], tuple[Any, str | None]], what: str) -> Any:
    """`parse`d costs of the entry under `key` in the file at `path`; None when there is none, or when `parse`
    returns (None, what is wrong), which is logged (naming `what`) so that the caller measures again."""
    stored = read_store(path)
    if key not in stored:
        return None
    costs, problem = parse(stored[key])
    if costs is None:
        logger.warning(f"hf-dynaspec: the {what} cached in {path} are unusable ({problem}); measuring them "
                       "again (a few seconds).")
    return costs


def cached(key: str, parse: Callable[[Any], tuple[Any, str | None]], measure: Callable[[], Any],
           to_json: Callable[[Any], Any], what: str) -> Any:
    """The costs under `key`: from memory, else from the cache file when `parse(entry)` -> (costs, None) accepts
    its entry (`read_entry`), else `measure()`d and saved as `to_json(costs)`."""
    if key in MEMORY:
        return MEMORY[key]
    path = calibration_path()
    costs = read_entry(path, key, parse, what)
    if costs is None:
        logger.info(f"hf-dynaspec: measuring this machine's {what} (once per target, drafter, dtype, device and "
                    f"thread count; cached in {path})")
        costs = measure()
        keep(path, key, to_json(costs))
    MEMORY[key] = costs
    return costs


def stored_costs(kind, entry, max_tokens: int) -> tuple[Any, str | None]:
    """A cache entry -> (`kind(**entry)`, None) when usable for drafts of up to `max_tokens` tokens, else (None,
    what is wrong). `kind` is a costs dataclass (`RoundCosts`, `LatticeCosts`): the entry holds exactly its fields;
    `verify_seconds` (index 0 unused) positive finite seconds (the planner divides by them) for 1 .. `max_tokens`
    + 1 tokens; every other field finite seconds >= 0 (a drafter's part may measure 0, below the timer's
    resolution, but never below it, nor NaN or inf)."""
    fields = {field.name for field in dataclasses.fields(kind)}
    if not isinstance(entry, dict) or set(entry) != fields:
        keys = sorted(entry) if isinstance(entry, dict) else type(entry).__name__
        return None, f"expected the fields {sorted(fields)}, found {keys}"
    table = entry["verify_seconds"]
    if not isinstance(table, list) or len(table) < 2:
        return None, "verify_seconds is not a list of seconds per verified token count"
    if len(table) < max_tokens + 2:  # as measured: index 0 unused, then 1 .. K + 1 tokens
        return None, f"verify_seconds covers {len(table) - 1} token counts, this call needs {max_tokens + 1}"
    bad = [n for n, value in enumerate(table[1:], start=1) if not is_seconds(value, zero_allowed=False)]
    if bad:
        return None, f"verify_seconds[{bad[0]}] = {table[bad[0]]!r} is not a positive finite number of seconds"
    for name in sorted(fields - {"verify_seconds"}):
        if not is_seconds(entry[name], zero_allowed=True):
            return None, f"{name} = {entry[name]!r} is not a finite number of seconds >= 0"
    return kind(**entry), None


def cached_costs(kind, key: str, max_tokens: int, measure: Callable[[], Any], what: str) -> Any:
    """`cached` costs of dataclass `kind`, an entry checked by `stored_costs` for drafts of up to `max_tokens`."""
    return cached(key, parse=lambda entry: stored_costs(kind, entry, max_tokens), measure=measure,
                  to_json=dataclasses.asdict, what=what)
