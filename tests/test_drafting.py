"""The drafter's incremental state (cache, positions, features) must equal a recomputation from scratch."""

from __future__ import annotations

import pytest
import torch

from conftest import VOCAB, random_assistant, tiny_target
from hf_dynaspec.drafting import ChainDraftSession
from hf_dynaspec.kv_cache import DraftKVCache


@pytest.mark.parametrize("kind", ["eagle", "eagle3"])
def test_incremental_drafts_equal_drafts_from_scratch(family, kind):
    target = tiny_target(family, seed=2)
    extra = dict(drafter_kind="eagle3", draft_vocab_size=60, aux_hidden_state_layer_ids=[1, 2, 3]) if kind == "eagle3" else {}
    assistant = random_assistant(target, seed=4, **extra)
    sequence = torch.randint(0, VOCAB, (1, 30), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        hidden_states = target(sequence, output_hidden_states=True).hidden_states
    features = assistant.select_target_hidden(hidden_states)  # [1, 30, D or 3D]

    def session():
        return ChainDraftSession(assistant.drafter, vocab_size=VOCAB, do_sample=True, head=assistant.runtime_head())

    # Incremental: verified lengths grow 8 -> 9 -> 13 -> 20, drafting 4 speculative tokens in between,
    # as during generation (the speculative cache entries must be dropped each round).
    incremental = session()
    verified = 0
    for length in (8, 9, 13, 20):
        torch.manual_seed(length)
        draft = incremental.propose(sequence[:, :length], features[:, verified : length - 1], 4)
        verified = length - 1
    fresh = session()
    torch.manual_seed(20)
    expected = fresh.propose(sequence[:, :20], features[:, :19], 4)
    assert torch.equal(draft.token_ids, expected.token_ids)
    torch.testing.assert_close(draft.logits, expected.logits, rtol=1e-5, atol=1e-5)
    # Sampling mode hands the verifier full-vocabulary logits: -inf exactly outside the draft vocabulary.
    assert draft.logits.shape == (1, 4, VOCAB)
    finite = torch.isfinite(draft.logits[0, 0])
    if kind == "eagle3":
        assert finite.sum() == 60 and finite[assistant.drafter.draft_to_target_ids()].all()
    else:
        assert finite.all()


def test_kv_cache_grows_and_crops():
    cache = DraftKVCache(initial_capacity=2)
    keys = torch.arange(5.0).view(1, 1, 5, 1)
    k, v = cache.update(keys[:, :, :3], -keys[:, :, :3], 0)
    assert k.shape[-2] == 3 and torch.equal(k, keys[:, :, :3])
    cache.crop(1)
    k, v = cache.update(keys[:, :, 3:5], -keys[:, :, 3:5], 0)
    assert torch.equal(k.flatten(), torch.tensor([0.0, 3.0, 4.0])) and torch.equal(v, -k)
    with pytest.raises(ValueError):
        cache.crop(4)



def test_a_confident_draft_is_the_full_draft_cut_before_the_first_unlikely_token(family):
    target = tiny_target(family, seed=2)
    assistant = random_assistant(target, seed=4)
    sequence = torch.randint(0, VOCAB, (1, 12), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        features = assistant.select_target_hidden(target(sequence, output_hidden_states=True).hidden_states)

    def draft(confidence):
        session = ChainDraftSession(assistant.drafter, vocab_size=VOCAB, do_sample=True,
                                    head=assistant.runtime_head(), confidence=confidence)
        torch.manual_seed(0)  # the same samples, so a thresholded draft is a prefix of the full one
        return session.propose(sequence, features[:, :11], 6)

    full = draft(0.0)
    # The probability the drafter gave each of its tokens, from the distributions it hands the verifier.
    probabilities = full.logits[0].softmax(-1).gather(-1, full.token_ids[0, :, None]).squeeze(-1)
    assert full.token_ids.shape == (1, 6)
    # Just below and just above each token's probability (exactly at it, rounding decides).
    for confidence in [*(probabilities * 0.999).tolist(), *(probabilities * 1.001).tolist(), 0.999]:
        unlikely = (probabilities < confidence).nonzero()
        expected_length = int(unlikely[0]) if len(unlikely) else 6
        got = draft(confidence)
        assert torch.equal(got.token_ids, full.token_ids[:, :expected_length]), confidence
        assert (got.logits is None) == (expected_length == 0)
        if expected_length:
            torch.testing.assert_close(got.logits, full.logits[:, :expected_length])
