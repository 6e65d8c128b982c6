"""`auto` decides well on every host kind, not only this one: recorded rounds of the shipped assistants replayed
through the planner under cost tables measured on each host kind (tests/plan_simulation.py).

Fixtures (tests/fixtures/planner/): `traces_*.json`, real greedy runs of a shipped assistant with its target on
dev prompts where every round drafted the whole chain or tree (recipes/measure_acceptance.py --traces); `costs/*.json`,
`RoundCosts` measured by benchmarks/host_costs.py on an AVX-512 BF16 host, the same host imitating AVX2
(--imitate-avx2), an AVX-512 host without bf16 units (`avx512nobf16_*`: verify(9) 2.3 one-token forwards), the AVX2
numbers measured on a real AVX2 host in issue #60, and a GPU-like flat table. Each file says where its numbers come
from.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from plan_simulation import MAX_DRAFT, Replay, auto_rate, fixed_rates, rate_of, records_of
from plans import LatticePlanning, Planning

from hf_dynaspec.drafting.planning.core import PROBE_FIRST, LatticeCosts, PlannerMemory, RoundCosts, TreeShape
from hf_dynaspec.drafting.proposers.lattice import lattice_memory
from hf_dynaspec.modeling.acceptance_prior import prior_for
from hf_dynaspec.modeling.options import DRAFTER_FREE_OPTIONS

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "planner"
TRACES = {path.stem.removeprefix("traces_"): json.loads(path.read_text()) for path in sorted(FIXTURES.glob("traces_*.json"))}
TABLES = {path.stem: json.loads(path.read_text()) for path in sorted((FIXTURES / "costs").glob("*.json"))}
SHAPE = TreeShape(4, 4, 8)  # the shipped assistants' tree (tree_top_k, tree_depth, tree_total_tokens)


def costs_of(table: dict) -> RoundCosts:
    return RoundCosts(**table["costs"])


def prior_of(trace: dict):
    """The traced assistant's measured acceptance, as its artifact ships it (copied into the trace file, so that the
    fixtures stand alone; test_the_traces_carry_the_shipped_priors keeps the two equal)."""
    return prior_for(trace["expected_acceptance"], do_sample=False)


def tables_for(trace_name: str) -> list[str]:
    """Every table measured with this trace's target (the GPU-like table goes with every trace)."""
    target = TRACES[trace_name]["target"]
    return [name for name, table in TABLES.items() if table["target"] in (target, "any")]


CASES = [(trace, table) for trace in TRACES for table in tables_for(trace)]
# Where `auto` is measured below the bar. Strict: the day it passes, the entry must go.
BELOW_THE_BAR: dict = {}  # none since lookups learn the position past a short draft (0.957x on the 1.5B's bf16 costs before)


def calls_of(trace: dict, category: str | None = None) -> list:
    traces = [records_of(call) for call in trace["calls"] if category in (None, call["category"])]
    return [t for t in traces if t is not None]


def session(calls: list, replay: Replay, memory: PlannerMemory, trees: bool, deferred: bool) -> float:
    """The calls in order through one assistant's planner (its tables kept across calls, as in use)."""
    return auto_rate(replay, calls, memory, trees, deferred)


def test_the_fixtures_cover_every_host_kind_the_issue_names():
    hosts = {(t["host"], t.get("imitated"), t["dtype"]) for t in TABLES.values()}
    assert ("avx512_bf16", None, "fp32") in hosts and ("avx512_bf16", None, "bf16") in hosts
    assert any(t.get("imitated") == "avx2" or t["host"] == "avx2" for t in TABLES.values())
    assert any(t["host"] == "gpu-like" for t in TABLES.values())
    assert TRACES and all(len(trace["calls"]) >= 6 for trace in TRACES.values())


@pytest.mark.parametrize("trace_name", sorted(TRACES))
def test_the_traces_carry_the_shipped_priors(trace_name):
    trace = TRACES[trace_name]
    shipped = ROOT / trace["assistant"] / "generation_config.json"
    if not shipped.is_file():  # a copy of the tests without the shipped assistants (benchmarks/mutation_check.py)
        pytest.skip("the shipped assistants are not in this copy")
    assert json.loads(shipped.read_text())["expected_acceptance"] == trace["expected_acceptance"]


@pytest.mark.parametrize("trace_name,table_name", CASES)
@pytest.mark.parametrize("trees", [False, True], ids=["chains", "trees"])
def test_auto_is_within_3_percent_of_the_best_fixed_plan(trace_name, table_name, trees, request):
    """On every host's costs, `auto` (the artifact's prior, probes, the CPU or the accelerator form of the cut)
    commits at least 0.97x the tokens per second of the best fixed plan chosen in hindsight for the whole
    session: chains of 1-8, trees of depth 1-4, lookup alone, lookup before a chain, no draft."""
    if (trace_name, table_name) in BELOW_THE_BAR:
        request.applymarker(pytest.mark.xfail(strict=True, reason=BELOW_THE_BAR[(trace_name, table_name)]))
    trace, table = TRACES[trace_name], TABLES[table_name]
    replay = Replay(costs_of(table), SHAPE)
    calls = calls_of(trace)
    fixed = fixed_rates(replay, calls)
    if not trees:
        fixed = {name: rate for name, rate in fixed.items() if not name.startswith("tree")}
    best = max(fixed, key=fixed.get)
    memory = PlannerMemory(prior_of(trace))
    auto = session(calls, replay, memory, trees=trees, deferred=table["host"] == "gpu-like")
    assert auto >= 0.97 * fixed[best], (f"auto {auto:.2f} tok/s, best fixed {best} {fixed[best]:.2f} "
                                        f"(none {fixed['none']:.2f})")


@pytest.mark.parametrize("trace_name,table_name", CASES)
def test_auto_drafts_in_every_call_where_a_fixed_plan_pays(trace_name, table_name):
    """A first call of a fresh assistant (its prior only): where some fixed plan beats no draft by 5% on that
    call's rounds, auto drafts in it (never "no draft" for a whole call where drafting pays)."""
    trace, table = TRACES[trace_name], TABLES[table_name]
    replay = Replay(costs_of(table), SHAPE)
    checked = 0
    for call in calls_of(trace):
        fixed = fixed_rates(replay, [call])
        if max(fixed.values()) < 1.05 * fixed["none"]:
            continue
        checked += 1
        result = replay.auto(call, PlannerMemory(prior_of(trace)), trees=True)
        drafted = sum(n for source, n in result.sources.items() if source != "none")
        assert drafted, (result.sources, max(fixed, key=fixed.get))
    assert checked  # the case happened


@pytest.mark.parametrize("table_name", [n for n, t in TABLES.items() if t["dtype"] == "fp32"
                                        and t["target"] == "qwen2.5-coder-0.5b-instruct"])
def test_the_quickstart_pairing_drafts_from_its_first_rounds(table_name):
    """The quickstart (0.5B target in fp32, the shipped assistant, `auto`): it drafts within its first rounds on
    every fp32 host table, from the artifact's measured acceptance: in round 1 where a drafter of that acceptance
    pays before any round is seen, by the first probe where it is at the edge (fp32 on MKL: verifying 2 tokens
    costs twice 1, 5 cost less than 2)."""
    costs = costs_of(TABLES[table_name])
    with_prior = first_drafting_round(Planning(costs, PlannerMemory(prior_of(TRACES["qwen05b"])), MAX_DRAFT))
    assert with_prior <= PROBE_FIRST + 1, with_prior
    # Without the artifact's acceptance (0.5 everywhere) it drafts no earlier.
    assert with_prior <= first_drafting_round(Planning(costs, PlannerMemory(), MAX_DRAFT))


def first_drafting_round(planner: Planning) -> int:
    """The number of the first round `planner` drafts with its drafter (rounds before draft nothing)."""
    for number in range(1, 10 * PROBE_FIRST):
        plan = planner.plan_round([], 16)
        if plan.source == "drafter":
            return number
        planner.record(plan, 0, 0)
    raise AssertionError("no drafter round")


@pytest.mark.parametrize("trace_name,table_name", CASES)
def test_the_lattice_planner_learns_lookup_on_summarization(trace_name, table_name):
    """`medusa-auto+lookup` with a lattice that is never accepted (the issue's AVX2 run: tau 1.00): on the
    summarization prompts, where prompt-lookup drafts are accepted, the lattice planner drafts lookup."""
    trace, table = TRACES[trace_name], TABLES[table_name]
    costs = costs_of(table)
    calls = calls_of(trace, "summarization")
    lattice = LatticeCosts(costs.verify_seconds, costs.first_draft_seconds, 0.0)
    planner = LatticePlanning(lattice, lattice_memory(), MAX_DRAFT, SHAPE)
    looked_up = offered = 0
    for call in calls:
        position = call.start
        while position < call.end - 1:
            r, room = call.at(position), call.end - position - 1
            offered += r.lookup is not None and r.lookup_accepted > 0
            plan = planner.plan_round(r.lookup, room)
            if plan.source in ("chain", "tree") and not plan.probe:  # the lattice read: choose again
                plan = planner.choose([0.05] * MAX_DRAFT, r.lookup, room)
            accepted = min(plan.num_tokens, r.lookup_accepted) if plan.source == "prompt-lookup" else 0
            looked_up += plan.source == "prompt-lookup"
            planner.record(plan, plan.num_tokens, accepted)
            position += accepted + 1
    assert offered >= 3  # the case is there: lookup drafts that would be accepted
    assert looked_up >= 3, looked_up


PLD_TOKENS = 10  # transformers' prompt lookup drafts up to 10 tokens (prompt_lookup_num_tokens=10)


# Where the drafter-free assistant is simulated below a bar (2026-11-30). Strict: the day one passes, its entry must go.
# The session's lookup tables (learnt on the categories that copy) keep drafting translation's rare copies on the
# fp32 tables, where a missed copy costs a whole step. The 1.5B's bf16 entry (0.9994x fixed lookup) went with the
# longest-agreeing occurrence and 1-gram matches; its AVX2-imitated fp32 one (translation 0.878x plain, 0.998x fixed
# lookup) with the request's view of the lookup tables (planning.core.RequestLookup: 0.995x, 1.011x). The 0.5B's
# translations still draft 2-gram copies whose first token the session puts at 0.4-0.5 and the request's few
# outcomes (mostly 1-gram copies, as predicted) do not move: 3 of 4 miss, each missing a whole step.
DRAFTER_FREE_BELOW_THE_BAR = {
    ("qwen05b", "avx2imitated_fp32_qwen05b"): "translation 0.965x plain decoding (1.27x over the session)",
    ("qwen05b", "avx512bf16_fp32_qwen05b"): "translation 0.961x plain decoding (1.25x over the session)",
}


@pytest.mark.parametrize("trace_name,table_name", CASES)
def test_the_drafter_free_assistant_never_loses_to_plain_decoding_and_beats_fixed_lookup(trace_name, table_name,
                                                                                         request):
    """`DynaSpecAssistant.for_target`'s planner (lookups or nothing, from no prior) on every host kind's costs: in
    every category of the traced dev prompts at least 0.97x plain decoding, and over the whole session at least
    what prompt lookup's fixed rules make (up to 10 tokens wherever the context's last n-gram recurs: this project's
    most recent 2-3-gram rule, and transformers' earliest 2-gram, else 1-gram, occurrence).
    The AVX2 tables are where a fixed lookup loses to plain decoding and only a costed plan holds on."""
    if (trace_name, table_name) in DRAFTER_FREE_BELOW_THE_BAR:
        reason = DRAFTER_FREE_BELOW_THE_BAR[(trace_name, table_name)]
        request.applymarker(pytest.mark.xfail(strict=True, reason=reason))
    trace, table = TRACES[trace_name], TABLES[table_name]
    replay = Replay(costs_of(table), SHAPE)
    categories = sorted({call["category"] for call in trace["calls"]})
    memory = PlannerMemory()  # no artifact, no prior; its tables kept across the session's calls
    for category in categories:
        calls = [c for c in trace["calls"] if c["category"] == category]
        free = auto_rate(replay, offered_by_the_drafter_free(calls), memory, trees=False, deferred=False, drafter=False)
        plain = fixed_rates(replay, as_shipped(calls))["none"]
        assert free >= 0.97 * plain, (category, free / plain)
    baseline = as_shipped(trace["calls"])
    fixed = fixed_rates(replay, baseline)
    theirs = rate_of([replay.fixed(call, "transformers-lookup", 0) for call in baseline])
    free = auto_rate(replay, offered_by_the_drafter_free(trace["calls"]), PlannerMemory(), trees=False, deferred=False,
                     drafter=False)
    assert free >= fixed["lookup"], (free / fixed["lookup"], free / fixed["none"])
    assert free >= theirs, (free / theirs, free / fixed["none"])


def as_shipped(calls: list[dict]) -> list:
    """The traced calls with the fixed lookup rule's offers (2-3-gram matches, up to PLD_TOKENS)."""
    return [c for c in (records_of(call, PLD_TOKENS) for call in calls) if c is not None]


def offered_by_the_drafter_free(calls: list[dict]) -> list:
    """The traced calls with what the drafter-free assistant's prompt lookup offers (its own smallest n-gram)."""
    smallest = DRAFTER_FREE_OPTIONS["prompt_lookup_min_ngram"]
    return [c for c in (records_of(call, PLD_TOKENS, smallest) for call in calls) if c is not None]
