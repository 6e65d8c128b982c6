"""Choose the tree shape (top_k, depth, total_tokens) for these targets: tau and speed per shape vs the chain.

    python benchmarks/tree_shapes.py --target qwen2.5-coder-0.5b-instruct --cpu-verify \
        --shapes 2,3,4 4,4,8 4,4,12 6,5,16 --json benchmarks/results/tree_shapes_05b.json

One process, the bench harness's interleaving: vanilla, the chain (`--chain`, the assistant's K) and one
tree method per shape, all with the same assistant artifact and shortlist strategy, on the dev split's first
`--limit-per-category` prompts of each category. The JSON is the harness report (tau, speedups, exactness).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from hf_dynaspec import DynaSpecAssistant
from hf_dynaspec.bench import Method, load_prompts, run_benchmark
from hf_dynaspec.bench.prompts import encode_prompts
from hf_dynaspec.bench.report import markdown_table
from hf_dynaspec.bench.runner import load_target, shipped_assistant_dir
from hf_dynaspec.generation import tree_generate
from hf_dynaspec.kernels.verify_rows import patch as cpu_verify
from recipes.data_paths import shared_data_dir


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", default="qwen2.5-coder-0.5b-instruct")
    parser.add_argument("--assistant", default=None)
    parser.add_argument("--shortlist", default="dynaspec")
    parser.add_argument("--shapes", nargs="+", default=["2,3,4", "4,4,8", "4,4,12", "6,5,16"])
    parser.add_argument("--limit-per-category", type=int, default=1)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    parser.add_argument("--cpu-verify", action="store_true")
    parser.add_argument("--num-draft-tokens", type=int, default=None, help="the chain's K (default: the assistant's)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    target, tokenizer = load_target(args.target, args.dtype)
    path = args.assistant or shipped_assistant_dir(args.target)
    if args.cpu_verify:
        cpu_verify.enable(target, max_rows=cpu_verify.ANY_ROWS)
    assistant = DynaSpecAssistant.from_pretrained(str(path), target=target, shortlist=args.shortlist,
                                                  num_assistant_tokens=args.num_draft_tokens)
    methods = [Method("vanilla"), Method("chain", {"assistant_model": assistant}, assistant)]
    for shape in args.shapes:
        top_k, depth, total = (int(v) for v in shape.split(","))
        tree = {"tree_top_k": top_k, "tree_depth": depth, "tree_total_tokens": total}
        methods.append(Method(f"tree:{shape}", {"custom_generate": tree_generate, "drafter": assistant, **tree},
                              assistant))
    prompts = load_prompts([str(shared_data_dir() / "eval" / "spec_bench_dev.jsonl")], args.limit_per_category)
    report = run_benchmark(target, methods, encode_prompts(tokenizer, prompts), max_new_tokens=args.max_new_tokens,
                           dtype=args.dtype, target_name=args.target)
    report.update(assistant=str(path), shortlist=args.shortlist,
                  cpu_verify=cpu_verify.enabled_method(target) if args.cpu_verify else None,
                  chain_num_draft_tokens=assistant.generation_config.num_assistant_tokens)
    print(markdown_table(report))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
