"""Offline agreement vs online acceptance of an assistant on the target's own greedy answers.

    python benchmarks/drafter_agreement.py --assistant assistants/qwen2.5-coder-0.5b-instruct \
        --json benchmarks/results/drafter_agreement_05b.json
    python benchmarks/drafter_agreement.py --assistant assistants/qwen2.5-coder-0.5b-instruct --dtypes fp32,bf16 \
        --prompts ../shared/data/eval/spec_bench_dev.jsonl,../shared/data/eval/humaneval_dev.jsonl \
        --limit-per-category 1 --max-new-tokens 64 --json benchmarks/results/drafter_agreement_05b_dev.json
    # several versions on the same plain answers (each prompt's plain generation and target pass run once):
    python benchmarks/drafter_agreement.py --assistant v7=outputs/package-15b-v7 --assistant v8=outputs/package-15b-v8 ...

With `--prompts` (bench files) the prompts are the bench's, chat template applied as the bench does; with
several `--dtypes` the target and drafter run in each in turn, to see what bf16 costs the drafter.

Offline: one drafter pass over prompt + plain greedy answer with the target's features (as in training);
agreement of its full-head argmax with the target's next token over the answer (draft position 1).
Online: acceptance rate of `generate(assistant_model=...)` with one draft token per pass, and whether the
output equals plain greedy decoding. A large gap between the two would point at an inference bug.
"""

from __future__ import annotations

import argparse
import json

import torch

from hf_dynaspec import DynaSpecAssistant
from hf_dynaspec.bench.command import parse_assistant_options
from hf_dynaspec.bench.prompts import encode_prompt, encode_prompts, load_prompts
from hf_dynaspec.bench.runner import DTYPES, load_target
from recipes.training_objective import draft_pass

PROMPTS = [
    "Write a Python function that returns the n-th Fibonacci number iteratively.",
    "Explain in three sentences why the sky is blue.",
    "Natalia sold clips to 48 friends in April and half as many in May. How many clips did she sell in all?",
]


@torch.no_grad()
def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", default="qwen2.5-coder-0.5b-instruct")
    parser.add_argument("--assistant", required=True, action="append",
                        help="an assistant directory, or LABEL=DIR given several times to score several on the same answers")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--prompts", default=None, help="comma-separated bench prompt files (default: three built-in prompts)")
    parser.add_argument("--limit-per-category", type=int, default=None)
    parser.add_argument("--dtypes", default="fp32", help="comma-separated: fp32, bf16")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    try:
        args.assistants = parse_assistant_options(args.assistant)
    except ValueError as error:
        parser.error(str(error))
    rows = []
    for dtype in args.dtypes.split(","):
        model, tokenizer = load_target(args.target, dtype)
        if args.prompts:
            bench_prompts = load_prompts(args.prompts.split(","), args.limit_per_category)
            encoded = [(p.prompt_id, p.input_ids) for p in encode_prompts(tokenizer, bench_prompts)]
        else:
            encoded = [(text, encode_prompt(tokenizer, text, None)) for text in PROMPTS]
        rows += measure(model, encoded, args, dtype)
    if args.json:
        with open(args.json, "w") as f:
            assistant = args.assistants.get(None, args.assistants)  # a path, or {label: path}
            json.dump({"target": args.target, "assistant": assistant, "rows": rows}, f, indent=2)
    for dtype in args.dtypes.split(","):
        for label in args.assistants:
            mine = [r for r in rows if r["dtype"] == dtype and r.get("assistant") == label]
            print(f"{dtype}{'' if label is None else ' ' + label}: "
                  f"mean offline agreement {sum(r['offline_agreement'] for r in mine) / len(mine):.3f}, "
                  f"mean online acceptance {sum(r['online_acceptance'] for r in mine) / len(mine):.3f}")


def measure(model, encoded, args, dtype):
    """One row per prompt and assistant; the plain answer and the target's pass over it are shared."""
    rows = []
    for name, ids in encoded:
        plain = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=args.max_new_tokens, do_sample=False)
        n = ids.shape[1]
        out = model(plain, output_hidden_states=True)
        wanted = out.logits.argmax(-1)[0, 1:]
        for label, path in args.assistants.items():
            assistant = DynaSpecAssistant.from_pretrained(path, target=model, shortlist="full", dtype=DTYPES[dtype],
                                                          num_assistant_tokens=1, prompt_lookup_num_tokens=0)
            drafter = assistant.drafter
            predicted = draft_pass(drafter, drafter.embed(plain[:, 1:]), out.hidden_states[-1][:, :-1])
            drafted = (predicted @ model.lm_head.weight.T).argmax(-1)[0]  # pair t: the token after x_{t+1}
            offline = (drafted == wanted)[n - 2 :].float().mean().item()
            assisted = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=args.max_new_tokens,
                                      do_sample=False, assistant_model=assistant)
            row = {"prompt": name, "dtype": dtype} | ({} if label is None else {"assistant": label})
            rows.append(row | {"offline_agreement": offline, "online_acceptance": assistant.stats.acceptance_rate,
                               "verify_passes": assistant.stats.verify_passes,
                               "identical": bool(torch.equal(plain, assisted))})
            print(json.dumps(rows[-1]))
    return rows


if __name__ == "__main__":
    main()
