"""The package's one categorical draw (hf_dynaspec.sampling.sample, the exponential race): its law is the
distribution it is given. The exact-enumeration tests replace this function by a chooser that follows every
outcome, so they cannot see a wrong sampler; this file checks the sampler itself, on many draws at once."""

from __future__ import annotations

import pytest
import torch
from scipy.stats import chisquare

from hf_dynaspec import sampling

DRAWS = 400_000  # one call: [DRAWS, V] rows; a 1% shift of a 0.25 cell is ~4.6 standard deviations


@pytest.mark.parametrize("probs", [[0.5, 0.25, 0.125, 0.125, 0.0], [1e-3, 0.0, 0.999, 0.0], [3.0, 1.0, 0.0, 4.0]],
                         ids=["dyadic", "skewed", "unnormalised"])
def test_the_race_draws_the_given_distribution(probs):
    p = torch.tensor(probs)
    generator = torch.Generator().manual_seed(0)
    draws = sampling.sample(p.expand(DRAWS, -1), generator)
    assert draws.shape == (DRAWS, 1) and draws.dtype == torch.long
    counts = torch.bincount(draws[:, 0], minlength=len(probs)).double()
    assert counts[p == 0].sum() == 0, "a token of probability 0 was drawn"
    expected = p.double() / p.sum() * DRAWS
    live = p > 0
    assert chisquare(counts[live].numpy(), expected[live].numpy()).pvalue > 1e-4


def test_a_biased_race_is_rejected():
    """The check above has the power to see a wrong sampler: drawing with p * E instead of p / E (a plausible
    slip) gives another law, rejected."""
    p = torch.tensor([0.5, 0.25, 0.125, 0.125])
    noise = torch.empty(DRAWS, 4).exponential_(generator=torch.Generator().manual_seed(1))
    counts = torch.bincount((p * noise).argmax(-1), minlength=4).double()
    assert chisquare(counts.numpy(), (p.double() * DRAWS).numpy()).pvalue < 1e-6


def test_rows_draw_independently_and_follow_their_own_distribution():
    """Batched rows (the batched loop's first tokens, a row per prompt): each row its own law."""
    p = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, 1.0, 0.0]])
    assert sampling.sample(p).flatten().tolist() == [0, 2, 1]
    half = torch.tensor([[0.5, 0.5]]).expand(DRAWS, -1)
    first, second = sampling.sample(half), sampling.sample(half)
    agree = (first == second).double().mean().item()
    assert abs(agree - 0.5) < 0.01  # independent draws agree half of the time
