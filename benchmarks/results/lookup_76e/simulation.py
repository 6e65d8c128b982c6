"""#76: the drafter-free assistant in the plan simulation (tests/plan_simulation.py), every trace x cost table:
its worst category over plain decoding, its session against this project's fixed lookup rule and against
transformers' prompt lookup rule (earliest 2-gram, else 1-gram, occurrence; 10 tokens), and tau on RAG and
summarization (ours / transformers'). MIN_NGRAM (default 1, what `for_target` ships) sets its prompt lookup's
smallest n-gram, for the comparison with 2.

    MIN_NGRAM=1 python benchmarks/results/lookup_76e/simulation.py > benchmarks/results/lookup_76e/simulation_min1.txt
    MIN_NGRAM=2 python benchmarks/results/lookup_76e/simulation.py > benchmarks/results/lookup_76e/simulation_min2.txt"""
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests"))
from plan_simulation import Replay, auto_rate, fixed_rates, rate_of  # noqa: E402
from test_plan_simulation import CASES, SHAPE, TABLES, TRACES, as_shipped, costs_of, offered_by_the_drafter_free  # noqa: E402

from hf_dynaspec.drafting.planning.core import PlannerMemory  # noqa: E402
from hf_dynaspec.modeling.options import DRAFTER_FREE_OPTIONS  # noqa: E402

DRAFTER_FREE_OPTIONS["prompt_lookup_min_ngram"] = int(os.environ.get("MIN_NGRAM", "1"))


def tau(calls) -> float:
    return sum(c.tokens for c in calls) / sum(sum(c.sources.values()) for c in calls)


for trace_name, table_name in CASES:
    trace, replay = TRACES[trace_name], Replay(costs_of(TABLES[table_name]), SHAPE)
    memory, worst, taus = PlannerMemory(), (9.0, ""), {}
    for category in sorted({c["category"] for c in trace["calls"]}):
        calls = [c for c in trace["calls"] if c["category"] == category]
        free = [replay.auto(c, memory, trees=False, drafter=False) for c in offered_by_the_drafter_free(calls)]
        worst = min(worst, (rate_of(free) / fixed_rates(replay, as_shipped(calls))["none"], category))
        if category in ("rag", "summarization"):
            theirs = [replay.fixed(c, "transformers-lookup", 0) for c in as_shipped(calls)]
            taus[category] = f"{tau(free):.2f}/{tau(theirs):.2f}"
    baseline = as_shipped(trace["calls"])
    fixed = fixed_rates(replay, baseline)
    theirs = rate_of([replay.fixed(c, "transformers-lookup", 0) for c in baseline])
    free = auto_rate(replay, offered_by_the_drafter_free(trace["calls"]), PlannerMemory(), trees=False, deferred=False,
                     drafter=False)
    print(f"{trace_name} {table_name:28s} worst {worst[0]:.3f} {worst[1]:14s} /fixed-lookup {free / fixed['lookup']:.3f} "
          f"/transformers {free / theirs:.3f} /plain {free / fixed['none']:.2f} (transformers /plain "
          f"{theirs / fixed['none']:.2f}) tau ours/transformers {taus}")
