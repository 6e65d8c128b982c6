"""Drafter draft cost with its one-token steps on PyTorch's bf16 matmul (min_rows=2) or the CPU kernel (min_rows=1).

    python benchmarks/drafter_one_row.py --assistant assistants/qwen2.5-coder-0.5b-instruct \
        --json benchmarks/results/drafter_one_row_05b.json

Times `ChainDraftSession.propose` of K tokens after a 200-token context (the shipped assistant's own shortlist
strategy), the two settings interleaved over repeats, medians reported (bf16, batch 1).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from hf_dynaspec.drafting.runtime import runtime_head
from hf_dynaspec import DynaSpecAssistant
from hf_dynaspec.kernels.verify_rows import patch as cpu_verify
from hf_dynaspec.drafting.chain import ChainDraftSession
from hf_dynaspec.bench.runner import load_target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="qwen2.5-coder-0.5b-instruct")
    parser.add_argument("--assistant", required=True)
    parser.add_argument("--draft-tokens", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    model, _ = load_target(args.target, "bf16")
    assistant = DynaSpecAssistant.from_pretrained(args.assistant, target=model)
    config = assistant.config
    context = torch.randint(0, 1000, (1, 200))
    features = torch.randn(1, 199, config.target_hidden_size, dtype=assistant.dtype)
    extended = torch.cat([context, context[:, -1:]], dim=1)
    samples = {1: [], 2: []}
    with torch.no_grad():
        for _ in range(args.repeats):
            for min_rows in (2, 1):
                cpu_verify.enable(assistant.drafter, method="kernel", min_rows=min_rows)
                session = ChainDraftSession(assistant.drafter, config.vocab_size, do_sample=False,
                                            head=runtime_head(assistant, assistant.generation_config))
                session.propose(context, features, 1)  # the drafter's prefill, not timed
                start = time.perf_counter()
                session.propose(extended, features[:, :1], args.draft_tokens)
                samples[min_rows].append((time.perf_counter() - start) * 1000)
    median = {f"min_rows={k}": statistics.median(v) for k, v in samples.items()}
    print({k: round(v, 2) for k, v in median.items()}, f"ms per propose of {args.draft_tokens} tokens")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"assistant": args.assistant, "shortlist": config.shortlist, "draft_tokens": args.draft_tokens,
                       "repeats": args.repeats, "median_ms_per_propose": median}, out, indent=2)


if __name__ == "__main__":
    main()
