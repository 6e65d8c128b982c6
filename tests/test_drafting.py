"""The drafter's incremental state (cache, positions, features) must equal a recomputation from scratch."""

from __future__ import annotations

import pytest
import torch
from conftest import (
    VOCAB,
    assisted_generate,
    imitating_assistant,
    one_layer_target,
    plain_generate,
    random_assistant,
    tiny_target,
)

from hf_dynaspec.drafting.chain import ChainDraftSession, DraftKVCache
from hf_dynaspec.drafting.runtime import runtime_head
from hf_dynaspec.modeling.drafter import causal_mask


@pytest.mark.parametrize("kind", ["eagle", "eagle3"])
def test_incremental_drafts_equal_drafts_from_scratch(family, kind):
    target = tiny_target(family, seed=2)
    extra = dict(drafter_kind="eagle3", draft_vocab_size=60, aux_hidden_state_layer_ids=[1, 2, 3]) if kind == "eagle3" else {}
    assistant = random_assistant(target, seed=4, **extra)
    sequence = torch.randint(0, VOCAB, (1, 30), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        hidden_states = target(sequence, output_hidden_states=True).hidden_states
    features = assistant.drafter.select_target_hidden(hidden_states)  # [1, 30, D or 3D]

    def session():
        head = runtime_head(assistant, assistant.generation_config)
        return ChainDraftSession(assistant.drafter, vocab_size=VOCAB, do_sample=True, head=head)

    # Incremental: verified lengths grow 8 -> 9 -> 13 -> 20, drafting 4 speculative tokens in between,
    # as during generation (the speculative cache entries must be dropped each round).
    incremental = session()
    verified = 0
    for length in (8, 9, 13, 20):
        torch.manual_seed(length)
        draft = incremental.draft(sequence[:, :length], features[:, verified : length - 1], 4)
        verified = length - 1
    fresh = session()
    torch.manual_seed(20)
    expected = fresh.draft(sequence[:, :20], features[:, :19], 4)
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
        features = assistant.drafter.select_target_hidden(target(sequence, output_hidden_states=True).hidden_states)

    def draft(confidence):
        session = ChainDraftSession(assistant.drafter, vocab_size=VOCAB, do_sample=True,
                                    head=runtime_head(assistant, assistant.generation_config), confidence=confidence)
        torch.manual_seed(0)  # the same samples, so a thresholded draft is a prefix of the full one
        return session.draft(sequence, features[:, :11], 6)

    full = draft(0.0)
    # The drafter's largest probability at each position, from the distributions it hands the verifier: the stop
    # reads it before drawing, never the drawn token's own probability (which would bias sampling).
    top = full.logits[0].softmax(-1).max(-1).values
    drawn = full.logits[0].softmax(-1).gather(-1, full.token_ids[0, :, None]).squeeze(-1)
    assert full.token_ids.shape == (1, 6)
    assert (drawn < top).any(), "some drawn token must not be the most likely one, or the test cannot tell"
    # Just below and just above each position's top probability (exactly at it, rounding decides).
    for confidence in [*(top * 0.999).tolist(), *(top * 1.001).tolist(), 0.999]:
        unsure = (top < confidence).nonzero()
        expected_length = int(unsure[0]) if len(unsure) else 6
        got = draft(confidence)
        assert torch.equal(got.token_ids, full.token_ids[:, :expected_length]), confidence
        assert (got.logits is None) == (expected_length == 0)
        if expected_length:
            torch.testing.assert_close(got.logits, full.logits[:, :expected_length])


def test_kv_cache_keeps_its_history_through_every_growth():
    """Keys and values written before each doubling (4 -> 8 -> ... -> 128) come back unchanged, crops included."""
    cache = DraftKVCache(initial_capacity=4)
    generator = torch.Generator().manual_seed(0)
    keys, values = torch.empty(1, 2, 0, 3), torch.empty(1, 2, 0, 3)
    for step, size in enumerate([3, 1, 2, 5, 1, 9, 4, 17, 2, 33, 6, 40]):
        if step % 3 == 2:  # drop the last two positions, as a rejected draft does
            cache.crop(keys.shape[2] - 2)
            keys, values = keys[:, :, :-2], values[:, :, :-2]
        new_keys, new_values = torch.randn(2, 1, 2, size, 3, generator=generator)
        got_keys, got_values = cache.update(new_keys, new_values, 0)
        keys, values = torch.cat([keys, new_keys], dim=2), torch.cat([values, new_values], dim=2)
        assert torch.equal(got_keys, keys) and torch.equal(got_values, values), step
        assert all(torch.equal(a, b) for a, b in zip(_contents(cache), (keys, values)))
    assert cache.length == keys.shape[2] > 4 * 2**4, "the cache must have doubled at least four times"


def captured_sessions(assistant, monkeypatch) -> list:
    """The ChainDraftSession of every generate() call with `assistant`, in order."""
    sessions = []
    from hf_dynaspec.drafting.proposers.drafter import ChainProposer
    from hf_dynaspec.generation import hook

    make = hook.make_candidate_generator

    def capturing(*args, **kwargs):
        generator = make(*args, **kwargs)
        sessions.append(next(p.session for p in generator.round.proposers if isinstance(p, ChainProposer)))
        return generator

    monkeypatch.setattr(hook, "make_candidate_generator", capturing)
    return sessions


def assert_cache_matches_a_recomputation(assistant, target, session, sequence):
    """The drafter cache of `session` after generating `sequence` `[1, L]` must hold, for every verified pair i,
    the keys/values of (target feature at position i, token i+1) at position i: one pass from scratch over the
    target's features of the whole sequence gives them. Catches misaligned features, tokens or positions, a
    cache that lost history when it grew, and stale speculative entries."""
    verified = session.num_verified_pairs
    with torch.no_grad():
        # Written out here rather than through the session, so that a bug there cannot hide in both sides:
        # pair i = (the target's last hidden state at position i, token i+1), at position i.
        features = target(sequence[:, : verified + 1], output_hidden_states=True).hidden_states[-1]
        drafter = assistant.drafter
        cache = DraftKVCache()
        drafter.step(drafter.embed(sequence[:, 1 : verified + 1]), drafter.fuse_target_hidden(features[:, :verified]),
                     torch.arange(verified)[None], cache, causal_mask(verified, 0, sequence.device))
    got, expected = _contents(session.cache), _contents(cache)
    for name, a, b in zip(("keys", "values"), got, expected):
        a = a[..., :verified, :]
        assert a.shape == b.shape, (name, a.shape, b.shape)
        wrong = ((a - b).abs().amax(dim=(0, 1, 3)) > 1e-4).nonzero().flatten()
        assert not len(wrong), f"drafter cache {name} differ from a recomputation at positions {wrong[:10].tolist()}"


def test_drafter_cache_equals_a_recomputation_after_generate(family, monkeypatch):
    target = tiny_target(family, seed=2)
    assistant = random_assistant(target, seed=4, num_assistant_tokens=3)
    sessions = captured_sessions(assistant, monkeypatch)
    prompt = torch.randint(0, VOCAB, (1, 9), generator=torch.Generator().manual_seed(1))
    out = target.generate(prompt, attention_mask=torch.ones_like(prompt), assistant_model=assistant,
                          max_new_tokens=40, do_sample=False)
    assert_cache_matches_a_recomputation(assistant, target, sessions[-1], out)


def test_deferred_positions_are_absorbed_in_step(family, monkeypatch):
    """Rounds drafted by prompt lookup defer the drafter's pass (ChainDraftSession.defer_verified); the next
    drafter round absorbs every waiting position at once. Sampled (greedy output of these tiny targets settles
    into a cycle that lookup then drafts to the end), with 1-gram lookup, so that lookup and drafter rounds
    alternate: deferrals are followed by absorbing passes, and the drafter cache equals a recomputation
    (features, tokens and positions aligned across every deferred stretch)."""
    from test_planned_rounds import repeating_prompt

    target = one_layer_target(family, seed=2)
    assistant = imitating_assistant(target, noise=0.3, seed=4, num_assistant_tokens=3, prompt_lookup_num_tokens=2,
                                    prompt_lookup_min_ngram=1)
    sessions = captured_sessions(assistant, monkeypatch)
    events, defer, consume = [], ChainDraftSession.defer_verified, ChainDraftSession.consume_verified

    def deferring(self, input_ids, hidden):
        events.append("defer")
        return defer(self, input_ids, hidden)

    def consuming(self, input_ids, hidden, choose=True):
        events.append("consume")
        return consume(self, input_ids, hidden, choose)

    monkeypatch.setattr(ChainDraftSession, "defer_verified", deferring)
    monkeypatch.setattr(ChainDraftSession, "consume_verified", consuming)
    torch.manual_seed(0)
    out = assisted_generate(target, assistant, repeating_prompt(target.config.vocab_size), max_new_tokens=80,
                            do_sample=True)
    absorbed_after_deferral = sum(1 for a, b in zip(events, events[1:]) if (a, b) == ("defer", "consume"))
    assert absorbed_after_deferral >= 3, events
    assert_cache_matches_a_recomputation(assistant, target, sessions[-1], out)


@pytest.mark.slow
def test_long_generation_stays_exact_and_in_step(family, monkeypatch):
    """1,100 new tokens: the drafter cache doubles past its first capacity (256) twice, the target's grows too.
    Output identical to plain greedy, drafts still accepted at the end as at the start, and the drafter
    cache equal to a recomputation over the whole output."""
    target = one_layer_target(family, seed=7, max_position_embeddings=2048)
    assistant = imitating_assistant(target, num_assistant_tokens=3)
    sessions = captured_sessions(assistant, monkeypatch)
    prompt = torch.randint(0, VOCAB, (1, 12), generator=torch.Generator().manual_seed(2))
    plain = plain_generate(target, prompt, max_new_tokens=1100, do_sample=False)
    assisted = assisted_generate(target, assistant, prompt, max_new_tokens=1100, do_sample=False)
    assert torch.equal(assisted, plain)
    session = sessions[-1]
    assert session.num_verified_pairs > 1024
    assert_cache_matches_a_recomputation(assistant, target, session, assisted)
    # Acceptance over the first 256 new tokens and after them: a cache that lost history when it grew past 256
    # would lower the second (the imitating drafter attends over its whole cache).
    stats = assistant.stats
    early, late = [0, 0], [0, 0]  # accepted, drafted
    committed = 0
    for accepted, drafted in zip(stats.accepted_per_pass, stats.drafted_per_pass):
        part = early if committed < 256 else late
        part[0] += accepted
        part[1] += drafted
        committed += accepted + 1
    assert early[0] / early[1] > 0.9 and late[0] / late[1] > 0.9, (early, late)


def _contents(cache: DraftKVCache) -> tuple[torch.Tensor, torch.Tensor]:
    """The cached keys and values `[1, H_kv, length, head_dim]` (the buffers' first `length` positions)."""
    keys, values = cache.buffers()
    return keys[..., : cache.length, :], values[..., : cache.length, :]
