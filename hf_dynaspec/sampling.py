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


def sample(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """One draw per row of `probs` `[..., V]` (non-negative, any positive row sum) -> token ids `[..., 1]` (int64,
    on `probs`' device), without a host sync."""
    noise = torch.empty(probs.shape, dtype=torch.float32, device=probs.device).exponential_(generator=generator)
    return (probs.float() / noise.clamp_(min=_SMALLEST)).argmax(dim=-1, keepdim=True)
