"""`draft_plan="auto"`: lattice rounds planned from measured costs (hf_dynaspec.drafting.planning.lattice_planner).

- the planner's decisions: a lattice that does not pay is not even scored, confidences cut the chain, a learnt
  lookup wins, a tree wins where its depth table says so, probes alternate chain and tree, and only reached
  positions are learnt;
- the round drafts exactly what was planned (chain length, tree depth cap and node count);
- greedy output identical to plain generate() under flat, steep and this machine's measured costs, with lookup
  and shortlists; sampled whole calls enumerated exactly under flat and steep costs;
- the costs are measured once and cached; a damaged cache entry is measured again.
"""

from __future__ import annotations

import json

import pytest
import torch
from conftest import VOCAB, plain_generate, tiny_target
from enumeration import TargetOracle, enumerate_paths, max_error, outcome_distribution, target_joint
from plans import LatticePlanning, LookupCandidate, Plan
from test_enumeration import PROMPT, TOLERANCE, processors
from test_enumeration import VOCAB as SMALL_VOCAB
from test_medusa import trained_heads

import hf_dynaspec.generation.medusa as medusa_route
from hf_dynaspec import speculative_generate
from hf_dynaspec.bench import build_methods
from hf_dynaspec.drafting.lookup import LookupSources
from hf_dynaspec.drafting.planning.core import PROBE_FIRST, LatticeCosts, TreeShape
from hf_dynaspec.drafting.planning.planner import SpeculationPlanner
from hf_dynaspec.drafting.proposers.lattice import LatticeChain, LatticeReader, LatticeTree, lattice_memory
from hf_dynaspec.drafting.round import SpeculationRound
from hf_dynaspec.generation.costs import lattice_costs, store
from hf_dynaspec.modeling.medusa import MedusaAssistant
from hf_dynaspec.modeling.medusa_options import MedusaGenerationConfig
from hf_dynaspec.runtime_store import forget_learnt_state
from hf_dynaspec.stats import DraftStats


def flat_costs(lattice: float = 0.05) -> LatticeCosts:
    """Verifying more tokens costs nothing extra (a GPU, an AVX-512 BF16 CPU at a few rows)."""
    return LatticeCosts([0.0] + [1.0] * 24, lattice_seconds=lattice, tree_seconds=0.01)


def steep_costs() -> LatticeCosts:
    """Each verified token costs 45% of a step: only confident positions pay."""
    return LatticeCosts([0.0] + [1.0 + 0.45 * n for n in range(24)], lattice_seconds=0.05, tree_seconds=0.01)


TREE = TreeShape(top_k=2, max_depth=4, total_tokens=8)


def planner(costs, memory=None, tree=TREE) -> LatticePlanning:
    return LatticePlanning(costs, memory or lattice_memory(), depth=4, tree=tree)


def kind(plan: Plan) -> tuple[str, int]:
    return plan.source, plan.num_tokens


# -- decisions ---------------------------------------------------------------------------------------------
def test_a_lattice_that_does_not_pay_is_not_scored():
    """Before the read, a chain or tree of the lattice (either means it is read) against no draft."""
    assert planner(flat_costs()).plan_round(None, room=10).source in ("chain", "tree")
    assert planner(flat_costs(lattice=5.0)).plan_round(None, room=10) == Plan("none", 0)


def test_confidences_cut_the_chain_under_steep_costs():
    chain_only = planner(steep_costs(), tree=None)
    assert chain_only.choose([0.99, 0.97, 0.1, 0.1], None, room=10).num_tokens == 2
    assert chain_only.choose([0.05, 0.05, 0.05, 0.05], None, room=10).source == "none"
    assert kind(planner(flat_costs(), tree=None).choose([0.99, 0.97, 0.1, 0.1], None, room=10)) == ("chain", 4)
    assert chain_only.choose([0.99] * 4, None, room=2).num_tokens == 2


def test_learnt_acceptance_picks_the_source():
    memory = lattice_memory()
    lookup = LookupCandidate("prompt-lookup", 3, 6)
    plan = planner(steep_costs(), memory)
    for _ in range(30):
        plan.record(Plan("prompt-lookup", 6, 3), num_drafted=6, num_accepted=6)
        plan.record(Plan("chain", 4, confidences=[0.5] * 4), num_drafted=4, num_accepted=0)
    assert plan.choose([0.5] * 4, lookup, room=10).source == "prompt-lookup"
    assert plan.choose([0.5] * 4, None, room=10).source == "none"

    trees = lattice_memory()
    for _ in range(30):
        planner(flat_costs(), trees).record(Plan("tree", 4), num_drafted=8, num_accepted=4)
        planner(flat_costs(), trees).record(Plan("chain", 4, confidences=[0.5] * 4), 4, 0)
    assert kind(planner(flat_costs(), trees).choose([0.5] * 4, None, room=10)) == ("tree", 4)


def test_probes_alternate_and_only_reached_positions_are_learnt():
    memory = lattice_memory()
    plan = planner(flat_costs(lattice=1.5), memory)  # not drafted at 0.5; an always-right lattice would pay
    kinds = []
    for _ in range(3 * PROBE_FIRST + 6):
        chosen = plan.plan_round(None, room=10)
        kinds.append((chosen.source, chosen.probe))
        plan.record(chosen, num_drafted=0, num_accepted=0)
    assert [kind for kind in kinds if kind[1]] == [("chain", True), ("tree", True)]
    assert kinds[PROBE_FIRST] == ("chain", True)

    memory = lattice_memory()
    planner(flat_costs(), memory).record(Plan("chain", 4, confidences=[0.95, 0.9, 0.2, 0.5]), 4, 1)
    assert memory.position.counts == {1: [1, 1], 2: [0, 1]}
    assert memory.confidence.counts == {(1, 9): [1, 1], (2, 9): [0, 1]}
    planner(flat_costs(), memory).record(Plan("tree", 3, confidences=[0.6] * 3), 8, 3, chain_outcome=(1, 2))
    assert memory.tree_depth.counts == {(2, 8, 1): [1, 1], (2, 8, 2): [1, 1], (2, 8, 3): [1, 1]}  # (top_k, nodes, depth)
    assert memory.position.counts == {1: [2, 2], 2: [0, 2]}


class PeakedLattice:
    """A lattice source whose first two positions are sure of a token and whose last two are not."""

    num_positions = 4
    source_name = "stub"

    def lattice_logits(self, input_ids, target_hidden, depth, shortlist=False):
        logits = torch.zeros(4, 10)
        logits[0, 7] = logits[1, 3] = 12.0
        logits[2, 5] = logits[3, 1] = 0.5
        return logits[:depth], None


def test_a_planned_round_drafts_the_chain_its_confidences_pay_for():
    moderate = LatticeCosts([0.0] + [1.0 + 0.3 * n for n in range(24)], lattice_seconds=0.05, tree_seconds=0.01)
    reader = LatticeReader(PeakedLattice(), MedusaGenerationConfig(draft_plan="auto"), 4, None)
    drafts = SpeculationRound([LatticeChain(reader)], SpeculationPlanner(moderate, lattice_memory()), DraftStats(),
                              None, LookupSources(False))
    draft = drafts.propose(torch.tensor([[1, 2, 3]]), torch.zeros(1, 3, 8), room=10)
    tree = draft.tree
    assert isinstance(draft.plan.proposer, LatticeChain) and draft.plan.num_tokens == 2
    assert tree.token_ids.tolist() == [3, 7, 3]


# -- rounds ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def medusa_pair():
    target = tiny_target("llama", seed=3)
    return target, trained_heads(target, frequency=VOCAB - 20)


def recording_drafts(monkeypatch) -> list:
    """Checks every round against its plan: a chain of exactly the planned length, a tree within the planned
    depth and the priced node count; the kinds drafted, in order."""
    kinds, propose = [], SpeculationRound.propose

    def checked(self, input_ids, target_hidden, room, rows=1):
        draft = propose(self, input_ids, target_hidden, room, rows)
        plan, drafted = draft.plan, draft.token_ids.shape[1]
        if isinstance(plan.proposer, LatticeTree):
            assert drafted <= plan.proposer.shape.nodes(plan.num_tokens) and draft.tree.max_depth <= plan.num_tokens
            assert drafted > plan.num_tokens or plan.num_tokens == 1, "a lattice tree branches"
            kinds.append("tree")
        else:
            assert drafted == plan.num_tokens <= room, plan
            kinds.append("chain" if isinstance(plan.proposer, LatticeChain) else plan.source)
        return draft

    monkeypatch.setattr(SpeculationRound, "propose", checked)
    return kinds


COSTS = {"flat": flat_costs, "steep": steep_costs, "measured": None}


@pytest.mark.parametrize("costs", COSTS)
def test_greedy_auto_is_identical_and_drafts_what_was_planned(medusa_pair, costs, monkeypatch):
    target, heads = medusa_pair
    if COSTS[costs] is not None:
        monkeypatch.setattr(medusa_route, "lattice_round_costs", lambda *a, **k: COSTS[costs]())
    drafted_kinds = recording_drafts(monkeypatch)
    forget_learnt_state(heads)
    for seed, extra in enumerate([{}, dict(prompt_lookup_num_tokens=6), dict(shortlist="frspec")]):
        prompt = torch.randint(0, VOCAB, (1, 6), generator=torch.Generator().manual_seed(100 + seed))
        prompt = torch.cat([prompt, prompt], dim=1)  # a repeat: prompt lookup finds matches
        expected = plain_generate(target, prompt, max_new_tokens=40, do_sample=False)
        got = target.generate(prompt, custom_generate=speculative_generate, drafter=heads, max_new_tokens=40,
                              do_sample=False, draft_plan="auto", tree_total_tokens=8, **extra)
        assert torch.equal(got, expected), extra
    kinds = set(drafted_kinds)
    if costs == "flat":
        assert {"chain", "tree"} <= kinds, kinds
    if costs != "measured":
        assert "prompt-lookup" in kinds and len(kinds) >= 3, kinds


@pytest.mark.parametrize("costs", ["flat", "steep"])
def test_sampled_auto_is_exact(costs, monkeypatch):
    """Four tokens sampled at temperature 0.7 through whole planned calls (fresh tables per call, so that every
    replay of the enumeration plans alike): exactly the target's joint."""
    target = tiny_target("llama", seed=5, vocab_size=SMALL_VOCAB)
    heads = MedusaAssistant.from_target(target, num_heads=3)
    with torch.no_grad():
        for parameter in heads.blocks.parameters():
            parameter.normal_(0, 0.5, generator=torch.Generator().manual_seed(parameter.numel()))
    monkeypatch.setattr(medusa_route, "lattice_round_costs", lambda *a, **k: COSTS[costs]())
    drafted_kinds = recording_drafts(monkeypatch)
    prompt = torch.tensor([PROMPT])

    def call():
        forget_learnt_state(heads)
        out = target.generate(prompt, custom_generate=speculative_generate, drafter=heads, max_new_tokens=4,
                              do_sample=True, temperature=0.7, top_k=0, draft_plan="auto",
                              tree_total_tokens=4, prompt_lookup_num_tokens=3)
        return tuple(out[0, len(PROMPT):].tolist())

    paths = enumerate_paths(call, max_paths=4 * SMALL_VOCAB**4)
    oracle = TargetOracle(target, processors("temperature"))
    assert max_error(outcome_distribution(paths), target_joint(oracle, PROMPT, 4)) < TOLERANCE
    assert len(set(drafted_kinds)) >= 2, set(drafted_kinds)


def test_auto_refuses_adl_and_bench_methods_parse(medusa_pair):
    target, heads = medusa_pair
    prompt = torch.tensor([[1, 2, 3]])
    with pytest.raises(ValueError, match="sets draft_plan twice"), pytest.warns(FutureWarning):
        target.generate(prompt, custom_generate=speculative_generate, drafter=heads, max_new_tokens=4,
                        draft_plan="auto", medusa_adaptive_length=True)
    with pytest.raises(ValueError, match="only it does"):
        medusa_route.lattice_round(heads, MedusaGenerationConfig(draft_plan="auto"), 3, None, DraftStats(), VOCAB)
    methods = build_methods(["medusa-auto:12+lookup:5+shortlist"], medusa_heads=heads)
    assert methods[0].generate_kwargs == {
        "custom_generate": speculative_generate, "drafter": heads, "draft_plan": "auto",
        "cps_lambda": 1.0, "tree_total_tokens": 12, "prompt_lookup_num_tokens": 5,
        "shortlist": "frspec"}
    with pytest.raises(ValueError, match="medusa-auto"):
        build_methods(["medusa-auto+adl"], medusa_heads=heads)
    with pytest.raises(ValueError, match="medusa-auto"):
        build_methods(["medusa+lookup"], medusa_heads=heads)


def test_lattice_costs_are_measured_once_and_cached(medusa_pair, tmp_path, monkeypatch):
    target, heads = medusa_pair
    monkeypatch.setenv("HF_DYNASPEC_HOME", str(tmp_path))
    monkeypatch.setattr(store, "MEMORY", {})
    options = MedusaGenerationConfig(draft_plan="auto")
    measured = []
    original = lattice_costs.measure_lattice_costs
    monkeypatch.setattr(lattice_costs, "measure_lattice_costs", lambda *a: measured.append(1) or original(*a))
    costs = lattice_costs.lattice_round_costs(target, heads, options, 16)
    assert len(costs.verify_seconds) == 18 and costs.lattice_seconds > 0 and costs.tree_seconds >= 0
    monkeypatch.setattr(store, "MEMORY", {})
    assert lattice_costs.lattice_round_costs(target, heads, options, 16) == costs and len(measured) == 1
    path = store.calibration_path()
    stored = json.loads(path.read_text())
    key = lattice_costs.lattice_costs_key(target, heads, options, 16)
    # The heads scoring their stored shortlist draft at another price: another cost table.
    assert lattice_costs.lattice_costs_key(target, heads, MedusaGenerationConfig(draft_plan="auto", shortlist="frspec"), 16) != key
    stored[key]["lattice_seconds"] = float("nan")
    path.write_text(json.dumps(stored))
    monkeypatch.setattr(store, "MEMORY", {})
    again = lattice_costs.lattice_round_costs(target, heads, options, 16)
    assert len(measured) == 2 and again.lattice_seconds > 0


def test_heads_measured_acceptance_is_where_the_lattice_tables_start(tmp_path):
    """`expected_acceptance` in the heads' config.json: the lattice planner's first round plans with it and it
    survives save and load; heads without it start at 0.5; a lookup offered and passed over is probed on the
    doubling schedule whatever the lattice promises."""
    from hf_dynaspec.modeling.acceptance_prior import AcceptancePrior

    prior = AcceptancePrior(position=(0.9, 0.8, 0.7))
    memory = lattice_memory(prior)
    assert memory.position.estimate(2) == pytest.approx(0.8) and lattice_memory().position.estimate(2) == 0.5
    # Steep costs: at 0.5 the lattice does not pay its scoring; at the measured 0.9, 0.8, ... it does.
    assert planner(steep_costs()).plan_round(None, 3).source == "none"
    assert planner(steep_costs(), lattice_memory(prior)).plan_round(None, 3).source in ("chain", "tree")
    target = tiny_target("llama", seed=3)
    heads = MedusaAssistant.from_target(target, num_heads=3)
    heads.config.expected_acceptance = {"greedy": prior.to_dict()}
    heads.save_pretrained(tmp_path)
    loaded = MedusaAssistant.from_pretrained(tmp_path, target=target)
    options = MedusaGenerationConfig(draft_plan="auto")
    calls = []
    original = medusa_route.lattice_round_costs
    medusa_route.lattice_round_costs = lambda *a, **k: calls.append(1) or steep_costs()
    try:
        assert medusa_route._planner(target, loaded, options, 3, do_sample=False).memory.prior == prior
        assert medusa_route._planner(target, loaded, options, 3, do_sample=True).memory.prior is None
    finally:
        medusa_route.lattice_round_costs = original
    # The lookup's own schedule: never drafted on its table (all rejected), probed after PROBE_FIRST offers.
    lattice_planner = planner(flat_costs())
    for _ in range(20):
        lattice_planner.memory.lookup.record(("prompt-lookup", 3, 1), False)
    lookup = LookupCandidate("prompt-lookup", 3, 4)
    plans = [lattice_planner.plan_round(lookup, 8) for _ in range(PROBE_FIRST + 1)]
    assert [p.source == "prompt-lookup" and p.probe for p in plans] == [False] * PROBE_FIRST + [True]


def test_a_lookup_drafted_short_learns_the_position_past_it(medusa_pair, monkeypatch):
    """The lattice planner's lookups drafted 1 token of those offered (forced), accepted: the target's own token
    after the draft (the last of the round's committed ids) decides position 2's outcome, exactly whether it
    equals the next offered token; greedy output identical; both outcomes occur."""
    from plans import one_copy_token_per_round

    target, heads = medusa_pair
    monkeypatch.setattr(medusa_route, "lattice_round_costs", lambda *a, **k: flat_costs())
    forget_learnt_state(heads)
    learnt, checked = one_copy_token_per_round(monkeypatch), []
    learn = SpeculationRound.learn

    def checking(self, draft, committed_ids, num_accepted, accepted_nodes=None):  # the offered token vs the committed
        plan = draft.plan
        if plan.next_offered is not None and num_accepted == draft.token_ids.shape[1] == plan.num_tokens:
            checked.append(int(committed_ids[0, -1]) == plan.next_offered)
        return learn(self, draft, committed_ids, num_accepted, accepted_nodes)

    monkeypatch.setattr(SpeculationRound, "learn", checking)
    pattern = torch.randint(0, VOCAB, (6,), generator=torch.Generator().manual_seed(7))
    prompt = torch.cat([pattern, pattern, pattern, pattern[:3]])[None]
    expected = plain_generate(target, prompt, max_new_tokens=50, do_sample=False)
    got = target.generate(prompt, custom_generate=speculative_generate, drafter=heads, max_new_tokens=50,
                          do_sample=False, draft_plan="auto", prompt_lookup_num_tokens=5)
    assert torch.equal(got, expected)
    assert learnt == checked and True in learnt and False in learnt, (learnt, checked)
