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

import torch
from transformers import DynamicCache

from hf_dynaspec import DynaSpecAssistant
from hf_dynaspec.bench.runner import load_target
from hf_dynaspec.bench.timer import interleaved_medians
from hf_dynaspec.drafting.chain import ChainDraftSession
from hf_dynaspec.drafting.runtime import runtime_head


def verify_case(model, prefix, k):
    """Factory: the prefix cached (untimed), then one forward over k new tokens."""
    def factory():
        cache = DynamicCache(config=model.config)
        model(input_ids=prefix, past_key_values=cache, use_cache=True, logits_to_keep=1)
        new = torch.randint(0, 1000, (1, k))
        return lambda: model(input_ids=new, past_key_values=cache, use_cache=True, logits_to_keep=k)
    return factory


def draft_case(assistant, prefix, k):
    """Factory: a session whose drafter prefill is done (untimed), then one propose of k tokens."""
    def factory():
        session = ChainDraftSession(assistant.drafter, assistant.config.vocab_size, do_sample=False,
                                    head=runtime_head(assistant, assistant.generation_config))
        hidden = torch.randn(1, prefix.shape[1] - 1, assistant.config.target_hidden_size, dtype=assistant.dtype)
        session.draft(prefix, hidden, 1)
        extended = torch.cat([prefix, prefix[:, -1:]], dim=1)
        return lambda: session.draft(extended, hidden[:, :1], k)
    return factory


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
    cases = {"t1": verify_case(model, prefix, 1), "t_draft": draft_case(assistant, prefix, 4),
             **{f"verify_{k + 1}": verify_case(model, prefix, k + 1) for k in range(1, args.max_k + 1)}}
    with torch.no_grad():
        median = interleaved_medians(cases, args.repeats)  # hf_dynaspec.bench.timer: interleaved, medians
    median["t_draft"] /= 4  # per drafted token
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
