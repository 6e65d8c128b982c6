"""#76: the request calibration's weight (`planning.core.REQUEST_WEIGHT`) swept in the plan simulation
(tests/plan_simulation.py), every trace x cost table: the drafter-free assistant's worst category over plain decoding
and its session over this project's fixed lookup and transformers' rule, and the default (`auto` with the shipped
drafter and its prior, lookup from 2-grams) over the best fixed plan with chains (C) and trees (T). "off": the
session's tables alone (as before). Run from the repository root:
    python benchmarks/results/lookup_76f/request_weight_sweep.py > benchmarks/results/lookup_76f/request_weight_sweep.txt"""
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests"))
from plan_simulation import Replay, auto_rate, fixed_rates, rate_of, records_of  # noqa: E402
from test_plan_simulation import (  # noqa: E402
    CASES,
    SHAPE,
    TABLES,
    TRACES,
    as_shipped,
    costs_of,
    offered_by_the_drafter_free,
    prior_of,
)

from hf_dynaspec.drafting.planning import core  # noqa: E402
from hf_dynaspec.drafting.planning.core import PlannerMemory  # noqa: E402

WEIGHTS = [float(w) for w in sys.argv[1:]] or [math.inf, 0.5, 1.0, 2.0, 4.0, 8.0]


def drafter_free(trace, replay):
    memory, worst = PlannerMemory(), 9.0
    for category in sorted({c["category"] for c in trace["calls"]}):
        calls = [c for c in trace["calls"] if c["category"] == category]
        free = [replay.auto(c, memory, trees=False, drafter=False) for c in offered_by_the_drafter_free(calls)]
        worst = min(worst, rate_of(free) / fixed_rates(replay, as_shipped(calls))["none"])
    baseline = as_shipped(trace["calls"])
    fixed = fixed_rates(replay, baseline)
    theirs = rate_of([replay.fixed(c, "transformers-lookup", 0) for c in baseline])
    free = auto_rate(replay, offered_by_the_drafter_free(trace["calls"]), PlannerMemory(), trees=False, deferred=False,
                     drafter=False)
    return worst, free / fixed["lookup"], free / theirs, free / fixed["none"]


def default(trace, table, replay):
    calls = [c for c in (records_of(x) for x in trace["calls"]) if c]
    fixed = fixed_rates(replay, calls)
    out = []
    for trees in (False, True):
        best = max(v for k, v in fixed.items() if trees or not k.startswith("tree"))
        rate = auto_rate(replay, calls, PlannerMemory(prior_of(trace)), trees=trees, deferred=table["host"] == "gpu-like")
        out.append(rate / best)
    return out


with_request_view = core.RequestLookup.estimate
for weight in WEIGHTS:
    core.REQUEST_WEIGHT = weight
    # "inf": the session's tables alone (the request's view off)
    core.RequestLookup.estimate = (lambda self, key: self.table.estimate(key)) if weight == math.inf else with_request_view
    logs = []
    print(f"REQUEST_WEIGHT {weight}")
    for trace_name, table_name in CASES:
        trace, table = TRACES[trace_name], TABLES[table_name]
        replay = Replay(costs_of(table), SHAPE)
        worst, over_fixed, over_theirs, over_plain = drafter_free(trace, replay)
        chains, trees = default(trace, table, replay)
        logs += [math.log(over_plain), math.log(chains), math.log(trees)]
        print(f"  {trace_name} {table_name:28s} drafter-free: worst {worst:.3f} /fixed-lookup {over_fixed:.3f} "
              f"/transformers {over_theirs:.3f} /plain {over_plain:.3f}   default: C {chains:.3f} T {trees:.3f}")
    print(f"  geometric mean of every ratio above but worst: {math.exp(sum(logs) / len(logs)):.4f}")
