"""Columns a DynaSpec step scores on a device, against the real rows of its shortlist, on real prompts.

Runs greedy generation with an assistant's DynaSpec head in its device form (`accelerator_paths_on_cpu`: the
row ids a GPU step scores, computed here on the CPU), drafter only (no prompt lookup or suffix cache, so every
round drafts), and records at every draft step the columns scored and the distinct real head rows among them.
Under the row budget (issue 63) the two are equal by construction (R(t) + A); before it, the compact list was
sized for the k largest clusters (4.30x the real rows on the 0.5B: benchmarks/results/shortlist_columns_05b.json
at commit 44c9b44).

    python benchmarks/shortlist_columns.py --target qwen2.5-coder-0.5b-instruct \\
        --assistant assistants/qwen2.5-coder-0.5b-instruct --limit-per-category 1 --max-new-tokens 64 \\
        --json benchmarks/results/row_budget_columns_05b.json
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch

from hf_dynaspec.bench.prompts import encode_prompts, load_prompts
from hf_dynaspec.bench.results_table import host_description
from hf_dynaspec.bench.runner import load_assistant, load_target
from hf_dynaspec.drafting.device_paths import accelerator_paths_on_cpu
from hf_dynaspec.drafting.selector import ClusterRowTable
from recipes.data_paths import shared_data_dir


def record_columns(steps: list) -> None:
    """Patch ClusterRowTable so that every scored step appends (R, columns, distinct real rows)."""
    original = ClusterRowTable.scores

    def recording(self, hidden, head_weight, ranking, rows):
        out = original(self, hidden, head_weight, ranking, rows)
        ids = out.token_ids
        steps.append((rows, len(ids), len(set(ids[ids >= 0].tolist()))))
        return out

    ClusterRowTable.scores = recording


def summarise(steps: list) -> dict:
    columns, real = [c for _, c, _ in steps], [r for _, _, r in steps]
    by_budget = {}
    for rows, c, r in steps:
        by_budget.setdefault(rows, []).append(c / r)
    return {
        "steps": len(steps),
        "mean_real_rows": statistics.fmean(real),
        "mean_columns": statistics.fmean(columns),
        "columns_over_real": statistics.fmean(columns) / statistics.fmean(real),
        "per_step_ratio_max": max(c / r for c, r in zip(columns, real)),
        "steps_per_budget": {str(rows): len(ratios) for rows, ratios in sorted(by_budget.items())},
    }


def parse_arguments(argv=None, description: str = "") -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--target", required=True)
    parser.add_argument("--assistant", required=True)
    parser.add_argument("--prompts", default=None, help="JSONL prompt files, comma-separated (default: the dev split)")
    parser.add_argument("--limit-per-category", type=int, default=1)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--json", default=None)
    return parser.parse_args(argv)


def generate_drafter_only(args: argparse.Namespace, before_each_prompt=lambda: None):
    """Load the target and its assistant with only the drafter drafting (no prompt lookup, no suffix cache,
    a fixed plan: every round scores shortlists) and generate greedily on the prompts; -> (assistant, number
    of prompts). What a run records is whatever the caller patched in before."""
    files = args.prompts.split(",") if args.prompts else [shared_data_dir() / "eval" / "spec_bench_dev.jsonl",
                                                           shared_data_dir() / "eval" / "humaneval_dev.jsonl"]
    target, tokenizer = load_target(args.target, "bf16")
    assistant, _ = load_assistant(args.assistant, target, args.target)
    options = assistant.generation_config
    options.prompt_lookup_num_tokens, options.suffix_cache_num_tokens, options.draft_plan = 0, 0, "fixed"
    prompts = encode_prompts(tokenizer, load_prompts(files, args.limit_per_category))
    for prompt in prompts:
        before_each_prompt()
        target.generate(prompt.input_ids, attention_mask=torch.ones_like(prompt.input_ids), do_sample=False,
                        max_new_tokens=args.max_new_tokens, assistant_model=assistant)
    return assistant, len(prompts)


def write_result(result: dict, path: str | None) -> dict:
    print(json.dumps(result, indent=1))
    if path:
        with open(path, "w") as f:
            json.dump(result, f, indent=1)
    return result


def main(argv=None) -> dict:
    args = parse_arguments(argv, __doc__.split("\n\n")[0])
    steps: list = []
    record_columns(steps)
    with accelerator_paths_on_cpu():
        assistant, num_prompts = generate_drafter_only(args)
    options = assistant.generation_config
    return write_result({"target": args.target, "assistant": args.assistant, "prompts": num_prompts,
                         "max_new_tokens": args.max_new_tokens, "shortlist": options.shortlist,
                         "shortlist_rows": options.shortlist_rows,
                         "num_assistant_tokens": options.num_assistant_tokens,
                         "host": host_description(), **summarise(steps)}, args.json)


if __name__ == "__main__":
    main()
