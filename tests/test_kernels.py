"""Shortlisted-head paths against the pure-torch reference, over deliberately odd shapes."""

from __future__ import annotations

import pytest
import torch

from hf_dynaspec.kernels.cpu import shortlist_head_blocks
from hf_dynaspec.kernels.reference import shortlist_head_reference

TOLERANCE = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.bfloat16: dict(rtol=2e-2, atol=2e-2)}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("batch", [1, 3, 8])
@pytest.mark.parametrize("blocks", ["one", "all", "scattered"])
def test_block_path_matches_reference(dtype, batch, blocks):
    vocab, hidden_size = 4231, 72  # V not a multiple of any block size
    generator = torch.Generator().manual_seed(batch)
    weight = torch.randn(vocab, hidden_size, generator=generator).to(dtype)
    token_order = torch.randperm(vocab, generator=generator)
    bounds = sorted(set([0, vocab] + torch.randint(1, vocab, (40,), generator=generator).tolist()))
    pairs = list(zip(bounds[:-1], bounds[1:]))
    chosen = {"one": pairs[3:4], "all": pairs, "scattered": pairs[::3]}[blocks]
    starts, ends = [a for a, _ in chosen], [b for _, b in chosen]
    hidden = torch.randn(batch, hidden_size, generator=generator).to(dtype)
    expected_scores, expected_ids = shortlist_head_reference(hidden, weight, starts, ends, token_order)
    scores, ids = shortlist_head_blocks(hidden, weight, starts, ends, token_order)
    assert torch.equal(ids, expected_ids) and scores.dtype == torch.float32
    torch.testing.assert_close(scores, expected_scores, **TOLERANCE[dtype])
    assert torch.equal(scores.argmax(-1), expected_scores.argmax(-1)) or dtype == torch.bfloat16
