"""Verification cost on a bf16 target: native PyTorch, the bf16 kernel and fp32 shadow weights (hf_dynaspec.kernels.verify_rows.patch).

    python benchmarks/cpu_verify.py --target qwen2.5-coder-0.5b-instruct --json benchmarks/results/cpu_verify_05b.json

A forward of k new tokens over a 200-token cache, k in 1..8, the three variants interleaved (each repeat runs
every k under every variant), median of the repeats; then a prefill of 16, 64 and 300 tokens. Also the largest
|logit| difference of each rerouted variant from native bf16 (they differ only in summation order) and whether
every argmax agrees.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from transformers import DynamicCache

from hf_dynaspec.kernels.verify_rows import patch as cpu_verify
from hf_dynaspec.bench.runner import load_target

VARIANTS = ("native", "kernel", "shadow")


def use(model, variant: str) -> None:
    cpu_verify.disable(model)
    if variant != "native":
        cpu_verify.enable(model, max_rows=cpu_verify.ANY_ROWS, method=variant)


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
    ks = (1, 2, 3, 4, 6, 8)
    times = {(v, k): [] for v in VARIANTS for k in ks}
    logits = {}
    for _ in range(args.repeats):
        for variant in VARIANTS:
            use(model, variant)
            for k in ks:
                new = torch.randint(0, 10000, (1, k), generator=torch.Generator().manual_seed(k))
                extra = cache.get_seq_length() - 200
                if extra:
                    cache.crop(-extra)
                start = time.perf_counter()
                logits[variant, k] = model(input_ids=new, past_key_values=cache, logits_to_keep=k).logits.float()
                times[variant, k].append((time.perf_counter() - start) * 1000)
    decode = {}
    for k in ks:
        row = {f"{v}_ms": statistics.median(times[v, k]) for v in VARIANTS}
        for v in VARIANTS[1:]:
            row[f"{v}_max_abs_logit_diff"] = (logits[v, k] - logits["native", k]).abs().max().item()
            row[f"{v}_same_argmax"] = bool((logits[v, k].argmax(-1) == logits["native", k].argmax(-1)).all())
        decode[k] = row
        print("decode", k, json.dumps(row), flush=True)
    prefill = {}
    for n in (16, 64, 300):
        ids = torch.randint(0, 10000, (1, n), generator=torch.Generator().manual_seed(n))
        runs = {v: [] for v in VARIANTS}
        for _ in range(3):
            for variant in VARIANTS:
                use(model, variant)
                start = time.perf_counter()
                model(input_ids=ids, logits_to_keep=1)
                runs[variant].append((time.perf_counter() - start) * 1000)
        prefill[n] = {f"{v}_ms": statistics.median(r) for v, r in runs.items()}
        print("prefill", n, json.dumps(prefill[n]), flush=True)
    cpu_verify.disable(model)
    report = {"target": args.target, "threads": torch.get_num_threads(), "cache_tokens": 200,
              "repeats": args.repeats, "decode_ms_by_new_tokens": decode, "prefill_ms_by_tokens": prefill}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
