"""#76: the default (`auto` with the shipped drafter and its prior) in the plan simulation with prompt lookup from
2-grams (shipped) and from 1-grams: its session rate over the best fixed plan (chains "C", with trees "T"). Run from
the repository root."""
import sys

sys.path.insert(0, "tests")
from plan_simulation import Replay, auto_rate, fixed_rates, records_of
from test_plan_simulation import CASES, SHAPE, TABLES, TRACES, costs_of, prior_of

from hf_dynaspec.drafting.planning.core import PlannerMemory

for tn, tb in CASES:
    trace, table = TRACES[tn], TABLES[tb]
    replay = Replay(costs_of(table), SHAPE)
    base = [c for c in (records_of(x) for x in trace["calls"]) if c]
    fixed = fixed_rates(replay, base)
    out = []
    for m in (2, 1):
        calls = [c for c in (records_of(x, 5, m) for x in trace["calls"]) if c]
        for trees in (False, True):
            f = {k: v for k, v in fixed.items() if trees or not k.startswith("tree")}
            a = auto_rate(replay, calls, PlannerMemory(prior_of(trace)), trees=trees, deferred=table["host"] == "gpu-like")
            out.append(f"min{m}{'T' if trees else 'C'} {a / max(f.values()):.3f}")
    print(tn, f"{tb:28s}", " ".join(out), "/plain", round(a / fixed["none"], 2))
