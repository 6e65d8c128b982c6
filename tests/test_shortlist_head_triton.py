"""The Triton shortlisted-head kernel under the Triton interpreter (CPU) against the pure-torch reference.

TRITON_INTERPRET=1 must be set before anything imports Triton (transformers does): tests/conftest.py sets
it. `.ci/run` installs Triton (the `triton` extra), so these tests run there.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton", reason="install the 'triton' extra to test the kernel")

from hf_dynaspec.kernels.shortlist_head.reference import shortlist_head_reference  # noqa: E402
from hf_dynaspec.kernels.shortlist_head.triton_kernel import shortlist_head_triton  # noqa: E402

VOCAB, HIDDEN = 1237, 72  # neither a multiple of the kernel's 64-row / 64-column tiles
TOLERANCE = dict(rtol=1e-4, atol=1e-4)


def _case(batch: int, dtype: torch.dtype, blocks: str, seed: int = 0):
    generator = torch.Generator().manual_seed(seed + batch)
    weight = torch.randn(VOCAB, HIDDEN, generator=generator).to(dtype)
    hidden = torch.randn(batch, HIDDEN, generator=generator).to(dtype)
    token_order = torch.randperm(VOCAB, generator=generator)
    bounds = sorted(set([0, VOCAB] + torch.randint(1, VOCAB, (12,), generator=generator).tolist()))
    pairs = list(zip(bounds[:-1], bounds[1:]))
    chosen = {"one": pairs[2:3], "all": pairs, "scattered": pairs[::3], "single-row": [(17, 18), (600, 731)]}[blocks]
    return hidden, weight, [a for a, _ in chosen], [b for _, b in chosen], token_order


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("batch", [1, 3, 8])
@pytest.mark.parametrize("blocks", ["one", "all", "scattered", "single-row"])
def test_kernel_matches_reference(dtype, batch, blocks):
    hidden, weight, starts, ends, token_order = _case(batch, dtype, blocks)
    out = shortlist_head_triton(hidden, weight, starts, ends, token_order)
    # The reference upcasts bf16 to fp32 before multiplying, as the kernel does: only summation order differs.
    expected, expected_ids = shortlist_head_reference(hidden, weight, starts, ends, token_order)
    assert torch.equal(out.token_ids, expected_ids)
    assert out.scores.shape == expected.shape == (batch, sum(b - a for a, b in zip(starts, ends)))
    torch.testing.assert_close(out.scores, expected, **TOLERANCE)
    torch.testing.assert_close(out.max, expected.max(-1).values, **TOLERANCE)
    torch.testing.assert_close(out.logsumexp, expected.logsumexp(-1), **TOLERANCE)
    top2 = expected.topk(min(2, expected.shape[1]), -1).values
    clear = (top2[:, 0] - top2[:, -1] > 1e-3) | (expected.shape[1] == 1)
    assert torch.equal(out.argmax[clear], expected.argmax(-1)[clear])
    assert torch.equal(out.argmax_token_ids[clear], expected_ids[expected.argmax(-1)][clear])


def test_ties_resolve_to_the_first_column_like_torch():
    weight = torch.zeros(200, 16)
    weight[[5, 70, 150]] = 1.0  # the same best score in three tiles
    hidden = torch.ones(2, 16)
    out = shortlist_head_triton(hidden, weight, [0, 128], [100, 200], torch.arange(200))
    assert out.argmax.tolist() == [5, 5]
    # log-sum-exp over the 172 selected rows: 3 score 16, the other 169 score 0
    expected = 16.0 + torch.log(3 + 169 * torch.exp(torch.tensor(-16.0)))
    torch.testing.assert_close(out.logsumexp, expected.expand(2))


def test_launcher_rejects_bad_shapes_and_blocks():
    hidden, weight, starts, ends, token_order = _case(3, torch.float32, "all")
    with pytest.raises(ValueError, match="hidden size 71"):
        shortlist_head_triton(hidden[:, :71], weight, starts, ends, token_order)
    with pytest.raises(ValueError, match="0 <= start < end <= V"):
        shortlist_head_triton(hidden, weight, [5], [VOCAB + 1], token_order)
    with pytest.raises(ValueError, match="0 <= start < end <= V"):
        shortlist_head_triton(hidden, weight, [9], [9], token_order)
    with pytest.raises(ValueError, match="dtype"):
        shortlist_head_triton(hidden.double(), weight, starts, ends, token_order)
    with pytest.raises(ValueError, match="contiguous"):
        shortlist_head_triton(hidden, weight.T.contiguous().T, starts, ends, token_order)
    with pytest.raises(ValueError, match="token_order"):
        shortlist_head_triton(hidden, weight, starts, ends, token_order[:-1])
