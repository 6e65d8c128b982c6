"""Probe rounds (draft_plan="auto"): a planner that has stopped drafting keeps learning.

Without probes a planner whose prior (acceptance 0.5) says "no draft" never drafts, so it never learns that its
drafter is good: on this project's CPU an fp32 0.5B pairing sat on that edge and measuring noise decided whether
the shipped assistant ever drafted (CI saw tau 1.0). The tests pin the schedule (first probe, doubling interval,
cap), that no probe is paid where even a perfect drafter cannot pay, that a
good drafter behind a pessimistic prior is found and used, and that probe rounds stay greedy-identical and
sampling-exact.
"""

from __future__ import annotations

import pytest
import torch
from conftest import assisted_generate, imitating_assistant, one_layer_target, plain_generate
from plans import LookupCandidate, Plan, Planning
from test_enumeration import TOLERANCE
from test_planner import AUTO, linear_costs, planned_round_error

from hf_dynaspec.drafting.planning import core as planning_core
from hf_dynaspec.drafting.planning.core import DRAFTER, PROBE_FIRST, PROBE_LONGEST, PlannerMemory, RoundCosts


def hopeless_costs(max_tokens: int = 20) -> RoundCosts:
    """Each verified token costs a full step and drafting is dear: not even an always-right drafter pays."""
    return RoundCosts([0.0] + [float(n) for n in range(1, max_tokens + 2)], consume_seconds=0.01,
                      first_draft_seconds=0.5, draft_step_seconds=0.5)


def edge_costs(max_tokens: int = 20) -> RoundCosts:
    """Each verified token costs 60% of a step: at the prior's acceptance (0.5) no draft pays, at 0.85 four do."""
    return RoundCosts([0.0] + [1.0 + 0.6 * (n - 1) for n in range(1, max_tokens + 2)], consume_seconds=0.01,
                      first_draft_seconds=0.02, draft_step_seconds=0.03)


def rounds_until_probe(planner: Planning) -> tuple[int, Plan]:
    """Plan (and record as drafting nothing) rounds until one drafts: (its number, its plan)."""
    for count in range(1, 10 * PROBE_LONGEST):
        plan = planner.plan_round([], room=100)
        if plan.source != "none":
            return count, plan
        planner.record(plan, num_drafted=0, num_accepted=0)
    raise AssertionError("no probe")


def test_probes_follow_a_doubling_schedule_up_to_the_cap():
    planner = Planning(linear_costs(), PlannerMemory(), 8)
    # Under linear costs an always-right drafter's rate (k + 1) / T(k) grows with k: the probe drafts all 8.
    gaps = []
    for _ in range(9):
        count, plan = rounds_until_probe(planner)
        assert plan == Plan("drafter", 8, probe=True)
        gaps.append(count)
    # The probe is the round after `interval` rounds that drafted nothing.
    assert gaps == [min(PROBE_FIRST * 2**i, PROBE_LONGEST) + 1 for i in range(9)]
    # The probe is capped by the room left.
    schedule = planner.memory.probe_schedule.state[DRAFTER]
    schedule[0] = schedule[1]
    assert planner.plan_round([], room=3) == Plan("drafter", 3, probe=True)
    # Every round that is not a probe counts towards the next one, whatever it drafted.
    for plan in (Plan("drafter", 4), Plan("prompt-lookup", 3, 2), Plan("drafter", 3, probe=True)):
        planner.record(plan, num_drafted=2, num_accepted=1)
    assert schedule[0] == 2


def test_accepted_probes_unlock_drafting_on_their_own():
    memory = PlannerMemory()
    planner = Planning(linear_costs(), memory, 8)
    _, probe = rounds_until_probe(planner)
    assert memory.probe_schedule.interval(DRAFTER) == 2 * PROBE_FIRST
    for _ in range(40):  # probes all accepted (0.98 per position): the drafter now pays on its own
        planner.record(probe, num_drafted=8, num_accepted=8)
    plan = planner.plan_round([], room=100)
    assert plan.source == "drafter" and not plan.probe


def test_no_probe_where_even_a_perfect_drafter_cannot_pay():
    planner = Planning(hopeless_costs(), PlannerMemory(), 8)
    for _ in range(4 * PROBE_LONGEST):
        plan = planner.plan_round([], room=100)
        assert plan.source == "none"
        planner.record(plan, num_drafted=0, num_accepted=0)


def test_lookup_rounds_count_towards_a_probe():
    """A lookup source that keeps winning may win only because the drafter's estimate is the prior."""

    planner = Planning(linear_costs(), PlannerMemory(), 8)
    for _ in range(30):
        planner.record(Plan("prompt-lookup", 6, 3), num_drafted=6, num_accepted=6)
    lookup = LookupCandidate("prompt-lookup", match_length=3, num_tokens=6)
    assert planner.plan_round([lookup], room=100) == Plan("drafter", 8, probe=True)


def test_a_good_drafter_behind_a_pessimistic_prior_is_found_and_output_is_identical(family, fixed_costs):
    """The 0.5 prior says "no draft"; the drafter is nearly always right. Probes find it, the plan then drafts on
    its own (rounds that are not probes), and greedy output stays identical."""
    fixed_costs(edge_costs())
    target = one_layer_target(family, seed=2)
    assistant = imitating_assistant(target, noise=0.0, seed=4, **AUTO, prompt_lookup_num_tokens=0)
    prompt = torch.randint(0, target.config.vocab_size, (1, 16), generator=torch.Generator().manual_seed(5))
    expected = plain_generate(target, prompt, max_new_tokens=120, do_sample=False)
    got = assisted_generate(target, assistant, prompt, max_new_tokens=120, do_sample=False)
    assert torch.equal(got, expected)
    stats = assistant.stats
    assert stats.passes_by_source.get("drafter", 0) >= 10, stats.passes_by_source
    assert stats.tau > 2.0, stats.tau
    # Before the first probe only "none" rounds ran; the probe drafted the full cap (AUTO: 4 tokens).
    assert stats.drafted_per_pass[:PROBE_FIRST] == [0] * PROBE_FIRST
    assert stats.drafted_per_pass[PROBE_FIRST] == AUTO["auto_max_assistant_tokens"]


@pytest.mark.parametrize("form", ["cpu", "accelerator"])
def test_a_sampled_probe_round_is_exact(monkeypatch, form):
    """Every round a probe (interval 0): the enumerated outcome distribution of a sampled probe round equals the
    target's, and the round did draft (a probe that drafted nothing would pass the comparison vacuously)."""
    monkeypatch.setattr(planning_core, "PROBE_FIRST", 0)
    monkeypatch.setattr(planning_core, "PROBE_LONGEST", 0)
    error, outcomes = planned_round_error(linear_costs(), "temperature", form, monkeypatch)
    assert error < TOLERANCE, error
    assert max(len(tokens) for tokens in outcomes) >= 3, "the probe round must have drafted"


@pytest.mark.parametrize("source", ["prompt-lookup", "suffix-shared"])
def test_a_lookup_source_behind_a_pessimistic_table_is_probed_on_the_doubling_schedule(source):
    """Each lookup source has its own schedule: offered and passed over `interval` times, it is drafted whole once
    (a probe), whatever its table says; its interval then doubles. Drafting it normally resets its count."""

    memory = PlannerMemory()
    memory.probe_schedule.state[DRAFTER] = [0, 10**9, 0]  # the drafter's own probes out of the way
    planner = Planning(hopeless_costs(), memory, 8)
    for _ in range(20):  # a bad stretch: every draft of this source rejected
        memory.lookup.record((source, 3, 1), False)
    lookup = LookupCandidate(source, match_length=3, num_tokens=5)
    gaps = []
    for _ in range(4):
        count = 0
        while count < 10 * PROBE_LONGEST:
            count += 1
            plan = planner.plan_round([lookup], room=100)
            if plan.source == source:
                break
            planner.record(plan, num_drafted=0, num_accepted=0)
        assert plan == Plan(source, 5, 3, probe=True)
        planner.record(plan, num_drafted=5, num_accepted=0)
        gaps.append(count)
    assert gaps == [PROBE_FIRST * 2**i + 1 for i in range(4)]
    # A probe is capped by the room left; a source not offered does not move its schedule.
    state = memory.probe_schedule.state[source]
    state[0] = state[1]
    assert planner.plan_round([LookupCandidate(source, 3, 9)], room=4) == Plan(source, 4, 3, probe=True)
    before = list(state)
    planner.plan_round([], room=100)
    assert state == before


def test_the_artifacts_measured_acceptance_is_where_the_tables_start(tmp_path):
    """`expected_acceptance` in the generation config: the planner's first round plans with it (weight: a few
    rounds), counts then take over; an artifact without it keeps 0.5; it survives save and load; a malformed one
    is refused naming the field."""
    from hf_dynaspec import DynaSpecAssistant
    from hf_dynaspec.drafting.runtime import planner_memory
    from hf_dynaspec.modeling.acceptance_prior import AcceptancePrior

    prior = AcceptancePrior(position=(0.95, 0.9, 0.85, 0.8), confidence=(0.05, 0.15, 0.25, 0.35, 0.45, 0.55, 0.65, 0.75, 0.85, 0.95),
                            tree_depth=(0.97, 0.92), tree_shape=(4, 8), rounds=300, weight=4.0)
    memory = PlannerMemory(prior)
    assert memory.position.estimate(2) == pytest.approx(0.9)
    assert memory.position.estimate(7) == pytest.approx(0.8)  # past the list: its last value
    assert memory.tree_depth.estimate((4, 8, 2)) == pytest.approx(0.92)
    assert memory.tree_depth.estimate((2, 6, 2)) == pytest.approx(0.9)  # another shape: the chain's estimate
    for _ in range(4):  # four rejections weigh as much as the prior
        memory.position.record(1, False)
    assert memory.position.estimate(1) == pytest.approx(0.95 / 2)
    # On costs where 0.5 says "no draft", the measured drafter drafts from the first round (not a probe).
    assert Planning(edge_costs(), PlannerMemory(), 8).plan_round([], 100).source == "none"
    first = Planning(edge_costs(), PlannerMemory(prior), 8).plan_round([], 100)
    assert first.source == "drafter" and not first.probe

    target = one_layer_target("llama", seed=2)
    assistant = imitating_assistant(target, noise=0.2, seed=4)
    assert planner_memory(assistant, False).prior is None
    assistant.generation_config.expected_acceptance = {"greedy": prior.to_dict()}
    assistant.save_pretrained(tmp_path)
    loaded = DynaSpecAssistant.from_pretrained(tmp_path, target=target)
    assert planner_memory(loaded, False).prior == prior and planner_memory(loaded, True).prior is None
    for bad in ({"greedy": {"position": [1.5]}}, {"greedy": {"position": [0.5], "speed": 1}}, {"beam": {}}):
        with pytest.raises(ValueError, match="expected_acceptance"):
            loaded.generation_config.with_options(expected_acceptance=bad)


def test_a_tree_probe_that_cannot_pay_does_not_stop_the_chains_probes():
    """Where a tree would not pay even if always right (verification priced per token, as on AVX2 CPUs) but a
    chain would, every probe is a chain: the tree's turn passes to the chain instead of ending the probes."""
    from hf_dynaspec.drafting.planning.core import TreeShape

    costs = RoundCosts([0.0] + [1.0 + 0.35 * (n - 1) for n in range(1, 40)], consume_seconds=0.01,
                       first_draft_seconds=0.02, draft_step_seconds=0.03, tree_step_seconds=2.0)
    planner = Planning(costs, PlannerMemory(), 8, tree=TreeShape(4, 4, 8))
    probes = []
    for _ in range(200):
        plan = planner.plan_round([], room=100)
        if plan.probe:
            probes.append(plan.source)
        planner.record(plan, num_drafted=0, num_accepted=0)
    assert len(probes) >= 5 and set(probes) == {"drafter"}, probes


def test_probes_shrink_as_rejections_accumulate():
    """A probe assumes each position's estimate plus its uncertainty: an untried drafter is probed as an
    always-right one (all 8), one whose probes keep being rejected is probed shorter, then not at all, so a
    drafter that does not pay on this workload stops costing probe rounds."""
    planner = Planning(linear_costs(), PlannerMemory(), 8)
    lengths = []
    for _ in range(10 * PROBE_LONGEST):
        plan = planner.plan_round([], room=100)
        if plan.probe:
            lengths.append(plan.num_tokens)
            planner.record(plan, num_drafted=plan.num_tokens, num_accepted=0)
        else:
            planner.record(plan, num_drafted=0, num_accepted=0)
    assert lengths[0] == 8 and sorted(lengths, reverse=True) == lengths, lengths
    assert len(lengths) < 9, lengths  # an always-right probe: one at every step of the doubling schedule (12 here)


def test_a_lookup_drafted_short_learns_the_position_past_it_from_the_targets_own_token(monkeypatch, fixed_costs):
    """Lookups drafted 1 token of the 5 offered (the plan forced to it), all accepted: the target's own token after
    the draft decides the next position's outcome, learnt for that source at position 2 -- exactly whether it
    equals the offered token -- and greedy output stays identical. Without it a short lookup learns its later
    positions from probes alone (tests/test_plan_simulation.py: 0.957x of the best fixed plan on the 1.5B's bf16
    costs). Both outcomes must occur."""
    from plans import one_copy_token_per_round
    from test_planner import flat_costs

    from hf_dynaspec.drafting.round import SpeculationRound
    from hf_dynaspec.drafting.runtime import planner_memory

    fixed_costs(flat_costs())
    target = one_layer_target("llama", seed=2)
    assistant = imitating_assistant(target, noise=0.5, seed=4, **AUTO, prompt_lookup_num_tokens=5)
    learnt = one_copy_token_per_round(monkeypatch)
    expected_outcomes = []
    learn = SpeculationRound.learn

    def checked_learn(self, draft, committed_ids, num_accepted, accepted_nodes=None):
        plan = draft.plan
        if (draft.token_ids.shape[1] == 1 and num_accepted == 1 and plan.source == "prompt-lookup"
                and plan.next_offered is not None):
            expected_outcomes.append(int(committed_ids[0, -1]) == plan.next_offered)
        return learn(self, draft, committed_ids, num_accepted, accepted_nodes)

    monkeypatch.setattr(SpeculationRound, "learn", checked_learn)
    # The tiny target falls into a cycle; each prompt ends with the cycle's first j tokens and a wrong one, so a
    # lookup there offers right tokens then a wrong one (a False), while lookups in the output's cycle match (Trues).
    base = torch.randint(0, target.config.vocab_size, (8,), generator=torch.Generator().manual_seed(3))
    cycle = repeating_tail(plain_generate(target, base[None], max_new_tokens=40, do_sample=False)[0].tolist())
    for j in range(2, len(cycle) + 1):
        wrong = (cycle[j % len(cycle)] + 1) % target.config.vocab_size
        prompt = torch.tensor([*base.tolist(), *cycle, *cycle, *cycle[:j], wrong])[None]
        expected = plain_generate(target, prompt, max_new_tokens=30, do_sample=False)
        assert torch.equal(assisted_generate(target, assistant, prompt, max_new_tokens=30, do_sample=False), expected)
    assert learnt == expected_outcomes and True in learnt and False in learnt, (learnt, expected_outcomes)
    # Position 2 of prompt lookup was learnt from these rounds alone (every lookup round drafted 1 token).
    counts = planner_memory(assistant, False).lookup.counts
    at_two = [count for key, count in counts.items() if key[0] == "prompt-lookup" and key[-1] == 2]
    assert [sum(c[0] for c in at_two), sum(c[1] for c in at_two)] == [sum(learnt), len(learnt)], at_two


def repeating_tail(tokens: list[int]) -> list[int]:
    """The cycle a greedy tiny target has fallen into: the shortest period repeated three times at the end."""
    for period in range(1, len(tokens) // 3 + 1):
        if tokens[-period:] == tokens[-2 * period : -period] == tokens[-3 * period : -2 * period]:
            return tokens[-period:]
    raise AssertionError("the output does not cycle")


def test_a_copy_passed_over_learns_its_first_position_from_the_committed_token():
    """LookupSources.learn: a copy offered and not drafted learns whether its first token is the token committed at
    that position (matched and not, both seen); the copy the round drafted learns only from its own outcome; the
    planner records it as the source's position 1 under the candidate's match length."""
    from dataclasses import replace

    from hf_dynaspec.drafting.contract import RoundContext
    from hf_dynaspec.drafting.lookup import LookupSources, PromptLookup
    from hf_dynaspec.drafting.planning.core import RoundPlan

    memory = PlannerMemory()
    planning = Planning(linear_costs(), memory, 8)
    sources = LookupSources(True)
    lookup = PromptLookup(sources, 5, vocab_size=16)
    context = [4, 7, 3, 9, 1, 4, 7]  # ends with "4 7", which occurred before: prompt lookup offers "3 9 1 4 7"
    sources.begin(torch.tensor([context]))
    outcomes = []
    for committed, plan in ((3, planning.real(Plan("drafter", 2))), (5, planning.real(Plan("none", 0)))):
        offers = lookup.offer(RoundContext(torch.tensor([context]), None, 8))
        assert [o.source for o in offers] == ["prompt-lookup"] and offers[0].tokens[0] == 3
        plan = replace(plan, copies=tuple(offers))  # the copies the planner saw beside the plan it chose
        context.append(committed)  # the round's first committed token: 3 (the copy's first token), then 5
        sources.read(torch.tensor([context]))
        sources.learn(planning.planner, plan, plan.num_tokens, 0)
        outcomes.append({key: list(counts) for key, counts in memory.lookup.counts.items()})
        context += [4, 7]  # later rounds commit the matched n-gram again, for the next offer
        sources.read(torch.tensor([context]))
    key = ("prompt-lookup", offers[0].match_length, 1)
    assert outcomes[0] == {key: [1, 1]} and outcomes[1] == {key: [1, 2]}
    # The drafted copy is not passed over: only the planner's own record of the round learns from it.
    here = RoundContext(torch.tensor([context]), None, 8)
    offer = lookup.offer(here)[0]
    plan = lookup.draft(here, RoundPlan(offer, 2, copies=(offer,)), planning.planner).plan  # as the planner plans it
    context.append(6)
    sources.read(torch.tensor([context]))
    sources.learn(planning.planner, plan, 2, 0)
    assert memory.lookup.counts == outcomes[1]


def test_a_copy_drafted_whole_does_not_count_toward_its_sources_next_probe():
    """A lookup source the plan drafts whole learns as from a probe: those rounds reset its count, so once the plan
    passes it over, its probe comes after the full interval of passed-over rounds, not at once (extra probe rows
    for a source that was already learning)."""
    from plans import label

    from hf_dynaspec.drafting.planning.core import ProbeSchedule, RoundPlan, lookup_probe

    probes = ProbeSchedule()
    copy = Planning(linear_costs(), PlannerMemory(), 8).copy(LookupCandidate("prompt-lookup", match_length=2,
                                                                             num_tokens=6))
    for _ in range(3 * PROBE_FIRST):  # the plan drafts the whole copy: never a probe, the count stays reset
        assert lookup_probe(probes, [copy], RoundPlan(copy, 6), room=100) is None
    assert probes.state["prompt-lookup"][0] == 0, probes.state
    passed_over = [lookup_probe(probes, [copy], RoundPlan(None, 0), room=100) for _ in range(PROBE_FIRST + 1)]
    assert all(plan is None for plan in passed_over[:PROBE_FIRST]), passed_over
    assert label(passed_over[PROBE_FIRST]) == Plan("prompt-lookup", 6, 2, probe=True)
    # A copy drafted shorter than offered is passed over: it counts toward the next probe.
    probes = ProbeSchedule()
    short = [lookup_probe(probes, [copy], RoundPlan(copy, 3), room=100) for _ in range(PROBE_FIRST + 1)]
    assert short[PROBE_FIRST] is not None and short[PROBE_FIRST].probe, short
