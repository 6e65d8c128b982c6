# Run at 127f4d0 from the repository root (MIN_NGRAM and NOPROBE unset): the drafter-free planner before #76 late evening.
"""For each trace x table: drafter-free worst category vs plain, session vs fixed lookup, tau; default (drafter+lookup) vs best fixed."""
import sys

sys.path.insert(0, "tests")
import os

import plan_simulation
from plan_simulation import Replay, fixed_rates, rate_of, records_of
from test_plan_simulation import CASES, PLD_TOKENS, SHAPE, TABLES, TRACES, costs_of

from hf_dynaspec.drafting import lookup as L
from hf_dynaspec.drafting.planning.core import PlannerMemory

if os.environ.get("NOPROBE"):
    import hf_dynaspec.drafting.planning.planner as PL
    PL.lookup_probe = lambda *a, **k: None
MIN = int(os.environ.get("MIN_NGRAM", "2"))
orig = L.lookup_match
plan_simulation.lookup_match = lambda ids, n, lo, hi: orig(ids, n, MIN, hi)

def tau(res):
    return sum(r.tokens for r in res) / sum(sum(r.sources.values()) for r in res)

for trace_name, table_name in CASES:
    trace, table = TRACES[trace_name], TABLES[table_name]
    replay = Replay(costs_of(table), SHAPE)
    cats = sorted({c["category"] for c in trace["calls"]})
    memory, worst, taus = PlannerMemory(), (9, None), {}
    for cat in cats:
        calls = [c for c in (records_of(x, PLD_TOKENS) for x in trace["calls"] if x["category"] == cat) if c]
        res = [replay.auto(c, memory, trees=False, deferred=False, drafter=False) for c in calls]
        plain = fixed_rates(replay, calls)["none"]
        worst = min(worst, (rate_of(res) / plain, cat))
        fl = [replay.fixed(c, "lookup", 0) for c in calls]
        taus[cat] = (round(tau(res), 2), round(tau(fl), 2))
    every = [c for c in (records_of(x, PLD_TOKENS) for x in trace["calls"]) if c]
    fixed = fixed_rates(replay, every)
    free = rate_of([replay.auto(c, PlannerMemory(), trees=False, deferred=False, drafter=False) for c in every])
    print(f"{trace_name:8s} {table_name:28s} free worst {worst[0]:.3f} ({worst[1]}) "
          f"vs-lookup {free/fixed['lookup']:.3f} plain {free/fixed['none']:.2f}",
          {k: v for k, v in taus.items() if k in ("summarization", "rag")})
