"""Where the time of a speculative-decoding round goes, inside a real `generate()` call.

    python benchmarks/round_profile.py --target qwen2.5-coder-0.5b-instruct --drafter-row-cap 16 \
        --json benchmarks/results/round_profile_05b.json

Wraps the target's forward, the drafter's steps (shortlist head included) and the lookups (prompt lookup, suffix
cache) with wall-clock timers during greedy assisted generation (bf16, the CPU verification kernel on), and plain
generation on the same prompts, interleaved. "other" is the rest of the generate() loop: transformers' candidate verification, cache
cropping, stopping criteria, our candidate generator's bookkeeping. It answers: how far is the measured
decode speed from what tau and the forward costs alone would give?
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import defaultdict
from contextlib import contextmanager

import torch

from hf_dynaspec.bench.prompts import encode_prompt, load_prompts
from hf_dynaspec.bench.runner import load_assistant, load_target
from hf_dynaspec.drafting.chain import ChainDraftSession
from hf_dynaspec.drafting.lookup import CopyProposer, PromptLookup, SuffixCacheProposer
from hf_dynaspec.kernels.verify_rows import patch as cpu_verify

PROMPT_FILES = "../shared/data/eval/spec_bench_dev.jsonl,../shared/data/eval/humaneval_dev.jsonl"


class Timers:
    def __init__(self):
        self.seconds = defaultdict(float)
        self._depth = 0

    @contextmanager
    def measure(self, name: str):
        # Only the outermost timed call counts, so nested wrapped functions are not counted twice.
        self._depth += 1
        start = time.perf_counter()
        try:
            yield
        finally:
            self._depth -= 1
            if self._depth == 0:
                self.seconds[name] += time.perf_counter() - start

    def wrap(self, owner, attribute: str, name: str):
        original = getattr(owner, attribute)

        def timed(*args, **kwargs):
            with self.measure(name):
                return original(*args, **kwargs)

        setattr(owner, attribute, timed)


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", default="qwen2.5-coder-0.5b-instruct")
    parser.add_argument("--assistant", default=None, help="default: the shipped assistant of --target")
    parser.add_argument("--prompts", default=PROMPT_FILES)
    parser.add_argument("--limit-per-category", type=int, default=1)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--drafter-row-cap", type=int, default=None,
                        help="also run the assistant with its drafter's kernel clusters capped at this many rows "
                             "(longer inputs, i.e. the prompt pass, take PyTorch's own bf16 product), interleaved")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)

    model, tokenizer = load_target(args.target, "bf16")
    cpu_verify.enable(model, max_rows=cpu_verify.ANY_ROWS, method="auto")
    assistant, where = load_assistant(args.assistant, model, args.target)
    prompts = load_prompts(args.prompts.split(","), limit_per_category=args.limit_per_category)

    timers = Timers()
    timers.wrap(ChainDraftSession, "consume_verified", "drafter: verified positions")
    timers.wrap(ChainDraftSession, "draft", "drafter: draft steps")
    for owner in (PromptLookup, SuffixCacheProposer):  # the copies' matching (each round) and their drafts
        timers.wrap(owner, "offer", "lookups")
    timers.wrap(CopyProposer, "draft", "lookups")
    forward = model.forward
    target_seconds = defaultdict(list)  # new tokens per forward -> seconds

    def timed_forward(*f_args, **f_kwargs):
        ids = f_kwargs.get("input_ids", f_args[0] if f_args else None)
        start = time.perf_counter()
        with timers.measure("target forward"):
            out = forward(*f_args, **f_kwargs)
        target_seconds[int(ids.shape[1])].append(time.perf_counter() - start)
        return out

    model.forward = timed_forward

    modes = {"plain": None, "assisted": cpu_verify.ANY_ROWS}  # mode -> the drafter's kernel row cap
    if args.drafter_row_cap is not None:
        modes[f"assisted, drafter rows <= {args.drafter_row_cap}"] = args.drafter_row_cap
    rows = []
    for prompt in prompts:
        ids = encode_prompt(tokenizer, prompt.text, chat=True)
        for mode, row_cap in modes.items():  # interleaved per prompt
            kwargs = {}
            if row_cap is not None:
                cpu_verify.enable(assistant.drafter, method="kernel", min_rows=1, max_rows=row_cap)
                kwargs = {"assistant_model": assistant}
            model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=4, **kwargs)
            timers.seconds.clear(), target_seconds.clear()
            start = time.perf_counter()
            out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                 max_new_tokens=args.max_new_tokens, **kwargs)
            total = time.perf_counter() - start
            prefill = sum(target_seconds[ids.shape[1]]) if ids.shape[1] in target_seconds else 0.0
            new_tokens = out.shape[1] - ids.shape[1]
            parts = {name: round(s, 4) for name, s in timers.seconds.items()}
            parts["target forward (decode)"] = round(timers.seconds["target forward"] - prefill, 4)
            parts.pop("target forward")
            parts["prefill"] = round(prefill, 4)
            parts["other"] = round(total - sum(timers.seconds.values()), 4)
            passes = sum(len(v) for k, v in target_seconds.items() if k != ids.shape[1])
            rows.append({
                "category": prompt.category, "mode": mode, "prompt_tokens": int(ids.shape[1]),
                "new_tokens": int(new_tokens), "seconds": round(total, 4), "decode_passes": passes,
                "parts": parts,
                "ms_per_forward_by_rows": {k: round(1000 * statistics.median(v), 1)
                                           for k, v in sorted(target_seconds.items()) if k != ids.shape[1]},
            })
            print(json.dumps(rows[-1]), flush=True)

    summary = {}
    for mode in modes:
        mine = [r for r in rows if r["mode"] == mode]
        decode = sum(r["seconds"] - r["parts"]["prefill"] for r in mine)
        tokens = sum(r["new_tokens"] - 1 for r in mine)  # the prefill commits the first token
        passes = sum(r["decode_passes"] for r in mine)
        names = sorted({n for r in mine for n in r["parts"]} - {"prefill"})
        summary[mode] = {
            "decode_ms_per_token": round(1000 * decode / tokens, 1),
            "tau": round(tokens / passes, 3) if passes else None,
            "ms_per_round": {n: round(1000 * sum(r["parts"].get(n, 0.0) for r in mine) / passes, 1) for n in names},
        }
    for mode in list(modes)[1:]:
        summary[mode]["decode_speedup"] = round(summary["plain"]["decode_ms_per_token"]
                                                / summary[mode]["decode_ms_per_token"], 3)
    report = {"target": args.target, "assistant": where, "threads": torch.get_num_threads(),
              "max_new_tokens": args.max_new_tokens, "n_prompts": len(prompts), "summary": summary, "rows": rows}
    print(json.dumps(summary, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
