"""The GPU projection's arithmetic (benchmarks/gpu_projection.py), on costs whose best answer is known."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import gpu_projection  # noqa: E402


def costs(draft4: float, verify) -> dict:
    return {"draft4 dynaspec eager": draft4, **{f"verify {n}": verify(n) for n in range(1, 17)}}


def test_expected_tokens_of_a_chain():
    assert gpu_projection.expected_tokens([1.0], 3) == 4.0
    assert gpu_projection.expected_tokens([0.5], 2) == 1.75
    assert gpu_projection.expected_tokens([0.8, 0.5, 0.0], 5) == pytest.approx(1 + 0.8 + 0.4)


def test_the_best_chain_length_follows_costs_and_acceptance():
    # Free drafts and a flat verification: every accepted position pays, so the longest chain wins.
    free = gpu_projection.project(costs(0.0, lambda n: 10.0), [0.9], "draft4 dynaspec eager")
    assert free["k"] == 8 and free["speedup"] == pytest.approx(gpu_projection.expected_tokens([0.9], 8))
    # Nothing accepted: the shortest chain loses least, and it is a slowdown.
    none = gpu_projection.project(costs(4.0, lambda n: 10.0 + n), [0.0], "draft4 dynaspec eager")
    assert none["k"] == 1 and none["speedup"] == pytest.approx(11.0 / (1.0 + 12.0))
    # Dear verification per token: acceptance 0.9 at the first position, 0.1 after it: K = 1.
    steep = gpu_projection.project(costs(4.0, lambda n: 10.0 * n), [0.9, 0.1], "draft4 dynaspec eager")
    assert steep["k"] == 1


def test_the_table_reads_each_shipped_assistants_acceptance_and_skips_shapes_without_one():
    entry = {"shape": "qwen2.5-0.5b", "dtype": "bf16", "medians_ms": costs(4.0, lambda n: 10.0 + 0.1 * n)}
    other = {**entry, "shape": "qwen2.5-7b"}
    rows = gpu_projection.projection_table({"card": "test card", "entries": [entry, other]})
    assert [(r["shape"], r["method"]) for r in rows] == [("qwen2.5-0.5b", "dynaspec eager")]
    acceptance = gpu_projection.greedy_acceptance("qwen2.5-coder-0.5b-instruct")
    assert rows[0] == {"card": "test card", "shape": "qwen2.5-0.5b", "dtype": "bf16", "method": "dynaspec eager",
                       **gpu_projection.project(entry["medians_ms"], acceptance, "draft4 dynaspec eager")}


def test_rows_divide_against_plain_generate_where_its_costs_were_measured():
    entry = {"shape": "qwen2.5-0.5b", "dtype": "bf16", "medians_ms": costs(4.0, lambda n: 10.0 + 0.1 * n)}
    plain = [{"shape": "qwen2.5-0.5b", "dtype": "bf16", "ms_per_token": {"eager": 12.0, "compiled": 2.0}},
             {"shape": "qwen2.5-0.5b", "dtype": "fp16", "ms_per_token": {"eager": 99.0, "compiled": 99.0}}]
    row, = gpu_projection.projection_table({"card": "c", "entries": [entry], "plain": plain})
    per_ms = row["tokens_per_round"] / row["ms_per_round"]
    assert row["over_plain_eager"] == pytest.approx(per_ms * 12.0)
    assert row["over_plain_compiled"] == pytest.approx(per_ms * 2.0)  # 6x less than over eager: same rounds
    bare, = gpu_projection.projection_table({"card": "c", "entries": [entry]})
    assert "over_plain_compiled" not in bare
