"""Block verification of sampled drafts (Sun, Mendlovic, Leviathan, Aharoni, Beirami, Ro, Suresh, "Block
Verification Accelerates Speculative Decoding", ICLR 2025), `verification="block"`.

Token-by-token verification (Leviathan et al.; transformers' `_speculative_sampling`) accepts draft token i with
probability min(1, p_i(x_i) / q_i(x_i)) and stops at the first rejection. Block verification decides on the
block jointly: it carries a weight w_i = min(1, w_{i-1} p_i(x_i) / q_i(x_i)) (w_0 = 1) along the draft, so a
token the target likes more than the drafter can make up for an earlier one it likes less, and accepts the
longest prefix whose test passes:

    h_i = r_i / (r_i + 1 - w_i),  r_i = sum_x max(w_i p_{i+1}(x) - q_{i+1}(x), 0)   (i < gamma);  h_gamma = w_gamma
    tau = the largest i with eta_i <= h_i (eta_i uniform), 0 if none
    next token ~ p_{gamma+1} if tau = gamma, else normalised max(w_tau p_{tau+1} - q_{tau+1}, 0)

The output distribution is exactly the target's (tests/test_block_verify.py enumerates it over every draft and
outcome on a tiny vocabulary, and shows it never accepts fewer tokens in expectation than token verification).
Each round uses the same draft and target forward as token verification; only the acceptance rule changes.

Wiring: the candidate generator marks the draft logits it returns (`mark_for_block_verification`);
hf_dynaspec.generation.hook wraps transformers' `_speculative_sampling` to verify marked drafts here and every
other draft as before (`WRAPPED` says it did). A round that drafted nothing hands over empty marked logits
`[1, 0, V]` too: its one token is then drawn here, by the package's sampler (on a top-k's few tokens on the CPU),
instead of by transformers' multinomial over the whole vocabulary (~3 ms at 152k tokens).

Legend: gamma draft tokens, V vocabulary.
"""

from __future__ import annotations

import weakref

import torch

import hf_dynaspec.sampling as sampling

_MARKED: dict[int, weakref.ref] = {}
WRAPPED = False  # set by hf_dynaspec.generation.hook once transformers' _speculative_sampling sends marked drafts here


def mark_for_block_verification(candidate_logits: torch.Tensor | None) -> None:
    """Verify this draft (its logits tensor, as handed to transformers) as a block."""
    if candidate_logits is None:
        return
    for key in [k for k, ref in _MARKED.items() if ref() is None]:
        del _MARKED[key]
    _MARKED[id(candidate_logits)] = weakref.ref(candidate_logits)


def is_marked(candidate_logits) -> bool:
    ref = _MARKED.get(id(candidate_logits))
    return ref is not None and ref() is candidate_logits


def block_weights(p: torch.Tensor, q: torch.Tensor, draft: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Target probabilities p `[gamma+1, V]`, drafter probabilities q `[gamma, V]`, draft `[gamma]` ->
    (w `[gamma + 1]` with w[0] = 1 and w[i] after draft token i, h `[gamma]` the acceptance test of each prefix
    length 1..gamma). On the tensors' device, no host sync."""
    gamma = draft.shape[0]
    rows = torch.arange(gamma, device=draft.device)
    ratio = p[rows, draft] / q[rows, draft]
    weights = [torch.ones((), dtype=p.dtype, device=p.device)]
    for i in range(gamma):
        weights.append(torch.clamp(weights[-1] * ratio[i], max=1.0))
    w = torch.stack(weights)
    residual = torch.clamp(w[1:gamma, None] * p[1:gamma] - q[1:gamma], min=0).sum(-1)  # r_i, i = 1..gamma-1
    denominator = residual + 1 - w[1:gamma]
    inner = torch.where(denominator > 0, residual / denominator.clamp(min=torch.finfo(p.dtype).tiny),
                        torch.ones_like(residual))
    return w, torch.cat([inner, w[gamma:]])


def residual_distribution(p: torch.Tensor, q: torch.Tensor, w: torch.Tensor, accepted: int) -> torch.Tensor:
    """The next token's distribution `[V]` after `accepted` (host int) draft tokens were accepted."""
    gamma = q.shape[0]
    if accepted == gamma:
        return p[gamma]
    residual = torch.clamp(w[accepted] * p[accepted] - q[accepted], min=0)
    total = residual.sum()
    # Zero only where this outcome has probability zero (up to rounding): fall back to the target's distribution.
    return torch.where(total > 0, residual / total.clamp(min=torch.finfo(p.dtype).tiny), p[accepted])


def block_verify(candidate_input_ids: torch.Tensor, candidate_logits: torch.Tensor, candidate_length: int,
                 new_logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' `_speculative_sampling` contract (batch 1): candidate ids `[1, N + gamma]`, draft logits
    `[1, gamma, V]`, target logits `[1, gamma + 1, V]` -> (the committed tokens `[1, tau + 1]`, tau as a 0-d
    tensor)."""
    if candidate_length == 0:  # nothing drafted: the target's own token
        token = sampling.sample(new_logits[0, :1].float().softmax(-1))
        return token, torch.tensor(0, device=token.device)
    draft = candidate_input_ids[0, -candidate_length:]
    q = candidate_logits[0].float().softmax(-1)
    p = new_logits[0].float().softmax(-1)
    w, h = block_weights(p, q, draft)
    passed = torch.rand_like(h) <= h  # (rand_like: tests/enumeration.py follows both outcomes of each test)
    positions = torch.arange(1, candidate_length + 1, device=h.device)
    accepted = int((passed * positions).max())  # the round's host read, as transformers' own rule has
    token = sampling.sample(residual_distribution(p, q, w, accepted))
    valid = torch.cat([draft[:accepted], token])[None]
    return valid, torch.tensor(accepted, device=valid.device)
