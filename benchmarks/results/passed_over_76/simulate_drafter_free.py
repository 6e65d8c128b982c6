"""#76 (2026-11-29): the drafter-free plan simulation per trace x cost table, printed with its margins (what
tests/test_plan_simulation.py::test_the_drafter_free_assistant_never_loses_to_plain_decoding_and_beats_fixed_lookup
asserts): the worst category over plain decoding, and the session's rate over fixed prompt lookup and over plain
decoding. FAIL marks a case below either bar.

    python benchmarks/results/passed_over_76/simulate_drafter_free.py

The variants in simulated_variants.txt were run through this script with temporary edits of
hf_dynaspec/drafting/planning (not kept; each is described there).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]

from test_plan_simulation import CASES, PLD_TOKENS, SHAPE, TABLES, TRACES, costs_of  # noqa: E402

from hf_dynaspec.bench.plan_simulation import Replay, auto_rate, fixed_rates, records_of  # noqa: E402
from hf_dynaspec.drafting.planning.core import PlannerMemory  # noqa: E402


def calls_of(trace: dict, category: str | None = None) -> list:
    records = [records_of(call, PLD_TOKENS) for call in trace["calls"] if category in (None, call["category"])]
    return [r for r in records if r is not None]


def main() -> None:
    for trace_name, table_name in CASES:
        trace, replay = TRACES[trace_name], Replay(costs_of(TABLES[table_name]), SHAPE)
        memory, worst = PlannerMemory(), []
        for category in sorted({call["category"] for call in trace["calls"]}):
            calls = calls_of(trace, category)
            free = auto_rate(replay, calls, memory, trees=False, deferred=False, drafter=False)
            worst.append((free / fixed_rates(replay, calls)["none"], category))
        everything = calls_of(trace)
        fixed = fixed_rates(replay, everything)
        free = auto_rate(replay, everything, PlannerMemory(), trees=False, deferred=False, drafter=False)
        low, category = min(worst)
        verdict = "FAIL" if low < 0.97 or free < fixed["lookup"] else "ok"
        print(f"{verdict:4s} {trace_name:8s} {table_name:32s} worst {low:.3f} {category:14s} "
              f"vs-pld {free / fixed['lookup']:.4f} vs-plain {free / fixed['none']:.3f}")


if __name__ == "__main__":
    main()
