"""Projected GPU speedup per method: GPU costs measured with random weights, acceptance measured with real models.

Greedy acceptance does not depend on the device; costs do not depend on the weights. So the acceptance each
shipped assistant measured with its real target (its generation config's `expected_acceptance`, greedy: per draft
position, P(accepted | reached), measured on held-aside prompts when it was packaged, through its shipped DynaSpec
head) and the costs of `tests/gpu/test_gpu_costs.py` on a card (`gpu_costs.json`) give, for a chain of K tokens,

    tokens per round = 1 + sum_{k=1..K} prod_{j<=k} a_j,  time per round = draft(K) + verify(K + 1),
    speedup = (tokens per round / time per round) x verify(1),  the best K in 1..8,

with draft(K) = draft4 x K / 4 (the measured 4-token round, scaled per step). Where the costs hold plain
`generate()`'s own time per token (`plain`: eager, and HF's static-cache compiled path), each row is also divided
against those: speedup over plain X = tokens per round / time per round x X's milliseconds per token. A projection, not a measurement:
it leaves out the loop's own host work per round and assumes each head drafts with the shipped head's acceptance
(the full head and FR-Spec accept about as often on these prompts: docs/results.md). docs/gpu.md shows it next to
the measured figures.

    python benchmarks/gpu_projection.py benchmarks/results/gpu_<card>_<date>/gpu_costs.json [--json OUT]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ASSISTANTS = {"qwen2.5-0.5b": "qwen2.5-coder-0.5b-instruct", "qwen2.5-1.5b": "qwen2.5-coder-1.5b-instruct"}
ROOT = Path(__file__).resolve().parents[1]


def expected_tokens(acceptance: list[float], k: int) -> float:
    """1 + the expected accepted tokens of a K-token chain with conditional acceptance per position (the last
    value repeats past the list)."""
    total, reached = 1.0, 1.0
    for position in range(k):
        reached *= acceptance[min(position, len(acceptance) - 1)]
        total += reached
    return total


def project(medians_ms: dict[str, float], acceptance: list[float], draft_case: str, max_k: int = 8) -> dict:
    """The best K for one head and mode (`draft_case`: a `draft4 ...` key of the costs) -> {k, tokens per round,
    ms per round, speedup over plain decoding}."""
    one_step = medians_ms["verify 1"]
    best = None
    for k in range(1, max_k + 1):
        tokens = expected_tokens(acceptance, k)
        round_ms = medians_ms[draft_case] * k / 4 + medians_ms[f"verify {k + 1}"]
        speedup = tokens / round_ms * one_step
        if best is None or speedup > best["speedup"]:
            best = {"k": k, "tokens_per_round": tokens, "ms_per_round": round_ms, "speedup": speedup}
    return best


def greedy_acceptance(assistant: str) -> list[float]:
    config = json.loads((ROOT / "assistants" / assistant / "generation_config.json").read_text())
    return list(config["expected_acceptance"]["greedy"]["position"])


def projection_table(costs: dict) -> list[dict]:
    rows = []
    for entry in costs["entries"]:
        assistant = ASSISTANTS.get(entry["shape"])
        if assistant is None:  # no shipped assistant of that size: costs only
            continue
        acceptance = greedy_acceptance(assistant)
        plain = next((p["ms_per_token"] for p in costs.get("plain", [])
                      if (p["shape"], p["dtype"]) == (entry["shape"], entry["dtype"])), {})
        for case in sorted(k for k in entry["medians_ms"] if k.startswith("draft4 ")):
            rows.append({"card": costs["card"], "shape": entry["shape"], "dtype": entry["dtype"],
                         "method": case.removeprefix("draft4 "), **project(entry["medians_ms"], acceptance, case)})
            rows[-1].update({f"over_plain_{name}": rows[-1]["tokens_per_round"] / rows[-1]["ms_per_round"] * ms
                             for name, ms in plain.items()})
    return rows


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("costs", help="gpu_costs.json written by tests/gpu/test_gpu_costs.py")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    rows = projection_table(json.loads(Path(args.costs).read_text()))
    print("| card | shape | dtype | method | best K | tokens / round | ms / round | over verify(1) "
          "| over plain eager | over plain compiled |")
    print("| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        over = [f"{r[key]:.2f}x" if key in r else "not measured" for key in ("over_plain_eager", "over_plain_compiled")]
        print(f"| {r['card']} | {r['shape']} | {r['dtype']} | {r['method']} | {r['k']} | {r['tokens_per_round']:.2f} "
              f"| {r['ms_per_round']:.2f} | {r['speedup']:.2f}x | {over[0]} | {over[1]} |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return rows


if __name__ == "__main__":
    main()
