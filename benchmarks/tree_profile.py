"""Where a tree-decoding pass spends its time, against plain decoding on the same prompts (decode only).

    python benchmarks/tree_profile.py --shapes 2,2,3 3,3,6 4,4,8 \
        --json benchmarks/results/tree_profile_05b_v7.json

The target with the CPU verification kernel (bf16), the shipped assistant (or `--assistant`), the dev split's
first `--limit-per-category` prompts of each Spec-Bench category. Per prompt, plain greedy decoding, the
assistant's chain (as configured: K, prompt lookup) and every tree shape run one after the other (interleaved,
so machine noise hits them alike). Wall-clock timers wrap the target's forward (prefill kept apart),
`draft_tree` and its parts (the drafter's pass over newly verified positions, its frontier steps, the
shortlisted head), the tree walk and the cache compaction. The implied decode speedup is
plain ms per token / (ms per pass / tokens per pass).

transformers' assisted decoding has no separate prefill: the chain's first forward reads the prompt and the first
drafts together. It is timed as the prefill, and the tokens it accepts count as decode tokens, which favours the
chain's row by about one token per prompt (1-2% at 64 tokens).

(Before 2026-11-24 this script printed one line per shape for one prompt; that output is
benchmarks/results/tree_profile_05b.txt, made at commit ef55c62.)
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from pathlib import Path

from hf_dynaspec.bench.prompts import encode_prompts, load_prompts
from hf_dynaspec.bench.runner import load_assistant, load_target
from hf_dynaspec.drafting import tree as drafting
from hf_dynaspec.generation import batched_loop as tree_loop
from hf_dynaspec.generation import speculative_generate
from hf_dynaspec.kernels.verify_rows import patch as cpu_verify
from recipes.data_paths import shared_data_dir

PREFILL = "target: prefill"


class Timers:
    """Seconds and call counts per name; `active` names the run they are charged to."""

    def __init__(self):
        self.seconds = defaultdict(lambda: defaultdict(float))
        self.calls = defaultdict(lambda: defaultdict(int))
        self.active = "unassigned"

    def wrap(self, owner, attribute: str, name: str):
        original = getattr(owner, attribute)

        def timed(*args, **kwargs):
            start = time.perf_counter()
            result = original(*args, **kwargs)
            self.seconds[self.active][name] += time.perf_counter() - start
            self.calls[self.active][name] += 1
            return result

        setattr(owner, attribute, timed)

    def wrap_target(self, model):
        """The target's forward, split into the prefill (the first call of a generate()) and the rest."""
        original = model.forward

        def timed(*args, **kwargs):
            cache = kwargs.get("past_key_values")
            first = cache is None or cache.get_seq_length() == 0
            start = time.perf_counter()
            result = original(*args, **kwargs)
            name = PREFILL if first else "target: decode"
            self.seconds[self.active][name] += time.perf_counter() - start
            self.calls[self.active][name] += 1
            return result

        model.forward = timed


def print_table(report: dict) -> None:
    """The report as a markdown table; "-" where a run has no such part (plain decoding, the chain's tree parts)."""

    def ms(parts: dict, name: str) -> str:
        return f"{parts[name]:.1f}" if name in parts else "-"

    print(f"{report['target']}, {report['n_prompts']} prompts, {report['max_new_tokens']} new tokens, decode only")
    print("| run | tokens / pass | ms / pass | ms / token | decode speedup | target forward | drafter | head |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for run, row in report["runs"].items():
        parts = row["ms_per_pass"]
        print(f"| {run} | {row['tokens_per_pass']:.2f} | {row['decode_ms_per_pass']:.1f} | "
              f"{row['decode_ms_per_token']:.1f} | {row['decode_speedup']:.2f} | {ms(parts, 'target: decode')} | "
              f"{ms(parts, 'drafter: draft_tree (all)')} | {ms(parts, 'drafter: shortlisted head')} |")


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", default="qwen2.5-coder-0.5b-instruct")
    parser.add_argument("--assistant", default=None, help="default: the shipped assistant of --target")
    parser.add_argument("--shapes", nargs="+", default=["2,2,3", "3,3,6", "4,4,8"], help="TOPK,DEPTH,TOTAL")
    parser.add_argument("--limit-per-category", type=int, default=1)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)

    model, tokenizer = load_target(args.target, "bf16")
    cpu_verify.enable(model, max_rows=cpu_verify.ANY_ROWS, method="auto")
    assistant, where = load_assistant(args.assistant, model, args.target)
    prompts = load_prompts([str(shared_data_dir() / "eval" / "spec_bench_dev.jsonl")], args.limit_per_category)
    encoded = encode_prompts(tokenizer, prompts)

    timers = Timers()
    session = drafting.TreeDraftSession
    timers.wrap(session, "draft_tree", "drafter: draft_tree (all)")
    timers.wrap(session, "consume_verified", "drafter: verified positions")
    timers.wrap(session, "_log_probs", "drafter: shortlisted head")
    timers.wrap(assistant.drafter, "step", "drafter: layer steps (all)")
    timers.wrap(tree_loop, "_accepted_paths", "tree walk")
    timers.wrap(tree_loop, "_compact", "cache compaction")
    timers.wrap_target(model)

    shapes = [tuple(int(v) for v in shape.split(",")) for shape in args.shapes]
    runs = ["plain", "chain"] + [f"tree:{top_k},{depth},{total}" for top_k, depth, total in shapes]
    tokens = defaultdict(int)  # decode tokens (the prefill's token excluded)
    wall = defaultdict(float)
    for prompt in encoded:
        for run, shape in zip(runs, [None, None] + shapes):
            timers.active = run
            kwargs = {"max_new_tokens": args.max_new_tokens, "do_sample": False}
            if run == "chain":
                kwargs["assistant_model"] = assistant
            elif shape is not None:
                kwargs.update(custom_generate=speculative_generate, trees=True, drafter=assistant, tree_top_k=shape[0],
                              tree_depth=shape[1], tree_total_tokens=shape[2])
            start = time.perf_counter()
            out = model.generate(input_ids=prompt.input_ids, **kwargs)
            wall[run] += time.perf_counter() - start
            tokens[run] += out.shape[1] - prompt.input_ids.shape[1] - 1

    report = {"target": args.target, "assistant": str(where), "n_prompts": len(encoded),
              "max_new_tokens": args.max_new_tokens, "runs": {}}
    plain_ms_per_token = None
    for run in runs:
        passes = timers.calls[run]["target: decode"]
        decode_s = wall[run] - timers.seconds[run][PREFILL]
        ms_per_pass = 1000 * decode_s / passes
        tokens_per_pass = tokens[run] / passes
        ms_per_token = ms_per_pass / tokens_per_pass
        if plain_ms_per_token is None:
            plain_ms_per_token = ms_per_token
        report["runs"][run] = {
            "decode_tokens": tokens[run], "decode_passes": passes, "tokens_per_pass": tokens_per_pass,
            "decode_ms_per_pass": ms_per_pass, "decode_ms_per_token": ms_per_token,
            "decode_speedup": plain_ms_per_token / ms_per_token,
            "ms_per_pass": {name: 1000 * seconds / passes for name, seconds in timers.seconds[run].items()
                            if name != PREFILL},
        }
    print_table(report)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
