"""Choose the default draft length K from measured costs on this machine.

    python benchmarks/draft_length.py --target qwen2.5-coder-0.5b-instruct --dtype bf16 \
        --json benchmarks/results/draft_length_05b_bf16.json

Measures, interleaved in one process: the target's 1-token step t1, its verification step over K+1 tokens
t_verify(K+1), and the drafter's cost per drafted token t_draft (full-vocabulary head). With a per-token
acceptance rate a, a chain of K drafts commits tau(K) = (1 - a^(K+1)) / (1 - a) tokens per pass, so the
expected speedup over plain decoding is tau(K) * t1 / (K * t_draft + t_verify(K+1)). The default K is the
one that maximises it at a = 0.7 (typical of trained EAGLE drafters; see the JSON for 0.5-0.9).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from transformers import DynamicCache

from hf_dynaspec.drafting.runtime import runtime_head
from hf_dynaspec import DynaSpecAssistant
from hf_dynaspec.drafting.chain import ChainDraftSession
from hf_dynaspec.bench.runner import load_target


@torch.no_grad()
def verify_ms(model, prefix, k):
    cache = DynamicCache(config=model.config)
    model(input_ids=prefix, past_key_values=cache, use_cache=True, logits_to_keep=1)
    new = torch.randint(0, 1000, (1, k))
    start = time.perf_counter()
    model(input_ids=new, past_key_values=cache, use_cache=True, logits_to_keep=k)
    return (time.perf_counter() - start) * 1000


@torch.no_grad()
def draft_ms_per_token(assistant, prefix, k):
    session = ChainDraftSession(assistant.drafter, assistant.config.vocab_size, do_sample=False,
                                head=runtime_head(assistant, assistant.generation_config))
    hidden = torch.randn(1, prefix.shape[1] - 1, assistant.config.target_hidden_size, dtype=assistant.dtype)
    session.propose(prefix, hidden, 1)  # drafter prefill, not timed
    extended = torch.cat([prefix, prefix[:, -1:]], dim=1)
    start = time.perf_counter()
    session.propose(extended, hidden[:, :1], k)
    return (time.perf_counter() - start) * 1000 / k


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", default="qwen2.5-coder-0.5b-instruct")
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    parser.add_argument("--prefix", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--max-k", type=int, default=6)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    model, _ = load_target(args.target, args.dtype)
    assistant = DynaSpecAssistant.from_target(model)
    prefix = torch.randint(0, 1000, (1, args.prefix))
    samples = {"t1": [], "t_draft": [], **{f"verify_{k + 1}": [] for k in range(1, args.max_k + 1)}}
    for _ in range(args.repeats):  # interleave every measurement in each repeat
        samples["t1"].append(verify_ms(model, prefix, 1))
        samples["t_draft"].append(draft_ms_per_token(assistant, prefix, 4))
        for k in range(1, args.max_k + 1):
            samples[f"verify_{k + 1}"].append(verify_ms(model, prefix, k + 1))
    median = {key: statistics.median(values) for key, values in samples.items()}
    expected = {}
    for a in (0.5, 0.6, 0.7, 0.8, 0.9):
        expected[str(a)] = {}
        for k in range(1, args.max_k + 1):
            tau = (1 - a ** (k + 1)) / (1 - a)
            cost = k * median["t_draft"] + median[f"verify_{k + 1}"]
            expected[str(a)][k] = tau * median["t1"] / cost
    best_k = max(expected["0.7"], key=expected["0.7"].get)
    out = {"target": args.target, "dtype": args.dtype, "prefix": args.prefix, "repeats": args.repeats,
           "median_ms": median, "expected_speedup": expected, "best_k_at_0.7": best_k}
    print(json.dumps(out, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
