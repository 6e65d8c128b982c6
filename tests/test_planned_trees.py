"""`speculative_generate(trees=True)` with `draft_plan="auto"`: the planner chooses trees too (hf_dynaspec.drafting.planning.planner).

- pricing: a tree is chosen where verifying its nodes costs about one step and the tree has been accepted deeper
  than the chain; never where each verified node costs a step; its depth is the plan's;
- learning: a tree round teaches the tree table of its shape only (not the chain's), at the depths its path
  reached; probes alternate between a chain and a tree;
- the round drafts exactly the planned tree (its depth cap and node count), shares the chain session's cache, and decodes greedy
  token-identical to plain generate() with rounds of every kind; whole sampled calls enumerated exactly.
"""

from __future__ import annotations

import pytest
import torch
from conftest import imitating_assistant, one_layer_target, plain_generate
from enumeration import TargetOracle, enumerate_paths, max_error, outcome_distribution, target_joint, tree_from_parents
from plans import Plan, Planning
from test_enumeration import PROMPT, TOLERANCE, VOCAB, processors
from test_planned_rounds import repeating_prompt

from hf_dynaspec import speculative_generate
from hf_dynaspec.drafting.lookup import SuffixCache
from hf_dynaspec.drafting.planning.core import DRAFTER, PROBE_FIRST, PlannerMemory, RoundCosts, TreeShape
from hf_dynaspec.drafting.planning.planner import SpeculationPlanner
from hf_dynaspec.drafting.tree import TreeDraftSession
from hf_dynaspec.generation import rounds as cg

SHAPE = TreeShape(top_k=3, max_depth=4, total_tokens=10)
TREE_AUTO = dict(draft_plan="auto", auto_max_assistant_tokens=4, tree_top_k=3, tree_depth=4, tree_total_tokens=10,
                 suffix_cache_num_tokens=0)


def flat_tree_costs(max_tokens: int = 20) -> RoundCosts:
    """Verifying any number of nodes costs one step (GPUs, AVX-512 BF16 CPUs); a tree depth costs a bit more
    than a chain step."""
    return RoundCosts([0.0] + [1.0] * (max_tokens + 1), consume_seconds=0.01, first_draft_seconds=0.02,
                      draft_step_seconds=0.03, tree_step_seconds=0.04)


def steep_tree_costs(max_tokens: int = 20) -> RoundCosts:
    """Each verified node costs 90% of a step (bf16 on AVX2 CPUs)."""
    return RoundCosts([0.0] + [1.0 + 0.9 * (n - 1) for n in range(1, max_tokens + 2)], consume_seconds=0.01,
                      first_draft_seconds=0.02, draft_step_seconds=0.03, tree_step_seconds=0.04)


def trees_learnt(memory: PlannerMemory, reach: float = 0.95, rounds: int = 60, shape: TreeShape = SHAPE):
    """`memory` after tree rounds of `shape` whose path passed each depth with probability `reach` and chain
    rounds that went about one depth less deep."""
    planner = Planning(flat_tree_costs(), memory, 4, tree=shape)
    generator = torch.Generator().manual_seed(0)
    for _ in range(rounds):
        depth = 0
        while depth < shape.max_depth and torch.rand(1, generator=generator).item() < reach:
            depth += 1
        planner.record(Plan("tree", shape.max_depth, probe=True), num_drafted=shape.total_tokens,
                       num_accepted=depth)
        planner.record(Plan("drafter", 4, probe=True), num_drafted=4, num_accepted=max(depth - 1, 0))
    return memory


def test_trees_are_planned_where_nodes_are_cheap_and_the_tree_is_accepted_deeper():
    memory = trees_learnt(PlannerMemory())
    assert Planning(flat_tree_costs(), memory, 4, tree=SHAPE).plan_round([], room=100) \
        == Plan("tree", 4)
    # Capped by the room left, like a chain.
    assert Planning(flat_tree_costs(), memory, 4, tree=SHAPE).plan_round([], room=2) \
        == Plan("tree", 2)
    # Where each node costs most of a step, ten nodes cost far more than the tokens they add.
    assert Planning(steep_tree_costs(), memory, 4, tree=SHAPE).plan_round([], room=100).source != "tree"
    # Without the tree shape (chain_generate, the assistant_model= route) a tree is never a candidate.
    assert Planning(flat_tree_costs(), memory, 4).plan_round([], room=100).source != "tree"
    # A tree accepted no better than the chain costs more than the chain: the chain wins.
    same = PlannerMemory()
    for _ in range(60):
        for j in (1, 2, 3, 4):
            same.position.record(j, True)
    assert Planning(flat_tree_costs(), same, 4, tree=SHAPE).plan_round([], room=100) == Plan("drafter", 4)


def test_the_node_count_grows_with_depth_up_to_the_total():
    assert [SHAPE.nodes(d) for d in (1, 2, 3, 4)] == [3, 10, 10, 10]
    assert [TreeShape(2, 5, 12).nodes(d) for d in (1, 2, 3, 4, 5)] == [2, 6, 10, 12, 12]


def test_a_tree_round_teaches_its_own_table_at_the_depths_its_path_reached():
    memory = PlannerMemory()
    planner = Planning(flat_tree_costs(), memory, 4, tree=SHAPE)
    planner.record(Plan("tree", 3), num_drafted=10, num_accepted=1)
    assert memory.tree_depth.counts == {(3, 10, 1): [1, 1], (3, 10, 2): [0, 1]}
    assert memory.position.counts == {} and memory.confidence.counts == {}
    # All three depths accepted: the path could not go deeper than the tree.
    planner.record(Plan("tree", 3), num_drafted=10, num_accepted=3)
    assert memory.tree_depth.counts[(3, 10, 3)] == [1, 1] and (3, 10, 4) not in memory.tree_depth.counts
    # Another shape learns apart.
    Planning(flat_tree_costs(), memory, 4, tree=TreeShape(2, 4, 6)).record(Plan("tree", 1), 2, 0)
    assert memory.tree_depth.counts[(2, 6, 1)] == [0, 1] and memory.tree_depth.counts[(3, 10, 1)] == [2, 2]


def test_probes_alternate_between_a_chain_and_a_tree():
    planner = Planning(steep_tree_costs(), PlannerMemory(), 4, tree=SHAPE)
    planner.costs.verify_seconds[1:] = [1.0 + 0.3 * (n - 1) for n in range(1, 22)]  # a perfect drafter pays
    probes = []
    while len(probes) < 4:
        plan = planner.plan_round([], room=100)
        if plan.probe:
            probes.append(plan.source)
        # Probes accepted whole: both kinds stay worth probing (one that keeps being rejected stops being probed
        # where not even an optimistic estimate pays: tests/test_planner_probes.py).
        planner.record(plan, num_drafted=plan.num_tokens, num_accepted=plan.num_tokens if plan.probe else 0)
    assert probes == ["drafter", "tree", "drafter", "tree"]
    assert planner.memory.probe_schedule.interval(DRAFTER) == PROBE_FIRST * 2**4


def test_planning_trees_needs_their_measured_cost():
    costs = flat_tree_costs()
    costs.tree_step_seconds = None
    with pytest.raises(ValueError, match="tree_step_seconds"):
        Planning(costs, PlannerMemory(), 4, tree=SHAPE).plan_round([], room=100)


def fresh_tree_state(monkeypatch, memory_factory=lambda: trees_learnt(PlannerMemory())):
    """Every call starts from the same planner tables (trees learnt to pay), flat costs, no suffix cache."""
    monkeypatch.setattr(cg, "round_costs", lambda *a, **k: flat_tree_costs())
    monkeypatch.setattr(cg, "planner_memory", lambda *a, **k: memory_factory())
    monkeypatch.setattr(cg, "suffix_cache", lambda assistant, options: SuffixCache(vocab_size=VOCAB)
                        if options.suffix_cache_num_tokens else None)


def test_the_round_drafts_exactly_the_planned_tree(monkeypatch):
    """Each tree round is grown with the planned depth on the chain session's cache (one drafter state for chains
    and trees), with the node count the planner priced."""
    fresh_tree_state(monkeypatch)
    grown = []
    original = TreeDraftSession.draft_tree

    def spy(session, input_ids, hidden, max_depth=None):
        tree = original(session, input_ids, hidden, max_depth=max_depth)
        grown.append((max_depth, int(tree.depths.max()), len(tree), session.chain))
        return tree

    monkeypatch.setattr(TreeDraftSession, "draft_tree", spy)
    planned = []
    original_plan = SpeculationPlanner.choose
    monkeypatch.setattr(SpeculationPlanner, "choose",
                        lambda self, *a, **k: planned.append(original_plan(self, *a, **k)) or planned[-1])
    target = one_layer_target("llama", seed=2)
    assistant = imitating_assistant(target, noise=0.3, seed=4, **TREE_AUTO)
    prompt = repeating_prompt(target.config.vocab_size, seed=0)
    got = target.generate(prompt, custom_generate=speculative_generate, trees=True, drafter=assistant, max_new_tokens=30, do_sample=False)
    assert torch.equal(got, plain_generate(target, prompt, max_new_tokens=30, do_sample=False))
    tree_plans = [plan.num_tokens for plan in planned if plan.source == "tree"]
    assert tree_plans and [depth for depth, *_ in grown] == tree_plans
    # The depth is a cap (EAGLE-2 keeps the best-scored nodes, which may stop short of it); the node count, which
    # the planner priced, is exact.
    assert all(deepest <= depth and nodes == SHAPE.nodes(depth) + 1 for depth, deepest, nodes, _ in grown), grown
    assert any(deepest > 1 for _, deepest, *_ in grown)
    assert len({id(chain) for *_, chain in grown}) == 1
    assert assistant.stats.passes_by_source["tree"] == len(tree_plans)
    assert assistant.stats.drafted >= sum(nodes - 1 for *_, nodes, _ in grown)


@pytest.mark.parametrize("options", [
    TREE_AUTO,
    dict(TREE_AUTO, prompt_lookup_num_tokens=4, suffix_cache_num_tokens=8, assistant_confidence_threshold=0.05),
], ids=["trees-and-chains", "with-every-lookup"])
def test_greedy_planned_trees_are_identical(family, options, monkeypatch):
    """Rounds of every kind (trees of several depths, chains, lookups, none) in one call; identical output."""
    fresh_tree_state(monkeypatch, memory_factory=lambda: trees_learnt(PlannerMemory(), reach=0.7))
    target = one_layer_target(family, seed=2)
    assistant = imitating_assistant(target, noise=0.6, seed=4, **options)
    sources = {}
    for seed in range(2):
        prompt = repeating_prompt(target.config.vocab_size, seed=seed)
        expected = plain_generate(target, prompt, max_new_tokens=60, do_sample=False)
        got = target.generate(prompt, custom_generate=speculative_generate, trees=True, drafter=assistant, max_new_tokens=60,
                              do_sample=False)
        assert torch.equal(got, expected)
        for source, count in assistant.stats.passes_by_source.items():
            sources[source] = sources.get(source, 0) + count
    assert sources.get("tree", 0) >= 4, sources


def test_sampled_planned_trees_are_exact(monkeypatch):
    """Four tokens sampled at temperature 0.7 through whole tree_generate calls whose planner drafts trees: their
    exact distribution is the target's."""
    small = TreeShape(top_k=2, max_depth=2, total_tokens=4)
    fresh_tree_state(monkeypatch, memory_factory=lambda: trees_learnt(PlannerMemory(), reach=0.8, shape=small))
    target = one_layer_target("llama", seed=5, vocab_size=VOCAB)
    assistant = imitating_assistant(target, noise=1.0, seed=3, **dict(TREE_AUTO, tree_top_k=2, tree_depth=2,
                                                                        tree_total_tokens=4))
    prompt = torch.tensor([PROMPT])
    kinds = set()

    def call():
        out = target.generate(prompt, custom_generate=speculative_generate, trees=True, drafter=assistant, max_new_tokens=4,
                              do_sample=True, temperature=0.7, top_k=0)
        kinds.update(assistant.stats.passes_by_source)
        return tuple(out[0, len(PROMPT):].tolist())

    paths = enumerate_paths(call, max_paths=4 * VOCAB**4)
    oracle = TargetOracle(target, processors("temperature"))
    assert max_error(outcome_distribution(paths), target_joint(oracle, PROMPT, 4)) < TOLERANCE
    assert "tree" in kinds, kinds


def test_what_a_chain_would_have_done_is_read_from_the_trees_first_children():
    # root 0 -> 1, 2; 1 -> 3, 4; 2 -> 5; 3 -> 6. First children: 1, 3, 6 (the drafter's chain).
    tree = tree_from_parents(torch.arange(7), [-1, 0, 0, 1, 1, 2, 3])
    assert tree.greedy_chain_outcome([]) == (0, 1)  # nothing accepted: the chain's first token was rejected
    assert tree.greedy_chain_outcome([1]) == (1, 2)
    assert tree.greedy_chain_outcome([1, 3, 6]) == (3, 3)  # the tree ends: nothing known past depth 3
    assert tree.greedy_chain_outcome([1, 4]) == (1, 2)  # the path left the first children at depth 2
    assert tree.greedy_chain_outcome([2, 5]) == (0, 1)


def test_tree_rounds_keep_the_chains_table_learning(monkeypatch):
    """While trees are drafted, the chain's position table learns from their first children: a chain priced low
    by a bad stretch is not left frozen until the next chain probe."""
    memories = []
    fresh_tree_state(monkeypatch, memory_factory=lambda: memories.append(trees_learnt(PlannerMemory())) or memories[-1])
    target = one_layer_target("llama", seed=2)
    assistant = imitating_assistant(target, noise=0.3, seed=4, **TREE_AUTO)
    prompt = repeating_prompt(target.config.vocab_size, seed=0)
    before = {key: list(counts) for key, counts in trees_learnt(PlannerMemory()).position.counts.items()}
    target.generate(prompt, custom_generate=speculative_generate, trees=True, drafter=assistant, max_new_tokens=30, do_sample=False)
    sources = assistant.stats.passes_by_source
    assert sources.get("tree", 0) >= 3 * sources.get("drafter", 0) + 3, sources  # (chain rounds: probes)
    after = memories[0].position.counts
    assert after[1][1] - before[1][1] == sources["tree"] + sources.get("drafter", 0), \
        "every tree round verifies the chain's first position"
    assert after[1][0] > before[1][0] and after[2][1] > before[2][1]
