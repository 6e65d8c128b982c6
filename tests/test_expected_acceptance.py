"""An artifact's measured acceptance (`expected_acceptance`): what recipes/measure_acceptance.py stores is what the
rounds did, measured with every round drafted whole whatever this host's costs, lookups off, and the assistant
left as it was."""

from __future__ import annotations

import pytest
import torch
from conftest import imitating_assistant, one_layer_target, plain_generate
from plan_simulation import records_of

from hf_dynaspec.bench.acceptance import measure_acceptance
from hf_dynaspec.drafting.planning.core import RoundCosts
from hf_dynaspec.drafting.runtime import planner_memory


def hopeless_costs() -> RoundCosts:
    """No draft pays here: a planner would never draft, so only a measurement that ignores costs measures."""
    return RoundCosts([0.0] + [float(n) for n in range(1, 30)], 0.5, 0.5, 0.5, 0.5)


def test_every_round_is_measured_whole_whatever_the_costs(fixed_costs):
    fixed_costs(hopeless_costs())
    import hf_dynaspec.generation.rounds as candidate_generator

    assert candidate_generator.round_costs(None, None, None, None, 0) == hopeless_costs()  # the fixture is in force
    target = one_layer_target("llama", seed=2)
    assistant = imitating_assistant(target, noise=0.3, seed=4, prompt_lookup_num_tokens=4, suffix_cache_num_tokens=8)
    before = assistant.generation_config.to_dict()
    prompts = [torch.randint(0, target.config.vocab_size, (1, 10), generator=torch.Generator().manual_seed(i))
               for i in range(3)]
    prior, calls = measure_acceptance(target, assistant, prompts, max_new_tokens=30)
    rounds = [r for call in calls for r in call["rounds"] if r["source"] != "none"]
    assert {r["source"] for r in rounds} == {"drafter", "tree"} and all(r["probe"] for r in rounds)
    for call in calls:  # no draft only where no room was left: the call's last round
        assert all(r["source"] != "none" for r in call["rounds"][:-1]), call["rounds"]
    chains = [r for r in rounds if r["source"] == "drafter" and r["drafted"] == 8]
    assert chains and all(len(r["confidences"]) == 8 for r in chains)
    # Output unchanged: each call is the target's greedy continuation, and the rounds add up to it.
    for ids, call in zip(prompts, calls):
        assert call["output_ids"] == plain_generate(target, ids, max_new_tokens=30)[0].tolist()
        assert call["prompt_length"] + 1 + sum(r["accepted"] + 1 for r in call["rounds"]) == len(call["output_ids"])
    # Position 1's rate is the chain rounds' (and the trees' first children's) Laplace-smoothed count.
    reached = sum(1 for r in rounds if r["source"] == "drafter")
    accepted = sum(1 for r in rounds if r["source"] == "drafter" and r["accepted"] >= 1)
    assert reached <= prior.rounds and 0 < prior.at_position(1) < 1
    assert prior.tree_shape == (4, 8) and len(prior.tree_depth) >= 1
    assert accepted <= reached
    # The assistant is left as it was: options, and a fresh planner memory (the measurement's is not kept).
    assert assistant.generation_config.to_dict() == before
    assert planner_memory(assistant, False).log is None and not planner_memory(assistant, False).measuring
    trace = records_of(calls[0])  # the simulation reads the trace: a record at every position of the call
    assert trace.start == calls[0]["prompt_length"] + 1 and trace.at(trace.start).chain_accepted >= 0


def test_a_measurement_without_room_to_draft_is_refused():
    target = one_layer_target("llama", seed=2)
    assistant = imitating_assistant(target, noise=0.3, seed=4)
    with pytest.raises(ValueError, match="no drafter round"):
        measure_acceptance(target, assistant, [torch.tensor([[1, 2, 3]])], max_new_tokens=1)


def test_sparsely_reached_positions_lean_on_the_one_before():
    """A position reached a handful of times keeps close to the position before it; one reached often keeps its
    own rate; tree depths likewise; a confidence bin seen rarely stays near its middle."""
    from hf_dynaspec.bench.acceptance import SHRINK, prior_from_memory
    from hf_dynaspec.drafting.planning.core import PlannerMemory
    from hf_dynaspec.modeling.options import DynaSpecGenerationConfig

    memory = PlannerMemory()
    memory.position.counts = {1: [600, 1000], 2: [0, 2], 3: [300, 1000]}
    memory.confidence.counts = {9: [1, 1]}
    memory.tree_depth.counts = {(4, 8, 1): [90, 100], (4, 8, 2): [1, 1]}
    prior = prior_from_memory(memory, DynaSpecGenerationConfig())
    first = 601 / 1002
    assert prior.position[0] == pytest.approx(first)
    assert prior.position[1] == pytest.approx(SHRINK * first / (2 + SHRINK))  # not 0 after two rejections
    assert prior.position[2] == pytest.approx((300 + SHRINK * prior.position[1]) / (1000 + SHRINK))
    assert prior.position[7] == pytest.approx(prior.position[2])  # never reached: the last rate carries on
    assert prior.confidence[9] == pytest.approx((1 + SHRINK * 0.95) / (1 + SHRINK)) and prior.confidence[3] == 0.35
    assert len(prior.tree_depth) == 2 and prior.tree_depth[1] == pytest.approx((1 + SHRINK * 91 / 102) / (1 + SHRINK))
    assert prior.rounds == 1100


def test_a_packaged_prior_weighs_the_rounds_the_docs_state_not_the_rounds_measured():
    """docs/planning.md: the planner's tables start at the artifact's acceptance "with the weight of N rounds";
    this machine's rounds then take over. A prior measured over 1,100 rounds keeps that weight (were it the rounds
    measured, the workload would never overrule it), through the artifact's JSON and into the planner's tables,
    where a few rounds of a different workload move the estimate most of the way."""
    import re
    from pathlib import Path

    from hf_dynaspec.bench.acceptance import prior_from_memory
    from hf_dynaspec.drafting.planning.core import PlannerMemory, position_table
    from hf_dynaspec.modeling.acceptance_prior import AcceptancePrior
    from hf_dynaspec.modeling.options import DynaSpecGenerationConfig

    docs = (Path(__file__).resolve().parents[1] / "docs" / "planning.md").read_text()
    stated = float(re.search(r"with the weight of (\d+) rounds", docs).group(1))
    memory = PlannerMemory()
    memory.position.counts = {1: [900, 1000], 2: [700, 900]}
    memory.tree_depth.counts = {(4, 8, 1): [90, 100]}
    prior = AcceptancePrior.from_dict(prior_from_memory(memory, DynaSpecGenerationConfig()).to_dict())
    assert prior.rounds == 1100 > stated  # the case: far more rounds measured than the weight
    assert prior.weight == stated
    table = position_table(prior)
    for _ in range(8):  # this workload: position 1 never accepted
        table.record(1, False)
    assert table.estimate(1) == pytest.approx(stated * prior.at_position(1) / (8 + stated))
    assert table.estimate(1) < 0.5 * prior.at_position(1)
