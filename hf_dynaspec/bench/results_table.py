"""One keyed results table for every benchmark: a JSON-lines file, one record per measured (benchmark, method).

Each record says what was measured and where, so that results never carry their schema in a file name:
`benchmark`, `method`, `target`, `assistant_version`, `host` (CPU model, the bf16-relevant flags, cores),
`torch` / `transformers` / `hf_dynaspec` versions, `date` (UTC), `command`, and the benchmark's `metrics`.
Timings are comparable only between records with the same `host.cpu_flags` (AVX-512 BF16 vs AVX2 hosts differ
by up to k times in verification cost): filter on it before comparing.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import shlex
import sys
from pathlib import Path

# The flags that decide how bf16 matrix products run on a CPU (see README, "Hosts differ").
BF16_FLAGS = ("amx_bf16", "avx512_bf16", "avx512f", "avx2")


def host_description() -> dict:
    """CPU model, its bf16-relevant flags and the cores this process may use."""
    flags, model = set(), platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
            elif line.startswith("model name") and not model:
                model = line.split(":", 1)[1].strip()
    except OSError:
        pass
    return {"cpu": model, "cpu_flags": [f for f in BF16_FLAGS if f in flags],
            "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()}


def make_record(benchmark: str, method: str, metrics: dict, *, target: str | None = None,
                assistant_version: str | None = None, command: str | None = None) -> dict:
    import torch
    import transformers

    from hf_dynaspec.version import __version__

    return {
        "benchmark": benchmark, "method": method, "target": target, "assistant_version": assistant_version,
        "host": host_description(), "torch": torch.__version__, "transformers": transformers.__version__,
        "hf_dynaspec": __version__, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": command if command is not None else shlex.join(sys.argv), "metrics": metrics,
    }


def append_records(path: str | os.PathLike, records: list[dict]) -> None:
    """Append `records` to the table at `path` (created with its folder if missing)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as table:
        for record in records:
            table.write(json.dumps(record, sort_keys=True) + "\n")


def read_records(path: str | os.PathLike, **match) -> list[dict]:
    """The table's records whose top-level fields equal `match` (e.g. benchmark="shortlist_head")."""
    records = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    return [r for r in records if all(r.get(k) == v for k, v in match.items())]
