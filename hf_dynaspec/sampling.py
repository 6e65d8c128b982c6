"""The one categorical draw every sampled path uses (drafting, the loops' first token, block and tree verification).

`torch.multinomial` synchronises with the host twice inside the op on CUDA (it checks its input), once per draft
token; the exponential race draws the same distribution without reading anything: with E_i ~ Exp(1) independent,
argmax_i p_i / E_i = argmin_i E_i / p_i, and E_i / p_i ~ Exp(p_i), so index i wins with probability p_i / sum(p).
It is its own function so that tests/enumeration.py can replace it by a chooser that follows every outcome with its
exact weight.
"""

from __future__ import annotations

import torch

# Exp(1) draws are clamped away from 0: a zero would give 0 / 0 = NaN for a token of probability 0, which argmax
# would pick. Tokens of positive probability keep their law up to the clamp's weight (< 1e-37).
_SMALLEST = torch.finfo(torch.float32).tiny
# On the CPU, rows with at most 1 / SPARSE_SHARE of their entries positive race those entries only (a top-k row has
# k, against V Exp(1) draws): a host read of the support, free on the CPU. SparseTopP uses the same threshold.
SPARSE_SHARE = 8


BAD_ROW = ("a probability row to sample from is NaN, infinite or all zero (as torch.multinomial refuses): the "
           "logits were NaN/inf, or every token was masked by the logits processors; check the model's dtype (fp16 "
           "overflow) and processors such as bad_words_ids or a top_p of 0")


# CUDA's device-side assert takes a message of under 255 characters (the H200 run of 2026-11-28 raised on BAD_ROW).
DEVICE_BAD_ROW = "hf_dynaspec sampling: a probability row is NaN, infinite or all zero (fp16 overflow or every token masked)"


def exponential(shape: torch.Size, device: torch.device, generator: torch.Generator | None) -> torch.Tensor:
    """Independent Exp(1) draws (float32); its own function so that a test can force a draw of exactly 0."""
    return torch.empty(shape, dtype=torch.float32, device=device).exponential_(generator=generator)


def check_rows(probs: torch.Tensor) -> None:
    """Refuse rows that are NaN, infinite or all zero, as `torch.multinomial` does. On the CPU a host check (free
    there); on an accelerator a device-side assert, so that the draft loop never waits for the host."""
    total = probs.sum(dim=-1)
    good = (total > 0) & torch.isfinite(total)
    if probs.device.type == "cpu":
        if not bool(good.all()):
            raise ValueError(BAD_ROW)
    else:
        torch._assert_async(good.all(), DEVICE_BAD_ROW)


def sample(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """One draw per row of `probs` `[..., V]` (non-negative, any positive row sum) -> token ids `[..., 1]` (int64,
    on `probs`' device), without a host sync. A NaN, infinite or all-zero row raises (`check_rows`)."""
    probs = probs.float()
    check_rows(probs)
    if probs.device.type == "cpu":  # the race run over the tokens of positive probability only: the same law
        flat = probs.reshape(-1, probs.shape[-1])
        rows, columns = flat.nonzero(as_tuple=True)
        if columns.shape[0] * SPARSE_SHARE <= flat.numel():  # after a top-k: k Exp(1) draws instead of V
            return race_among(flat[rows, columns], rows, columns, flat.shape, generator).view(*probs.shape[:-1], 1)
    noise = exponential(probs.shape, probs.device, generator)
    return (probs / noise.clamp_(min=_SMALLEST)).argmax(dim=-1, keepdim=True)


def race_among(values: torch.Tensor, rows: torch.Tensor, columns: torch.Tensor, shape: torch.Size,
               generator: torch.Generator | None = None) -> torch.Tensor:
    """The race over the positive entries `values` `[n]` at (`rows`, `columns`) of a `[R, C]` matrix (`shape`), in
    row-major order as `nonzero` lists them -> each row's winning column `[R]`. The Exp(1) draws go to the entries
    in that order, so a caller listing the same entries in the same order draws what `sample` draws."""
    noise = exponential(columns.shape, values.device, generator)
    race = torch.zeros(shape, dtype=torch.float32, device=values.device)
    race[rows, columns] = values / noise.clamp_(min=_SMALLEST)
    return race.argmax(dim=-1)
