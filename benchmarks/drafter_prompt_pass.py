"""Cost of the drafter's pass over a prompt (its first step of a generate() call), by how its Linears multiply.

    python benchmarks/drafter_prompt_pass.py --json benchmarks/results/drafter_prompt_pass_05b.json

The shipped assistant's drafter (bf16) steps over T random (embedding, feature) pairs with an empty cache:
PyTorch's own bf16 product, the CPU kernel (hf_dynaspec.kernels.verify_rows.loader) and fp32 shadow weights, interleaved.
On AVX2 CPUs without native bf16 matrix multiplies PyTorch pays about one weight pass per row.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from hf_dynaspec.kernels.verify_rows import patch as cpu_verify
from hf_dynaspec.modeling.drafter import causal_mask
from hf_dynaspec.drafting.kv_cache import DraftKVCache
from hf_dynaspec.bench.runner import load_assistant, load_target

ROUTES = {  # name -> cpu_verify.enable keyword arguments (None: PyTorch's own product for every row count)
    "native": None,
    "kernel": dict(method="kernel", min_rows=1, max_rows=cpu_verify.ANY_ROWS),
    "shadow": dict(method="shadow", min_rows=1, max_rows=cpu_verify.ANY_ROWS),
}


@torch.no_grad()
def pass_ms(drafter, rows: int, hidden: int) -> float:
    embeds = torch.randn(1, rows, hidden).to(torch.bfloat16)
    features = torch.randn(1, rows, hidden).to(torch.bfloat16)
    start = time.perf_counter()
    drafter.step(embeds, features, torch.arange(rows)[None], DraftKVCache(), causal_mask(rows, 0, "cpu"))
    return 1000 * (time.perf_counter() - start)


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", default="qwen2.5-coder-0.5b-instruct")
    parser.add_argument("--rows", default="16,147,741", help="prompt lengths (the dev prompts span 43-741 tokens)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    model, _ = load_target(args.target, "bf16")
    assistant, where = load_assistant(None, model, args.target)
    drafter, hidden = assistant.drafter, assistant.config.hidden_size
    results = {}
    for rows in map(int, args.rows.split(",")):
        times = {name: [] for name in ROUTES}
        for _ in range(args.repeats):
            for name, route in ROUTES.items():  # interleaved
                cpu_verify.disable(drafter)
                if route is not None:
                    cpu_verify.enable(drafter, **route)
                times[name].append(pass_ms(drafter, rows, hidden))
        results[rows] = {f"{name}_ms": round(statistics.median(t), 1) for name, t in times.items()}
        print(rows, results[rows], flush=True)
    report = {"target": args.target, "assistant": where, "threads": torch.get_num_threads(),
              "repeats": args.repeats, "median_ms_by_prompt_rows": results}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
