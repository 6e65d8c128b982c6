"""The whole draft step (embed + fc + decoder layer + router + head) per strategy, and its parts.

    python benchmarks/draft_step.py --target qwen2.5-coder-0.5b-instruct --assistant outputs/qwen05-shortlists-c256 \
        --strategies full,frspec:16384,dynaspec-fixed:16,dynaspec:32 --json benchmarks/results/draft_step_05b_bf16.json

Times `ChainDraftSession.propose` for K drafted tokens on a 200-token context (per drafted token), and
separately the decoder step and each head, interleaved over repeats, medians reported (bf16, batch 1).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from hf_dynaspec import DynaSpecAssistant
from hf_dynaspec.drafting.chain import ChainDraftSession
from hf_dynaspec.drafting.kv_cache import DraftKVCache
from hf_dynaspec.bench.runner import load_target
from hf_dynaspec.drafting.selector import build_head


def timed(fn):
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", default="qwen2.5-coder-0.5b-instruct")
    parser.add_argument("--assistant", required=True)
    parser.add_argument("--strategies", default="full,frspec:16384,dynaspec-fixed:16,dynaspec:32")
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    parser.add_argument("--draft-tokens", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    model, _ = load_target(args.target, args.dtype)
    assistant = DynaSpecAssistant.from_pretrained(args.assistant, target=model)
    config, drafter = assistant.config, assistant.drafter
    heads = {}
    for spec in args.strategies.split(","):
        name, _, arg = spec.partition(":")
        config.shortlist_size = int(arg) if name in ("frspec", "vocabtrim") else None
        config.max_clusters = int(arg) if name == "dynaspec" else config.max_clusters
        config.fixed_clusters = int(arg) if name == "dynaspec-fixed" else config.fixed_clusters
        heads[spec] = build_head(name, model.get_output_embeddings().weight, assistant.shortlists, config)
    context = torch.randint(0, 1000, (1, 200))
    features = torch.randn(1, 199, config.target_hidden_size, dtype=assistant.dtype)
    hidden = torch.randn(1, config.hidden_size, dtype=assistant.dtype)
    embed = drafter.embed(context[:, -1:])
    samples = {spec: {"draft_ms_per_token": [], "head_ms": [], "router_ms": []} for spec in heads}
    samples["decoder_step_ms"] = []
    with torch.no_grad():
        for _ in range(args.repeats):
            cache = DraftKVCache()
            drafter.step(drafter.embed(context[:, 1:]), features, torch.arange(199)[None], cache, None)
            samples["decoder_step_ms"].append(
                timed(lambda: drafter.step(embed, hidden[:, None], torch.tensor([[199]]), cache, None)))
            for spec, head in heads.items():
                session = ChainDraftSession(drafter, config.vocab_size, do_sample=False, head=head)
                session.propose(context, features, 1)  # the drafter's prefill, not timed
                extended = torch.cat([context, context[:, -1:]], dim=1)
                per_token = timed(lambda: session.propose(extended, features[:, :1], args.draft_tokens)) / args.draft_tokens
                samples[spec]["draft_ms_per_token"].append(per_token)
                plan = head.plan(embed[:, -1], hidden, 0)
                samples[spec]["head_ms"].append(timed(lambda: head.scores(hidden, plan).logits.argmax(-1)))
                if head.plan(embed[:, -1], hidden, 0) is not None:
                    samples[spec]["router_ms"].append(timed(lambda: assistant.shortlists.router(embed[:, -1], hidden)))
    median = {"decoder_step_ms": statistics.median(samples.pop("decoder_step_ms"))}
    for spec, values in samples.items():
        median[spec] = {key: statistics.median(v) if v else None for key, v in values.items()}
        print(spec, {k: (round(v, 2) if v is not None else None) for k, v in median[spec].items()})
    print("decoder step", round(median["decoder_step_ms"], 2), "ms")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"target": args.target, "dtype": args.dtype, "assistant": args.assistant,
                       "draft_tokens": args.draft_tokens, "repeats": args.repeats, "median": median}, f, indent=2)


if __name__ == "__main__":
    main()
