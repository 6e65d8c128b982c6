"""One results table per host kind, generated from the results table (`benchmarks/results/results.jsonl`): what
the README shows, so that its numbers are the recorded ones (tests/test_docs.py regenerates it and compares).
Greedy and sampled (`hf-dynaspec bench --sample`) runs are rows of their own; runs of some categories only
(`--categories`) are left out.

For each host kind, target and dtype: the latest end-to-end run (`hf-dynaspec bench`, benchmark "generate") that
timed the default plan (a method with `auto`), else the latest run at all: plain generate()'s speed, plain
generate() on the fastest CPU kernels (`vanilla-fast`, hf_dynaspec.fast_cpu) where the run timed it, the default's
speedup over both plain paths and its tau, the best other method (no `auto`: a fixed plan, transformers' prompt
lookup, the drafter-free assistant) of the same run, and the run's file. A host kind without runs is named as such.

    python -m hf_dynaspec.bench.summary benchmarks/results/results.jsonl
"""

from __future__ import annotations

import argparse
from collections import OrderedDict
from pathlib import Path

from hf_dynaspec.bench.results_table import read_records

HOST_KINDS = ("AVX-512 BF16 + AMX", "AVX-512 BF16", "AVX-512 without BF16", "AVX2", "other")
START, END = "<!-- results-summary:start -->", "<!-- results-summary:end -->"


def host_kind(record: dict) -> str:
    """"AVX-512 BF16 + AMX" (bf16 matrix tiles), "AVX-512 BF16" (bf16 dot products only: the two time differently,
    docs/results.md), "AVX-512 without BF16" (no bf16 units, but float32 twice as wide as AVX2's: its verification
    and fp32 runs time apart from AVX2 hosts'), "AVX2" (no bf16 units: verification needs the rows kernel) or
    "other", from the record's CPU flags."""
    flags = set(record.get("host", {}).get("cpu_flags", []))
    if "amx_bf16" in flags:
        return "AVX-512 BF16 + AMX"
    if "avx512_bf16" in flags:
        return "AVX-512 BF16"
    if "avx512f" in flags:
        return "AVX-512 without BF16"
    return "AVX2" if "avx2" in flags else "other"


def is_default(method: str) -> bool:
    """A method timing the default plan (`draft_plan="auto"` of a drafter or of Medusa heads)."""
    parts = method.split("/")[-1].split("+")
    return "auto" in parts or parts[0].startswith("medusa-auto")


def runs(records: list[dict]) -> OrderedDict:
    """{(host kind, target, dtype, file): [records of that run]}, in the table's order."""
    grouped: OrderedDict = OrderedDict()
    for record in records:
        metrics = record.get("metrics", {})
        if record.get("benchmark") != "generate" or not metrics.get("file") or metrics.get("categories"):
            continue  # a run of some categories only (--categories) is not a target's headline
        # A sampled run is its own row: "bf16, sampled" (greedy runs stay plain "bf16").
        mode = ", sampled" if metrics.get("mode") == "sampled" else ""
        key = (host_kind(record), record.get("target"), (metrics.get("dtype") or "bf16") + mode, metrics["file"])
        grouped.setdefault(key, []).append(record)
    return grouped


def label(method: str) -> str:
    """A method as the table names it: llama.cpp's by its GGUF file's name, not the path it had on the host that ran
    it (the run's record keeps the path)."""
    engine, _, path = method.partition(":")
    return f"llama.cpp:{Path(path).name}" if engine == "llama.cpp" else method


def _row(kind: str, target: str, dtype: str, file: str, run: list[dict]) -> str:
    by_method = {r["method"]: r["metrics"] for r in run}
    vanilla, fast = by_method.get("vanilla", {}), by_method.get("vanilla-fast", {})
    default = next((m for m in by_method if is_default(m)), None)
    others = [m for m in by_method if m not in ("vanilla", "vanilla-fast") and not is_default(m)]
    best = max(others, key=lambda m: by_method[m].get("speedup") or 0.0, default=None)

    def cell(method):
        if method is None:
            return "-"
        metrics = by_method[method]
        tau = f", tau {metrics['tau']:.2f}" if metrics.get("tau") else ""
        # Both speedups are geometric means over the same prompts, so their ratio is the speedup over vanilla-fast.
        over_fast = f" / {metrics['speedup'] / fast['speedup']:.2f}x" if fast.get("speedup") else " / -"
        return f"`{label(method)}` {metrics.get('speedup', 0.0):.2f}x{over_fast}{tau}"

    shape = f"{vanilla.get('n_prompts', '?')} x {vanilla.get('max_new_tokens', '?')}"
    speed = f"{vanilla['tokens_per_s']:.2f}" if vanilla.get("tokens_per_s") else "-"
    fast_speed = f"{fast['tokens_per_s']:.2f} ({fast['speedup']:.2f}x)" if fast.get("speedup") else "not timed"
    date = run[0].get("date", "")[:10]
    return (f"| {kind} | {target} | {dtype} | {shape} | {speed} | {fast_speed} | {cell(default)} | {cell(best)} | {date} | "
            f"`{file.removeprefix('benchmarks/results/')}` |")


def summary_tables(records: list[dict]) -> str:
    """The markdown table: per host kind, target and dtype, the latest run that timed the default."""
    latest: dict = {}
    for (kind, target, dtype, file), run in runs(records).items():
        has_default = any(is_default(r["method"]) for r in run)
        key = (HOST_KINDS.index(kind), target, dtype)
        if has_default or not latest.get(key, (None, None, False))[2]:
            latest[key] = (file, run, has_default)
    lines = ["CPU hosts, 2 cores (plain generate() = 1.00x; speedups as *over plain / over vanilla-fast*, plain "
             "generate() on the fastest kernels (`hf_dynaspec.fast_cpu`); bf16 outputs identical up to near-ties, "
             "checked per prompt; *sampled* rows: the target's published sampling settings, each run from its own "
             "seed, exact by the suite's enumeration tests):", "",
             "| host | target | dtype | prompts x new tokens | plain tok/s | vanilla-fast tok/s | default (`auto`) "
             "| best other method | date | run (benchmarks/results/) |",
             "| --- | --- | --- | --- | ---: | ---: | --- | --- | --- | --- |"]
    lines += [_row(HOST_KINDS[kind], target, dtype, file, run)
              for (kind, target, dtype), (file, run, _) in sorted(latest.items())]
    present = {index for index, _, _ in latest}
    missing = [kind for index, kind in enumerate(HOST_KINDS[:-1]) if index not in present]
    if missing:
        lines += ["", f"No end-to-end run in the results table yet on: {', '.join(missing)}."]
    return "\n".join(lines) + "\n"


def replace_block(text: str, tables: str) -> str:
    """`text` with the block between the START and END markers replaced by `tables`."""
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{tables}{END}{tail}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("table", help="the results table (benchmarks/results/results.jsonl)")
    parser.add_argument("--write", help="replace the generated block of this markdown file (e.g. README.md)")
    args = parser.parse_args()
    tables = summary_tables(read_records(args.table))
    if args.write:
        path = Path(args.write)
        path.write_text(replace_block(path.read_text(), tables))
    else:
        print(tables, end="")


if __name__ == "__main__":
    main()
