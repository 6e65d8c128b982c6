"""Plain greedy generate() on the fast CPU kernels: eager steps (`fast_cpu(model, compile=False)`, what
`vanilla-fast` ran before #91) against compiled steps (`fast_cpu(model)`), interleaved in one process over rounds,
and, for reference, plain generate() on PyTorch's kernels. The eager mode is the old code path: the rows kernel
is called directly outside a compile, as before.

    python benchmarks/compiled_plain.py --target qwen2.5-coder-0.5b-instruct --rounds 3 --max-new-tokens 64

Prints tok/s per mode (new tokens over wall time, prefill included, the bench's `tok/s`) and the prompts whose
compiled output differs from the eager one (bf16: differently fused sums can flip near-ties).
"""

from __future__ import annotations

import argparse
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import hf_dynaspec
from hf_dynaspec import zoo
from hf_dynaspec.bench.prompts import encode_prompts, load_prompts

PROMPTS = "../shared/data/eval/spec_bench_dev.jsonl,../shared/data/eval/humaneval_dev.jsonl"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="qwen2.5-coder-0.5b-instruct")
    parser.add_argument("--prompts", default=PROMPTS)
    parser.add_argument("--limit-per-category", type=int, default=1)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    path = zoo.resolve_model_path(args.target)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).eval()
    tokenizer = AutoTokenizer.from_pretrained(path)
    prompts = encode_prompts(tokenizer, load_prompts(args.prompts.split(","), args.limit_per_category))
    modes = {"plain": None, "eager": False, "compiled": True}

    def run(mode, ids, new):
        context = hf_dynaspec.fast_cpu(model, compile=modes[mode]) if modes[mode] is not None else None
        started = time.perf_counter()
        try:
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, do_sample=False)
        finally:
            if context is not None:
                context.undo()
        return out[0, ids.shape[1]:], time.perf_counter() - started

    started = time.perf_counter()
    for length in (8, 16):  # the compile at a first capacity, and the one with the capacity symbolic
        for mode in modes:
            run(mode, prompts[0].input_ids[:, :length], 2)
    print(f"warm-up with the compiles: {time.perf_counter() - started:.1f} s", flush=True)
    seconds, tokens, outputs = {m: 0.0 for m in modes}, {m: 0 for m in modes}, {}
    for round_index in range(args.rounds):
        for index, prompt in enumerate(prompts):
            order = list(modes)[index % 3:] + list(modes)[: index % 3]  # each mode first as often
            for mode in order:
                out, elapsed = run(mode, prompt.input_ids, args.max_new_tokens)
                seconds[mode] += elapsed
                tokens[mode] += len(out)
                outputs[(prompt.prompt_id, mode)] = out.tolist()
        print(f"round {round_index + 1}: " + ", ".join(f"{m} {tokens[m] / seconds[m]:.2f} tok/s" for m in modes),
              flush=True)
    rates = {m: tokens[m] / seconds[m] for m in modes}
    print(f"{args.target} bf16, {len(prompts)} prompts x {args.max_new_tokens} tokens x {args.rounds} rounds, "
          f"{torch.get_num_threads()} threads")
    for mode, rate in rates.items():
        print(f"  {mode:9s} {rate:6.2f} tok/s  ({rate / rates['eager']:.3f}x eager vanilla-fast)")
    differ = [p.prompt_id for p in prompts if outputs[(p.prompt_id, "compiled")] != outputs[(p.prompt_id, "eager")]]
    print(f"  compiled output differs from eager on {len(differ)} of {len(prompts)} prompts: {differ}")


if __name__ == "__main__":
    main()
