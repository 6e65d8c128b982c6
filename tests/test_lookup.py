"""Prompt lookup as the first choice of chain drafting: the n-gram search, and exactness when lookup and
drafter rounds interleave (the drafter's cache must absorb the positions verified in lookup rounds)."""

from __future__ import annotations

import pytest
import torch
from conftest import VOCAB, assisted_generate, imitating_assistant, one_layer_target, plain_generate

from hf_dynaspec import DynaSpecGenerationConfig
from hf_dynaspec.drafting.lookup import lookup_match, one_hot_logits
from hf_dynaspec.drafting.planning.core import MAX_MATCH_KEY


def brute_force_match(ids: list[int], max_tokens: int, min_ngram: int, max_ngram: int) -> tuple[list[int], int]:
    """The definition, spelled out with lists: the longest n-gram with an earlier occurrence; of its occurrences, the
    one whose preceding ids agree with the context's for longest (MAX_MATCH_KEY ids in all at most), the earliest
    among equals; (its continuation, n + that agreement)."""
    for size in range(max_ngram, min_ngram - 1, -1):
        if size > len(ids) - 1:
            continue
        suffix, best = ids[-size:], None
        for start in range(len(ids) - size):
            if ids[start : start + size] != suffix:
                continue
            agree = 0
            while (size + agree < MAX_MATCH_KEY and start - agree - 1 >= 0
                   and ids[start - agree - 1] == ids[len(ids) - size - agree - 1]):
                agree += 1
            if best is None or agree > best[1]:
                best = (start, agree)
        if best is not None:
            start, agree = best
            return ids[start + size : start + size + max_tokens], size + agree
    return [], 0


@pytest.mark.parametrize("min_ngram,max_ngram", [(1, 1), (1, 3), (2, 3), (2, 4), (3, 3)])
def test_lookup_matches_the_definition_on_random_sequences(min_ngram, max_ngram):
    generator = torch.Generator().manual_seed(min_ngram * 10 + max_ngram)
    found = extended = 0
    for trial in range(300):
        length = 1 + trial % 40
        ids = torch.randint(0, 3, (length,), generator=generator)  # 3 symbols: matches are frequent
        max_tokens = 1 + trial % 6
        got, match = lookup_match(ids, max_tokens, min_ngram, max_ngram)
        assert (got.tolist(), match) == brute_force_match(ids.tolist(), max_tokens, min_ngram, max_ngram), (ids, max_tokens)
        found += bool(got.numel())
        extended += match > max_ngram
    assert found > 100 and extended > 10  # real matches, many extended past the n-gram, not only empty results


def test_lookup_prefers_a_longer_ngram_to_a_more_recent_shorter_one():
    ids = torch.tensor([5, 6, 7, 1, 2, 9, 9, 6, 7, 3, 8, 5, 6, 7])
    # "5 6 7" occurred at 0 (followed by 1 2 ...); "6 7" alone more recently at 7 (followed by 3 8).
    assert lookup_match(ids, 2, min_ngram=2, max_ngram=3)[0].tolist() == [1, 2]
    assert lookup_match(ids, 2, min_ngram=2, max_ngram=2)[0].tolist() == [1, 2]  # "5 6 7" agrees for longer
    assert lookup_match(ids, 2, min_ngram=4, max_ngram=4)[0].tolist() == []


def test_lookup_follows_the_copy_that_agrees_longest_and_reports_how_far():
    # "4 6 7" at 0 and "5 6 7" at 4 and 9: the last two agree with the context's "5 6 7" one id further back.
    ids = [4, 6, 7, 1, 5, 6, 7, 2, 8, 5, 6, 7, 3, 9, 5, 6, 7]
    got, match = lookup_match(torch.tensor(ids), 3, min_ngram=2, max_ngram=2)
    assert (got.tolist(), match) == ([2, 8, 5], 3)  # the earlier of the two that agree longest (not 3 9 5)
    # a copy followed for longer than MAX_MATCH_KEY ids reports MAX_MATCH_KEY
    copy = list(range(20, 20 + MAX_MATCH_KEY + 4))
    got, match = lookup_match(torch.tensor([*copy, 1, *copy[:-1]]), 1, min_ngram=1, max_ngram=3)
    assert (got.tolist(), match) == ([copy[-1]], MAX_MATCH_KEY)


def test_one_hot_logits_are_exactly_the_lookup_distribution():
    ids = torch.tensor([[3, 0, 96]])
    probs = one_hot_logits(ids, VOCAB).softmax(-1)
    assert torch.equal(probs, torch.nn.functional.one_hot(ids, VOCAB).float())


def repeating_prompt(seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    span = torch.randint(0, VOCAB, (1, 9), generator=generator)
    return torch.cat([span, torch.randint(0, VOCAB, (1, 3), generator=generator), span[:, :4]], dim=1)


@pytest.mark.parametrize("lookup_tokens", [1, 4, 7])
def test_greedy_identical_with_lookup_and_drafter_rounds_interleaved(family, lookup_tokens):
    target = one_layer_target(family)
    lookup = drafter = drafter_accepted = 0
    for seed in range(4):
        assistant = imitating_assistant(target, noise=0.0, seed=seed, num_assistant_tokens=3,
                                        prompt_lookup_num_tokens=lookup_tokens, prompt_lookup_min_ngram=2)
        input_ids = repeating_prompt(seed)
        expected = plain_generate(target, input_ids, max_new_tokens=40)
        got = assisted_generate(target, assistant, input_ids, max_new_tokens=40)
        assert torch.equal(got, expected), seed
        stats = assistant.stats
        assert stats.accepted + stats.verify_passes == 39
        assert max(stats.drafted_per_pass) <= max(lookup_tokens, 3)
        lookup += stats.lookup_passes
        drafter += stats.verify_passes - stats.lookup_passes
        drafter_accepted += (stats.accepted - stats.lookup_accepted) / max(1, stats.drafted - stats.lookup_drafted)
    assert lookup > 0 and drafter > 0, (lookup, drafter)
    # The imitating drafter is nearly always right when it reads the right features: after lookup rounds it
    # must have absorbed every verified position, or its acceptance collapses.
    assert drafter_accepted / 4 > 0.8


@pytest.mark.parametrize("max_new_tokens", list(range(1, 12)))
def test_lookup_drafts_stop_at_max_length(max_new_tokens, monkeypatch):
    from hf_dynaspec.stats import DraftStats

    recorded = []  # (tokens drafted, counted as a lookup pass) of every pass
    record = DraftStats.record
    monkeypatch.setattr(DraftStats, "record", lambda self, n, a, looked_up=False, **kw: recorded.append((n, looked_up))
                        or record(self, n, a, looked_up, **kw))
    target = one_layer_target("llama")
    assistant = imitating_assistant(target, num_assistant_tokens=2, prompt_lookup_num_tokens=8, prompt_lookup_min_ngram=1)
    input_ids = repeating_prompt(5)
    expected = plain_generate(target, input_ids, max_new_tokens=max_new_tokens)
    got = assisted_generate(target, assistant, input_ids, max_new_tokens=max_new_tokens)
    assert got.shape == expected.shape and torch.equal(got, expected)
    # The last pass before max_length may draft nothing; it is no lookup pass, whatever the round before it was.
    assert all(drafted > 0 for drafted, looked_up in recorded if looked_up), recorded
    assert assistant.stats.verify_passes == max_new_tokens - 1 - assistant.stats.accepted


def test_lookup_off_leaves_the_drafter_alone():
    target = one_layer_target("qwen2")
    assistant = imitating_assistant(target, num_assistant_tokens=3)
    assisted_generate(target, assistant, repeating_prompt(1), max_new_tokens=20)
    assert assistant.stats.lookup_passes == 0 and assistant.stats.drafted > 0


@pytest.mark.parametrize("bad", [dict(prompt_lookup_num_tokens=-1), dict(prompt_lookup_num_tokens=2.5),
                                 dict(prompt_lookup_min_ngram=0), dict(prompt_lookup_min_ngram=3,
                                                                         max_matching_ngram_size=2),
                                 dict(prompt_lookup_veto=1.5), dict(prompt_lookup_veto=-0.1),
                                 dict(prompt_lookup_veto="0.3"), dict(prompt_lookup_veto=None)])
def test_options_refuse_bad_lookup_settings(bad):
    with pytest.raises(ValueError, match="prompt_lookup"):
        DynaSpecGenerationConfig(**bad)


def test_lookup_setting_round_trips_and_can_be_overridden(tmp_path):
    from hf_dynaspec import DynaSpecAssistant

    target = one_layer_target("llama")
    imitating_assistant(target, prompt_lookup_num_tokens=5, max_matching_ngram_size=4,
                        prompt_lookup_veto=0.25).save_pretrained(tmp_path)
    loaded = DynaSpecAssistant.from_pretrained(tmp_path)
    assert (loaded.generation_config.prompt_lookup_num_tokens, loaded.generation_config.max_matching_ngram_size) == (5, 4)
    assert loaded.generation_config.prompt_lookup_veto == 0.25
    assert DynaSpecAssistant.from_pretrained(tmp_path, prompt_lookup_num_tokens=0).generation_config.prompt_lookup_num_tokens == 0
    assert DynaSpecAssistant.from_pretrained(tmp_path, prompt_lookup_veto=1.0).generation_config.prompt_lookup_veto == 1.0



@pytest.mark.parametrize("veto", [0.0, 0.05])  # the tiny drafter's top probabilities: 0.04-0.13
def test_greedy_identical_when_the_drafter_vetoes_lookup_drafts(family, veto):
    target = one_layer_target(family)
    vetoes = 0
    for seed in range(4):
        assistant = imitating_assistant(target, noise=0.5, seed=seed, num_assistant_tokens=2, prompt_lookup_num_tokens=4,
                                        prompt_lookup_min_ngram=1, prompt_lookup_veto=veto)
        input_ids = repeating_prompt(seed)
        expected = plain_generate(target, input_ids, max_new_tokens=40)
        got = assisted_generate(target, assistant, input_ids, max_new_tokens=40)
        assert torch.equal(got, expected), seed
        assert assistant.stats.accepted + assistant.stats.verify_passes == 39
        vetoes += assistant.stats.lookup_vetoes
    assert vetoes > 0


def test_veto_compares_the_drafters_top_token_id_and_its_probability():
    from types import SimpleNamespace

    from hf_dynaspec.drafting.planning.fixed import vetoes
    from hf_dynaspec.drafting.proposers.drafter import ChainProposer
    from hf_dynaspec.kernels.shortlist_head import ShortlistHeadOutput

    logits = torch.log(torch.tensor([[0.1, 0.6, 0.3]]))

    def first_offer(token_ids):
        session = SimpleNamespace(first_position=lambda ids, hidden: ("h", "c", ShortlistHeadOutput(logits, token_ids)))
        return ChainProposer(session, 3).first_offer(SimpleNamespace(input_ids=None, hidden=None))

    full = first_offer(None)
    assert full.read[0] == "h" and full.num_tokens == 3  # drafting it continues from the scored position
    assert not vetoes(full, 1, veto=0.0)  # the drafter agrees: never a veto
    assert vetoes(full, 2, veto=0.0)
    assert vetoes(full, 2, veto=0.5) and not vetoes(full, 2, veto=0.7)
    # Over a shortlist the argmax is a row index; what counts is the vocabulary id of that row.
    shortlisted = first_offer(torch.tensor([40, 17, 8]))
    assert not vetoes(shortlisted, 17, veto=0.0)
    assert vetoes(shortlisted, 1, veto=0.0)


def test_a_vetoing_drafter_keeps_wrong_lookup_drafts_out(monkeypatch):
    """Prompts over 8 symbols give 1-gram lookup matches whose continuations are mostly wrong; a drafter that
    imitates the target vetoes them, so far fewer lookup rounds end with their first token rejected."""
    from hf_dynaspec.stats import DraftStats

    record = DraftStats.record
    target = one_layer_target("llama")

    def failed_lookup_rounds(veto: float) -> tuple[int, int]:
        passes = []  # (looked up, accepted) of every pass
        monkeypatch.setattr(DraftStats, "record", lambda self, n, a, looked_up=False, **kw: passes.append((looked_up, a))
                            or record(self, n, a, looked_up, **kw))
        vetoes = 0
        for seed in range(24):
            assistant = imitating_assistant(target, num_assistant_tokens=2, prompt_lookup_num_tokens=4,
                                            prompt_lookup_min_ngram=1, prompt_lookup_veto=veto)
            input_ids = torch.randint(0, 8, (1, 30), generator=torch.Generator().manual_seed(seed))
            assert torch.equal(assisted_generate(target, assistant, input_ids, max_new_tokens=8),
                               plain_generate(target, input_ids, max_new_tokens=8))
            vetoes += assistant.stats.lookup_vetoes
        return sum(looked_up and accepted == 0 for looked_up, accepted in passes), vetoes

    unchecked, no_vetoes = failed_lookup_rounds(1.0)
    checked, vetoes = failed_lookup_rounds(0.0)
    assert no_vetoes == 0 and vetoes > 0
    assert unchecked >= 4 and checked <= unchecked // 3, (unchecked, checked)
