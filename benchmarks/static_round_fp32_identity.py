"""Greedy identity of the static compiled round on a real target in fp32 (issue #73's bar), beside the eager round.

    python benchmarks/static_round_fp32_identity.py qwen2.5-coder-0.5b-instruct --json OUT   # repository root

The shipped assistant with `draft_plan="fixed"` (K = 3: the widths stay few, so the compilations do), 3 dev prompts
(one per category, chat template), 48 new tokens each, fp32: each route's output against plain greedy `generate()`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from static_round_real import ROOT, prompts, report  # noqa: E402

from hf_dynaspec import DynaSpecAssistant, speculative_generate, zoo  # noqa: E402


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("name")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    path = zoo.cached_path(args.name)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(path)
    assistant = DynaSpecAssistant.from_pretrained(ROOT / "assistants" / args.name, target=model, draft_plan="fixed",
                                                  num_assistant_tokens=3)
    identical = {"eager": [], "static": []}
    for text in prompts(3):
        inputs = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                               return_tensors="pt", return_dict=True)
        plain = model.generate(**inputs, max_new_tokens=48, do_sample=False)
        for mode in identical:
            assistant.generation_config.verify_round = mode
            out = model.generate(**inputs, max_new_tokens=48, do_sample=False, custom_generate=speculative_generate,
                                 drafter=assistant)
            identical[mode].append(bool(torch.equal(out, plain)))
    result = {"target": args.name, "dtype": "float32", "new_tokens_per_prompt": 48, "identical_to_plain": identical}
    return report(result, args.json)


if __name__ == "__main__":
    main()
