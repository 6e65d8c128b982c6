"""`custom_generate=speculative_generate` runs the `assistant_model=` route's round (hf_dynaspec.drafting.round): every
option an assistant loads with (prompt lookup, the suffix cache, the confidence stop, `draft_plan="auto"`) works
on the public route, greedy token-identical to plain generate() and sampling exact.

- greedy identity over families, prompts and 80 new tokens, for the shipped option sets and a fixed plan with
  every lookup source and the confidence stop, with each source shown to have drafted;
- the exact enumeration of whole sampled chain_generate calls (every random choice followed: the prefill's
  token, the verifier's accept tests, the residual draws), fixed and planned, against the target's joint
  distribution of the new tokens.

Each shipped assistant as loaded (real models, fp32) is token-identical on both routes in tests/test_real_model.py
(Qwen2.5-Coder-0.5B) and tests/test_real_families.py (Gemma-3-270M).
"""

from __future__ import annotations

import pytest
import torch
from conftest import imitating_assistant, one_layer_target, plain_generate, tiny_target
from enumeration import TargetOracle, enumerate_paths, max_error, outcome_distribution, target_joint
from test_enumeration import PROMPT, TOLERANCE, VOCAB, processors
from test_planned_rounds import repeating_prompt
from test_planner import flat_costs

from hf_dynaspec import speculative_generate
from hf_dynaspec.drafting.lookup import SuffixCache
from hf_dynaspec.drafting.planning.core import PlannerMemory
from hf_dynaspec.generation import rounds as cg

SHIPPED = dict(draft_plan="auto", prompt_lookup_num_tokens=5, suffix_cache_num_tokens=16, auto_max_assistant_tokens=8)
FIXED_ALL = dict(draft_plan="fixed", num_assistant_tokens=3, prompt_lookup_num_tokens=4, suffix_cache_num_tokens=8,
                 assistant_confidence_threshold=0.05)


# 4 tokens of a 6-token vocabulary with point-mass drafts: exactly 6**4 paths (per token: the draft accepted, or
# rejected and one of the 5 others drawn). One path more means the code draws where it should not (a sampled draft
# multiplies the paths by up to 6 per drafted position): the enumeration fails there, at once.
MAX_PATHS = VOCAB**4


def public(target, assistant, prompt, **kwargs):
    return target.generate(prompt, custom_generate=speculative_generate, drafter=assistant, **kwargs)


@pytest.mark.parametrize("options", [SHIPPED, FIXED_ALL, dict(FIXED_ALL, draft_plan="adl", num_assistant_tokens=5)],
                         ids=["shipped-auto", "fixed-every-source", "adl-every-source"])
def test_greedy_chain_generate_is_identical_with_every_source(family, options, monkeypatch):
    monkeypatch.setattr(cg, "round_costs", lambda *a, **k: flat_costs())
    target = one_layer_target(family, seed=2)
    assistant = imitating_assistant(target, noise=0.6, seed=4, **options)
    sources = {}
    for seed in range(2):
        prompt = repeating_prompt(target.config.vocab_size, seed=seed)
        expected = plain_generate(target, prompt, max_new_tokens=80, do_sample=False)
        got = public(target, assistant, prompt, max_new_tokens=80, do_sample=False)
        assert torch.equal(got, expected)
        for source, count in assistant.stats.passes_by_source.items():
            sources[source] = sources.get(source, 0) + count
    assert sources.get("drafter", 0) > 0, sources
    assert sources.get("prompt-lookup", 0) + sum(n for s, n in sources.items() if s.startswith("suffix-")) > 0, sources


def test_the_confidence_stop_drafts_less_on_the_public_route():
    target = one_layer_target("llama", seed=2)
    prompt = repeating_prompt(target.config.vocab_size, seed=0)
    drafted = {}
    for threshold in (0.0, 0.9):
        assistant = imitating_assistant(target, noise=1.5, seed=4, num_assistant_tokens=4,
                                        assistant_confidence_threshold=threshold)
        got = public(target, assistant, prompt, max_new_tokens=40, do_sample=False)
        assert torch.equal(got, plain_generate(target, prompt, max_new_tokens=40, do_sample=False))
        drafted[threshold] = assistant.stats.drafted
    assert drafted[0.9] < drafted[0.0], drafted


def test_adaptive_length_follows_acceptance_on_both_routes():
    """draft_plan="adl": a drafter that is always right drafts longer chains than one that is mostly wrong, and
    both routes stay identical to plain generate()."""
    target = one_layer_target("llama", seed=2)
    prompt = repeating_prompt(target.config.vocab_size, seed=1)
    expected = plain_generate(target, prompt, max_new_tokens=40, do_sample=False)
    per_round = {}
    for noise in (0.0, 3.0):
        assistant = imitating_assistant(target, noise=noise, seed=4, draft_plan="adl", num_assistant_tokens=6)
        assert torch.equal(public(target, assistant, prompt, max_new_tokens=40, do_sample=False), expected)
        per_round[noise] = assistant.stats.drafted / assistant.stats.verify_passes
        got = target.generate(prompt, attention_mask=torch.ones_like(prompt), assistant_model=assistant,
                              max_new_tokens=40, do_sample=False)
        assert torch.equal(got, expected)
    assert per_round[0.0] > 3.0 > per_round[3.0], per_round


def fresh_run_time_state(monkeypatch):
    """Each enumerated call starts from the same state: the planner's tables and the suffix cache (kept across
    calls of one assistant) would otherwise differ between the enumeration's re-runs."""
    monkeypatch.setattr(cg, "round_costs", lambda *a, **k: flat_costs())
    monkeypatch.setattr(cg, "planner_memory", lambda *a, **k: PlannerMemory())
    monkeypatch.setattr(cg, "suffix_cache", lambda assistant, options: SuffixCache(vocab_size=VOCAB)
                        if options.suffix_cache_num_tokens else None)


@pytest.mark.parametrize("options", [
    dict(draft_plan="fixed", num_assistant_tokens=2, prompt_lookup_num_tokens=2),
    dict(draft_plan="auto", auto_max_assistant_tokens=2, prompt_lookup_num_tokens=2, suffix_cache_num_tokens=2),
    dict(draft_plan="adl", num_assistant_tokens=3),
], ids=["fixed", "auto", "adl"])
def test_sampled_chain_generate_is_exact(monkeypatch, options):
    """Four new tokens sampled at temperature 0.7 through whole speculative_generate calls: their exact distribution
    equals the target's. A round that verified a sampled draft as a point mass, or a plan that read a drawn
    token, fails this (benchmarks/mutation_check.py)."""
    fresh_run_time_state(monkeypatch)
    target = one_layer_target("llama", seed=5, vocab_size=VOCAB)
    assistant = imitating_assistant(target, noise=1.0, seed=3, **options)
    prompt = torch.tensor([PROMPT])
    drafted = []

    def call():
        out = public(target, assistant, prompt, max_new_tokens=4, do_sample=True, temperature=0.7, top_k=0)
        drafted.append(assistant.stats.drafted)
        return tuple(out[0, len(PROMPT):].tolist())

    paths = enumerate_paths(call, max_paths=MAX_PATHS)
    outcomes = outcome_distribution(paths)
    oracle = TargetOracle(target, processors("temperature"))
    assert max_error(outcomes, target_joint(oracle, PROMPT, 4)) < TOLERANCE
    assert max(drafted) >= 2, "the calls must have verified drafts"


@pytest.mark.parametrize("asked", [False, True], ids=["not-asked", "output_scores"])
def test_the_loop_holds_no_scores_nobody_asked_for(monkeypatch, asked):
    """Each committed token's full-vocabulary rows (0.6-1 MiB each at 150k-260k tokens) are kept only when
    output_scores / output_logits ask: at every target pass, the rows of rounds before the last are gone."""
    import gc
    import weakref

    import hf_dynaspec.generation.batched_loop as loop

    target = one_layer_target("llama", seed=2)
    assistant = imitating_assistant(target, noise=0.2, seed=4, num_assistant_tokens=3)
    rounds: list[list[weakref.ref]] = []
    held_at_pass = []
    original = loop._accepted_paths

    def recording(*args, **kwargs):
        paths = original(*args, **kwargs)
        rounds.append([weakref.ref(row) for path in paths for row in [*path.scores, *path.logits]])
        return paths

    def count_held(*_):
        held = sum(ref() is not None for refs in rounds[:-1] for ref in refs)
        if held and not asked:  # rows only a reference cycle keeps are not held: count again after a collection
            gc.collect()
            held = sum(ref() is not None for refs in rounds[:-1] for ref in refs)
        held_at_pass.append(held)

    monkeypatch.setattr(loop, "_accepted_paths", recording)
    handle = target.register_forward_hook(count_held)
    try:
        out = public(target, assistant, torch.tensor([[1, 4, 2, 7]]), max_new_tokens=40, do_sample=False,
                     return_dict_in_generate=True, output_scores=asked)
    finally:
        handle.remove()
    assert len(rounds) >= 4, "the call must run several rounds"
    if asked:
        assert len(out.scores) == 40 and held_at_pass[-1] > 0
    else:
        assert out.scores is None and max(held_at_pass) == 0, held_at_pass


def test_speculative_generate_is_each_route_by_its_drafter_and_trees():
    """The one entry: chains by default, EAGLE-2 trees with `trees=True` (passes drafting more nodes than a chain's
    K), a Medusa drafter sent to the lattice route; every output equal to plain greedy `generate()`."""
    from test_medusa import trained_heads

    from hf_dynaspec import speculative_generate

    target = one_layer_target("llama", seed=2)
    assistant = imitating_assistant(target, noise=0.2, seed=4, draft_plan="fixed", num_assistant_tokens=2,
                                    prompt_lookup_num_tokens=0, suffix_cache_num_tokens=0)
    ids = torch.tensor([[1, 4, 2, 7, 9, 3]])
    plain = target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=24, do_sample=False)
    most_drafted = {}
    for trees in (False, True):
        got = target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=24, do_sample=False,
                              custom_generate=speculative_generate, drafter=assistant, trees=trees,
                              tree_top_k=3, tree_depth=2, tree_total_tokens=6)
        assert torch.equal(got, plain)
        most_drafted[trees] = max(assistant.stats.drafted_per_pass)
    assert most_drafted == {False: 2, True: 6}
    medusa_target = tiny_target("llama", seed=3)
    heads = trained_heads(medusa_target, steps=20)
    expected = medusa_target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=16, do_sample=False)
    got = medusa_target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=16, do_sample=False,
                                 custom_generate=speculative_generate, drafter=heads)
    assert torch.equal(got, expected) and heads.stats.verify_passes > 0
    # Medusa options by their config names per call, transformers-named ones included: generate() hands them to
    # the custom_generate (its signature names them) instead of keeping them in its own generation config.
    from hf_dynaspec import speculative_generate

    drafted = {}
    for cap in (None, 1):
        got = medusa_target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=16, do_sample=False,
                                     custom_generate=speculative_generate, drafter=heads, lattice_draft="chain",
                                     num_assistant_tokens=cap)
        assert torch.equal(got, expected)
        drafted[cap] = max(heads.stats.drafted_per_pass)
    assert drafted == {None: heads.num_positions, 1: 1}
    # speculative_generate hands a lattice source its tree shape by the lattice options' names.
    for total in (None, 3):
        got = medusa_target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=16, do_sample=False,
                                     custom_generate=speculative_generate, drafter=heads, tree_total_tokens=total)
        assert torch.equal(got, expected)
        drafted[total] = max(heads.stats.drafted_per_pass)
    assert drafted[3] == 3 < drafted[None]


@pytest.mark.parametrize("route", ["assistant_model", "chain_generate"])
def test_the_rounds_are_told_the_drafted_tokens_accepted_without_the_targets_own(route):
    """The loop tells each round how many of its drafted tokens were accepted, not counting the token the target
    adds itself: tau, the adaptive length and the planner's tables all read that count. Every pass then accepted
    at most what it drafted, and the new tokens are the prefill's plus, per pass, the accepted drafts and the
    target's own token."""
    target = one_layer_target("llama", seed=2)
    assistant = imitating_assistant(target, noise=0.2, seed=4, draft_plan="fixed", num_assistant_tokens=2)
    ids = torch.randint(0, target.config.vocab_size, (1, 9), generator=torch.Generator().manual_seed(1))
    kwargs = (dict(assistant_model=assistant) if route == "assistant_model"
              else dict(custom_generate=speculative_generate, drafter=assistant))
    new = 30
    out = target.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=new, **kwargs)
    assert torch.equal(out, plain_generate(target, ids, max_new_tokens=new))
    stats = assistant.stats
    # The case: passes whose whole draft was accepted (the count the bug would raise past the draft).
    assert any(a == d > 0 for a, d in zip(stats.accepted_per_pass, stats.drafted_per_pass)), stats.accepted_per_pass
    assert all(a <= d for a, d in zip(stats.accepted_per_pass, stats.drafted_per_pass)), \
        list(zip(stats.accepted_per_pass, stats.drafted_per_pass))
    assert 1 + sum(stats.accepted_per_pass) + stats.verify_passes == out.shape[1] - ids.shape[1]
