"""Prompt-lookup settings of the hybrid drafter (lookup first, drafter otherwise), interleaved in one bench run.

    python benchmarks/lookup_sweep.py --target qwen2.5-coder-0.5b-instruct --assistant outputs/package-05b-v3 \
        --variants 4/2/3/K2,3/2/3/K2,5/2/3/K2,4/1/3/K2,4/3/4/K2,4/2/3/K3 \
        --json benchmarks/results/lookup_sweep_05b_bf16.json

A variant `N/MIN/MAX/KD` drafts up to N looked-up tokens for the longest matching n-gram in [MIN, MAX], and
otherwise D drafter tokens (DynaSpec, `--max-clusters` clusters). Same prompts, kernel and report as
`hf-dynaspec bench` (vanilla is always included and is the reference of speedups and exactness).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from hf_dynaspec import DynaSpecAssistant
from hf_dynaspec.bench import Method, load_prompts, run_benchmark
from hf_dynaspec.bench.prompts import encode_prompts
from hf_dynaspec.bench.report import markdown_table
from hf_dynaspec.bench.runner import load_target
from hf_dynaspec.kernels.verify_rows import patch as cpu_verify

PROMPTS = "../shared/data/eval/spec_bench_dev.jsonl,../shared/data/eval/humaneval_dev.jsonl"


def parse_variant(text: str) -> dict:
    tokens, low, high, draft = text.split("/")
    if not draft.startswith("K"):
        raise ValueError(f"variant {text!r}: expected N/MIN/MAX/KD, e.g. 4/2/3/K2")
    return dict(prompt_lookup_num_tokens=int(tokens), prompt_lookup_min_ngram=int(low),
                max_matching_ngram_size=int(high), num_assistant_tokens=int(draft[1:]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="qwen2.5-coder-0.5b-instruct")
    parser.add_argument("--assistant", required=True)
    parser.add_argument("--variants", required=True, help="comma-separated N/MIN/MAX/KD")
    parser.add_argument("--max-clusters", type=int, default=8)
    parser.add_argument("--prompts", default=PROMPTS)
    parser.add_argument("--limit-per-category", type=int, default=1)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--json", required=True)
    args = parser.parse_args()

    target, tokenizer = load_target(args.target, "bf16")
    cpu_verify.enable(target, max_rows=cpu_verify.ANY_ROWS, method="kernel")  # as `hf-dynaspec bench --cpu-verify`
    methods = [Method("vanilla")]
    for variant in args.variants.split(","):
        assistant = DynaSpecAssistant.from_pretrained(args.assistant, target=target, shortlist="dynaspec",
                                                      max_clusters=args.max_clusters, **parse_variant(variant))
        methods.append(Method(variant, {"assistant_model": assistant}, assistant))
    prompts = encode_prompts(tokenizer, load_prompts(args.prompts.split(","), args.limit_per_category))
    report = run_benchmark(target, methods, prompts, max_new_tokens=args.max_new_tokens, dtype="bf16",
                           target_name=args.target)
    report.update(assistant=args.assistant, cpu_verify="kernel", max_clusters=args.max_clusters,
                  variants="N/MIN/MAX/KD: lookup tokens, n-gram range, drafter tokens")
    print(markdown_table(report))
    for key, method in report["methods"].items():
        print(key, "lookup share", method["lookup_share"], "lookup acceptance", method["lookup_acceptance"])
    Path(args.json).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
