"""Static frequency-ranked token lists (FR-Spec, VocabTrim): import, build, export.

FR-Spec ships `freq_{8192,...}.pt` files (a `torch.save`d list of token ids in descending frequency) and
SGLang reads the same format with `--speculative-token-map`. They are loaded with `weights_only=True`, and
anything but a flat sequence of integer token ids is refused. Our own lists are stored as safetensors
buffers inside the assistant artifact.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import torch


def load_token_list(path: str | Path, vocab_size: int | None = None) -> torch.Tensor:
    """Token ids `[N]` int64 from an FR-Spec/SGLang `.pt` file (unpickling restricted to tensors and lists)."""
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # the restricted unpickler raises UnpicklingError / RuntimeError
        raise ValueError(
            f"{path} is not a token list hf-dynaspec can load safely ({type(err).__name__}: {err}). Expected a "
            "torch.save'd list or 1-D tensor of token ids, as FR-Spec's freq_*.pt files."
        ) from err
    if isinstance(data, (list, tuple)) and all(isinstance(x, int) for x in data):
        ids = torch.tensor(data, dtype=torch.long)
    elif torch.is_tensor(data) and data.dim() == 1 and not data.is_floating_point():
        ids = data.long()
    else:
        raise ValueError(f"{path} must hold a flat list or 1-D integer tensor of token ids, found {type(data).__name__}")
    check_token_ids(ids, vocab_size, str(path))
    return ids


def check_token_ids(ids: torch.Tensor, vocab_size: int | None, what: str) -> None:
    if len(ids) == 0:
        raise ValueError(f"{what}: empty token list")
    if len(ids.unique()) != len(ids):
        raise ValueError(f"{what}: token ids repeat")
    if ids.min() < 0 or (vocab_size is not None and ids.max() >= vocab_size):
        raise ValueError(
            f"{what}: token ids must lie in [0, {vocab_size}) (found {int(ids.min())}..{int(ids.max())}); "
            "the list was built for another vocabulary."
        )


def ranking_from_counts(counts: torch.Tensor) -> torch.Tensor:
    """`[V]` counts -> token ids by descending count (ties by id), only tokens seen at least once."""
    order = torch.argsort(-counts.double() * (counts.numel() + 1) + torch.arange(counts.numel()), stable=True)
    return order[counts[order] > 0]


def count_tokens(sequences: Iterable[Iterable[int]], vocab_size: int) -> torch.Tensor:
    counts = torch.zeros(vocab_size, dtype=torch.long)
    for ids in sequences:
        counts += torch.bincount(torch.as_tensor(list(ids), dtype=torch.long), minlength=vocab_size)
    return counts


def export_token_map(ids: torch.Tensor, path: str | Path) -> None:
    """Write a static shortlist in SGLang's `--speculative-token-map` / FR-Spec format (a tensor of ids)."""
    torch.save(ids.clone().long(), path)


def export_d2t_t2d(ids: torch.Tensor, vocab_size: int) -> dict[str, torch.Tensor]:
    """EAGLE-3-style maps for a static shortlist: draft row i -> target id `i + d2t[i]`, `t2d` membership mask."""
    target_ids = ids.sort().values
    t2d = torch.zeros(vocab_size, dtype=torch.bool)
    t2d[target_ids] = True
    return {"d2t": target_ids - torch.arange(len(target_ids)), "t2d": t2d}
