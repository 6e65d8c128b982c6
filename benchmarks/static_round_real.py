"""The static compiled round against the eager round on a real target, bf16, on this CPU (issue #73's bar: static
>= 1.0x eager), beside plain `generate()` and HF's own compiled plain path (`cache_implementation="static"`).

    python benchmarks/static_round_real.py qwen2.5-coder-0.5b-instruct --json OUT   # from the repository root

One prompt per Spec-Bench category of ../shared/data/eval/spec_bench_dev.jsonl (chat template), `--new` new tokens,
greedy; the shipped assistant as loaded (its own options), `verify_round` eager or static; every method run once
over every prompt first (its compilations: `first_pass_seconds`), then each prompt's methods interleaved, first
calls of the assistant's state (`forget_learnt_state`). Reports tokens per second per method (total new tokens /
total seconds) and whether each method's output equals plain `generate()`'s.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.generation.configuration_utils import CompileConfig

from hf_dynaspec import DynaSpecAssistant, speculative_generate, zoo
from hf_dynaspec.runtime_store import forget_learnt_state

ROOT = Path(__file__).resolve().parents[1]


def prompts(limit: int) -> list[str]:
    seen, texts = set(), []
    for line in open(ROOT.parent / "shared" / "data" / "eval" / "spec_bench_dev.jsonl"):
        row = json.loads(line)
        if row["category"] not in seen:
            seen.add(row["category"])
            texts.append(row["turns"][0])
    return texts[:limit]


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("name")
    parser.add_argument("--new", type=int, default=64)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    path = zoo.cached_path(args.name)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).eval()
    tokenizer = AutoTokenizer.from_pretrained(path)
    assistant = DynaSpecAssistant.from_pretrained(ROOT / "assistants" / args.name, target=model)
    compiled = CompileConfig(fullgraph=False, dynamic=False)
    compiled._compile_all_devices = True  # HF compiles only on accelerators unless told
    methods = {
        "plain": dict(),
        "plain compiled (HF static cache)": dict(cache_implementation="static", compile_config=compiled),
        "eager round": dict(custom_generate=speculative_generate, drafter=assistant),
        "static round": dict(custom_generate=speculative_generate, drafter=assistant),
    }
    encoded = [tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                             return_tensors="pt", return_dict=True) for text in prompts(args.prompts)]

    def run(name: str, inputs) -> tuple[float, torch.Tensor]:
        assistant.generation_config.verify_round = "static" if name == "static round" else "eager"
        forget_learnt_state(assistant)
        start = time.perf_counter()
        with torch.no_grad():
            out = model.generate(**inputs, max_new_tokens=args.new, do_sample=False, **methods[name])
        return time.perf_counter() - start, out

    first_pass = dict.fromkeys(methods, 0.0)
    for name in methods:  # warm-up: every prompt once, untimed below (compiles each width bucket, HF's graphs)
        for inputs in encoded:
            first_pass[name] += run(name, inputs)[0]
    seconds = dict.fromkeys(methods, 0.0)
    tokens, same = 0, dict.fromkeys(methods, True)
    for i, inputs in enumerate(encoded):
        order = list(methods)[i % len(methods):] + list(methods)[: i % len(methods)]
        outs = {}
        for name in order:
            spent, outs[name] = run(name, inputs)
            seconds[name] += spent
        tokens += outs["plain"].shape[1] - inputs["input_ids"].shape[1]
        for name in methods:
            same[name] &= bool(torch.equal(outs[name], outs["plain"]))
    result = {"target": args.name, "new_tokens": tokens, "prompts": len(encoded),
              "tokens_per_second": {name: tokens / s for name, s in seconds.items()}, "identical_to_plain": same,
              "first_pass_seconds": first_pass}
    result["static_over_eager_round"] = seconds["eager round"] / seconds["static round"]
    return report(result, args.json)


def report(result: dict, json_path: str | None) -> dict:
    """Print the result and keep it at `json_path` (the three static-round scripts' output)."""
    print(json.dumps(result, indent=1))
    if json_path:
        Path(json_path).write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
