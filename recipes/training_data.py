"""Cached target features as training data: shards -> sequences -> shuffled, padded batches for recipes.train_drafter.

The shards are recipes.build_features' (or recipes.self_distill --features-out's); each batch step is located by a
BatchSchedule, so a resumed run, or a branch from a snapshot, takes exactly the batches an uninterrupted run would.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file


@dataclass
class Sequence:
    """One cached conversation: ids `[T]`, target features `[T, D]`, target top-k `[T, k]` (ids, log-probs),
    `response` `[T]` bool (True from the first response token on), and for fused drafters the target's
    fused-layer states `[T, n*D]` (else None)."""

    input_ids: torch.Tensor
    hidden: torch.Tensor
    topk_ids: torch.Tensor
    topk_logp: torch.Tensor
    response: torch.Tensor
    fused: torch.Tensor | None = None


SHARD_FIELDS = ("input_ids", "hidden", "topk_ids", "topk_logp", "response_mask")


def load_sequences(shard: Path, fused: bool = False) -> list[Sequence]:
    """The shard's sequences of 3 tokens or more; with `fused`, with their `fused_hidden` rows."""
    tensors = load_file(str(shard))
    fields = SHARD_FIELDS + (("fused_hidden",) if fused else ())
    missing = [name for name in fields if name not in tensors]
    if missing:
        hint = ("build the features with --fused-hidden-states" if missing == ["fused_hidden"] else "rebuild it")
        raise SystemExit(f"{shard}: not a recipes.build_features shard for this drafter (missing {missing}); {hint}")
    offsets = tensors["offsets"].tolist()
    return [
        Sequence(*(tensors[name][start:end] for name in fields))
        for start, end in zip(offsets[:-1], offsets[1:])
        if end - start >= 3
    ]


def feature_shards(sources: list[Path], fused_ids: list[int] | None = None) -> list[Path]:
    """Finished shards of every source, in order (the first source's first shard first).

    A source is a recipes.build_features output directory or one of its shard files. Naming a shard file first
    and its directory later holds out validation from that shard (say, one the previous version never saw)
    while the directory's other shards still train; a shard named twice is used once, where it first appears.

    With `fused_ids` (a fused drafter's `fused_hidden_state_ids`) every source must have been built with
    the same `--fused-hidden-states`: other layers side by side would silently feed the wrong states."""
    shards: list[Path] = []
    seen: set[Path] = set()
    for source in map(Path, sources):
        if source.is_file():
            if not source.name.startswith("shard_") or source.suffix != ".safetensors":
                raise SystemExit(f"{source}: not a features directory or a shard_*.safetensors file")
            directory, found = source.parent, [source]
        else:
            directory, found = source, sorted(source.glob("shard_*.safetensors"))
            if not found:
                raise SystemExit(f"{source}: no finished shard_*.safetensors (run recipes.build_features first)")
        if fused_ids:
            meta_file = directory / "meta.json"
            built = json.loads(meta_file.read_text()).get("fused_hidden_state_ids") if meta_file.is_file() else None
            if built != list(fused_ids):
                raise SystemExit(f"{source} holds fused hidden states {built}, the drafter fuses {list(fused_ids)}: "
                                 f"rebuild it with build_features --fused-hidden-states "
                                 f"{','.join(map(str, fused_ids))}")
        for shard in found:
            if shard.resolve() not in seen:
                seen.add(shard.resolve())
                shards.append(shard)
    return shards


def split_held_out(shards: list[Path], val_tokens: int, fused: bool = False) -> tuple[list[Sequence], list[Sequence]]:
    """(held-out, training) sequences: the first sequences of the first shard up to `val_tokens` are held out,
    everything else trains. Validate on the data that matters most (put self-distilled features first)."""
    first = load_sequences(shards[0], fused)
    held_out, tokens = [], 0
    while first and tokens < val_tokens:
        held_out.append(first.pop(0))
        tokens += len(held_out[-1].input_ids)
    train = first + [s for shard in shards[1:] for s in load_sequences(shard, fused)]
    if not train:
        raise SystemExit(f"nothing left to train on after holding out {tokens} tokens: build more features")
    return held_out, train


def make_batches(sequences: list[Sequence], tokens_per_batch: int, seed: int) -> list[list[Sequence]]:
    """Shuffled batches of similar-length sequences with about `tokens_per_batch` padded tokens each."""
    generator = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(sequences), generator=generator).tolist()
    batches: list[list[Sequence]] = []
    # Sort within windows of 64 so that padding stays small but batches still mix sources.
    for window_start in range(0, len(order), 64):
        window = sorted(order[window_start : window_start + 64], key=lambda i: len(sequences[i].input_ids))
        batch: list[Sequence] = []
        for i in window:
            longest = max([len(s.input_ids) for s in batch] + [len(sequences[i].input_ids)])
            if batch and longest * (len(batch) + 1) > tokens_per_batch:
                batches.append(batch)
                batch = []
            batch.append(sequences[i])
        if batch:
            batches.append(batch)
    shuffle = torch.randperm(len(batches), generator=generator).tolist()
    return [batches[i] for i in shuffle]


class BatchSchedule:
    """Which batches each optimizer step takes: epoch e is make_batches(seed + e), dealt round-robin to processes.

    Epochs hold different numbers of batches (packing follows each epoch's shuffle), so a step is located by
    counting every epoch's own batches; a fixed steps-per-epoch from epoch 0 runs past a shorter later epoch.
    """

    def __init__(self, sequences: list[Sequence], tokens_per_batch: int, seed: int, num_processes: int = 1):
        self.sequences, self.tokens_per_batch, self.seed = sequences, tokens_per_batch, seed
        self.num_processes = num_processes
        self._steps: dict[int, int] = {}
        self._batches: tuple[int, list[list[Sequence]]] | None = None  # only the current epoch is kept

    def _epoch(self, epoch: int) -> list[list[Sequence]]:
        if self._batches is None or self._batches[0] != epoch:
            self._batches = (epoch, make_batches(self.sequences, self.tokens_per_batch, self.seed + epoch))
        return self._batches[1]

    def steps_in(self, epoch: int) -> int:
        if epoch not in self._steps:
            self._steps[epoch] = len(self._epoch(epoch)) // self.num_processes
        return self._steps[epoch]

    def total_steps(self, epochs: float) -> int:
        whole = int(epochs)
        return sum(self.steps_in(e) for e in range(whole)) + math.ceil(self.steps_in(whole) * (epochs - whole))

    def steps_for_tokens(self, tokens: int) -> int:
        """Steps until the run has seen `tokens` training pairs (each sequence gives its length - 1; one process's
        count, as the training log keeps it)."""
        step, seen = 0, 0
        while seen < tokens:
            seen += sum(len(s.input_ids) - 1 for s in self.batch(step))
            step += 1
        return step

    def batch(self, step: int, process_index: int = 0) -> list[Sequence]:
        epoch = 0
        while step >= self.steps_in(epoch):
            step -= self.steps_in(epoch)
            epoch += 1
        return self._epoch(epoch)[step * self.num_processes + process_index]


@dataclass
class Batch:
    input_ids: torch.Tensor  # [B, T] long, right-padded
    hidden: torch.Tensor  # [B, T, D] float32
    topk_ids: torch.Tensor  # [B, T, k] long
    topk_logp: torch.Tensor  # [B, T, k] float32
    valid: torch.Tensor  # [B, T] bool, False on padding
    response: torch.Tensor  # [B, T] bool, True on response tokens
    fused: torch.Tensor | None = None  # [B, T, n*D] float32: fused-layer states, for fused drafters


def collate(batch: list[Sequence], device) -> Batch:
    length = max(len(s.input_ids) for s in batch)
    size, dim, k = len(batch), batch[0].hidden.shape[-1], batch[0].topk_ids.shape[-1]
    has_fused = batch[0].fused is not None
    out = Batch(
        torch.zeros(size, length, dtype=torch.long),
        torch.zeros(size, length, dim),
        torch.zeros(size, length, k, dtype=torch.long),
        torch.full((size, length, k), -math.inf),
        torch.zeros(size, length, dtype=torch.bool),
        torch.zeros(size, length, dtype=torch.bool),
        torch.zeros(size, length, batch[0].fused.shape[-1]) if has_fused else None,
    )
    for row, s in enumerate(batch):
        n = len(s.input_ids)
        out.input_ids[row, :n] = s.input_ids.long()
        out.hidden[row, :n] = s.hidden.float()
        out.topk_ids[row, :n] = s.topk_ids.long()
        out.topk_logp[row, :n] = s.topk_logp.float()
        out.valid[row, :n] = True
        out.response[row, :n] = s.response.bool()
        if has_fused:
            out.fused[row, :n] = s.fused.float()
    fields = ("input_ids", "hidden", "topk_ids", "topk_logp", "valid", "response", "fused")
    return Batch(*(None if getattr(out, f) is None else getattr(out, f).to(device) for f in fields))
