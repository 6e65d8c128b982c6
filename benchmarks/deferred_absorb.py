"""What deferring the drafter's pass saves in rounds drafted by lookup (or not at all).

    python benchmarks/deferred_absorb.py --target qwen2.5-coder-0.5b-instruct --dtype bf16 --repeats 5

A round whose draft comes from prompt lookup or the suffix cache (or that drafts nothing) does not need the
drafter; since #49 its pass over the newly verified positions waits for the next drafter round, which absorbs
every waiting position in one pass (ChainDraftSession.defer_verified). "immediate" restores the old behaviour
(the pass in every round) by patching `defer_verified` to consume at once. Both run the shipped assistant as
loaded (draft_plan="auto", prompt lookup on) but with the suffix cache off (it would learn each repeat's output),
on prompts that make lookup win often (the model is asked to repeat or lightly edit code it is given),
interleaved in one process; greedy outputs are checked identical. Appends to the results table (hf_dynaspec.bench.results_table).
"""

from __future__ import annotations

import argparse

import torch

from hf_dynaspec import DynaSpecAssistant
from hf_dynaspec.bench.results_table import append_records, make_record
from hf_dynaspec.bench.runner import load_target, shipped_assistant_dir
from hf_dynaspec.bench.timer import interleaved_samples
from hf_dynaspec.drafting.chain import ChainDraftSession
from hf_dynaspec.loading import encode_prompt

CODE = '''def moving_average(values, window):
    if window <= 0:
        raise ValueError("window must be positive")
    total, out = 0.0, []
    for i, value in enumerate(values):
        total += value
        if i >= window:
            total -= values[i - window]
        if i >= window - 1:
            out.append(total / window)
    return out
'''
PROMPTS = [
    f"Rename the function to rolling_mean and change nothing else. Reply with the code only.\n\n{CODE}",
    f"Add a docstring to this function and reply with the whole function.\n\n{CODE}",
]
IMMEDIATE = lambda self, input_ids, hidden: self.consume_verified(input_ids, hidden, choose=False)  # noqa: E731


def case(model, assistant, ids, max_new_tokens, immediate: bool, outputs: dict, name: str):
    def run():
        original = ChainDraftSession.defer_verified
        if immediate:
            ChainDraftSession.defer_verified = IMMEDIATE
        try:
            out = model.generate(ids, attention_mask=torch.ones_like(ids), assistant_model=assistant,
                                 do_sample=False, max_new_tokens=max_new_tokens)
        finally:
            ChainDraftSession.defer_verified = original
        outputs[name] = (out, dict(assistant.stats.passes_by_source))
    return lambda: run


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", default="qwen2.5-coder-0.5b-instruct")
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--results", default="benchmarks/results/results.jsonl")
    args = parser.parse_args(argv)
    model, tokenizer = load_target(args.target, args.dtype)
    # The suffix cache off: it would learn each output and make every later repeat a lookup round.
    assistant = DynaSpecAssistant.from_pretrained(shipped_assistant_dir(args.target), target=model,
                                                  suffix_cache_num_tokens=0)
    records = []
    for index, text in enumerate(PROMPTS):
        ids = encode_prompt(tokenizer, text, chat=None)
        outputs = {}
        cases = {name: case(model, assistant, ids, args.max_new_tokens, name == "immediate", outputs, name)
                 for name in ("deferred", "immediate")}
        with torch.no_grad():
            samples = interleaved_samples(cases, args.repeats)
        assert torch.equal(outputs["deferred"][0], outputs["immediate"][0]), "outputs differ"
        new_tokens = outputs["deferred"][0].shape[1] - ids.shape[1]
        medians = {name: sorted(times)[len(times) // 2] for name, times in samples.items()}
        for name, ms in medians.items():
            tokens_per_s = new_tokens / (ms / 1000)
            print(f"prompt {index} {name}: {ms:.0f} ms median ({tokens_per_s:.2f} tok/s), rounds by source "
                  f"{outputs[name][1]}")
            records.append(make_record("deferred_absorb", name, {
                "prompt": index, "median_ms": ms, "new_tokens": new_tokens, "tokens_per_s": tokens_per_s,
                "repeats": args.repeats, "dtype": args.dtype, "passes_by_source": outputs[name][1],
                "speedup_over_immediate": medians["immediate"] / ms}, target=args.target))
        print(f"prompt {index}: deferred / immediate speed = {medians['immediate'] / medians['deferred']:.3f}x")
    append_records(args.results, records)


if __name__ == "__main__":
    main()
