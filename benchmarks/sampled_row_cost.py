"""What a sampled verification pays per verified row beyond the target's forward, which the planner's costs
(`RoundCosts.verify_seconds`, measured greedy) do not hold: the target's published warpers on each row of real
verify logits, as the package runs them (`with_sparse_warpers`: the fused top-k/top-p):

    python benchmarks/sampled_row_cost.py --target gemma-3-270m

The logits come from the target's own forwards over a dev prompt and its greedy continuation (bf16, real ties),
so the share of rows whose top-p cut needs transformers' sort is the real one. torch.utils.benchmark, medians.
"""

from __future__ import annotations

import argparse

import torch
import torch.utils.benchmark as benchmark
from transformers import GenerationConfig
from transformers.generation.logits_process import (
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from hf_dynaspec.bench.prompts import encode_prompt, load_prompts
from hf_dynaspec.bench.runner import load_target
from hf_dynaspec.drafting import row_processing
from hf_dynaspec.zoo import published_sampling


def warpers(settings: dict) -> LogitsProcessorList:
    """The warpers transformers builds for these settings (temperature, top-k, top-p; in its order)."""
    config = GenerationConfig(**settings)
    built = LogitsProcessorList()
    if config.temperature is not None and config.temperature != 1.0:
        built.append(TemperatureLogitsWarper(config.temperature))
    if config.top_k:
        built.append(TopKLogitsWarper(config.top_k))
    if config.top_p is not None and config.top_p < 1.0:
        built.append(TopPLogitsWarper(config.top_p))
    return built


@torch.no_grad()
def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", default="gemma-3-270m")
    args = parser.parse_args(argv)
    model, tokenizer = load_target(args.target, "bf16")
    settings = {k: v for k, v in published_sampling(args.target).items() if k in ("temperature", "top_k", "top_p")}
    processors = row_processing.with_sparse_warpers(warpers(settings))
    prompt = load_prompts(["../shared/data/eval/spec_bench_dev.jsonl"], limit_per_category=1)[0]
    ids = encode_prompt(tokenizer, prompt.text, chat=tokenizer.chat_template is not None)
    ids = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=64)
    logits = model(ids).logits[0, -64:].float()  # [64, V]: real verify rows
    unproven = []
    cut = row_processing.SparseTopP.cut

    def counted(self, row, kept):
        result = cut(self, row, kept)
        unproven.append(result is None)
        return result

    context = ids[:, :-64]
    print(f"{args.target}: vocabulary {logits.shape[-1]}, published warpers {settings} -> "
          f"{[type(p).__name__ for p in processors]}; threads {torch.get_num_threads()}")
    row_processing.SparseTopP.cut = counted
    for i in range(64):
        processors(context, logits[i : i + 1].clone())
    row_processing.SparseTopP.cut = cut
    print(f"rows whose top-p cut needs transformers' sort: {sum(unproven)} of {len(unproven)}")
    per_row = benchmark.Timer("for i in range(64): processors(context, logits[i : i + 1].clone())",
                              globals=dict(processors=processors, context=context, logits=logits)
                              ).blocked_autorange(min_run_time=2.0).median / 64
    print(f"warpers: {1000 * per_row:.2f} ms per verified row (mean over the 64 rows)")


if __name__ == "__main__":
    main()
