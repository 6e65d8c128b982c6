"""Where a sampled `assistant_model=` call's time goes (cProfile), with the target's shipped assistant and its
defaults, at the target's published sampling settings; a few dev prompts x 64 new tokens, bf16:

    python benchmarks/sampled_round_profile.py --target gemma-3-270m [--prompts 4]

Prints the calls' tau and sources, then the functions by own time and by cumulative time, and the fused
top-k/top-p's fallback count (rows whose top-p cut it could not prove). Profiling slows Python-heavy parts: read the
shares, not the speed.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats

import torch

from hf_dynaspec.bench.prompts import encode_prompt, load_prompts
from hf_dynaspec.bench.runner import load_assistant, load_target
from hf_dynaspec.drafting import row_processing
from hf_dynaspec.zoo import published_sampling

SAMPLING = ("do_sample", "temperature", "top_k", "top_p", "repetition_penalty", "min_p")


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", default="gemma-3-270m")
    parser.add_argument("--prompts", type=int, default=4)
    args = parser.parse_args(argv)
    model, tokenizer = load_target(args.target, "bf16")
    assistant, _ = load_assistant(None, model, args.target)
    sampling = {k: v for k, v in published_sampling(args.target).items() if k in SAMPLING}
    prompts = load_prompts(["../shared/data/eval/spec_bench_dev.jsonl", "../shared/data/eval/humaneval_dev.jsonl"],
                           limit_per_category=1)[: args.prompts]
    inputs = [encode_prompt(tokenizer, p.text, chat=tokenizer.chat_template is not None) for p in prompts]
    cut = row_processing.SparseTopP.cut
    unproven = []

    def counted_cut(self, row, kept):
        result = cut(self, row, kept)
        unproven.append(result is None)
        return result

    row_processing.SparseTopP.cut = counted_cut
    print(f"{args.target}, sampling {sampling}", flush=True)

    def run():
        for seed, ids in enumerate(inputs):
            torch.manual_seed(seed)
            model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=64, assistant_model=assistant,
                           **sampling)
            stats = assistant.stats
            print(f"prompt {seed}: tau {stats.tau:.2f}, {dict(stats.passes_by_source)}", flush=True)

    model.generate(inputs[0], attention_mask=torch.ones_like(inputs[0]), max_new_tokens=4, assistant_model=assistant,
                   **sampling)  # warm-up (costs, kernels)
    unproven.clear()
    profile = cProfile.Profile()
    profile.enable()
    run()
    profile.disable()
    print(f"top-p cuts the sparse path could not prove: {sum(unproven)} of {len(unproven)} rows")
    stats = pstats.Stats(profile)
    stats.sort_stats("tottime").print_stats(25)
    stats.sort_stats("cumulative").print_stats(45)


if __name__ == "__main__":
    main()
