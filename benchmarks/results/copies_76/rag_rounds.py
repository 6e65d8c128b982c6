"""#76 diagnosis, 2026-11-29: the rounds the 1.5B's default (`auto`, prompt lookup 5, suffix cache 16) plans on the
first RAG dev prompt, greedy, bf16, 128 new tokens: each round's source, drafted tokens, probe flag and accepted
tokens, printed per round and summed per (source, probe). AVX-512 BF16 + AMX host, 2 cores, nothing else running.

    python benchmarks/results/copies_76/rag_rounds.py > benchmarks/results/copies_76/rag_rounds.txt
"""

from __future__ import annotations

from collections import defaultdict

import torch

from hf_dynaspec import DynaSpecAssistant
from hf_dynaspec.bench.prompts import encode_prompts, load_prompts
from hf_dynaspec.drafting.round import EagleRound
from hf_dynaspec.loading import load_target

torch.set_grad_enabled(False)
target, tokenizer = load_target("qwen2.5-coder-1.5b-instruct", dtype="bf16")
assistant = DynaSpecAssistant.from_pretrained("assistants/qwen2.5-coder-1.5b-instruct", target=target)
prompts = [p for p in load_prompts(["../shared/data/eval/spec_bench_dev.jsonl"]) if p.category == "rag"][:2]
rounds = []
original = EagleRound.learn


def learn(self, committed_ids, num_accepted, accepted_nodes=None):
    if self.num_drafted is not None:
        rounds.append((self.plan.source if self.num_drafted else "none", self.num_drafted, bool(self.plan.probe),
                       num_accepted))
    return original(self, committed_ids, num_accepted, accepted_nodes)


EagleRound.learn = learn
for prompt in encode_prompts(tokenizer, prompts):
    rounds.clear()
    target.generate(prompt.input_ids, attention_mask=torch.ones_like(prompt.input_ids), assistant_model=assistant,
                    max_new_tokens=128, do_sample=False)
    print(f"prompt {prompt.prompt_id}: {prompt.input_ids.shape[1]} prompt tokens, {len(rounds)} rounds")
    print(" ".join(f"{s[:6]}{'*' if p else ''}:{a}/{d}" for s, d, p, a in rounds))
    totals = defaultdict(lambda: [0, 0, 0])
    for source, drafted, probe, accepted in rounds:
        entry = totals[(source, probe)]
        entry[0] += 1
        entry[1] += drafted
        entry[2] += accepted
    for (source, probe), (count, drafted, accepted) in sorted(totals.items()):
        print(f"  {source:15s} probe={probe!s:5s} rounds {count:3d} drafted {drafted:4d} accepted {accepted:4d}")
