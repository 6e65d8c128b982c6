"""Learning-rate schedule, precision and snapshots for recipes.train_drafter.

A data curve trains one run per data kind at a constant rate (warmup-stable-decay without the decay), keeps a
snapshot of the whole training state where each budget's decay begins, and finishes each budget as a short branch
that decays the rate to 0 over its last tokens: every point gets an annealed drafter at the cost of one run plus
the decays, instead of one cosine run per budget.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch


def take_snapshot(checkpoint: Path, snapshot: Path) -> None:
    """A copy of the saved training state (weights, optimizer, scheduler, position) to branch from later."""
    if snapshot.exists():
        shutil.rmtree(snapshot)
    shutil.copytree(checkpoint, snapshot / "checkpoint")


def start_from_snapshot(snapshot: Path, checkpoint: Path) -> None:
    """Seed a fresh run's checkpoint with a snapshot (take_snapshot's directory or its checkpoint/)."""
    source = snapshot / "checkpoint" if (snapshot / "checkpoint").is_dir() else snapshot
    if not (source / "progress.json").is_file():
        raise SystemExit(f"--resume-from {snapshot}: no training state there (expected a train_drafter snapshot "
                         "directory, OUT/snapshots/tokens_N)")
    shutil.copytree(source, checkpoint)


def wsd_factor(step: int, tokens: int, warmup_steps: int, max_tokens: int, decay_tokens: int) -> float:
    """Warmup-stable-decay: linear warmup over steps, then 1, then linear to 0 over the last `decay_tokens`
    before `max_tokens` (by tokens seen, so that every branch of a data curve decays over its own budget)."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if decay_tokens and tokens > max_tokens - decay_tokens:
        return max(0.0, (max_tokens - tokens) / decay_tokens)
    return 1.0


def parse_token_counts(text: str) -> list[int]:
    """"100000,250000" -> [100000, 250000]."""
    try:
        return sorted(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise SystemExit(f"--snapshot-at-tokens takes comma-separated integers, got {text!r}") from None


def native_cpu_bf16() -> bool:
    """Whether this CPU multiplies bf16 natively (the flags the README's host kinds name)."""
    from hf_dynaspec.bench.results_table import host_description

    return bool({"avx512_bf16", "amx_bf16"} & set(host_description()["cpu_flags"]))


def native_dtype(device: torch.device) -> str:
    """The fastest precision `device` computes natively: "bf16" on GPUs with bf16 tensor cores (sm_80+) and on CPUs
    that multiply bf16 natively (avx512_bf16 / AMX), "fp16" on older GPUs (a T4), "fp32" on other CPUs (AVX2 runs bf16
    products ~6x slower)."""
    if device.type == "cuda":
        # torch.cuda.is_bf16_supported() is True on a T4 (sm_75) too, where bf16 is emulated: fp16 there.
        return "bf16" if torch.cuda.get_device_capability(device) >= (8, 0) else "fp16"
    return "bf16" if native_cpu_bf16() else "fp32"


def training_precision(choice: str) -> str:
    """accelerate's mixed_precision for --mixed-precision (auto: `native_dtype` of the device accelerate trains on,
    "no" for fp32)."""
    if choice != "auto":
        return choice
    precision = native_dtype(torch.device("cuda" if torch.cuda.is_available() else "cpu"))
    return "no" if precision == "fp32" else precision
