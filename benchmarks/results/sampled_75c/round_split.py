"""#75: where a round's time goes, greedy against sampled, on the assistant_model= route (the shipped assistant,
its defaults, the checkpoint's sampling settings; learnt state forgotten before each mode; each mode twice).

    python benchmarks/results/sampled_75c/round_split.py qwen2.5-coder-0.5b-instruct 10

The run quoted in docs/results.md (AVX-512 BF16 + AMX host, 2 cores, nothing else running): round_split.txt.
Per target forward (= round): the forward itself, the candidate generator (drafting), the target's processors
(transformers' LogitsProcessorList, per verified position), the block rule, and the rest of transformers' loop.
"""

from __future__ import annotations

import collections
import functools
import json
import sys
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.generation import logits_process

from hf_dynaspec.drafting.runtime import forget_learnt_state
from hf_dynaspec.generation import block_verify, candidate_generator
from hf_dynaspec.modeling.assistant import DynaSpecAssistant
from hf_dynaspec.zoo import resolve_model_path

ROOT = Path(__file__).resolve().parents[3]
SAMPLING = dict(do_sample=True, temperature=0.7, top_p=0.8, top_k=20, repetition_penalty=1.1)
SPENT: collections.Counter = collections.Counter()


def timed(key, function):
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            SPENT[key] += time.perf_counter() - start
    return wrapper


def prompts(tokenizer, count: int) -> list[torch.Tensor]:
    rows = [json.loads(line) for line in open(ROOT.parent / "shared/data/eval/spec_bench_dev.jsonl")]
    seen, chosen = collections.Counter(), []
    for row in rows:
        if seen[row["category"]] < 2:
            seen[row["category"]] += 1
            chosen.append(row)
    encoded = [tokenizer.apply_chat_template([{"role": "user", "content": row["turns"][0]}],
                                             add_generation_prompt=True, return_tensors="pt") for row in chosen[:count]]
    return [ids if torch.is_tensor(ids) else ids["input_ids"] for ids in encoded]


def main() -> None:
    name, count = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 10
    path = resolve_model_path(name)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).eval()
    assistant = DynaSpecAssistant.from_pretrained(str(ROOT / "assistants" / name), target=model)
    inputs = prompts(AutoTokenizer.from_pretrained(path), count)
    generator = candidate_generator.EagleCandidateGenerator
    generator.get_candidates = timed("draft", generator.get_candidates)
    generator.update_candidate_strategy = timed("learn", generator.update_candidate_strategy)
    logits_process.LogitsProcessorList.__call__ = timed("processors", logits_process.LogitsProcessorList.__call__)
    block_verify.block_verify = timed("block_verify", block_verify.block_verify)
    forward = [0.0, 0]
    model.register_forward_pre_hook(lambda *_: forward.append(time.perf_counter()))

    def after(*_):
        forward[0] += time.perf_counter() - forward.pop()
        forward[1] += 1

    model.register_forward_hook(after)
    for mode in ("greedy", "sample", "greedy", "sample"):
        decoding = SAMPLING if mode == "sample" else {"do_sample": False}
        forget_learnt_state(assistant)
        SPENT.clear()
        forward[:] = [0.0, 0]
        tokens, start = 0, time.perf_counter()
        for i, ids in enumerate(inputs):
            torch.manual_seed(i)
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=64, assistant_model=assistant,
                                 **decoding)
            tokens += out.shape[1] - ids.shape[1]
        total, rounds = time.perf_counter() - start, forward[1]
        parts = " ".join(f"{key} {1000 * value / rounds:.1f}" for key, value in SPENT.items())
        print(f"{mode}: tokens {tokens} forwards {rounds} tau {tokens / rounds:.2f} tok/s {tokens / total:.2f} | "
              f"per forward ms: total {1000 * total / rounds:.1f} target {1000 * forward[0] / rounds:.1f} {parts} "
              f"rest {1000 * (total - forward[0] - sum(SPENT.values())) / rounds:.1f}")


if __name__ == "__main__":
    main()
