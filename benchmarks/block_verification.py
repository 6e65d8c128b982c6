"""Sampled generation: token-by-token verification against block verification, interleaved, one process.

    python benchmarks/block_verification.py --target qwen2.5-coder-0.5b-instruct \
        --assistant assistants/qwen2.5-coder-0.5b-instruct --prompts ../shared/data/eval/spec_bench_dev.jsonl \
        --limit-per-category 1 --temperature 0.7 --draft 4 --results benchmarks/results/results.jsonl

Per prompt and seed, every configuration samples from the same starting RNG state (the target's distribution
is the same for all: only the acceptance rule differs). Reports tau (tokens per target pass: what block
verification raises) and tokens/s, per configuration, and appends one record each to the results table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from hf_dynaspec import DynaSpecAssistant
from hf_dynaspec.bench.prompts import encode_prompts, load_prompts
from hf_dynaspec.bench.results_table import append_records, make_record
from hf_dynaspec.bench.runner import load_target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", required=True)
    parser.add_argument("--assistant", required=True)
    parser.add_argument("--prompts", required=True)
    parser.add_argument("--limit-per-category", type=int, default=1)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--draft", type=int, default=4, help="fixed chain length (draft_plan='fixed')")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--results", default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    target, tokenizer = load_target(args.target, "bf16", "cpu")
    configs = {f"{plan}/{rule}": dict(verification=rule, draft_plan=plan, num_assistant_tokens=args.draft,
                                      prompt_lookup_num_tokens=0, suffix_cache_num_tokens=0)
               for plan in ("fixed", "auto") for rule in ("token", "block")}
    assistants = {name: DynaSpecAssistant.from_pretrained(args.assistant, target=target, **options)
                  for name, options in configs.items()}
    prompts = encode_prompts(tokenizer, load_prompts(args.prompts.split(","), args.limit_per_category))
    totals = {name: {"tokens": 0, "passes": 0, "seconds": 0.0, "taus": []} for name in configs}
    for assistant in assistants.values():  # warm-up (and the auto plan's calibration), untimed
        _generate(target, assistant, prompts[0].input_ids[:, :8], 4, args.temperature, seed=0)
    for index, prompt in enumerate(prompts):
        for seed in range(args.seeds):
            names = list(configs)
            names = names[(index + seed) % len(names):] + names[: (index + seed) % len(names)]
            for name in names:
                assistant = assistants[name]
                start = time.perf_counter()
                new = _generate(target, assistant, prompt.input_ids, args.max_new_tokens, args.temperature,
                                seed=1000 * index + seed)
                totals[name]["seconds"] += time.perf_counter() - start
                totals[name]["tokens"] += new
                totals[name]["passes"] += assistant.stats.verify_passes
                totals[name]["taus"].append(assistant.stats.tau)
    report = {}
    for name, total in totals.items():
        report[name] = {"tau": total["tokens"] / max(total["passes"], 1) if total["passes"] else None,
                        "tau_median_per_run": statistics.median(total["taus"]),
                        "tokens_per_s": total["tokens"] / total["seconds"], "runs": len(total["taus"])}
        print(f"{name:14s} tau {report[name]['tau']:.3f}  tok/s {report[name]['tokens_per_s']:.2f}")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"args": vars(args), "report": report}, out, indent=1)
    if args.results:
        append_records(args.results, [make_record("block_verification", name, metrics, target=args.target)
                                      for name, metrics in report.items()])


def _generate(target, assistant, input_ids, max_new_tokens: int, temperature: float, seed: int) -> int:
    torch.manual_seed(seed)
    out = target.generate(input_ids, attention_mask=torch.ones_like(input_ids), assistant_model=assistant,
                          do_sample=True, temperature=temperature, top_p=1.0, top_k=0, max_new_tokens=max_new_tokens)
    return out.shape[1] - input_ids.shape[1]


if __name__ == "__main__":
    main()
