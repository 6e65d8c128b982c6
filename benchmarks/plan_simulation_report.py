"""The planner simulation's numbers for docs/planning.md: `auto` against every fixed plan, on every recorded trace
and cost table (tests/fixtures/planner/), as tests/test_plan_simulation.py asserts them.

    python benchmarks/plan_simulation_report.py --json benchmarks/results/plan_simulation_2026-11-27.json

Prints a markdown table: per trace and table, the best fixed plan in hindsight (tokens per second, decode only),
and `auto`'s ratio to it with chains only and with trees, starting from the artifact's measured acceptance and
from 0.5 everywhere. Host-independent (simulated seconds).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the replay harness the tests use

from plan_simulation import MAX_DRAFT, Replay, auto_rate, fixed_rates, records_of  # noqa: E402
from plans import Plan, Planning  # noqa: E402

from hf_dynaspec.drafting.planning.core import PlannerMemory, RoundCosts, TreeShape  # noqa: E402
from hf_dynaspec.modeling.acceptance_prior import prior_for  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "planner"
SHAPE = TreeShape(4, 4, 8)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    traces = {p.stem.removeprefix("traces_"): json.loads(p.read_text()) for p in sorted(FIXTURES.glob("traces_*.json"))}
    tables = {p.stem: json.loads(p.read_text()) for p in sorted((FIXTURES / "costs").glob("*.json"))}
    rows = []
    print("| trace | cost table | no draft | best fixed plan | auto, chains | auto, trees | auto from 0.5, trees |")
    print("| --- | --- | ---: | --- | ---: | ---: | ---: |")
    for trace_name, trace in traces.items():
        prior = prior_for(trace["expected_acceptance"], do_sample=False)
        calls = [c for c in (records_of(call) for call in trace["calls"]) if c is not None]
        for table_name, table in tables.items():
            if table["target"] not in (trace["target"], "any"):
                continue
            replay, deferred = Replay(RoundCosts(**table["costs"]), SHAPE), table["host"] == "gpu-like"
            fixed = fixed_rates(replay, calls)
            chains = {k: v for k, v in fixed.items() if not k.startswith("tree")}
            best_chain, best = max(chains, key=chains.get), max(fixed, key=fixed.get)

            def auto(memory_prior, trees, replay=replay, deferred=deferred, calls=calls):
                return auto_rate(replay, calls, PlannerMemory(memory_prior), trees, deferred)

            row = {"trace": trace_name, "table": table_name, "none": fixed["none"], "best_fixed": best,
                   "best_fixed_rate": fixed[best], "best_fixed_chains": best_chain,
                   "auto_chains": auto(prior, False) / fixed[best_chain], "auto_trees": auto(prior, True) / fixed[best],
                   "auto_trees_without_prior": auto(None, True) / fixed[best], "fixed": fixed}
            rows.append(row)
            print(f"| {trace_name} | {table_name} | {fixed['none']:.2f} | {best} {fixed[best]:.2f} | "
                  f"{row['auto_chains']:.3f}x | {row['auto_trees']:.3f}x | {row['auto_trees_without_prior']:.3f}x |")
    quickstart = quickstart_first_rounds(traces["qwen05b"], tables)
    for row in quickstart:
        print(f"quickstart (0.5B, {row['table']}): first round chain of {row['chain_tokens']} at "
              f"{row['chain_rate']:.2f} tok/s against {row['none_rate']:.2f} without a draft; drafts in round "
              f"{row['first_drafting_round']}")
    if args.json is not None:
        args.json.write_text(json.dumps({"rows": rows, "quickstart": quickstart}, indent=1) + "\n")


def quickstart_first_rounds(trace: dict, tables: dict) -> list[dict]:
    """The quickstart pairing (0.5B, fp32) on each fp32 table, with the artifact's measured acceptance: the first
    round's best chain against no draft, and the round it first drafts in (no round recorded before)."""
    prior = prior_for(trace["expected_acceptance"], do_sample=False)
    out = []
    for name, table in tables.items():
        if table["dtype"] != "fp32" or table["target"] != trace["target"]:
            continue
        costs = RoundCosts(**table["costs"])
        planner = Planning(costs, PlannerMemory(prior), MAX_DRAFT)
        chain = planner.drafted[0]
        k, rate = planner.planner.rate(chain, MAX_DRAFT)  # the chain's best length, as the planner prices it
        first = 1
        while planner.plan_round([], 16).source != "drafter":  # a round with no draft, recorded as such
            planner.record(Plan("none", 0), 0, 0)
            first += 1
        out.append({"table": name, "chain_tokens": k, "chain_rate": rate, "none_rate": 1.0 / costs.verify(1),
                    "first_drafting_round": first})
    return out


if __name__ == "__main__":
    main()
