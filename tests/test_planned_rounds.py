"""What runs is what was planned (draft_plan="auto"), and sampled planned rounds stay exact whatever the costs.

- the verified draft is the source and the length the planner chose (a lookup draft longer than planned, or
  another source's tokens, fails);
- the accelerator form (one read per round) applies the planner's end-of-round cut;
- greedy and sampled calls learn acceptance apart (their acceptance differs);
- the exact enumeration of sampled planned rounds under steep, flat and this machine's measured costs: a plan
  that reads the drawn token's probability is seen under the costs where the plan depends on it.
"""

from __future__ import annotations

import contextlib
import copy

import pytest
import torch
from conftest import assisted_generate, imitating_assistant, one_layer_target, plain_generate
from test_enumeration import TOLERANCE
from test_planner import AUTO, flat_costs, planned_round_error

from hf_dynaspec.drafting import lookup as lookup_module
from hf_dynaspec.drafting.chain import ChainDraftSession
from hf_dynaspec.drafting.device_paths import accelerator_paths_on_cpu
from hf_dynaspec.drafting.lookup import SuffixCache
from hf_dynaspec.drafting.planning.core import RoundCosts
from hf_dynaspec.drafting.planning.planner import SpeculationPlanner
from hf_dynaspec.drafting.proposers.drafter import ConfidenceRule
from hf_dynaspec.drafting.runtime import planner_memory, runtime_head
from hf_dynaspec.generation import candidate_generator as cg
from hf_dynaspec.generation import rounds
from hf_dynaspec.generation.costs import round_costs as calibration


def moderate_costs(max_tokens: int = 20) -> RoundCosts:
    """Each verified token costs 30% of a step: long lookup drafts do not pay, so the plan cuts them short."""
    return RoundCosts([0.0] + [1.0 + 0.3 * (n - 1) for n in range(1, max_tokens + 2)], consume_seconds=0.01,
                      first_draft_seconds=0.02, draft_step_seconds=0.03)


def steep_costs(max_tokens: int = 20) -> RoundCosts:
    """Each verified token costs 15% of a step more: whether a position is kept turns on the drafter's confidence,
    so a plan fed the drawn token's probability fails the exact enumeration here (benchmarks/mutation_check.py's
    "plan reads the drawn token's probability")."""
    return RoundCosts([0.0] + [1.0 + 0.15 * n for n in range(max_tokens + 1)], consume_seconds=0.01,
                      first_draft_seconds=0.02, draft_step_seconds=0.03)


def repeating_prompt(vocab: int, length: int = 24, seed: int = 0) -> torch.Tensor:
    part = torch.randint(0, vocab, (1, length // 3), generator=torch.Generator().manual_seed(seed))
    return torch.cat([part, part, part], dim=1)


class RoundSpy:
    """Records, per round of a planned call: the plan, what each lookup source proposed, and the draft verified."""

    def __init__(self, monkeypatch):
        self.rounds, self._proposals = [], {}
        choose, lookup_match, propose = SpeculationPlanner.choose, lookup_module.lookup_match, SuffixCache.draft
        get_candidates = cg.EagleCandidateGenerator.get_candidates
        spy = self

        def recording_lookup(*args, **kwargs):
            tokens, match = lookup_match(*args, **kwargs)
            spy._proposals["prompt-lookup"] = tokens.tolist() if match else None
            return tokens, match

        def recording_propose(self, max_tokens):
            found = propose(self, max_tokens)
            spy._proposals["suffix"] = None if found is None else (found.source, list(found.tokens))
            return found

        def recording_plan(self, offers, context, rows=1):
            spy._plan = choose(self, offers, context, rows)
            return spy._plan

        def recording_candidates(self, input_ids, model_outputs=None, **kwargs):
            spy._proposals, spy._plan = {}, None
            ids, logits = get_candidates(self, input_ids, model_outputs=model_outputs, **kwargs)
            if spy._plan is not None:
                drafted = ids[0, input_ids.shape[1]:].tolist()
                spy.rounds.append((copy.copy(spy._plan), dict(spy._proposals), drafted))
            return ids, logits

        monkeypatch.setattr(lookup_module, "lookup_match", recording_lookup)
        monkeypatch.setattr(SuffixCache, "draft", recording_propose)
        monkeypatch.setattr(SpeculationPlanner, "choose", recording_plan)
        monkeypatch.setattr(cg.EagleCandidateGenerator, "get_candidates", recording_candidates)


def test_the_round_drafts_exactly_the_source_and_length_the_plan_chose(monkeypatch):
    monkeypatch.setattr(rounds, "round_costs", lambda *a, **k: moderate_costs())
    spy = RoundSpy(monkeypatch)
    target = one_layer_target("llama", seed=2)
    assistant = imitating_assistant(target, noise=0.6, seed=4, **{**AUTO, "prompt_lookup_num_tokens": 8,
                                                                   "suffix_cache_num_tokens": 8})
    prompt = repeating_prompt(target.config.vocab_size)
    expected = plain_generate(target, prompt, max_new_tokens=80)
    assert torch.equal(assisted_generate(target, assistant, prompt, max_new_tokens=80), expected)
    # Without prompt lookup, the same prompt again: the suffix cache's request part and its shared part (the
    # first call's output) are the lookup sources.
    assistant.generation_config.prompt_lookup_num_tokens = 0
    assert torch.equal(assisted_generate(target, assistant, prompt, max_new_tokens=80), expected)
    cut_short, sources = 0, set()
    for plan, proposals, drafted in spy.rounds:
        sources.add(plan.source)
        if plan.source == "none":
            assert drafted == [], plan
        elif plan.source == "drafter":
            assert 1 <= len(drafted) <= plan.num_tokens or not drafted, (plan, drafted)
        else:
            proposal = proposals["prompt-lookup"] if plan.source == "prompt-lookup" else proposals["suffix"][1]
            if plan.source != "prompt-lookup":
                assert proposals["suffix"][0] == plan.source
            assert drafted == proposal[: plan.num_tokens], (plan, proposal, drafted)
            cut_short += plan.num_tokens < len(proposal)
    assert {"drafter", "prompt-lookup", "suffix-request", "suffix-shared"} <= sources, sources
    assert cut_short >= 3, "some lookup drafts must be planned shorter than found, or the test sees no cut"


def test_copies_are_drafted_as_long_as_they_pay_not_as_the_options_say(monkeypatch):
    """#76: under `auto` a lookup source offers its copy as far as it matches (up to LONGEST_COPY) and the planner's
    costs decide how much to draft: where verifying costs the same at any width, copies far past the options' 2
    tokens; where each verified token costs a whole step, no copy but the probes (at most MAX_POSITION_KEY tokens).
    Greedy output stays identical. (The tiny target falls into a loop of 5 tokens, which
    the suffix cache continues as far as asked.)"""
    from hf_dynaspec.drafting.planning.core import LONGEST_COPY, MAX_POSITION_KEY

    full_steps = RoundCosts([float(n) for n in range(42)], consume_seconds=0.01, first_draft_seconds=0.02,
                            draft_step_seconds=0.03)
    copied = {}
    for name, costs in (("flat", flat_costs(40)), ("full steps", full_steps)):
        monkeypatch.setattr(rounds, "round_costs", lambda *a, costs=costs, **k: costs)
        spy = RoundSpy(monkeypatch)
        target = one_layer_target("llama", seed=2)
        assistant = imitating_assistant(target, noise=0.6, seed=4, **{**AUTO, "suffix_cache_num_tokens": 2})
        prompt = repeating_prompt(target.config.vocab_size)
        expected = plain_generate(target, prompt, max_new_tokens=90)
        assert torch.equal(assisted_generate(target, assistant, prompt, max_new_tokens=90), expected)
        copied[name] = [(len(drafted), plan.probe) for plan, _, drafted in spy.rounds if plan.source.startswith("suffix")]
    assert copied["flat"] and 16 < max(copied["flat"])[0] <= LONGEST_COPY, copied
    assert copied["full steps"] and all(probe and n <= MAX_POSITION_KEY for n, probe in copied["full steps"]), copied


def test_the_round_drafts_the_planned_source_where_the_sources_disagree(monkeypatch):
    """A plan forced to pick the suffix cache's shared part where prompt lookup proposes other tokens: the round
    must verify the shared part's tokens (a round that took the first source found would verify lookup's)."""
    from hf_dynaspec import suffix_cache
    from hf_dynaspec.drafting.planning.core import RoundPlan

    monkeypatch.setattr(rounds, "round_costs", lambda *a, **k: flat_costs())
    spy = RoundSpy(monkeypatch)
    planned = SpeculationPlanner.choose  # the spy's wrapper: it records the plan it returns

    def forced(self, offers, context, rows=1):
        shared = [offer for offer in offers if offer.source == "suffix-shared"]
        if not shared:
            return planned(self, offers, context, rows)
        copies = tuple(offer for offer in offers if not offer.proposer.reads_features)  # as the planner hands them
        spy._plan = RoundPlan(shared[0], min(3, shared[0].num_tokens), copies=copies)
        return spy._plan

    monkeypatch.setattr(SpeculationPlanner, "choose", forced)
    target = one_layer_target("llama", seed=2)
    assistant = imitating_assistant(target, noise=0.6, seed=4, **{**AUTO, "prompt_lookup_num_tokens": 6,
                                                                   "prompt_lookup_min_ngram": 1,
                                                                   "suffix_cache_num_tokens": 6})
    vocab = target.config.vocab_size
    for seed in range(100):  # a prompt holding the target's first token: prompt lookup finds a 1-gram match
        prompt = torch.randint(0, vocab, (1, 30), generator=torch.Generator().manual_seed(seed))
        first = int(plain_generate(target, prompt, max_new_tokens=1)[0, -1])
        if first in prompt[0].tolist():
            break
    # The corpus continues the context's last 4-gram with other tokens: the shared part's draft differs.
    suffix_cache(assistant).add_corpus([prompt[0, -3:].tolist() + [first] + [(first + k) % vocab for k in (5, 9, 2)]])
    assert torch.equal(assisted_generate(target, assistant, prompt, max_new_tokens=12),
                       plain_generate(target, prompt, max_new_tokens=12))
    disagreed = 0
    for plan, proposals, drafted in spy.rounds:
        if plan.source == "suffix-shared":
            assert proposals["suffix"][0] == "suffix-shared"
            assert drafted == proposals["suffix"][1][: plan.num_tokens], (proposals, drafted)
            lookup = proposals.get("prompt-lookup")
            disagreed += lookup is not None and lookup[: plan.num_tokens] != drafted
    assert disagreed >= 1, "the sources must disagree in some round, or the test sees nothing"


def test_the_accelerator_form_applies_the_planners_cut(monkeypatch):
    """Deferred decisions draft up to the cap and cut once at the round's end: the draft verified is the planner's
    cut of what was drafted, never the whole cap."""
    monkeypatch.setattr(rounds, "round_costs", lambda *a, **k: steep_costs())
    cuts, drafted = [], []
    cut, propose = ConfidenceRule.cut, ChainDraftSession.draft

    def recording_cut(self, confidences):
        cuts.append((len(confidences), cut(self, confidences)))
        return cuts[-1][1]

    def recording_propose(self, *args, rule=None, **kwargs):
        draft = propose(self, *args, rule=rule, **kwargs)
        if isinstance(rule, ConfidenceRule):  # (probe rounds keep their whole length: no cut)
            drafted.append(draft.token_ids.shape[1])
        return draft

    monkeypatch.setattr(ConfidenceRule, "cut", recording_cut)
    monkeypatch.setattr(ChainDraftSession, "draft", recording_propose)
    target = one_layer_target("qwen2", seed=2)
    assistant = imitating_assistant(target, noise=1.2, seed=4, **{**AUTO, "auto_max_assistant_tokens": 6})
    prompt = repeating_prompt(target.config.vocab_size, seed=1)
    with accelerator_paths_on_cpu():
        got = assisted_generate(target, assistant, prompt, max_new_tokens=60)
    assert torch.equal(got, plain_generate(target, prompt, max_new_tokens=60))
    assert len(cuts) == len(drafted) > 5
    assert drafted == [kept for _, kept in cuts]
    assert any(kept < length for length, kept in cuts), "the cut must bite in some rounds"


def test_greedy_and_sampled_calls_learn_acceptance_apart(monkeypatch):
    monkeypatch.setattr(rounds, "round_costs", lambda *a, **k: flat_costs())
    target = one_layer_target("llama", seed=2)
    assistant = imitating_assistant(target, noise=0.6, **AUTO)
    prompt = repeating_prompt(target.config.vocab_size)
    greedy, sampled = planner_memory(assistant, False), planner_memory(assistant, True)
    assisted_generate(target, assistant, prompt, max_new_tokens=30)
    learnt = copy.deepcopy(greedy.position.counts)
    assert learnt and not sampled.position.counts
    torch.manual_seed(0)
    assisted_generate(target, assistant, prompt, max_new_tokens=30, do_sample=True, temperature=1.5)
    assert greedy.position.counts == learnt, "a sampled call must not teach the greedy tables"
    assert sampled.position.counts


def measured_costs():
    """This machine's costs for the enumeration's tiny pairing, measured (not read from a cache)."""
    target = one_layer_target("llama", seed=5, vocab_size=6)
    assistant = imitating_assistant(target)
    return calibration.measure_round_costs(target, assistant, runtime_head(assistant, assistant.generation_config), 4)


COSTS = {"flat": flat_costs, "steep": steep_costs, "measured": measured_costs}


@pytest.mark.parametrize("form", ["cpu", "accelerator"])
@pytest.mark.parametrize("kind", ["plain", "temperature"])
@pytest.mark.parametrize("costs", COSTS)
def test_planned_sampled_round_is_exact_under_every_cost_model(costs, kind, form, monkeypatch):
    """Flat costs keep nearly every position and steep ones cut on the drafter's confidence, so a plan fed the drawn
    token's probability instead of the distribution's top one fails here under steep costs whatever this
    machine measures (the measured case is whatever this machine is)."""
    with accelerator_paths_on_cpu() if form == "accelerator" else contextlib.nullcontext():
        error, outcomes = planned_round_error(COSTS[costs](), kind, form, monkeypatch)
    if costs != "measured":
        assert len({len(tokens) for tokens in outcomes}) >= 3, "the plan must vary the draft length"
    assert error < TOLERANCE, error
