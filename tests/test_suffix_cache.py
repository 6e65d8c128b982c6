"""The suffix cache (hf_dynaspec.drafting.lookup): what it drafts, its bound, and exact output with it."""

from __future__ import annotations

import pytest
import torch
from conftest import assisted_generate, imitating_assistant, one_layer_target, plain_generate
from enumeration import TargetOracle, chain_round, extended_joint, max_error, target_joint
from test_enumeration import PROMPT, TOLERANCE, VOCAB, processors

from hf_dynaspec import suffix_cache
from hf_dynaspec.drafting.lookup import NgramIndex, SuffixCache


def test_request_drafts_continue_the_most_recent_longest_match():
    cache = SuffixCache(max_ngram=3, min_ngram=2)
    cache.begin_request([1, 2, 3, 4, 9, 1, 2, 3, 5, 7, 2, 3])
    draft = cache.draft(2)
    assert draft.tokens == [5, 7] and draft.source == "suffix-request" and draft.match_length == 2
    cache.extend([5])  # ... 2 3 5: the 3-gram "2 3 5" matches once, followed by 7
    assert cache.draft(3).tokens == [7, 2, 3] and cache.draft(3).match_length == 3
    cache.begin_request([8, 6])
    assert cache.draft(4) is None  # nothing seen ends in "8 6"


def test_shared_drafts_take_the_most_frequent_continuation_and_yield_to_the_request():
    cache = SuffixCache(max_ngram=2, min_ngram=2)
    cache.add_corpus([[4, 5, 6], [4, 5, 6], [4, 5, 7]])
    cache.begin_request([0, 4, 5])
    draft = cache.draft(1)
    assert draft.tokens == [6] and draft.source == "suffix-shared"
    cache.begin_request([4, 5, 7, 1, 4, 5])  # the request's own "4 5 -> 7" is as long a match: it wins
    assert cache.draft(1).tokens == [7] and cache.draft(1).source == "suffix-request"


def test_outputs_join_the_shared_index_when_the_next_request_begins():
    cache = SuffixCache(max_ngram=2, min_ngram=2)
    cache.begin_request([1, 2])
    cache.extend([3, 4, 5])
    cache.begin_request([9, 3, 4])
    assert cache.documents == deque_of([[3, 4, 5]])  # the output only, not the prompt
    assert cache.draft(2).tokens == [5] and cache.draft(2).source == "suffix-shared"


def deque_of(items):
    from collections import deque

    return deque(items)


def table(index: NgramIndex) -> dict:
    return {key: {t: v[0] for t, v in followers.items()} for key, followers in index.table.items()}


def test_the_bound_evicts_oldest_documents_exactly():
    """After evictions the counts equal those of an index built from the remaining documents alone."""
    generator = torch.Generator().manual_seed(0)
    documents = [torch.randint(0, 5, (int(n),), generator=generator).tolist() for n in [7, 3, 9, 4, 8, 6]]
    cache = SuffixCache(max_ngram=3, min_ngram=1, max_tokens=20)
    cache.add_corpus(documents)
    assert cache.stored_tokens <= 20 and list(cache.documents) == documents[3:]
    fresh = NgramIndex(3)
    for document in documents[3:]:
        fresh.add(document)
    assert table(cache.shared) == table(fresh)
    oversized = SuffixCache(max_ngram=2, max_tokens=5)
    oversized.add_corpus([list(range(12))])
    assert oversized.stored_tokens == 5 and list(oversized.documents) == [list(range(7, 12))]


def test_extending_a_request_indexes_what_indexing_it_at_once_does():
    generator = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, 4, (40,), generator=generator).tolist()
    whole, pieces = NgramIndex(4), NgramIndex(4)
    whole.add(tokens)
    done = []
    for size in [5, 1, 7, 3, 24]:
        pieces.add(tokens[len(done) : len(done) + size], history=done)
        done += tokens[len(done) : len(done) + size]
    assert table(whole) == table(pieces)


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError, match="min_ngram"):
        SuffixCache(max_ngram=2, min_ngram=3)


def test_greedy_output_with_the_suffix_cache_is_identical_and_learns_across_calls(family):
    """The second call of the same task drafts from the first call's output (the shared index), and accepts
    more; both calls are token-identical to generate()."""
    target = one_layer_target(family, seed=2)
    assistant = imitating_assistant(target, noise=2.0, seed=4, draft_plan="fixed", suffix_cache_num_tokens=8)
    prompt = torch.randint(0, target.config.vocab_size, (1, 12), generator=torch.Generator().manual_seed(5))
    expected = plain_generate(target, prompt, max_new_tokens=80, do_sample=False)
    first = assisted_generate(target, assistant, prompt, max_new_tokens=80, do_sample=False)
    first_tau = assistant.stats.tau
    second = assisted_generate(target, assistant, prompt, max_new_tokens=80, do_sample=False)
    assert torch.equal(first, expected) and torch.equal(second, expected)
    assert sum(n for source, n in assistant.stats.passes_by_source.items() if source.startswith("suffix-")) > 0
    assert assistant.stats.tau > first_tau + 1.0, (first_tau, assistant.stats.tau)
    assert suffix_cache(assistant).request_tokens == second[0].tolist()  # every committed token, the last round's too


def test_a_forgetting_assistant_makes_its_next_call_a_first_call(monkeypatch):
    """forget_learnt_state (the bench's warm-ups, the notebook test's reference plan): the next call drafts nothing
    from earlier outputs and plans from the artifact's prior again, as the very first call did; the built head is
    kept. The bench's warm-up on a prompt must not hand the measured call its own output."""
    from test_planner import flat_costs

    from hf_dynaspec.bench.harness import run_benchmark
    from hf_dynaspec.bench.methods import Method
    from hf_dynaspec.bench.prompts import EncodedPrompt
    from hf_dynaspec.drafting import runtime

    monkeypatch.setattr("hf_dynaspec.generation.rounds.round_costs", lambda *a, **k: flat_costs())
    target = one_layer_target("llama", seed=2)
    assistant = imitating_assistant(target, noise=2.0, seed=4, draft_plan="auto", suffix_cache_num_tokens=8)
    prompt = torch.randint(0, target.config.vocab_size, (1, 12), generator=torch.Generator().manual_seed(5))
    assisted_generate(target, assistant, prompt, max_new_tokens=40, do_sample=False)
    first = (assistant.stats.tau, dict(assistant.stats.passes_by_source))
    head = runtime.runtime_of(assistant).head
    memory = runtime.planner_memory(assistant, False)
    runtime.forget_learnt_state(assistant)
    assert runtime.planner_memory(assistant, False) is not memory and suffix_cache(assistant).request_tokens == []
    assisted_generate(target, assistant, prompt, max_new_tokens=40, do_sample=False)
    assert (assistant.stats.tau, dict(assistant.stats.passes_by_source)) == first
    assert runtime.runtime_of(assistant).head is head
    # The bench: its warm-up (prompt 0's first 8 tokens) leaves nothing learnt behind: at the first measured call,
    # no earlier output has joined the shared index (the warm-up's would, as the measured request begins).
    documents = []

    def on_run(prompt, method, run):
        if method.assistant is not None:
            documents.append(len(suffix_cache(assistant).documents))

    run_benchmark(target, [Method("vanilla"), Method("auto", {"assistant_model": assistant}, assistant)],
                  [EncodedPrompt("p", "coding", prompt)], max_new_tokens=4, dtype="fp32", target_name="tiny",
                  progress=False, on_run=on_run)
    assert documents == [0]


def test_forgetting_forgets_what_a_sampled_warm_up_taught(monkeypatch):
    """A sampled call teaches the sampled planner's tables (its own, apart from greedy's); forgetting must drop
    them too, or a sampled warm-up would still teach the measured sampled call."""
    from test_planner import flat_costs

    from hf_dynaspec.drafting import runtime

    monkeypatch.setattr("hf_dynaspec.generation.rounds.round_costs", lambda *a, **k: flat_costs())
    target = one_layer_target("llama", seed=2)
    assistant = imitating_assistant(target, noise=0.5, seed=4, draft_plan="auto")
    prompt = torch.randint(0, target.config.vocab_size, (1, 12), generator=torch.Generator().manual_seed(5))
    torch.manual_seed(0)
    assisted_generate(target, assistant, prompt, max_new_tokens=30, do_sample=True)
    sampled = runtime.planner_memory(assistant, True)
    assert sampled.position.counts  # the case: the sampled warm-up taught its tables
    runtime.forget_learnt_state(assistant)
    fresh = runtime.planner_memory(assistant, True)
    assert fresh is not sampled and not fresh.position.counts


def test_auto_plan_uses_the_suffix_cache_on_a_repeated_task(monkeypatch):
    from test_planner import flat_costs

    monkeypatch.setattr("hf_dynaspec.generation.rounds.round_costs", lambda *a, **k: flat_costs())
    target = one_layer_target("llama", seed=2)
    assistant = imitating_assistant(target, noise=2.0, seed=4, draft_plan="auto", suffix_cache_num_tokens=8)
    prompt = torch.randint(0, target.config.vocab_size, (1, 12), generator=torch.Generator().manual_seed(5))
    expected = plain_generate(target, prompt, max_new_tokens=80, do_sample=False)
    for _ in range(4):
        assert torch.equal(assisted_generate(target, assistant, prompt, max_new_tokens=80, do_sample=False), expected)
    sources = assistant.stats.passes_by_source
    assert sources.get("suffix-shared", 0) + sources.get("suffix-request", 0) > sources.get("drafter", 0), sources


def test_sampled_round_with_a_suffix_draft_is_exact(monkeypatch):
    """A suffix-cache draft is a deterministic proposal (one-hot logits); the round stays exact."""
    from test_enumeration import spy_on_drafts

    drafts = spy_on_drafts(monkeypatch)
    target = one_layer_target("llama", seed=5, vocab_size=VOCAB)
    assistant = imitating_assistant(target, noise=1.0, seed=3, draft_plan="fixed", suffix_cache_num_tokens=2)
    suffix_cache(assistant).add_corpus([[5, 2, 3, 1]])  # "5 2" -> 3 1: the request itself has "5 2" -> nothing after
    lp = processors("temperature")
    outcomes = chain_round(target, assistant, PROMPT, lp, 2)
    oracle = TargetOracle(target, lp)
    error = max_error(extended_joint(oracle, PROMPT, outcomes, 3), target_joint(oracle, PROMPT, 3))
    assert error < TOLERANCE, error
    assert drafts and all(d.looked_up and d.token_ids.tolist() == [[3, 1]] for d in drafts)
