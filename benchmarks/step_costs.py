"""Cost of one target forward step over k new tokens on a cached prefix, bf16 vs fp32, interleaved.

    python benchmarks/step_costs.py --target qwen2.5-coder-0.5b-instruct --json benchmarks/results/step_costs_05b.json

Speculative decoding pays off when verifying k tokens costs little more than a 1-token step; this measures
that ratio on the machine at hand (it differs between CPUs with and without native bf16 matmuls).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import torch
from transformers import DynamicCache

from hf_dynaspec.bench.runner import load_target


def step_ms(model, prefix_ids, k, repeats):
    times = []
    for _ in range(repeats):
        cache = DynamicCache(config=model.config)
        with torch.no_grad():
            model(input_ids=prefix_ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
            new = torch.randint(0, 1000, (1, k))
            start = time.perf_counter()
            model(input_ids=new, past_key_values=cache, use_cache=True, logits_to_keep=k)
            times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", default="qwen2.5-coder-0.5b-instruct")
    parser.add_argument("--prefix", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    models = {dtype: load_target(args.target, dtype)[0] for dtype in ("bf16", "fp32")}
    prefix = torch.randint(0, 1000, (1, args.prefix))
    results = {}
    for k in (1, 2, 4, 6, 8):
        for dtype, model in models.items():  # interleaved
            results.setdefault(dtype, {})[k] = step_ms(model, prefix, k, args.repeats)
        print(k, {d: f"{results[d][k]:.1f} ms" for d in results}, flush=True)
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    flags = open("/proc/cpuinfo").read()
    out = {"target": args.target, "prefix": args.prefix, "cpu": cpu, "machine": platform.machine(),
           "avx512_bf16": "avx512_bf16" in flags, "threads": torch.get_num_threads(), "step_ms": results}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
