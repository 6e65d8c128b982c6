"""Verification cost with and without fp32 shadow weights (hf_dynaspec.cpu_verify) on a bf16 target.

    python benchmarks/cpu_verify.py --target qwen2.5-coder-0.5b-instruct --json benchmarks/results/cpu_verify_05b.json

A forward of k new tokens over a 200-token cache, k in 1..8, the two variants interleaved, median of 7.
Also reports the largest |logit| difference between the variants (they differ only in summation order).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from transformers import DynamicCache

from hf_dynaspec import cpu_verify
from hf_dynaspec.runner import load_target


@torch.no_grad()
def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", default="qwen2.5-coder-0.5b-instruct")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    model, _ = load_target(args.target, "bf16")
    prefix = torch.randint(0, 10000, (1, 200), generator=torch.Generator().manual_seed(0))
    cache = DynamicCache(config=model.config)
    model(input_ids=prefix, past_key_values=cache)
    results = {}
    for k in (1, 2, 3, 4, 6, 8):
        new = torch.randint(0, 10000, (1, k), generator=torch.Generator().manual_seed(k))
        times = {"bf16": [], "fp32_shadow": []}
        logits = {}
        for _ in range(args.repeats):
            for variant in times:
                if variant == "fp32_shadow":
                    cpu_verify.enable(model)
                if cache.get_seq_length() > 200:
                    cache.crop(200 - cache.get_seq_length())  # negative: remove the last tokens
                start = time.perf_counter()
                logits[variant] = model(input_ids=new, past_key_values=cache).logits
                times[variant].append((time.perf_counter() - start) * 1000)
                cpu_verify.disable(model)
        results[k] = {name: statistics.median(v) for name, v in times.items()}
        results[k]["max_abs_logit_diff"] = (logits["bf16"].float() - logits["fp32_shadow"].float()).abs().max().item()
        results[k]["same_argmax"] = bool((logits["bf16"].argmax(-1) == logits["fp32_shadow"].argmax(-1)).all())
        print(k, json.dumps(results[k]))
    report = {"target": args.target, "threads": torch.get_num_threads(), "cache_tokens": 200, "ms": results}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
