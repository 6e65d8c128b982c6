"""Offline agreement vs online acceptance of an assistant on the target's own greedy answers (fp32).

    python benchmarks/drafter_agreement.py --assistant assistants/qwen2.5-coder-0.5b-instruct \
        --json benchmarks/results/drafter_agreement_05b.json

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
from hf_dynaspec.runner import encode_prompt, load_target
from recipes.train_drafter import draft_pass

PROMPTS = [
    "Write a Python function that returns the n-th Fibonacci number iteratively.",
    "Explain in three sentences why the sky is blue.",
    "Natalia sold clips to 48 friends in April and half as many in May. How many clips did she sell in all?",
]


@torch.no_grad()
def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", default="qwen2.5-coder-0.5b-instruct")
    parser.add_argument("--assistant", required=True)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    model, tokenizer = load_target(args.target, "fp32")
    rows = []
    for text in PROMPTS:
        ids = encode_prompt(tokenizer, text, None)
        plain = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=args.max_new_tokens, do_sample=False)
        n = ids.shape[1]
        out = model(plain, output_hidden_states=True)
        assistant = DynaSpecAssistant.from_pretrained(args.assistant, target=model, shortlist="full",
                                                      dtype=torch.float32, num_draft_tokens=1)
        drafter = assistant.drafter
        predicted = draft_pass(drafter, drafter.embed(plain[:, 1:]), out.hidden_states[-1][:, :-1])
        drafted = (predicted @ model.lm_head.weight.T).argmax(-1)[0]  # pair t: the token after x_{t+1}
        wanted = out.logits.argmax(-1)[0, 1:]
        offline = (drafted == wanted)[n - 2 :].float().mean().item()
        assisted = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=args.max_new_tokens,
                                  do_sample=False, assistant_model=assistant)
        rows.append({"prompt": text, "offline_agreement": offline, "online_acceptance": assistant.stats.acceptance_rate,
                     "verify_passes": assistant.stats.verify_passes, "identical": bool(torch.equal(plain, assisted))})
        print(json.dumps(rows[-1]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"target": args.target, "assistant": args.assistant, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
