"""Columns a DynaSpec step scores on a device, against the real rows of its shortlist, on real prompts.

Runs greedy generation with an assistant's DynaSpec head (drafter only: no prompt lookup or suffix cache, so
every round drafts) and records, at every draft step, the clusters the router chose. For each step it reports
the real rows (the chosen clusters plus the always-included ids) and the columns the device form scores for
that choice: the compact list (`bound(k) + A`, drafting/cluster_rows.py) and the earlier padded table
(`(k + 1) x max(widest cluster, A)`). Which clusters are chosen does not depend on the form, so the CPU path's
choices give both forms' columns exactly.

    python benchmarks/shortlist_columns.py --target qwen2.5-coder-0.5b-instruct \\
        --assistant assistants/qwen2.5-coder-0.5b-instruct --limit-per-category 1 --max-new-tokens 64 \\
        --json benchmarks/results/shortlist_columns_05b.json
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch

from hf_dynaspec.bench.prompts import encode_prompts, load_prompts
from hf_dynaspec.bench.results_table import host_description
from hf_dynaspec.bench.runner import load_assistant, load_target
from hf_dynaspec.drafting.cluster_rows import ClusterRowTable
from hf_dynaspec.drafting.selector import ClusterHead
from recipes.data_paths import shared_data_dir


def record_choices(steps: list) -> None:
    """Patch ClusterHead so that every scored step appends (budget k, chosen clusters)."""
    original = ClusterHead._clusters_from

    def recording(self, cluster_scores, position):
        chosen = original(self, cluster_scores, position)
        steps.append((self.budget(position), chosen))
        return chosen

    ClusterHead._clusters_from = recording


def summarise(steps: list, table: ClusterRowTable, max_rows) -> dict:
    sizes = [b - a for a, b in zip(table.offsets, table.offsets[1:])]
    widest = max(max(sizes), table.num_always)
    real = [sum(sizes[c] for c in chosen) + table.num_always for _, chosen in steps]
    compact = [table.bound(k, max_rows) + table.num_always for k, _ in steps]
    padded = [(k + 1) * widest for k, _ in steps]
    ratio = lambda cols: [c / r for c, r in zip(cols, real)]  # noqa: E731
    return {
        "steps": len(steps),
        "mean_real_rows": statistics.fmean(real),
        "mean_compact_columns": statistics.fmean(compact),
        "mean_padded_columns": statistics.fmean(padded),
        "columns_over_real_compact": statistics.fmean(compact) / statistics.fmean(real),
        "columns_over_real_padded": statistics.fmean(padded) / statistics.fmean(real),
        "per_step_ratio_compact_median": statistics.median(ratio(compact)),
        "per_step_ratio_compact_max": max(ratio(compact)),
        "per_step_ratio_padded_median": statistics.median(ratio(padded)),
        "cluster_sizes": {"largest": max(sizes), "median": statistics.median(sizes), "smallest": min(sizes),
                          "always_included": table.num_always},
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
    record_choices(steps)
    assistant, num_prompts = generate_drafter_only(args)
    options = assistant.generation_config
    table = ClusterRowTable(assistant.shortlists.host_clusters(), torch.device("cpu"))
    return write_result({"target": args.target, "assistant": args.assistant, "prompts": num_prompts,
                         "max_new_tokens": args.max_new_tokens, "shortlist": options.shortlist,
                         "max_clusters": options.max_clusters, "num_assistant_tokens": options.num_assistant_tokens,
                         "host": host_description(), **summarise(steps, table, options.max_shortlist_size)},
                        args.json)


if __name__ == "__main__":
    main()
