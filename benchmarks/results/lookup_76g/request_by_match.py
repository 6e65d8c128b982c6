"""#76 bar 2: does the request's view (planning.core.RequestLookup) catch the 0.5B's fp32 translation calls if its
outcomes are also kept apart by match length? Variants of the grouping, each run through the plan simulation
(tests/plan_simulation.py, every trace x cost table, as lookup_76f/request_weight_sweep.py prints them):

- shipped: (source, first position or the rest)
- by-1gram: (source, a 1-gram match or longer, first position or the rest)
- by-match: (source, match_key(match), first position or the rest)

Run from the repository root:
    python benchmarks/results/lookup_76g/request_by_match.py > benchmarks/results/lookup_76g/request_by_match.txt"""
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lookup_76f"))
from plan_simulation import Replay  # noqa: E402
from test_plan_simulation import CASES, SHAPE, TABLES, TRACES, costs_of  # noqa: E402

from hf_dynaspec.drafting.planning import core  # noqa: E402

sys.argv = sys.argv[:1] + ["4"]
import request_weight_sweep as sweep  # noqa: E402,F401  (runs the shipped grouping once, printing it)

GROUPS = {
    "by-1gram": lambda key: (*key[:-2], min(key[-2], 2), min(key[-1], 2)),
    "by-match": lambda key: (*key[:-2], key[-2], min(key[-1], 2)),
}


def patched(group):
    def estimate(self, key):
        p = self.table.estimate(key)
        accepted, expected, outcomes = self.sums.get(group(key), (0, 0.0, 0))
        if not outcomes or not 0.0 < p < 1.0:
            return p
        w = core.REQUEST_WEIGHT
        odds = p / (1.0 - p) * (accepted + w) / (expected + w) * (outcomes - expected + w) / (outcomes - accepted + w)
        return odds / (1.0 + odds)

    def record(self, key, accepted):
        entry = self.sums.setdefault(group(key), [0, 0.0, 0])
        entry[0], entry[1], entry[2] = entry[0] + int(accepted), entry[1] + self.table.estimate(key), entry[2] + 1
        self.table.record(key, accepted)
    return estimate, record


for name, group in GROUPS.items():
    core.RequestLookup.estimate, core.RequestLookup.record = patched(group)
    logs = []
    print(f"GROUPING {name} (REQUEST_WEIGHT {core.REQUEST_WEIGHT})")
    for trace_name, table_name in CASES:
        trace, table = TRACES[trace_name], TABLES[table_name]
        replay = Replay(costs_of(table), SHAPE)
        worst, over_fixed, over_theirs, over_plain = sweep.drafter_free(trace, replay)
        chains, trees = sweep.default(trace, table, replay)
        logs += [math.log(over_plain), math.log(chains), math.log(trees)]
        print(f"  {trace_name} {table_name:28s} drafter-free: worst {worst:.3f} /fixed-lookup {over_fixed:.3f} "
              f"/transformers {over_theirs:.3f} /plain {over_plain:.3f}   default: C {chains:.3f} T {trees:.3f}")
    print(f"  geometric mean of every ratio above but worst: {math.exp(sum(logs) / len(logs)):.4f}")
