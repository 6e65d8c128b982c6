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


def test_a_zero_exponential_draw_never_picks_a_zero_probability_token(monkeypatch):
    """Exp(1) can draw exactly 0; unclamped, 0 / 0 = NaN would win the argmax for a token of probability 0. Forced
    here on the zero-probability token of every row (and on a live token of some), which must never be drawn."""
    p = torch.tensor([[0.0, 0.5, 0.5], [0.0, 0.0, 1.0], [0.25, 0.0, 0.75]])
    forced = []

    def zero_draws(shape, device, generator):
        noise = torch.ones(shape)
        noise[p == 0] = 0.0  # the zero-probability tokens draw exactly 0
        noise[0, 2] = 0.0  # and a live token too: p / 0 = inf wins, as a tiny draw would
        forced.append(noise.clone())
        return noise
    monkeypatch.setattr(sampling, "exponential", zero_draws)
    draws = sampling.sample(p).flatten().tolist()
    assert forced and bool((forced[0] == 0).any())  # the case happened
    assert draws == [2, 2, 2]


@pytest.mark.parametrize("row", [[float("nan"), 0.5, 0.5], [0.0, 0.0, 0.0], [float("inf"), 1.0, 0.0]],
                         ids=["nan", "all-zero", "inf"])
def test_a_row_with_nothing_to_draw_is_refused(row):
    p = torch.tensor([[0.2, 0.3, 0.5], row])
    with pytest.raises(ValueError, match="NaN, infinite or all zero"):
        sampling.sample(p)
    with pytest.raises(RuntimeError, match="probability tensor contains|invalid multinomial"):  # multinomial too
        torch.multinomial(p, 1)


def test_the_device_check_fits_cudas_assert_message():
    """On an accelerator the check is a device-side assert, whose message CUDA limits to under 255 characters: a
    longer one raises on every sampled draw (it did on the H200, 2026-11-28). The assert is recorded on the fake
    device, where no message is checked."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    messages = []
    real = torch._assert_async
    try:
        torch._assert_async = lambda condition, message: messages.append(message)
        with FakeTensorMode():
            sampling.check_rows(torch.ones(2, 5, device="cuda"))
    finally:
        torch._assert_async = real
    assert messages and all(0 < len(message) < 255 for message in messages)


def test_the_race_over_a_sparse_row_draws_the_given_distribution():
    """A row with few tokens of positive probability (a top-k's) races only those on the CPU: the same law."""
    vocab = 400
    p = torch.zeros(vocab)
    p[[7, 100, 250, 399]] = torch.tensor([0.5, 0.25, 0.15, 0.1])
    draws = sampling.sample(p.expand(DRAWS // 4, -1), torch.Generator().manual_seed(2))
    assert draws.shape == (DRAWS // 4, 1)
    counts = torch.bincount(draws[:, 0], minlength=vocab).double()
    assert counts[p == 0].sum() == 0, "a token of probability 0 was drawn"
    live = p > 0
    assert chisquare(counts[live].numpy(), (p[live].double() * DRAWS / 4).numpy()).pvalue > 1e-4
    one = sampling.sample(p[None, None], torch.Generator().manual_seed(3))  # [1, 1, V] -> [1, 1, 1]
    assert one.shape == (1, 1, 1) and p[one.item()] > 0
